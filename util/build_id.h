/*
 * The running program's GNU build ID (the linker's NT_GNU_BUILD_ID note), which changes
 * whenever its code does: what a cache that depends on the build is named by.
 */
#ifndef SPOOLFS_UTIL_BUILD_ID_H
#define SPOOLFS_UTIL_BUILD_ID_H

#include <stddef.h>

/* Its bytes as lowercase hex in out (NUL-terminated); -ENOENT when the program was linked
 * without one, -ENOSPC when out is too small. */
int util_build_id_hex(char *out, size_t out_len);

#endif

/*
 * Sizes given on a command line ("512M", "10G", "4KiB", "1048576"): the one parser that the
 * mount's options (--cache-max-size, --max-manifest-size) and `spoolfs publish`
 * (--pack-under, --pack-max) share, so a size means the same everywhere.
 */
#ifndef SPOOLFS_UTIL_SIZE_H
#define SPOOLFS_UTIL_SIZE_H

#include <stdint.h>

/*
 * Digits, then optionally K, M, G or T (any case, powers of 1024), an optional 'i' after
 * one, and an optional 'B'. 0 with *out set, or -EINVAL (*out untouched) for anything else:
 * a sign, an empty string, trailing text, a value beyond 64 bits.
 */
int util_parse_size(const char *text, uint64_t *out);

#endif

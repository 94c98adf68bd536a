/*
 * The reason a check refuses something, written into a caller's buffer: the one helper
 * behind every `why, why_len` pair (the manifest's loader, the index's builder, trusted
 * paths), so that a NULL or empty buffer is handled the same way everywhere.
 */
#ifndef SPOOLFS_UTIL_SAY_H
#define SPOOLFS_UTIL_SAY_H

#include <stddef.h>

/* Formats the reason into why (when why is not NULL and why_len > 0); returns -EINVAL, so
 * that a check can `return util_say(...)`. */
int util_say(char *why, size_t why_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif

/*
 * The texts of nested manifests lately loaded, by sha256 (nested_cache.c): many directories
 * may name one manifest (a published tree's identical subtrees), and each needs its own
 * load, but not its own fetch. A text is kept only once its digest was checked, so a hit is
 * the bytes the parent named. Bounded (NESTED_CACHE_BYTES in all, NESTED_CACHE_ENTRIES
 * texts; the least recently used go first), and single-flight: while one caller fetches a
 * digest, another that wants it waits for that fetch instead of starting its own.
 *
 * Lock: one mutex of its own, held for lookups and copies only, never across the fetch.
 */
#ifndef SPOOLFS_FETCH_SOURCE_NESTED_CACHE_H
#define SPOOLFS_FETCH_SOURCE_NESTED_CACHE_H

#include <stddef.h>

#define NESTED_CACHE_BYTES (32u << 20)
#define NESTED_CACHE_ENTRIES 16

/*
 * A copy of the text with this sha256 (lower-case hex): 1 with *text (malloc'd,
 * NUL-terminated, the caller's) and *len; or 0, a miss, when the caller is to fetch it and
 * then call nested_cache_put (or nested_cache_abandon) for this digest, once; or -ENOMEM.
 * Waits while another caller fetches the same digest: so a caller given 0 must end in put
 * or abandon on every path, or those waiters wait for ever (their wait is bounded only by
 * the fetcher's, which the download rules bound). A miss when every slot is being fetched
 * claims nothing; its put or abandon then finds another caller's slot of the digest, if
 * any, and fills it with the same checked bytes, or empties it (that caller's put then
 * keeps nothing, and its waiters fetch for themselves).
 */
int nested_cache_get(const char *sha256, char **text, size_t *len);

/* Keeps a copy of text (len bytes, its digest checked) for the digest a miss gave, if it
 * fits, and wakes the callers waiting for it. */
void nested_cache_put(const char *sha256, const char *text, size_t len);

/* The fetch after a miss failed: the next caller fetches the digest itself. */
void nested_cache_abandon(const char *sha256);

#endif

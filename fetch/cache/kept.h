/*
 * Kept namespaces: copies of loaded namespaces (index/copy.h) in the cache directory's
 * "namespaces" directory, one file KEY.db per manifest load (KEY: fetch/source/kept_key.h),
 * for a --keep-cache mount of a manifest loaded before (doc/cache-dir.md). This file owns
 * the files: their names, their checks (by the cache directory's rules: reached through the
 * directory's fd, never through a link, ours alone, 0600), a new one written under a
 * temporary name and renamed into place whole (two mounts of one directory may write the
 * same one at once: either's is right), and how many stay.
 *
 * sqlite opens a file by name: the paths given out are checked to still name the directory
 * held open. A struct cache_dir belongs to one thread (cache_dir.h): so do these calls.
 * 0 or -errno, with a line in err where there is one.
 */
#ifndef SPOOLFS_FETCH_CACHE_KEPT_H
#define SPOOLFS_FETCH_CACHE_KEPT_H

#include <stddef.h>
#include <stdint.h>

#include "fetch/cache/cache_dir.h"

/* How many kept namespaces a cache directory holds at most, the most recently used: a
 * directory that sees a release a day does not grow without bound. */
#define CACHE_KEPT_MAX 4

/*
 * The kept namespace named key (hex), when there is one: its path in *path (malloc'd, the
 * caller's), and its time of last use set to now. -ENOENT when there is none; -EPERM when
 * the name holds something not ours to use (a link, another user's file: err says, and it
 * stays for the operator); -ESTALE (the directory was moved); or -errno.
 */
int cache_kept_find(struct cache_dir *cd, const char *key, char **path, char *err, size_t err_len);

/* Removes the kept namespace named key (a damaged one). 0, or -errno (-ENOENT: none). */
int cache_kept_remove(struct cache_dir *cd, const char *key);

/* A kept namespace being written: an empty file, 0600, under a temporary name. */
struct cache_kept_new {
	int fd;
	char name[128];
	char *path; /* for sqlite to write it by name (index_copy_save) */
};

/* Makes the file of a new kept namespace for key (the directory too, when missing). */
int cache_kept_begin(struct cache_dir *cd, const char *key, struct cache_kept_new *n, char *err,
                     size_t err_len);
/* Makes it durable and renames it to key's name, over any there. Either way n is done with
 * (a failed one removed). */
int cache_kept_commit(struct cache_dir *cd, const char *key, struct cache_kept_new *n);
/* Removes it, unfinished. */
void cache_kept_abort(struct cache_dir *cd, struct cache_kept_new *n);

/*
 * Keeps the CACHE_KEPT_MAX most recently used kept namespaces, fewer when max_bytes (not 0)
 * would be passed, and removes the rest, and temporary files a dead mount left (an hour
 * old). *bytes: what those kept take on disk. A directory that is not there holds none.
 */
int cache_kept_prune(struct cache_dir *cd, uint64_t max_bytes, uint64_t *bytes);

#endif

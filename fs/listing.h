/*
 * Listing directories on first use and nested manifests ahead of a walk (listing.c).
 */
#ifndef SPOOLFS_FS_LISTING_H
#define SPOOLFS_FS_LISTING_H

#include <fuse_lowlevel.h>

struct fs_session;

/*
 * Makes sure directory `dir` is listed (S3 sources list on first use); a no-op for
 * manifests. Concurrent callers for one directory wait for a single listing. 0 or -errno.
 */
int fs_ensure_listed(struct fs_session *s, fuse_ino_t dir);
/* The worker that lists nested manifests ahead of a walk (listing.c): started with the
 * other threads, stopped before the index closes. 0 or -errno. */
int fs_list_ahead_start(struct fs_session *s);
void fs_list_ahead_stop(struct fs_session *s);

#endif

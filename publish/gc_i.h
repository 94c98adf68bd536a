/*
 * What gc.c (the policy: which manifests are kept, what is reachable, what goes) asks of
 * gc_store.c (a local OUT_DIR or an S3 prefix: list, delete). Single-threaded.
 */
#ifndef SPOOLFS_PUBLISH_GC_I_H
#define SPOOLFS_PUBLISH_GC_I_H

#include "publish/publish_i.h"

struct gc_store {
	const char *where; /* OUT_DIR, or "s3://bucket/prefix": for messages */
	int dir_fd;        /* local: OUT_DIR; -1 for S3 */
	struct pub_s3 *s3; /* S3: the open store; NULL for a local OUT_DIR */
};

/* Every key of the store (relative to OUT_DIR or the prefix) with its size and age
 * (LastModified, mtime), sorted; locally only the top, objects/ and objects/xx/. 0 or
 * -errno, said. */
int gc_store_list(struct gc_store *g, struct pub_s3_list *l);
/* Deletes keys (DeleteObjects, 1,000 a request, for S3). 0 or the first -errno, said. */
int gc_store_delete(struct gc_store *g, const char *const *keys, size_t n);
/* S3: aborts the multipart uploads under the prefix begun before `before` (seconds since
 * the epoch); with dry_run prints them only. 0 or -errno, said. */
int gc_store_abort_uploads(struct gc_store *g, int64_t before, bool dry_run);

#endif

/*
 * Lazy directory listing for sources that list on demand (S3). The first lookup or
 * opendir of an unlisted directory lists it (a blocking request in that FUSE thread:
 * metadata, never file data); concurrent callers for the same directory wait for that one
 * listing instead of sending their own. A failed listing leaves the directory unlisted, so
 * the next access tries again.
 *
 * Lock order: s->list_lock, then the index's lock (inside index calls). list_lock is never
 * held across the network request.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fetch/log.h"
#include "fs/fs_i.h"

/* Caller holds list_lock. */
static bool in_progress(struct fs_session *s, uint64_t dir)
{
	for (size_t i = 0; i < s->n_listing; i++)
		if (s->listing[i] == dir)
			return true;
	return false;
}

/* Caller holds list_lock. -ENOMEM. */
static int mark(struct fs_session *s, uint64_t dir)
{
	if (s->n_listing == s->cap_listing) {
		size_t cap = s->cap_listing ? 2 * s->cap_listing : 16;
		uint64_t *v = realloc(s->listing, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		s->listing = v;
		s->cap_listing = cap;
	}
	s->listing[s->n_listing++] = dir;
	return 0;
}

/* Caller holds list_lock. */
static void unmark(struct fs_session *s, uint64_t dir)
{
	for (size_t i = 0; i < s->n_listing; i++) {
		if (s->listing[i] == dir) {
			s->listing[i] = s->listing[--s->n_listing];
			return;
		}
	}
}

int fs_ensure_listed(struct fs_session *s, fuse_ino_t dir)
{
	struct index_node n;
	char path[4096], err[512] = "";
	bool listed = false;
	int rc;

	if (!s->s3)
		return 0;
	rc = index_dir_listed(s->idx, dir, &listed);
	if (rc || listed)
		return rc;
	pthread_mutex_lock(&s->list_lock);
	while (in_progress(s, dir))
		pthread_cond_wait(&s->list_done, &s->list_lock);
	rc = index_dir_listed(s->idx, dir, &listed);
	if (rc == 0 && !listed)
		rc = mark(s, dir);
	pthread_mutex_unlock(&s->list_lock);
	if (rc || listed)
		return rc;

	rc = index_get(s->idx, dir, &n);
	if (rc == 0) {
		fs_node_path(s, &n, path, sizeof(path));
		rc = s3_source_list(s->s3, path, s->idx, dir, err, sizeof(err));
		if (rc)
			fetch_log(FETCH_LOG_ERROR, "listing /%s failed: %s", path, err);
	}

	pthread_mutex_lock(&s->list_lock);
	unmark(s, dir);
	pthread_cond_broadcast(&s->list_done);
	pthread_mutex_unlock(&s->list_lock);
	/* The caller is a filesystem request: a remote failure reads as an I/O error. */
	return rc == -ENOMEM || rc == -EACCES ? rc : rc ? -EIO : 0;
}

/*
 * Lazy directory listing for sources that list on demand (an S3 bucket, and a manifest's
 * directories that have manifests of their own): the first lookup or opendir of an
 * unlisted directory lists it (a blocking request in that FUSE thread: metadata, never
 * file data). The single-flight that makes concurrent callers for one directory wait for
 * one listing is fetch/source/listing_flight.c; this is what a filesystem request needs of
 * it.
 *
 * Listing ahead: a walk over a published tree (find, ls -R, a build's scan) enters its
 * nested manifests one after another and paid each load in turn, the walk stopped
 * meanwhile. Once a walk is seen (a directory with a manifest of its own is listed on
 * demand after its previous such sibling was), a worker lists the next such sibling while
 * the walk is still inside this one, and the one after only when the walk enters that
 * one: one manifest ahead, never a chain through a tree nobody walks.
 *
 * Lock: none of its own; listed_ahead_dir and list_ahead_stopping are atomics.
 */
#include <errno.h>
#include <stdlib.h>

#include "fs/listing.h"
#include "fetch/source/nested.h"
#include "util/log.h"
#include "fs/session.h"

struct list_ahead_job {
	struct util_worker_job link; /* first: the worker hands this back */
	uint64_t dir;
};

/* listing_flight_list_fn: lists dir from the bucket into the index. */
static int list_dir(void *ctx, uint64_t dir)
{
	struct fs_session *s = ctx;
	struct index_node n;
	char path[4096], err[512] = "";
	int rc;

	rc = index_get(s->idx, dir, &n);
	if (rc == 0) {
		index_node_path(s->idx, &n, path, sizeof(path));
		if (s->listing.manifest_url) {
			/* Each listing counts its own hidden symlinks: listings run at once. */
			struct manifest_load_options rules = s->listing.nested_rules;
			rc = source_nested_list(s->idx, dir, &s->listing.nested_src,
			                        s->listing.manifest_url, &rules, err, sizeof(err));
			if (rc == 0 && rules.hidden_symlinks)
				util_log(UTIL_LOG_INFO,
				         "/%s: %u symlinks lead out of the mount: left out"
				         " (--outside-symlinks=hide)",
				         path, rules.hidden_symlinks);
		} else {
			rc = s3_source_list(s->listing.s3, path, s->idx, dir, err, sizeof(err));
		}
		if (rc)
			util_log(UTIL_LOG_ERROR, "listing /%s failed: %s", path, err);
	}
	/* The caller is a filesystem request: a remote failure reads as an I/O error. */
	return rc == -ENOMEM || rc == -EACCES ? rc : rc ? -EIO : 0;
}

static void list_next_ahead(struct fs_session *s, uint64_t dir);

/* listing_flight_list_fn for a walk's request: lists dir, then maybe the next one ahead. */
static int list_dir_on_demand(void *ctx, uint64_t dir)
{
	struct fs_session *s = ctx;
	int rc = list_dir(ctx, dir);

	if (rc == 0 && s->listing.manifest_url)
		list_next_ahead(s, dir);
	return rc;
}

/* listing_flight_list_fn for the worker: lists dir, and nothing further. */
static int list_dir_ahead(void *ctx, uint64_t dir)
{
	struct fs_session *s = ctx;
	int rc = list_dir(ctx, dir);

	if (rc == 0)
		atomic_fetch_add(&s->counters->nested_listed_ahead, 1);
	return rc;
}

/* The worker: one nested manifest ahead of the walk, unless the session is ending. */
static void list_ahead_run(void *ctx, struct util_worker_job *job)
{
	struct list_ahead_job *j = (struct list_ahead_job *)job;
	struct fs_session *s = ctx;

	if (!atomic_load(&s->listing.ahead_stopping))
		(void)listing_flight_ensure(s->listing.flights, s->idx, j->dir, list_dir_ahead, s);
	free(j);
}

/* After dir (listed, or entered by the walk): lists its next sibling with a manifest of its
 * own on the worker, when a walk came through the sibling before dir. */
static void list_next_ahead(struct fs_session *s, uint64_t dir)
{
	struct list_ahead_job *j;
	bool walk = false;
	uint64_t next = 0;

	if (!s->listing.ahead || atomic_load(&s->listing.ahead_stopping) ||
	    index_next_nested_sibling(s->idx, dir, &next, &walk) != 0 || !walk || !next)
		return;
	j = calloc(1, sizeof(*j));
	if (!j)
		return; /* only speculation is lost */
	j->dir = next;
	atomic_store(&s->listing.ahead_dir, next);
	if (!util_worker_queue(s->listing.ahead, &j->link))
		free(j);
}

int fs_ensure_listed(struct fs_session *s, fuse_ino_t dir)
{
	uint64_t ahead;

	if (!s->listing.flights)
		return 0;
	/* The walk entered the directory listed ahead of it: the next one goes ahead now. */
	ahead = atomic_load(&s->listing.ahead_dir);
	if (ahead && ahead == dir &&
	    atomic_compare_exchange_strong(&s->listing.ahead_dir, &ahead, 0))
		list_next_ahead(s, dir);
	return listing_flight_ensure(s->listing.flights, s->idx, dir, list_dir_on_demand, s);
}

int fs_list_ahead_start(struct fs_session *s)
{
	/* Only a manifest's nested directories: an S3 listing is a request a directory, and a
	 * walk over one is already the walk prefetch's (fs/prefetch.c). */
	if (!s->listing.flights || !s->listing.manifest_url)
		return 0;
	return util_worker_start("spoolfs-nested", list_ahead_run, s, &s->listing.ahead);
}

void fs_list_ahead_stop(struct fs_session *s)
{
	atomic_store(&s->listing.ahead_stopping, true);
	util_worker_stop(s->listing.ahead);
	s->listing.ahead = NULL;
}

/*
 * Lazy directory listing for sources that list on demand (an S3 bucket, and a manifest's
 * directories that have manifests of their own): the first lookup or opendir of an
 * unlisted directory lists it (a blocking request in that FUSE thread: metadata, never
 * file data). The single-flight that makes concurrent callers for one directory wait for
 * one listing is fetch/source/listing_flight.c; this is what a filesystem request needs of
 * it.
 */
#include <errno.h>

#include "fetch/source/nested.h"
#include "util/log.h"
#include "fs/fs_i.h"

/* listing_flight_list_fn: lists dir from the bucket into the index. */
static int list_dir(void *ctx, uint64_t dir)
{
	struct fs_session *s = ctx;
	struct index_node n;
	char path[4096], err[512] = "";
	int rc;

	rc = index_get(s->idx, dir, &n);
	if (rc == 0) {
		fs_node_path(s, &n, path, sizeof(path));
		if (s->manifest_url) {
			/* Each listing counts its own hidden symlinks: listings run at once. */
			struct manifest_load_options rules = s->nested_rules;
			rc = source_nested_list(s->idx, dir, &s->nested_src, s->manifest_url,
			                        &rules, err, sizeof(err));
			if (rc == 0 && rules.hidden_symlinks)
				util_log(UTIL_LOG_INFO,
				         "/%s: %u symlinks lead out of the mount: left out"
				         " (--outside-symlinks=hide)",
				         path, rules.hidden_symlinks);
		} else {
			rc = s3_source_list(s->s3, path, s->idx, dir, err, sizeof(err));
		}
		if (rc)
			util_log(UTIL_LOG_ERROR, "listing /%s failed: %s", path, err);
	}
	/* The caller is a filesystem request: a remote failure reads as an I/O error. */
	return rc == -ENOMEM || rc == -EACCES ? rc : rc ? -EIO : 0;
}

int fs_ensure_listed(struct fs_session *s, fuse_ino_t dir)
{
	if (!s->listings)
		return 0;
	return listing_flight_ensure(s->listings, s->idx, dir, list_dir, s);
}

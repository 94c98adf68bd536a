/*
 * Kept namespaces at mount (kept.h). The copies count in --cache-max-size: the spool files
 * get what they leave, and copies never take more than a quarter of it.
 */
#include "daemon/kept.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "fetch/cache/kept.h"
#include "fs/session.h"
#include "index/copy.h"
#include "util/log.h"

/* The share of --cache-max-size that copies may take at most. */
#define KEPT_SHARE_DIVISOR 4
/* The most entries a kept namespace has: the AWS CLI's 9,700 make a 1.9 MB copy, written in
 * about 18 ms; 250,000 make about 50 MB, a few tenths of a second. */
#define KEPT_ENTRIES_MAX 250000u

void daemon_kept_prepare(struct fs_session *s, const struct source_kept_inputs *in,
                         struct daemon_kept *k)
{
	int rc;

	memset(k, 0, sizeof(*k));
	if (!s->opts.cache_dir || !s->opts.keep_cache || s->generation)
		return;
	if (in->mtime <= 0) {
		util_log(
		    UTIL_LOG_INFO,
		    "the namespace is not kept in the cache directory: the manifest has no time"
		    " of its own (no Last-Modified), so its entries without an mtime show this"
		    " mount's");
		return;
	}
	rc = source_kept_key(in, k->manifest_sha256, k->key);
	if (rc) {
		util_log(UTIL_LOG_WARN, "the namespace is not kept in the cache directory: %s",
		         strerror(-rc));
		return;
	}
	k->on = true;
}

/* Drops kept copies beyond what the cache may hold, and takes what the rest hold from the
 * spool files' share of --cache-max-size. */
static void account(struct fs_session *s)
{
	uint64_t max = s->opts.cache_max_size ? s->cache_max_size / KEPT_SHARE_DIVISOR : 0;
	uint64_t bytes = 0;
	int rc = cache_kept_prune(s->cache, max, &bytes);

	if (rc)
		util_log(UTIL_LOG_WARN, "cannot count the cache directory's kept namespaces: %s",
		         strerror(-rc));
	if (s->opts.cache_max_size && bytes < s->cache_max_size)
		s->cache_max_size -= bytes;
}

/* The entries of the namespace (the root is none), for the log. */
static uint64_t entries(struct fs_session *s)
{
	uint64_t files = 0, dirs = 0, bytes = 0;

	if (index_totals(s->idx, &files, &dirs, &bytes) != 0)
		return 0;
	return files + dirs - (dirs > 0);
}

int daemon_kept_restore(struct fs_session *s, const struct daemon_kept *k)
{
	char err[PATH_MAX + 256] = "", why[256] = "", *path = NULL;
	int rc;

	if (!k->on)
		return 0;
	rc = cache_kept_find(s->cache, k->key, &path, err, sizeof(err));
	if (rc == -ENOENT)
		return 0;
	if (rc) {
		util_log(UTIL_LOG_WARN, "kept namespace: %s", err[0] ? err : strerror(-rc));
		return 0;
	}
	rc = index_copy_restore(s->idx, path, why, sizeof(why));
	free(path);
	if (rc == -ENOTRECOVERABLE) {
		/* Filled already: the manifest cannot be loaded on top of it. */
		util_log(UTIL_LOG_ERROR, "kept namespace %s: %s", k->key, why);
		return -ENOMEM;
	}
	if (rc) {
		/* A copy this build cannot use goes; one it could not read for want of memory
		 * may serve the next mount. */
		bool bad = rc != -ENOMEM;
		util_log(UTIL_LOG_WARN, "kept namespace %s not used (%s): %s; loading the manifest",
		         k->key, why[0] ? why : strerror(-rc), bad ? "removed" : "kept");
		if (bad)
			(void)cache_kept_remove(s->cache, k->key);
		return 0;
	}
	util_log(UTIL_LOG_INFO,
	         "namespace from the cache directory (manifest sha256 %s, %" PRIu64 " entries)",
	         k->manifest_sha256, entries(s));
	account(s);
	return 1;
}

void daemon_kept_save(struct fs_session *s, const struct daemon_kept *k)
{
	struct cache_kept_new n;
	char err[PATH_MAX + 256] = "";
	int rc;

	if (!k->on)
		return;
	/* The copy is made before the mount answers (it holds the index): a namespace this large
	 * would make every first mount seconds slower for what later ones save. */
	if (entries(s) > KEPT_ENTRIES_MAX) {
		util_log(UTIL_LOG_INFO,
		         "the namespace is not kept in the cache directory: over %u entries",
		         KEPT_ENTRIES_MAX);
		return;
	}
	rc = cache_kept_begin(s->cache, k->key, &n, err, sizeof(err));
	if (rc) {
		util_log(UTIL_LOG_WARN, "the namespace is not kept: %s",
		         err[0] ? err : strerror(-rc));
		return;
	}
	rc = index_copy_save(s->idx, n.path);
	if (rc) {
		cache_kept_abort(s->cache, &n);
		if (rc == -EACCES)
			util_log(UTIL_LOG_INFO,
			         "the namespace is not kept in the cache directory: its"
			         " URLs hold a password or a signed query");
		else
			util_log(UTIL_LOG_WARN, "the namespace is not kept: %s", strerror(-rc));
		return;
	}
	rc = cache_kept_commit(s->cache, k->key, &n);
	if (rc)
		util_log(UTIL_LOG_WARN, "the namespace is not kept: %s", strerror(-rc));
	else
		util_log(UTIL_LOG_DEBUG, "namespace kept in the cache directory as %s", k->key);
	account(s);
}

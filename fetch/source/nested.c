/*
 * nested.c fetches and loads a directory's own manifest (nested.h). What it fetches is
 * checked whole against the digest its parent gave before a byte of it is parsed: a
 * nested manifest is the parent's snapshot, not whatever the server holds now.
 */
#include "util/hex.h"
#include "fetch/source/nested.h"
#include "fetch/source/nested_cache.h"
#include "util/log.h"

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int source_nested_list(struct index *idx, uint64_t dir, const struct source_options *src,
                       const char *base_url, struct manifest_load_options *opts, char *err,
                       size_t err_len)
{
	struct index_nested_ref ref;
	struct source_options bounded = *src;
	char *text = NULL, *where = NULL, got[65], shown[512];
	size_t len = 0;
	int64_t mtime;
	int rc = index_get_nested(idx, dir, &ref);

	if (rc)
		return rc;
	/* Directories that name one manifest fetch it once (a walk over a tree of identical
	 * subtrees would fetch it for each). */
	rc = nested_cache_get(ref.sha256, &text, &len);
	if (rc == 1 && len == ref.size)
		goto load;
	if (rc < 0)
		goto out;
	if (rc == 1) { /* the same digest, another size: the parent is wrong, not the text */
		snprintf(err, err_len,
		         "nested manifest's size is not the %llu bytes its parent names",
		         (unsigned long long)ref.size);
		rc = -EIO;
		goto out;
	}
	/* No more than the parent said it holds: a server cannot make the mount hold more. */
	bounded.max_bytes = ref.size ? ref.size : 1;
	rc = source_manifest_read(ref.url, &bounded, &text, &len, &where, &mtime, err, err_len);
	if (rc == 0)
		rc = util_sha256_hex(text, len, got);
	if (rc == 0 && (len != ref.size || strcmp(got, ref.sha256) != 0)) {
		snprintf(err, err_len,
		         "nested manifest %s is not the one its parent names (%zu bytes, sha256"
		         " %.16s...; expected %llu bytes, %.16s...)",
		         util_redact_url(ref.url, shown, sizeof(shown)), len, got,
		         (unsigned long long)ref.size, ref.sha256);
		rc = -EIO;
	}
	if (rc) {
		nested_cache_abandon(ref.sha256);
		goto out;
	}
	nested_cache_put(ref.sha256, text, len);
load:
	rc = source_manifest_load_subtree(idx, dir, text, len, base_url, opts, err, err_len);
	if (rc == -EBUSY) /* listed by another caller meanwhile: the same snapshot */
		rc = 0;
out:
	free(text);
	free(where);
	free(ref.url);
#ifdef __GLIBC__
	/* A load's text and parse (several times the manifest's size) are freed by now, but
	 * glibc keeps freed memory in the arena of the thread that freed it, and each nested
	 * load runs on whichever FUSE worker looked the directory up: a `find` over ten nested
	 * manifests of 100,000 entries peaked at 395 MiB instead of 194 MiB. */
	malloc_trim(0);
#endif
	return rc;
}

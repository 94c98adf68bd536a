/*
 * Release tags (doc/publish.md, "Release names"): a small pointer object beside the
 * manifests of a store (`latest`), written by `spoolfs publish --tag` after the manifest,
 *
 *   {"spoolfs_tag":1,"manifest":"release-42.json","sha256":"<64 hex>","size":N}
 *
 * naming one manifest in the same directory (or prefix) by name, sha256 and size. A mount
 * of the pointer fetches that manifest and mounts it only when its bytes are exactly those:
 * a tag moved while a mount starts gives the old release or the new one, each verified,
 * never a mix, and a manifest rewritten under the tag's feet is refused. This file owns the
 * format (parse, write), the names it may hold, and the mount's step from pointer to
 * manifest; gc (publish/gc.c) and publish (publish/tag.c) use the same parse and rules.
 * No state: nothing here is shared.
 */
#ifndef SPOOLFS_FETCH_SOURCE_TAG_POINTER_H
#define SPOOLFS_FETCH_SOURCE_TAG_POINTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fetch/source/source.h"

#define SOURCE_TAG_FORMAT 1
/* The longest name a tag or the manifest it names may have. */
#define SOURCE_TAG_NAME_MAX 200
/* A pointer is tiny; a text longer than this is never taken for one (a manifest is not
 * parsed twice). */
#define SOURCE_TAG_TEXT_MAX 4096

struct source_tag {
	char manifest[SOURCE_TAG_NAME_MAX + 1]; /* beside the pointer */
	char sha256[65];                        /* lower-case hex */
	uint64_t size;
	char tag[SOURCE_TAG_NAME_MAX + 1]; /* source_tag_follow: the pointer's own name, or "" */
};

/*
 * A name a pointer may hold, and a tag may have: 1 to SOURCE_TAG_NAME_MAX of
 * A-Z a-z 0-9 . _ -, not beginning with '.', no "..": a plain file name in a directory or
 * a key under a prefix, the same in a URL as on disk (no escaping). A tag's own name must
 * besides not end in ".json" (gc takes the top-level *.json for manifests) nor be
 * "objects": source_tag_name_ok(name, true).
 */
bool source_tag_name_ok(const char *name, bool is_tag);

/*
 * Whether text (len bytes, NUL-terminated or not) is a pointer: 1 with *t filled, 0 when it
 * is not one (no JSON object with "spoolfs_tag": a manifest, or anything else, for the
 * manifest's loader to judge), -EINVAL with a one-line reason in err when it is a pointer
 * this binary cannot take (another format, a bad or missing field, a field it does not
 * know), -ENOMEM.
 */
int source_tag_parse(const char *text, size_t len, struct source_tag *t, char *err, size_t err_len);

/* The pointer naming manifest (whose bytes are data, len of them), as publish writes it:
 * *out malloc'd, *out_len bytes (NUL-terminated). 0, -EINVAL (manifest is no name a
 * pointer may hold), -ENOMEM. */
int source_tag_format(const char *manifest, const void *data, size_t len, char **out,
                      size_t *out_len);

/*
 * A mount's step from pointer to manifest: when *text (read from *base_url by
 * source_manifest_read) is a pointer, fetches the manifest it names beside it with opts
 * (signed as the pointer was), checks its size and sha256 and that it is no pointer itself
 * (no chains), and replaces *text, *len, *base_url and *mtime with the manifest's (the old
 * ones freed). 1 when it did (*t says what it followed), 0 when *text is no pointer
 * (nothing changed), -errno with a one-line reason in err.
 */
int source_tag_follow(const struct source_options *opts, char **text, size_t *len, char **base_url,
                      int64_t *mtime, struct source_tag *t, char *err, size_t err_len);

#endif

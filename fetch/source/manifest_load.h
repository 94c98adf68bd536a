/*
 * The manifest format (doc/manifest.md): a JSON document, version 1 (`files`) or 2
 * (`entries` of files, directories and symlinks, and the `packs` their small files live
 * in), read into an empty namespace through index_build_* (index.h). This file owns the
 * syntax and the errors a bad manifest gets; index/ owns the namespace's own rules (paths,
 * clashes, one size per sha256), whose reasons come back here to be named by entry.
 */
#ifndef SPOOLFS_FETCH_SOURCE_MANIFEST_LOAD_H
#define SPOOLFS_FETCH_SOURCE_MANIFEST_LOAD_H

#include <stdbool.h>
#include <stddef.h>

#include "index/index.h"

/*
 * Symlinks that lead out of the mount (an absolute target, or ".." above its root, however
 * many links it takes to get there: symlink_judge.h) point readers at this machine's own
 * files: a build that trusts the mount would read them as if the store had sent them. What
 * to do with them.
 */
enum manifest_outside_symlinks {
	MANIFEST_OUTSIDE_SHOW = 0, /* as given: toolchains and sysroots have such links */
	MANIFEST_OUTSIDE_HIDE,     /* left out of the namespace, counted */
	MANIFEST_OUTSIDE_REFUSE,   /* the manifest is refused, naming the entry */
};

struct manifest_load_options {
	enum manifest_outside_symlinks outside_symlinks;
	unsigned hidden_symlinks; /* out: how many MANIFEST_OUTSIDE_HIDE left out */
	/*
	 * A manifest in a private bucket: its objects' requests are signed, so an object URL
	 * on confine_origin ("scheme://host[:port]") must lie under confine_dir (the
	 * manifest's own directory, with its trailing '/'), or another key of the bucket would
	 * be read with the mount's credentials. URLs on other hosts stay allowed (unsigned).
	 * NULL: no such rule.
	 */
	const char *confine_origin;
	const char *confine_dir;
	/*
	 * The read order to take from a root manifest's "read_orders" (read_orders.h); NULL:
	 * none. Out: its paths, one a line (malloc'd, the caller's; NULL: none taken), how
	 * many, and why none was taken ("" when one was, or none was asked for).
	 */
	const char *read_order_name;
	char *read_order;
	size_t read_order_paths;
	char read_order_why[192];
};

/*
 * Loads a manifest (JSON text) into an empty namespace, all or nothing. opts may be NULL
 * (every symlink shown). base_url is the
 * manifest's own URL (http(s):// or file://); relative object URLs and entries without
 * "url" resolve against it. On a bad manifest returns -EINVAL and writes a one-line message
 * naming the entry (e.g. `files[3] "a/../b": path has a ".." segment`) into err; nothing
 * is loaded then.
 */
int source_manifest_load(struct index *idx, const char *json, size_t json_len, const char *base_url,
                         struct manifest_load_options *opts, char *err, size_t err_len);
/* The same for a text the caller has NUL-terminated (text[len] == '\0'): read in place, no
 * copy (7.6 MB less at the peak of a 100,000-entry load). */
int source_manifest_load_text(struct index *idx, const char *text, size_t len, const char *base_url,
                              struct manifest_load_options *opts, char *err, size_t err_len);

/*
 * A directory's own manifest (a nested one: `"manifest": {...}` on its entry), whose paths
 * are relative to dir and whose URLs resolve against base_url, the root manifest's. Loaded
 * into dir, which must be unlisted and empty; dir is listed once it is in. NUL-terminated
 * text as source_manifest_load_text; returns as it does, and -EBUSY when dir is listed.
 */
int source_manifest_load_subtree(struct index *idx, uint64_t dir, const char *text, size_t len,
                                 const char *base_url, struct manifest_load_options *opts,
                                 char *err, size_t err_len);

#endif

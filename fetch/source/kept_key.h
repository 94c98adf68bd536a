/*
 * The name of a kept namespace (index/copy.h, doc/cache-dir.md "Kept namespaces"): a sha256
 * over everything that decides what loading a manifest puts in the namespace, so that a
 * copy serves only a mount whose load would have made the same one. A manifest changed by
 * one byte, another URL to resolve its entries against, another default mtime, other load
 * options, another schema or another spoolfs: another name.
 *
 * No state: nothing here is shared.
 */
#ifndef SPOOLFS_FETCH_SOURCE_KEPT_KEY_H
#define SPOOLFS_FETCH_SOURCE_KEPT_KEY_H

#include <stddef.h>
#include <stdint.h>

#include "fetch/source/manifest_load.h"
#include "util/hex.h"

struct source_kept_inputs {
	const char *text; /* the manifest's bytes as read (after a tag is followed), len of them */
	size_t len;
	const char *base_url; /* its URL after redirects: entries resolve against it */
	int64_t mtime;        /* what index_set_default_mtime is given (its Last-Modified) */
	/* The options the load runs with: outside_symlinks, read_order_name (NULL: none taken),
	 * confine_origin and confine_dir. The out fields are not read. */
	const struct manifest_load_options *opts;
};

/*
 * The key, 64 hex digits, in key, and the sha256 of the manifest's bytes in manifest_sha256
 * (for the log). The base URL is hashed without its userinfo, query and fragment: a password
 * hashed into a file name could be guessed back from it, and relative URLs never take the
 * base's query. The schema version, SPOOLFS_VERSION, this build's ID and libcurl's version
 * are in it. 0, -ENOENT (the program has no build ID), -ENOMEM, or -EIO (OpenSSL could not
 * digest).
 */
int source_kept_key(const struct source_kept_inputs *in, char manifest_sha256[UTIL_SHA256_HEX_LEN],
                    char key[UTIL_SHA256_HEX_LEN]);

#endif

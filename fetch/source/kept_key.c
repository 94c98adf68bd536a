/*
 * Kept namespaces' names (kept_key.h): every input written out as "name length:value" lines
 * (length -1 for none), so that no two sets of inputs make the same text, then hashed once.
 */
#include "fetch/source/kept_key.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "index/copy.h"
#include "util/log.h"

/* The text's own version: a change of what it holds renames every copy. */
#define KEPT_KEY_FORMAT 1

/* An optional string as "%lld:%s" arguments: its length (-1 for NULL), then itself. */
#define FIELD(s) (long long)((s) ? (long long)strlen(s) : -1LL), ((s) ? (s) : "")

int source_kept_key(const struct source_kept_inputs *in, char manifest_sha256[UTIL_SHA256_HEX_LEN],
                    char key[UTIL_SHA256_HEX_LEN])
{
	const struct manifest_load_options *o = in->opts;
	char *text = NULL, *base = NULL;
	int n, rc;

	if (util_sha256_hex(in->text, in->len, manifest_sha256) != 0)
		return -EIO;
	rc = util_url_without_userinfo(in->base_url, &base);
	if (rc)
		return rc;
	n = asprintf(&text,
	             "spoolfs kept namespace %d\nspoolfs %zu:%s\nschema %d\nmanifest %s\n"
	             "base %lld:%s\nmtime %" PRId64 "\noutside_symlinks %d\nread_order %lld:%s\n"
	             "confine_origin %lld:%s\nconfine_dir %lld:%s\n",
	             KEPT_KEY_FORMAT, strlen(SPOOLFS_VERSION), SPOOLFS_VERSION,
	             index_namespace_version(), manifest_sha256, FIELD(base), in->mtime,
	             (int)o->outside_symlinks, FIELD(o->read_order_name), FIELD(o->confine_origin),
	             FIELD(o->confine_dir));
	if (n < 0) {
		text = NULL;
		rc = -ENOMEM;
	} else if (util_sha256_hex(text, (size_t)n, key) != 0) {
		rc = -EIO;
	}
	free(text);
	free(base);
	return rc;
}

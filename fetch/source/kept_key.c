/*
 * Kept namespaces' names (kept_key.h): every input written out as "name length:value" lines
 * (length -1 for none), so that no two sets of inputs make the same text, then hashed once.
 */
#include "fetch/source/kept_key.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "index/copy.h"
#include "util/build_id.h"
#include "util/log.h"

/* The text's own version: a change of what it holds renames every copy. */
#define KEPT_KEY_FORMAT 2

/* An optional string as "%lld:%s" arguments: its length (-1 for NULL), then itself. */
#define FIELD(s) (long long)((s) ? (long long)strlen(s) : -1LL), ((s) ? (s) : "")

int source_kept_key(const struct source_kept_inputs *in, char manifest_sha256[UTIL_SHA256_HEX_LEN],
                    char key[UTIL_SHA256_HEX_LEN])
{
	const struct manifest_load_options *o = in->opts;
	char *text = NULL, *base = NULL;
	int n, rc;

	/* The build, not only the version: a loader's fix must not be undone by a copy an
	 * older build of the same version made (libcurl resolves the URLs: its version too). */
	char build[2 * 64 + 1];
	if (util_build_id_hex(build, sizeof(build)) != 0)
		return -ENOENT; /* linked without a build ID: no copy can be told apart */
	if (util_sha256_hex(in->text, in->len, manifest_sha256) != 0)
		return -EIO;
	rc = util_url_without_userinfo(in->base_url, &base);
	if (rc)
		return rc;
	/* Relative URLs never take the base's query: a manifest URL's token (a job's, a signed
	 * redirect's) changes nothing loaded, and must not give every mount a copy of its own. */
	base[strcspn(base, "?#")] = '\0';
	n = asprintf(&text,
	             "spoolfs kept namespace %d\nspoolfs %zu:%s\nbuild %s\ncurl %s\nschema %d\n"
	             "manifest %s\nbase %lld:%s\nmtime %" PRId64 "\noutside_symlinks %d\n"
	             "read_order %lld:%s\nconfine_origin %lld:%s\nconfine_dir %lld:%s\n",
	             KEPT_KEY_FORMAT, strlen(SPOOLFS_VERSION), SPOOLFS_VERSION, build,
	             curl_version_info(CURLVERSION_NOW)->version, index_namespace_version(),
	             manifest_sha256, FIELD(base), in->mtime, (int)o->outside_symlinks,
	             FIELD(o->read_order_name), FIELD(o->confine_origin), FIELD(o->confine_dir));
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

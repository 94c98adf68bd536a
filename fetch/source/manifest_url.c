/*
 * manifest_url.c resolves a manifest's object URLs (see manifest_url.h).
 */
#include "fetch/source/manifest_url.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Percent-encodes each segment of path, keeping the '/' between them. Caller frees. */
static char *escape_path(const char *path, size_t len)
{
	char *out = malloc(len * 3 + 1);
	size_t o = 0;

	if (!out)
		return NULL;
	for (size_t start = 0; start <= len;) {
		const char *slash = memchr(path + start, '/', len - start);
		size_t end = slash ? (size_t)(slash - path) : len;
		if (end == start) { /* curl_easy_escape reads a length of 0 as "up to the NUL" */
			if (end < len)
				out[o++] = '/';
			start = end + 1;
			continue;
		}
		/* The handle argument is ignored since curl 7.82. */
		char *seg = curl_easy_escape(NULL, path + start, (int)(end - start));
		if (!seg) {
			free(out);
			return NULL;
		}
		size_t n = strlen(seg);
		memcpy(out + o, seg, n);
		o += n;
		curl_free(seg);
		if (end < len)
			out[o++] = '/';
		start = end + 1;
	}
	out[o] = '\0';
	return out;
}

/*
 * Whether ref is a relative path reference that resolving only appends to the base's
 * directory: unreserved characters and '/', no leading '/', no empty, "." or ".."
 * segment. Nothing in it is escaped, merged or removed by RFC 3986 resolution, so
 * base_dir + ref is exactly what curl would build.
 */
static bool is_plain_ref(const char *ref, size_t len)
{
	size_t seg_start = 0;

	if (len == 0)
		return false;
	for (size_t i = 0; i <= len; i++) {
		if (i == len || ref[i] == '/') {
			size_t seg = i - seg_start;
			if (seg == 0 || (seg == 1 && ref[seg_start] == '.') ||
			    (seg == 2 && ref[seg_start] == '.' && ref[seg_start + 1] == '.'))
				return false;
			seg_start = i + 1;
			continue;
		}
		unsigned char c = (unsigned char)ref[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '.' || c == '_' || c == '~'))
			return false;
	}
	return true;
}

/* What a failed curl_url_set or _get means for an entry: -ENOMEM, or -EINVAL and why. */
static int unresolved(CURLUcode uc, char *why, size_t why_len)
{
	if (uc == CURLUE_OUT_OF_MEMORY)
		return -ENOMEM;
	snprintf(why, why_len, "url cannot be resolved (%s)", curl_url_strerror(uc));
	return -EINVAL;
}

int manifest_url_resolve(const struct manifest_base *mb, const char *rel, const char *path,
                         size_t path_len, char **out, char *why, size_t why_len)
{
	const char *ref = rel ? rel : path;
	size_t ref_len = rel ? strlen(rel) : path_len;
	CURLU *h = NULL;
	char *escaped = NULL, *scheme = NULL, *resolved = NULL;
	CURLUcode uc;
	int rc = -ENOMEM;

	*out = NULL;
	/* The common case, and a third of a 100,000-entry load when curl parsed each URL. */
	if (mb->base_dir && is_plain_ref(ref, ref_len)) {
		*out = malloc(mb->base_dir_len + ref_len + 1);
		if (!*out)
			return -ENOMEM;
		memcpy(*out, mb->base_dir, mb->base_dir_len);
		memcpy(*out + mb->base_dir_len, ref, ref_len);
		(*out)[mb->base_dir_len + ref_len] = '\0';
		return 0;
	}
	h = mb->base ? curl_url_dup(mb->base) : curl_url();
	if (!h)
		goto out;
	if (!rel) {
		escaped = escape_path(path, path_len);
		if (!escaped)
			goto out;
	}
	if (!mb->base && !rel) {
		snprintf(why, why_len, "no \"url\" and no base URL to resolve the path against");
		rc = -EINVAL;
		goto out;
	}
	uc = curl_url_set(h, CURLUPART_URL, rel ? rel : escaped, 0);
	if (uc != CURLUE_OK) {
		rc = unresolved(uc, why, why_len);
		goto out;
	}
	uc = curl_url_get(h, CURLUPART_SCHEME, &scheme, 0);
	if (uc == CURLUE_OUT_OF_MEMORY)
		goto out;
	if (uc != CURLUE_OK || (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0 &&
	                        strcmp(scheme, "file") != 0)) {
		snprintf(why, why_len, "url scheme \"%s\" is not allowed (http, https, file)",
		         scheme ? scheme : "");
		rc = -EINVAL;
		goto out;
	}
	if (strcmp(scheme, "file") == 0 && !mb->file_urls_allowed) {
		snprintf(why, why_len,
		         "a file: url is allowed only in a local manifest, not one from a server");
		rc = -EINVAL;
		goto out;
	}
	uc = curl_url_get(h, CURLUPART_URL, &resolved, 0);
	if (uc != CURLUE_OK) {
		rc = unresolved(uc, why, why_len);
		goto out;
	}
	*out = strdup(resolved);
	if (!*out)
		goto out;
	rc = 0;
out:
	curl_free(resolved);
	curl_free(scheme);
	free(escaped);
	curl_url_cleanup(h);
	return rc;
}

/* Asks manifest_url_resolve (curl, while base_dir is still NULL) where a plain reference lands, so
 * that its shortcut is curl's own answer. Leaves base_dir NULL (no shortcut) when the base
 * cannot resolve one or curl does not simply append. Fails only with -ENOMEM. */
static int set_base_dir(struct manifest_base *mb)
{
	char *probe = NULL, why[160];
	int rc = manifest_url_resolve(mb, "x", NULL, 0, &probe, why, sizeof(why));
	size_t len = probe ? strlen(probe) : 0;

	if (rc == 0 && len >= 2 && probe[len - 2] == '/' && probe[len - 1] == 'x') {
		probe[len - 1] = '\0';
		mb->base_dir = probe;
		mb->base_dir_len = len - 1;
		return 0;
	}
	free(probe);
	return rc == -ENOMEM ? rc : 0;
}

int manifest_base_init(struct manifest_base *mb, const char *base_url, char *why, size_t why_len)
{
	CURLUcode uc;

	memset(mb, 0, sizeof(*mb));
	mb->file_urls_allowed = !base_url || strncasecmp(base_url, "file:", 5) == 0;
	if (!base_url)
		return 0;
	mb->base = curl_url();
	if (!mb->base)
		return -ENOMEM;
	uc = curl_url_set(mb->base, CURLUPART_URL, base_url, 0);
	if (uc == CURLUE_OUT_OF_MEMORY)
		return -ENOMEM;
	if (uc != CURLUE_OK) {
		snprintf(why, why_len, "base URL \"%.200s\" is not a valid URL (%s)", base_url,
		         curl_url_strerror(uc));
		return -EINVAL;
	}
	return set_base_dir(mb);
}

void manifest_base_free(struct manifest_base *mb)
{
	curl_url_cleanup(mb->base);
	free(mb->base_dir);
	memset(mb, 0, sizeof(*mb));
}

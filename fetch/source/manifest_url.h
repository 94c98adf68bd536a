/*
 * Where a manifest's objects are: each entry's URL (its "url", relative or absolute, or its
 * path) resolved against the manifest's own URL, with the rules a manifest's URLs obey
 * (http, https, or file in a local manifest only). Resolution is libcurl's (RFC 3986); a
 * plain relative reference takes a shortcut that gives curl's own answer.
 *
 * One loader owns a struct manifest_base: no lock.
 */
#ifndef SPOOLFS_FETCH_SOURCE_MANIFEST_URL_H
#define SPOOLFS_FETCH_SOURCE_MANIFEST_URL_H

#include <stdbool.h>
#include <stddef.h>

#include <curl/curl.h>

struct manifest_base {
	CURLU *base; /* NULL when no base URL was given */
	/* A manifest from a server may not name local files: it could serve /etc/shadow to
	 * every reader of the mount. Only a local manifest (or one with no base) may. */
	bool file_urls_allowed;
	/* What curl makes of a plain relative reference against base, up to the reference
	 * itself ("http://h/dir/"); NULL when there is no shortcut. */
	char *base_dir;
	size_t base_dir_len;
};

/* Parses base_url (NULL: no base, so every entry needs an absolute "url"). 0, -ENOMEM, or
 * -EINVAL with the reason in why. manifest_base_free in every case. */
int manifest_base_init(struct manifest_base *mb, const char *base_url, char *why, size_t why_len);
void manifest_base_free(struct manifest_base *mb);

/*
 * Resolves `rel` (an entry's "url", relative or absolute) or, when rel is NULL, its path
 * (percent-encoded segment by segment) against the base. *out is malloc'd. 0, -ENOMEM, or
 * -EINVAL with the reason in why.
 */
int manifest_url_resolve(const struct manifest_base *mb, const char *rel, const char *path,
                         size_t path_len, char **out, char *why, size_t why_len);

#endif

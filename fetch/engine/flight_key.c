/*
 * Flight keys (see flight_key.h): built, taken apart and shown here only, so the format
 * has one home.
 */
#include "util/hex.h"
#include "fetch/engine/flight_key.h"

#include <errno.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

#define PREFIX_SHA256 "sha256:"
#define PREFIX_ETAG "etag:"
#define PREFIX_URL "url:"

int flight_spool_name(const char *key, char **name)
{
	char hex[2 * EVP_MAX_MD_SIZE + 1];

	if (util_sha256_hex(key, strlen(key), hex) != 0)
		return -EIO;
	return asprintf(name, "%s.spool", hex) < 0 ? -ENOMEM : 0;
}

int flight_key_url(const char *url, char **out)
{
	char hex[2 * EVP_MAX_MD_SIZE + 1], *shown = NULL, *hashed = NULL;
	int rc = 0;

	*out = NULL;
	if (!util_url_has_secret(url)) {
		*out = strdup(url);
		return *out ? 0 : -ENOMEM;
	}
	shown = malloc(strlen(url) + 1); /* redacted, a URL is never longer */
	if (!shown)
		return -ENOMEM;
	util_redact_url(url, shown, strlen(url) + 1);
	rc = util_url_without_userinfo(url, &hashed);
	if (rc)
		goto out;
	if (util_sha256_hex(hashed, strlen(hashed), hex) != 0)
		rc = -EIO;
	else if (asprintf(out, "%s#%s", shown, hex) < 0) {
		*out = NULL;
		rc = -ENOMEM;
	}
out:
	free(hashed);
	free(shown);
	return rc;
}

int flight_key_build(const char *sha256, uint64_t size, const char *url, const char *etag,
                     char **key)
{
	char *shown = NULL;
	int rc;

	if (sha256[0])
		return asprintf(key, PREFIX_SHA256 "%s", sha256) < 0 ? -ENOMEM : 0;
	/* Keys go into the cache's index.db: no password or signature there. */
	rc = flight_key_url(url, &shown);
	if (rc)
		return rc;
	if (etag && etag[0])
		rc = asprintf(key, PREFIX_ETAG "%" PRIu64 ":%s %s", size, etag, shown);
	else
		rc = asprintf(key, PREFIX_URL "%" PRIu64 ":%s", size, shown);
	free(shown);
	return rc < 0 ? -ENOMEM : 0;
}

/* "<size>:" at *p, moving *p past it. 0 or -EINVAL (no digits, overflow, no ':'). */
static int parse_size(const char **p, uint64_t *size)
{
	const char *s = *p;
	uint64_t v = 0;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	for (; *s >= '0' && *s <= '9'; s++) {
		if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
			return -EINVAL;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	if (*s != ':')
		return -EINVAL;
	*size = v;
	*p = s + 1;
	return 0;
}

int flight_key_parse(const char *key, struct flight_key_parts *out)
{
	const char *p;

	memset(out, 0, sizeof(*out));
	if (strncmp(key, PREFIX_SHA256, strlen(PREFIX_SHA256)) == 0) {
		p = key + strlen(PREFIX_SHA256);
		out->kind = FLIGHT_KEY_SHA256;
		out->sha256 = p;
		out->sha256_len = strlen(p);
		if (out->sha256_len == 0 || strspn(p, "0123456789abcdef") != out->sha256_len)
			return -EINVAL;
		return 0;
	}
	if (strncmp(key, PREFIX_ETAG, strlen(PREFIX_ETAG)) == 0) {
		p = key + strlen(PREFIX_ETAG);
		out->kind = FLIGHT_KEY_ETAG;
		if (parse_size(&p, &out->size) != 0)
			return -EINVAL;
		const char *space = strchr(p, ' ');
		if (!space || space == p || !space[1])
			return -EINVAL;
		out->etag = p;
		out->etag_len = (size_t)(space - p);
		out->url = space + 1;
		return 0;
	}
	if (strncmp(key, PREFIX_URL, strlen(PREFIX_URL)) == 0) {
		p = key + strlen(PREFIX_URL);
		out->kind = FLIGHT_KEY_URL;
		if (parse_size(&p, &out->size) != 0 || !*p)
			return -EINVAL;
		out->url = p;
		return 0;
	}
	return -EINVAL;
}

bool flight_key_names_version(const char *key)
{
	return strncmp(key, PREFIX_SHA256, strlen(PREFIX_SHA256)) == 0 ||
	       strncmp(key, PREFIX_ETAG, strlen(PREFIX_ETAG)) == 0;
}

const char *flight_key_shown(const char *key, char *buf, size_t cap)
{
	struct flight_key_parts parts;
	const char *url = NULL;

	if (cap == 0)
		return buf;
	if (flight_key_parse(key, &parts) == 0) {
		url = parts.url;
	} else {
		/* Not this format: from the scheme of its first URL on, if it has one. */
		url = strstr(key, "://");
		while (url && url > key && url[-1] != ':' && url[-1] != ' ')
			url--;
	}
	if (url)
		return util_redact_url(url, buf, cap);
	snprintf(buf, cap, "%s", key);
	return buf;
}

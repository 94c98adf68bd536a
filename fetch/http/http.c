/*
 * Header parsing for the transfer engine. Servers are not trusted: every number is parsed
 * with overflow checks and a malformed value is treated as absent or as an error, never
 * guessed at.
 */
#include "util/hex.h"
#include "fetch/http/http.h"

#include <ctype.h>
#include <inttypes.h>
#include <curl/curl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <errno.h>
#include <string.h>
#include <strings.h>
#include <time.h>

void http_response_reset(struct http_response *resp)
{
	memset(resp, 0, sizeof(*resp));
	resp->retry_after_s = -1;
}

/* Parses decimal digits at *p (no sign, no spaces). Returns 0 or -EINVAL (none, overflow). */
static int parse_u64(const char **p, const char *end, uint64_t *out)
{
	uint64_t v = 0;
	const char *s = *p;

	if (s >= end || !isdigit((unsigned char)*s))
		return -EINVAL;
	while (s < end && isdigit((unsigned char)*s)) {
		unsigned digit = (unsigned)(*s - '0');
		if (v > (UINT64_MAX - digit) / 10)
			return -EINVAL;
		v = v * 10 + digit;
		s++;
	}
	*p = s;
	*out = v;
	return 0;
}

static void trim(const char **start, const char **end)
{
	while (*start < *end && isspace((unsigned char)**start))
		(*start)++;
	while (*end > *start && isspace((unsigned char)(*end)[-1]))
		(*end)--;
}

int http_parse_content_range(const char *value, size_t len, uint64_t *start, uint64_t *end,
                             bool *total_known, uint64_t *total)
{
	const char *p = value, *stop = value + len;

	trim(&p, &stop);
	if (stop - p < 6 || strncasecmp(p, "bytes ", 6) != 0)
		return -EINVAL;
	p += 6;
	while (p < stop && *p == ' ')
		p++;
	if (parse_u64(&p, stop, start) || p >= stop || *p++ != '-')
		return -EINVAL;
	if (parse_u64(&p, stop, end) || p >= stop || *p++ != '/')
		return -EINVAL;
	if (*end < *start)
		return -EINVAL;
	if (p < stop && *p == '*' && p + 1 == stop) {
		*total_known = false;
		*total = 0;
		return 0;
	}
	if (parse_u64(&p, stop, total) || p != stop || *end >= *total)
		return -EINVAL;
	*total_known = true;
	return 0;
}

/* FNV-1a, 64 bits. Unkeyed on purpose: see etag_digest. */
static uint64_t fnv1a(const char *p, size_t len)
{
	uint64_t h = 1469598103934665603ULL;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
	return h;
}

/*
 * A long ETag's stand-in: its start and a hash of all of it, which still tell versions
 * apart, and which no server sends (an ETag starts with a quote or W/). No digest from
 * OpenSSL: the parser allocates nothing. The hash has no key: the stand-in is kept in a
 * cache's records and compared by the next process, and it places nothing in a table, so
 * there is no chain to flood; only the server that chose the ETag could make two collide.
 */
static void etag_digest(const char *value, size_t len, char *out, size_t cap)
{
	int kept = (int)(cap - 1 - 18); /* "~" + start + ":" + 16 hex digits */

	snprintf(out, cap, "~%.*s:%016" PRIx64, kept, value, fnv1a(value, len));
}

void http_response_header(struct http_response *resp, const char *line, size_t len)
{
	const char *colon = memchr(line, ':', len);
	const char *value, *stop = line + len;

	if (len >= 5 && strncmp(line, "HTTP/", 5) == 0) {
		http_response_reset(resp);
		return;
	}
	if (!colon)
		return;
	size_t name_len = (size_t)(colon - line);
	value = colon + 1;
	trim(&value, &stop);
	size_t value_len = (size_t)(stop - value);

	if (name_len == 13 && strncasecmp(line, "content-range", 13) == 0) {
		resp->has_content_range =
		    http_parse_content_range(value, value_len, &resp->range_start, &resp->range_end,
		                             &resp->range_total_known, &resp->range_total) == 0;
		/* A present but unparsable Content-Range must not pass for a good one. */
		if (!resp->has_content_range)
			resp->range_total_known = false, resp->range_start = UINT64_MAX;
	} else if (name_len == 14 && strncasecmp(line, "content-length", 14) == 0) {
		const char *p = value;
		uint64_t n;
		resp->has_content_length = parse_u64(&p, stop, &n) == 0 && p == stop;
		resp->content_length = resp->has_content_length ? n : 0;
	} else if (name_len == 4 && strncasecmp(line, "etag", 4) == 0) {
		if (value_len < sizeof(resp->etag)) {
			memcpy(resp->etag, value, value_len);
			resp->etag[value_len] = '\0';
		} else {
			etag_digest(value, value_len, resp->etag, sizeof(resp->etag));
		}
	} else if (name_len == 13 && strncasecmp(line, "last-modified", 13) == 0) {
		if (value_len < sizeof(resp->last_modified)) {
			memcpy(resp->last_modified, value, value_len);
			resp->last_modified[value_len] = '\0';
		}
	} else if (name_len == 4 && strncasecmp(line, "date", 4) == 0) {
		if (value_len < sizeof(resp->date)) {
			memcpy(resp->date, value, value_len);
			resp->date[value_len] = '\0';
		}
	} else if (name_len == 16 && strncasecmp(line, "content-encoding", 16) == 0) {
		resp->encoded =
		    !(value_len == 8 && strncasecmp(value, "identity", 8) == 0) && value_len > 0;
	} else if (name_len == 21 && strncasecmp(line, "x-amz-checksum-sha256", 21) == 0) {
		unsigned char digest[48];
		/* 32 bytes encode as 44 base64 characters ending in one '='. */
		if (value_len == 44 && value[43] == '=' &&
		    EVP_DecodeBlock(digest, (const unsigned char *)value, 44) == 33) {
			util_hex_encode(digest, 32, resp->sha256);
		}
	} else if (name_len == 17 && strncasecmp(line, "x-amz-meta-sha256", 17) == 0) {
		bool hex = value_len == 64;
		for (size_t i = 0; hex && i < 64; i++)
			hex = isxdigit((unsigned char)value[i]);
		if (hex && !resp->sha256[0]) {
			for (size_t i = 0; i < 64; i++)
				resp->sha256[i] = (char)tolower((unsigned char)value[i]);
			resp->sha256[64] = '\0';
		}
	} else if (name_len == 11 && strncasecmp(line, "retry-after", 11) == 0) {
		const char *p = value;
		uint64_t n;
		char date[64];
		if (parse_u64(&p, stop, &n) == 0 && p == stop) {
			resp->retry_after_s = n > 86400 ? 86400 : (int)n;
		} else if (value_len < sizeof(date)) {
			/* Or an HTTP-date (RFC 9110 10.2.3): the wait is until then. */
			memcpy(date, value, value_len);
			date[value_len] = '\0';
			time_t at = curl_getdate(date, NULL);
			if (at > 0) {
				time_t wait = at - time(NULL);
				resp->retry_after_s = wait < 0       ? 0
				                      : wait > 86400 ? 86400
				                                     : (int)wait;
			}
		}
	}
}

bool http_etag_sendable(const char *etag)
{
	size_t len = strlen(etag);

	/* A strong entity-tag (RFC 9110 8.8.3): '"', etagc bytes, '"'. A listing's or a
	 * manifest's ETag goes into a request header: a CR or LF would add headers of its own. */
	if (len < 2 || etag[0] != '"' || etag[len - 1] != '"')
		return false;
	for (size_t i = 1; i + 1 < len; i++) {
		unsigned char c = (unsigned char)etag[i];
		if (c == '"' || c < 0x21 || c == 0x7f)
			return false;
	}
	return true;
}

uint64_t http_backoff_ms(unsigned attempt, uint64_t base_ms, uint64_t cap_ms, double jitter,
                         int retry_after_s, uint64_t retry_after_cap_ms)
{
	uint64_t delay = base_ms;

	for (unsigned i = 1; i < attempt && delay > 0 && delay < cap_ms; i++)
		delay = delay > cap_ms / 2 ? cap_ms : delay * 2;
	if (delay > cap_ms)
		delay = cap_ms;
	if (!(jitter >= 0)) /* also catches NaN */
		jitter = 0;
	if (jitter > 1)
		jitter = 1;
	delay = (uint64_t)((double)delay * (0.5 + 0.5 * jitter));
	if (retry_after_s >= 0) {
		uint64_t asked = (uint64_t)retry_after_s * 1000;
		if (asked > retry_after_cap_ms)
			asked = retry_after_cap_ms;
		if (asked > delay)
			delay = asked;
	}
	return delay;
}

bool http_status_is_transient(long code)
{
	return code == 408 || code == 429 || code >= 500;
}

bool http_curl_error_is_transient(int res)
{
	/* Not CURLE_UNSUPPORTED_PROTOCOL: the URLs' schemes are checked before any request, and
	 * curl gives that code for a reply with no status line too (HTTP/0.9), which one bad
	 * proxy answer or a connection left with a previous body's excess bytes produces. */
	switch ((CURLcode)res) {
	case CURLE_URL_MALFORMAT:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_FILE_COULDNT_READ_FILE:
	case CURLE_TOO_MANY_REDIRECTS:
		return false;
	default:
		return true;
	}
}

const char *http_redirect_protocols(const char *url)
{
	return strncasecmp(url, "https://", 8) == 0 ? "https" : "http,https";
}

bool http_redirected_off_scheme(void *easy, int res, const char *url)
{
	char *effective = NULL;
	size_t scheme_len = strcspn(url, ":");

	if ((CURLcode)res != CURLE_UNSUPPORTED_PROTOCOL ||
	    curl_easy_getinfo(easy, CURLINFO_EFFECTIVE_URL, &effective) != CURLE_OK || !effective ||
	    strncasecmp(effective, url, scheme_len + 1) == 0)
		return false;
	/* A scheme the redirect could follow (http to https, a CDN) failed as a garbled answer
	 * from there does, which is one like any. */
	if (strncasecmp(effective, "https://", 8) == 0)
		return false;
	if (strncasecmp(effective, "http://", 7) == 0)
		return strcmp(http_redirect_protocols(url), "https") == 0;
	return true;
}

/*
 * HTTP response facts the transfer engine acts on, parsed from raw header lines.
 * Pure functions and a plain struct: no locks, no I/O (a Retry-After date reads the clock),
 * so they are unit-tested and fuzzed on their own.
 */
#ifndef SPOOLFS_FETCH_HTTP_H
#define SPOOLFS_FETCH_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HTTP_ETAG_MAX 256

struct http_response {
	bool has_content_range;
	uint64_t range_start;   /* from Content-Range: bytes START-END/TOTAL */
	uint64_t range_end;     /* inclusive, as on the wire */
	bool range_total_known; /* false for TOTAL = "*" */
	uint64_t range_total;
	bool has_content_length;
	uint64_t content_length;
	/* As sent, quotes included; "" when absent. One too long to keep is kept as a digest,
	 * "~<start>:<hash>", which compares as well but cannot be sent back
	 * (http_etag_sendable). */
	char etag[HTTP_ETAG_MAX];
	char last_modified[64]; /* as sent; "" when absent or too long to be a date */
	char date[64];          /* Date, as sent; "" when absent or too long */
	/* Content-Encoding named a coding other than identity: the body is not the object's
	 * bytes unless its length says so (an object stored compressed). */
	bool encoded;
	int retry_after_s; /* -1 when absent or malformed; an HTTP-date counts from now */
	/*
	 * The object's SHA-256 as lower-case hex, from x-amz-checksum-sha256 (base64 of the
	 * digest; composite multipart checksums are ignored) or x-amz-meta-sha256 (hex).
	 * "" when neither is present or well-formed.
	 */
	char sha256[65];
};

/* Forgets everything: a new status line starts a new response (redirects, 100-continue). */
void http_response_reset(struct http_response *resp);

/* Feeds one header line as curl hands it over (may end in CRLF, is not NUL-terminated). */
void http_response_header(struct http_response *resp, const char *line, size_t len);

/*
 * Parses a Content-Range value ("bytes 0-99/1000", or a "*" total). Returns 0 or -EINVAL
 * for anything else, including an end before the start or past the total.
 */
int http_parse_content_range(const char *value, size_t len, uint64_t *start, uint64_t *end,
                             bool *total_known, uint64_t *total);

/* True for a validator If-Match may carry: a well-formed strong ETag; not weak (W/"..."),
 * not a digest of a long one, no control bytes. */
bool http_etag_sendable(const char *etag);

/*
 * Delay before retry number `attempt` (1 = first retry): exponential from base_ms, capped at
 * cap_ms, with jitter in [50 %, 100 %] drawn from `jitter` (0..1). A server's Retry-After
 * (seconds, -1 = none) raises the delay, still capped at retry_after_cap_ms.
 */
uint64_t http_backoff_ms(unsigned attempt, uint64_t base_ms, uint64_t cap_ms, double jitter,
                         int retry_after_s, uint64_t retry_after_cap_ms);

/* The backoff every retry uses: 200 ms doubling to 5 s (http_backoff_ms). */
#define HTTP_BACKOFF_BASE_MS 200
#define HTTP_BACKOFF_CAP_MS 5000

/* Whether an HTTP status asks to be tried again (5xx, 408, 429). */
bool http_status_is_transient(long code);

/* Whether a request that failed with curl's `res` may pass when tried again (no answer, a
 * cut, a timeout), rather than fail the same way (a bad URL, a refused redirect, TLS). */
bool http_curl_error_is_transient(int res);

/*
 * The schemes a redirect of a request for url may lead to, for CURLOPT_REDIR_PROTOCOLS_STR:
 * from https only https (a redirect may not drop TLS, nor make the downgraded URL the base
 * of a manifest's relative entries), from http either.
 */
const char *http_redirect_protocols(const char *url);

/*
 * Whether easy, asked for url, failed with `res` because a redirect led to a scheme
 * http_redirect_protocols(url) refuses (https to http, or off http(s): ftp:, file:...).
 * curl gives that the code of a garbled HTTP answer, which is transient; this one is not.
 */
bool http_redirected_off_scheme(void *easy, int res, const char *url);

#endif

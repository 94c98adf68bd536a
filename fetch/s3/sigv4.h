/*
 * AWS Signature Version 4 (header signing) for S3 GET/HEAD requests.
 *
 * Pure functions: no globals, no locks, no I/O, no logging; safe to call from any thread.
 * The caller passes the clock (`now`) so results are reproducible in tests.
 *
 * The caller describes the request with its *decoded* path and query parameters; the signer
 * percent-encodes them (RFC 3986 unreserved characters kept, everything else %XX upper-case)
 * and hands back the encoded path and query to put on the wire, so the bytes sent are always
 * the bytes signed. The S3 rules apply by default: one encoding pass, '/' kept in the path,
 * no removal of "." / ".." / empty segments (a key "a//b" or "." is signed as it is; set
 * curl's CURLOPT_PATH_AS_IS so curl does not squash them either). SIGV4_NORMALIZE_PATH gives
 * the generic-service rule of AWS's test suite instead (dot segments resolved, empty segments
 * dropped). Double encoding (other services' canonical URI) is not implemented.
 *
 * Secrets: the secret key and every key derived from it live only in local buffers that are
 * cleansed (OPENSSL_cleanse) before return. The results hold no secret key, but they hold
 * the session token when one is given (it is a signed header): never log canonical_request,
 * and sigv4_signed_free cleanses it.
 */
#ifndef SPOOLFS_FETCH_SIGV4_H
#define SPOOLFS_FETCH_SIGV4_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

/* Hex SHA-256 of the empty string: the payload hash of a GET or HEAD with no body. */
#define SIGV4_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
/* S3 also accepts this literal instead of a payload hash. */
#define SIGV4_UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"

/* Bounds on the inputs; larger inputs give -E2BIG. */
#define SIGV4_MAX_HEADERS 32
#define SIGV4_MAX_PARAMS 32
#define SIGV4_MAX_FIELD 8192 /* path, host, any header value, any parameter */

enum sigv4_flags {
	/* Sign and return x-amz-content-sha256 (S3 requires it on every request). */
	SIGV4_SIGN_CONTENT_SHA256 = 1u << 0,
	/* Resolve "." and "..", drop empty segments (generic services only; never for S3). */
	SIGV4_NORMALIZE_PATH = 1u << 1,
};
/* The flags for an S3 request. */
#define SIGV4_S3 SIGV4_SIGN_CONTENT_SHA256

/* An extra header to sign and send (e.g. "Range", "If-Match"). Names are case-insensitive. */
struct sigv4_header {
	const char *name;
	const char *value;
};

/* A decoded query parameter. value NULL is the same as "" (signed as "key="). */
struct sigv4_param {
	const char *key;
	const char *value;
};

struct sigv4_request {
	const char *method; /* "GET", "HEAD": upper-case letters */
	const char *host;   /* the Host header exactly as sent, with ":port" when curl sends one */
	const char *path;   /* decoded, starts with '/': "/bucket/dir/a b.txt" or "/a b.txt" */
	const struct sigv4_param *params; /* decoded query parameters, any order; may be NULL */
	size_t n_params;
	/*
	 * Headers to sign besides the ones the signer adds itself: host, x-amz-date,
	 * x-amz-content-sha256 (with SIGV4_SIGN_CONTENT_SHA256) and x-amz-security-token (with a
	 * session token). Passing one of those, or "authorization", is -EINVAL. A name given twice
	 * is signed as one header with the values joined by ',' in the order given: send it the
	 * same way. Values are signed trimmed, with inner runs of blanks collapsed.
	 */
	const struct sigv4_header *headers;
	size_t n_headers;
	const char *payload_hash; /* 64 lower-case hex digits or UNSIGNED-PAYLOAD; NULL = empty */
	const char *region;       /* "us-east-1" */
	const char *service;      /* "s3" */
	const char *access_key_id;
	const char *secret_access_key;
	const char *session_token; /* NULL or "" when none */
	time_t now;                /* the signing time (UTC seconds since the epoch) */
	unsigned flags;            /* enum sigv4_flags; SIGV4_S3 for S3 */
};

/*
 * A signed request. The caller sends `method path[?query]` with these headers added to
 * req->headers (and the Host it signed):
 *   Authorization: <authorization>
 *   x-amz-date: <amz_date>
 *   x-amz-content-sha256: <content_sha256>        (when SIGV4_SIGN_CONTENT_SHA256)
 *   x-amz-security-token: <the session token>     (when one was given)
 * Every pointer is malloc'd and owned by the struct: release with sigv4_signed_free.
 */
struct sigv4_signed {
	char amz_date[17];       /* "20150830T123600Z" */
	char content_sha256[65]; /* the payload hash as signed */
	char *
	    authorization; /* "AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=..." */
	char *path;        /* percent-encoded path to send */
	char *query;       /* encoded, sorted query to send without '?'; "" when none */
	char *canonical_request; /* for tests; contains the session token: never log it */
	char *string_to_sign;    /* for tests and debugging */
};

/*
 * Signs req. On success fills *out and returns 0; on failure returns -EINVAL (a missing or
 * malformed input: control characters or CR/LF in a header value, a bad header name, a path
 * not starting with '/', a reserved header), -E2BIG (over the bounds above), -ENOMEM or -EIO
 * (OpenSSL failed), and *out is left empty (safe to pass to sigv4_signed_free).
 */
int sigv4_sign(const struct sigv4_request *req, struct sigv4_signed *out);

/* Cleanses and frees everything in *s and zeroes it. NULL-safe and idempotent. */
void sigv4_signed_free(struct sigv4_signed *s);

/*
 * Encodes a decoded path and parameters the way sigv4_sign does, for unsigned requests
 * (--no-sign): *path_out is the encoded path, *query_out the sorted encoded query ("" when
 * none), both malloc'd for the caller. flags: SIGV4_NORMALIZE_PATH or 0. Returns 0, -EINVAL,
 * -E2BIG or -ENOMEM (then both are NULL).
 */
int sigv4_encode_target(const char *path, const struct sigv4_param *params, size_t n_params,
                        unsigned flags, char **path_out, char **query_out);

#endif

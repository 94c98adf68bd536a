/*
 * The S3 source: a bucket (and prefix) of an S3-compatible store as a lazy namespace.
 *
 * Directories are listed on demand with ListObjectsV2 (delimiter "/", encoding-type url,
 * following continuation tokens); objects are fetched by the transfer engine with GETs
 * this module signs (SigV4) and pins with If-Match to the ETag the listing showed.
 *
 * Thread-safety: after s3_source_open the source is immutable but for its credentials,
 * which its provider keeps fresh under the provider's own lock (creds_provider.h);
 * s3_source_list runs in any thread (each call has its own curl handle) and s3_source_sign
 * in the transfer thread. Credentials live only here; no function writes them to a log or
 * an error message.
 */
#ifndef SPOOLFS_FETCH_SOURCE_S3_H
#define SPOOLFS_FETCH_SOURCE_S3_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fetch/http/net.h"
#include "fetch/s3/sigv4.h"
#include "index/index.h"

struct s3_options {
	const char *source;   /* s3://BUCKET[/PREFIX] */
	const char *endpoint; /* NULL: $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, else AWS */
	const char *region;   /* NULL: $AWS_REGION, $AWS_DEFAULT_REGION, else us-east-1 */
	const char *profile;  /* --profile, or NULL */
	const char *role_arn; /* --role-arn, or NULL */
	const char *expected_bucket_owner; /* --expected-bucket-owner, or NULL */
	bool requester_pays;               /* --requester-pays */
	struct fetch_net net;
	bool path_style;            /* forced; a custom endpoint is always path-style */
	bool no_sign;               /* public bucket: send no credentials */
	unsigned request_timeout_s; /* whole listing request; 0: no limit, stalls only */
};

struct s3_source;

/* Parses the options and finds credentials (the chain, creds_chain.h). 0, or -errno with a
 * one-line message in err. */
int s3_source_open(const struct s3_options *opts, struct s3_source **out, char *err,
                   size_t err_len);
void s3_source_free(struct s3_source *src);

/* Starts the credentials' refresh thread (after any fork). 0 or -errno. */
int s3_source_start(struct s3_source *src);

/* For the engine: a request signed with credentials generation gen was refused as
 * expired (refresh now); the current generation. */
void s3_source_creds_expired(void *src, uint64_t gen);
uint64_t s3_source_creds_generation(void *src);

/* ExpiredToken, RequestExpired, InvalidToken, TokenRefreshRequired. */
bool s3_error_is_expired_creds(const char *code);

/* The URL of `key` under the source's prefix (a manifest in the bucket), encoded as it is
 * signed. 0 or -ENOMEM; *url is malloc'd. */
int s3_source_key_url(const struct s3_source *src, const char *key, char **url);

/* scheme://host[:port] of the endpoint: URLs there are the bucket's (or another's). */
const char *s3_source_origin(const struct s3_source *src);

/* Whether url is an object of this bucket (its host, and its path-style bucket): the only
 * URLs s3_source_sign signs. */
bool s3_source_owns_url(const struct s3_source *src, const char *url);

/* "s3://bucket/prefix" without credentials, for fsname and logs. */
const char *s3_source_display(const struct s3_source *src);

/*
 * Lists directory `rel_dir` of the mount ("" for the root, else "a/b" without slashes at
 * the ends) into dir_ino of idx, in one index transaction. Keys that cannot be file names
 * (empty, ".", ".." segments, names over 255 bytes, "dir/" markers) are skipped; a key that
 * is both an object and a prefix shows as the directory. Returns 0, or -errno with a
 * one-line message in err: -EACCES (access denied, bad credentials), -ENOENT (no such
 * bucket), -EXDEV (wrong region; the message names the right one), -EHOSTUNREACH (the
 * endpoint cannot be reached), -EIO (anything else).
 */
int s3_source_list(struct s3_source *src, const char *rel_dir, struct index *idx, uint64_t dir_ino,
                   char *err, size_t err_len);

/*
 * Appends the headers a GET of `url` (an object URL made by this source) needs: the SigV4
 * Authorization, x-amz-date, x-amz-content-sha256, the session token, and
 * x-amz-checksum-mode so the response carries the object's SHA-256 when S3 has one.
 * With --requester-pays and --expected-bucket-owner, their headers too. *gen gets the
 * credentials' generation (0 unsigned). 0 or -errno. The transfer engine calls it before
 * every attempt (signatures expire). A URL that is not this bucket's (s3_source_owns_url)
 * gets no header at all.
 */
int s3_source_sign(void *src, const char *url, struct curl_slist **headers, uint64_t *gen);

/* The most headers s3_source_request signs besides its own. */
#define S3_SOURCE_MAX_HEADERS 6

/*
 * Signs (or with --no-sign only encodes) a request for the writing side (`spoolfs
 * publish`): method on key under the source's prefix ("objects/ab/ab12..."), or on the
 * bucket itself when key is NULL (a listing: pass its "prefix" parameter whole, see
 * s3_source_prefix). headers (at most S3_SOURCE_MAX_HEADERS) are signed and appended to
 * *headers with the signature's own; payload_hash is the body's hex sha256 (NULL: none).
 * *url is malloc'd. 0, -E2BIG, -EINVAL or -ENOMEM.
 */
int s3_source_request(struct s3_source *src, const char *method, const char *key,
                      const struct sigv4_param *params, size_t n_params,
                      const struct sigv4_header *headers, size_t n_headers,
                      const char *payload_hash, char **url, struct curl_slist **out);

/* "" or "a/b/": the prefix keys of the source start with. */
const char *s3_source_prefix(const struct s3_source *src);
/* The network options every request of the source uses (for fetch_net_apply). */
const struct fetch_net *s3_source_net(const struct s3_source *src);

#endif

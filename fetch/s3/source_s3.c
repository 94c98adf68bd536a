/*
 * The S3 source (see source_s3.h). Listing is a blocking curl easy transfer in the calling
 * thread: it runs at mount time and when a directory is first looked up, never for data.
 */
#include "fetch/s3/source_s3.h"

#include <ctype.h>
#include <openssl/crypto.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "fetch/http/http.h"
#include "util/log.h"
#include "fetch/s3/creds_chain.h"
#include "fetch/s3/creds_provider.h"
#include "fetch/s3/s3_creds.h"
#include "fetch/s3/s3_list.h"
#include "fetch/s3/sigv4.h"

/* Bounds on what one directory listing may hold: memory is bounded, pages are followed. */
#define LIST_MAX_PAGES 10000
/* A shorter cap on what Retry-After may ask of a listing than of a download: a lookup
 * waits for it. */
#define LIST_RETRY_AFTER_CAP_MS 10000
#define SKIPPED_LOG_MAX 10

struct s3_source {
	char *bucket;
	char *prefix; /* "" or "a/b/" */
	char *base;   /* scheme://host[:port] */
	char *host;   /* the Host header curl sends */
	char *region;
	char *display; /* s3://bucket/prefix */
	char *ca_file;
	char *proxy;
	struct fetch_net net; /* points into ca_file and proxy */
	bool path_style;
	bool sign;
	unsigned request_timeout_s;
	struct s3_provider *provider; /* NULL with --no-sign; has its own lock */
	/* Headers every request carries and signs: x-amz-request-payer (--requester-pays),
	 * x-amz-expected-bucket-owner (--expected-bucket-owner). */
	struct sigv4_header always[2];
	size_t n_always;
	char *expected_owner;
};

/* Answers that mean the request's credentials expired or were revoked: refreshed once and
 * sent again, not counted as a failure. */
bool s3_error_is_expired_creds(const char *code)
{
	return strcmp(code, "ExpiredToken") == 0 || strcmp(code, "RequestExpired") == 0 ||
	       strcmp(code, "InvalidToken") == 0 || strcmp(code, "TokenRefreshRequired") == 0;
}

/* A listing waits this long for credentials refreshed after such an answer. */
#define LIST_REFRESH_WAIT_MS 30000

static const char *first_env(const char *a, const char *b)
{
	const char *v = getenv(a);

	if (v && *v)
		return v;
	v = b ? getenv(b) : NULL;
	return v && *v ? v : NULL;
}

static int parse_source(struct s3_source *src, const char *source, char *err, size_t err_len)
{
	const char *rest = source + 5, *slash;
	size_t bucket_len, prefix_len;

	slash = strchr(rest, '/');
	bucket_len = slash ? (size_t)(slash - rest) : strlen(rest);
	if (bucket_len == 0 || bucket_len > 255) {
		snprintf(err, err_len, "bad S3 source %s: expected s3://BUCKET[/PREFIX]", source);
		return -EINVAL;
	}
	for (size_t i = 0; i < bucket_len; i++) {
		if (!isalnum((unsigned char)rest[i]) && !strchr(".-_", rest[i])) {
			snprintf(err, err_len, "bad S3 bucket name in %s", source);
			return -EINVAL;
		}
	}
	src->bucket = strndup(rest, bucket_len);
	rest = slash ? slash + 1 : "";
	while (*rest == '/')
		rest++;
	prefix_len = strlen(rest);
	while (prefix_len > 0 && rest[prefix_len - 1] == '/')
		prefix_len--;
	if (asprintf(&src->prefix, "%.*s%s", (int)prefix_len, rest, prefix_len ? "/" : "") < 0)
		src->prefix = NULL;
	if (asprintf(&src->display, "s3://%s/%s", src->bucket ? src->bucket : "",
	             src->prefix ? src->prefix : "") < 0)
		src->display = NULL;
	return src->bucket && src->prefix && src->display ? 0 : -ENOMEM;
}

int s3_source_open(const struct s3_options *opts, struct s3_source **out, char *err, size_t err_len)
{
	struct s3_source *src = calloc(1, sizeof(*src));
	const char *endpoint, *region;
	int rc = -ENOMEM;

	*out = NULL;
	if (!src)
		goto fail;
	rc = parse_source(src, opts->source, err, err_len);
	if (rc)
		goto fail;
	region = opts->region ? opts->region : first_env("AWS_REGION", "AWS_DEFAULT_REGION");
	src->region = strdup(region ? region : "us-east-1");
	endpoint =
	    opts->endpoint ? opts->endpoint : first_env("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL");
	if (endpoint) {
		size_t len = strlen(endpoint);
		while (len > 0 && endpoint[len - 1] == '/')
			len--;
		src->base = strndup(endpoint, len);
		src->path_style = true;
	} else if (opts->path_style || strchr(src->bucket, '.')) {
		/* Dotted bucket names break the wildcard certificate of virtual hosts. */
		rc = asprintf(&src->base, "https://s3.%s.amazonaws.com", src->region);
		if (rc < 0)
			src->base = NULL;
		src->path_style = true;
	} else {
		rc = asprintf(&src->base, "https://%s.s3.%s.amazonaws.com", src->bucket,
		              src->region);
		if (rc < 0)
			src->base = NULL;
	}
	rc = -ENOMEM;
	if (!src->region || !src->base)
		goto fail;
	if (strncmp(src->base, "http://", 7) != 0 && strncmp(src->base, "https://", 8) != 0) {
		snprintf(err, err_len, "bad S3 endpoint %s: expected http:// or https://",
		         src->base);
		rc = -EINVAL;
		goto fail;
	}
	rc = fetch_net_host_header(src->base, &src->host);
	if (rc) {
		snprintf(err, err_len, "bad S3 endpoint %s", src->base);
		goto fail;
	}
	src->ca_file = opts->net.ca_file ? strdup(opts->net.ca_file) : NULL;
	src->proxy = opts->net.proxy ? strdup(opts->net.proxy) : NULL;
	src->net = (struct fetch_net){
	    .ca_file = src->ca_file,
	    .proxy = src->proxy,
	    .connect_timeout_s = opts->net.connect_timeout_s ? opts->net.connect_timeout_s : 10,
	    .stall_timeout_s = opts->net.stall_timeout_s ? opts->net.stall_timeout_s : 30,
	    .max_tries = opts->net.max_tries ? opts->net.max_tries : 6};
	src->request_timeout_s = opts->request_timeout_s; /* 0: none, the stall rule only */
	src->sign = !opts->no_sign;
	if (opts->requester_pays)
		src->always[src->n_always++] =
		    (struct sigv4_header){"x-amz-request-payer", "requester"};
	if (opts->expected_bucket_owner) {
		src->expected_owner = strdup(opts->expected_bucket_owner);
		if (!src->expected_owner)
			goto fail;
		src->always[src->n_always++] =
		    (struct sigv4_header){"x-amz-expected-bucket-owner", src->expected_owner};
	}
	if (src->sign) {
		struct creds_chain_options co = {.profile = opts->profile,
		                                 .role_arn = opts->role_arn,
		                                 .region = opts->region,
		                                 .net = src->net};
		struct creds_chain *chain = NULL;
		rc = creds_chain_create(&co, &chain, err, err_len);
		if (rc == 0)
			rc = s3_provider_open(chain, &src->provider, err, err_len);
		if (rc == -ENOENT) {
			char why[400];
			snprintf(why, sizeof(why), "%s", err);
			snprintf(
			    err, err_len,
			    "no S3 credentials (%s); set AWS_ACCESS_KEY_ID and "
			    "AWS_SECRET_ACCESS_KEY, a profile, or --role-arn, or use --no-sign "
			    "for a public bucket",
			    why);
		}
		if (rc)
			goto fail;
		/* Signing keeps the secret key off the wire, not the session token, and not
		 * what an observer may do with a request it saw (replay it for 15 minutes). */
		char shown[512];
		struct s3_creds now = {0};
		uint64_t gen;
		if (strncasecmp(src->base, "http://", 7) == 0 &&
		    s3_provider_get(src->provider, &now, &gen) == 0)
			util_log(UTIL_LOG_WARN,
			         "S3 endpoint %s is plain http: signed requests%s and every object"
			         " travel unencrypted; use https",
			         util_redact_url(src->base, shown, sizeof(shown)),
			         now.session_token && now.session_token[0]
			             ? ", the session token in them,"
			             : "");
		s3_creds_free(&now);
	}
	*out = src;
	return 0;
fail:
	s3_source_free(src);
	return rc;
}

void s3_source_free(struct s3_source *src)
{
	if (!src)
		return;
	s3_provider_free(src->provider);
	free(src->expected_owner);
	free(src->bucket);
	free(src->prefix);
	free(src->base);
	free(src->host);
	free(src->region);
	free(src->display);
	free(src->ca_file);
	free(src->proxy);
	free(src);
}

int s3_source_start(struct s3_source *src)
{
	return src->provider ? s3_provider_start(src->provider) : 0;
}

void s3_source_creds_expired(void *ctx, uint64_t gen)
{
	struct s3_source *src = ctx;

	if (src->provider && gen)
		s3_provider_expired(src->provider, gen);
}

uint64_t s3_source_creds_generation(void *ctx)
{
	struct s3_source *src = ctx;

	return src->provider ? s3_provider_generation(src->provider) : 0;
}

const char *s3_source_display(const struct s3_source *src)
{
	return src->display;
}

/*
 * Signs (or, with --no-sign, only encodes) a GET of path?params; *url gets the URL and
 * *gen the generation of the credentials it was signed with (0 unsigned). The credentials
 * are a copy taken under the provider's lock: nothing is held while signing.
 */
static int prepare_method(struct s3_source *src, const char *method, const char *path,
                          const struct sigv4_param *params, size_t n_params,
                          const struct sigv4_header *given, size_t n_given,
                          const char *payload_hash, char **url, struct curl_slist **headers,
                          uint64_t *gen)
{
	struct sigv4_header extra[S3_SOURCE_MAX_HEADERS + 2];
	struct sigv4_signed sig = {0};
	struct s3_creds creds = {0};
	char *enc_path = NULL, *query = NULL, line[8300];
	size_t n_extra = 0;
	int rc;

	*gen = 0;
	if (n_given > S3_SOURCE_MAX_HEADERS)
		return -E2BIG;
	for (size_t i = 0; i < n_given; i++)
		extra[n_extra++] = given[i];
	for (size_t i = 0; i < src->n_always; i++)
		extra[n_extra++] = src->always[i];
	if (!src->sign) {
		rc = sigv4_encode_target(path, params, n_params, 0, &enc_path, &query);
		if (rc)
			goto out;
	} else {
		rc = s3_provider_get(src->provider, &creds, gen);
		if (rc)
			goto out;
		struct sigv4_request req = {
		    .method = method,
		    .host = src->host,
		    .path = path,
		    .params = params,
		    .n_params = n_params,
		    .headers = extra,
		    .n_headers = n_extra,
		    .payload_hash = payload_hash,
		    .region = src->region,
		    .service = "s3",
		    .access_key_id = creds.access_key_id,
		    .secret_access_key = creds.secret_access_key,
		    .session_token = creds.session_token,
		    .now = time(NULL),
		    .flags = SIGV4_S3,
		};
		rc = sigv4_sign(&req, &sig);
		if (rc)
			goto out;
		enc_path = sig.path;
		query = sig.query;
		sig.path = sig.query = NULL;
		const char *pairs[][2] = {
		    {"Authorization", sig.authorization},
		    {"x-amz-date", sig.amz_date},
		    {"x-amz-content-sha256", sig.content_sha256},
		    {"x-amz-security-token", creds.session_token},
		};
		for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
			if (!pairs[i][1] || !*pairs[i][1])
				continue;
			snprintf(line, sizeof(line), "%s: %s", pairs[i][0], pairs[i][1]);
			struct curl_slist *next = curl_slist_append(*headers, line);
			if (!next) {
				rc = -ENOMEM;
				goto out;
			}
			*headers = next;
		}
	}
	for (size_t i = 0; i < n_extra; i++) {
		snprintf(line, sizeof(line), "%s: %s", extra[i].name, extra[i].value);
		struct curl_slist *next = curl_slist_append(*headers, line);
		if (!next) {
			rc = -ENOMEM;
			goto out;
		}
		*headers = next;
	}
	rc = asprintf(url, "%s%s%s%s", src->base, enc_path, *query ? "?" : "", query) < 0 ? -ENOMEM
	                                                                                  : 0;
out:
	OPENSSL_cleanse(line, sizeof(line));
	sigv4_signed_free(&sig);
	s3_creds_free(&creds);
	free(enc_path);
	free(query);
	return rc;
}

static int prepare_request(struct s3_source *src, const char *path,
                           const struct sigv4_param *params, size_t n_params,
                           const struct sigv4_header *given, size_t n_given, char **url,
                           struct curl_slist **headers, uint64_t *gen)
{
	return prepare_method(src, "GET", path, params, n_params, given, n_given,
	                      SIGV4_EMPTY_SHA256, url, headers, gen);
}

int s3_source_request(struct s3_source *src, const char *method, const char *key,
                      const struct sigv4_param *params, size_t n_params,
                      const struct sigv4_header *given, size_t n_given, const char *payload_hash,
                      char **url, struct curl_slist **headers)
{
	char *path = NULL;
	uint64_t gen;
	int rc;

	*url = NULL;
	if (!key)
		rc = asprintf(&path, src->path_style ? "/%s" : "/", src->bucket);
	else if (src->path_style)
		rc = asprintf(&path, "/%s/%s%s", src->bucket, src->prefix, key);
	else
		rc = asprintf(&path, "/%s%s", src->prefix, key);
	if (rc < 0)
		return -ENOMEM;
	rc = prepare_method(src, method, path, params, n_params, given, n_given,
	                    payload_hash ? payload_hash : SIGV4_EMPTY_SHA256, url, headers, &gen);
	free(path);
	return rc;
}

const char *s3_source_prefix(const struct s3_source *src)
{
	return src->prefix;
}

const struct fetch_net *s3_source_net(const struct s3_source *src)
{
	return &src->net;
}

bool s3_source_owns_url(const struct s3_source *src, const char *url)
{
	size_t n = strlen(src->base);

	if (strncmp(url, src->base, n) != 0 || url[n] != '/')
		return false;
	if (!src->path_style)
		return true; /* the bucket is the host */
	size_t b = strlen(src->bucket);
	return strncmp(url + n + 1, src->bucket, b) == 0 && url[n + 1 + b] == '/';
}

int s3_source_sign(void *ctx, const char *url, struct curl_slist **headers, uint64_t *gen)
{
	struct s3_source *src = ctx;
	static const struct sigv4_header checksum = {"x-amz-checksum-mode", "ENABLED"};
	CURLU *u = NULL;
	char *path = NULL, *key_path = NULL, *signed_url = NULL;
	int len = 0, rc = -EINVAL;

	/* A manifest in the bucket may name objects elsewhere: those go unsigned. A signature
	 * is for its host alone, but the key id and session token would still reach it. */
	*gen = 0;
	if (!s3_source_owns_url(src, url))
		return 0;
	u = curl_url();
	if (!u)
		return -ENOMEM;
	if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_PATH, &path, 0) != CURLUE_OK)
		goto out;
	/* Not CURLU_URLDECODE: it refuses control bytes, which an S3 key (and a file name) may
	 * hold. Only a NUL cannot be in either. */
	key_path = curl_easy_unescape(NULL, path, 0, &len);
	if (!key_path)
		rc = -ENOMEM;
	if (!key_path || memchr(key_path, '\0', (size_t)len))
		goto out;
	rc = prepare_request(src, key_path, NULL, 0, &checksum, 1, &signed_url, headers, gen);
out:
	curl_free(key_path);
	curl_free(path);
	free(signed_url);
	curl_url_cleanup(u);
	return rc;
}

/* The object URL for key: the path is encoded exactly as it is signed. */
static int object_url(const struct s3_source *src, const char *key, char **url)
{
	char *path = NULL, *enc_path = NULL, *query = NULL;
	int rc;

	if (src->path_style)
		rc = asprintf(&path, "/%s/%s", src->bucket, key);
	else
		rc = asprintf(&path, "/%s", key);
	if (rc < 0)
		return -ENOMEM;
	rc = sigv4_encode_target(path, NULL, 0, 0, &enc_path, &query);
	if (rc == 0)
		rc = asprintf(url, "%s%s", src->base, enc_path) < 0 ? -ENOMEM : 0;
	free(path);
	free(enc_path);
	free(query);
	return rc;
}

int s3_source_key_url(const struct s3_source *src, const char *key, char **url)
{
	char *full = NULL;
	int rc;

	*url = NULL;
	if (asprintf(&full, "%s%s", src->prefix, key) < 0)
		return -ENOMEM;
	rc = object_url(src, full, url);
	free(full);
	return rc;
}

const char *s3_source_origin(const struct s3_source *src)
{
	return src->base;
}

struct body {
	struct s3_list_parser *parser;
	int feed_rc;
	char region_header[64];
	struct http_response resp; /* for Retry-After */
};

static size_t on_list_body(char *data, size_t size, size_t nmemb, void *userdata)
{
	struct body *b = userdata;

	if (b->feed_rc == 0)
		b->feed_rc = s3_list_parser_feed(b->parser, data, size * nmemb);
	/* A page that cannot be parsed, or is past its bound, ends here: a server that goes
	 * on sending after garbage is not read to its end (a short count stops curl). */
	return b->feed_rc ? CURL_WRITEFUNC_ERROR : size * nmemb;
}

static size_t on_list_header(char *line, size_t size, size_t nitems, void *userdata)
{
	struct body *b = userdata;
	size_t len = size * nitems;

	http_response_header(&b->resp, line, len);
	if (len > 19 && strncasecmp(line, "x-amz-bucket-region:", 20) == 0) {
		const char *v = line + 20;
		while (*v == ' ')
			v++;
		size_t n = strcspn(v, "\r\n");
		snprintf(b->region_header, sizeof(b->region_header), "%.*s", (int)n, v);
	}
	return len;
}

/* Turns a failed listing into one line and an errno. */
static int list_error(struct s3_source *src, const char *prefix, long code,
                      const struct s3_error *e, const char *region_header, char *err,
                      size_t err_len)
{
	const char *region = e->region[0] ? e->region : region_header;

	if ((code == 301 || code == 400 || strcmp(e->code, "PermanentRedirect") == 0 ||
	     strcmp(e->code, "AuthorizationHeaderMalformed") == 0) &&
	    region[0] && strcmp(region, src->region) != 0) {
		snprintf(err, err_len, "bucket %s is in region %s, not %s: use --region %s",
		         src->bucket, region, src->region, region);
		return -EXDEV;
	}
	if (code == 403 || strcmp(e->code, "AccessDenied") == 0 ||
	    strcmp(e->code, "InvalidAccessKeyId") == 0 ||
	    strcmp(e->code, "SignatureDoesNotMatch") == 0) {
		snprintf(err, err_len, "access denied to %s (%s%s%s)", src->display,
		         e->code[0] ? e->code : "HTTP 403", e->message[0] ? ": " : "", e->message);
		return -EACCES;
	}
	if (strcmp(e->code, "NoSuchBucket") == 0 || (code == 404 && !e->code[0])) {
		snprintf(err, err_len, "no such bucket: %s", src->bucket);
		return -ENOENT;
	}
	/* The directory listed, not the mount's root: retries of one name it. */
	snprintf(err, err_len, "listing s3://%s/%s failed: HTTP %ld%s%s%s%s", src->bucket, prefix,
	         code, e->code[0] ? " " : "", e->code, e->message[0] ? ": " : "", e->message);
	return -EIO;
}

/*
 * One ListObjectsV2 request for a page of `prefix`. On failure, *retry_after_s is -1 when
 * trying again cannot help, else the delay the server asked for (0: none).
 */
static int list_page_once(struct s3_source *src, const char *prefix, const char *token,
                          struct s3_list_result *result, int *retry_after_s, uint64_t *gen,
                          bool *expired, char *err, size_t err_len)
{
	struct sigv4_param params[5] = {
	    {"list-type", "2"}, {"prefix", prefix}, {"delimiter", "/"}, {"encoding-type", "url"}};
	size_t n_params = 4;
	struct curl_slist *headers = NULL;
	struct body b = {0};
	struct fetch_net_guard guard;
	char *path = NULL, *url = NULL, errbuf[CURL_ERROR_SIZE] = "";
	CURL *easy = NULL;
	long code = 0;
	CURLcode res;
	int rc;

	*retry_after_s = -1;
	*expired = false;
	http_response_reset(&b.resp);
	if (token)
		params[n_params++] = (struct sigv4_param){"continuation-token", token};
	rc = asprintf(&path, src->path_style ? "/%s" : "/", src->bucket) < 0 ? -ENOMEM : 0;
	if (rc == 0)
		rc = prepare_request(src, path, params, n_params, NULL, 0, &url, &headers, gen);
	if (rc == 0)
		rc = s3_list_parser_new(NULL, &b.parser);
	if (rc) {
		snprintf(err, err_len, "cannot prepare the listing request: %s", strerror(-rc));
		goto out;
	}
	easy = curl_easy_init();
	if (!easy) {
		rc = -ENOMEM;
		goto out;
	}
	curl_easy_setopt(easy, CURLOPT_URL, url);
	fetch_net_apply(easy, &src->net, &guard);
	curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(easy, CURLOPT_PATH_AS_IS, 1L);
	curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_list_body);
	curl_easy_setopt(easy, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, on_list_header);
	curl_easy_setopt(easy, CURLOPT_HEADERDATA, &b);
	curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, errbuf);

	/* A page that keeps coming, however slowly, is not cut: stalls end it (net.c). */
	if (src->request_timeout_s)
		curl_easy_setopt(easy, CURLOPT_TIMEOUT, (long)src->request_timeout_s);

	res = curl_easy_perform(easy);
	curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &code);
	if (res != CURLE_OK && guard.refused) {
		snprintf(err, err_len, "cannot reach S3 endpoint %s: %s", src->base, guard.why);
		rc = -EACCES;
		goto out;
	}
	/* Cut by on_list_body: the body, not the connection, is at fault; said below. */
	if (res == CURLE_WRITE_ERROR && b.feed_rc)
		res = CURLE_OK;
	if (res != CURLE_OK) {
		snprintf(err, err_len, "cannot reach S3 endpoint %s: %s", src->base,
		         errbuf[0] ? errbuf : curl_easy_strerror(res));
		bool untrusted =
		    res == CURLE_PEER_FAILED_VERIFICATION || res == CURLE_SSL_CACERT_BADFILE;
		rc = untrusted ? -EACCES : -EHOSTUNREACH;
		*retry_after_s = http_curl_error_is_transient(res) ? 0 : -1;
		goto out;
	}
	rc = b.feed_rc ? b.feed_rc : s3_list_parser_finish(b.parser, result);
	if (http_status_is_transient(code))
		*retry_after_s = b.resp.retry_after_s > 0 ? b.resp.retry_after_s : 0;
	*expired = code != 200 && rc == 0 && result->kind == S3_DOC_ERROR && src->sign &&
	           s3_error_is_expired_creds(result->error.code);
	if (code != 200) {
		struct s3_error none = {0};
		rc = list_error(src, prefix, code,
		                rc == 0 && result->kind == S3_DOC_ERROR ? &result->error : &none,
		                b.region_header, err, err_len);
		goto out;
	}
	if (rc || result->kind != S3_DOC_LIST) {
		snprintf(err, err_len, "bad listing from %s: %s", src->display,
		         rc ? s3_list_parser_errmsg(b.parser) : "not a ListBucketResult");
		rc = -EIO;
	}
out:
	if (rc)
		s3_list_result_free(result);
	curl_easy_cleanup(easy);
	curl_slist_free_all(headers);
	s3_list_parser_free(b.parser);
	free(url);
	free(path);
	return rc;
}

/*
 * One page of `prefix`, tried again with backoff while it fails transiently (no answer,
 * a stall, 5xx, 408, 429: S3 asks clients to retry its 503 SlowDown), as downloads are.
 * The caller is a lookup or the mount, which wait for it: a few seconds at most by
 * default, and --retries bounds it.
 */
static int list_page(struct s3_source *src, const char *prefix, const char *token,
                     struct s3_list_result *result, char *err, size_t err_len)
{
	int rc, retry_after_s;
	uint64_t gen = 0;
	bool refreshed = false, expired = false;

	for (unsigned attempt = 1;; attempt++) {
		rc = list_page_once(src, prefix, token, result, &retry_after_s, &gen, &expired, err,
		                    err_len);
		/* Credentials refused as expired: once, wait for fresh ones and send it again,
		 * without counting a try. */
		if (rc && expired && !refreshed) {
			refreshed = true;
			attempt--;
			util_log(UTIL_LOG_INFO, "%s; sending it again with fresh credentials", err);
			if (s3_provider_wait_newer(src->provider, gen, LIST_REFRESH_WAIT_MS))
				continue;
		}
		if (rc == 0 || rc == -EACCES ||
		    !fetch_net_retry_wait(&src->net, attempt, retry_after_s,
		                          LIST_RETRY_AFTER_CAP_MS, err))
			break;
	}
	return rc;
}

struct listing {
	struct index_entry *entries;
	char **owned; /* strings the entries point to */
	size_t n;
	size_t cap;
	size_t n_owned;
	size_t cap_owned;
	unsigned skipped;
	bool root; /* the mount's root: one more name is taken */
};

static char *own(struct listing *l, char *str)
{
	if (!str)
		return NULL;
	if (l->n_owned == l->cap_owned) {
		size_t cap = l->cap_owned ? 2 * l->cap_owned : 64;
		char **v = realloc(l->owned, cap * sizeof(*v));
		if (!v) {
			free(str);
			return NULL;
		}
		l->owned = v;
		l->cap_owned = cap;
	}
	return l->owned[l->n_owned++] = str;
}

static void skip(struct listing *l, const char *key, const char *why)
{
	if (l->skipped++ < SKIPPED_LOG_MAX)
		util_log(UTIL_LOG_INFO, "S3 key \"%s\" is not shown: %s", key, why);
}

/* Adds the entry for `name` (relative to the listed prefix). -ENOMEM only. */
static int add_entry(struct listing *l, const char *key, const char *name, size_t name_len,
                     const struct index_entry *proto)
{
	const char *bad = name_len == 0 ? "it is a directory marker or has an empty segment"
	                  : l->root     ? index_check_root_segment(name, name_len)
	                                : index_check_segment(name, name_len);

	if (bad) {
		skip(l, key, bad);
		return 0;
	}
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 256;
		struct index_entry *v = realloc(l->entries, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		l->entries = v;
		l->cap = cap;
	}
	struct index_entry *e = &l->entries[l->n];
	*e = *proto;
	e->name = own(l, strndup(name, name_len));
	if (!e->name)
		return -ENOMEM;
	l->n++;
	return 0;
}

static void listing_free(struct listing *l)
{
	for (size_t i = 0; i < l->n_owned; i++)
		free(l->owned[i]);
	free(l->owned);
	free(l->entries);
}

/* Directories first: a name that is both an object and a prefix shows as the directory. */
static int collect(struct s3_source *src, struct listing *dirs, struct listing *files,
                   const char *prefix, const struct s3_list_page *page)
{
	size_t plen = strlen(prefix);
	int rc = 0;

	if (page->n_unnamable) {
		char why[160];
		snprintf(why, sizeof(why),
		         "it holds a NUL byte (%%00), which no file name can"
		         " (%zu such key(s) on this page)",
		         page->n_unnamable);
		skip(files, page->first_unnamable, why);
	}
	for (size_t i = 0; i < page->n_prefixes && rc == 0; i++) {
		const char *p = page->prefixes[i];
		size_t len = strlen(p);
		struct index_entry proto = {.is_dir = true};
		if (len < plen || strncmp(p, prefix, plen) != 0 || p[len - 1] != '/') {
			skip(dirs, p, "outside the listed prefix");
			continue;
		}
		if (len == plen) {
			skip(dirs, p, "the listed prefix itself");
			continue;
		}
		rc = add_entry(dirs, p, p + plen, len - plen - 1, &proto);
	}
	for (size_t i = 0; i < page->n_objects && rc == 0; i++) {
		const struct s3_object *o = &page->objects[i];
		size_t len = strlen(o->key);
		char *url = NULL;
		if (len < plen || strncmp(o->key, prefix, plen) != 0) {
			skip(files, o->key, "outside the listed prefix");
			continue;
		}
		if (memchr(o->key + plen, '/', len - plen)) {
			/* Under a delimiter listing only a "dir/" marker ends in '/'; a server that
			 * ignored the delimiter lists deeper keys here too. */
			skip(files, o->key,
			     o->key[len - 1] == '/' && !memchr(o->key + plen, '/', len - plen - 1)
			         ? "it is a directory marker"
			         : "it lies below the listed directory (the server ignored the"
			           " delimiter)");
			continue;
		}
		rc = object_url(src, o->key, &url);
		if (rc)
			break;
		struct index_entry proto = {.size = o->size, .mtime = o->mtime};
		proto.url = own(files, url);
		proto.etag = own(files, strdup(o->etag));
		if (!proto.url || !proto.etag)
			return -ENOMEM;
		rc = add_entry(files, o->key, o->key + plen, len - plen, &proto);
	}
	return rc;
}

/* An object named like a prefix shows as the directory; say so, as for other hidden keys. */
static void log_shadowed(struct listing *dirs, struct listing *files, const char *prefix)
{
	char key[S3_KEY_MAX + 1];

	for (size_t i = 0; i < files->n; i++) {
		for (size_t j = 0; j < dirs->n; j++) {
			if (strcmp(files->entries[i].name, dirs->entries[j].name) == 0) {
				snprintf(key, sizeof(key), "%s%s", prefix, files->entries[i].name);
				skip(files, key,
				     "a prefix of the same name is shown as a directory");
				break;
			}
		}
	}
}

int s3_source_list(struct s3_source *src, const char *rel_dir, struct index *idx, uint64_t dir_ino,
                   char *err, size_t err_len)
{
	struct listing dirs = {.root = !*rel_dir}, files = {.root = !*rel_dir};
	struct index_entry *all = NULL;
	char *prefix = NULL, *token = NULL;
	int rc;

	if (asprintf(&prefix, "%s%s%s", src->prefix, rel_dir, *rel_dir ? "/" : "") < 0) {
		prefix = NULL;
		rc = -ENOMEM;
		goto out;
	}
	for (unsigned page_no = 0;; page_no++) {
		struct s3_list_result result = {0};
		if (page_no == LIST_MAX_PAGES) {
			snprintf(err, err_len, "listing %s%s has more than %u pages", src->display,
			         rel_dir, LIST_MAX_PAGES);
			rc = -E2BIG;
			goto out;
		}
		rc = list_page(src, prefix, token, &result, err, err_len);
		if (rc)
			goto out;
		rc = collect(src, &dirs, &files, prefix, &result.page);
		char *asked = token;
		token = NULL;
		if (rc == 0 && result.page.is_truncated) {
			if (!result.page.next_token) {
				snprintf(err, err_len, "listing %s is truncated without a token",
				         src->display);
				rc = -EIO;
			} else if (asked && strcmp(asked, result.page.next_token) == 0) {
				/* The same page again and again until the page limit: a loop. */
				snprintf(err, err_len,
				         "listing %s%s repeats its continuation token: the server "
				         "would send the same page for ever",
				         src->display, rel_dir);
				rc = -EIO;
			} else if (!(token = strdup(result.page.next_token))) {
				rc = -ENOMEM;
			}
		}
		free(asked);
		bool more = result.page.is_truncated;
		s3_list_result_free(&result);
		if (rc)
			goto out;
		if (!more)
			break;
	}
	all = malloc((dirs.n + files.n + 1) * sizeof(*all));
	if (!all) {
		rc = -ENOMEM;
		goto out;
	}
	if (dirs.n)
		memcpy(all, dirs.entries, dirs.n * sizeof(*all));
	if (files.n)
		memcpy(all + dirs.n, files.entries, files.n * sizeof(*all));
	log_shadowed(&dirs, &files, prefix);
	rc = index_add_listing(idx, dir_ino, all, dirs.n + files.n);
	if (rc)
		snprintf(err, err_len, "cannot record the listing of %s%s: %s", src->display,
		         rel_dir, strerror(-rc));
	if (dirs.skipped + files.skipped > SKIPPED_LOG_MAX)
		util_log(UTIL_LOG_INFO, "%u keys under %s%s are not shown",
		         dirs.skipped + files.skipped, src->display, rel_dir);
out:
	if (rc == -ENOMEM && err[0] == '\0')
		snprintf(err, err_len, "out of memory listing %s", src->display);
	free(all);
	free(token);
	free(prefix);
	listing_free(&dirs);
	listing_free(&files);
	return rc;
}

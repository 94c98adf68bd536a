/*
 * Unit tests for fetch/s3/sigv4.h: AWS's published SigV4 test suite (tests/unit/sigv4-vectors/,
 * see the README there), the S3 GetObject example with a Range header from the S3 docs, S3 path
 * and query encoding, and rejection of bad input.
 *
 * The vector directory is SIGV4_VECTORS_DIR (compile-time, an absolute path is best), or the
 * environment variable of the same name, which wins.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fetch/s3/sigv4.h"
#include "helpers.h"

#ifndef SIGV4_VECTORS_DIR
#define SIGV4_VECTORS_DIR "tests/unit/sigv4-vectors"
#endif

#define SUITE_KEY_ID "AKIDEXAMPLE"
#define SUITE_SECRET "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
#define SUITE_TIME ((time_t)1440938160) /* 2015-08-30T12:36:00Z */

static const char *vectors_dir(void)
{
	const char *env = getenv("SIGV4_VECTORS_DIR");
	return env && *env ? env : SIGV4_VECTORS_DIR;
}

/* Reads dir/name/file whole, NUL-terminated. Fails the test when missing. */
static char *read_vector(const char *name, const char *file)
{
	char path[1024];
	FILE *f;
	char *buf;
	long len;

	snprintf(path, sizeof(path), "%s/%s/%s", vectors_dir(), name, file);
	f = fopen(path, "rb");
	if (!f)
		fail_msg("cannot open %s (set SIGV4_VECTORS_DIR)", path);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	len = ftell(f);
	assert_true(len >= 0);
	assert_int_equal(fseek(f, 0, SEEK_SET), 0);
	buf = malloc((size_t)len + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
	buf[len] = '\0';
	fclose(f);
	return buf;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Percent-decodes s in place (the suite's query strings are partly pre-encoded). */
static void pct_decode(char *s)
{
	char *w = s;

	for (char *r = s; *r; r++) {
		if (r[0] == '%' && hexval(r[1]) >= 0 && hexval(r[2]) >= 0) {
			*w++ = (char)(hexval(r[1]) * 16 + hexval(r[2]));
			r += 2;
		} else {
			*w++ = *r;
		}
	}
	*w = '\0';
}

/* A request parsed from the suite's request.txt; everything points into `text`. */
struct suite_req {
	char *text;
	char *method;
	char *path;
	char *host;
	struct sigv4_param params[SIGV4_MAX_PARAMS];
	size_t n_params;
	struct sigv4_header headers[SIGV4_MAX_HEADERS];
	size_t n_headers;
};

static void parse_request(char *text, struct suite_req *r)
{
	char *line, *save = NULL, *target, *version, *query;

	memset(r, 0, sizeof(*r));
	r->text = text;
	line = strtok_r(text, "\n", &save);
	assert_non_null(line);
	/* "METHOD TARGET HTTP/1.1": the target may hold a raw space (get-space). */
	target = strchr(line, ' ');
	version = strstr(line, " HTTP/");
	assert_non_null(target);
	assert_non_null(version);
	*target++ = '\0';
	*version = '\0';
	r->method = line;
	query = strchr(target, '?');
	if (query) {
		*query++ = '\0';
		char *psave = NULL;
		for (char *kv = strtok_r(query, "&", &psave); kv;
		     kv = strtok_r(NULL, "&", &psave)) {
			char *eq = strchr(kv, '=');
			assert_true(r->n_params < SIGV4_MAX_PARAMS);
			if (eq)
				*eq++ = '\0';
			pct_decode(kv);
			if (eq)
				pct_decode(eq);
			r->params[r->n_params].key = kv;
			r->params[r->n_params].value = eq;
			r->n_params++;
		}
	}
	r->path = target;
	while ((line = strtok_r(NULL, "\n", &save)) != NULL) {
		char *colon = strchr(line, ':');
		if (!*line)
			continue;
		assert_non_null(colon);
		*colon++ = '\0';
		if (strcasecmp(line, "Host") == 0) {
			r->host = colon;
		} else {
			assert_true(r->n_headers < SIGV4_MAX_HEADERS);
			r->headers[r->n_headers].name = line;
			r->headers[r->n_headers].value = colon;
			r->n_headers++;
		}
	}
	assert_non_null(r->host);
}

/* The value of `"key": "..."` in the suite's context.json, copied into out ("" when absent). */
static void json_string(const char *json, const char *key, char *out, size_t out_len)
{
	char pat[64];
	const char *p, *end;

	out[0] = '\0';
	snprintf(pat, sizeof(pat), "\"%s\": \"", key);
	p = strstr(json, pat);
	if (!p)
		return;
	p += strlen(pat);
	end = strchr(p, '"');
	assert_non_null(end);
	assert_true((size_t)(end - p) < out_len);
	memcpy(out, p, (size_t)(end - p));
	out[end - p] = '\0';
}

/* Runs one vector: canonical request, string to sign and Authorization must match exactly. */
static void run_vector(void **state)
{
	const char *name = *state;
	char *context = read_vector(name, "context.json");
	char *request = read_vector(name, "request.txt");
	char *creq = read_vector(name, "header-canonical-request.txt");
	char *sts = read_vector(name, "header-string-to-sign.txt");
	char *signed_req = read_vector(name, "header-signed-request.txt");
	char token[256], key_id[64], secret[128];
	struct suite_req r;
	struct sigv4_signed out;
	char *authz, *eol;

	json_string(context, "token", token, sizeof(token));
	json_string(context, "access_key_id", key_id, sizeof(key_id));
	json_string(context, "secret_access_key", secret, sizeof(secret));
	assert_string_equal(key_id, SUITE_KEY_ID);
	assert_string_equal(secret, SUITE_SECRET);
	assert_non_null(strstr(context, "\"timestamp\": \"2015-08-30T12:36:00Z\""));
	assert_non_null(strstr(context, "\"region\": \"us-east-1\""));
	assert_non_null(strstr(context, "\"service\": \"service\""));
	assert_non_null(strstr(context, "\"sign_body\": false"));

	parse_request(request, &r);
	struct sigv4_request req = {
	    .method = r.method,
	    .host = r.host,
	    .path = r.path,
	    .params = r.params,
	    .n_params = r.n_params,
	    .headers = r.headers,
	    .n_headers = r.n_headers,
	    .region = "us-east-1",
	    .service = "service",
	    .access_key_id = key_id,
	    .secret_access_key = secret,
	    .session_token = token[0] ? token : NULL,
	    .now = SUITE_TIME,
	    .flags = strstr(context, "\"normalize\": true") ? SIGV4_NORMALIZE_PATH : 0,
	};
	assert_int_equal(sigv4_sign(&req, &out), 0);

	authz = strstr(signed_req, "\nAuthorization:");
	assert_non_null(authz);
	authz += strlen("\nAuthorization:");
	eol = strchr(authz, '\n');
	if (eol)
		*eol = '\0';

	assert_string_equal(out.amz_date, "20150830T123600Z");
	assert_string_equal(out.canonical_request, creq);
	assert_string_equal(out.string_to_sign, sts);
	assert_string_equal(out.authorization, authz);
	assert_null(strstr(out.authorization, SUITE_SECRET));

	sigv4_signed_free(&out);
	free(context);
	free(request);
	free(creq);
	free(sts);
	free(signed_req);
}

/* A named test per vector; the name is also the state run_vector reads. */
#define VECTOR(n)                                                                                  \
	{                                                                                          \
		(n), run_vector, NULL, NULL, (void *)(n)                                           \
	}

/* The GetObject example of the S3 docs ("Signature Calculations for the Authorization Header"). */
static void test_s3_get_object_range(void **state)
{
	const struct sigv4_header hdrs[] = {{"Range", "bytes=0-9"}};
	struct sigv4_request req = {
	    .method = "GET",
	    .host = "examplebucket.s3.amazonaws.com",
	    .path = "/test.txt",
	    .headers = hdrs,
	    .n_headers = 1,
	    .payload_hash = SIGV4_EMPTY_SHA256,
	    .region = "us-east-1",
	    .service = "s3",
	    .access_key_id = "AKIAIOSFODNN7EXAMPLE",
	    .secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
	    .now = (time_t)1369353600, /* 2013-05-24T00:00:00Z */
	    .flags = SIGV4_S3,
	};
	struct sigv4_signed out;

	assert_int_equal(sigv4_sign(&req, &out), 0);
	assert_string_equal(out.canonical_request,
	                    "GET\n"
	                    "/test.txt\n"
	                    "\n"
	                    "host:examplebucket.s3.amazonaws.com\n"
	                    "range:bytes=0-9\n"
	                    "x-amz-content-sha256:" SIGV4_EMPTY_SHA256 "\n"
	                    "x-amz-date:20130524T000000Z\n"
	                    "\n"
	                    "host;range;x-amz-content-sha256;x-amz-date\n" SIGV4_EMPTY_SHA256);
	assert_string_equal(out.string_to_sign,
	                    "AWS4-HMAC-SHA256\n"
	                    "20130524T000000Z\n"
	                    "20130524/us-east-1/s3/aws4_request\n"
	                    "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
	assert_string_equal(
	    out.authorization,
	    "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
	    "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
	    "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
	assert_string_equal(out.amz_date, "20130524T000000Z");
	assert_string_equal(out.content_sha256, SIGV4_EMPTY_SHA256);
	assert_string_equal(out.path, "/test.txt");
	assert_string_equal(out.query, "");
	sigv4_signed_free(&out);
	/* Idempotent. */
	sigv4_signed_free(&out);
	sigv4_signed_free(NULL);
}

static struct sigv4_request s3_req(void)
{
	struct sigv4_request req = {
	    .method = "GET",
	    .host = "127.0.0.1:9000",
	    .path = "/bucket/key",
	    .payload_hash = SIGV4_UNSIGNED_PAYLOAD,
	    .region = "us-east-1",
	    .service = "s3",
	    .access_key_id = "AKIAIOSFODNN7EXAMPLE",
	    .secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
	    .now = (time_t)1369353600,
	    .flags = SIGV4_S3,
	};
	return req;
}

/* S3 keys are signed as they are: no dot-segment removal, no slash squashing, one encoding. */
static void test_s3_path_not_normalized(void **state)
{
	struct sigv4_request req = s3_req();
	struct sigv4_signed out;

	req.path = "/bucket/a b/c+d/\xc3\xbc/a//b/./../%2F~x";
	assert_int_equal(sigv4_sign(&req, &out), 0);
	assert_string_equal(out.path, "/bucket/a%20b/c%2Bd/%C3%BC/a//b/./../%252F~x");
	assert_non_null(
	    strstr(out.canonical_request, "\n/bucket/a%20b/c%2Bd/%C3%BC/a//b/./../%252F~x\n"));
	sigv4_signed_free(&out);

	/* A zero-byte "dir/" marker and a root listing. */
	req.path = "/bucket/dir/";
	assert_int_equal(sigv4_sign(&req, &out), 0);
	assert_string_equal(out.path, "/bucket/dir/");
	sigv4_signed_free(&out);
	req.path = "/";
	assert_int_equal(sigv4_sign(&req, &out), 0);
	assert_string_equal(out.path, "/");
	sigv4_signed_free(&out);
}

/* ListObjectsV2 query: sorted by encoded key, '/' '+' '=' and spaces encoded, no '+' for space. */
static void test_s3_list_query(void **state)
{
	const struct sigv4_param params[] = {
	    {"prefix", "dir/sub dir/"},        {"list-type", "2"},
	    {"encoding-type", "url"},          {"delimiter", "/"},
	    {"continuation-token", "1/a+b=="},
	};
	struct sigv4_request req = s3_req();
	struct sigv4_signed out;

	req.path = "/bucket";
	req.params = params;
	req.n_params = sizeof(params) / sizeof(params[0]);
	assert_int_equal(sigv4_sign(&req, &out), 0);
	assert_string_equal(out.query, "continuation-token=1%2Fa%2Bb%3D%3D&delimiter=%2F&"
	                               "encoding-type=url&list-type=2&prefix=dir%2Fsub%20dir%2F");
	assert_non_null(strstr(out.canonical_request, out.query));
	sigv4_signed_free(&out);
}

/* Session token and If-Match are signed; the secret appears in no output. */
static void test_s3_token_and_if_match(void **state)
{
	const struct sigv4_header hdrs[] = {{"If-Match", "\"9b2cf535f27731c974343645a3985328\""},
	                                    {"Range", "bytes=1048576-2097151"}};
	struct sigv4_request req = s3_req();
	struct sigv4_signed out;

	req.headers = hdrs;
	req.n_headers = 2;
	req.session_token = "FQoGZXIvYXdzEXAMPLETOKEN//+=";
	assert_int_equal(sigv4_sign(&req, &out), 0);
	assert_non_null(strstr(out.authorization,
	                       "SignedHeaders=host;if-match;range;x-amz-content-sha256;x-amz-date;"
	                       "x-amz-security-token, Signature="));
	assert_non_null(
	    strstr(out.canonical_request, "\nx-amz-security-token:FQoGZXIvYXdzEXAMPLETOKEN//+=\n"));
	assert_non_null(strstr(out.canonical_request, "\nx-amz-content-sha256:UNSIGNED-PAYLOAD\n"));
	assert_true(strlen(out.canonical_request) > 0);
	assert_string_equal(out.content_sha256, "UNSIGNED-PAYLOAD");
	assert_null(strstr(out.authorization, req.secret_access_key));
	assert_null(strstr(out.canonical_request, req.secret_access_key));
	assert_null(strstr(out.string_to_sign, req.secret_access_key));
	assert_null(strstr(out.authorization, "EXAMPLETOKEN"));
	sigv4_signed_free(&out);

	/* An empty token is no token. */
	req.session_token = "";
	assert_int_equal(sigv4_sign(&req, &out), 0);
	assert_null(strstr(out.canonical_request, "x-amz-security-token"));
	sigv4_signed_free(&out);
}

/* Header name case and blank runs do not change the signature; the value does. */
static void test_header_canonical_forms(void **state)
{
	struct sigv4_header a[] = {{"Range", "bytes=0-9"}};
	struct sigv4_header b[] = {{"rAnGe", " \t bytes=0-9 \t "}};
	struct sigv4_header c[] = {{"Range", "bytes=0-10"}};
	struct sigv4_request req = s3_req();
	struct sigv4_signed sa, sb, sc;

	req.headers = a;
	req.n_headers = 1;
	assert_int_equal(sigv4_sign(&req, &sa), 0);
	req.headers = b;
	assert_int_equal(sigv4_sign(&req, &sb), 0);
	req.headers = c;
	assert_int_equal(sigv4_sign(&req, &sc), 0);
	assert_string_equal(sa.authorization, sb.authorization);
	assert_string_not_equal(sa.authorization, sc.authorization);
	sigv4_signed_free(&sa);
	sigv4_signed_free(&sb);
	sigv4_signed_free(&sc);

	/* Without SIGV4_SIGN_CONTENT_SHA256 the header is neither signed nor required. */
	req.flags = 0;
	req.n_headers = 0;
	assert_int_equal(sigv4_sign(&req, &sa), 0);
	assert_non_null(strstr(sa.authorization, "SignedHeaders=host;x-amz-date, "));
	sigv4_signed_free(&sa);
}

static void expect_sign_error(const struct sigv4_request *req, int err)
{
	struct sigv4_signed out;

	memset(&out, 0x5a, sizeof(out));
	assert_int_equal(sigv4_sign(req, &out), err);
	assert_null(out.authorization);
	assert_null(out.path);
	assert_null(out.canonical_request);
	sigv4_signed_free(&out);
}

static void test_rejects_bad_input(void **state)
{
	struct sigv4_header crlf[] = {{"Range", "bytes=0-9\r\nX-Evil: 1"}};
	struct sigv4_header lf[] = {{"Range", "bytes=0-9\nx"}};
	struct sigv4_header badname[] = {{"Ra nge", "bytes=0-9"}};
	struct sigv4_header colon[] = {{"Range:", "bytes=0-9"}};
	struct sigv4_header reserved[] = {{"Host", "evil.example"}};
	struct sigv4_header reserved2[] = {{"X-Amz-Date", "20990101T000000Z"}};
	struct sigv4_header reserved3[] = {{"authorization", "x"}};
	struct sigv4_header many[SIGV4_MAX_HEADERS + 1];
	struct sigv4_request req;

	for (size_t i = 0; i < SIGV4_MAX_HEADERS + 1; i++)
		many[i] = (struct sigv4_header){"X-A", "1"};

#define WITH(field, val, err)                                                                      \
	do {                                                                                       \
		req = s3_req();                                                                    \
		req.field = val;                                                                   \
		expect_sign_error(&req, err);                                                      \
	} while (0)

	WITH(method, "get", -EINVAL);
	WITH(method, "", -EINVAL);
	WITH(method, NULL, -EINVAL);
	WITH(path, "bucket/key", -EINVAL);
	WITH(path, "", -EINVAL);
	WITH(path, NULL, -EINVAL);
	WITH(host, "", -EINVAL);
	WITH(host, "a b", -EINVAL);
	WITH(host, "evil\r\nx", -EINVAL);
	WITH(region, "us-east-1/x", -EINVAL);
	WITH(region, "", -EINVAL);
	WITH(service, NULL, -EINVAL);
	WITH(access_key_id, "AKID/x", -EINVAL);
	WITH(access_key_id, "", -EINVAL);
	WITH(secret_access_key, "", -EINVAL);
	WITH(secret_access_key, NULL, -EINVAL);
	WITH(session_token, "tok\r\nen", -EINVAL);
	WITH(payload_hash, "E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855",
	     -EINVAL);
	WITH(payload_hash, "abc", -EINVAL);

#define WITH_HDRS(arr, n, err)                                                                     \
	do {                                                                                       \
		req = s3_req();                                                                    \
		req.headers = arr;                                                                 \
		req.n_headers = n;                                                                 \
		expect_sign_error(&req, err);                                                      \
	} while (0)

	WITH_HDRS(crlf, 1, -EINVAL);
	WITH_HDRS(lf, 1, -EINVAL);
	WITH_HDRS(badname, 1, -EINVAL);
	WITH_HDRS(colon, 1, -EINVAL);
	WITH_HDRS(reserved, 1, -EINVAL);
	WITH_HDRS(reserved2, 1, -EINVAL);
	WITH_HDRS(reserved3, 1, -EINVAL);
	WITH_HDRS(many, SIGV4_MAX_HEADERS + 1, -E2BIG);
	WITH_HDRS(NULL, 1, -EINVAL);

	/* An overlong path. */
	char *longpath = malloc(SIGV4_MAX_FIELD + 2);
	assert_non_null(longpath);
	memset(longpath, 'a', SIGV4_MAX_FIELD + 1);
	longpath[0] = '/';
	longpath[SIGV4_MAX_FIELD + 1] = '\0';
	WITH(path, longpath, -E2BIG);
	free(longpath);

	expect_sign_error(NULL, -EINVAL);
#undef WITH
#undef WITH_HDRS
}

static void test_encode_target(void **state)
{
	const struct sigv4_param params[] = {{"b", NULL}, {"a", "x y"}, {"a", "x"}};
	char *path, *query;

	assert_int_equal(sigv4_encode_target("/bkt/a b/./c", params, 3, 0, &path, &query), 0);
	assert_string_equal(path, "/bkt/a%20b/./c");
	/* Sorted by key then value; a NULL value is "". */
	assert_string_equal(query, "a=x&a=x%20y&b=");
	free(path);
	free(query);

	assert_int_equal(
	    sigv4_encode_target("/a/./b/../c//", NULL, 0, SIGV4_NORMALIZE_PATH, &path, &query), 0);
	assert_string_equal(path, "/a/c/");
	assert_string_equal(query, "");
	free(path);
	free(query);

	/* ".." above the root stays at the root. */
	assert_int_equal(
	    sigv4_encode_target("/../../x", NULL, 0, SIGV4_NORMALIZE_PATH, &path, &query), 0);
	assert_string_equal(path, "/x");
	free(path);
	free(query);

	assert_int_equal(sigv4_encode_target("x", NULL, 0, 0, &path, &query), -EINVAL);
	assert_null(path);
	assert_null(query);
	assert_int_equal(sigv4_encode_target("/x", NULL, 1, 0, &path, &query), -EINVAL);
	assert_null(path);
}

/* Signing shares nothing: threads signing at once all get the documented signature. */
#define N_THREADS 4
#define N_SIGN 200

static void *sign_worker(void *arg)
{
	int *ok = arg;
	const struct sigv4_header hdrs[] = {{"Range", "bytes=0-9"}};
	struct sigv4_request req = {
	    .method = "GET",
	    .host = "examplebucket.s3.amazonaws.com",
	    .path = "/test.txt",
	    .headers = hdrs,
	    .n_headers = 1,
	    .region = "us-east-1",
	    .service = "s3",
	    .access_key_id = "AKIAIOSFODNN7EXAMPLE",
	    .secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
	    .now = (time_t)1369353600,
	    .flags = SIGV4_S3,
	};

	*ok = 0;
	for (int i = 0; i < N_SIGN; i++) {
		struct sigv4_signed out;
		if (sigv4_sign(&req, &out) != 0)
			return NULL;
		bool good =
		    strstr(out.authorization, "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd"
		                              "44f0170aba48dd91039c6036bdb41") != NULL;
		sigv4_signed_free(&out);
		if (!good)
			return NULL;
	}
	*ok = 1;
	return NULL;
}

static void test_threads(void **state)
{
	int ok[N_THREADS];

	test_threads_run(N_THREADS, sign_worker, ok, sizeof(ok[0]));
	for (int i = 0; i < N_THREADS; i++)
		assert_int_equal(ok[i], 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    /* The seven cases the issue names, then the rest of the suite's GET cases. */
	    VECTOR("get-vanilla"),
	    VECTOR("get-vanilla-query"),
	    VECTOR("get-vanilla-query-order-key-case"),
	    VECTOR("get-header-value-trim"),
	    VECTOR("get-utf8"),
	    VECTOR("get-space-normalized"),
	    VECTOR("get-space-unnormalized"),
	    VECTOR("get-slash-dot-slash-normalized"),
	    VECTOR("get-slash-dot-slash-unnormalized"),
	    VECTOR("get-header-key-duplicate"),
	    VECTOR("get-header-value-order"),
	    VECTOR("get-relative-normalized"),
	    VECTOR("get-relative-unnormalized"),
	    VECTOR("get-relative-relative-normalized"),
	    VECTOR("get-relative-relative-unnormalized"),
	    VECTOR("get-slash-normalized"),
	    VECTOR("get-slash-unnormalized"),
	    VECTOR("get-slash-pointless-dot-normalized"),
	    VECTOR("get-slash-pointless-dot-unnormalized"),
	    VECTOR("get-slashes-normalized"),
	    VECTOR("get-slashes-unnormalized"),
	    VECTOR("get-unreserved"),
	    VECTOR("get-vanilla-empty-query-key"),
	    VECTOR("get-vanilla-query-order-encoded"),
	    VECTOR("get-vanilla-query-unreserved"),
	    VECTOR("get-vanilla-utf8-query"),
	    VECTOR("get-vanilla-with-session-token"),
	    cmocka_unit_test(test_s3_get_object_range),
	    cmocka_unit_test(test_s3_path_not_normalized),
	    cmocka_unit_test(test_s3_list_query),
	    cmocka_unit_test(test_s3_token_and_if_match),
	    cmocka_unit_test(test_header_canonical_forms),
	    cmocka_unit_test(test_rejects_bad_input),
	    cmocka_unit_test(test_encode_target),
	    cmocka_unit_test(test_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

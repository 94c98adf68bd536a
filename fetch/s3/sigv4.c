/*
 * AWS Signature Version 4, as described in AWS's "Create a signed AWS API request" and the S3
 * "Signature Calculations for the Authorization Header" pages, checked against AWS's published
 * test suite (tests/unit/sigv4-vectors/).
 *
 * Everything is built in local heap buffers. Buffers that may hold a secret (the "AWS4"+secret
 * key, derived keys, the canonical request with a session token) are cleansed before they are
 * freed, including the old block when a buffer grows.
 */
#include "util/hex.h"
#include "fetch/s3/sigv4.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

/* A growable string that cleanses what it discards. `failed` is sticky: check it once. */
struct sbuf {
	char *p;
	size_t len;
	size_t cap;
	bool failed;
};

static void sb_free(struct sbuf *b)
{
	if (b->p) {
		OPENSSL_cleanse(b->p, b->cap);
		free(b->p);
	}
	memset(b, 0, sizeof(*b));
}

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
	if (b->failed)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 128;
		char *np;

		while (cap < b->len + n + 1)
			cap *= 2;
		np = malloc(cap);
		if (!np) {
			b->failed = true;
			return;
		}
		if (b->p) {
			memcpy(np, b->p, b->len);
			OPENSSL_cleanse(b->p, b->cap);
			free(b->p);
		}
		b->p = np;
		b->cap = cap;
	}
	if (!b->p) { /* unreachable (cap >= 1 here); keeps the analyzer sure */
		b->failed = true;
		return;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void sb_adds(struct sbuf *b, const char *s)
{
	if (!s) {
		b->failed = true;
		return;
	}
	sb_add(b, s, strlen(s));
}

static void sb_addc(struct sbuf *b, char c)
{
	sb_add(b, &c, 1);
}

/* Hands the string over (never NULL unless failed); the buffer is left empty. */
static char *sb_take(struct sbuf *b)
{
	char *p;

	if (b->failed) {
		sb_free(b);
		return NULL;
	}
	if (!b->p)
		sb_add(b, "", 0);
	if (b->failed) {
		sb_free(b);
		return NULL;
	}
	p = b->p;
	memset(b, 0, sizeof(*b));
	return p;
}

static bool is_unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_' || c == '~';
}

static void uri_encode(struct sbuf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (is_unreserved(c)) {
			sb_addc(b, (char)c);
		} else {
			char e[3] = {'%', hex[c >> 4], hex[c & 15]};
			sb_add(b, e, 3);
		}
	}
}

/* Encodes path segment by segment; with normalize, resolves dot segments and drops empty ones. */
static int encode_path(const char *path, bool normalize, char **out)
{
	struct sbuf b = {0};
	size_t len = strlen(path);

	*out = NULL;
	if (len == 0 || path[0] != '/')
		return -EINVAL;
	if (len > SIGV4_MAX_FIELD)
		return -E2BIG;

	if (!normalize) {
		const char *seg = path + 1;
		sb_addc(&b, '/');
		for (;;) {
			const char *slash = strchr(seg, '/');
			size_t n = slash ? (size_t)(slash - seg) : strlen(seg);
			uri_encode(&b, seg, n);
			if (!slash)
				break;
			sb_addc(&b, '/');
			seg = slash + 1;
		}
	} else {
		/* Segment start offsets into path, as a stack (".." pops). */
		size_t *starts = calloc(len, sizeof(*starts));
		size_t *lens = calloc(len, sizeof(*lens));
		size_t depth = 0, i = 1;
		bool trailing = false;

		if (!starts || !lens) {
			free(starts);
			free(lens);
			return -ENOMEM;
		}
		while (i <= len) {
			size_t j = i;
			while (j < len && path[j] != '/')
				j++;
			size_t n = j - i;
			bool last = j >= len;
			if (n == 0 || (n == 1 && path[i] == '.')) {
				trailing = last;
			} else if (n == 2 && path[i] == '.' && path[i + 1] == '.') {
				if (depth > 0)
					depth--;
				trailing = last;
			} else {
				starts[depth] = i;
				lens[depth] = n;
				depth++;
				trailing = false;
			}
			i = j + 1;
		}
		for (size_t k = 0; k < depth; k++) {
			sb_addc(&b, '/');
			uri_encode(&b, path + starts[k], lens[k]);
		}
		if (depth == 0 || trailing)
			sb_addc(&b, '/');
		free(starts);
		free(lens);
	}
	*out = sb_take(&b);
	return *out ? 0 : -ENOMEM;
}

struct enc_param {
	char *key;
	char *value;
};

static int cmp_param(const void *a, const void *b)
{
	const struct enc_param *x = a, *y = b;
	int c = strcmp(x->key, y->key);
	return c ? c : strcmp(x->value, y->value);
}

static int encode_query(const struct sigv4_param *params, size_t n, char **out)
{
	struct enc_param *enc = NULL;
	struct sbuf b = {0};
	int rc = -ENOMEM;

	*out = NULL;
	if (n > SIGV4_MAX_PARAMS)
		return -E2BIG;
	if (n > 0 && !params)
		return -EINVAL;
	if (n > 0) {
		enc = calloc(n, sizeof(*enc));
		if (!enc)
			return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		const char *v = params[i].value ? params[i].value : "";
		struct sbuf k = {0}, vb = {0};

		if (!params[i].key) {
			rc = -EINVAL;
			goto out;
		}
		if (strlen(params[i].key) > SIGV4_MAX_FIELD || strlen(v) > SIGV4_MAX_FIELD) {
			rc = -E2BIG;
			goto out;
		}
		uri_encode(&k, params[i].key, strlen(params[i].key));
		uri_encode(&vb, v, strlen(v));
		enc[i].key = sb_take(&k);
		enc[i].value = sb_take(&vb);
		if (!enc[i].key || !enc[i].value)
			goto out;
	}
	if (n > 1)
		qsort(enc, n, sizeof(*enc), cmp_param);
	for (size_t i = 0; i < n; i++) {
		if (i > 0)
			sb_addc(&b, '&');
		sb_adds(&b, enc[i].key);
		sb_addc(&b, '=');
		sb_adds(&b, enc[i].value);
	}
	*out = sb_take(&b);
	rc = *out ? 0 : -ENOMEM;
out:
	for (size_t i = 0; enc && i < n; i++) {
		free(enc[i].key);
		free(enc[i].value);
	}
	free(enc);
	sb_free(&b);
	return rc;
}

int sigv4_encode_target(const char *path, const struct sigv4_param *params, size_t n_params,
                        unsigned flags, char **path_out, char **query_out)
{
	int rc;

	*path_out = *query_out = NULL;
	if (!path)
		return -EINVAL;
	rc = encode_path(path, flags & SIGV4_NORMALIZE_PATH, path_out);
	if (rc < 0)
		return rc;
	rc = encode_query(params, n_params, query_out);
	if (rc < 0) {
		free(*path_out);
		*path_out = NULL;
	}
	return rc;
}

/* RFC 7230 tchar. */
static bool is_tchar(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static bool valid_header_name(const char *s)
{
	if (!s || !*s)
		return false;
	for (; *s; s++)
		if (!is_tchar((unsigned char)*s))
			return false;
	return true;
}

/* A header value may hold any byte but CTLs other than HTAB (so no CR/LF injection). */
static bool valid_header_value(const char *s)
{
	if (!s)
		return false;
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return false;
	}
	return true;
}

/* Region, service: a non-empty token without '/' (it goes into the credential scope). */
static bool valid_scope_part(const char *s)
{
	if (!s || !*s || strlen(s) > 64)
		return false;
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_' || c == '.'))
			return false;
	}
	return true;
}

static bool valid_access_key(const char *s)
{
	if (!s || !*s || strlen(s) > 256)
		return false;
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c <= 0x20 || c >= 0x7f || c == '/' || c == ',' || c == '=')
			return false;
	}
	return true;
}

static bool valid_payload_hash(const char *s)
{
	if (strcmp(s, SIGV4_UNSIGNED_PAYLOAD) == 0)
		return true;
	if (strlen(s) != 64)
		return false;
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
			return false;
	return true;
}

static bool valid_method(const char *s)
{
	size_t n = 0;

	if (!s || !*s)
		return false;
	for (; *s; s++, n++)
		if (*s < 'A' || *s > 'Z' || n >= 16)
			return false;
	return true;
}

static bool is_reserved_header(const char *name)
{
	static const char *const reserved[] = {"host", "x-amz-date", "x-amz-content-sha256",
	                                       "x-amz-security-token", "authorization"};

	for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
		if (strcasecmp(name, reserved[i]) == 0)
			return true;
	return false;
}

struct canon_header {
	char *name;  /* lower-case */
	char *value; /* trimmed, blanks collapsed */
	size_t order;
};

static int cmp_header(const void *a, const void *b)
{
	const struct canon_header *x = a, *y = b;
	int c = strcmp(x->name, y->name);
	if (c)
		return c;
	return x->order < y->order ? -1 : x->order > y->order;
}

static int canon_header_set(struct canon_header *h, const char *name, const char *value,
                            size_t order)
{
	struct sbuf n = {0}, v = {0};
	const char *s = value;
	bool pending_space = false;

	for (const char *c = name; *c; c++) {
		char lc = *c;
		if (lc >= 'A' && lc <= 'Z')
			lc = (char)(lc - 'A' + 'a');
		sb_addc(&n, lc);
	}
	while (*s == ' ' || *s == '\t')
		s++;
	for (; *s; s++) {
		if (*s == ' ' || *s == '\t') {
			pending_space = true;
			continue;
		}
		if (pending_space && v.len > 0)
			sb_addc(&v, ' ');
		pending_space = false;
		sb_addc(&v, *s);
	}
	h->name = sb_take(&n);
	h->value = sb_take(&v);
	h->order = order;
	if (h->name && h->value)
		return 0;
	/* The caller frees only complete headers: undo a half-made one (the value may be a
	 * session token, so it is wiped). */
	free(h->name);
	if (h->value)
		OPENSSL_cleanse(h->value, strlen(h->value));
	free(h->value);
	h->name = h->value = NULL;
	return -ENOMEM;
}

static void canon_headers_free(struct canon_header *h, size_t n)
{
	for (size_t i = 0; h && i < n; i++) {
		free(h[i].name);
		if (h[i].value) {
			OPENSSL_cleanse(h[i].value, strlen(h[i].value));
			free(h[i].value);
		}
	}
	free(h);
}

static int hmac(const unsigned char *key, size_t key_len, const char *data, size_t len,
                unsigned char out[32])
{
	unsigned int out_len = 0;

	if (!HMAC(EVP_sha256(), key, (int)key_len, (const unsigned char *)data, len, out,
	          &out_len) ||
	    out_len != 32)
		return -EIO;
	return 0;
}

/* signature = hex(HMAC(kSigning, sts)) with kSigning derived from the secret and the scope. */
static int compute_signature(const char *secret, const char *date, const char *region,
                             const char *service, const char *sts, char sig_hex[65])
{
	struct sbuf k = {0};
	unsigned char k1[32], k2[32], sig[32];
	int rc = -ENOMEM;

	sb_adds(&k, "AWS4");
	sb_adds(&k, secret);
	if (k.failed)
		goto out;
	rc = hmac((const unsigned char *)k.p, k.len, date, strlen(date), k1);
	if (rc == 0)
		rc = hmac(k1, 32, region, strlen(region), k2);
	if (rc == 0)
		rc = hmac(k2, 32, service, strlen(service), k1);
	if (rc == 0)
		rc = hmac(k1, 32, "aws4_request", strlen("aws4_request"), k2);
	if (rc == 0)
		rc = hmac(k2, 32, sts, strlen(sts), sig);
	if (rc == 0)
		util_hex_encode(sig, 32, sig_hex);
out:
	OPENSSL_cleanse(k1, sizeof(k1));
	OPENSSL_cleanse(k2, sizeof(k2));
	OPENSSL_cleanse(sig, sizeof(sig));
	sb_free(&k);
	return rc;
}

static int check_request(const struct sigv4_request *req)
{
	if (!valid_method(req->method) || !req->host || !*req->host || !req->path ||
	    !valid_scope_part(req->region) || !valid_scope_part(req->service) ||
	    !valid_access_key(req->access_key_id) || !req->secret_access_key ||
	    !*req->secret_access_key)
		return -EINVAL;
	if (strlen(req->host) > SIGV4_MAX_FIELD || strlen(req->secret_access_key) > 1024)
		return -E2BIG;
	for (const char *h = req->host; *h; h++)
		if ((unsigned char)*h <= 0x20 || *h == 0x7f || *h == '/')
			return -EINVAL;
	if (req->payload_hash && !valid_payload_hash(req->payload_hash))
		return -EINVAL;
	if (req->session_token && *req->session_token) {
		if (!valid_header_value(req->session_token))
			return -EINVAL;
		if (strlen(req->session_token) > SIGV4_MAX_FIELD)
			return -E2BIG;
	}
	if (req->n_headers > SIGV4_MAX_HEADERS)
		return -E2BIG;
	if (req->n_headers > 0 && !req->headers)
		return -EINVAL;
	for (size_t i = 0; i < req->n_headers; i++) {
		const struct sigv4_header *h = &req->headers[i];
		if (!valid_header_name(h->name) || !valid_header_value(h->value) ||
		    is_reserved_header(h->name))
			return -EINVAL;
		if (strlen(h->value) > SIGV4_MAX_FIELD || strlen(h->name) > 256)
			return -E2BIG;
	}
	return 0;
}

int sigv4_sign(const struct sigv4_request *req, struct sigv4_signed *out)
{
	struct canon_header *hs = NULL;
	size_t nh = 0;
	struct sbuf creq = {0}, signed_names = {0}, sts = {0}, auth = {0};
	char creq_hash[65], sig[65], date[9];
	const char *token;
	struct tm tm;
	int rc;

	memset(out, 0, sizeof(*out));
	if (!req)
		return -EINVAL;
	rc = check_request(req);
	if (rc < 0)
		return rc;
	token = req->session_token && *req->session_token ? req->session_token : NULL;

	if (!gmtime_r(&req->now, &tm) ||
	    strftime(out->amz_date, sizeof(out->amz_date), "%Y%m%dT%H%M%SZ", &tm) != 16)
		return -EINVAL;
	memcpy(date, out->amz_date, 8);
	date[8] = '\0';
	snprintf(out->content_sha256, sizeof(out->content_sha256), "%s",
	         req->payload_hash ? req->payload_hash : SIGV4_EMPTY_SHA256);

	rc = sigv4_encode_target(req->path, req->params, req->n_params, req->flags, &out->path,
	                         &out->query);
	if (rc < 0)
		goto fail;

	/* Canonical headers: the caller's plus ours, sorted by name, stable for equal names. */
	rc = -ENOMEM;
	hs = calloc(req->n_headers + 4, sizeof(*hs));
	if (!hs)
		goto fail;
	if (canon_header_set(&hs[nh], "host", req->host, nh) < 0)
		goto fail;
	nh++;
	if (canon_header_set(&hs[nh], "x-amz-date", out->amz_date, nh) < 0)
		goto fail;
	nh++;
	if (req->flags & SIGV4_SIGN_CONTENT_SHA256) {
		if (canon_header_set(&hs[nh], "x-amz-content-sha256", out->content_sha256, nh) < 0)
			goto fail;
		nh++;
	}
	if (token) {
		if (canon_header_set(&hs[nh], "x-amz-security-token", token, nh) < 0)
			goto fail;
		nh++;
	}
	for (size_t i = 0; i < req->n_headers; i++) {
		if (canon_header_set(&hs[nh], req->headers[i].name, req->headers[i].value, nh) < 0)
			goto fail;
		nh++;
	}
	qsort(hs, nh, sizeof(*hs), cmp_header);

	sb_adds(&creq, req->method);
	sb_addc(&creq, '\n');
	sb_adds(&creq, out->path);
	sb_addc(&creq, '\n');
	sb_adds(&creq, out->query);
	sb_addc(&creq, '\n');
	for (size_t i = 0; i < nh; i++) {
		bool same_as_prev = i > 0 && strcmp(hs[i].name, hs[i - 1].name) == 0;
		if (same_as_prev) {
			sb_addc(&creq, ',');
		} else {
			if (i > 0) {
				sb_addc(&creq, '\n');
				sb_addc(&signed_names, ';');
			}
			sb_adds(&creq, hs[i].name);
			sb_addc(&creq, ':');
			sb_adds(&signed_names, hs[i].name);
		}
		sb_adds(&creq, hs[i].value);
	}
	sb_adds(&creq, "\n\n");
	sb_add(&creq, signed_names.p ? signed_names.p : "", signed_names.len);
	sb_addc(&creq, '\n');
	sb_adds(&creq, out->content_sha256);
	if (creq.failed || signed_names.failed)
		goto fail;
	rc = util_sha256_hex(creq.p, creq.len, creq_hash);
	if (rc < 0)
		goto fail;

	rc = -ENOMEM;
	sb_adds(&sts, "AWS4-HMAC-SHA256\n");
	sb_adds(&sts, out->amz_date);
	sb_addc(&sts, '\n');
	sb_adds(&sts, date);
	sb_addc(&sts, '/');
	sb_adds(&sts, req->region);
	sb_addc(&sts, '/');
	sb_adds(&sts, req->service);
	sb_adds(&sts, "/aws4_request\n");
	sb_adds(&sts, creq_hash);
	if (sts.failed)
		goto fail;

	rc = compute_signature(req->secret_access_key, date, req->region, req->service, sts.p, sig);
	if (rc < 0)
		goto fail;

	rc = -ENOMEM;
	sb_adds(&auth, "AWS4-HMAC-SHA256 Credential=");
	sb_adds(&auth, req->access_key_id);
	sb_addc(&auth, '/');
	sb_adds(&auth, date);
	sb_addc(&auth, '/');
	sb_adds(&auth, req->region);
	sb_addc(&auth, '/');
	sb_adds(&auth, req->service);
	sb_adds(&auth, "/aws4_request, SignedHeaders=");
	sb_adds(&auth, signed_names.p);
	sb_adds(&auth, ", Signature=");
	sb_adds(&auth, sig);
	out->authorization = sb_take(&auth);
	out->canonical_request = sb_take(&creq);
	out->string_to_sign = sb_take(&sts);
	if (!out->authorization || !out->canonical_request || !out->string_to_sign)
		goto fail;
	rc = 0;
	goto done;

fail:
	sigv4_signed_free(out);
done:
	canon_headers_free(hs, nh);
	sb_free(&creq);
	sb_free(&signed_names);
	sb_free(&sts);
	sb_free(&auth);
	OPENSSL_cleanse(sig, sizeof(sig));
	return rc;
}

static void free_cleansed(char *s)
{
	if (s) {
		OPENSSL_cleanse(s, strlen(s));
		free(s);
	}
}

void sigv4_signed_free(struct sigv4_signed *s)
{
	if (!s)
		return;
	free_cleansed(s->authorization);
	free_cleansed(s->path);
	free_cleansed(s->query);
	free_cleansed(s->canonical_request);
	free_cleansed(s->string_to_sign);
	memset(s, 0, sizeof(*s));
}

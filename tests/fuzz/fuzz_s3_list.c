/*
 * libFuzzer target: the streaming parser of S3 ListObjectsV2 and error bodies
 * (fetch/s3/s3_list.h), and s3_url_decode.
 *
 * Input: 5 header bytes, then the body. Bytes 0-1 and 2-3 (little-endian) pick two split
 * points, so the body is fed to the streaming parser as three chunks (any may be empty);
 * byte 4 picks the limits (0: the defaults; else low nibble max_entries 1..15, high nibble
 * max_bytes in units of 64). The same body is also parsed one-shot (s3_list_parse) and,
 * when short, one byte per feed.
 *
 * Invariants:
 *   - the result does not depend on how the body is split: success or failure alike, and
 *     on success the same page or error, field by field (which error a body that is both
 *     malformed and over a bound reports may depend on the split: the bound is checked
 *     per feed, before that chunk is parsed);
 *   - every key and prefix is 1..S3_KEY_MAX bytes and NUL-terminated (no NUL inside: its
 *     strlen is its length), the ETag is NUL-terminated inside its buffer, a truncated page
 *     has a token of at most S3_TOKEN_MAX bytes, entries respect max_entries;
 *   - error fields are NUL-terminated inside their buffers and hold no control character;
 *   - a failure has a non-empty one-line message and is one of -EBADMSG, -E2BIG, -ENOMEM;
 *   - s3_url_decode of the body agrees with an independent reference decoder.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fetch/s3/s3_list.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define HEADER 5
#define BYTEWISE_MAX 2048

static void check_str(const char *s, size_t min, size_t max)
{
	if (!s)
		abort();
	size_t n = strlen(s);
	if (n < min || n > max)
		abort();
}

static void check_field(const char *f, size_t cap)
{
	const char *end = memchr(f, '\0', cap);

	if (!end)
		abort();
	for (const char *c = f; c < end; c++)
		if ((unsigned char)*c < 0x20 || (unsigned char)*c == 0x7f)
			abort();
}

static void check_result(const struct s3_list_result *r, size_t max_entries)
{
	if (r->kind == S3_DOC_ERROR) {
		const struct s3_error *e = &r->error;
		check_field(e->code, sizeof(e->code));
		check_field(e->message, sizeof(e->message));
		check_field(e->region, sizeof(e->region));
		check_field(e->endpoint, sizeof(e->endpoint));
		check_field(e->bucket, sizeof(e->bucket));
		check_field(e->request_id, sizeof(e->request_id));
		return;
	}
	if (r->kind != S3_DOC_LIST)
		abort();
	const struct s3_list_page *pg = &r->page;
	if (pg->n_objects + pg->n_prefixes > max_entries)
		abort();
	if ((pg->n_objects && !pg->objects) || (pg->n_prefixes && !pg->prefixes))
		abort();
	for (size_t i = 0; i < pg->n_objects; i++) {
		check_str(pg->objects[i].key, 1, S3_KEY_MAX);
		if (!memchr(pg->objects[i].etag, '\0', sizeof(pg->objects[i].etag)))
			abort();
	}
	for (size_t i = 0; i < pg->n_prefixes; i++)
		check_str(pg->prefixes[i], 1, S3_KEY_MAX);
	if (pg->is_truncated && !pg->next_token)
		abort();
	if (pg->next_token)
		check_str(pg->next_token, 0, S3_TOKEN_MAX);
	if (pg->key_count < -1)
		abort();
}

static int str_eq(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static void check_same(const struct s3_list_result *a, const struct s3_list_result *b)
{
	if (a->kind != b->kind)
		abort();
	if (a->kind == S3_DOC_ERROR) {
		if (memcmp(&a->error, &b->error, sizeof(a->error)) != 0)
			abort();
		return;
	}
	const struct s3_list_page *x = &a->page, *y = &b->page;
	if (x->n_objects != y->n_objects || x->n_prefixes != y->n_prefixes ||
	    x->is_truncated != y->is_truncated || x->key_count != y->key_count ||
	    x->url_encoded != y->url_encoded || !str_eq(x->next_token, y->next_token))
		abort();
	for (size_t i = 0; i < x->n_objects; i++) {
		const struct s3_object *o = &x->objects[i], *p = &y->objects[i];
		if (strcmp(o->key, p->key) != 0 || o->size != p->size || o->mtime != p->mtime ||
		    strcmp(o->etag, p->etag) != 0)
			abort();
	}
	for (size_t i = 0; i < x->n_prefixes; i++)
		if (strcmp(x->prefixes[i], y->prefixes[i]) != 0)
			abort();
}

static void check_rc(int rc, const char *msg)
{
	if (rc == 0)
		return;
	if (rc != -EBADMSG && rc != -E2BIG && rc != -ENOMEM)
		abort();
	if (!msg || !msg[0] || strchr(msg, '\n'))
		abort();
}

/* Feeds body in pieces at the given cut points (ascending), then finishes. */
static int parse_split(const char *body, size_t len, const size_t *cuts, size_t n_cuts,
                       const struct s3_list_limits *lim, struct s3_list_result *out)
{
	struct s3_list_parser *p = NULL;
	size_t at = 0;
	int rc = s3_list_parser_new(lim, &p);

	if (rc) {
		memset(out, 0, sizeof(*out));
		return rc;
	}
	for (size_t i = 0; i <= n_cuts; i++) {
		size_t end = i < n_cuts ? cuts[i] : len;
		int frc = s3_list_parser_feed(p, body + at, end - at);
		if (frc && frc != s3_list_parser_feed(p, "", 0)) /* errors are sticky */
			abort();
		at = end;
	}
	rc = s3_list_parser_finish(p, out);
	check_rc(rc, s3_list_parser_errmsg(p));
	s3_list_parser_free(p);
	return rc;
}

static int hexval(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c |= 0x20;
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Reference decoder, written from the header's contract; same error precedence. */
static long ref_decode(const unsigned char *in, size_t len, unsigned char *out, size_t out_len)
{
	size_t n = 0, i = 0;

	if (out_len == 0)
		return -E2BIG;
	while (i < len) {
		unsigned c = in[i++];
		bool escaped = c == '%';
		if (escaped) {
			if (i + 2 > len || hexval(in[i]) < 0 || hexval(in[i + 1]) < 0)
				return -EINVAL;
			c = (unsigned)(hexval(in[i]) << 4 | hexval(in[i + 1]));
			i += 2;
		} else if (c == '+') {
			c = ' ';
		}
		/* A NUL sent as %00 is a key's (left out), a raw one the document's fault. */
		if (c == 0)
			return escaped ? -EILSEQ : -EINVAL;
		if (n + 1 >= out_len)
			return -E2BIG;
		out[n++] = (unsigned char)c;
	}
	out[n] = 0;
	return (long)n;
}

static void check_decode(const char *in, size_t len, size_t out_len)
{
	char *a = malloc(out_len ? out_len : 1), *b = malloc(out_len ? out_len : 1);

	if (!a || !b)
		goto out;
	long ra = s3_url_decode(in, len, a, out_len);
	long rb = ref_decode((const unsigned char *)in, len, (unsigned char *)b, out_len);
	if (ra != rb)
		abort();
	if (ra >= 0 && ((size_t)ra >= out_len || memcmp(a, b, (size_t)ra + 1) != 0 ||
	                strlen(a) != (size_t)ra || (size_t)ra > len))
		abort();
out:
	free(a);
	free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct s3_list_limits limits = {0}, *lim = NULL;
	struct s3_list_result split = {0}, whole = {0}, bytewise = {0};
	size_t cuts[2], len;
	char *body, err[256] = "";
	int rc_split, rc_whole;

	if (size < HEADER)
		return 0;
	len = size - HEADER;
	cuts[0] = ((size_t)data[0] | (size_t)data[1] << 8) % (len + 1);
	cuts[1] = ((size_t)data[2] | (size_t)data[3] << 8) % (len + 1);
	if (cuts[0] > cuts[1]) {
		size_t t = cuts[0];
		cuts[0] = cuts[1];
		cuts[1] = t;
	}
	if (data[4]) {
		limits.max_entries = data[4] & 15;
		limits.max_bytes = (size_t)(data[4] >> 4) * 64;
		lim = &limits;
	}
	size_t max_entries =
	    lim && limits.max_entries ? limits.max_entries : S3_LIST_DEFAULT_MAX_ENTRIES;

	/* A heap copy of exactly len bytes: ASan sees any read past the body. */
	body = malloc(len ? len : 1);
	if (!body)
		return 0;
	memcpy(body, data + HEADER, len);

	rc_split = parse_split(body, len, cuts, 2, lim, &split);
	rc_whole = s3_list_parse(body, len, lim, &whole, err, sizeof(err));
	check_rc(rc_whole, err);
	if ((rc_split == 0) != (rc_whole == 0))
		abort();
	if (rc_whole == 0) {
		check_result(&whole, max_entries);
		check_result(&split, max_entries);
		check_same(&whole, &split);
	}
	if (len <= BYTEWISE_MAX) {
		size_t *every = malloc((len ? len : 1) * sizeof(*every));
		if (every) {
			for (size_t i = 0; i < len; i++)
				every[i] = i;
			int rc_bytes = parse_split(body, len, every, len, lim, &bytewise);
			if ((rc_bytes == 0) != (rc_whole == 0))
				abort();
			if (rc_bytes == 0)
				check_same(&whole, &bytewise);
			free(every);
		}
	}
	s3_list_result_free(&split);
	s3_list_result_free(&whole);
	s3_list_result_free(&bytewise);
	s3_list_result_free(&whole); /* idempotent */

	check_decode(body, len, (size_t)data[4] * 5);
	check_decode(body, len, len + 1);
	free(body);
	return 0;
}

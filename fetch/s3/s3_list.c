/*
 * ListObjectsV2 / Error body parsing with expat (see s3_list.h for the contract).
 *
 * A small state machine over element depth: depth 1 is the root (<ListBucketResult> or
 * <Error>), depth 2 its fields and <Contents>/<CommonPrefixes>, depth 3 the fields of those.
 * Text is only collected inside the leaf elements we want, into one fixed buffer sized for the
 * largest of them, so a hostile body cannot make us allocate more than its entries.
 * Keys are kept raw while parsing and decoded at the end, because <EncodingType> may come after
 * the <Contents> it applies to (MinIO puts it last).
 */
#include "fetch/s3/s3_list.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <expat.h>

#define MAX_DEPTH 32
#define TEXT_MAX S3_TOKEN_MAX                /* the largest leaf we collect */
#define RAW_KEY_MAX ((size_t)3 * S3_KEY_MAX) /* a key of S3_KEY_MAX bytes, all %-escaped */
#define SMALL_MAX 64                         /* numbers, booleans, dates, EncodingType */
#define FEED_CHUNK (1 << 20)

enum leaf {
	LEAF_NONE,
	/* <ListBucketResult> */
	LEAF_IS_TRUNCATED,
	LEAF_NEXT_TOKEN,
	LEAF_KEY_COUNT,
	LEAF_ENCODING_TYPE,
	/* <Contents> */
	LEAF_KEY,
	LEAF_SIZE,
	LEAF_ETAG,
	LEAF_LAST_MODIFIED,
	/* <CommonPrefixes> */
	LEAF_PREFIX,
	/* <Error>: copied, truncated, into struct s3_error */
	LEAF_ERR_CODE,
	LEAF_ERR_MESSAGE,
	LEAF_ERR_REGION,
	LEAF_ERR_ENDPOINT,
	LEAF_ERR_BUCKET,
	LEAF_ERR_REQUEST_ID,
};

enum container { IN_NONE, IN_CONTENTS, IN_PREFIXES };

struct s3_list_parser {
	XML_Parser xp;
	size_t max_entries;
	size_t max_bytes;
	size_t fed;
	int rc; /* sticky: 0 or -errno */
	char err[256];
	bool finished;

	int depth;
	enum s3_doc_kind kind; /* 0 until the root element */
	enum container container;
	enum leaf leaf;
	size_t leaf_max;    /* bytes of text allowed in the current leaf */
	bool leaf_truncate; /* excess text is dropped (error fields) instead of an error */
	const char *leaf_name;
	size_t text_len;
	char text[TEXT_MAX + 1];

	/* The <Contents> or <CommonPrefixes> being read. */
	struct s3_object cur;
	bool cur_has_size;
	char *cur_prefix;

	struct s3_list_page page; /* keys still raw until finish */
	size_t cap_objects;
	size_t cap_prefixes;
	struct s3_error error;
};

static void fail(struct s3_list_parser *p, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records the first error and stops expat. */
static void fail(struct s3_list_parser *p, int rc, const char *fmt, ...)
{
	va_list ap;

	if (p->rc)
		return;
	p->rc = rc;
	va_start(ap, fmt);
	vsnprintf(p->err, sizeof(p->err), fmt, ap);
	va_end(ap);
	if (p->xp)
		XML_StopParser(p->xp, XML_FALSE);
}

/* Copies at most 32 bytes of untrusted text for a message, non-printables as '?'. */
static const char *quote(const char *s, char buf[40])
{
	size_t i;

	for (i = 0; s[i] && i < 32; i++) {
		unsigned char c = (unsigned char)s[i];
		buf[i] = s[i];
		if (c < 0x20 || c >= 0x7f)
			buf[i] = '?';
	}
	if (s[i]) {
		memcpy(buf + i, "...", 3);
		i += 3;
	}
	buf[i] = '\0';
	return buf;
}

/* Copies text into a fixed field, truncating, with control characters as spaces. */
static void copy_field(char *dst, size_t dst_len, const char *src, size_t len)
{
	size_t n = len < dst_len - 1 ? len : dst_len - 1;

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)src[i];
		dst[i] = src[i];
		if (c < 0x20 || c == 0x7f)
			dst[i] = ' ';
	}
	dst[n] = '\0';
}

static char *dup_text(struct s3_list_parser *p)
{
	char *s = malloc(p->text_len + 1);

	if (!s) {
		fail(p, -ENOMEM, "out of memory");
		return NULL;
	}
	memcpy(s, p->text, p->text_len + 1);
	return s;
}

/* Trims XML white space (for numbers, booleans, dates; never for keys). */
static const char *trimmed(char *s)
{
	char *e = s + strlen(s);

	while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
		s++;
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
		e--;
	*e = '\0';
	return s;
}

static int parse_u64(const char *s, uint64_t *out)
{
	uint64_t v = 0;

	if (!*s)
		return -EINVAL;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -EINVAL;
		unsigned d = (unsigned)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -EINVAL;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

static int digits(const char *s, int n)
{
	int v = 0;

	for (int i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	unsigned yoe = (unsigned)(y - era * 400);
	unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + (int64_t)doe - 719468;
}

/* "2009-10-12T17:50:30.000Z" (fraction optional) to seconds; -EINVAL for anything else. */
static int parse_time(const char *s, int64_t *out)
{
	int y, mo, d, h, mi, sec;
	const char *z;

	if (strlen(s) < 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' ||
	    s[16] != ':')
		return -EINVAL;
	y = digits(s, 4);
	mo = digits(s + 5, 2);
	d = digits(s + 8, 2);
	h = digits(s + 11, 2);
	mi = digits(s + 14, 2);
	sec = digits(s + 17, 2);
	if (y < 0 || mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 ||
	    sec < 0 || sec > 60)
		return -EINVAL;
	z = s + 19;
	if (*z == '.') {
		z++;
		if (*z < '0' || *z > '9')
			return -EINVAL;
		while (*z >= '0' && *z <= '9')
			z++;
	}
	if (strcmp(z, "Z") != 0)
		return -EINVAL;
	*out = days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 + (int64_t)h * 3600 +
	       (int64_t)mi * 60 + sec;
	return 0;
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

long s3_url_decode(const char *in, size_t len, char *out, size_t out_len)
{
	size_t n = 0;

	if (out_len == 0)
		return -E2BIG;
	for (size_t i = 0; i < len; i++) {
		char c = in[i];
		if (c == '%') {
			int hi, lo;
			if (len - i < 3)
				return -EINVAL;
			hi = hexval(in[i + 1]);
			lo = hexval(in[i + 2]);
			if (hi < 0 || lo < 0)
				return -EINVAL;
			c = (char)(hi * 16 + lo);
			if (c == '\0')
				return -EILSEQ;
			i += 2;
		} else if (c == '+') {
			c = ' ';
		} else if (c == '\0') {
			return -EINVAL;
		}
		if (n + 1 >= out_len)
			return -E2BIG;
		out[n++] = c;
	}
	out[n] = '\0';
	return (long)n;
}

static void start_leaf(struct s3_list_parser *p, enum leaf leaf, const char *name, size_t max,
                       bool truncate)
{
	p->leaf = leaf;
	p->leaf_name = name;
	p->leaf_max = max;
	p->leaf_truncate = truncate;
	p->text_len = 0;
	p->text[0] = '\0';
}

static bool grow(struct s3_list_parser *p, void **arr, size_t *cap, size_t n, size_t elem)
{
	void *na;
	size_t ncap;

	if (n < *cap)
		return true;
	ncap = *cap ? *cap * 2 : 64;
	na = realloc(*arr, ncap * elem);
	if (!na) {
		fail(p, -ENOMEM, "out of memory");
		return false;
	}
	*arr = na;
	*cap = ncap;
	return true;
}

static bool entry_room(struct s3_list_parser *p)
{
	if (p->page.n_objects + p->page.n_prefixes >= p->max_entries) {
		fail(p, -E2BIG, "more than %zu entries in one listing page", p->max_entries);
		return false;
	}
	return true;
}

static void XMLCALL on_start(void *ud, const XML_Char *name, const XML_Char **attrs)
{
	struct s3_list_parser *p = ud;
	int d;

	if (p->rc)
		return;
	d = ++p->depth;
	if (d > MAX_DEPTH) {
		fail(p, -E2BIG, "XML nested deeper than %d elements", MAX_DEPTH);
		return;
	}
	if (p->leaf != LEAF_NONE) {
		fail(p, -EBADMSG, "unexpected element <%.64s> inside <%s>", name, p->leaf_name);
		return;
	}
	if (d == 1) {
		if (strcmp(name, "ListBucketResult") == 0)
			p->kind = S3_DOC_LIST;
		else if (strcmp(name, "Error") == 0)
			p->kind = S3_DOC_ERROR;
		else
			fail(p, -EBADMSG,
			     "unexpected root element <%.64s> (want ListBucketResult or Error)",
			     name);
		return;
	}
	if (p->kind == S3_DOC_ERROR && d == 2) {
		if (strcmp(name, "Code") == 0)
			start_leaf(p, LEAF_ERR_CODE, "Code", TEXT_MAX, true);
		else if (strcmp(name, "Message") == 0)
			start_leaf(p, LEAF_ERR_MESSAGE, "Message", TEXT_MAX, true);
		else if (strcmp(name, "Region") == 0)
			start_leaf(p, LEAF_ERR_REGION, "Region", TEXT_MAX, true);
		else if (strcmp(name, "Endpoint") == 0)
			start_leaf(p, LEAF_ERR_ENDPOINT, "Endpoint", TEXT_MAX, true);
		else if (strcmp(name, "BucketName") == 0 || strcmp(name, "Bucket") == 0)
			start_leaf(p, LEAF_ERR_BUCKET, "Bucket", TEXT_MAX, true);
		else if (strcmp(name, "RequestId") == 0)
			start_leaf(p, LEAF_ERR_REQUEST_ID, "RequestId", TEXT_MAX, true);
		return;
	}
	if (p->kind != S3_DOC_LIST)
		return;
	if (d == 2) {
		if (strcmp(name, "Contents") == 0) {
			if (!entry_room(p))
				return;
			p->container = IN_CONTENTS;
			memset(&p->cur, 0, sizeof(p->cur));
			p->cur_has_size = false;
		} else if (strcmp(name, "CommonPrefixes") == 0) {
			if (!entry_room(p))
				return;
			p->container = IN_PREFIXES;
			p->cur_prefix = NULL;
		} else if (strcmp(name, "IsTruncated") == 0) {
			start_leaf(p, LEAF_IS_TRUNCATED, "IsTruncated", SMALL_MAX, false);
		} else if (strcmp(name, "NextContinuationToken") == 0) {
			start_leaf(p, LEAF_NEXT_TOKEN, "NextContinuationToken", S3_TOKEN_MAX,
			           false);
		} else if (strcmp(name, "KeyCount") == 0) {
			start_leaf(p, LEAF_KEY_COUNT, "KeyCount", SMALL_MAX, false);
		} else if (strcmp(name, "EncodingType") == 0) {
			start_leaf(p, LEAF_ENCODING_TYPE, "EncodingType", SMALL_MAX, false);
		}
		return;
	}
	if (d == 3 && p->container == IN_CONTENTS) {
		if (strcmp(name, "Key") == 0)
			start_leaf(p, LEAF_KEY, "Key", RAW_KEY_MAX, false);
		else if (strcmp(name, "Size") == 0)
			start_leaf(p, LEAF_SIZE, "Size", SMALL_MAX, false);
		else if (strcmp(name, "ETag") == 0)
			start_leaf(p, LEAF_ETAG, "ETag", S3_ETAG_MAX - 1, false);
		else if (strcmp(name, "LastModified") == 0)
			start_leaf(p, LEAF_LAST_MODIFIED, "LastModified", SMALL_MAX, false);
	} else if (d == 3 && p->container == IN_PREFIXES) {
		if (strcmp(name, "Prefix") == 0)
			start_leaf(p, LEAF_PREFIX, "Prefix", RAW_KEY_MAX, false);
	}
}

static void XMLCALL on_text(void *ud, const XML_Char *s, int len)
{
	struct s3_list_parser *p = ud;
	size_t n = (size_t)len;

	if (p->rc || p->leaf == LEAF_NONE || len <= 0)
		return;
	if (p->text_len + n > p->leaf_max) {
		if (!p->leaf_truncate) {
			/* Over 3 * S3_KEY_MAX escaped bytes is over S3_KEY_MAX decoded ones. */
			bool key = p->leaf == LEAF_KEY || p->leaf == LEAF_PREFIX;
			fail(p, -E2BIG, "<%s> longer than %zu bytes", p->leaf_name,
			     key ? (size_t)S3_KEY_MAX : p->leaf_max);
			return;
		}
		n = p->leaf_max - p->text_len;
	}
	memcpy(p->text + p->text_len, s, n);
	p->text_len += n;
	p->text[p->text_len] = '\0';
}

static void end_leaf(struct s3_list_parser *p)
{
	enum leaf leaf = p->leaf;
	char q[40];
	uint64_t v;

	p->leaf = LEAF_NONE;
	switch (leaf) {
	case LEAF_NONE:
		break;
	case LEAF_IS_TRUNCATED: {
		const char *t = trimmed(p->text);
		if (strcmp(t, "true") == 0)
			p->page.is_truncated = true;
		else if (strcmp(t, "false") == 0)
			p->page.is_truncated = false;
		else
			fail(p, -EBADMSG, "bad <IsTruncated> \"%s\"", quote(t, q));
		break;
	}
	case LEAF_NEXT_TOKEN:
		free(p->page.next_token);
		p->page.next_token = NULL;
		if (p->text_len > 0)
			p->page.next_token = dup_text(p);
		break;
	case LEAF_KEY_COUNT: {
		const char *t = trimmed(p->text);
		if (parse_u64(t, &v) < 0 || v > LONG_MAX)
			fail(p, -EBADMSG, "bad <KeyCount> \"%s\"", quote(t, q));
		else
			p->page.key_count = (long)v;
		break;
	}
	case LEAF_ENCODING_TYPE: {
		const char *t = trimmed(p->text);
		if (strcmp(t, "url") == 0)
			p->page.url_encoded = true;
		else
			fail(p, -EBADMSG, "unsupported <EncodingType> \"%s\"", quote(t, q));
		break;
	}
	case LEAF_KEY:
		if (p->cur.key) {
			fail(p, -EBADMSG, "two <Key> elements in one <Contents>");
			break;
		}
		p->cur.key = dup_text(p);
		break;
	case LEAF_SIZE: {
		const char *t = trimmed(p->text);
		if (parse_u64(t, &v) < 0 || v > (uint64_t)INT64_MAX) {
			fail(p, -EBADMSG, "bad <Size> \"%s\"", quote(t, q));
			break;
		}
		p->cur.size = v;
		p->cur_has_size = true;
		break;
	}
	case LEAF_ETAG:
		memcpy(p->cur.etag, p->text, p->text_len + 1);
		break;
	case LEAF_LAST_MODIFIED: {
		int64_t t;
		p->cur.mtime = parse_time(trimmed(p->text), &t) == 0 ? t : 0;
		break;
	}
	case LEAF_PREFIX:
		if (p->cur_prefix) {
			fail(p, -EBADMSG, "two <Prefix> elements in one <CommonPrefixes>");
			break;
		}
		p->cur_prefix = dup_text(p);
		break;
	case LEAF_ERR_CODE:
		copy_field(p->error.code, sizeof(p->error.code), p->text, p->text_len);
		break;
	case LEAF_ERR_MESSAGE:
		copy_field(p->error.message, sizeof(p->error.message), p->text, p->text_len);
		break;
	case LEAF_ERR_REGION:
		copy_field(p->error.region, sizeof(p->error.region), p->text, p->text_len);
		break;
	case LEAF_ERR_ENDPOINT:
		copy_field(p->error.endpoint, sizeof(p->error.endpoint), p->text, p->text_len);
		break;
	case LEAF_ERR_BUCKET:
		copy_field(p->error.bucket, sizeof(p->error.bucket), p->text, p->text_len);
		break;
	case LEAF_ERR_REQUEST_ID:
		copy_field(p->error.request_id, sizeof(p->error.request_id), p->text, p->text_len);
		break;
	}
}

static void end_contents(struct s3_list_parser *p)
{
	struct s3_list_page *pg = &p->page;

	if (!p->cur.key) {
		fail(p, -EBADMSG, "<Contents> without <Key>");
		return;
	}
	if (!p->cur_has_size) {
		fail(p, -EBADMSG, "<Contents> without <Size>");
		return;
	}
	if (!grow(p, (void **)&pg->objects, &p->cap_objects, pg->n_objects, sizeof(*pg->objects)))
		return;
	pg->objects[pg->n_objects++] = p->cur;
	memset(&p->cur, 0, sizeof(p->cur));
}

static void end_prefixes(struct s3_list_parser *p)
{
	struct s3_list_page *pg = &p->page;

	if (!p->cur_prefix) {
		fail(p, -EBADMSG, "<CommonPrefixes> without <Prefix>");
		return;
	}
	if (!grow(p, (void **)&pg->prefixes, &p->cap_prefixes, pg->n_prefixes,
	          sizeof(*pg->prefixes)))
		return;
	pg->prefixes[pg->n_prefixes++] = p->cur_prefix;
	p->cur_prefix = NULL;
}

static void XMLCALL on_end(void *ud, const XML_Char *name)
{
	struct s3_list_parser *p = ud;

	if (p->rc)
		return;
	if (p->leaf != LEAF_NONE)
		end_leaf(p);
	else if (p->depth == 2 && p->container == IN_CONTENTS)
		end_contents(p);
	else if (p->depth == 2 && p->container == IN_PREFIXES)
		end_prefixes(p);
	if (p->depth == 2)
		p->container = IN_NONE;
	p->depth--;
}

static void XMLCALL on_doctype(void *ud, const XML_Char *name, const XML_Char *sysid,
                               const XML_Char *pubid, int has_internal_subset)
{
	fail(ud, -EBADMSG, "a DOCTYPE is not allowed in an S3 response");
}

static void XMLCALL on_entity_decl(void *ud, const XML_Char *name, int is_param,
                                   const XML_Char *value, int value_len, const XML_Char *base,
                                   const XML_Char *sysid, const XML_Char *pubid,
                                   const XML_Char *notation)
{
	fail(ud, -EBADMSG, "an entity declaration is not allowed in an S3 response");
}

int s3_list_parser_new(const struct s3_list_limits *limits, struct s3_list_parser **out)
{
	struct s3_list_parser *p = calloc(1, sizeof(*p));

	*out = NULL;
	if (!p)
		return -ENOMEM;
	p->max_entries =
	    limits && limits->max_entries ? limits->max_entries : S3_LIST_DEFAULT_MAX_ENTRIES;
	p->max_bytes = limits && limits->max_bytes ? limits->max_bytes : S3_LIST_DEFAULT_MAX_BYTES;
	p->page.key_count = -1;
	p->xp = XML_ParserCreate(NULL);
	if (!p->xp) {
		free(p);
		return -ENOMEM;
	}
	XML_SetUserData(p->xp, p);
	XML_SetElementHandler(p->xp, on_start, on_end);
	XML_SetCharacterDataHandler(p->xp, on_text);
	XML_SetStartDoctypeDeclHandler(p->xp, on_doctype);
	XML_SetEntityDeclHandler(p->xp, on_entity_decl);
	XML_SetParamEntityParsing(p->xp, XML_PARAM_ENTITY_PARSING_NEVER);
	*out = p;
	return 0;
}

static int xml_failed(struct s3_list_parser *p)
{
	if (!p->rc) {
		enum XML_Error code = XML_GetErrorCode(p->xp);
		p->rc = code == XML_ERROR_NO_MEMORY ? -ENOMEM : -EBADMSG;
		snprintf(p->err, sizeof(p->err), "malformed XML at line %lu column %lu: %s",
		         (unsigned long)XML_GetCurrentLineNumber(p->xp),
		         (unsigned long)XML_GetCurrentColumnNumber(p->xp), XML_ErrorString(code));
	}
	return p->rc;
}

int s3_list_parser_feed(struct s3_list_parser *p, const void *data, size_t len)
{
	const char *s = data;

	if (p->rc)
		return p->rc;
	if (p->finished) {
		fail(p, -EINVAL, "body fed after finish");
		return p->rc;
	}
	if (len > p->max_bytes - p->fed) {
		fail(p, -E2BIG, "response body larger than %zu bytes", p->max_bytes);
		return p->rc;
	}
	p->fed += len;
	while (len > 0) {
		int n = len > FEED_CHUNK ? FEED_CHUNK : (int)len;
		if (XML_Parse(p->xp, s, n, XML_FALSE) != XML_STATUS_OK)
			return xml_failed(p);
		s += n;
		len -= (size_t)n;
	}
	return 0;
}

/*
 * Decodes (or checks) a raw key or prefix in place: replaces *s with the decoded copy.
 * 1 for a key that holds a NUL byte: a real key (S3 lets a key hold any character), but no
 * file can take its name, so the caller leaves it out and counts it.
 */
static int finish_key(struct s3_list_parser *p, char **s, bool url, const char *what)
{
	char buf[S3_KEY_MAX + 1], q[40];
	size_t len = strlen(*s);
	long n;

	if (!url) {
		if (len > S3_KEY_MAX) {
			fail(p, -E2BIG, "%s longer than %d bytes", what, S3_KEY_MAX);
			return p->rc;
		}
		n = (long)len;
	} else {
		n = s3_url_decode(*s, len, buf, sizeof(buf));
		if (n == -E2BIG) {
			fail(p, -E2BIG, "%s longer than %d bytes", what, S3_KEY_MAX);
			return p->rc;
		}
		if (n == -EILSEQ)
			return 1;
		if (n < 0) {
			fail(p, -EBADMSG, "%s \"%s\" has a malformed %%-escape", what,
			     quote(*s, q));
			return p->rc;
		}
		memcpy(*s, buf, (size_t)n + 1); /* decoding never lengthens */
	}
	if (n == 0) {
		fail(p, -EBADMSG, "empty %s", what);
		return p->rc;
	}
	return 0;
}

/* Leaves a key out of pg (it owns raw, as sent): the first one is kept, to be named. */
static void unnamable(struct s3_list_page *pg, char *raw)
{
	if (pg->n_unnamable++ == 0)
		pg->first_unnamable = raw;
	else
		free(raw);
}

static void page_free(struct s3_list_page *pg)
{
	for (size_t i = 0; i < pg->n_objects; i++)
		free(pg->objects[i].key);
	free(pg->objects);
	for (size_t i = 0; i < pg->n_prefixes; i++)
		free(pg->prefixes[i]);
	free(pg->prefixes);
	free(pg->next_token);
	free(pg->first_unnamable);
	memset(pg, 0, sizeof(*pg));
	pg->key_count = -1;
}

int s3_list_parser_finish(struct s3_list_parser *p, struct s3_list_result *out)
{
	memset(out, 0, sizeof(*out));
	out->page.key_count = -1;
	if (p->rc)
		return p->rc;
	if (p->finished) {
		fail(p, -EINVAL, "finish called twice");
		return p->rc;
	}
	p->finished = true;
	if (XML_Parse(p->xp, "", 0, XML_TRUE) != XML_STATUS_OK)
		return xml_failed(p);
	if (p->kind == S3_DOC_ERROR) {
		out->kind = S3_DOC_ERROR;
		out->error = p->error;
		return 0;
	}
	if (p->kind != S3_DOC_LIST) {
		fail(p, -EBADMSG, "no ListBucketResult or Error element");
		return p->rc;
	}
	if (p->page.is_truncated && !p->page.next_token) {
		fail(p, -EBADMSG, "<IsTruncated> is true but there is no <NextContinuationToken>");
		return p->rc;
	}
	/* Each slot is moved down or handed to unnamable as it is done, and emptied: a key
	 * failing later leaves every pointer owned once, for page_free. */
	size_t kept = 0;
	for (size_t i = 0; i < p->page.n_objects; i++) {
		struct s3_object *o = &p->page.objects[i];
		int rc = finish_key(p, &o->key, p->page.url_encoded, "<Key>");
		if (rc < 0)
			return p->rc;
		if (rc == 0) {
			struct s3_object done = *o;
			o->key = NULL;
			p->page.objects[kept++] = done;
		} else {
			unnamable(&p->page, o->key);
			o->key = NULL;
		}
	}
	p->page.n_objects = kept;
	kept = 0;
	for (size_t i = 0; i < p->page.n_prefixes; i++) {
		char **prefix = &p->page.prefixes[i];
		int rc = finish_key(p, prefix, p->page.url_encoded, "<CommonPrefixes><Prefix>");
		if (rc < 0)
			return p->rc;
		char *done = *prefix;
		*prefix = NULL;
		if (rc == 0)
			p->page.prefixes[kept++] = done;
		else
			unnamable(&p->page, done);
	}
	p->page.n_prefixes = kept;
	out->kind = S3_DOC_LIST;
	out->page = p->page;
	memset(&p->page, 0, sizeof(p->page));
	p->cap_objects = p->cap_prefixes = 0;
	return 0;
}

const char *s3_list_parser_errmsg(const struct s3_list_parser *p)
{
	return p->err;
}

void s3_list_parser_free(struct s3_list_parser *p)
{
	if (!p)
		return;
	page_free(&p->page);
	free(p->cur.key);
	free(p->cur_prefix);
	if (p->xp)
		XML_ParserFree(p->xp);
	free(p);
}

void s3_list_result_free(struct s3_list_result *r)
{
	if (!r)
		return;
	page_free(&r->page);
	memset(r, 0, sizeof(*r));
	r->page.key_count = -1;
}

int s3_list_parse(const void *body, size_t len, const struct s3_list_limits *limits,
                  struct s3_list_result *out, char *err, size_t err_len)
{
	struct s3_list_parser *p;
	int rc;

	memset(out, 0, sizeof(*out));
	out->page.key_count = -1;
	rc = s3_list_parser_new(limits, &p);
	if (rc < 0) {
		if (err && err_len)
			snprintf(err, err_len, "out of memory");
		return rc;
	}
	rc = s3_list_parser_feed(p, body, len);
	if (rc == 0)
		rc = s3_list_parser_finish(p, out);
	if (rc < 0 && err && err_len)
		snprintf(err, err_len, "%s", p->err);
	s3_list_parser_free(p);
	return rc;
}

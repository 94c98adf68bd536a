/*
 * manifest_stored.c checks an object's `stored` (manifest_stored.h), read with yajl's event
 * parser in one pass: its text was found to be JSON already, by the parsers that read the
 * rest of the manifest, and a frame table goes straight into its 4 bytes a frame (a tree
 * of it would cost some 90 bytes a frame: a hostile manifest's table of millions, gigabytes).
 * Every rule doc/manifest.md lists is checked here, before anything relies on the table: a
 * reader's range maps to frames by it, so a table that lies would misplace every read.
 */
#include "fetch/source/manifest_stored.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_parse.h>
#include <zstd.h>

#include "fetch/source/frame_table.h"
#include "util/say.h"

/* The keys of stored that mean something; others are ignored. */
enum key { K_ENCODING, K_SIZE, K_SHA256, K_FRAME, K_FRAMES, K_COUNT };
static const char *const key_names[K_COUNT] = {"encoding", "size", "sha256", "frame", "frames"};

/* A JSON value's kind, as far as the checks tell them apart. */
enum kind { V_OTHER, V_INT, V_TEXT, V_ARRAY };

struct value {
	bool seen; /* the first of duplicate keys counts, as with the manifest's other fields */
	enum kind kind;
	int64_t i;     /* V_INT that fits in int64_t (else V_OTHER) */
	char text[68]; /* V_TEXT of up to 64 bytes without NUL (else text_ok false) */
	bool text_ok;
};

/* The pass over stored: depth 1 is inside its object, 2 inside its frames array. */
struct parse {
	size_t depth;
	int key;        /* the key whose value comes now at depth 1; -1: none */
	bool in_frames; /* depth 2 values are frame lengths */
	struct value v[K_COUNT];
	/* The lengths read, at most keep of them (one more cannot be a right table); n counts
	 * them all. One that is not an integer from 1 to UINT32_MAX is kept as 0, which the
	 * table's check refuses. keep is the most the smallest frame makes of size bytes, and
	 * the object's own count once its frame is known (the publisher writes it first). */
	uint32_t *len;
	size_t n, cap, keep;
	uint64_t size;
	int rc; /* -ENOMEM */
};

/* The value now at depth 1, or NULL; marked seen with kind. */
static struct value *top_value(struct parse *p, enum kind kind)
{
	struct value *v;

	if (p->depth != 1 || p->key < 0)
		return NULL;
	v = &p->v[p->key];
	p->key = -1;
	v->seen = true;
	v->kind = kind;
	return v;
}

static int append_length(struct parse *p, bool ok, int64_t i)
{
	if (p->n < p->keep) {
		if (p->n == p->cap) {
			size_t cap = p->cap ? p->cap * 2 : 64;
			uint32_t *len =
			    realloc(p->len, (cap < p->keep ? cap : p->keep) * sizeof(*len));
			if (!len) {
				p->rc = -ENOMEM;
				return 0;
			}
			p->len = len;
			p->cap = cap < p->keep ? cap : p->keep;
		}
		p->len[p->n] = ok ? (uint32_t)i : 0;
	}
	p->n++;
	return 1;
}

/* A scalar or a container's start: where it goes (an element of frames, a field). */
static int on_value(struct parse *p, enum kind kind, int64_t i)
{
	if (p->in_frames && p->depth == 2)
		return append_length(p, kind == V_INT && i >= 1 && i <= UINT32_MAX, i);
	bool frame = p->depth == 1 && p->key == K_FRAME;
	struct value *v = top_value(p, kind);
	if (v)
		v->i = i;
	if (frame && kind == V_INT && i >= MANIFEST_FRAME_MIN && i <= MANIFEST_FRAME_MAX) {
		uint64_t count = frame_table_count(p->size, (uint64_t)i);
		if (count < p->keep)
			p->keep = (size_t)count;
	}
	return 1;
}

static int on_null(void *ctx)
{
	return on_value(ctx, V_OTHER, 0);
}

static int on_boolean(void *ctx, int b)
{
	(void)b;
	return on_value(ctx, V_OTHER, 0);
}

/* Numbers come as their text: an integer is one without fraction or exponent that fits. */
static int on_number(void *ctx, const char *s, size_t n)
{
	char digits[24], *end;

	if (n >= sizeof(digits) || memchr(s, '.', n) || memchr(s, 'e', n) || memchr(s, 'E', n))
		return on_value(ctx, V_OTHER, 0);
	memcpy(digits, s, n);
	digits[n] = '\0';
	errno = 0;
	long long v = strtoll(digits, &end, 10);
	return on_value(ctx, errno == 0 && *end == '\0' ? V_INT : V_OTHER, v);
}

static int on_string(void *ctx, const unsigned char *s, size_t n)
{
	struct parse *p = ctx;

	if (p->in_frames && p->depth == 2)
		return append_length(p, false, 0);
	struct value *v = top_value(p, V_TEXT);
	if (v) {
		v->text_ok = n < sizeof(v->text) && !memchr(s, '\0', n);
		if (v->text_ok) {
			memcpy(v->text, s, n);
			v->text[n] = '\0';
		}
	}
	return 1;
}

static int on_map_key(void *ctx, const unsigned char *key, size_t n)
{
	struct parse *p = ctx;

	if (p->depth != 1)
		return 1;
	p->key = -1;
	for (int k = 0; k < K_COUNT; k++)
		if (strlen(key_names[k]) == n && memcmp(key, key_names[k], n) == 0 && !p->v[k].seen)
			p->key = k;
	return 1;
}

static int on_start_map(void *ctx)
{
	struct parse *p = ctx;
	int rc = p->depth == 0 ? 1 : on_value(p, V_OTHER, 0);

	p->depth++;
	return rc;
}

static int on_start_array(void *ctx)
{
	struct parse *p = ctx;
	bool frames = p->depth == 1 && p->key == K_FRAMES;
	int rc = p->depth == 0 ? 1 : on_value(p, V_ARRAY, 0);

	p->in_frames |= frames;
	p->depth++;
	return rc;
}

static int on_end(void *ctx)
{
	struct parse *p = ctx;

	p->depth--;
	if (p->depth == 1)
		p->in_frames = false;
	return 1;
}

static const yajl_callbacks callbacks = {
    .yajl_null = on_null,
    .yajl_boolean = on_boolean,
    .yajl_number = on_number,
    .yajl_string = on_string,
    .yajl_start_map = on_start_map,
    .yajl_map_key = on_map_key,
    .yajl_end_map = on_end,
    .yajl_start_array = on_start_array,
    .yajl_end_array = on_end,
};

/* Whether v is an integer from lo to hi; *out gets it. */
static bool integer_in(const struct value *v, int64_t lo, int64_t hi, int64_t *out)
{
	if (!v->seen || v->kind != V_INT || v->i < lo || v->i > hi)
		return false;
	*out = v->i;
	return true;
}

static bool is_hex64(const struct value *v)
{
	if (v->kind != V_TEXT || !v->text_ok || strlen(v->text) != 64)
		return false;
	for (size_t k = 0; k < 64; k++) {
		char c = v->text[k];
		if (!((c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')))
			return false;
	}
	return true;
}

/* The frame lengths read (p->n of them) checked against the object into out's table. */
static int read_frames(const struct parse *p, uint64_t size, struct manifest_stored *out, char *why,
                       size_t why_len)
{
	char said[200];

	if (frame_table_check(size, out->frame, p->len, p->n, out->size, said, sizeof(said)))
		return util_say(why, why_len, "stored.%s", said);
	out->frames_len = p->n * FRAME_TABLE_LE_BYTES;
	out->frames = malloc(out->frames_len ? out->frames_len : 1);
	if (!out->frames)
		return -ENOMEM;
	frame_table_encode_le(p->len, p->n, out->frames);
	return 0;
}

static int check(const struct parse *p, uint64_t size, uint64_t chunk_size,
                 struct manifest_stored *out, char *why, size_t why_len)
{
	const struct value *enc = &p->v[K_ENCODING], *frames = &p->v[K_FRAMES];
	int64_t n;

	if (!enc->seen)
		return util_say(why, why_len, "stored.encoding is missing");
	if (enc->kind != V_TEXT || !enc->text_ok || strcmp(enc->text, "zstd") != 0)
		return util_say(why, why_len,
		                "stored.encoding is not \"zstd\" (the only one known)");
	/* It names the stored bytes (their URL); reads are checked after decompression. */
	if (p->v[K_SHA256].seen && !is_hex64(&p->v[K_SHA256]))
		return util_say(why, why_len, "stored.sha256 is not 64 hex digits");
	if (!p->v[K_FRAME].seen)
		return util_say(why, why_len, "stored.frame is missing");
	if (!integer_in(&p->v[K_FRAME], MANIFEST_FRAME_MIN, MANIFEST_FRAME_MAX, &n) ||
	    (n & (n - 1)))
		return util_say(why, why_len, "stored.frame is not a power of two from %d to %d",
		                MANIFEST_FRAME_MIN, MANIFEST_FRAME_MAX);
	out->frame = (uint64_t)n;
	uint64_t count = frame_table_count(size, out->frame);
	if (!p->v[K_SIZE].seen)
		return util_say(why, why_len, "stored.size is missing");
	/* At least a byte a frame, at most zstd's bound for the whole: a size beyond that
	 * cannot be frames of these bytes. */
	uint64_t bound = ZSTD_compressBound(out->frame);
	uint64_t most =
	    count - 1 > (UINT64_MAX / 2) / bound
	        ? UINT64_MAX / 2
	        : (count - 1) * bound +
	              ZSTD_compressBound((size_t)frame_table_share(size, out->frame, count - 1));
	if (!integer_in(&p->v[K_SIZE], (int64_t)count, INT64_MAX, &n) || (uint64_t)n > most)
		return util_say(why, why_len,
		                "stored.size is not an integer from %" PRIu64 " to %" PRIu64
		                " (a byte a frame to zstd's bound)",
		                count, most);
	out->size = (uint64_t)n;
	if (chunk_size) {
		if (out->frame != chunk_size)
			return util_say(why, why_len,
			                "stored.frame %" PRIu64 " is not chunks.size %" PRIu64,
			                out->frame, chunk_size);
		if (frames->seen)
			return util_say(
			    why, why_len,
			    "stored.frames is not allowed with chunks (its hash list has "
			    "them)");
		return 0;
	}
	if (!frames->seen)
		return util_say(why, why_len, "stored.frames is missing");
	if (frames->kind != V_ARRAY)
		return util_say(why, why_len, "stored.frames is not an array");
	if (p->n > p->keep) /* then not the count either: the check names both */
		return util_say(why, why_len,
		                "stored.frames has %zu lengths, not the %" PRIu64
		                " frames of %" PRIu64 " bytes that %" PRIu64 " bytes make",
		                p->n, count, out->frame, size);
	return read_frames(p, size, out, why, why_len);
}

int manifest_stored_read(const char *stored, uint64_t size, uint64_t chunk_size,
                         struct manifest_stored *out, char *why, size_t why_len)
{
	/* More lengths than the smallest frame would make cannot be a right table: kept no
	 * further (counted all the same, for the message). */
	uint64_t most = size / MANIFEST_FRAME_MIN + 1;
	struct parse p = {.key = -1, .keep = most < SIZE_MAX / 8 ? most : 0, .size = size};
	yajl_handle parser;
	int rc;

	memset(out, 0, sizeof(*out));
	if (size == 0)
		return util_say(why, why_len, "stored is not allowed for an empty file");
	if (stored[0] != '{')
		return util_say(why, why_len, "stored is not an object");
	parser = yajl_alloc(&callbacks, NULL, &p);
	if (!parser)
		return -ENOMEM;
	yajl_config(parser, yajl_dont_validate_strings, 1); /* as the manifest's own parse */
	yajl_status st = yajl_parse(parser, (const unsigned char *)stored, strlen(stored));
	if (st == yajl_status_ok)
		st = yajl_complete_parse(parser);
	yajl_free(parser);
	if (p.rc)
		rc = p.rc;
	else if (st != yajl_status_ok) /* not reached: the manifest's parsers took it */
		rc = util_say(why, why_len, "stored is not JSON");
	else
		rc = check(&p, size, chunk_size, out, why, why_len);
	free(p.len);
	if (rc)
		manifest_stored_free(out);
	return rc;
}

void manifest_stored_free(struct manifest_stored *s)
{
	free(s->frames);
	s->frames = NULL;
	s->frames_len = 0;
}

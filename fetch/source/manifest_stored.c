/*
 * manifest_stored.c checks an object's `stored` (manifest_stored.h) with yajl's tree
 * parser: the object is small (a frame table of a 1 GiB file is 4,096 numbers) and its text
 * was found to be JSON already, by the parsers that read the rest of the manifest. Every
 * rule doc/manifest.md lists is checked here, before anything relies on the table: a
 * reader's range maps to frames by it, so a table that lies would misplace every read.
 */
#include "fetch/source/manifest_stored.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_tree.h>
#include <zstd.h>

__attribute__((format(printf, 3, 4))) static int why_is(char *why, size_t why_len, const char *fmt,
                                                        ...)
{
	va_list ap;

	if (why && why_len) {
		va_start(ap, fmt);
		vsnprintf(why, why_len, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/* The first value of key in object v, or NULL (the first of duplicate keys counts, as
 * with the manifest's other fields). */
static yajl_val member(yajl_val v, const char *key)
{
	for (size_t k = 0; k < v->u.object.len; k++)
		if (strcmp(v->u.object.keys[k], key) == 0)
			return v->u.object.values[k];
	return NULL;
}

/* Whether v is an integer from lo to hi; *out gets it. */
static bool integer_in(yajl_val v, int64_t lo, int64_t hi, int64_t *out)
{
	if (!YAJL_IS_INTEGER(v) || YAJL_GET_INTEGER(v) < lo || YAJL_GET_INTEGER(v) > hi)
		return false;
	*out = YAJL_GET_INTEGER(v);
	return true;
}

static bool is_hex64(yajl_val v)
{
	const char *s = YAJL_IS_STRING(v) ? v->u.string : NULL;

	if (!s || strlen(s) != 64)
		return false;
	for (size_t k = 0; k < 64; k++)
		if (!((s[k] >= '0' && s[k] <= '9') ||
		      ((s[k] | 0x20) >= 'a' && (s[k] | 0x20) <= 'f')))
			return false;
	return true;
}

/* Frame k's share of an object of size bytes in frames of `frame` bytes. */
static uint64_t share(uint64_t size, uint64_t frame, uint64_t k)
{
	uint64_t at = k * frame;

	return size - at < frame ? size - at : frame;
}

/* The frame lengths in frames (n of them, the count checked) into out's table. */
static int read_frames(yajl_val frames, uint64_t size, struct manifest_stored *out, char *why,
                       size_t why_len)
{
	size_t n = frames->u.array.len;
	uint64_t sum = 0;

	out->frames_len = n * 4;
	out->frames = malloc(out->frames_len ? out->frames_len : 1);
	if (!out->frames)
		return -ENOMEM;
	for (size_t k = 0; k < n; k++) {
		uint64_t bound = ZSTD_compressBound((size_t)share(size, out->frame, k));
		int64_t len;
		if (!integer_in(frames->u.array.values[k], 1, (int64_t)bound, &len))
			return why_is(why, why_len,
			              "stored.frames[%zu] is not a length from 1 to %" PRIu64
			              " (zstd's bound for its %" PRIu64 " bytes)",
			              k, bound, share(size, out->frame, k));
		unsigned char *b = out->frames + k * 4;
		b[0] = (unsigned char)len;
		b[1] = (unsigned char)(len >> 8);
		b[2] = (unsigned char)(len >> 16);
		b[3] = (unsigned char)(len >> 24);
		sum += (uint64_t)len;
	}
	if (sum != out->size)
		return why_is(why, why_len,
		              "stored.frames add up to %" PRIu64 ", not stored.size %" PRIu64, sum,
		              out->size);
	return 0;
}

static int check(yajl_val v, uint64_t size, uint64_t chunk_size, struct manifest_stored *out,
                 char *why, size_t why_len)
{
	yajl_val enc = member(v, "encoding"), frames = member(v, "frames"),
	         sha = member(v, "sha256");
	int64_t n;

	if (!enc)
		return why_is(why, why_len, "stored.encoding is missing");
	if (!YAJL_IS_STRING(enc) || strcmp(enc->u.string, "zstd") != 0)
		return why_is(why, why_len, "stored.encoding is not \"zstd\" (the only one known)");
	/* It names the stored bytes (their URL); reads are checked after decompression. */
	if (sha && !is_hex64(sha))
		return why_is(why, why_len, "stored.sha256 is not 64 hex digits");
	if (!member(v, "frame"))
		return why_is(why, why_len, "stored.frame is missing");
	if (!integer_in(member(v, "frame"), MANIFEST_FRAME_MIN, MANIFEST_FRAME_MAX, &n) ||
	    (n & (n - 1)))
		return why_is(why, why_len, "stored.frame is not a power of two from %d to %d",
		              MANIFEST_FRAME_MIN, MANIFEST_FRAME_MAX);
	out->frame = (uint64_t)n;
	uint64_t count = size / out->frame + (size % out->frame != 0);
	if (!member(v, "size"))
		return why_is(why, why_len, "stored.size is missing");
	/* At least a byte a frame, at most zstd's bound for the whole: a size beyond that
	 * cannot be frames of these bytes. */
	uint64_t bound = ZSTD_compressBound(out->frame);
	uint64_t most = count - 1 > (UINT64_MAX / 2) / bound
	                    ? UINT64_MAX / 2
	                    : (count - 1) * bound +
	                          ZSTD_compressBound((size_t)share(size, out->frame, count - 1));
	if (!integer_in(member(v, "size"), (int64_t)count, INT64_MAX, &n) || (uint64_t)n > most)
		return why_is(why, why_len,
		              "stored.size is not an integer from %" PRIu64 " to %" PRIu64
		              " (a byte a frame to zstd's bound)",
		              count, most);
	out->size = (uint64_t)n;
	if (chunk_size) {
		if (out->frame != chunk_size)
			return why_is(why, why_len,
			              "stored.frame %" PRIu64 " is not chunks.size %" PRIu64,
			              out->frame, chunk_size);
		if (frames)
			return why_is(why, why_len,
			              "stored.frames is not allowed with chunks (its hash list has "
			              "them)");
		return 0;
	}
	if (!frames)
		return why_is(why, why_len, "stored.frames is missing");
	if (!YAJL_IS_ARRAY(frames))
		return why_is(why, why_len, "stored.frames is not an array");
	if (frames->u.array.len != count)
		return why_is(why, why_len,
		              "stored.frames has %zu lengths, not the %" PRIu64
		              " frames of %" PRIu64 " bytes that %" PRIu64 " bytes make",
		              frames->u.array.len, count, out->frame, size);
	return read_frames(frames, size, out, why, why_len);
}

int manifest_stored_read(const char *stored, uint64_t size, uint64_t chunk_size,
                         struct manifest_stored *out, char *why, size_t why_len)
{
	char err[128];
	yajl_val v;
	int rc;

	memset(out, 0, sizeof(*out));
	if (size == 0)
		return why_is(why, why_len, "stored is not allowed for an empty file");
	v = yajl_tree_parse(stored, err, sizeof(err));
	if (!v)
		return strstr(err, "memory") ? -ENOMEM : why_is(why, why_len, "stored is not JSON");
	rc = YAJL_IS_OBJECT(v) ? check(v, size, chunk_size, out, why, why_len)
	                       : why_is(why, why_len, "stored is not an object");
	yajl_tree_free(v);
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

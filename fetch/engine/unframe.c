/*
 * The body of a compressed object's request (doc/manifest.md, version 3): stored bytes of
 * whole zstd frames, decompressed into the spool one frame at a time. Transfer thread only.
 *
 * A frame is decompressed once all its stored bytes are in (in one go, into a buffer of
 * exactly its share of the object), and its bytes are delivered only when it gave exactly
 * that share from exactly its stored length: a stream that is cut leaves no partial frame
 * behind, and the next request starts at a frame boundary. zstd never writes past the
 * buffer, so a frame that would decompress to more (a bomb) costs at most its share; a
 * frame header that asks for more than its frame (a window or a content size) is refused
 * before any decompression.
 *
 * Decompression stays on the transfer thread: measured (tests/bench/compress_speed.py, and
 * doc/testing.md's figures), zstd decodes several times faster than loopback delivers.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd_errors.h>

#include "fetch/engine/engine_i.h"
#include "util/log.h"

void unframe_range(const struct flight *f, uint64_t *start, uint64_t *end, uint64_t *so,
                   uint64_t *eo)
{
	flight_frames_round(f, start, end);
	*so = f->frames.stored_off[flight_frame_of(f, *start)];
	*eo = f->frames.stored_off[flight_frame_of(f, *end)];
}

uint64_t unframe_stored_pos(const struct stream *s)
{
	return s->f->frames.stored_off[s->z.frame] + s->z.in_len;
}

uint64_t unframe_whole_end(const struct flight *f, uint64_t eo)
{
	uint64_t lo = 0, hi = f->frames.n, lo_b, hi_b;

	/* The last frame boundary at or before eo: stored_off is increasing. */
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo + 1) / 2;
		if (f->frames.stored_off[mid] <= eo)
			lo = mid;
		else
			hi = mid - 1;
	}
	if (lo == f->frames.n)
		return f->size;
	flight_frame_bounds(f, lo, &lo_b, &hi_b);
	return lo_b;
}

/* The smallest log2 window that holds n bytes, within zstd's bounds. */
static int window_log_for(uint64_t n)
{
	int log = 10; /* ZSTD_WINDOWLOG_ABSOLUTEMIN */

	while (log < 30 && ((uint64_t)1 << log) < n)
		log++;
	return log;
}

/*
 * Decompresses one frame's stored bytes [src, src + len) into e->unframe.out, which must
 * come to exactly share bytes. 0, -ENOMEM, or -EIO with the reason in why.
 */
static int decode(struct engine *e, const struct flight *f, const void *src, size_t len,
                  size_t share, char *why, size_t cap)
{
	struct engine_unframe *u = &e->unframe;
	unsigned long long declared;
	size_t r;

	if (!u->dctx && !(u->dctx = ZSTD_createDCtx()))
		return -ENOMEM;
	if (u->out_cap < share) {
		unsigned char *out = realloc(u->out, f->frames.size);
		if (!out)
			return -ENOMEM;
		u->out = out;
		u->out_cap = f->frames.size;
	}
	/* One frame, ending exactly at its stored length: no second frame after it. */
	declared = ZSTD_getFrameContentSize(src, len);
	r = ZSTD_findFrameCompressedSize(src, len);
	if (declared == ZSTD_CONTENTSIZE_ERROR || ZSTD_isError(r) || r != len) {
		snprintf(why, cap, "is not one zstd frame of its %zu stored bytes", len);
		return -EIO;
	}
	if (declared != ZSTD_CONTENTSIZE_UNKNOWN && declared != share) {
		snprintf(why, cap, "declares %llu bytes, not its %zu", declared, share);
		return -EIO;
	}
	/* Streaming, into exactly its share: zstd stops when that is full (a frame that goes on
	 * is a bomb, and costs one block more at most), and refuses a window over the frame's
	 * size, which it would otherwise allocate. A frame that declares its size is decoded in
	 * one pass, straight into out. */
	ZSTD_DCtx_reset(u->dctx, ZSTD_reset_session_only);
	ZSTD_DCtx_setParameter(u->dctx, ZSTD_d_windowLogMax, window_log_for(f->frames.size));
	ZSTD_inBuffer in = {src, len, 0};
	ZSTD_outBuffer out = {u->out, share, 0};
	r = ZSTD_decompressStream(u->dctx, &out, &in);
	if (ZSTD_isError(r) && ZSTD_getErrorCode(r) == ZSTD_error_frameParameter_windowTooLarge) {
		snprintf(why, cap, "asks for a window larger than its frame's %" PRIu64 " bytes",
		         f->frames.size);
		return -EIO;
	}
	if (ZSTD_isError(r)) {
		snprintf(why, cap, "is not valid zstd (%s)", ZSTD_getErrorName(r));
		return -EIO;
	}
	if (r != 0 && out.pos == share) {
		snprintf(why, cap, "decompresses past its %zu bytes", share);
		return -EIO;
	}
	if (r != 0 || out.pos != share) {
		snprintf(why, cap, "decompresses to %zu bytes%s, not its %zu", out.pos,
		         r != 0 ? " and stops short of its end" : "", share);
		return -EIO;
	}
	return 0;
}

/*
 * Settles frame i of s that decode refused (why): logged, then with chunk hashes fetched
 * again (s stops before it) or failed for good (s goes on past it); without, s fails.
 * 0 to go on, or -EIO (s->fatal set).
 */
static int refuse_frame(struct stream *s, uint64_t i, uint64_t lo, uint64_t hi, const char *why)
{
	struct flight *f = s->f;
	bool chunked = flight_has_chunks(f), again = false;
	char shown[512];

	if (chunked)
		again = flight_chunk_undecodable(f, i, s->url_idx);
	util_log(again ? UTIL_LOG_WARN : UTIL_LOG_ERROR,
	         "%s: frame %" PRIu64 " (bytes %" PRIu64 "-%" PRIu64 ", stored %" PRIu64 "-%" PRIu64
	         ") %s, from %s; %s",
	         f->name, i, lo, hi, f->frames.stored_off[i], f->frames.stored_off[i + 1], why,
	         util_redact_url(f->src.urls[s->url_idx], shown, sizeof(shown)),
	         again     ? "fetching it again"
	         : chunked ? "reads of it get EIO"
	                   : "the download fails");
	if (again) {
		/* This request ends here; the frame and what follows are asked for anew. */
		s->end = s->pos;
		return 0;
	}
	if (chunked) {
		s->pos = hi;
		return 0;
	}
	s->fatal = -EIO;
	s->undecodable = true;
	stream_why(s, "frame %" PRIu64 " %s", i, why);
	return -EIO;
}

/* Frame s->z.frame's stored bytes are all in [src, src + len): decompress and deliver it. */
static int finish_frame(struct stream *s, const unsigned char *src, size_t len)
{
	struct engine *e = s->engine;
	struct flight *f = s->f;
	uint64_t i = s->z.frame, lo, hi, from;
	char why[160];
	int rc;

	flight_frame_bounds(f, i, &lo, &hi);
	s->z.frame++;
	s->z.in_len = 0;
	rc = decode(e, f, src, len, (size_t)(hi - lo), why, sizeof(why));
	if (rc == -EIO)
		return refuse_frame(s, i, lo, hi, why);
	if (rc) {
		s->fatal = rc;
		stream_why(s, "cannot decompress: %s", strerror(-rc));
		return rc;
	}
	from = s->z.drop_before > lo ? s->z.drop_before - lo : 0;
	rc = stream_take_body(s, lo + from, (const char *)e->unframe.out + from,
	                      (size_t)(hi - lo - from));
	if (rc) {
		stream_write_failed(s, rc);
		return rc;
	}
	atomic_fetch_add_explicit(&e->stats->delivered_bytes, hi - lo - from, memory_order_relaxed);
	s->pos = hi;
	return 0;
}

int unframe_body(struct stream *s, const char *data, size_t len, size_t *used)
{
	const struct flight *f = s->f;
	int rc;

	*used = 0;
	while (*used < len && s->pos < s->end) {
		uint64_t i = s->z.frame;
		size_t flen = (size_t)(f->frames.stored_off[i + 1] - f->frames.stored_off[i]);
		size_t take = len - *used < flen - s->z.in_len ? len - *used : flen - s->z.in_len;
		const unsigned char *src = (const unsigned char *)data + *used;
		*used += take;
		/* A frame that came whole in this piece is decoded where it lies. */
		if (s->z.in_len > 0 || take < flen) {
			if (!s->z.in && !(s->z.in = malloc(f->frames.max_stored))) {
				s->fatal = -ENOMEM;
				stream_why(s, "out of memory for a frame");
				return -ENOMEM;
			}
			memcpy(s->z.in + s->z.in_len, src, take);
			s->z.in_len += take;
			if (s->z.in_len < flen)
				continue;
			src = s->z.in;
		}
		rc = finish_frame(s, src, flen);
		if (rc)
			return rc;
	}
	return 0;
}

void unframe_stream_free(struct stream *s)
{
	free(s->z.in);
	s->z.in = NULL;
}

void unframe_engine_free(struct engine *e)
{
	ZSTD_freeDCtx(e->unframe.dctx);
	free(e->unframe.out);
	e->unframe.dctx = NULL;
	e->unframe.out = NULL;
	e->unframe.out_cap = 0;
}

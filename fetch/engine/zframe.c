/*
 * One zstd frame of a compressed object (doc/manifest.md, version 3), decompressed into
 * exactly its share of the object: the decoder alone, with no engine state, so the fuzzer
 * (tests/fuzz/fuzz_unframe.c), the bench and the engine's pool and transfer thread share it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <zstd_errors.h>

#include "fetch/engine/zframe.h"

/* The smallest log2 window that holds n bytes, within zstd's bounds. */
static int window_log_for(uint64_t n)
{
	int log = 10; /* ZSTD_WINDOWLOG_ABSOLUTEMIN */

	while (log < 30 && ((uint64_t)1 << log) < n)
		log++;
	return log;
}

int zframe_decode(ZSTD_DCtx *dctx, uint64_t frame_size, const void *src, size_t len,
                  unsigned char *dst, size_t share, char *why, size_t cap)
{
	unsigned long long declared;
	size_t r;

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
	ZSTD_DCtx_reset(dctx, ZSTD_reset_session_only);
	r = ZSTD_DCtx_setParameter(dctx, ZSTD_d_windowLogMax, window_log_for(frame_size));
	if (ZSTD_isError(r)) {
		/* Without the bound a frame could make zstd allocate any window it names. */
		snprintf(why, cap, "cannot be decoded with a bounded window (%s)",
		         ZSTD_getErrorName(r));
		return -EIO;
	}
	ZSTD_inBuffer in = {src, len, 0};
	ZSTD_outBuffer out = {dst, share, 0};
	r = ZSTD_decompressStream(dctx, &out, &in);
	if (ZSTD_isError(r) && ZSTD_getErrorCode(r) == ZSTD_error_frameParameter_windowTooLarge) {
		snprintf(why, cap, "asks for a window larger than its frame's %" PRIu64 " bytes",
		         frame_size);
		return -EIO;
	}
	if (ZSTD_isError(r)) {
		snprintf(why, cap, "is not valid zstd (%s)", ZSTD_getErrorName(r));
		return -EIO;
	}
	if (r != 0 && out.pos == share) {
		/* Full: it may have only its end left to read (a frame that declares no size),
		 * or more bytes (a bomb): one byte more tells, for one block's work at most. */
		unsigned char extra;
		ZSTD_outBuffer more = {&extra, 1, 0};
		r = ZSTD_decompressStream(dctx, &more, &in);
		if (ZSTD_isError(r) || more.pos > 0 || r != 0) {
			snprintf(why, cap, "decompresses past its %zu bytes", share);
			return -EIO;
		}
	}
	if (r != 0 || out.pos != share) {
		snprintf(why, cap, "decompresses to %zu bytes%s, not its %zu", out.pos,
		         r != 0 ? " and stops short of its end" : "", share);
		return -EIO;
	}
	return 0;
}

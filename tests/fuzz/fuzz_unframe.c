/*
 * libFuzzer target: one stored frame of a compressed object (fetch/engine/unframe.c), as a
 * hostile store may send it. The first byte picks the frame size (4 KiB to 64 KiB) and the
 * next two the frame's share of it; the rest is the frame's stored bytes. Invariants: a
 * frame is accepted only when it decompressed to exactly its share; a refused one says why;
 * nothing is written past the share (ASan: dst is exactly share bytes on the heap); a bomb
 * costs at most a block beyond it (libFuzzer's -rss_limit_mb catches more).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "fetch/engine/zframe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static ZSTD_DCtx *dctx;
	char why[160] = "";

	if (size < 3)
		return 0;
	uint64_t frame = (uint64_t)4096 << (data[0] % 5);
	size_t share = 1 + ((size_t)data[1] << 8 | data[2]) % frame;
	if (!dctx && !(dctx = ZSTD_createDCtx()))
		abort();
	unsigned char *dst = malloc(share);
	/* A heap copy of exactly the stored bytes: ASan catches any read past them. */
	unsigned char *src = malloc(size - 3 ? size - 3 : 1);
	if (!dst || !src)
		abort();
	memcpy(src, data + 3, size - 3);
	int rc = zframe_decode(dctx, frame, src, size - 3, dst, share, why, sizeof(why));
	if (rc != 0 && (rc != -EIO || why[0] == '\0' || !memchr(why, '\0', sizeof(why))))
		abort();
	free(src);
	free(dst);
	return 0;
}

/*
 * Compression of one object (doc/manifest.md, "Version 3: compressed objects"): its bytes
 * are cut into frames of `frame` bytes (the last holds the rest), and each is compressed
 * with libzstd as an independent zstd frame, so a mount can fetch and decompress any byte
 * range as whole frames. Only one frame's bytes and its compressed form are held at a
 * time: an object of any size costs frame + ZSTD_compressBound(frame) bytes of memory.
 *
 * A compressor belongs to the one job (pool.c) that writes its object: no lock.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "publish/publish_i.h"

int pub_compressor_start(struct pub_compressor *z, int level, uint64_t frame, uint64_t size,
                         unsigned min_saving)
{
	size_t n = (size_t)((size + frame - 1) / frame);

	pub_compressor_free(z);
	z->frame = frame;
	z->cctx = ZSTD_createCCtx();
	z->in = malloc((size_t)frame);
	z->out_cap = ZSTD_compressBound((size_t)frame);
	z->out = malloc(z->out_cap);
	/* The frame count is known from the walk's size; a file that grew since is cut there
	 * and fails its commit (ESTALE), so the table never needs to grow. */
	z->lens = calloc(n ? n : 1, sizeof(*z->lens));
	z->cap = n;
	z->judge_saving = min_saving / 5;
	if (!z->cctx || !z->in || !z->out || !z->lens) {
		pub_compressor_free(z);
		return -ENOMEM;
	}
	/* No checksum, no dictionary id: the frame table and the chunk digests verify, and the
	 * bytes of a frame depend on its content and the level only. */
	if (ZSTD_isError(ZSTD_CCtx_setParameter(z->cctx, ZSTD_c_compressionLevel, level)) ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(z->cctx, ZSTD_c_checksumFlag, 0)) ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(z->cctx, ZSTD_c_contentSizeFlag, 1))) {
		pub_compressor_free(z);
		return -EINVAL;
	}
	return 0;
}

/* Compresses the frame gathered in z->in and hands it to emit. 0 or -errno. */
static int close_frame(struct pub_compressor *z,
                       int (*emit)(void *ctx, const unsigned char *p, size_t n), void *ctx)
{
	size_t got;

	if (z->n >= z->cap)
		return -ESTALE;
	got = ZSTD_compress2(z->cctx, z->out, z->out_cap, z->in, z->fill);
	if (ZSTD_isError(got) || got == 0 || got > UINT32_MAX)
		return -EIO;
	z->lens[z->n++] = (uint32_t)got;
	z->stored += got;
	z->fill = 0;
	return emit(ctx, z->out, got);
}

int pub_compressor_feed(struct pub_compressor *z, const unsigned char *p, size_t n,
                        int (*emit)(void *ctx, const unsigned char *p, size_t n), void *ctx)
{
	while (n > 0) {
		size_t take = (size_t)(z->frame - z->fill) < n ? (size_t)(z->frame - z->fill) : n;
		int rc;
		memcpy(z->in + z->fill, p, take);
		z->fill += take;
		p += take;
		n -= take;
		if (z->fill == z->frame && (rc = close_frame(z, emit, ctx)))
			return rc;
		/* Compressing a large incompressible object (media, archives, weights) costs
		 * several times its copy, and then it is copied anyway: its prefix decides. */
		if (!z->judged && z->n * z->frame >= PUB_JUDGE_BYTES) {
			uint64_t in = z->n * z->frame;
			z->judged = true;
			if (z->stored * 100 > in * (100 - z->judge_saving))
				return -EDOM;
		}
	}
	return 0;
}

int pub_compressor_end(struct pub_compressor *z,
                       int (*emit)(void *ctx, const unsigned char *p, size_t n), void *ctx)
{
	int rc = z->fill ? close_frame(z, emit, ctx) : 0;

	return rc == 0 && z->n != z->cap ? -ESTALE : rc;
}

bool pub_compressor_worth(const struct pub_compressor *z, uint64_t size, unsigned min_saving)
{
	/* stored <= size * (100 - min_saving) / 100, without the rounding of a division. */
	return size > 0 && z->stored * 100 <= size * (uint64_t)(100 - min_saving);
}

void pub_compressor_free(struct pub_compressor *z)
{
	ZSTD_freeCCtx(z->cctx);
	free(z->in);
	free(z->out);
	free(z->lens);
	memset(z, 0, sizeof(*z));
}

void pub_stored_free(struct pub_stored *s)
{
	free(s->frames);
	memset(s, 0, sizeof(*s));
}

/*
 * zframe.c: one zstd frame of a compressed object, decoded into exactly its share.
 */
#ifndef SPOOLFS_FETCH_ENGINE_ZFRAME_H
#define SPOOLFS_FETCH_ENGINE_ZFRAME_H

#include <stddef.h>
#include <stdint.h>
#include <zstd.h>

/*
 * Decompresses one frame's stored bytes [src, src + len) into dst, which must come to
 * exactly share bytes, from a frame of an object framed by frame_size (which bounds the
 * window it may ask for). 0, or -EIO with the reason in why. Any thread (its own dctx).
 */
int zframe_decode(ZSTD_DCtx *dctx, uint64_t frame_size, const void *src, size_t len,
                  unsigned char *dst, size_t share, char *why, size_t cap);

#endif

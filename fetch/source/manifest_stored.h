/*
 * An object's `stored` (doc/manifest.md, version 3): how a file's or a pack's bytes are
 * stored, as independent zstd frames, and each frame's stored length. manifest_stored.c
 * checks one against the object it describes; the loader (manifest_load.c) names the entry.
 */
#ifndef SPOOLFS_FETCH_SOURCE_MANIFEST_STORED_H
#define SPOOLFS_FETCH_SOURCE_MANIFEST_STORED_H

#include <stddef.h>
#include <stdint.h>

#include "index/index.h"

/* Frame sizes a manifest may name: a power of two in this range (as chunks.size). */
#define MANIFEST_FRAME_MIN 4096
#define MANIFEST_FRAME_MAX (64 << 20)

struct manifest_stored {
	uint64_t size;  /* stored.size: what the URL serves */
	uint64_t frame; /* stored.frame: the object's bytes per frame */
	/* stored.frames as little-endian u32s (index/'s form), frames_len bytes, malloc'd;
	 * NULL for a chunked object, whose hash list holds them. */
	unsigned char *frames;
	size_t frames_len;
};

/*
 * Reads stored, the JSON text of an object (NUL-terminated), for an object of size bytes;
 * chunk_size is its chunks.size (0: none). 0 and *out filled (manifest_stored_free); -EINVAL
 * with the reason in why ("stored.frames add up to 5, not stored.size 6"), nothing to free;
 * -ENOMEM.
 */
int manifest_stored_read(const char *stored, uint64_t size, uint64_t chunk_size,
                         struct manifest_stored *out, char *why, size_t why_len);
void manifest_stored_free(struct manifest_stored *s);

/* s as the index's builder takes it (pointing into s: valid while s is). */
static inline struct index_stored_view manifest_stored_view(const struct manifest_stored *s)
{
	return (struct index_stored_view){
	    .size = s->size, .frame = s->frame, .le = s->frames, .le_len = s->frames_len};
}

#endif

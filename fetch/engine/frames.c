/*
 * A compressed object's frame table (doc/manifest.md, version 3): where each frame of
 * flight_spec.frame_size decompressed bytes lies in the stored object. Requests ask for
 * whole frames (stream.c, unframe.c); everything else about a flight stays in the object's
 * own bytes. The table is copied at flight_new and immutable afterwards.
 */
#include <errno.h>
#include <stdlib.h>

#include "fetch/engine/flight_i.h"
#include "fetch/source/frame_table.h"

int flight_frames_init(struct flight *f, const struct flight_spec *spec)
{
	uint64_t n = flight_chunk_count(spec->size, spec->frame_size), sum = 0;

	if (!spec->frame_size)
		return 0;
	/* A frame is a chunk when there are chunk hashes: a bad one is a bad chunk. The loader
	 * checked the table by the same rules (frame_table.h); a table that did not hold
	 * would misplace every request, so it is checked again rather than trusted. */
	if ((spec->frame_size & (spec->frame_size - 1)) || !spec->frame_stored || n == 0 ||
	    (spec->chunk_size && spec->chunk_size != spec->frame_size) ||
	    frame_table_check(spec->size, spec->frame_size, spec->frame_stored, n,
	                      spec->stored_size, NULL, 0) != 0)
		return -EINVAL;
	if (n >= SIZE_MAX / sizeof(uint64_t))
		return -ENOMEM;
	f->frames.stored_off = malloc((n + 1) * sizeof(uint64_t));
	if (!f->frames.stored_off)
		return -ENOMEM;
	for (uint64_t i = 0; i < n; i++) {
		f->frames.stored_off[i] = sum;
		if (spec->frame_stored[i] > f->frames.max_stored)
			f->frames.max_stored = spec->frame_stored[i];
		sum += spec->frame_stored[i];
	}
	f->frames.stored_off[n] = sum;
	f->frames.size = spec->frame_size;
	f->frames.n = n;
	return 0;
}

void flight_frames_free(struct flight *f)
{
	free(f->frames.stored_off);
	f->frames.stored_off = NULL;
}

uint64_t flight_frame_of(const struct flight *f, uint64_t off)
{
	return off >= f->size ? f->frames.n : off / f->frames.size;
}

void flight_frame_bounds(const struct flight *f, uint64_t i, uint64_t *lo, uint64_t *hi)
{
	*lo = i * f->frames.size;
	*hi = *lo + frame_table_share(f->size, f->frames.size, i);
}

void flight_frames_round(const struct flight *f, uint64_t *start, uint64_t *end)
{
	if (!f->frames.size)
		return;
	*start -= *start % f->frames.size;
	if (*end % f->frames.size)
		*end += f->frames.size - *end % f->frames.size;
	if (*end > f->size)
		*end = f->size;
}

void flight_frames_stored_range(const struct flight *f, uint64_t *start, uint64_t *end,
                                uint64_t *so, uint64_t *eo)
{
	flight_frames_round(f, start, end);
	*so = f->frames.stored_off[flight_frame_of(f, *start)];
	*eo = f->frames.stored_off[flight_frame_of(f, *end)];
}

uint64_t flight_frames_whole_end(const struct flight *f, uint64_t eo)
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

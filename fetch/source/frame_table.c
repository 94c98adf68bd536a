/*
 * frame_table.c: the rules of a frame table (frame_table.h), checked and converted in one
 * place for the loader, the hash list's split and the index's callers.
 */
#include "fetch/source/frame_table.h"

#include <errno.h>
#include <inttypes.h>
#include <zstd.h>

#include "util/say.h"

uint64_t frame_table_count(uint64_t size, uint64_t frame)
{
	return size / frame + (size % frame != 0);
}

uint64_t frame_table_share(uint64_t size, uint64_t frame, uint64_t k)
{
	uint64_t at = k * frame;

	return size - at < frame ? size - at : frame;
}

int frame_table_check(uint64_t size, uint64_t frame, const uint32_t *lens, uint64_t n,
                      uint64_t stored_size, char *why, size_t why_len)
{
	uint64_t count = frame_table_count(size, frame), sum = 0;

	if (n != count)
		return util_say(why, why_len,
		                "frames has %" PRIu64 " lengths, not the %" PRIu64
		                " frames of %" PRIu64 " bytes that %" PRIu64 " bytes make",
		                n, count, frame, size);
	for (uint64_t k = 0; k < n; k++) {
		uint64_t share = frame_table_share(size, frame, k);
		uint64_t bound = ZSTD_compressBound((size_t)share);
		if (lens[k] == 0 || lens[k] > bound)
			return util_say(why, why_len,
			                "frames[%" PRIu64 "] is not a length from 1 to %" PRIu64
			                " (zstd's bound for its %" PRIu64 " bytes)",
			                k, bound, share);
		sum += lens[k];
	}
	if (sum != stored_size)
		return util_say(why, why_len,
		                "frames add up to %" PRIu64 ", not stored.size %" PRIu64, sum,
		                stored_size);
	return 0;
}

uint32_t frame_table_get_le(const unsigned char *b)
{
	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

void frame_table_put_le(unsigned char *b, uint32_t len)
{
	b[0] = (unsigned char)len;
	b[1] = (unsigned char)(len >> 8);
	b[2] = (unsigned char)(len >> 16);
	b[3] = (unsigned char)(len >> 24);
}

void frame_table_decode_le(const unsigned char *le, uint64_t n, uint32_t *lens)
{
	for (uint64_t k = 0; k < n; k++)
		lens[k] = frame_table_get_le(le + k * FRAME_TABLE_LE_BYTES);
}

void frame_table_encode_le(const uint32_t *lens, uint64_t n, unsigned char *le)
{
	for (uint64_t k = 0; k < n; k++)
		frame_table_put_le(le + k * FRAME_TABLE_LE_BYTES, lens[k]);
}

/*
 * A frame table (doc/manifest.md, version 3): an object of size bytes stored as independent
 * zstd frames of `frame` bytes each (the last may be shorter), and each frame's stored
 * length. The manifest's loader, the hash list's split (fetch/engine/object.c) and the
 * engine's view of a table all hold to the rules checked here, in one place: a table that
 * lies would misplace every read mapped by it. No FUSE, no engine: plain arithmetic.
 */
#ifndef SPOOLFS_FETCH_SOURCE_FRAME_TABLE_H
#define SPOOLFS_FETCH_SOURCE_FRAME_TABLE_H

#include <stddef.h>
#include <stdint.h>

/* Bytes per frame length in the little-endian form (the index's BLOB, a hash list's
 * 36-byte record's tail). */
#define FRAME_TABLE_LE_BYTES 4

/* How many frames of `frame` bytes (not 0) size bytes make: ceil(size / frame). */
uint64_t frame_table_count(uint64_t size, uint64_t frame);

/* Frame k's share of an object of size bytes in frames of `frame` bytes (k below the
 * count): `frame`, or less for the last. */
uint64_t frame_table_share(uint64_t size, uint64_t frame, uint64_t k);

/*
 * Whether lens[0..n) can be the frame table of an object of size bytes in frames of
 * `frame` bytes (not 0) stored in stored_size bytes: n is the frame count, each length is
 * from 1 to zstd's bound for its frame's share, and they add up to stored_size. 0; -EINVAL
 * with the reason in why (NUL-terminated when why_len > 0), naming the table "frames" so
 * that a caller prefixes its own name: "frames[2] is not a length from 1 to 1878 (zstd's
 * bound for its 1808 bytes)", "frames add up to 600, not stored.size 601".
 */
int frame_table_check(uint64_t size, uint64_t frame, const uint32_t *lens, uint64_t n,
                      uint64_t stored_size, char *why, size_t why_len);

/* One length from / into its FRAME_TABLE_LE_BYTES little-endian bytes at b. */
uint32_t frame_table_get_le(const unsigned char *b);
void frame_table_put_le(unsigned char *b, uint32_t len);

/* n lengths from / into n * FRAME_TABLE_LE_BYTES little-endian bytes. */
void frame_table_decode_le(const unsigned char *le, uint64_t n, uint32_t *lens);
void frame_table_encode_le(const uint32_t *lens, uint64_t n, unsigned char *le);

#endif

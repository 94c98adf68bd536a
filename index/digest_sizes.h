/*
 * The size each sha256 of a manifest has, while it loads (see digest_sizes.c). One loader
 * owns a table: no lock.
 */
#ifndef SPOOLFS_INDEX_DIGEST_SIZES_H
#define SPOOLFS_INDEX_DIGEST_SIZES_H

#include <stddef.h>
#include <stdint.h>

#include "util/hash.h"

struct digest_sizes {
	uint64_t *digests; /* the digest's first 64 bits, 0 = empty slot */
	int64_t *sizes;
	size_t cap; /* a power of two, or 0 */
	size_t n;
	/* Slots are picked by a keyed hash of the 64 bits: a manifest's digests need not be
	 * real ones, and digests chosen to share their low bits would make one probe chain. */
	struct util_hash_key key;
};

/* An empty table with a fresh key. 0, or -errno from util_hash_key_new. */
int digest_sizes_init(struct digest_sizes *t);

/*
 * Notes that sha256_hex (64 lower-case hex digits) has `size`. Returns 0, 1 when a digest
 * with the same first 64 bits was noted with another size (the caller confirms with the
 * whole digest), or -ENOMEM.
 */
int digest_sizes_note(struct digest_sizes *t, const char *sha256_hex, int64_t size);
void digest_sizes_free(struct digest_sizes *t);

#endif

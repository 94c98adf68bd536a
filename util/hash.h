/*
 * The keyed string hash of the project's hash tables (manifest paths, manifest digests,
 * flight keys, version pins): SipHash-2-4 under a key drawn from getrandom() for each
 * table. Their keys come from a manifest's author, a bucket's listing or an upstream: with
 * an unkeyed hash, keys chosen to share their low bits turned each table into one long
 * probe chain (131,000 such paths took 35 s to mount, against 2.4 s for random ones, and
 * the cost grows with the square of their number). Nobody who cannot read the process's
 * memory can aim at a table's buckets now.
 *
 * Not for values that must mean the same in another process (the lease byte, an ETag's
 * stand-in): those hash without a key, where no table's buckets depend on them.
 */
#ifndef SPOOLFS_UTIL_HASH_H
#define SPOOLFS_UTIL_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct util_hash_key {
	uint64_t k0, k1;
};

/* Draws a fresh key from getrandom(). 0, or -errno (the kernel had no randomness to give). */
int util_hash_key_new(struct util_hash_key *key);

/* SipHash-2-4 of len bytes at p under key: the same as OpenSSL's EVP_MAC "SIPHASH" with an
 * 8-byte output, read as a little-endian number. Never fails. */
uint64_t util_hash_bytes(const struct util_hash_key *key, const void *p, size_t len);

static inline uint64_t util_hash_str(const struct util_hash_key *key, const char *s)
{
	return util_hash_bytes(key, s, strlen(s));
}

#endif

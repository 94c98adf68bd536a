/*
 * The one string hash of the project's hash tables (manifest paths, flight keys, version
 * pins): FNV-1a, 64 bits. Not for anything an attacker may aim collisions at cheaply
 * beyond a slower lookup.
 */
#ifndef SPOOLFS_INDEX_HASH_H
#define SPOOLFS_INDEX_HASH_H

#include <stddef.h>
#include <stdint.h>

static inline uint64_t index_hash_bytes(const char *p, size_t len)
{
	uint64_t h = 1469598103934665603ULL;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
	return h;
}

static inline uint64_t index_hash_str(const char *s)
{
	uint64_t h = 1469598103934665603ULL;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

#endif

/*
 * Entries with one sha256 share one download, whose size is the first opener's, so a
 * manifest that gives one digest two sizes is refused. A query grouping 100,000 rows by
 * digest added 0.1-0.15 s to such a manifest's mount (a third of it); this table of the
 * digests' first 64 bits costs a few milliseconds and 4 MiB while the manifest loads.
 * Real digests are uniform, so 64 bits tell them apart but for a one-in-10^9 chance that the
 * caller settles with the whole digest; made-up ones are placed by a keyed hash (hash.h),
 * so they cannot be made to pile up in one probe chain either.
 */
#include "index/digest_sizes.h"

#include <errno.h>
#include <stdlib.h>

/* A slot whose 64 bits came with two sizes (sizes are never negative). */
#define COLLIDED INT64_MIN

static uint64_t prefix_of(const char *hex)
{
	uint64_t v = 0;

	for (int i = 0; i < 16; i++) {
		char c = hex[i];
		v = v << 4 | (uint64_t)(c <= '9' ? c - '0' : c - 'a' + 10);
	}
	return v ? v : 1; /* 0 marks an empty slot */
}

int digest_sizes_init(struct digest_sizes *t)
{
	*t = (struct digest_sizes){0};
	return util_hash_key_new(&t->key);
}

static size_t slot_of(const struct digest_sizes *t, uint64_t d)
{
	return util_hash_bytes(&t->key, &d, sizeof(d)) & (t->cap - 1);
}

static int grow(struct digest_sizes *t)
{
	size_t cap = t->cap ? 2 * t->cap : 1024;
	struct digest_sizes bigger = {.digests = calloc(cap, sizeof(uint64_t)),
	                              .sizes = calloc(cap, sizeof(int64_t)),
	                              .cap = cap,
	                              .key = t->key};

	if (!bigger.digests || !bigger.sizes) {
		digest_sizes_free(&bigger);
		return -ENOMEM;
	}
	for (size_t i = 0; i < t->cap; i++) {
		if (!t->digests[i])
			continue;
		size_t j = slot_of(&bigger, t->digests[i]);
		while (bigger.digests[j])
			j = (j + 1) & (cap - 1);
		bigger.digests[j] = t->digests[i];
		bigger.sizes[j] = t->sizes[i];
	}
	bigger.n = t->n;
	digest_sizes_free(t);
	*t = bigger;
	return 0;
}

int digest_sizes_note(struct digest_sizes *t, const char *sha256_hex, int64_t size)
{
	uint64_t d = prefix_of(sha256_hex);
	size_t j;

	if (2 * (t->n + 1) > t->cap && grow(t) < 0)
		return -ENOMEM;
	for (j = slot_of(t, d); t->digests[j]; j = (j + 1) & (t->cap - 1)) {
		if (t->digests[j] != d)
			continue;
		if (t->sizes[j] == size)
			return 0;
		/* Two sizes under these 64 bits, maybe of two digests: the slot no longer tells
		 * which size goes with which, so every later one of them is confirmed too. */
		t->sizes[j] = COLLIDED;
		return 1;
	}
	t->digests[j] = d;
	t->sizes[j] = size;
	t->n++;
	return 0;
}

void digest_sizes_free(struct digest_sizes *t)
{
	free(t->digests);
	free(t->sizes);
	*t = (struct digest_sizes){0};
}

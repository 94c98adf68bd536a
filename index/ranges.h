/*
 * A set of byte ranges [start, end), kept sorted, disjoint and with adjacent ranges merged.
 *
 * It records which bytes of a spool file are written or published. It has no lock of its
 * own: the structure that embeds it names the lock that guards it (a flight's lock).
 */
#ifndef SPOOLFS_INDEX_RANGES_H
#define SPOOLFS_INDEX_RANGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct index_range {
	uint64_t start;
	uint64_t end; /* exclusive */
};

struct index_ranges {
	struct index_range *v;
	size_t n;
	size_t cap;
	uint64_t total; /* bytes covered */
};

void index_ranges_init(struct index_ranges *set);
void index_ranges_free(struct index_ranges *set);
void index_ranges_clear(struct index_ranges *set);

/* Adds [start, end). Returns 0 or -ENOMEM (the set is then unchanged). An empty range is a no-op.
 */
int index_ranges_add(struct index_ranges *set, uint64_t start, uint64_t end);

/* True when every byte of [start, end) is in the set; an empty range is always covered. */
bool index_ranges_covers(const struct index_ranges *set, uint64_t start, uint64_t end);

/* The end of the covered run that contains `from`, or `from` itself when it is not covered. */
uint64_t index_ranges_run_end(const struct index_ranges *set, uint64_t from);

/* The first covered byte at or after `from`, or `limit` when none lies below `limit`. */
uint64_t index_ranges_next_covered(const struct index_ranges *set, uint64_t from, uint64_t limit);

/*
 * The first gap at or after `from` and below `limit`: stores [*gap_start, *gap_end) and
 * returns true, or returns false when [from, limit) is fully covered.
 */
bool index_ranges_next_gap(const struct index_ranges *set, uint64_t from, uint64_t limit,
                           uint64_t *gap_start, uint64_t *gap_end);

#endif

/*
 * A set of byte ranges [start, end), kept sorted, disjoint and with adjacent ranges merged.
 *
 * It records which bytes of a spool file are written or published. It has no lock of its
 * own: the structure that embeds it names the lock that guards it (a flight's lock).
 */
#ifndef SPOOLFS_UTIL_RANGES_H
#define SPOOLFS_UTIL_RANGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct util_range {
	uint64_t start;
	uint64_t end; /* exclusive */
};

struct util_ranges {
	struct util_range *v;
	size_t n;
	size_t cap;
	uint64_t total; /* bytes covered */
};

void util_ranges_init(struct util_ranges *set);
void util_ranges_free(struct util_ranges *set);
void util_ranges_clear(struct util_ranges *set);

/* Adds [start, end). Returns 0 or -ENOMEM (the set is then unchanged). An empty range is a no-op.
 */
int util_ranges_add(struct util_ranges *set, uint64_t start, uint64_t end);

/* Removes [start, end) (bytes to be written again). Returns 0 or -ENOMEM (a range split in
 * two needs room; the set is then unchanged). */
int util_ranges_remove(struct util_ranges *set, uint64_t start, uint64_t end);

/* True when every byte of [start, end) is in the set; an empty range is always covered. */
bool util_ranges_covers(const struct util_ranges *set, uint64_t start, uint64_t end);

/* The end of the covered run that contains `from`, or `from` itself when it is not covered. */
uint64_t util_ranges_run_end(const struct util_ranges *set, uint64_t from);

/* The first covered byte at or after `from`, or `limit` when none lies below `limit`. */
uint64_t util_ranges_next_covered(const struct util_ranges *set, uint64_t from, uint64_t limit);

/*
 * The first gap at or after `from` and below `limit`: stores [*gap_start, *gap_end) and
 * returns true, or returns false when [from, limit) is fully covered.
 */
bool util_ranges_next_gap(const struct util_ranges *set, uint64_t from, uint64_t limit,
                          uint64_t *gap_start, uint64_t *gap_end);

#endif

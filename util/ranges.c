/*
 * Sorted-array range set. Sets stay small (one range per hole in a spool file, and holes
 * are few: streams fill them front to back), so a binary search plus memmove beats a tree.
 */
#include "util/ranges.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void util_ranges_init(struct util_ranges *set)
{
	memset(set, 0, sizeof(*set));
}

void util_ranges_free(struct util_ranges *set)
{
	free(set->v);
	util_ranges_init(set);
}

void util_ranges_clear(struct util_ranges *set)
{
	set->n = 0;
	set->total = 0;
}

/* Index of the first range whose end is >= pos (ranges that end before pos cannot touch it). */
static size_t first_touching(const struct util_ranges *set, uint64_t pos)
{
	size_t lo = 0, hi = set->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (set->v[mid].end < pos)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Room for one more range. 0 or -ENOMEM (the set unchanged). */
static int make_room(struct util_ranges *set)
{
	size_t cap = set->cap ? set->cap * 2 : 8;
	struct util_range *v;

	if (set->n < set->cap)
		return 0;
	v = realloc(set->v, cap * sizeof(*v));
	if (!v)
		return -ENOMEM;
	set->v = v;
	set->cap = cap;
	return 0;
}

int util_ranges_add(struct util_ranges *set, uint64_t start, uint64_t end)
{
	if (start >= end)
		return 0;
	size_t i = first_touching(set, start);
	size_t j = i;
	uint64_t merged_start = start, merged_end = end, absorbed = 0;

	while (j < set->n && set->v[j].start <= end) {
		if (set->v[j].start < merged_start)
			merged_start = set->v[j].start;
		if (set->v[j].end > merged_end)
			merged_end = set->v[j].end;
		absorbed += set->v[j].end - set->v[j].start;
		j++;
	}
	if (j == i && make_room(set) != 0)
		return -ENOMEM;
	if (j == i) {
		memmove(&set->v[i + 1], &set->v[i], (set->n - i) * sizeof(*set->v));
		set->n++;
	} else if (j > i + 1) {
		memmove(&set->v[i + 1], &set->v[j], (set->n - j) * sizeof(*set->v));
		set->n -= j - i - 1;
	}
	set->v[i].start = merged_start;
	set->v[i].end = merged_end;
	set->total = set->total - absorbed + (merged_end - merged_start);
	return 0;
}

int util_ranges_remove(struct util_ranges *set, uint64_t start, uint64_t end)
{
	size_t i;

	if (start >= end)
		return 0;
	i = first_touching(set, start);
	if (i < set->n && set->v[i].start < start && set->v[i].end > end) {
		/* Inside one range: it splits in two. */
		if (make_room(set) != 0)
			return -ENOMEM;
		memmove(&set->v[i + 1], &set->v[i], (set->n - i) * sizeof(*set->v));
		set->n++;
		set->v[i].end = start;
		set->v[i + 1].start = end;
		set->total -= end - start;
		return 0;
	}
	while (i < set->n && set->v[i].start < end) {
		struct util_range *r = &set->v[i];
		uint64_t lo = r->start > start ? r->start : start;
		uint64_t hi = r->end < end ? r->end : end;
		if (lo >= hi) { /* ends exactly at start */
			i++;
			continue;
		}
		set->total -= hi - lo;
		if (r->start < start) {
			r->end = start;
			i++;
		} else if (r->end > end) {
			r->start = end;
			i++;
		} else {
			memmove(r, r + 1, (set->n - i - 1) * sizeof(*set->v));
			set->n--;
		}
	}
	return 0;
}

bool util_ranges_covers(const struct util_ranges *set, uint64_t start, uint64_t end)
{
	if (start >= end)
		return true;
	return util_ranges_run_end(set, start) >= end;
}

uint64_t util_ranges_run_end(const struct util_ranges *set, uint64_t from)
{
	size_t i = first_touching(set, from);

	/* A range ending exactly at `from` does not contain it; the next one might. */
	if (i < set->n && set->v[i].end == from)
		i++;
	if (i < set->n && set->v[i].start <= from)
		return set->v[i].end;
	return from;
}

uint64_t util_ranges_next_covered(const struct util_ranges *set, uint64_t from, uint64_t limit)
{
	size_t i = first_touching(set, from);

	if (i < set->n && set->v[i].end == from)
		i++;
	if (i >= set->n)
		return limit;
	uint64_t first = set->v[i].start > from ? set->v[i].start : from;
	return first < limit ? first : limit;
}

bool util_ranges_next_gap(const struct util_ranges *set, uint64_t from, uint64_t limit,
                          uint64_t *gap_start, uint64_t *gap_end)
{
	uint64_t start = util_ranges_run_end(set, from);

	if (start >= limit)
		return false;
	*gap_start = start;
	*gap_end = util_ranges_next_covered(set, start, limit);
	return true;
}

/*
 * Unit tests for util/ranges.c: edge cases of add/merge and of every query, then a
 * randomized comparison against a bitmap model with a fixed seed (so a failure replays).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/ranges.h"

/* Checks the set's invariants: sorted, non-empty, disjoint, not adjacent, total right. */
static void assert_well_formed(const struct util_ranges *set)
{
	uint64_t total = 0;

	assert_true(set->n <= set->cap);
	for (size_t i = 0; i < set->n; i++) {
		assert_true(set->v[i].start < set->v[i].end);
		if (i > 0)
			assert_true(set->v[i - 1].end < set->v[i].start);
		total += set->v[i].end - set->v[i].start;
	}
	assert_int_equal(set->total, total);
}

static void assert_ranges(const struct util_ranges *set, const uint64_t *pairs, size_t n)
{
	assert_well_formed(set);
	assert_int_equal(set->n, n);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(set->v[i].start, pairs[2 * i]);
		assert_int_equal(set->v[i].end, pairs[2 * i + 1]);
	}
}

static void test_empty_set(void **state)
{
	struct util_ranges set;
	uint64_t gs = 0, ge = 0;

	(void)state;
	util_ranges_init(&set);
	assert_true(util_ranges_covers(&set, 0, 0));
	assert_true(util_ranges_covers(&set, 7, 7));
	assert_false(util_ranges_covers(&set, 0, 1));
	assert_int_equal(util_ranges_run_end(&set, 5), 5);
	assert_int_equal(util_ranges_next_covered(&set, 0, 100), 100);
	assert_true(util_ranges_next_gap(&set, 0, 100, &gs, &ge));
	assert_int_equal(gs, 0);
	assert_int_equal(ge, 100);
	assert_false(util_ranges_next_gap(&set, 100, 100, &gs, &ge));
	assert_int_equal(set.total, 0);
	util_ranges_free(&set);
}

static void test_add_empty_is_noop(void **state)
{
	struct util_ranges set;

	(void)state;
	util_ranges_init(&set);
	assert_int_equal(util_ranges_add(&set, 5, 5), 0);
	assert_int_equal(util_ranges_add(&set, 9, 3), 0);
	assert_int_equal(set.n, 0);
	assert_int_equal(set.total, 0);
	util_ranges_free(&set);
}

static void test_add_disjoint_sorted(void **state)
{
	struct util_ranges set;

	(void)state;
	util_ranges_init(&set);
	assert_int_equal(util_ranges_add(&set, 20, 30), 0);
	assert_int_equal(util_ranges_add(&set, 0, 10), 0);  /* before all */
	assert_int_equal(util_ranges_add(&set, 40, 50), 0); /* after all */
	assert_int_equal(util_ranges_add(&set, 12, 15), 0); /* between */
	const uint64_t want[] = {0, 10, 12, 15, 20, 30, 40, 50};
	assert_ranges(&set, want, 4);
	assert_int_equal(set.total, 33);
	util_ranges_free(&set);
}

static void test_add_adjacent_merges(void **state)
{
	struct util_ranges set;

	(void)state;
	util_ranges_init(&set);
	assert_int_equal(util_ranges_add(&set, 10, 20), 0);
	assert_int_equal(util_ranges_add(&set, 20, 30), 0); /* touches the end */
	assert_int_equal(util_ranges_add(&set, 0, 10), 0);  /* touches the start */
	const uint64_t one[] = {0, 30};
	assert_ranges(&set, one, 1);
	/* A range that exactly bridges two others joins all three. */
	assert_int_equal(util_ranges_add(&set, 40, 50), 0);
	assert_int_equal(util_ranges_add(&set, 30, 40), 0);
	const uint64_t bridged[] = {0, 50};
	assert_ranges(&set, bridged, 1);
	util_ranges_free(&set);
}

static void test_add_overlap_merges(void **state)
{
	struct util_ranges set;

	(void)state;
	util_ranges_init(&set);
	assert_int_equal(util_ranges_add(&set, 10, 20), 0);
	assert_int_equal(util_ranges_add(&set, 30, 40), 0);
	assert_int_equal(util_ranges_add(&set, 50, 60), 0);
	assert_int_equal(util_ranges_add(&set, 70, 80), 0);
	/* Overlaps the end of one and the start of another, swallowing one between. */
	assert_int_equal(util_ranges_add(&set, 15, 55), 0);
	const uint64_t a[] = {10, 60, 70, 80};
	assert_ranges(&set, a, 2);
	/* Contained: no change. */
	assert_int_equal(util_ranges_add(&set, 20, 30), 0);
	assert_ranges(&set, a, 2);
	/* Containing everything. */
	assert_int_equal(util_ranges_add(&set, 0, 100), 0);
	const uint64_t b[] = {0, 100};
	assert_ranges(&set, b, 1);
	assert_int_equal(set.total, 100);
	util_ranges_free(&set);
}

static void test_add_many_grows(void **state)
{
	struct util_ranges set;

	(void)state;
	util_ranges_init(&set);
	/* Inserted back to front so every add shifts the array. */
	for (uint64_t i = 100; i-- > 0;)
		assert_int_equal(util_ranges_add(&set, i * 10, i * 10 + 5), 0);
	assert_int_equal(set.n, 100);
	assert_int_equal(set.total, 500);
	assert_well_formed(&set);
	/* Fill the holes: everything collapses to one range. */
	for (uint64_t i = 0; i < 100; i++)
		assert_int_equal(util_ranges_add(&set, i * 10 + 5, i * 10 + 10), 0);
	const uint64_t one[] = {0, 1000};
	assert_ranges(&set, one, 1);
	util_ranges_free(&set);
}

static void test_clear_and_free(void **state)
{
	struct util_ranges set;

	(void)state;
	util_ranges_init(&set);
	assert_int_equal(util_ranges_add(&set, 1, 2), 0);
	util_ranges_clear(&set);
	assert_int_equal(set.n, 0);
	assert_int_equal(set.total, 0);
	assert_false(util_ranges_covers(&set, 1, 2));
	assert_int_equal(util_ranges_add(&set, 3, 4), 0); /* the storage is reused */
	assert_true(util_ranges_covers(&set, 3, 4));
	util_ranges_free(&set);
	assert_null(set.v);
	assert_int_equal(set.n, 0);
	assert_int_equal(set.cap, 0);
	util_ranges_free(&set); /* twice is harmless */
}

static void test_covers(void **state)
{
	struct util_ranges set;

	(void)state;
	util_ranges_init(&set);
	assert_int_equal(util_ranges_add(&set, 10, 20), 0);
	assert_int_equal(util_ranges_add(&set, 30, 40), 0);
	assert_true(util_ranges_covers(&set, 10, 20));
	assert_true(util_ranges_covers(&set, 12, 13));
	assert_true(util_ranges_covers(&set, 19, 20));
	assert_false(util_ranges_covers(&set, 9, 11));
	assert_false(util_ranges_covers(&set, 19, 21));
	assert_false(util_ranges_covers(&set, 20, 21)); /* end is exclusive */
	assert_false(util_ranges_covers(&set, 15, 35)); /* spans a gap */
	assert_true(util_ranges_covers(&set, 25, 25));  /* empty, in a gap */
	assert_true(util_ranges_covers(&set, 50, 40));  /* inverted counts as empty */
	util_ranges_free(&set);
}

static void test_run_end(void **state)
{
	struct util_ranges set;

	(void)state;
	util_ranges_init(&set);
	assert_int_equal(util_ranges_add(&set, 10, 20), 0);
	assert_int_equal(util_ranges_add(&set, 30, 40), 0);
	assert_int_equal(util_ranges_run_end(&set, 0), 0);
	assert_int_equal(util_ranges_run_end(&set, 10), 20);
	assert_int_equal(util_ranges_run_end(&set, 19), 20);
	assert_int_equal(util_ranges_run_end(&set, 20), 20); /* at an end: not covered */
	assert_int_equal(util_ranges_run_end(&set, 25), 25);
	assert_int_equal(util_ranges_run_end(&set, 30), 40);
	assert_int_equal(util_ranges_run_end(&set, 40), 40);
	assert_int_equal(util_ranges_run_end(&set, 1000), 1000);
	util_ranges_free(&set);
}

static void test_next_covered(void **state)
{
	struct util_ranges set;

	(void)state;
	util_ranges_init(&set);
	assert_int_equal(util_ranges_add(&set, 10, 20), 0);
	assert_int_equal(util_ranges_add(&set, 30, 40), 0);
	assert_int_equal(util_ranges_next_covered(&set, 0, 100), 10);
	assert_int_equal(util_ranges_next_covered(&set, 10, 100), 10);
	assert_int_equal(util_ranges_next_covered(&set, 15, 100), 15);
	assert_int_equal(util_ranges_next_covered(&set, 20, 100), 30); /* end of a range */
	assert_int_equal(util_ranges_next_covered(&set, 25, 100), 30);
	assert_int_equal(util_ranges_next_covered(&set, 25, 28), 28); /* none below limit */
	assert_int_equal(util_ranges_next_covered(&set, 25, 30), 30);
	assert_int_equal(util_ranges_next_covered(&set, 40, 100), 100);
	assert_int_equal(util_ranges_next_covered(&set, 0, 5), 5);
	util_ranges_free(&set);
}

static void test_next_gap(void **state)
{
	struct util_ranges set;
	uint64_t gs = 0, ge = 0;

	(void)state;
	util_ranges_init(&set);
	assert_int_equal(util_ranges_add(&set, 10, 20), 0);
	assert_int_equal(util_ranges_add(&set, 30, 40), 0);

	assert_true(util_ranges_next_gap(&set, 0, 100, &gs, &ge));
	assert_int_equal(gs, 0);
	assert_int_equal(ge, 10);
	assert_true(util_ranges_next_gap(&set, 10, 100, &gs, &ge)); /* from inside a range */
	assert_int_equal(gs, 20);
	assert_int_equal(ge, 30);
	assert_true(util_ranges_next_gap(&set, 20, 100, &gs, &ge)); /* from a range's end */
	assert_int_equal(gs, 20);
	assert_int_equal(ge, 30);
	assert_true(util_ranges_next_gap(&set, 35, 100, &gs, &ge));
	assert_int_equal(gs, 40);
	assert_int_equal(ge, 100);
	assert_true(util_ranges_next_gap(&set, 22, 25, &gs, &ge)); /* clipped at limit */
	assert_int_equal(gs, 22);
	assert_int_equal(ge, 25);
	assert_false(util_ranges_next_gap(&set, 10, 20, &gs, &ge)); /* fully covered */
	assert_false(util_ranges_next_gap(&set, 12, 15, &gs, &ge));
	assert_false(util_ranges_next_gap(&set, 35, 35, &gs, &ge)); /* empty window */
	assert_false(util_ranges_next_gap(&set, 15, 10, &gs, &ge)); /* limit below from */
	util_ranges_free(&set);
}

static void test_extreme_offsets(void **state)
{
	struct util_ranges set;
	uint64_t gs = 0, ge = 0;
	const uint64_t top = UINT64_MAX;

	(void)state;
	util_ranges_init(&set);
	assert_int_equal(util_ranges_add(&set, top - 10, top), 0);
	assert_int_equal(util_ranges_add(&set, 0, 1), 0);
	assert_true(util_ranges_covers(&set, top - 10, top));
	assert_int_equal(util_ranges_run_end(&set, top - 1), top);
	assert_int_equal(util_ranges_run_end(&set, top), top);
	assert_true(util_ranges_next_gap(&set, 0, top, &gs, &ge));
	assert_int_equal(gs, 1);
	assert_int_equal(ge, top - 10);
	assert_int_equal(set.total, 11);
	assert_int_equal(util_ranges_add(&set, 1, top - 10), 0);
	assert_int_equal(set.n, 1);
	assert_int_equal(set.total, top);
	util_ranges_free(&set);
}

/* A small deterministic generator, so the run does not depend on libc's rand(). */
static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

#define MODEL_BITS 1024

static bool model_covers(const bool *bits, uint64_t a, uint64_t b)
{
	for (uint64_t i = a; i < b; i++)
		if (!bits[i])
			return false;
	return true;
}

static void check_against_model(const struct util_ranges *set, const bool *bits, uint64_t *seed)
{
	uint64_t total = 0;

	assert_well_formed(set);
	for (uint64_t i = 0; i < MODEL_BITS; i++)
		total += bits[i];
	assert_int_equal(set->total, total);
	/* Every covered byte is in a range and every range byte is covered. */
	for (size_t r = 0; r < set->n; r++)
		assert_true(model_covers(bits, set->v[r].start, set->v[r].end));

	for (int q = 0; q < 32; q++) {
		uint64_t from = rng_next(seed) % (MODEL_BITS + 1);
		uint64_t limit = from + rng_next(seed) % (MODEL_BITS + 1 - from);
		uint64_t want, gs = 0, ge = 0;

		assert_int_equal(util_ranges_covers(set, from, limit),
		                 model_covers(bits, from, limit));

		want = from;
		while (want < MODEL_BITS && bits[want])
			want++;
		assert_int_equal(util_ranges_run_end(set, from), want);

		want = from;
		while (want < limit && !bits[want])
			want++;
		assert_int_equal(util_ranges_next_covered(set, from, limit), want);

		uint64_t first_gap = from;
		while (first_gap < limit && bits[first_gap])
			first_gap++;
		bool has_gap = util_ranges_next_gap(set, from, limit, &gs, &ge);
		assert_int_equal(has_gap, first_gap < limit);
		if (has_gap) {
			uint64_t gap_end = first_gap;
			while (gap_end < limit && !bits[gap_end])
				gap_end++;
			assert_int_equal(gs, first_gap);
			assert_int_equal(ge, gap_end);
		}
	}
}

/*
 * Random steps against the bitmap model: adds only, short ranges early on (many holes)
 * and longer ones later (filling and merging them); with `removals`, a third of the steps
 * remove instead.
 */
static void random_rounds(uint64_t seed, bool removals)
{
	struct util_ranges set;
	static bool bits[MODEL_BITS];

	for (int round = 0; round < 20; round++) {
		util_ranges_init(&set);
		memset(bits, 0, sizeof(bits));
		for (int step = 0; step < 150; step++) {
			uint64_t start = rng_next(&seed) % MODEL_BITS;
			uint64_t maxlen = step < 75 && !removals ? 8 : 64;
			uint64_t len = rng_next(&seed) % (maxlen + 1);
			uint64_t end = start + len > MODEL_BITS ? MODEL_BITS : start + len;
			bool add = !removals || rng_next(&seed) % 3 != 0;

			if (add)
				assert_int_equal(util_ranges_add(&set, start, end), 0);
			else
				assert_int_equal(util_ranges_remove(&set, start, end), 0);
			for (uint64_t i = start; i < end; i++)
				bits[i] = add;
			check_against_model(&set, bits, &seed);
		}
		util_ranges_free(&set);
	}
}

static void test_random_against_bitmap(void **state)
{
	(void)state;
	random_rounds(0x5eed5eed12345678ULL, false);
}

static void test_remove(void **state)
{
	struct util_ranges set;
	const uint64_t split[] = {10, 15, 20, 30}, trimmed[] = {12, 15, 20, 25}, gone[] = {20, 25};

	(void)state;
	util_ranges_init(&set);
	assert_int_equal(util_ranges_remove(&set, 0, 10), 0); /* nothing there */
	assert_int_equal(util_ranges_add(&set, 10, 30), 0);
	assert_int_equal(util_ranges_remove(&set, 15, 15), 0); /* empty */
	assert_int_equal(util_ranges_remove(&set, 15, 20), 0); /* inside: splits */
	assert_ranges(&set, split, 2);
	assert_int_equal(util_ranges_remove(&set, 5, 12), 0);  /* the front of one */
	assert_int_equal(util_ranges_remove(&set, 25, 40), 0); /* the end of another */
	assert_ranges(&set, trimmed, 2);
	assert_int_equal(util_ranges_remove(&set, 12, 20), 0); /* exactly one, up to the next */
	assert_ranges(&set, gone, 1);
	assert_int_equal(util_ranges_remove(&set, 0, 100), 0);
	assert_ranges(&set, NULL, 0);
	util_ranges_free(&set);
}

static void test_remove_against_bitmap(void **state)
{
	(void)state;
	random_rounds(0x0dd5eed5eed0dd00ULL, true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_remove),
	    cmocka_unit_test(test_remove_against_bitmap),
	    cmocka_unit_test(test_empty_set),
	    cmocka_unit_test(test_add_empty_is_noop),
	    cmocka_unit_test(test_add_disjoint_sorted),
	    cmocka_unit_test(test_add_adjacent_merges),
	    cmocka_unit_test(test_add_overlap_merges),
	    cmocka_unit_test(test_add_many_grows),
	    cmocka_unit_test(test_clear_and_free),
	    cmocka_unit_test(test_covers),
	    cmocka_unit_test(test_run_end),
	    cmocka_unit_test(test_next_covered),
	    cmocka_unit_test(test_next_gap),
	    cmocka_unit_test(test_extreme_offsets),
	    cmocka_unit_test(test_random_against_bitmap),
	};

	return cmocka_run_group_tests_name("ranges", tests, NULL, NULL);
}

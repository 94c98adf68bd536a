/*
 * Lock-free histograms (util/histogram.c): observations land in the bucket whose bound is
 * the first at or above them, snapshots are cumulative, a set gives each key one slot and
 * the keys past its room share the last one, and threads racing on new keys never split
 * a key over two slots. Threads record nothing themselves; the main thread asserts after
 * joining them.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "util/histogram.h"

static void test_buckets_are_upper_bounds_inclusive(void **state)
{
	static struct util_histogram h;
	struct util_histogram_snapshot snap;

	(void)state;
	memset(&h, 0, sizeof(h));
	util_histogram_observe(&h, 0);                               /* first bucket */
	util_histogram_observe(&h, util_histogram_bounds_ns[0]);     /* first too: le */
	util_histogram_observe(&h, util_histogram_bounds_ns[0] + 1); /* second */
	util_histogram_observe(&h, util_histogram_bounds_ns[UTIL_HISTOGRAM_BOUNDS - 1] + 1);
	util_histogram_read(&h, &snap);
	assert_int_equal(snap.cumulative[0], 2);
	assert_int_equal(snap.cumulative[1], 3);
	assert_int_equal(snap.cumulative[UTIL_HISTOGRAM_BOUNDS - 1], 3);
	assert_int_equal(snap.cumulative[UTIL_HISTOGRAM_BOUNDS], 4); /* +Inf: the count */
	assert_int_equal(snap.sum_ns, 2 * util_histogram_bounds_ns[0] + 1 +
	                                  util_histogram_bounds_ns[UTIL_HISTOGRAM_BOUNDS - 1] + 1);
	for (unsigned i = 1; i < UTIL_HISTOGRAM_BOUNDS; i++)
		assert_true(util_histogram_bounds_ns[i] > util_histogram_bounds_ns[i - 1]);
}

static void test_since_never_goes_negative(void **state)
{
	static struct util_histogram h;
	struct util_histogram_snapshot snap;

	(void)state;
	memset(&h, 0, sizeof(h));
	util_histogram_observe_since(&h, util_monotonic_ns() + 1000000000ull); /* "future" */
	util_histogram_read(&h, &snap);
	assert_int_equal(snap.cumulative[0], 1);
	assert_int_equal(snap.sum_ns, 0);
}

static void test_set_gives_each_key_a_slot_and_shares_the_last(void **state)
{
	static struct util_histogram_set set;
	struct util_histogram_snapshot snap;
	unsigned key, used = 0;
	bool other;

	(void)state;
	memset(&set, 0, sizeof(set));
	util_histogram_set_observe(&set, 206, 1000);
	util_histogram_set_observe(&set, 0, 1000); /* key 0 is a key like any other */
	util_histogram_set_observe(&set, 206, 2000);
	assert_true(util_histogram_set_read(&set, 0, &key, &other, &snap));
	assert_int_equal(key, 206);
	assert_false(other);
	assert_int_equal(snap.cumulative[UTIL_HISTOGRAM_BOUNDS], 2);
	assert_int_equal(snap.sum_ns, 3000);
	assert_true(util_histogram_set_read(&set, 1, &key, &other, &snap));
	assert_int_equal(key, 0);
	assert_false(util_histogram_set_read(&set, 2, &key, &other, &snap));
	for (unsigned k = 300; k < 330; k++)
		util_histogram_set_observe(&set, k, 1);
	for (unsigned i = 0; i < UTIL_HISTOGRAM_KEYS; i++) {
		assert_true(util_histogram_set_read(&set, i, &key, &other, &snap));
		assert_int_equal(other, i == UTIL_HISTOGRAM_KEYS - 1);
		used += (unsigned)snap.cumulative[UTIL_HISTOGRAM_BOUNDS];
	}
	assert_int_equal(used, 3 + 30);
	/* 15 own slots: 206, 0 and 13 of the new keys; the other 17 share the last. */
	assert_true(util_histogram_set_read(&set, UTIL_HISTOGRAM_KEYS - 1, &key, &other, &snap));
	assert_int_equal(snap.cumulative[UTIL_HISTOGRAM_BOUNDS], 30 - (UTIL_HISTOGRAM_KEYS - 3));
}

#define RACERS 4
#define ROUNDS 20000
#define RACE_KEYS 8

static struct util_histogram_set race_set;

static void *race(void *arg)
{
	unsigned first = (unsigned)(uintptr_t)arg;

	/* Each thread starts at another key, so new keys are claimed by several at once. */
	for (unsigned r = 0; r < ROUNDS; r++)
		util_histogram_set_observe(&race_set, 500 + (first + r) % RACE_KEYS, r);
	return NULL;
}

static void test_racing_threads_never_split_a_key(void **state)
{
	pthread_t threads[RACERS];
	struct util_histogram_snapshot snap;
	unsigned key, seen[RACE_KEYS] = {0};
	uint64_t total = 0;
	bool other;

	(void)state;
	for (unsigned t = 0; t < RACERS; t++)
		assert_int_equal(pthread_create(&threads[t], NULL, race, (void *)(uintptr_t)t), 0);
	for (unsigned t = 0; t < RACERS; t++)
		pthread_join(threads[t], NULL);
	for (unsigned i = 0; i < UTIL_HISTOGRAM_KEYS; i++) {
		if (!util_histogram_set_read(&race_set, i, &key, &other, &snap))
			continue;
		assert_false(other);
		assert_true(key >= 500 && key < 500 + RACE_KEYS);
		seen[key - 500]++;
		assert_int_equal(snap.cumulative[UTIL_HISTOGRAM_BOUNDS],
		                 RACERS * ROUNDS / RACE_KEYS);
		total += snap.cumulative[UTIL_HISTOGRAM_BOUNDS];
	}
	for (unsigned k = 0; k < RACE_KEYS; k++)
		assert_int_equal(seen[k], 1);
	assert_int_equal(total, (uint64_t)RACERS * ROUNDS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_buckets_are_upper_bounds_inclusive),
	    cmocka_unit_test(test_since_never_goes_negative),
	    cmocka_unit_test(test_set_gives_each_key_a_slot_and_shares_the_last),
	    cmocka_unit_test(test_racing_threads_never_split_a_key),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

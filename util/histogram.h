/*
 * Latency histograms that any thread adds to without a lock, in the shape of the
 * Prometheus text format's histogram type: fixed upper bounds in seconds, a count per
 * bucket, and a sum. Every field is an atomic that only grows, so a reader (the metrics
 * writer) sees each bucket's count and the sum never go down; a snapshot is not one
 * instant (an observation may be in a bucket and not yet in the sum), but its cumulative
 * counts are consistent with each other because they are all built from the same loads.
 *
 * A set is one histogram per key (an HTTP status code): a key takes a free slot on its
 * first observation with a compare-and-swap, and keeps it for the set's life. Slots are
 * taken in order, so a key is never in two of them. Keys that find no free slot share the
 * last one ("other").
 */
#ifndef SPOOLFS_UTIL_HISTOGRAM_H
#define SPOOLFS_UTIL_HISTOGRAM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* The upper bounds, from 100 us to 60 s: local replies take microseconds, a cold object
 * from a slow store seconds. These structures are shared by a mount's serving processes
 * (daemon/shared_counters.c): a change of them or of the bounds raises COUNTERS_FORMAT there. */
#define UTIL_HISTOGRAM_BOUNDS 18
extern const uint64_t util_histogram_bounds_ns[UTIL_HISTOGRAM_BOUNDS];

struct util_histogram {
	/* buckets[i]: observations in (bound i-1, bound i]; the last: above every bound.
	 * Each observation adds to one (not cumulative). Atomics: no lock. */
	atomic_uint_fast64_t buckets[UTIL_HISTOGRAM_BOUNDS + 1];
	atomic_uint_fast64_t sum_ns;
};

struct util_histogram_snapshot {
	/* cumulative[i]: observations <= bound i; the last (+Inf) is the count. */
	uint64_t cumulative[UTIL_HISTOGRAM_BOUNDS + 1];
	uint64_t sum_ns;
};

/* CLOCK_MONOTONIC in nanoseconds: what observations measure with. */
uint64_t util_monotonic_ns(void);

/* Adds one observation of ns nanoseconds. Any thread; h zero-initialised before first use. */
void util_histogram_observe(struct util_histogram *h, uint64_t ns);

/* Adds util_monotonic_ns() - since_ns (0 when the clock looks backwards). */
void util_histogram_observe_since(struct util_histogram *h, uint64_t since_ns);

void util_histogram_read(const struct util_histogram *h, struct util_histogram_snapshot *out);

#define UTIL_HISTOGRAM_KEYS 16

struct util_histogram_set {
	/* keys[i]: the key of slot i plus one; 0 while free. Set once (CAS), never changed.
	 * The last slot is never claimed: it is "other". Atomics: no lock. */
	atomic_uint keys[UTIL_HISTOGRAM_KEYS];
	struct util_histogram slots[UTIL_HISTOGRAM_KEYS];
};

/* Adds an observation to key's histogram (key below UINT_MAX). Any thread. */
void util_histogram_set_observe(struct util_histogram_set *set, unsigned key, uint64_t ns);

/*
 * Slot i of the set (i < UTIL_HISTOGRAM_KEYS): false when it was never used. Else *key is
 * its key and *other whether it is the shared slot of keys that found no room (then *key
 * is meaningless), and out its counts.
 */
bool util_histogram_set_read(const struct util_histogram_set *set, unsigned i, unsigned *key,
                             bool *other, struct util_histogram_snapshot *out);

#endif

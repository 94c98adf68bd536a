/* Lock-free latency histograms (see histogram.h). */
#include "util/histogram.h"

#include <time.h>

const uint64_t util_histogram_bounds_ns[UTIL_HISTOGRAM_BOUNDS] = {
    100000ull,     250000ull,     500000ull,     1000000ull,     2500000ull,     5000000ull,
    10000000ull,   25000000ull,   50000000ull,   100000000ull,   250000000ull,   500000000ull,
    1000000000ull, 2500000000ull, 5000000000ull, 10000000000ull, 30000000000ull, 60000000000ull,
};

uint64_t util_monotonic_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void util_histogram_observe(struct util_histogram *h, uint64_t ns)
{
	unsigned i = 0;

	while (i < UTIL_HISTOGRAM_BOUNDS && ns > util_histogram_bounds_ns[i])
		i++;
	/* Relaxed: a count orders nothing else; readers take each as it is. */
	atomic_fetch_add_explicit(&h->buckets[i], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->sum_ns, ns, memory_order_relaxed);
}

void util_histogram_observe_since(struct util_histogram *h, uint64_t since_ns)
{
	uint64_t now = util_monotonic_ns();

	util_histogram_observe(h, now > since_ns ? now - since_ns : 0);
}

void util_histogram_read(const struct util_histogram *h, struct util_histogram_snapshot *out)
{
	uint64_t total = 0;

	for (unsigned i = 0; i <= UTIL_HISTOGRAM_BOUNDS; i++) {
		total += atomic_load_explicit(&h->buckets[i], memory_order_relaxed);
		out->cumulative[i] = total;
	}
	out->sum_ns = atomic_load_explicit(&h->sum_ns, memory_order_relaxed);
}

/*
 * The first slot holding key, else the first free one, claimed. Slots are claimed in order
 * and never freed, so when key holds slot j every slot before it was taken already, and a
 * second thread with the same key cannot claim another one first: it finds j, or loses the
 * CAS on j to the key itself.
 */
void util_histogram_set_observe(struct util_histogram_set *set, unsigned key, uint64_t ns)
{
	unsigned want = key + 1, i;

	for (i = 0; i < UTIL_HISTOGRAM_KEYS - 1; i++) {
		unsigned seen = atomic_load_explicit(&set->keys[i], memory_order_relaxed);
		if (seen == 0 && atomic_compare_exchange_strong_explicit(&set->keys[i], &seen, want,
		                                                         memory_order_relaxed,
		                                                         memory_order_relaxed))
			break;
		if (seen == want)
			break;
	}
	if (i == UTIL_HISTOGRAM_KEYS - 1)
		atomic_store_explicit(&set->keys[i], 1, memory_order_relaxed); /* "other" in use */
	util_histogram_observe(&set->slots[i], ns);
}

bool util_histogram_set_read(const struct util_histogram_set *set, unsigned i, unsigned *key,
                             bool *other, struct util_histogram_snapshot *out)
{
	unsigned k = atomic_load_explicit(&set->keys[i], memory_order_relaxed);

	if (k == 0)
		return false;
	*key = k - 1;
	*other = i == UTIL_HISTOGRAM_KEYS - 1;
	util_histogram_read(&set->slots[i], out);
	return true;
}

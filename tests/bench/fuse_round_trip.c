/*
 * bench_fuse_round_trip DIR N [GAP_US]: what one synchronous FUSE request costs a program
 * (tests/bench/real_programs.py --round-trip). stat()s N distinct names that do not exist
 * in DIR, one after another, with GAP_US microseconds of busy work (default 0) between two
 * calls, and prints one JSON object, times in microseconds per call:
 *   {"calls":N, "gap_us":…, "mean_us":…, "median_us":…, "min_us":…, "max_us":…}
 * Only the stat()s are timed, not the gaps. On a FUSE mount each is one LOOKUP: a name
 * never asked before cannot be in the kernel's dentry cache, negative entries included
 * (the names carry the pid and the start time, so a second run on the same mount asks
 * again). On local disk it is the kernel's own lookup. Exit status 1 when a stat() does
 * not fail with ENOENT (the figure would not be a lookup's), 2 on bad arguments.
 *
 * Why C: a Python loop adds a few microseconds of its own to each call, as much as a
 * local lookup costs. Why busy: a program between two syscalls computes; it does not
 * sleep, so its CPU stays awake while the daemon's may go idle.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_CALLS 10000000L
#define MAX_GAP_US 1000000L
#define WARMUP_CALLS 100 /* not timed: the first calls fault in code and wake the daemon */

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void busy_gap(int64_t gap_ns)
{
	int64_t until = now_ns() + gap_ns;

	while (now_ns() < until)
		;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* Parses a whole decimal in [lo, hi]; -1 when it is not one. */
static long parse_long(const char *s, long lo, long hi)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return -1;
	return v;
}

/* stat() of DIR/rt-PREFIX-I; 0 when it failed with ENOENT, as it should. */
static int stat_missing(const char *dir, const char *prefix, long i)
{
	char path[4096];
	struct stat st;

	if (snprintf(path, sizeof(path), "%s/rt-%s-%ld", dir, prefix, i) >= (int)sizeof(path)) {
		fprintf(stderr, "bench_fuse_round_trip: %s: path too long\n", dir);
		return -1;
	}
	if (stat(path, &st) == 0) {
		fprintf(stderr, "bench_fuse_round_trip: %s exists\n", path);
		return -1;
	}
	if (errno != ENOENT) {
		fprintf(stderr, "bench_fuse_round_trip: %s: %s\n", path, strerror(errno));
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	long n, gap_us = 0;
	int64_t *ns = NULL, sum = 0;
	char prefix[64];
	struct stat st;
	int rc = 1;

	if (argc < 3 || argc > 4 || (n = parse_long(argv[2], 1, MAX_CALLS)) < 0 ||
	    (argc == 4 && (gap_us = parse_long(argv[3], 0, MAX_GAP_US)) < 0)) {
		fprintf(stderr,
		        "usage: bench_fuse_round_trip DIR N [GAP_US] (N 1-%ld, GAP_US 0-%ld)\n",
		        MAX_CALLS, MAX_GAP_US);
		return 2;
	}
	if (stat(argv[1], &st) != 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "bench_fuse_round_trip: %s is not a directory\n", argv[1]);
		return 2;
	}
	ns = calloc((size_t)n, sizeof(*ns));
	if (!ns) {
		fprintf(stderr, "bench_fuse_round_trip: out of memory\n");
		goto out;
	}
	snprintf(prefix, sizeof(prefix), "%ld-%lld", (long)getpid(), (long long)now_ns());
	for (long i = 0; i < WARMUP_CALLS; i++)
		if (stat_missing(argv[1], prefix, -1 - i))
			goto out;
	for (long i = 0; i < n; i++) {
		int64_t t0;

		if (gap_us)
			busy_gap(gap_us * 1000);
		t0 = now_ns();
		if (stat_missing(argv[1], prefix, i))
			goto out;
		ns[i] = now_ns() - t0;
		sum += ns[i];
	}
	qsort(ns, (size_t)n, sizeof(*ns), cmp_i64);
	printf("{\"calls\": %ld, \"gap_us\": %ld, \"mean_us\": %.2f, \"median_us\": %.2f, "
	       "\"min_us\": %.2f, \"max_us\": %.2f}\n",
	       n, gap_us, (double)sum / (double)n / 1e3, (double)ns[n / 2] / 1e3,
	       (double)ns[0] / 1e3, (double)ns[n - 1] / 1e3);
	rc = 0;
out:
	free(ns);
	return rc;
}

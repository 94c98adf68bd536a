/*
 * bench_readers PATH N SIZE: W1's crowd of readers (tests/bench/peers.py). N threads pass
 * one barrier, then each opens PATH and reads it to the end in 1 MiB reads, checking the
 * (block, offset) stamp mkstore.py writes at the start of each 1 MiB block. Prints one JSON
 * object, times in seconds from the moment the barrier opened:
 *   {"wall":…, "first":…, "follow_max":…, "follow_med":…, "error":null|"…"}
 * first is the earliest first byte, follow_max/med the followers' first byte minus it.
 *
 * Why C: with 64 Python threads on 2 cores the interpreter lock hands itself round every
 * few milliseconds, and the harness, not the filesystem, spread the first bytes by 20 ms.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define MIB (1u << 20)
#define MAX_READERS 1024

struct reader {
	pthread_t thread;
	const char *path;
	pthread_barrier_t *gate;
	double start, first, end; /* CLOCK_MONOTONIC seconds */
	uint64_t got;
	char error[160]; /* empty when the read went well */
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The stamp is two little-endian uint64: block index, offset. */
static int stamp_ok(const unsigned char *buf, uint64_t off)
{
	uint64_t block = 0, at = 0;

	for (int i = 7; i >= 0; i--) {
		block = block << 8 | buf[i];
		at = at << 8 | buf[8 + i];
	}
	return block == off / MIB && at == off;
}

static void *read_all(void *arg)
{
	struct reader *r = arg;
	unsigned char *buf = malloc(MIB);
	int fd = -1;

	if (!buf) {
		snprintf(r->error, sizeof(r->error), "out of memory");
		goto out;
	}
	pthread_barrier_wait(r->gate);
	r->start = now_s();
	fd = open(r->path, O_RDONLY);
	if (fd < 0) {
		snprintf(r->error, sizeof(r->error), "open: %s", strerror(errno));
		goto out;
	}
	for (;;) {
		ssize_t n = read(fd, buf, MIB);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			snprintf(r->error, sizeof(r->error), "%s after %" PRIu64 " bytes",
			         strerror(errno), r->got);
			goto out;
		}
		if (n == 0)
			break;
		if (r->first == 0)
			r->first = now_s();
		/* every block that starts inside this read and whose stamp it holds whole */
		for (uint64_t at = (r->got + MIB - 1) / MIB * MIB; at + 16 <= r->got + (uint64_t)n;
		     at += MIB) {
			if (!stamp_ok(buf + (at - r->got), at)) {
				snprintf(r->error, sizeof(r->error),
				         "wrong bytes at offset %" PRIu64, at);
				goto out;
			}
		}
		r->got += (uint64_t)n;
	}
out:
	r->end = now_s();
	if (r->first == 0)
		r->first = r->end;
	if (fd >= 0)
		close(fd);
	free(buf);
	return NULL;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	struct reader *readers = NULL;
	double *firsts = NULL, start, wall = 0, med = 0;
	pthread_barrier_t gate;
	char error[200] = "";
	long n;
	uint64_t size;
	int rc = 2;

	if (argc != 4 || (n = strtol(argv[2], NULL, 10)) < 1 || n > MAX_READERS) {
		fprintf(stderr, "usage: bench_readers PATH N(1-%d) SIZE\n", MAX_READERS);
		return 2;
	}
	/* Killed with the harness (a timed-out operation): no reader may hold the mount. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	size = strtoull(argv[3], NULL, 10);
	readers = calloc((size_t)n, sizeof(*readers));
	firsts = calloc((size_t)n, sizeof(*firsts));
	if (!readers || !firsts || pthread_barrier_init(&gate, NULL, (unsigned)n + 1) != 0) {
		fprintf(stderr, "bench_readers: out of memory\n");
		goto out;
	}
	for (long i = 0; i < n; i++) {
		readers[i].path = argv[1];
		readers[i].gate = &gate;
		if (pthread_create(&readers[i].thread, NULL, read_all, &readers[i]) != 0) {
			fprintf(stderr, "bench_readers: cannot start thread %ld\n", i);
			exit(2); /* the others wait on the gate for ever */
		}
	}
	pthread_barrier_wait(&gate);
	start = now_s();
	for (long i = 0; i < n; i++)
		pthread_join(readers[i].thread, NULL);
	/* The earliest reader past the gate starts the clock: this thread may run late. */
	for (long i = 0; i < n; i++)
		if (readers[i].start < start)
			start = readers[i].start;
	for (long i = 0; i < n; i++) {
		firsts[i] = readers[i].first - start;
		if (readers[i].end - start > wall)
			wall = readers[i].end - start;
		if (!error[0] && readers[i].error[0])
			snprintf(error, sizeof(error), "reader error: %s", readers[i].error);
		if (!error[0] && readers[i].got != size)
			snprintf(error, sizeof(error),
			         "short read: %" PRIu64 " bytes, want %" PRIu64, readers[i].got,
			         size);
	}
	pthread_barrier_destroy(&gate);
	qsort(firsts, (size_t)n, sizeof(*firsts), by_value);
	if (n > 1) {
		/* the median of the n - 1 followers, firsts[1..n-1] */
		long m = n - 1;
		med = m % 2 ? firsts[1 + m / 2] : (firsts[m / 2] + firsts[m / 2 + 1]) / 2;
		med -= firsts[0];
	}
	printf("{\"wall\": %.6f, \"first\": %.6f, \"follow_max\": %.6f, \"follow_med\": %.6f, "
	       "\"error\": ",
	       wall, firsts[0], firsts[n - 1] - firsts[0], med);
	if (error[0])
		printf("\"%s\"}\n", error); /* our own messages: no quotes or backslashes */
	else
		printf("null}\n");
	rc = 0;
out:
	free(readers);
	free(firsts);
	return rc;
}

/*
 * Unit tests for the flight state machine (fetch/engine/flight.h), without curl or FUSE: each test
 * makes a flight table on a temporary spool directory, joins flights, and plays the
 * transfer thread itself with flight_open_spool and flight_deliver. Readers are parked
 * flight_waiters whose done callback records what it was told.
 *
 * Threaded tests order their threads with barriers and condition variables, never sleeps,
 * collect results in the workers and assert in the main thread after pthread_join.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fetch/engine/flight.h"
#include "fetch/engine/flight_i.h" /* white-box: refs, in_table, locks */
#include "helpers.h"

#define KIB (1024ull)
#define MIB (1024ull * 1024ull)

static const char empty_sha256[] =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
static const char wrong_sha256[] =
    "0000000000000000000000000000000000000000000000000000000000000000";

struct fixture {
	char dir[64];
	int dirfd;
	struct flight_table *table;
};

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));

	if (!fx)
		return -1;
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/spoolfs-test-flight-XXXXXX");
	if (!mkdtemp(fx->dir) || (fx->dirfd = open(fx->dir, O_RDONLY | O_DIRECTORY)) < 0 ||
	    flight_table_create(fx->dirfd, &fx->table) != 0) {
		free(fx);
		return -1;
	}
	*state = fx;
	return 0;
}

/* Files left in the spool dir (spool files of flights that did not fail). */
static unsigned spool_files(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	unsigned n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
			n++;
	closedir(d);
	return n;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;
	DIR *d;
	struct dirent *de;
	char path[PATH_MAX];

	/* Normally done by the test; here only when an assertion cut it short. */
	flight_table_destroy(fx->table);
	d = opendir(fx->dir);
	if (d) {
		while ((de = readdir(d))) {
			if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
				continue;
			snprintf(path, sizeof(path), "%s/%s", fx->dir, de->d_name);
			unlink(path);
		}
		closedir(d);
	}
	close(fx->dirfd);
	rmdir(fx->dir);
	free(fx);
	return 0;
}

/* Ends a test: the table goes first (as after the engine stopped), then the test's refs. */
static void finish(struct fixture *fx, struct flight **refs, size_t n)
{
	flight_table_destroy(fx->table);
	fx->table = NULL;
	for (size_t i = 0; i < n; i++)
		flight_unref(refs[i]);
}

/* The object's bytes: a deterministic pattern that differs at every offset in a piece. */
static uint8_t byte_at(uint64_t off)
{
	uint64_t x = off * 0x9e3779b97f4a7c15ull;
	return (uint8_t)(x >> 56) ^ (uint8_t)off;
}

static uint8_t *make_object(uint64_t size)
{
	uint8_t *data = malloc(size ? size : 1);

	assert_non_null(data);
	for (uint64_t i = 0; i < size; i++)
		data[i] = byte_at(i);
	return data;
}

static void sha256_hex(const void *data, size_t len, char hex[65])
{
	unsigned char digest[EVP_MAX_MD_SIZE];
	unsigned int n = 0;

	assert_int_equal(EVP_Digest(data, len, digest, &n, EVP_sha256(), NULL), 1);
	assert_int_equal(n, 32);
	for (unsigned i = 0; i < n; i++)
		snprintf(hex + 2 * i, 3, "%02x", digest[i]);
}

static struct flight *join(struct fixture *fx, const char *key, const char *sha256, uint64_t size,
                           bool *created)
{
	struct flight_spec spec = {
	    .key = key,
	    .url = "http://example.invalid/object",
	    .sha256 = sha256,
	    .name = "/test/object",
	    .size = size,
	    .ino = 42,
	};
	struct flight *f = NULL;
	bool c = false;

	assert_int_equal(flight_table_join(fx->table, &spec, &f, &c), 0);
	assert_non_null(f);
	if (created)
		*created = c;
	return f;
}

/* Joins a new flight and opens its spool, as the engine does when it activates it. */
static struct flight *start(struct fixture *fx, const char *key, const char *sha256, uint64_t size)
{
	bool created;
	struct flight *f = join(fx, key, sha256, size, &created);

	assert_true(created);
	assert_int_equal(flight_open_spool(f), 0);
	return f;
}

static enum flight_state state_of(struct flight *f)
{
	enum flight_state st;

	flight_progress(f, NULL, NULL, &st);
	return st;
}

static uint64_t published_of(struct flight *f)
{
	uint64_t published;

	flight_progress(f, NULL, &published, NULL);
	return published;
}

/* Checks [off, off+len) of the spool against the object. */
static void check_spool(struct flight *f, const uint8_t *data, uint64_t off, uint64_t len)
{
	uint8_t *buf = malloc(len ? len : 1);

	assert_non_null(buf);
	assert_int_equal(pread(flight_spool_fd(f), buf, len, (off_t)off), (ssize_t)len);
	assert_memory_equal(buf, data + off, len);
	free(buf);
}

/* Delivers [off, off+len) of data in pieces of `piece` bytes, each expected to return 0. */
static void deliver_range(struct flight *f, const uint8_t *data, uint64_t off, uint64_t len,
                          uint64_t piece)
{
	for (uint64_t p = off; p < off + len; p += piece) {
		uint64_t n = off + len - p < piece ? off + len - p : piece;
		assert_int_equal(flight_deliver(f, p, data + p, n), 0);
	}
}

/* ---- single-flight ---------------------------------------------------------------- */

static void test_join_single_flight(void **state)
{
	struct fixture *fx = *state;
	struct flight *a1, *a2, *b, *a3;
	unsigned flights, complete;
	bool created;

	a1 = join(fx, "sha256:aaaa", "", 100, &created);
	assert_true(created);
	a2 = join(fx, "sha256:aaaa", "", 100, &created);
	assert_false(created);
	assert_ptr_equal(a1, a2);
	b = join(fx, "url:http://example.invalid/b", "", 100, &created);
	assert_true(created);
	assert_ptr_not_equal(a1, b);
	assert_int_not_equal(flight_id(a1), flight_id(b));
	flight_table_counts(fx->table, &flights, &complete);
	assert_int_equal(flights, 2);
	assert_int_equal(complete, 0);

	/* A failed flight leaves the table: the next open starts a new one. */
	flight_fail(a1, -EIO);
	assert_int_equal(state_of(a1), FLIGHT_FAILED);
	assert_false(a1->in_table);
	flight_table_counts(fx->table, &flights, &complete);
	assert_int_equal(flights, 1);
	a3 = join(fx, "sha256:aaaa", "", 100, &created);
	assert_true(created);
	assert_ptr_not_equal(a3, a1);
	assert_int_not_equal(flight_id(a3), flight_id(a1));
	assert_int_equal(state_of(a3), FLIGHT_ACTIVE);
	assert_int_equal(flight_ready(a3, 0, 1), 0);
	flight_table_counts(fx->table, &flights, &complete);
	assert_int_equal(flights, 2);

	/* Failing again is a no-op; the key still leads to the new flight. */
	flight_fail(a1, -ENOSPC);
	assert_int_equal(flight_ready(a1, 0, 1), -EIO);
	a2 = join(fx, "sha256:aaaa", "", 100, &created);
	assert_false(created);
	assert_ptr_equal(a2, a3);

	finish(fx, (struct flight *[]){a1, a1, b, a3, a2}, 5);
}

#define JOINERS 8

struct joiner {
	struct fixture *fx;
	pthread_barrier_t *gate;
	struct flight *f;
	bool created;
	int rc;
};

static void *joiner_main(void *arg)
{
	struct joiner *j = arg;
	struct flight_spec spec = {
	    .key = "sha256:concurrent",
	    .url = "http://example.invalid/c",
	    .sha256 = "",
	    .name = "/c",
	    .size = 10,
	};

	pthread_barrier_wait(j->gate);
	j->rc = flight_table_join(j->fx->table, &spec, &j->f, &j->created);
	return NULL;
}

static void test_join_concurrent(void **state)
{
	struct fixture *fx = *state;
	struct joiner joiners[JOINERS];
	pthread_barrier_t gate;
	struct flight *refs[JOINERS];
	unsigned creators = 0, flights, complete;

	pthread_barrier_init(&gate, NULL, JOINERS);
	for (int i = 0; i < JOINERS; i++)
		joiners[i] = (struct joiner){.fx = fx, .gate = &gate, .rc = -1};
	test_threads_run(JOINERS, joiner_main, joiners, sizeof(joiners[0]));
	pthread_barrier_destroy(&gate);

	for (int i = 0; i < JOINERS; i++) {
		assert_int_equal(joiners[i].rc, 0);
		assert_ptr_equal(joiners[i].f, joiners[0].f);
		creators += joiners[i].created;
		refs[i] = joiners[i].f;
	}
	assert_int_equal(creators, 1);
	/* One reference per joiner plus the table's. */
	assert_int_equal(atomic_load(&joiners[0].f->refs), JOINERS + 1);
	flight_table_counts(fx->table, &flights, &complete);
	assert_int_equal(flights, 1);
	finish(fx, refs, JOINERS);
}

/* ---- readiness and parked readers ------------------------------------------------- */

static void test_ready_and_park(void **state)
{
	struct fixture *fx = *state;
	const uint64_t size = 256 * KIB;
	uint8_t *data = make_object(size);
	struct flight *f = start(fx, "url:ready", "", size);
	struct test_waiter w_mid, w_head, w_far, w_now;

	assert_int_equal(state_of(f), FLIGHT_ACTIVE);
	assert_int_equal(flight_ready(f, 0, 1), 0);
	assert_int_equal(flight_ready(f, 0, 0), 1); /* an empty range is always readable */

	test_waiter_init(&w_mid, 1000, 4000); /* [1000, 5000): spans the gap filled last */
	test_waiter_init(&w_head, 0, 100);
	test_waiter_init(&w_far, 200000, 10000);
	assert_int_equal(flight_park(f, &w_mid.w), 0);
	assert_int_equal(flight_park(f, &w_head.w), 0);
	assert_int_equal(flight_park(f, &w_far.w), 0);

	/* Out of order, leaving [2048, 4096) as a gap. */
	assert_int_equal(flight_deliver(f, 4096, data + 4096, 4096), 0);
	assert_int_equal(w_mid.calls + w_head.calls + w_far.calls, 0);
	assert_int_equal(flight_ready(f, 4096, 4096), 1);
	assert_int_equal(flight_ready(f, 4095, 2), 0);

	assert_int_equal(flight_deliver(f, 0, data, 2048), 0);
	assert_int_equal(w_head.calls, 1);
	assert_int_equal(w_head.err, 0);
	assert_int_equal(w_mid.calls, 0);
	assert_int_equal(flight_ready(f, 0, 2048), 1);
	assert_int_equal(flight_ready(f, 0, 2049), 0);

	assert_int_equal(flight_deliver(f, 8192, data + 8192, 8192), 0);
	assert_int_equal(w_mid.calls, 0);
	/* Fills the gap, one byte short of w_mid's range first. */
	assert_int_equal(flight_deliver(f, 2048, data + 2048, 1000), 0);
	assert_int_equal(w_mid.calls, 0);
	assert_int_equal(flight_deliver(f, 3048, data + 3048, 1048), 0);
	assert_int_equal(w_mid.calls, 1);
	assert_int_equal(w_mid.err, 0);
	assert_int_equal(w_head.calls, 1);
	assert_int_equal(w_far.calls, 0);
	assert_int_equal(flight_ready(f, 0, 16384), 1);
	assert_int_equal(flight_ready(f, 16384, 1), 0);
	check_spool(f, data, 0, 16384);

	/* A range readable already is not parked: 1, and done is never called. */
	test_waiter_init(&w_now, 10, 10);
	assert_int_equal(flight_park(f, &w_now.w), 1);
	assert_false(w_now.w.listed);

	/* The rest, in pieces; w_far's range arrives in the middle. */
	deliver_range(f, data, 16384, 200000 - 16384, 64 * KIB);
	assert_int_equal(w_far.calls, 0);
	deliver_range(f, data, 200000, 9999, 64 * KIB);
	assert_int_equal(w_far.calls, 0);
	assert_int_equal(state_of(f), FLIGHT_ACTIVE);
	deliver_range(f, data, 209999, size - 209999, 64 * KIB);
	assert_int_equal(w_far.calls, 1);
	assert_int_equal(w_far.err, 0);
	assert_int_equal(state_of(f), FLIGHT_COMPLETE);
	assert_int_equal(flight_ready(f, 0, size), 1);
	assert_int_equal(flight_table_cached_bytes(fx->table, "url:ready"), size);
	check_spool(f, data, 0, size);

	/* Nobody was answered twice. */
	assert_int_equal(w_head.calls, 1);
	assert_int_equal(w_mid.calls, 1);
	assert_int_equal(w_now.calls, 0);

	finish(fx, &f, 1);
	free(data);
}

/* ---- verification ------------------------------------------------------------------ */

static void test_verify_withholds_tail(void **state)
{
	struct fixture *fx = *state;
	const uint64_t size = 4 * MIB + 12345;
	const uint64_t piece = 64 * KIB;
	uint8_t *data = make_object(size);
	char sha[65];
	struct flight *f;
	struct test_waiter w_head, w_tail, w_last, w_all;
	unsigned flights, complete;

	sha256_hex(data, size, sha);
	f = start(fx, "sha256:withhold", sha, size);
	test_waiter_init(&w_head, 0, 1);
	test_waiter_init(&w_tail, size - FLIGHT_HOLD_BYTES, FLIGHT_HOLD_BYTES);
	test_waiter_init(&w_last, size - 1, 1);
	test_waiter_init(&w_all, 0, size);
	assert_int_equal(flight_park(f, &w_head.w), 0);
	assert_int_equal(flight_park(f, &w_tail.w), 0);
	assert_int_equal(flight_park(f, &w_last.w), 0);
	assert_int_equal(flight_park(f, &w_all.w), 0);

	for (uint64_t p = 0; p < size; p += piece) {
		uint64_t n = size - p < piece ? size - p : piece;
		bool last = p + n == size;

		if (last) {
			/* Just before the final byte: the tail is still withheld. */
			assert_int_equal(flight_ready(f, size - FLIGHT_HOLD_BYTES, 1), 0);
			assert_int_equal(flight_ready(f, size - n - 1, 1), 0);
			assert_true(published_of(f) <= size - FLIGHT_HOLD_BYTES);
			assert_int_equal(w_tail.calls + w_last.calls + w_all.calls, 0);
		}
		assert_int_equal(flight_deliver(f, p, data + p, n), 0);
		if (!last) {
			assert_int_equal(
			    flight_ready(f, size - FLIGHT_HOLD_BYTES, FLIGHT_HOLD_BYTES), 0);
			assert_int_equal(state_of(f), FLIGHT_ACTIVE);
			/* At least FLIGHT_HOLD_BYTES stay unpublished until the end. */
			assert_true(published_of(f) <= size - FLIGHT_HOLD_BYTES);
		}
	}
	/* The prefix was readable early. */
	assert_int_equal(w_head.calls, 1);
	assert_int_equal(w_head.err, 0);

	assert_int_equal(state_of(f), FLIGHT_COMPLETE);
	assert_int_equal(flight_ready(f, 0, size), 1);
	assert_int_equal(published_of(f), size);
	assert_int_equal(w_tail.calls, 1);
	assert_int_equal(w_tail.err, 0);
	assert_int_equal(w_last.calls, 1);
	assert_int_equal(w_last.err, 0);
	assert_int_equal(w_all.calls, 1);
	assert_int_equal(w_all.err, 0);
	check_spool(f, data, 0, size);
	flight_table_counts(fx->table, &flights, &complete);
	assert_int_equal(flights, 1);
	assert_int_equal(complete, 1);

	finish(fx, &f, 1);
	free(data);
}

static void test_verify_mismatch(void **state)
{
	struct fixture *fx = *state;
	const uint64_t size = 3 * MIB + 777;
	const uint64_t piece = 64 * KIB;
	uint8_t *data = make_object(size);
	char sha[65];
	struct flight *f, *again;
	struct test_waiter w_head, w_tail, w_all, w_late;
	uint64_t withheld_from = size;
	bool created;

	sha256_hex(data, size, sha);
	sha[10] = sha[10] == 'a' ? 'b' : 'a'; /* well-formed, but not this object's */
	f = start(fx, "sha256:mismatch", sha, size);
	assert_int_equal(spool_files(fx->dir), 1);
	test_waiter_init(&w_head, 0, 100);
	test_waiter_init(&w_tail, size - 100, 100);
	test_waiter_init(&w_all, 0, size);
	assert_int_equal(flight_park(f, &w_head.w), 0);
	assert_int_equal(flight_park(f, &w_tail.w), 0);
	assert_int_equal(flight_park(f, &w_all.w), 0);

	for (uint64_t p = 0; p < size; p += piece) {
		uint64_t n = size - p < piece ? size - p : piece;

		if (p + n < size) {
			assert_int_equal(flight_deliver(f, p, data + p, n), 0);
		} else {
			/* The final byte: the hash does not match. */
			assert_int_equal(flight_deliver(f, p, data + p, n), -EIO);
		}
		if (published_of(f) < p + n && withheld_from == size)
			withheld_from = p;
		/* The withheld part was never readable, not even after the last deliver. */
		assert_int_equal(flight_ready(f, size - FLIGHT_HOLD_BYTES, 1), 0);
		assert_int_equal(flight_ready(f, size - 100, 100), 0);
		assert_int_equal(w_tail.calls + w_all.calls, 0);
	}
	assert_true(withheld_from <= size - FLIGHT_HOLD_BYTES);
	assert_int_equal(published_of(f), withheld_from);
	assert_int_equal(flight_ready(f, withheld_from, 1), 0);
	assert_int_equal(w_head.calls, 1);
	assert_int_equal(w_head.err, 0);
	assert_int_not_equal(state_of(f), FLIGHT_COMPLETE);

	/* What the engine does with the -EIO. */
	flight_fail(f, -EIO);
	assert_int_equal(state_of(f), FLIGHT_FAILED);
	assert_int_equal(w_tail.calls, 1);
	assert_int_equal(w_tail.err, -EIO);
	assert_int_equal(w_all.calls, 1);
	assert_int_equal(w_all.err, -EIO);
	assert_int_equal(w_head.calls, 1);
	assert_int_equal(flight_ready(f, 0, 1), -EIO);
	assert_int_equal(flight_ready(f, size - 1, 1), -EIO);
	test_waiter_init(&w_late, 0, 10);
	assert_int_equal(flight_park(f, &w_late.w), -EIO);
	assert_int_equal(w_late.calls, 0);
	assert_int_equal(spool_files(fx->dir), 0);
	/* A late deliver after the failure is refused with the flight's error. */
	assert_int_equal(flight_deliver(f, 0, data, 10), -EIO);

	/* Out of the table. */
	again = join(fx, "sha256:mismatch", sha, size, &created);
	assert_true(created);
	assert_ptr_not_equal(again, f);

	finish(fx, (struct flight *[]){f, again}, 2);
	free(data);
}

static void test_verify_out_of_order(void **state)
{
	struct fixture *fx = *state;
	const uint64_t size = 3 * MIB + 777;
	const uint64_t split = 2 * MIB;
	const uint64_t piece = 64 * KIB;
	uint8_t *data = make_object(size);
	char sha[65];
	struct flight *f;
	struct test_waiter w_tail, w_gap, w_all;

	sha256_hex(data, size, sha);
	f = start(fx, "sha256:ooo", sha, size);
	test_waiter_init(&w_tail, size - 10, 10);
	test_waiter_init(&w_gap, split - 10, 20); /* straddles the prefix and the tail */
	test_waiter_init(&w_all, 0, size);
	assert_int_equal(flight_park(f, &w_tail.w), 0);
	assert_int_equal(flight_park(f, &w_gap.w), 0);
	assert_int_equal(flight_park(f, &w_all.w), 0);

	/* The tail first: it arrives early, so it is published before the prefix. */
	deliver_range(f, data, split, size - split, piece);
	assert_int_equal(flight_ready(f, split, size - split), 1);
	assert_int_equal(w_tail.calls, 1);
	assert_int_equal(w_tail.err, 0);

	/* Then the prefix; its last FLIGHT_HOLD_BYTES to arrive wait for the hash. */
	for (uint64_t p = 0; p < split; p += piece) {
		uint64_t n = split - p < piece ? split - p : piece;

		if (p + n == split) {
			assert_int_equal(flight_ready(f, split - FLIGHT_HOLD_BYTES, 1), 0);
			assert_int_equal(flight_ready(f, split - n - 1, 1), 0);
			assert_true(published_of(f) <= size - FLIGHT_HOLD_BYTES);
			assert_int_equal(w_gap.calls + w_all.calls, 0);
			assert_int_equal(state_of(f), FLIGHT_ACTIVE);
		}
		assert_int_equal(flight_deliver(f, p, data + p, n), 0);
	}
	assert_int_equal(state_of(f), FLIGHT_COMPLETE);
	assert_int_equal(flight_ready(f, 0, size), 1);
	assert_int_equal(w_gap.calls, 1);
	assert_int_equal(w_gap.err, 0);
	assert_int_equal(w_all.calls, 1);
	assert_int_equal(w_all.err, 0);
	assert_int_equal(w_tail.calls, 1);
	check_spool(f, data, 0, size);

	finish(fx, &f, 1);
	free(data);
}

static void test_verify_small_object(void **state)
{
	struct fixture *fx = *state;
	const uint64_t size = 100000; /* < FLIGHT_HOLD_BYTES: nothing is readable unverified */
	uint8_t *data = make_object(size);
	char sha[65];
	struct flight *f;
	struct test_waiter w_head;

	sha256_hex(data, size, sha);
	f = start(fx, "sha256:small", sha, size);
	test_waiter_init(&w_head, 0, 1);
	assert_int_equal(flight_park(f, &w_head.w), 0);
	for (uint64_t p = 0; p + 10000 < size; p += 10000) {
		assert_int_equal(flight_deliver(f, p, data + p, 10000), 0);
		assert_int_equal(flight_ready(f, 0, 1), 0);
		assert_int_equal(published_of(f), 0);
		assert_int_equal(w_head.calls, 0);
	}
	assert_int_equal(flight_deliver(f, size - 10000, data + size - 10000, 10000), 0);
	assert_int_equal(state_of(f), FLIGHT_COMPLETE);
	assert_int_equal(flight_ready(f, 0, size), 1);
	assert_int_equal(w_head.calls, 1);
	assert_int_equal(w_head.err, 0);
	check_spool(f, data, 0, size);

	finish(fx, &f, 1);
	free(data);
}

static void test_verify_redelivery(void **state)
{
	struct fixture *fx = *state;
	const uint64_t size = 2 * MIB + 5;
	uint8_t *data = make_object(size);
	char sha[65];
	struct flight *f;

	/* A retried stream re-sends bytes already hashed, partly overlapping: no double hash. */
	sha256_hex(data, size, sha);
	f = start(fx, "sha256:redeliver", sha, size);
	deliver_range(f, data, 0, 300000, 100000);
	deliver_range(f, data, 250000, 100000, 100000);
	deliver_range(f, data, 0, 10, 10);
	deliver_range(f, data, 1 * MIB, 1 * MIB, 64 * KIB); /* ahead of the prefix */
	deliver_range(f, data, 1 * MIB - 1000, 2000, 2000); /* overlapping both */
	deliver_range(f, data, 340000, 1 * MIB - 340000, 64 * KIB);
	assert_int_equal(state_of(f), FLIGHT_ACTIVE);
	deliver_range(f, data, 2 * MIB, 5, 5);
	assert_int_equal(state_of(f), FLIGHT_COMPLETE);
	assert_int_equal(flight_ready(f, 0, size), 1);
	check_spool(f, data, 0, size);

	finish(fx, &f, 1);
	free(data);
}

/* ---- unpark, interrupts, scheduling hints ----------------------------------------- */

static void test_unpark(void **state)
{
	struct fixture *fx = *state;
	const uint64_t size = 64 * KIB;
	uint8_t *data = make_object(size);
	struct flight *f = start(fx, "url:unpark", "", size);
	struct test_waiter w_gone, w_stays, w_intr, w_intr_ready, w_never;

	test_waiter_init(&w_gone, 0, 100);
	test_waiter_init(&w_stays, 0, 100);
	assert_int_equal(flight_park(f, &w_gone.w), 0);
	assert_int_equal(flight_park(f, &w_stays.w), 0);

	/* The reader went away: removed, so done is never called. */
	assert_true(flight_unpark(f, &w_gone.w));
	assert_false(w_gone.w.listed);

	/* A waiter never parked: not removed, marked interrupted. */
	test_waiter_init(&w_never, 0, 1);
	assert_false(flight_unpark(f, &w_never.w));
	assert_true(w_never.w.interrupted);

	deliver_range(f, data, 0, size, 16 * KIB);
	assert_int_equal(state_of(f), FLIGHT_COMPLETE);
	assert_int_equal(w_gone.calls, 0);
	assert_int_equal(w_stays.calls, 1);
	assert_int_equal(w_stays.err, 0);

	/* Already answered: too late to remove, and the waiter is marked interrupted. */
	assert_false(flight_unpark(f, &w_stays.w));
	assert_true(w_stays.w.interrupted);
	assert_int_equal(w_stays.calls, 1);

	/* An interrupt that came before parking wins, even for a readable range. */
	test_waiter_init(&w_intr_ready, 0, 10);
	w_intr_ready.w.interrupted = true;
	assert_int_equal(flight_park(f, &w_intr_ready.w), -EINTR);
	assert_false(w_intr_ready.w.listed);
	assert_int_equal(w_intr_ready.calls, 0);

	finish(fx, &f, 1);

	/* And on a flight still downloading. */
	assert_int_equal(flight_table_create(fx->dirfd, &fx->table), 0);
	f = start(fx, "url:unpark2", "", size);
	test_waiter_init(&w_intr, 0, 10);
	w_intr.w.interrupted = true;
	assert_int_equal(flight_park(f, &w_intr.w), -EINTR);
	assert_false(w_intr.w.listed);
	deliver_range(f, data, 0, size, size);
	assert_int_equal(w_intr.calls, 0);
	finish(fx, &f, 1);
	free(data);
}

static void test_unpark_then_fail(void **state)
{
	struct fixture *fx = *state;
	struct flight *f = start(fx, "url:unpark-fail", "", 1000);
	struct test_waiter w_gone, w_stays;

	test_waiter_init(&w_gone, 0, 100);
	test_waiter_init(&w_stays, 500, 100);
	assert_int_equal(flight_park(f, &w_gone.w), 0);
	assert_int_equal(flight_park(f, &w_stays.w), 0);
	assert_true(flight_unpark(f, &w_gone.w));
	flight_fail(f, -ECONNRESET);
	assert_int_equal(w_gone.calls, 0);
	assert_int_equal(w_stays.calls, 1);
	assert_int_equal(w_stays.err, -ECONNRESET);
	assert_int_equal(flight_ready(f, 0, 1), -ECONNRESET);
	/* A positive error is not an errno: it becomes -EIO. */
	finish(fx, &f, 1);

	assert_int_equal(flight_table_create(fx->dirfd, &fx->table), 0);
	f = start(fx, "url:unpark-fail2", "", 1000);
	flight_fail(f, 5);
	assert_int_equal(flight_ready(f, 0, 1), -EIO);
	finish(fx, &f, 1);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void test_wanted_offsets(void **state)
{
	struct fixture *fx = *state;
	const uint64_t size = 1 * MIB;
	uint8_t *data = make_object(size);
	struct flight *f = start(fx, "url:wanted", "", size);
	struct test_waiter w1, w2, w3, w4;
	struct flight_want offs[8];
	bool whole;
	unsigned n;

	assert_int_equal(flight_wanted(f, offs, 8, &whole), 0);
	assert_int_equal(flight_deliver(f, 0, data, 1000), 0);
	assert_int_equal(flight_deliver(f, 5000, data + 5000, 1000), 0);

	test_waiter_init(&w1, 500, 1500);  /* [500, 2000): needs 1000 next */
	test_waiter_init(&w2, 5000, 3000); /* [5000, 8000): needs 6000 */
	test_waiter_init(&w3, 100000, 10); /* nothing of it written: needs 100000 */
	test_waiter_init(&w4, 3000, 3000); /* [3000, 6000): needs 3000 */
	assert_int_equal(flight_park(f, &w1.w), 0);
	assert_int_equal(flight_park(f, &w2.w), 0);
	assert_int_equal(flight_park(f, &w3.w), 0);
	assert_int_equal(flight_park(f, &w4.w), 0);

	n = flight_wanted(f, offs, 8, &whole);
	assert_int_equal(n, 4);
	qsort(offs, n, sizeof(offs[0]), cmp_u64);
	assert_int_equal(offs[0].off, 1000);
	assert_int_equal(offs[1].off, 3000);
	assert_int_equal(offs[2].off, 6000);
	assert_int_equal(offs[3].off, 100000);

	/* Bounded by max. */
	assert_int_equal(flight_wanted(f, offs, 2, &whole), 2);
	assert_int_equal(flight_wanted(f, offs, 0, &whole), 0);

	/* Progress moves the hints; answered waiters drop out. */
	assert_int_equal(flight_deliver(f, 1000, data + 1000, 1500), 0);
	assert_int_equal(w1.calls, 1);
	n = flight_wanted(f, offs, 8, &whole);
	assert_int_equal(n, 3);
	qsort(offs, n, sizeof(offs[0]), cmp_u64);
	assert_int_equal(offs[0].off, 3000);
	assert_int_equal(offs[1].off, 6000);
	assert_int_equal(offs[2].off, 100000);

	assert_true(flight_unpark(f, &w3.w));
	n = flight_wanted(f, offs, 8, &whole);
	assert_int_equal(n, 2);

	deliver_range(f, data, 0, size, 64 * KIB);
	assert_int_equal(flight_wanted(f, offs, 8, &whole), 0);
	assert_int_equal(w2.calls, 1);
	assert_int_equal(w4.calls, 1);
	assert_int_equal(w3.calls, 0);

	finish(fx, &f, 1);
	free(data);
}

static void test_wanted_offsets_withheld(void **state)
{
	struct fixture *fx = *state;
	const uint64_t size = 1000;
	uint8_t *data = make_object(size);
	char sha[65];
	struct flight *f;
	struct test_waiter w;
	struct flight_want offs[4];
	bool whole;

	/* Written but withheld for verification: nothing more to fetch for this waiter. */
	sha256_hex(data, size, sha);
	f = start(fx, "sha256:wanted-withheld", sha, size);
	test_waiter_init(&w, 0, 500);
	assert_int_equal(flight_park(f, &w.w), 0);
	assert_int_equal(flight_deliver(f, 0, data, 600), 0);
	assert_int_equal(w.calls, 0);
	assert_int_equal(flight_wanted(f, offs, 4, &whole), 0);
	assert_int_equal(flight_deliver(f, 600, data + 600, 400), 0);
	assert_int_equal(w.calls, 1);

	finish(fx, &f, 1);
	free(data);
}

static bool is_whole(struct flight *f)
{
	struct flight_want w[1];
	bool whole;

	flight_wanted(f, w, 1, &whole);
	return whole;
}

static void test_access_pattern(void **state)
{
	struct fixture *fx = *state;
	bool created;
	/* No spool needed: only the pattern is looked at. */
	struct flight *small = join(fx, "url:small", "", FLIGHT_SPARSE_MIN_BYTES - 1, &created);
	struct flight *f = join(fx, "url:pattern", "", 256 * MIB, &created);
	struct flight *mid = join(fx, "url:middle", "", 256 * MIB, &created);
	struct flight *zero = join(fx, "url:zero", "", 256 * MIB, &created);
	struct flight *all[] = {small, f, mid, zero};

	/* Small objects are worth fetching whole before anyone reads. */
	assert_true(is_whole(small));

	/* Scattered reads stay sparse, and every parked one wakes the engine. */
	assert_false(is_whole(f));
	for (uint64_t i = 0; i < 64; i++) {
		uint64_t off = (i * 37 % 61 + 1) * 4 * MIB;
		assert_false(flight_note_read(f, off, 128 * KIB));
	}
	assert_false(is_whole(f));
	assert_true(flight_should_kick(f, 100 * MIB));

	/* Reading on from anywhere: sequential once a chunk went by in a row, even with the
	 * requests a little out of order. */
	assert_false(flight_note_read(mid, 100 * MIB, 256 * KIB));
	assert_false(flight_note_read(mid, 100 * MIB + 512 * KIB, 256 * KIB));
	assert_false(flight_note_read(mid, 100 * MIB + 256 * KIB, 256 * KIB));
	assert_false(flight_note_read(mid, 100 * MIB + 768 * KIB, 256 * KIB));
	assert_true(flight_note_read(mid, 101 * MIB, 256 * KIB));
	assert_true(is_whole(mid));
	assert_false(flight_note_read(mid, 200 * MIB, 4096)); /* switched once */

	/* A read from the start means the whole file. */
	assert_true(flight_note_read(zero, 0, 4096));
	assert_true(is_whole(zero));
	/* Whole and near the written prefix: the engine's own loop will serve it. */
	assert_false(flight_should_kick(zero, 4096));

	finish(fx, all, 4);
}

/* ---- edge cases --------------------------------------------------------------------- */

static void test_complete_empty(void **state)
{
	struct fixture *fx = *state;
	struct flight *good, *bad, *plain;
	struct test_waiter w;
	unsigned flights, complete;

	good = start(fx, "sha256:empty", empty_sha256, 0);
	assert_int_equal(flight_complete_empty(good), 0);
	assert_int_equal(state_of(good), FLIGHT_COMPLETE);
	assert_int_equal(flight_ready(good, 0, 0), 1);
	test_waiter_init(&w, 0, 0);
	assert_int_equal(flight_park(good, &w.w), 1);

	bad = start(fx, "sha256:empty-wrong", wrong_sha256, 0);
	assert_int_equal(flight_complete_empty(bad), -EIO);
	assert_int_not_equal(state_of(bad), FLIGHT_COMPLETE);
	flight_fail(bad, -EIO);
	assert_int_equal(flight_ready(bad, 0, 0), -EIO);

	plain = start(fx, "url:empty", "", 0);
	assert_int_equal(flight_complete_empty(plain), 0);
	assert_int_equal(state_of(plain), FLIGHT_COMPLETE);

	flight_table_counts(fx->table, &flights, &complete);
	assert_int_equal(flights, 2);
	assert_int_equal(complete, 2);
	finish(fx, (struct flight *[]){good, bad, plain}, 3);
}

static void test_deliver_past_size(void **state)
{
	struct fixture *fx = *state;
	const uint64_t size = 1000;
	uint8_t *data = make_object(2 * size);
	uint8_t zeros[1000] = {0}, buf[1000];
	struct flight *f = start(fx, "url:past", "", size);
	struct stat st;
	uint64_t written;

	assert_int_equal(flight_deliver(f, 900, data + 900, 200), -EIO);
	assert_int_equal(flight_deliver(f, 1000, data, 1), -EIO);
	assert_int_equal(flight_deliver(f, 1001, data, 1), -EIO);
	assert_int_equal(flight_deliver(f, UINT64_MAX, data, 1), -EIO);
	assert_int_equal(flight_deliver(f, 1, data, SIZE_MAX), -EIO);
	assert_int_equal(flight_deliver(f, 0, data, 1001), -EIO);
	/* Empty deliveries at the end are harmless. */
	assert_int_equal(flight_deliver(f, 1000, data, 0), 0);

	flight_progress(f, &written, NULL, NULL);
	assert_int_equal(written, 0);
	assert_int_equal(flight_ready(f, 900, 1), 0);
	assert_int_equal(fstat(flight_spool_fd(f), &st), 0);
	assert_int_equal(st.st_size, size);
	assert_int_equal(pread(flight_spool_fd(f), buf, size, 0), (ssize_t)size);
	assert_memory_equal(buf, zeros, size);
	assert_int_equal(state_of(f), FLIGHT_ACTIVE);

	/* The flight is still good for the real bytes. */
	deliver_range(f, data, 0, size, 300);
	assert_int_equal(state_of(f), FLIGHT_COMPLETE);
	check_spool(f, data, 0, size);

	finish(fx, &f, 1);
	free(data);
}

static void test_copy_written(void **state)
{
	struct fixture *fx = *state;
	const uint64_t size = 10000;
	uint8_t *data = make_object(size);
	struct flight *f = start(fx, "url:copy", "", size);
	struct util_ranges out;

	util_ranges_init(&out);
	assert_int_equal(flight_deliver(f, 0, data, 100), 0);
	assert_int_equal(flight_deliver(f, 5000, data + 5000, 100), 0);
	assert_int_equal(flight_copy_written(f, &out), 0);
	assert_int_equal(out.n, 2);
	assert_int_equal(out.total, 200);
	assert_int_equal(out.v[0].start, 0);
	assert_int_equal(out.v[0].end, 100);
	assert_int_equal(out.v[1].start, 5000);
	assert_int_equal(out.v[1].end, 5100);
	util_ranges_free(&out);

	finish(fx, &f, 1);
	free(data);
}

/*
 * A complete, idle spool closes once it lingered (here: at once, flushed): the recorder
 * reopens it by name to sync and seal it, and takes only the file the flight closed. Its seal
 * changes the change time, which the next reopen accepts; a file replaced or deleted under the name
 * is refused.
 */
static void test_record_hold_reopens_idle_spool(void **state)
{
	struct fixture *fx = *state;
	const uint64_t size = 3000;
	uint8_t *data = make_object(size);
	char seal[FLIGHT_SEAL_MAX];
	struct flight *f;
	int fd, other;

	flight_table_close_idle_spools(fx->table, true);
	f = start(fx, "url:idle", "", size);
	deliver_range(f, data, 0, size, 1000);
	assert_int_equal(state_of(f), FLIGHT_COMPLETE);
	flight_engine_done(f);
	assert_true(flight_spool_fd(f) >= 0); /* it lingers */
	flight_linger_flush(fx->table);
	assert_int_equal(flight_spool_fd(f), -1);

	fd = flight_hold_spool_to_record(f);
	assert_true(fd >= 0);
	assert_int_equal(flight_spool_fd(f), fd);
	check_spool(f, data, 0, size);
	/* A reader's hold meanwhile shares the recorder's fd. */
	assert_int_equal(flight_hold_spool(f), 0);
	assert_int_equal(flight_spool_fd(f), fd);
	assert_int_equal(flight_spool_seal(fd, seal, sizeof(seal)), 0);
	flight_release_spool_recorded(f);
	assert_int_equal(flight_spool_fd(f), fd);
	flight_release_spool(f);
	flight_linger_flush(fx->table);
	assert_int_equal(flight_spool_fd(f), -1);

	/* Sealed while held: the change time remembered at the close is the sealed one. */
	assert_int_equal(flight_hold_spool(f), 0);
	check_spool(f, data, 0, size);
	flight_release_spool(f);
	flight_linger_flush(fx->table);
	assert_int_equal(flight_spool_fd(f), -1);

	/* Another file under the name (as another mount's new download) is not recorded. */
	assert_int_equal(unlinkat(fx->dirfd, f->spool.name, 0), 0);
	other = openat(fx->dirfd, f->spool.name, O_RDWR | O_CREAT | O_EXCL, 0600);
	assert_true(other >= 0);
	assert_int_equal(pwrite(other, data, size, 0), (ssize_t)size);
	close(other);
	assert_int_equal(flight_hold_spool_to_record(f), -ESTALE);
	assert_int_equal(flight_spool_fd(f), -1);
	/* Nor a deleted one. */
	assert_int_equal(unlinkat(fx->dirfd, f->spool.name, 0), 0);
	assert_int_equal(flight_hold_spool_to_record(f), -ENOENT);
	assert_int_equal(flight_spool_fd(f), -1);

	finish(fx, &f, 1);
	free(data);
}

/*
 * An idle spool stays open (spool_linger.c): its next hold uses the same fd, no reopen. At
 * most FLIGHT_LINGER stay: the oldest beyond them closes, unless it is held by then, and a
 * held one idle again comes back as the newest. Taken up again only while its name names it.
 */
static void test_idle_spools_linger(void **state)
{
	struct fixture *fx = *state;
	enum { N = FLIGHT_LINGER + 3 };
	struct flight *f[N];
	uint8_t *data = make_object(100);
	char key[32];
	int fd0 = -1, other;

	flight_table_close_idle_spools(fx->table, false);
	for (int i = 0; i < N; i++) {
		snprintf(key, sizeof(key), "url:linger%d", i);
		f[i] = start(fx, key, "", 100);
		deliver_range(f[i], data, 0, 100, 100);
		assert_int_equal(state_of(f[i]), FLIGHT_COMPLETE);
		flight_engine_done(f[i]);
		assert_true(flight_spool_fd(f[i]) >= 0);
		if (i == 0) {
			fd0 = flight_spool_fd(f[0]);
			assert_int_equal(flight_hold_spool(f[0]), 0);
			assert_int_equal(flight_spool_fd(f[0]), fd0); /* no reopen */
			check_spool(f[0], data, 0, 100);
		}
	}
	/* f[0] was the oldest but held: it left the ring open; f[1] and f[2] closed. */
	assert_int_equal(flight_spool_fd(f[0]), fd0);
	assert_int_equal(flight_spool_fd(f[1]), -1);
	assert_int_equal(flight_spool_fd(f[2]), -1);
	for (int i = 3; i < N; i++)
		assert_true(flight_spool_fd(f[i]) >= 0);
	assert_int_equal(atomic_load(&fx->table->n_linger), FLIGHT_LINGER);
	/* Idle again: the newest; the oldest (f[3]) makes room. */
	flight_release_spool(f[0]);
	assert_int_equal(flight_spool_fd(f[0]), fd0);
	assert_int_equal(flight_spool_fd(f[3]), -1);
	assert_true(flight_spool_fd(f[4]) >= 0);
	/* A closed one opens again by name when held. */
	assert_int_equal(flight_hold_spool(f[1]), 0);
	check_spool(f[1], data, 0, 100);
	flight_release_spool(f[1]);
	assert_int_equal(flight_spool_fd(f[4]), -1);
	/* One whose name no longer names it (removed, replaced) is refused as a reopen is. */
	assert_true(flight_spool_fd(f[5]) >= 0 && flight_spool_fd(f[6]) >= 0);
	assert_int_equal(unlinkat(fx->dirfd, f[5]->spool.name, 0), 0);
	assert_int_equal(flight_hold_spool(f[5]), -ENOENT);
	assert_int_equal(unlinkat(fx->dirfd, f[6]->spool.name, 0), 0);
	other = openat(fx->dirfd, f[6]->spool.name, O_RDWR | O_CREAT | O_EXCL, 0600);
	assert_true(other >= 0);
	close(other);
	assert_int_equal(flight_hold_spool(f[6]), -ESTALE);
	assert_int_equal(flight_hold_spool(f[7]), 0); /* still its own: taken up */
	flight_release_spool(f[7]);

	finish(fx, f, N);
	free(data);
}

/* ---- reference counts ------------------------------------------------------------- */

static void test_refcounts(void **state)
{
	struct fixture *fx = *state;
	struct flight *a, *b, *c;
	bool created;

	/* Run under LeakSanitizer: every path below must free the flight exactly once. */
	a = join(fx, "url:refs", "", 10, &created);
	assert_int_equal(atomic_load(&a->refs), 2); /* ours and the table's */
	b = join(fx, "url:refs", "", 10, &created);
	assert_int_equal(atomic_load(&a->refs), 3);
	flight_ref(a);
	assert_int_equal(atomic_load(&a->refs), 4);
	flight_unref(a);
	flight_unref(b);
	assert_int_equal(atomic_load(&a->refs), 2);
	assert_int_equal(flight_open_spool(a), 0);

	/* Failing drops the table's reference. */
	flight_fail(a, -EIO);
	assert_int_equal(atomic_load(&a->refs), 1);
	flight_fail(a, -EIO);
	assert_int_equal(atomic_load(&a->refs), 1);
	flight_unref(a); /* the last: freed now, with its spool fd */

	/* A flight that stays in the table is freed by the table's destroy plus our unref. */
	c = join(fx, "url:refs-2", "", 10, &created);
	assert_true(created);
	assert_int_equal(flight_open_spool(c), 0);
	flight_table_destroy(fx->table);
	fx->table = NULL;
	assert_int_equal(atomic_load(&c->refs), 1);
	flight_unref(c);
}

/* ---- threads ------------------------------------------------------------------------ */

#define READERS 4
#define READS_PER_READER 64
#define BIG_SIZE (8 * MIB)
#define BIG_PIECE (64 * KIB)

struct reader {
	struct flight *f;
	const uint8_t *data;
	pthread_barrier_t *gate;
	unsigned seed;
	/* Results, checked by the main thread after pthread_join. */
	unsigned parked, immediate, errors, mismatches, bad_calls;
};

/* Reads one random range: parks when needed and waits for its answer. */
static void reader_read_one(struct reader *r, struct test_waiter *cw, pthread_barrier_t *gate)
{
	uint64_t off = (uint64_t)rand_r(&r->seed) % BIG_SIZE;
	uint64_t max = BIG_SIZE - off < 256 * KIB ? BIG_SIZE - off : 256 * KIB;
	uint64_t len = 1 + (uint64_t)rand_r(&r->seed) % max;
	int rc, err;

	test_waiter_init(cw, off, len);
	rc = flight_park(r->f, &cw->w);
	if (gate)
		pthread_barrier_wait(gate); /* the deliverer starts once every reader parked */
	if (rc == 0) {
		r->parked++;
		err = test_waiter_wait(cw);
		if (test_waiter_calls(cw) != 1)
			r->bad_calls++;
	} else {
		r->immediate++;
		err = rc == 1 ? 0 : rc;
	}
	if (err != 0) {
		r->errors++;
	} else {
		uint8_t *buf = malloc(len);
		if (!buf || pread(flight_spool_fd(r->f), buf, len, (off_t)off) != (ssize_t)len ||
		    memcmp(buf, r->data + off, len) != 0)
			r->mismatches++;
		free(buf);
	}
}

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	/* On the heap: the transfer thread touches it until done returns. */
	struct test_waiter *cw = malloc(sizeof(*cw));

	if (!cw) {
		r->errors++;
		pthread_barrier_wait(r->gate);
		return NULL;
	}
	reader_read_one(r, cw, r->gate);
	for (int i = 1; i < READS_PER_READER; i++)
		reader_read_one(r, cw, NULL);
	free(cw);
	flight_unref(r->f);
	return NULL;
}

struct deliverer {
	struct flight *f;
	const uint8_t *data;
	pthread_barrier_t *gate;
	int rc;
};

static void *deliverer_main(void *arg)
{
	struct deliverer *d = arg;
	const unsigned pieces = BIG_SIZE / BIG_PIECE;
	unsigned order[BIG_SIZE / BIG_PIECE];
	unsigned seed = 7;

	/* Shuffled (fixed seed): the hash catches up from the spool as gaps close. */
	for (unsigned i = 0; i < pieces; i++)
		order[i] = i;
	for (unsigned i = pieces - 1; i > 0; i--) {
		unsigned j = (unsigned)rand_r(&seed) % (i + 1), t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	pthread_barrier_wait(d->gate);
	d->rc = 0;
	for (unsigned i = 0; i < pieces && d->rc == 0; i++) {
		uint64_t off = (uint64_t)order[i] * BIG_PIECE;
		d->rc = flight_deliver(d->f, off, d->data + off, BIG_PIECE);
	}
	if (d->rc)
		flight_fail(d->f, d->rc);
	flight_unref(d->f);
	return NULL;
}

static void test_threaded_readers(void **state)
{
	struct fixture *fx = *state;
	uint8_t *data = make_object(BIG_SIZE);
	char sha[65];
	struct flight *f;
	struct reader readers[READERS];
	struct deliverer del;
	pthread_t reader_threads[READERS], deliverer_thread;
	pthread_barrier_t gate;
	unsigned parked = 0;

	sha256_hex(data, BIG_SIZE, sha);
	f = start(fx, "sha256:threaded", sha, BIG_SIZE);
	pthread_barrier_init(&gate, NULL, READERS + 1);

	/* Each thread takes its own reference before it starts. */
	del = (struct deliverer){.f = f, .data = data, .gate = &gate, .rc = -1};
	flight_ref(f);
	assert_int_equal(pthread_create(&deliverer_thread, NULL, deliverer_main, &del), 0);
	for (int i = 0; i < READERS; i++) {
		readers[i] =
		    (struct reader){.f = f, .data = data, .gate = &gate, .seed = 1000u + i};
		flight_ref(f);
		assert_int_equal(pthread_create(&reader_threads[i], NULL, reader_main, &readers[i]),
		                 0);
	}
	pthread_join(deliverer_thread, NULL);
	for (int i = 0; i < READERS; i++)
		pthread_join(reader_threads[i], NULL);
	pthread_barrier_destroy(&gate);

	assert_int_equal(del.rc, 0);
	for (int i = 0; i < READERS; i++) {
		assert_int_equal(readers[i].errors, 0);
		assert_int_equal(readers[i].mismatches, 0);
		assert_int_equal(readers[i].bad_calls, 0);
		assert_int_equal(readers[i].parked + readers[i].immediate, READS_PER_READER);
		parked += readers[i].parked;
	}
	/* The first read of each reader was parked before the first byte came. */
	assert_true(parked >= READERS);
	assert_int_equal(state_of(f), FLIGHT_COMPLETE);
	assert_int_equal(atomic_load(&f->refs), 2);
	check_spool(f, data, 0, BIG_SIZE);

	finish(fx, &f, 1);
	free(data);
}

/* Builds a key and takes it apart again: every part comes back as it went in. */
static void test_key_round_trips(void **state)
{
	static const char sha[] =
	    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
	struct flight_key_parts p;
	char *key = NULL, *again = NULL;

	(void)state;
	/* A sha256 wins over the URL and the ETag: it names the bytes whatever serves them. */
	assert_int_equal(flight_key_build(sha, 7, "http://h/o", "\"e\"", &key), 0);
	assert_string_equal(
	    key, "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	assert_int_equal(flight_key_parse(key, &p), 0);
	assert_int_equal(p.kind, FLIGHT_KEY_SHA256);
	assert_int_equal(p.sha256_len, 64);
	assert_memory_equal(p.sha256, sha, 64);
	assert_null(p.url);
	assert_true(flight_key_names_version(key));
	free(key);

	/* An ETag's quotes and colons, and a URL's, survive: the ETag ends at the space. */
	assert_int_equal(flight_key_build("", 18446744073709551615ull, "http://h:81/a b?x=1#f",
	                                  "W/\"a:b\"", &key),
	                 0);
	assert_int_equal(flight_key_parse(key, &p), 0);
	assert_int_equal(p.kind, FLIGHT_KEY_ETAG);
	assert_true(p.size == 18446744073709551615ull);
	assert_int_equal(p.etag_len, strlen("W/\"a:b\""));
	assert_memory_equal(p.etag, "W/\"a:b\"", p.etag_len);
	assert_true(flight_key_names_version(key));
	/* Parsed and built again, it is the same key. */
	char etag[64];
	snprintf(etag, sizeof(etag), "%.*s", (int)p.etag_len, p.etag);
	assert_int_equal(flight_key_build("", p.size, p.url, etag, &again), 0);
	assert_string_equal(again, key);
	free(again);
	free(key);

	/* No ETag: by URL and size. */
	assert_int_equal(flight_key_build("", 0, "file:///srv/o", "", &key), 0);
	assert_string_equal(key, "url:0:file:///srv/o");
	assert_int_equal(flight_key_parse(key, &p), 0);
	assert_int_equal(p.kind, FLIGHT_KEY_URL);
	assert_true(p.size == 0);
	assert_string_equal(p.url, "file:///srv/o");
	assert_null(p.etag);
	assert_false(flight_key_names_version(key));
	assert_int_equal(flight_key_build("", p.size, p.url, NULL, &again), 0);
	assert_string_equal(again, key);
	free(again);
	free(key);
}

/* A URL with a secret goes into the key redacted, with its hash: two signatures, two keys. */
static void test_key_hides_secrets(void **state)
{
	struct flight_key_parts p;
	char *a = NULL, *b = NULL, shown[256];

	(void)state;
	assert_int_equal(flight_key_build("", 5, "https://u:pw@h/o?X-Amz-Signature=1", "", &a), 0);
	assert_int_equal(flight_key_build("", 5, "https://u:pw@h/o?X-Amz-Signature=2", "", &b), 0);
	assert_null(strstr(a, "pw"));
	assert_null(strstr(a, "Signature"));
	assert_string_not_equal(a, b);
	assert_int_equal(flight_key_parse(a, &p), 0);
	assert_int_equal(strncmp(p.url, "https://h/o#", strlen("https://h/o#")), 0);
	assert_string_equal(flight_key_shown(a, shown, sizeof(shown)), "https://h/o");
	free(a);
	free(b);
}

/* What the eviction log line shows of each kind of key, and of keys that do not parse. */
static void test_key_shown(void **state)
{
	char shown[64];

	(void)state;
	assert_string_equal(flight_key_shown("sha256:00ff", shown, sizeof(shown)), "sha256:00ff");
	assert_string_equal(flight_key_shown("etag:3:\"x://y\" http://h/p?q", shown, sizeof(shown)),
	                    "http://h/p");
	assert_string_equal(flight_key_shown("url:3:http://u:p@h/p", shown, sizeof(shown)),
	                    "http://h/p");
	/* Not this format (an older spoolfs's): from its URL on, else as it is. */
	assert_string_equal(flight_key_shown("old:http://h/p?sig", shown, sizeof(shown)),
	                    "http://h/p");
	assert_string_equal(flight_key_shown("plain", shown, sizeof(shown)), "plain");
	/* Cut to the buffer, never past it. */
	assert_string_equal(flight_key_shown("sha256:00ff", shown, 5), "sha2");
}

/* Keys this format does not make are refused, never half read. */
static void test_key_parse_refuses(void **state)
{
	static const char *const bad[] = {
	    "",
	    "sha256:",
	    "sha256:ABC",
	    "url:",
	    "url:12",
	    "url:12:",
	    "url:x:http://h/",
	    "url:-1:http://h/",
	    "url:18446744073709551616:http://h/",
	    "etag:1:\"e\"",
	    "etag:1:\"e\" ",
	    "etag:1: http://h/",
	    "etag::\"e\" http://h/",
	    "http://h/",
	};
	struct flight_key_parts p;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (flight_key_parse(bad[i], &p) != -EINVAL)
			fail_msg("parsed \"%s\"", bad[i]);
	}
}

/* The sha256 of text in hex. */
static void sha256_of(const char *text, char hex[2 * EVP_MAX_MD_SIZE + 1])
{
	unsigned char digest[EVP_MAX_MD_SIZE];
	unsigned int len = 0;

	assert_int_equal(EVP_Digest(text, strlen(text), digest, &len, EVP_sha256(), NULL), 1);
	for (unsigned i = 0; i < len; i++)
		snprintf(hex + 2 * i, 3, "%02x", digest[i]);
}

/*
 * A key with a secret in its URL names the object, not the password: a hash of the whole URL
 * in index.db lets a weak password be guessed offline. The query still tells objects apart.
 */
static void test_key_url_hashes_no_password(void **state)
{
	const char *a = "http://u:pw1@h:1/o?sig=A", *b = "http://u:other@h:1/o?sig=A";
	char *ka = NULL, *kb = NULL, *kc = NULL, hex[2 * EVP_MAX_MD_SIZE + 1];

	(void)state;
	assert_int_equal(flight_key_url(a, &ka), 0);
	assert_int_equal(flight_key_url(b, &kb), 0);
	assert_string_equal(ka, kb);
	assert_null(strstr(ka, "pw1"));
	sha256_of(a, hex);
	assert_null(strstr(ka, hex));
	assert_int_equal(flight_key_url("http://u:pw1@h:1/o?sig=B", &kc), 0);
	assert_string_not_equal(ka, kc);
	free(ka);
	free(kb);
	free(kc);
	/* An '@' in the password: all of it goes, as util_redact_url drops it. */
	assert_int_equal(flight_key_url("http://u:p@w@h/o", &ka), 0);
	assert_int_equal(flight_key_url("http://v:q@h/o", &kb), 0);
	assert_string_equal(ka, kb);
	free(ka);
	free(kb);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_key_round_trips),
	    cmocka_unit_test(test_key_hides_secrets),
	    cmocka_unit_test(test_key_shown),
	    cmocka_unit_test(test_key_parse_refuses),
	    cmocka_unit_test_setup_teardown(test_join_single_flight, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_join_concurrent, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_ready_and_park, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_verify_withholds_tail, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_verify_mismatch, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_verify_out_of_order, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_verify_small_object, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_verify_redelivery, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_unpark, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_unpark_then_fail, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_wanted_offsets, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_wanted_offsets_withheld, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_access_pattern, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_complete_empty, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_deliver_past_size, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_copy_written, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_record_hold_reopens_idle_spool, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_idle_spools_linger, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_refcounts, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_threaded_readers, setup, teardown),
	    cmocka_unit_test(test_key_url_hashes_no_password),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * Allocation-failure ("torture") tests for fetch/ and index/: each operation is run with
 * its 1st, 2nd, 3rd, ... allocation failed (see alloc_fail.h; the executable is linked with
 * -Wl,--wrap for the allocators) until a run completes without reaching the armed call. At
 * every N the test checks that the operation returned -ENOMEM (never crashed or reported
 * success with missing data), that no lock is left held, that the state stays consistent
 * (the same or the next operation succeeds once the failure has passed) and that every
 * allocation made during the run was freed after cleanup. LeakSanitizer (ASan build)
 * checks the same from the other side, including what the C library allocates for us.
 *
 * Only the N-th allocation fails; later ones succeed, so the code after an error (cleanup,
 * retries, the next call) runs with memory available, as it would after a transient
 * shortage.
 *
 * Single-threaded except for the lock probes, which call into a table or index from a
 * second thread with a deadline, so a lock left held fails the test instead of hanging it.
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
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alloc_fail.h"
#include "fetch/engine/flight.h"
#include "fetch/engine/flight_i.h" /* white-box: refs, in_table, locks */
#include "fetch/http/http.h"
#include "fetch/s3/s3_list.h"
#include "fetch/s3/sigv4.h"
#include "fetch/source/manifest_load.h"
#include "util/log.h"
#include "index/index.h"
#include "index/records.h"
#include "util/ranges.h"
#include "helpers.h"

/* No operation here makes anywhere near this many allocations. */
#define MAX_POINTS 5000
/* How long a lock probe waits before it calls the lock stuck. */
#define PROBE_SECONDS 10

/* ---- the torture loop --------------------------------------------------------------- */

/*
 * One run of an operation with allocation n failed: it sets up, calls alloc_fail_arm(n)
 * right before the code under test, alloc_fail_disarm() after it, and cleans up everything
 * it made.
 */
typedef void (*torture_fn)(void *ctx, unsigned long n);

/* Runs fn at n = 1, 2, ... until a run does not reach the armed call. Returns the number
 * of allocation points found. */
static unsigned long torture(const char *what, torture_fn fn, void *ctx)
{
	unsigned long n;

	/* ALLOC_FAIL_KEEP_GOING=1 lists every leaking N before failing, to see them all. */
	bool keep_going = getenv("ALLOC_FAIL_KEEP_GOING") != NULL;
	unsigned long leaky = 0;

	for (n = 1; n <= MAX_POINTS; n++) {
		size_t live = alloc_fail_live();
		fn(ctx, n);
		alloc_fail_disarm();
		if (alloc_fail_live() != live) {
			print_error("%s: %zd allocation(s) not freed with allocation %lu failed\n",
			            what, (ssize_t)(alloc_fail_live() - live), n);
			leaky++;
			if (!keep_going)
				fail();
		}
		if (!alloc_fail_fired())
			break;
	}
	print_message("[ alloc    ] %s: %lu allocation points\n", what, n - 1);
	assert_true(n <= MAX_POINTS);
	assert_int_equal(leaky, 0);
	return n - 1;
}

/* An error from an operation under test: must be the injected failure, reported as such. */
#define assert_enomem(rc)                                                                          \
	do {                                                                                       \
		assert_int_equal((rc), -ENOMEM);                                                   \
		assert_true(alloc_fail_fired());                                                   \
	} while (0)

/* ---- lock probes -------------------------------------------------------------------- */

struct probe {
	void (*fn)(void *arg);
	void *arg;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
};

static void *probe_main(void *arg)
{
	struct probe *p = arg;

	p->fn(p->arg);
	pthread_mutex_lock(&p->lock);
	p->done = true;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

/* Runs fn(arg) on another thread; fails the test when it does not return in time (a lock
 * it needs is still held). The probe is leaked then: the test is over anyway. */
static void probe_unlocked(const char *what, void (*fn)(void *arg), void *arg)
{
	static struct probe p;
	struct timespec deadline;
	pthread_t t;
	int rc = 0;

	p = (struct probe){.fn = fn, .arg = arg};
	pthread_mutex_init(&p.lock, NULL);
	pthread_cond_init(&p.cond, NULL);
	assert_int_equal(pthread_create(&t, NULL, probe_main, &p), 0);
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += PROBE_SECONDS;
	pthread_mutex_lock(&p.lock);
	while (!p.done && rc == 0)
		rc = pthread_cond_timedwait(&p.cond, &p.lock, &deadline);
	pthread_mutex_unlock(&p.lock);
	if (!p.done)
		fail_msg("%s: a lock is still held", what);
	pthread_join(t, NULL);
	pthread_mutex_destroy(&p.lock);
	pthread_cond_destroy(&p.cond);
}

static void probe_table_fn(void *arg)
{
	unsigned flights, complete;

	flight_table_counts(arg, &flights, &complete);
}

static void assert_table_unlocked(struct flight_table *t)
{
	probe_unlocked("flight table", probe_table_fn, t);
}

static void assert_flight_unlocked(struct flight *f)
{
	assert_int_equal(pthread_mutex_trylock(&f->lock), 0);
	pthread_mutex_unlock(&f->lock);
}

static void probe_index_fn(void *arg)
{
	struct index_node node;

	index_get(arg, INDEX_ROOT_INO, &node);
}

static void assert_index_unlocked(struct index *idx)
{
	probe_unlocked("index", probe_index_fn, idx);
}

static void probe_records_fn(void *arg)
{
	char seal[64];

	index_records_seal(arg, "probe", seal, sizeof(seal));
}

static void assert_records_unlocked(struct index_records *rec)
{
	probe_unlocked("spool records", probe_records_fn, rec);
}

/* ---- temporary directories ---------------------------------------------------------- */

static void empty_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char path[PATH_MAX];

	if (!d)
		return;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		unlink(path);
	}
	closedir(d);
}

struct tmpdir {
	char path[64];
	int fd;
};

static int setup_dir_in(void **state, const char *parent)
{
	struct tmpdir *t = calloc(1, sizeof(*t));

	if (!t)
		return -1;
	snprintf(t->path, sizeof(t->path), "%s/spoolfs-test-alloc-XXXXXX", parent);
	if (!mkdtemp(t->path) || (t->fd = open(t->path, O_RDONLY | O_DIRECTORY)) < 0) {
		free(t);
		return -1;
	}
	*state = t;
	return 0;
}

static int setup_dir(void **state)
{
	return setup_dir_in(state, "/tmp");
}

/* For a database opened a thousand times over: in memory when the machine has /dev/shm,
 * as each open syncs it to disk. */
static int setup_memory_dir(void **state)
{
	return setup_dir_in(state, "/dev/shm") == 0 ? 0 : setup_dir(state);
}

static int teardown_dir(void **state)
{
	struct tmpdir *t = *state;

	close(t->fd);
	empty_dir(t->path);
	rmdir(t->path);
	free(t);
	return 0;
}

/* ---- util/ranges.c ----------------------------------------------------------------- */

/* Adds that split, merge, bridge and grow the set past its first two capacities. */
static const struct util_range range_adds[] = {
    {100, 200},   {300, 400},   {500, 600},   {700, 800},   {900, 1000},  {1100, 1200},
    {1300, 1400}, {1500, 1600}, {0, 50},      {1700, 1800}, {150, 350},   {2000, 2100},
    {2200, 2300}, {2400, 2500}, {2600, 2700}, {2800, 2900}, {3000, 3100}, {3200, 3300},
    {3400, 3500}, {3600, 3700}, {3800, 3900}, {4000, 4100}, {50, 100},    {0, 5000},
};

static void ranges_run(void *ctx, unsigned long n)
{
	struct util_ranges set, ref;
	struct util_range snap[64];
	size_t snap_n;
	uint64_t snap_total;

	util_ranges_init(&set);
	util_ranges_init(&ref);
	alloc_fail_arm(n);
	for (size_t k = 0; k < sizeof(range_adds) / sizeof(range_adds[0]); k++) {
		const struct util_range *r = &range_adds[k];
		assert_true(set.n <= 64);
		if (set.n)
			memcpy(snap, set.v, set.n * sizeof(*snap));
		snap_n = set.n;
		snap_total = set.total;
		int rc = util_ranges_add(&set, r->start, r->end);
		if (rc) {
			assert_enomem(rc);
			/* Documented: the set is then unchanged. */
			assert_int_equal(set.n, snap_n);
			assert_int_equal(set.total, snap_total);
			if (snap_n)
				assert_memory_equal(set.v, snap, snap_n * sizeof(*snap));
			/* The failure has passed: the same add works now. */
			assert_int_equal(util_ranges_add(&set, r->start, r->end), 0);
		}
		assert_true(util_ranges_covers(&set, r->start, r->end));
	}
	alloc_fail_disarm();
	/* Same result as without failures. */
	for (size_t k = 0; k < sizeof(range_adds) / sizeof(range_adds[0]); k++)
		assert_int_equal(util_ranges_add(&ref, range_adds[k].start, range_adds[k].end), 0);
	assert_int_equal(set.n, ref.n);
	assert_int_equal(set.total, ref.total);
	assert_memory_equal(set.v, ref.v, ref.n * sizeof(*ref.v));
	util_ranges_free(&set);
	util_ranges_free(&ref);
	(void)ctx;
}

static void test_ranges_add(void **state)
{
	/* The first add and every doubling (8, 16) allocate. */
	assert_true(torture("util_ranges_add", ranges_run, NULL) >= 3);
}

/* ---- fetch/engine/flight.c ----------------------------------------------------------------- */

#define PIECE (4096u)
#define PIECES 24u /* > 2 * 8: the range sets grow twice while pieces arrive out of order */
#define OBJ_SIZE ((uint64_t)PIECE * PIECES)

static uint8_t object[OBJ_SIZE];
static char object_sha256[65];

static void make_object(void)
{
	unsigned char digest[EVP_MAX_MD_SIZE];
	unsigned int n = 0;

	for (uint64_t i = 0; i < OBJ_SIZE; i++)
		object[i] = (uint8_t)((i * 0x9e3779b97f4a7c15ull) >> 56) ^ (uint8_t)i;
	if (EVP_Digest(object, OBJ_SIZE, digest, &n, EVP_sha256(), NULL) != 1 || n != 32)
		abort();
	for (unsigned i = 0; i < n; i++)
		snprintf(object_sha256 + 2 * i, 3, "%02x", digest[i]);
}

static struct flight_spec spec_for(const char *key, const char *sha256)
{
	return (struct flight_spec){
	    .key = key,
	    .url = "http://example.invalid/object",
	    .sha256 = sha256,
	    .name = "/test/object",
	    .size = OBJ_SIZE,
	    .ino = 42,
	};
}

static unsigned table_flights(struct flight_table *t)
{
	unsigned flights, complete;

	flight_table_counts(t, &flights, &complete);
	return flights;
}

static enum flight_state state_of(struct flight *f)
{
	enum flight_state st;

	flight_progress(f, NULL, NULL, &st);
	return st;
}

static void table_create_run(void *ctx, unsigned long n)
{
	struct tmpdir *d = ctx;
	struct flight_table *t = NULL;

	alloc_fail_arm(n);
	int rc = flight_table_create(d->fd, &t);
	alloc_fail_disarm();
	if (rc) {
		assert_enomem(rc);
		return;
	}
	assert_non_null(t);
	flight_table_destroy(t);
}

static void test_flight_table_create(void **state)
{
	assert_true(torture("flight_table_create", table_create_run, *state) >= 2);
}

static void hasher_run(void *ctx, unsigned long n)
{
	struct tmpdir *d = ctx;
	struct flight_table *t = NULL;

	assert_int_equal(flight_table_create(d->fd, &t), 0);
	alloc_fail_arm(n);
	int rc = flight_table_start_hasher(t);
	alloc_fail_disarm();
	if (rc)
		assert_enomem(rc);
	flight_table_destroy(t);
}

static void test_flight_start_hasher(void **state)
{
	assert_true(torture("flight_table_start_hasher", hasher_run, *state) >= 1);
}

/* A new key: the entry, the flight, its strings (EVP_MD_CTX_new is OpenSSL's). */
static void join_new_run(void *ctx, unsigned long n)
{
	struct tmpdir *d = ctx;
	struct flight_table *t;
	struct flight_spec spec = spec_for("url:http://example.invalid/a", "");
	struct flight *other, *f = NULL, *again;
	bool created = true;

	assert_int_equal(flight_table_create(d->fd, &t), 0);
	/* Another flight in the same table, so a failure must leave it alone. */
	struct flight_spec ospec = spec_for("sha256:other", "");
	assert_int_equal(flight_table_join(t, &ospec, &other, &created), 0);

	alloc_fail_arm(n);
	int rc = flight_table_join(t, &spec, &f, &created);
	alloc_fail_disarm();
	assert_table_unlocked(t);
	assert_flight_unlocked(other);
	if (rc) {
		assert_enomem(rc);
		assert_false(created);
		assert_int_equal(table_flights(t), 1);
		/* Nothing half-inserted: the retry creates the flight. */
		assert_int_equal(flight_table_join(t, &spec, &f, &created), 0);
		assert_true(created);
	} else {
		assert_true(created);
	}
	assert_int_equal(table_flights(t), 2);
	assert_string_equal(f->key, spec.key);
	assert_int_equal(state_of(f), FLIGHT_ACTIVE);
	/* Single flight still holds. */
	assert_int_equal(flight_table_join(t, &spec, &again, &created), 0);
	assert_false(created);
	assert_ptr_equal(again, f);
	flight_table_destroy(t);
	flight_unref(again);
	flight_unref(f);
	flight_unref(other);
}

static void test_flight_join_new(void **state)
{
	assert_true(torture("flight_table_join (new key)", join_new_run, *state) >= 5);
}

/* An existing key allocates nothing. */
static void test_flight_join_existing(void **state)
{
	struct tmpdir *d = *state;
	struct flight_table *t;
	struct flight_spec spec = spec_for("url:http://example.invalid/a", "");
	struct flight *f, *g;
	bool created;
	size_t live;

	assert_int_equal(flight_table_create(d->fd, &t), 0);
	assert_int_equal(flight_table_join(t, &spec, &f, &created), 0);
	live = alloc_fail_live();
	alloc_fail_arm(1);
	assert_int_equal(flight_table_join(t, &spec, &g, &created), 0);
	alloc_fail_disarm();
	assert_false(alloc_fail_fired());
	assert_int_equal(alloc_fail_calls(), 0);
	assert_false(created);
	assert_ptr_equal(f, g);
	assert_int_equal(alloc_fail_live(), live);
	assert_table_unlocked(t);
	flight_table_destroy(t);
	flight_unref(g);
	flight_unref(f);
}

/* Pieces in an order that leaves 12 holes before filling them: evens, then odds. */
static unsigned piece_at(unsigned k)
{
	return k < PIECES / 2 ? 2 * k : 2 * (k - PIECES / 2) + 1;
}

struct life_ctx {
	struct tmpdir *dir;
	bool verify; /* with a known sha256: bytes held back until the hash matches */
};

/*
 * The transfer thread's view of one flight: open the spool, deliver out of order, fail
 * the flight on an error as the engine does; readers park and one goes away. Then the key
 * starts afresh after a failure, and the table and references go.
 */
static void lifecycle_run(void *ctx, unsigned long n)
{
	struct life_ctx *lc = ctx;
	const char *dir = lc->dir->path;
	const char *sha = lc->verify ? object_sha256 : "";
	char key[80];
	struct flight_table *t = NULL;
	struct flight *f = NULL, *g = NULL;
	struct test_waiter whole, first, gone;
	struct util_ranges copy;
	bool created;
	int rc;

	snprintf(key, sizeof(key), "sha256:%s", lc->verify ? object_sha256 : "none");
	struct flight_spec spec = spec_for(key, sha);
	util_ranges_init(&copy);

	alloc_fail_arm(n);
	rc = flight_table_create(lc->dir->fd, &t);
	if (rc) {
		assert_enomem(rc);
		return;
	}
	rc = flight_table_join(t, &spec, &f, &created);
	if (rc) {
		assert_enomem(rc);
		assert_table_unlocked(t);
		assert_int_equal(table_flights(t), 0);
		flight_table_destroy(t);
		return;
	}
	assert_true(created);

	test_waiter_init(&whole, 0, OBJ_SIZE);
	test_waiter_init(&first, 0, PIECE);
	test_waiter_init(&gone, 5 * PIECE, PIECE);
	assert_int_equal(flight_park(f, &whole.w), 0);
	assert_int_equal(flight_park(f, &first.w), 0);
	assert_int_equal(flight_park(f, &gone.w), 0);
	assert_true(flight_unpark(f, &gone.w));

	rc = flight_open_spool(f);
	assert_flight_unlocked(f);
	if (rc) {
		assert_enomem(rc);
		assert_int_equal(flight_spool_fd(f), -1);
		goto failed;
	}
	for (unsigned k = 0; k < PIECES; k++) {
		uint64_t off = (uint64_t)piece_at(k) * PIECE;
		rc = flight_deliver(f, off, object + off, PIECE);
		assert_flight_unlocked(f);
		if (rc) {
			assert_enomem(rc);
			goto failed;
		}
	}
	/* Delivered: complete, unless publishing the whole object failed (flight failed). */
	if (state_of(f) == FLIGHT_COMPLETE) {
		assert_int_equal(whole.calls, 1);
		assert_int_equal(whole.err, 0);
		assert_int_equal(first.calls, 1);
		assert_int_equal(first.err, 0);
		assert_int_equal(flight_ready(f, 0, OBJ_SIZE), 1);
	} else {
		assert_int_equal(state_of(f), FLIGHT_FAILED);
		assert_true(alloc_fail_fired());
		assert_int_equal(flight_ready(f, 0, 1), -ENOMEM);
		assert_int_equal(whole.calls, 1);
		assert_int_equal(whole.err, -ENOMEM);
		assert_int_equal(first.calls, 1);
		assert_false(f->in_table);
	}
	rc = flight_copy_written(f, &copy);
	assert_flight_unlocked(f);
	if (rc)
		assert_enomem(rc);
	else
		assert_int_equal(copy.total, OBJ_SIZE);
	goto done;

failed:
	/* As the engine does with an error from the transfer thread. */
	flight_fail(f, rc);
	assert_flight_unlocked(f);
	assert_table_unlocked(t);
	assert_int_equal(state_of(f), FLIGHT_FAILED);
	assert_int_equal(whole.calls, 1);
	assert_int_equal(whole.err, -ENOMEM);
	assert_int_equal(first.calls, 1);
	assert_false(f->in_table);
	assert_int_equal(table_flights(t), 0);
	/* The failure has passed: the key starts afresh, marked as after a failure. */
	assert_int_equal(flight_table_join(t, &spec, &g, &created), 0);
	assert_true(created);
	assert_ptr_not_equal(g, f);
	assert_true(g->after_failure);
	assert_int_equal(flight_open_spool(g), 0);
	for (unsigned k = 0; k < PIECES; k++) {
		uint64_t off = (uint64_t)k * PIECE;
		assert_int_equal(flight_deliver(g, off, object + off, PIECE), 0);
	}
	assert_int_equal(state_of(g), FLIGHT_COMPLETE);
done:
	assert_int_equal(gone.calls, 0);
	alloc_fail_disarm();
	assert_table_unlocked(t);
	flight_table_destroy(t);
	if (g)
		flight_unref(g);
	flight_unref(f);
	util_ranges_free(&copy);
	empty_dir(dir);
}

static void test_flight_lifecycle(void **state)
{
	struct life_ctx lc = {.dir = *state, .verify = false};

	assert_true(torture("flight lifecycle", lifecycle_run, &lc) >= 8);
}

static void test_flight_lifecycle_verified(void **state)
{
	struct life_ctx lc = {.dir = *state, .verify = true};

	assert_true(torture("flight lifecycle (sha256)", lifecycle_run, &lc) >= 8);
}

/* flight_fail remembers the key so the next open drops cached pages; without memory that
 * hint is lost (documented), nothing else. */
static void fail_taint_run(void *ctx, unsigned long n)
{
	struct tmpdir *d = ctx;
	struct flight_spec spec = spec_for("url:http://example.invalid/t", "");
	struct flight_table *t;
	struct flight *f, *g;
	struct test_waiter w;
	bool created;

	assert_int_equal(flight_table_create(d->fd, &t), 0);
	assert_int_equal(flight_table_join(t, &spec, &f, &created), 0);
	test_waiter_init(&w, 0, 1);
	assert_int_equal(flight_park(f, &w.w), 0);
	alloc_fail_arm(n);
	flight_fail(f, -EIO);
	alloc_fail_disarm();
	assert_flight_unlocked(f);
	assert_table_unlocked(t);
	assert_int_equal(w.calls, 1);
	assert_int_equal(w.err, -EIO);
	assert_int_equal(flight_table_join(t, &spec, &g, &created), 0);
	assert_true(created);
	assert_int_equal(g->after_failure, !alloc_fail_fired());
	flight_table_destroy(t);
	flight_unref(g);
	flight_unref(f);
}

static void test_flight_fail_taint(void **state)
{
	assert_true(torture("flight_fail (taint)", fail_taint_run, *state) >= 2);
}

/* A persistent cache's spool from a previous session, restored with holes. */
static void reopen_run(void *ctx, unsigned long n)
{
	struct tmpdir *d = ctx;
	char key[80];
	struct flight_table *t;
	struct flight *f;
	struct util_ranges rec;
	struct test_waiter w;
	bool created;
	int rc;

	snprintf(key, sizeof(key), "sha256:%s", object_sha256);
	struct flight_spec spec = spec_for(key, object_sha256);

	/* Session 1 leaves a spool with every even piece written. */
	assert_int_equal(flight_table_create(d->fd, &t), 0);
	assert_int_equal(flight_table_join(t, &spec, &f, &created), 0);
	assert_int_equal(flight_open_spool(f), 0);
	util_ranges_init(&rec);
	for (unsigned k = 0; k < PIECES; k += 2) {
		uint64_t off = (uint64_t)k * PIECE;
		assert_int_equal(flight_deliver(f, off, object + off, PIECE), 0);
		assert_int_equal(util_ranges_add(&rec, off, off + PIECE), 0);
	}
	flight_table_destroy(t);
	flight_unref(f);

	/* Session 2 restores it. */
	assert_int_equal(flight_table_create(d->fd, &t), 0);
	assert_int_equal(flight_table_join(t, &spec, &f, &created), 0);
	test_waiter_init(&w, 0, PIECE);
	assert_int_equal(flight_park(f, &w.w), 0);
	alloc_fail_arm(n);
	rc = flight_reopen_spool(f, &rec, false, false);
	alloc_fail_disarm();
	assert_flight_unlocked(f);
	if (rc) {
		assert_enomem(rc);
		/* The engine fails a flight whose spool was installed, else starts afresh. */
		if (flight_spool_fd(f) >= 0) {
			flight_fail(f, rc);
			assert_int_equal(w.calls, 1);
			assert_int_equal(w.err, -ENOMEM);
		} else {
			assert_int_equal(w.calls, 0);
			assert_int_equal(flight_open_spool(f), 0);
			flight_fail(f, -EIO);
		}
	} else {
		/* Held back until verified: the hash of what is there is not the object's. */
		assert_int_equal(flight_written(f), OBJ_SIZE / 2);
		for (unsigned k = 1; k < PIECES; k += 2) {
			uint64_t off = (uint64_t)k * PIECE;
			assert_int_equal(flight_deliver(f, off, object + off, PIECE), 0);
		}
		assert_int_equal(state_of(f), FLIGHT_COMPLETE);
		assert_int_equal(w.calls, 1);
		assert_int_equal(w.err, 0);
	}
	assert_table_unlocked(t);
	flight_table_destroy(t);
	flight_unref(f);
	util_ranges_free(&rec);
	empty_dir(d->path);
}

static void test_flight_reopen(void **state)
{
	assert_true(torture("flight_reopen_spool", reopen_run, *state) >= 2);
}

/* ---- index/ (index.c, manifest.c, listing.c, spool_records.c, db.c) ------------------- */

#define BASE "https://example.com/m/manifest.json"
#define SHA_A "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789"

static const char manifest[] =
    "{\"version\": 1, \"files\": ["
    "{\"path\": \"readme.txt\", \"size\": 12, \"mtime\": 1700000000},"
    "{\"path\": \"data/a.bin\", \"size\": 4096, \"sha256\": \"" SHA_A "\","
    " \"mtime\": 1700000100, \"executable\": true},"
    "{\"path\": \"data/sub/b c.bin\", \"size\": 1, \"url\": \"../objects/b?x=1\"},"
    "{\"path\": \"data/sub/d\", \"size\": 0, \"url\": \"https://cdn.example.org/d\","
    " \"extra\": {\"ignored\": [1, 2, 3]}},"
    "{\"path\": \"caf\\u00e9/\\u20ac.txt\", \"size\": 7, \"mtime\": 5}"
    "]}";

struct names {
	char v[8][INDEX_NAME_MAX + 1];
	unsigned n;
};

static int collect_name(void *ctx, const struct index_node *child, uint64_t next_cookie)
{
	struct names *names = ctx;

	if (names->n < 8)
		snprintf(names->v[names->n++], sizeof(names->v[0]), "%s", child->name);
	(void)next_cookie;
	return 0;
}

/*
 * Each call either answers `want` or fails with -ENOMEM, leaving no lock held (`unlocked`
 * checks); then the next call must answer `want`.
 */
#define RETRY_AS(want, unlocked, call)                                                             \
	do {                                                                                       \
		int rc_ = (call);                                                                  \
		if (rc_ != (want)) {                                                               \
			assert_enomem(rc_);                                                        \
			unlocked;                                                                  \
			assert_int_equal((call), (want));                                          \
		}                                                                                  \
	} while (0)
#define RETRY(call) RETRY_AS(0, assert_index_unlocked(idx), call)
#define RETRY_REC(call) RETRY_AS(0, assert_records_unlocked(rec), call)
#define RETRY_REC_ENOENT(call) RETRY_AS(-ENOENT, assert_records_unlocked(rec), call)

static void index_run(void *ctx, unsigned long n)
{
	char err[512], *url = NULL;
	struct index *idx = NULL;
	struct index_node root, data, sub, a, node;
	uint64_t files, dirs, bytes;
	struct names names = {.n = 0};
	int rc;

	(void)ctx;
	alloc_fail_arm(n);
	rc = index_open(&idx);
	if (rc) {
		assert_enomem(rc);
		assert_null(idx);
		goto out;
	}
	rc = source_manifest_load(idx, manifest, strlen(manifest), BASE, NULL, err, sizeof(err));
	assert_index_unlocked(idx);
	if (rc) {
		assert_enomem(rc);
		assert_non_null(strstr(err, "cannot load the manifest"));
		/* Nothing was loaded, and the namespace is still empty enough to load. */
		assert_int_equal(index_lookup(idx, INDEX_ROOT_INO, "readme.txt", &node), -ENOENT);
		rc = source_manifest_load(idx, manifest, strlen(manifest), BASE, NULL, err,
		                          sizeof(err));
		assert_int_equal(rc, 0);
	}
	RETRY(index_get(idx, INDEX_ROOT_INO, &root));
	assert_true(root.is_dir);
	RETRY(index_lookup(idx, INDEX_ROOT_INO, "data", &data));
	assert_true(data.is_dir);
	RETRY(index_lookup(idx, data.ino, "sub", &sub));
	RETRY(index_lookup(idx, data.ino, "a.bin", &a));
	assert_string_equal(a.sha256, SHA_A);
	assert_true(a.executable);
	assert_int_equal(a.size, 4096);
	RETRY(index_lookup(idx, sub.ino, "b c.bin", &node));
	RETRY(index_get_url(idx, node.ino, &url));
	assert_string_equal(url, "https://example.com/objects/b?x=1");
	free(url);
	url = NULL;
	RETRY(index_lookup(idx, data.ino, "a.bin", &node));
	RETRY(index_get_url(idx, node.ino, &url));
	assert_string_equal(url, "https://example.com/m/data/a.bin");
	free(url);
	url = NULL;
	/* An open's one query: what it copies out is freed on every failure. */
	struct index_object_ref ref;
	RETRY(index_get_object(idx, node.ino, &ref));
	assert_string_equal(ref.url, "https://example.com/m/data/a.bin");
	assert_string_equal(ref.node.sha256, SHA_A);
	index_object_ref_free(&ref);
	RETRY(index_readdir(idx, INDEX_ROOT_INO, 0, collect_name, &names));
	assert_int_equal(names.n, 3);
	RETRY(index_totals(idx, &files, &dirs, &bytes));
	assert_int_equal(files, 5);
	assert_int_equal(dirs, 4);
	assert_int_equal(bytes, 12 + 4096 + 1 + 0 + 7);
	alloc_fail_disarm();
	assert_index_unlocked(idx);
out:
	alloc_fail_disarm();
	index_close(idx);
}

static void test_index(void **state)
{
	assert_true(torture("index_open + source_manifest_load + lookups", index_run, *state) >=
	            10);
}

/* A manifest whose links are judged (--outside-symlinks hide): kept aside, walked, added. */
static const char linked[] =
    "{\"version\": 2, \"entries\": ["
    "{\"path\": \"x\", \"type\": \"symlink\", \"target\": \"d/d/../../etc\"},"
    "{\"path\": \"d\", \"type\": \"symlink\", \"target\": \".\"},"
    "{\"path\": \"s/in\", \"type\": \"symlink\", \"target\": \"../f\"},"
    "{\"path\": \"f\", \"size\": 1}]}";

static void symlinks_run(void *ctx, unsigned long n)
{
	struct manifest_load_options opts = {.outside_symlinks = MANIFEST_OUTSIDE_HIDE};
	struct index *idx = NULL;
	struct index_node node, s;
	char err[512];
	int rc;

	(void)ctx;
	assert_int_equal(index_open(&idx), 0);
	alloc_fail_arm(n);
	rc = source_manifest_load(idx, linked, strlen(linked), BASE, &opts, err, sizeof(err));
	alloc_fail_disarm();
	assert_index_unlocked(idx);
	if (rc) {
		assert_enomem(rc);
		/* All or nothing: no link was added before the failure, and a load comes next. */
		assert_int_equal(index_lookup(idx, INDEX_ROOT_INO, "d", &node), -ENOENT);
		opts.hidden_symlinks = 0;
		assert_int_equal(source_manifest_load(idx, linked, strlen(linked), BASE, &opts, err,
		                                      sizeof(err)),
		                 0);
	}
	assert_int_equal(opts.hidden_symlinks, 1);
	assert_int_equal(index_lookup(idx, INDEX_ROOT_INO, "x", &node), -ENOENT);
	assert_int_equal(index_lookup(idx, INDEX_ROOT_INO, "d", &node), 0);
	assert_int_equal(index_lookup(idx, INDEX_ROOT_INO, "s", &s), 0);
	assert_int_equal(index_lookup(idx, s.ino, "in", &node), 0);
	index_close(idx);
}

static void test_symlinks(void **state)
{
	util_log_set_level(UTIL_LOG_ERROR); /* each load logs the link it hides */
	assert_true(torture("source_manifest_load judging symlinks", symlinks_run, *state) >= 5);
}

/*
 * sqlite's own allocations, counted and failed like ours while sqlite_counted is set (only
 * around records_run, whose connection lives and dies inside the run), so a failure inside
 * sqlite reaches index/db.c's step, reset and error map and must come out as -ENOMEM.
 * Installed before sqlite initialises; each block carries its size, which sqlite asks for.
 * The wrapped allocators count; __real_malloc is the C library's (or a sanitizer's).
 */
void *__real_malloc(size_t size);
static bool sqlite_counted; /* set and cleared by the test's only thread */

#define SQLITE_HDR 16 /* keeps sqlite's 8-byte alignment */

static void *sqlite_malloc(int n)
{
	size_t size = (size_t)n + SQLITE_HDR;
	char *p = sqlite_counted ? malloc(size) : __real_malloc(size);

	if (!p)
		return NULL;
	memcpy(p, &n, sizeof(n));
	return p + SQLITE_HDR;
}

static void sqlite_free(void *p)
{
	if (p)
		free((char *)p - SQLITE_HDR); /* the wrapped free forgets a tracked block */
}

static int sqlite_size(void *p)
{
	int n;

	memcpy(&n, (char *)p - SQLITE_HDR, sizeof(n));
	return n;
}

static void *sqlite_realloc(void *p, int n)
{
	void *np = sqlite_malloc(n);

	/* Not realloc: a block made while uncounted must not turn into a tracked one. */
	if (np && p) {
		int old = sqlite_size(p);
		memcpy(np, p, (size_t)(old < n ? old : n));
		sqlite_free(p);
	}
	return np;
}

static int sqlite_roundup(int n)
{
	return (n + 7) & ~7;
}

static int sqlite_init(void *ctx)
{
	(void)ctx;
	return SQLITE_OK;
}

static void sqlite_shutdown(void *ctx)
{
	(void)ctx;
}

static const sqlite3_mem_methods sqlite_counting = {
    sqlite_malloc,  sqlite_free, sqlite_realloc,  sqlite_size,
    sqlite_roundup, sqlite_init, sqlite_shutdown, NULL,
};

static void free_lru(struct index_records_entry *lru, size_t *n)
{
	while (*n)
		free(lru[--*n].key);
}

/* Every spool-record operation, each statement of index_records run at least once. */
static void records_run(void *ctx, unsigned long n)
{
	struct tmpdir *d = ctx;
	char db[128], seal[64], **keys = NULL;
	struct index_records *rec = NULL;
	struct util_ranges want, back;
	struct index_records_entry lru[4];
	uint64_t bytes = 0;
	size_t nlru = 0, nkeys = 0;
	bool complete = false;
	int rc;

	snprintf(db, sizeof(db), "%s/index.db", d->path);
	util_ranges_init(&want);
	util_ranges_init(&back);
	for (unsigned k = 0; k < 12; k++)
		assert_int_equal(util_ranges_add(&want, k * 100, k * 100 + 50), 0);

	alloc_fail_arm(n);
	rc = index_records_open(db, &rec);
	if (rc) {
		assert_enomem(rc);
		assert_null(rec);
		goto out;
	}
	RETRY_REC(index_records_set_ranges(rec, "sha256:" SHA_A, &want));
	RETRY_REC(index_records_lookup(rec, "sha256:" SHA_A, &complete, &back));
	assert_false(complete);
	assert_int_equal(back.n, want.n);
	assert_int_equal(back.total, want.total);
	assert_memory_equal(back.v, want.v, want.n * sizeof(*want.v));
	RETRY_REC(index_records_mark_sealed(rec, "sha256:" SHA_A, "seal"));
	RETRY_REC(index_records_lookup(rec, "sha256:" SHA_A, &complete, &back));
	assert_true(complete);
	RETRY_REC(index_records_seal(rec, "sha256:" SHA_A, seal, sizeof(seal)));
	assert_string_equal(seal, "seal");
	RETRY_REC(index_records_touch(rec, "sha256:" SHA_A, 4096, 2));
	RETRY_REC(index_records_touch(rec, "url:https://example.com/x", 10, 1));
	RETRY_REC(index_records_usage(rec, &bytes, lru, 4, &nlru));
	assert_int_equal(bytes, 4096 + 10);
	assert_int_equal(nlru, 2);
	assert_string_equal(lru[0].key, "url:https://example.com/x"); /* used first */
	assert_int_equal(lru[1].size, 4096);
	free_lru(lru, &nlru);
	RETRY_REC(index_records_keys(rec, &keys, &nkeys));
	assert_int_equal(nkeys, 2);
	while (nkeys)
		free(keys[--nkeys]);
	free(keys);
	keys = NULL;
	RETRY_REC(index_records_mark_incomplete(rec, "sha256:" SHA_A));
	RETRY_REC(index_records_lookup(rec, "sha256:" SHA_A, &complete, &back));
	assert_false(complete);
	assert_int_equal(back.n, want.n); /* kept */
	RETRY_REC_ENOENT(index_records_seal(rec, "sha256:" SHA_A, seal, sizeof(seal)));
	RETRY_REC(index_records_reset(rec, "sha256:" SHA_A));
	RETRY_REC(index_records_lookup(rec, "sha256:" SHA_A, &complete, &back));
	assert_int_equal(back.n, 0);
	RETRY_REC(index_records_forget(rec, "sha256:" SHA_A));
	RETRY_REC_ENOENT(index_records_lookup(rec, "sha256:" SHA_A, &complete, &back));
	alloc_fail_disarm();
	assert_records_unlocked(rec);
out:
	alloc_fail_disarm();
	index_records_close(rec);
	util_ranges_free(&want);
	util_ranges_free(&back);
	empty_dir(d->path);
}

static void test_records(void **state)
{
	unsigned long points;

	sqlite_counted = true;
	points = torture("index_records_open + every spool record operation (sqlite's too)",
	                 records_run, *state);
	sqlite_counted = false;
	/* Ours alone are 8: the rest are sqlite's, through index/db.c. */
	assert_true(points >= 100);
}

/* ---- fetch/http/http.c ------------------------------------------------------------------- */

/* The header parser allocates nothing at all: no allocation can fail it. */
static void test_http_no_allocations(void **state)
{
	static const char *const lines[] = {
	    "HTTP/1.1 206 Partial Content\r\n",
	    "Content-Range: bytes 0-99/1000\r\n",
	    "Content-Length: 100\r\n",
	    "ETag: \"9b2cf535f27731c974343645a3985328\"\r\n",
	    "Last-Modified: Wed, 21 Oct 2015 07:28:00 GMT\r\n",
	    "Content-Encoding: gzip\r\n",
	    "Retry-After: 3\r\n",
	    "x-amz-checksum-sha256: 47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\r\n",
	    "x-amz-meta-sha256: " SIGV4_EMPTY_SHA256 "\r\n",
	    "\r\n",
	};
	struct http_response resp;
	uint64_t s, e, total;
	bool known;
	size_t live = alloc_fail_live();

	alloc_fail_arm(1);
	http_response_reset(&resp);
	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++)
		http_response_header(&resp, lines[i], strlen(lines[i]));
	assert_int_equal(http_parse_content_range("bytes 5-9/*", 11, &s, &e, &known, &total), 0);
	assert_true(http_etag_sendable(resp.etag));
	alloc_fail_disarm();
	assert_int_equal(alloc_fail_calls(), 0);
	assert_int_equal(alloc_fail_live(), live);
	assert_true(resp.has_content_range);
	assert_int_equal(resp.range_total, 1000);
	assert_int_equal(resp.retry_after_s, 3);
	assert_string_equal(resp.sha256, SIGV4_EMPTY_SHA256);
	(void)state;
}

/* ---- fetch/s3/s3_list.c ---------------------------------------------------------------- */

#define XML_DECL "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
#define LBR_OPEN "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"

static const char s3_page[] = XML_DECL LBR_OPEN
    "<Name>examplebucket</Name><Prefix></Prefix>"
    "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
    "<KeyCount>9</KeyCount><MaxKeys>9</MaxKeys><Delimiter>%2F</Delimiter>"
    "<EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>"
    "<Contents><Key>a+b+c.txt</Key><LastModified>2009-10-12T17:50:30.000Z</LastModified>"
    "<ETag>&quot;fba9dede5f27731c9771645a39863328&quot;</ETag>"
    "<ChecksumAlgorithm>CRC32</ChecksumAlgorithm><Size>434234</Size>"
    "<Owner><ID>75aa57f09aa0c8caeab4f8c24e99d10f8e7faeebf76c078efc7c6caea54ba06a</ID></Owner>"
    "<StorageClass>STANDARD</StorageClass></Contents>"
    "<Contents><Key>caf%C3%A9+%2B1%25.txt</Key><LastModified>2023-02-28T23:59:59Z</LastModified>"
    "<ETag>\"9b2cf535f27731c974343645a3985328-3\"</ETag><Size>18446744073709551</Size>"
    "<StorageClass>STANDARD</StorageClass></Contents>"
    "<Contents><Key>a%2F%2Fb</Key><Size>1</Size></Contents>"
    "<Contents><Key>k4</Key><Size>4</Size></Contents>"
    "<Contents><Key>k5</Key><Size>5</Size></Contents>"
    "<Contents><Key>k6</Key><Size>6</Size></Contents>"
    "<Contents><Key>dir%2F</Key><Size>0</Size></Contents>"
    "<CommonPrefixes><Prefix>photos%2F</Prefix></CommonPrefixes>"
    "<CommonPrefixes><Prefix>sp+ace%2F%E2%82%AC%2F</Prefix></CommonPrefixes>"
    "</ListBucketResult>";

static const char s3_error_body[] =
    XML_DECL "<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist"
             "</Message><BucketName>nope</BucketName><RequestId>4442587FB7D0A2F9</RequestId>"
             "</Error>";

static void assert_same_page(const struct s3_list_page *a, const struct s3_list_page *b)
{
	assert_int_equal(a->n_objects, b->n_objects);
	for (size_t i = 0; i < a->n_objects; i++) {
		assert_string_equal(a->objects[i].key, b->objects[i].key);
		assert_int_equal(a->objects[i].size, b->objects[i].size);
		assert_string_equal(a->objects[i].etag, b->objects[i].etag);
		assert_int_equal(a->objects[i].mtime, b->objects[i].mtime);
	}
	assert_int_equal(a->n_prefixes, b->n_prefixes);
	for (size_t i = 0; i < a->n_prefixes; i++)
		assert_string_equal(a->prefixes[i], b->prefixes[i]);
	assert_int_equal(a->is_truncated, b->is_truncated);
	assert_string_equal(a->next_token ? a->next_token : "(none)",
	                    b->next_token ? b->next_token : "(none)");
	assert_int_equal(a->key_count, b->key_count);
	assert_int_equal(a->url_encoded, b->url_encoded);
}

static void assert_empty_result(const struct s3_list_result *r)
{
	assert_null(r->page.objects);
	assert_int_equal(r->page.n_objects, 0);
	assert_null(r->page.prefixes);
	assert_int_equal(r->page.n_prefixes, 0);
	assert_null(r->page.next_token);
}

static struct s3_list_result s3_ref;

/* A page past the first capacity (64) of both arrays: growth by realloc. */
static char *big_page(void)
{
	size_t cap = 64 * 1024, len = 0;
	char *b = malloc(cap);

	assert_non_null(b);
	len += (size_t)snprintf(b + len, cap - len,
	                        XML_DECL LBR_OPEN "<Name>b</Name><KeyCount>150</KeyCount>"
	                                          "<IsTruncated>false</IsTruncated>");
	for (int i = 0; i < 80; i++)
		len += (size_t)snprintf(b + len, cap - len,
		                        "<Contents><Key>dir/k%03d</Key><Size>%d</Size>"
		                        "<ETag>\"e%d\"</ETag></Contents>",
		                        i, i, i);
	for (int i = 0; i < 70; i++)
		len += (size_t)snprintf(
		    b + len, cap - len,
		    "<CommonPrefixes><Prefix>dir/p%03d/</Prefix></CommonPrefixes>", i);
	snprintf(b + len, cap - len, "</ListBucketResult>");
	return b;
}

struct s3_big {
	const char *body;
	struct s3_list_result ref;
};

static void s3_big_run(void *ctx, unsigned long n)
{
	struct s3_big *big = ctx;
	struct s3_list_result r;
	char err[256] = "";

	alloc_fail_arm(n);
	int rc = s3_list_parse(big->body, strlen(big->body), NULL, &r, err, sizeof(err));
	alloc_fail_disarm();
	if (rc) {
		assert_enomem(rc);
		assert_string_equal(err, "out of memory");
		assert_empty_result(&r);
	} else {
		assert_same_page(&r.page, &big->ref.page);
	}
	s3_list_result_free(&r);
}

/* One-shot parse of the whole body. */
static void s3_parse_run(void *ctx, unsigned long n)
{
	struct s3_list_result r;
	char err[256] = "";

	alloc_fail_arm(n);
	int rc = s3_list_parse(s3_page, strlen(s3_page), NULL, &r, err, sizeof(err));
	alloc_fail_disarm();
	if (rc) {
		assert_enomem(rc);
		assert_string_equal(err, "out of memory");
		assert_empty_result(&r);
	} else {
		assert_int_equal(r.kind, S3_DOC_LIST);
		assert_same_page(&r.page, &s3_ref.page);
	}
	s3_list_result_free(&r);
	(void)ctx;
}

/* The streaming interface in small chunks: an error is sticky across feeds. */
static void s3_feed_run(void *ctx, unsigned long n)
{
	const char *body = ctx;
	size_t len = strlen(body);
	struct s3_list_parser *p = NULL;
	struct s3_list_result r;
	int rc;

	memset(&r, 0, sizeof(r));
	alloc_fail_arm(n);
	rc = s3_list_parser_new(NULL, &p);
	if (rc) {
		assert_enomem(rc);
		assert_null(p);
		return;
	}
	for (size_t off = 0; off < len && rc == 0; off += 13)
		rc = s3_list_parser_feed(p, body + off, len - off < 13 ? len - off : 13);
	if (rc) {
		assert_enomem(rc);
		assert_string_equal(s3_list_parser_errmsg(p), "out of memory");
		assert_int_equal(s3_list_parser_feed(p, "<x/>", 4), -ENOMEM);
	}
	int frc = s3_list_parser_finish(p, &r);
	if (rc)
		assert_int_equal(frc, rc);
	else if (frc)
		assert_enomem(frc);
	if (frc) {
		assert_empty_result(&r);
	} else if (r.kind == S3_DOC_LIST) {
		assert_same_page(&r.page, &s3_ref.page);
	} else {
		assert_string_equal(r.error.code, "NoSuchBucket");
		assert_string_equal(r.error.bucket, "nope");
	}
	alloc_fail_disarm();
	s3_list_parser_free(p);
	s3_list_result_free(&r);
}

static void test_s3_list(void **state)
{
	char err[256];

	assert_int_equal(s3_list_parse(s3_page, strlen(s3_page), NULL, &s3_ref, err, sizeof(err)),
	                 0);
	assert_int_equal(s3_ref.page.n_objects, 7);
	assert_true(torture("s3_list_parse", s3_parse_run, NULL) >= 10);
	assert_true(torture("s3_list_parser_feed (13-byte chunks)", s3_feed_run, (void *)s3_page) >=
	            10);
	torture("s3_list_parser_feed (error body)", s3_feed_run, (void *)s3_error_body);
	s3_list_result_free(&s3_ref);

	struct s3_big big = {.body = big_page()};
	assert_int_equal(
	    s3_list_parse(big.body, strlen(big.body), NULL, &big.ref, err, sizeof(err)), 0);
	assert_int_equal(big.ref.page.n_objects, 80);
	assert_int_equal(big.ref.page.n_prefixes, 70);
	assert_true(torture("s3_list_parse (150 entries)", s3_big_run, &big) >= 150);
	s3_list_result_free(&big.ref);
	free((void *)big.body);
	(void)state;
}

/* ---- fetch/s3/sigv4.c ------------------------------------------------------------------ */

static const struct sigv4_param sig_params[] = {
    {"list-type", "2"},
    {"prefix", "photos/2024 summer/caf\xc3\xa9"},
    {"delimiter", "/"},
    {"continuation-token", "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM="},
    {"encoding-type", "url"},
};

static const struct sigv4_header sig_headers[] = {
    {"Range", "bytes=0-1048575"},
    {"If-Match", "  \"9b2cf535f27731c974343645a3985328\"  "},
    {"X-Custom", "a   b"},
    {"x-custom", "c"},
};

static struct sigv4_request sig_request(void)
{
	return (struct sigv4_request){
	    .method = "GET",
	    .host = "examplebucket.s3.eu-west-1.amazonaws.com",
	    .path = "/dir/a b+c/\xe2\x82\xac.txt",
	    .params = sig_params,
	    .n_params = sizeof(sig_params) / sizeof(sig_params[0]),
	    .headers = sig_headers,
	    .n_headers = sizeof(sig_headers) / sizeof(sig_headers[0]),
	    .payload_hash = NULL,
	    .region = "eu-west-1",
	    .service = "s3",
	    .access_key_id = "AKIAIOSFODNN7EXAMPLE",
	    .secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
	    .session_token = "FwoGZXIvYXdzEJr//////////wEaDEXAMPLETOKEN",
	    .now = (time_t)1369353600,
	    .flags = SIGV4_S3,
	};
}

static struct sigv4_signed sig_ref;

static void assert_signed_empty(const struct sigv4_signed *s)
{
	assert_null(s->authorization);
	assert_null(s->path);
	assert_null(s->query);
	assert_null(s->canonical_request);
	assert_null(s->string_to_sign);
}

static void sigv4_run(void *ctx, unsigned long n)
{
	struct sigv4_request req = sig_request();
	struct sigv4_signed out;

	alloc_fail_arm(n);
	int rc = sigv4_sign(&req, &out);
	alloc_fail_disarm();
	if (rc) {
		assert_enomem(rc);
		assert_signed_empty(&out);
	} else {
		assert_string_equal(out.authorization, sig_ref.authorization);
		assert_string_equal(out.path, sig_ref.path);
		assert_string_equal(out.query, sig_ref.query);
		assert_string_equal(out.canonical_request, sig_ref.canonical_request);
		assert_string_equal(out.string_to_sign, sig_ref.string_to_sign);
		assert_string_equal(out.amz_date, sig_ref.amz_date);
	}
	sigv4_signed_free(&out);
	(void)ctx;
}

static void encode_target_run(void *ctx, unsigned long n)
{
	char *path = (char *)"unset", *query = (char *)"unset";

	alloc_fail_arm(n);
	int rc = sigv4_encode_target("/dir/a b+c/\xe2\x82\xac.txt", sig_params,
	                             sizeof(sig_params) / sizeof(sig_params[0]), 0, &path, &query);
	alloc_fail_disarm();
	if (rc) {
		assert_enomem(rc);
		assert_null(path);
		assert_null(query);
		return;
	}
	assert_string_equal(path, sig_ref.path);
	assert_string_equal(query, sig_ref.query);
	free(path);
	free(query);
	(void)ctx;
}

static void test_sigv4(void **state)
{
	struct sigv4_request req = sig_request();

	assert_int_equal(sigv4_sign(&req, &sig_ref), 0);
	assert_true(torture("sigv4_sign", sigv4_run, NULL) >= 10);
	assert_true(torture("sigv4_encode_target", encode_target_run, NULL) >= 2);
	sigv4_signed_free(&sig_ref);
	(void)state;
}

/* ---- the wrapper itself ------------------------------------------------------------- */

/* Guards the guard: if the link lacked --wrap, every torture above would pass vacuously. */
static void test_wrapper_active(void **state)
{
	size_t live = alloc_fail_live();
	char *s, *t;

	alloc_fail_arm(2);
	s = strdup("one");
	t = strdup("two");
	alloc_fail_disarm();
	assert_non_null(s);
	assert_null(t);
	assert_true(alloc_fail_fired());
	assert_int_equal(alloc_fail_live(), live + 1);
	alloc_fail_arm(1);
	assert_int_equal(asprintf(&t, "%s-%d", s, 7), -1);
	assert_int_equal(asprintf(&t, "%s-%d", s, 7), 5);
	alloc_fail_disarm();
	assert_string_equal(t, "one-7");
	t = realloc(t, 4096);
	assert_non_null(t);
	free(s);
	free(t);
	assert_int_equal(alloc_fail_live(), live);
	(void)state;
}

int main(void)
{
	if (sqlite3_config(SQLITE_CONFIG_MALLOC, &sqlite_counting) != SQLITE_OK)
		return 1;
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_wrapper_active),
	    cmocka_unit_test(test_ranges_add),
	    cmocka_unit_test_setup_teardown(test_flight_table_create, setup_dir, teardown_dir),
	    cmocka_unit_test_setup_teardown(test_flight_start_hasher, setup_dir, teardown_dir),
	    cmocka_unit_test_setup_teardown(test_flight_join_new, setup_dir, teardown_dir),
	    cmocka_unit_test_setup_teardown(test_flight_join_existing, setup_dir, teardown_dir),
	    cmocka_unit_test_setup_teardown(test_flight_lifecycle, setup_dir, teardown_dir),
	    cmocka_unit_test_setup_teardown(test_flight_lifecycle_verified, setup_dir,
	                                    teardown_dir),
	    cmocka_unit_test_setup_teardown(test_flight_fail_taint, setup_dir, teardown_dir),
	    cmocka_unit_test_setup_teardown(test_flight_reopen, setup_dir, teardown_dir),
	    cmocka_unit_test_setup_teardown(test_index, setup_dir, teardown_dir),
	    cmocka_unit_test_setup_teardown(test_symlinks, setup_dir, teardown_dir),
	    cmocka_unit_test_setup_teardown(test_records, setup_memory_dir, teardown_dir),
	    cmocka_unit_test(test_http_no_allocations),
	    cmocka_unit_test(test_s3_list),
	    cmocka_unit_test(test_sigv4),
	};

	make_object();
	return cmocka_run_group_tests_name("alloc_failures", tests, NULL, NULL);
}

/*
 * Unit tests for the transfer engine (fetch/engine/engine.c, stream.c, schedule.c, engine_cache.c,
 * recorder.c), driven without FUSE: the test joins flights, parks waiters and kicks the
 * engine the way fs/ops.c and fs/reply.c do, against a real HTTP server on 127.0.0.1.
 *
 * The server is a small HTTP/1.1 thread inside the test (one thread per connection, one
 * request per connection, Range support): it answers in microseconds, needs no Python
 * process started per case, and lets a case hold a response at a byte offset or fail the
 * next N requests under the test's own lock, so events are ordered with its condition
 * variable instead of polling another process's stats.
 *
 * Threaded results (waiters answered on the transfer thread) are read in the main thread
 * after the waiter's condition says it was answered, or after engine_stop joined the thread.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fetch/engine/engine.h"
#include "fetch/engine/flight.h"
#include "fetch/engine/flight_i.h" /* white-box: a flight's durable mark */
#include "index/records.h"
#include "helpers.h"
#include "srv.h"

#define KIB (1024u)
#define MIB (1024u * 1024u)
#define MAX_REQUESTS SRV_MAX_REQUESTS

/* ---- fixture: a spool directory, a flight table, an engine, a server, a log --------- */

struct fixture {
	char dir[64];
	int dirfd;
	struct flight_table *table;
	struct engine *engine;
	struct engine_config cfg;
	struct index_records *records;
	struct srv srv;
	uint8_t *body;
	uint64_t size;
	char sha256[65];
	char url[128];
	char key[160];
	/* stderr goes to log_path while a case runs: the engine's reasons are read back. */
	char log_path[96];
	int saved_stderr;
	/* On the heap, not a case's stack: a case that fails leaves them parked, and teardown's
	 * engine_destroy answers them. */
	struct test_waiter w[4];
	atomic_uint order; /* the waiters' answering order, where a case counts it */
};

static void sha256_hex(const void *data, size_t len, char hex[65])
{
	unsigned char md[32];
	unsigned mdlen = 0;

	assert_int_equal(EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL), 1);
	for (unsigned i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));

	if (!fx)
		return -1;
	fx->saved_stderr = -1;
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/spoolfs-engine-XXXXXX");
	if (!mkdtemp(fx->dir) || (fx->dirfd = open(fx->dir, O_RDONLY | O_DIRECTORY)) < 0)
		return -1;
	if (flight_table_create(fx->dirfd, &fx->table) != 0 ||
	    flight_table_start_hasher(fx->table) != 0)
		return -1;
	engine_config_defaults(&fx->cfg);
	fx->cfg.parallel_parts = 1; /* one request per object unless a reader asks elsewhere */
	*state = fx;
	return 0;
}

/* The engine's log, captured for the case to check (helpers.h: test_log_begin). */
static void capture_log(struct fixture *fx)
{
	snprintf(fx->log_path, sizeof(fx->log_path), "%s.log", fx->dir);
	test_log_begin(fx->log_path, &fx->saved_stderr);
}

/* What the engine logged since capture_log; stderr is stderr again. */
static char *read_log(struct fixture *fx)
{
	return test_log_end(fx->log_path, &fx->saved_stderr);
}

/* The object (size bytes of a pattern), its server and its engine, with cfg as set. */
static void serve(struct fixture *fx, uint64_t size)
{
	fx->size = size;
	fx->body = malloc(size ? size : 1);
	assert_non_null(fx->body);
	for (uint64_t i = 0; i < size; i++)
		fx->body[i] = (uint8_t)((i * 2654435761u) >> 13);
	sha256_hex(fx->body, size, fx->sha256);
	srv_start(&fx->srv, fx->body, size);
	snprintf(fx->url, sizeof(fx->url), "http://127.0.0.1:%u/object", fx->srv.port);
}

/* The object, with the next `count` requests answered with `status`, and the log read. */
static void serve_failing(struct fixture *fx, uint64_t size, unsigned count, int status)
{
	serve(fx, size);
	srv_fail_next(&fx->srv, count, status);
	capture_log(fx);
}

static void start_engine(struct fixture *fx)
{
	assert_int_equal(engine_create(&fx->cfg, &fx->engine), 0);
	assert_int_equal(engine_start(fx->engine), 0);
}

/* Joins the object's flight: with its sha256 when `sha256` is set ("" = none). */
static struct flight *join(struct fixture *fx, const char *sha256)
{
	struct flight *f;
	bool created;

	if (sha256[0])
		snprintf(fx->key, sizeof(fx->key), "sha256:%s", sha256);
	else
		snprintf(fx->key, sizeof(fx->key), "url:%llu:%s", (unsigned long long)fx->size,
		         fx->url);
	struct flight_spec spec = {
	    .key = fx->key,
	    .url = fx->url,
	    .sha256 = sha256,
	    .name = "/object",
	    .size = fx->size,
	    .ino = 2,
	};
	assert_int_equal(flight_table_join(fx->table, &spec, &f, &created), 0);
	assert_true(created);
	return f;
}

/* A read as fs/ops.c does one: notes it, then parks w (kicking when the hint says so).
 * Returns flight_park's answer. */
static int read_at(struct fixture *fx, struct flight *f, struct test_waiter *w)
{
	if (flight_note_read(f, w->w.off, w->w.len))
		engine_kick(fx->engine, f);
	bool kick = flight_should_kick(f, w->w.off);
	int rc = flight_park(f, &w->w);
	if (rc == 0 && kick)
		engine_kick(fx->engine, f);
	return rc;
}

/*
 * One read from a new flight of the object: fx->w[0] for [off, off+len) is parked before the
 * engine sees the flight, and its answer is returned once the engine has stopped (every
 * record written, the thread joined: its counters are final). *out keeps the reference.
 */
static int read_once(struct fixture *fx, const char *sha256, uint64_t off, uint64_t len,
                     struct flight **out)
{
	struct test_waiter *w = &fx->w[0];
	int err;

	start_engine(fx);
	*out = join(fx, sha256);
	test_waiter_init(w, off, len);
	assert_int_equal(flight_park(*out, &w->w), 0);
	engine_kick(fx->engine, *out);
	err = test_waiter_wait(w);
	engine_stop(fx->engine);
	return err;
}

static void check_spool(struct fixture *fx, struct flight *f, uint64_t off, uint64_t len)
{
	uint8_t *buf = malloc(len);

	assert_non_null(buf);
	assert_int_equal(pread(flight_spool_fd(f), buf, len, (off_t)off), (ssize_t)len);
	assert_memory_equal(buf, fx->body + off, len);
	free(buf);
}

static void remove_dir(const char *dir)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf -- '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", dir);
}

static int teardown(void **state)
{
	struct fixture *fx = *state;

	if (fx->engine)
		engine_destroy(fx->engine);
	if (fx->table)
		flight_table_destroy(fx->table);
	if (fx->records)
		index_records_close(fx->records);
	if (fx->body)
		srv_stop(&fx->srv);
	free(fx->body);
	if (fx->saved_stderr >= 0) /* the case stopped before read_log: show what it logged */
		fputs(read_log(fx), stderr);
	if (fx->log_path[0])
		unlink(fx->log_path);
	close(fx->dirfd);
	remove_dir(fx->dir);
	free(fx);
	return 0;
}

/* ---- one flight, one request, ranges published in order --------------------------- */

static void test_download_once_in_order(void **state)
{
	struct fixture *fx = *state;
	struct test_waiter *w = fx->w, *first = &fx->w[0];
	struct srv_request req[MAX_REQUESTS];
	const uint64_t offs[3] = {64 * KIB, 400 * KIB, 700 * KIB};

	serve(fx, 1 * MIB);
	srv_hold_at(&fx->srv, 8 * KIB); /* the readers below park while the stream is at 8 KiB */
	start_engine(fx);
	struct flight *f = join(fx, "");
	engine_kick(fx->engine, f);
	test_waiter_init(first, 0, 4 * KIB);
	int rc = read_at(fx, f, first);
	assert_true(rc == 0 || rc == 1);
	if (rc == 0)
		assert_int_equal(test_waiter_wait(first), 0);
	srv_wait_held(&fx->srv);
	/* Parked in reverse: the answers follow the bytes, not the parking order. */
	for (int i = 3; i >= 1; i--) {
		test_waiter_init(&w[i], offs[i - 1], i == 3 ? fx->size - offs[i - 1] : 4 * KIB);
		w[i].order = &fx->order;
		assert_int_equal(read_at(fx, f, &w[i]), 0);
	}
	srv_release(&fx->srv);
	for (int i = 1; i <= 3; i++)
		assert_int_equal(test_waiter_wait(&w[i]), 0);
	for (int i = 1; i <= 3; i++) {
		pthread_mutex_lock(&w[i].lock);
		unsigned rank = w[i].rank;
		int calls = w[i].calls;
		pthread_mutex_unlock(&w[i].lock);
		assert_int_equal(rank, i - 1);
		assert_int_equal(calls, 1);
		check_spool(fx, f, w[i].w.off, w[i].w.len);
	}
	engine_stop(fx->engine);
	enum flight_state st;
	flight_progress(f, NULL, NULL, &st);
	assert_int_equal(st, FLIGHT_COMPLETE);
	check_spool(fx, f, 0, fx->size);
	/* One request for the whole object, and nothing fetched twice. */
	assert_int_equal(srv_requests(&fx->srv, req), 1);
	assert_int_equal(req[0].start, 0);
	assert_int_equal(req[0].end, fx->size);
	const struct engine_stats *stats = engine_stats(fx->engine);
	assert_int_equal(atomic_load(&stats->requests), 1);
	assert_int_equal(atomic_load(&stats->bytes), fx->size);
	assert_int_equal(atomic_load(&stats->completed), 1);
	assert_int_equal(atomic_load(&stats->retries), 0);
	flight_unref(f);
}

/* ---- a far read is fetched ahead of the sequential frontier ----------------------- */

static void test_far_read_scheduled_ahead(void **state)
{
	struct fixture *fx = *state;
	struct test_waiter *head = &fx->w[0], *far = &fx->w[1], *all = &fx->w[2];
	struct srv_request req[MAX_REQUESTS];
	const uint64_t hold = 1 * MIB, far_off = 6 * MIB + 4096;

	serve(fx, 8 * MIB);          /* one piece: a single request would fetch it all */
	srv_hold_at(&fx->srv, hold); /* the first stream stops there until released */
	start_engine(fx);
	struct flight *f = join(fx, "");
	engine_kick(fx->engine, f);
	test_waiter_init(head, 0, 64 * KIB);
	int rc = read_at(fx, f, head);
	assert_true(rc == 0 || rc == 1);
	if (rc == 0)
		assert_int_equal(test_waiter_wait(head), 0);
	srv_wait_held(&fx->srv);

	test_waiter_init(far, far_off, 64 * KIB);
	assert_int_equal(read_at(fx, f, far), 0);
	/* Answered while the stream from the start is still held at 1 MiB: only a request
	 * split off at the far read's chunk can have brought it. */
	assert_int_equal(test_waiter_wait(far), 0);
	unsigned n = srv_requests(&fx->srv, req);
	assert_int_equal(n, 2);
	assert_int_equal(req[0].start, 0);
	assert_int_equal(req[0].end, fx->size);
	assert_int_equal(req[1].start, far_off / FLIGHT_CHUNK_BYTES * FLIGHT_CHUNK_BYTES);
	assert_int_equal(req[1].end, fx->size);
	assert_int_equal(flight_ready(f, hold + 1 * MIB, 1), 0); /* the gap is not there yet */
	check_spool(fx, f, far_off, 64 * KIB);

	srv_release(&fx->srv);
	test_waiter_init(all, 0, fx->size);
	rc = read_at(fx, f, all);
	assert_true(rc == 0 || rc == 1);
	if (rc == 0)
		assert_int_equal(test_waiter_wait(all), 0);
	check_spool(fx, f, 0, fx->size);
	engine_stop(fx->engine);
	/* The gap came from the first stream (stopped at the split): no third request. */
	assert_int_equal(srv_requests(&fx->srv, req), 2);
	flight_unref(f);
}

/* ---- retries, bounded, and answers that fail at once ------------------------------ */

static void test_503_then_success_backs_off(void **state)
{
	struct fixture *fx = *state;
	struct srv_request req[MAX_REQUESTS];

	fx->cfg.backoff_base_ms = 40;
	fx->cfg.backoff_cap_ms = 400;
	fx->cfg.max_tries = 5;
	serve_failing(fx, 256 * KIB, 2, 503);
	struct flight *f;
	assert_int_equal(read_once(fx, "", 0, fx->size, &f), 0);
	char *log = read_log(fx);
	check_spool(fx, f, 0, fx->size);

	assert_int_equal(srv_requests(&fx->srv, req), 3);
	assert_int_equal(req[0].status, 503);
	assert_int_equal(req[1].status, 503);
	assert_true(req[2].status == 200 || req[2].status == 206);
	/* Backoff with jitter in [base/2, base), doubling: at least 20 ms, then 40 ms. */
	assert_true(req[1].at_ms - req[0].at_ms >= 20);
	assert_true(req[2].at_ms - req[1].at_ms >= 40);
	assert_int_equal(atomic_load(&engine_stats(fx->engine)->retries), 2);
	assert_non_null(strstr(log, "/object: HTTP 503 from http://127.0.0.1:"));
	flight_unref(f);
}

static void test_503_forever_gives_up(void **state)
{
	struct fixture *fx = *state;
	struct srv_request req[MAX_REQUESTS];

	fx->cfg.backoff_base_ms = 2;
	fx->cfg.backoff_cap_ms = 8;
	fx->cfg.max_tries = 3;
	serve_failing(fx, 64 * KIB, 1000, 503);
	struct flight *f;
	assert_int_equal(read_once(fx, "", 0, 1, &f), -EIO);
	char *log = read_log(fx);
	/* Exactly max_tries requests: the tries are bounded. */
	assert_int_equal(srv_requests(&fx->srv, req), 3);
	assert_int_equal(flight_ready(f, 0, 1), -EIO);
	assert_int_equal(atomic_load(&engine_stats(fx->engine)->failures), 1);
	assert_non_null(strstr(log, "download failed (giving up after 3 tries, last: HTTP 503)"));
	flight_unref(f);
}

static void test_404_fails_at_once(void **state)
{
	struct fixture *fx = *state;
	struct srv_request req[MAX_REQUESTS];

	serve_failing(fx, 64 * KIB, 1000, 404);
	struct flight *f;
	assert_int_equal(read_once(fx, "", 100, 10, &f), -EIO);
	char *log = read_log(fx);
	assert_int_equal(srv_requests(&fx->srv, req), 1); /* a 404 is not tried again */
	enum flight_state st;
	flight_progress(f, NULL, NULL, &st);
	assert_int_equal(st, FLIGHT_FAILED);
	assert_int_equal(flight_ready(f, 100, 10), -EIO);
	assert_int_equal(atomic_load(&engine_stats(fx->engine)->retries), 0);
	assert_non_null(strstr(log, "/object: download failed (HTTP 404) from http://127.0.0.1:"));
	flight_unref(f);
}

/* ---- a sha256 mismatch: -EIO, and the unverified tail is never served ------------- */

static void test_sha256_mismatch_withholds_tail(void **state)
{
	struct fixture *fx = *state;
	struct test_waiter *head = &fx->w[0], *tail = &fx->w[1];
	char wrong[65];

	serve(fx, 3 * MIB);
	memcpy(wrong, fx->sha256, sizeof(wrong));
	wrong[0] = wrong[0] == '0' ? '1' : '0';
	srv_hold_at(&fx->srv, fx->size - 100);
	capture_log(fx);
	start_engine(fx);
	struct flight *f = join(fx, wrong);
	test_waiter_init(head, 0, 4 * KIB);
	test_waiter_init(tail, fx->size - 50, 50);
	assert_int_equal(flight_park(f, &head->w), 0);
	assert_int_equal(flight_park(f, &tail->w), 0);
	engine_kick(fx->engine, f);
	assert_int_equal(test_waiter_wait(head), 0);
	srv_wait_held(&fx->srv);
	/* All but the last 100 bytes were sent: wait until the engine wrote them (a state it
	 * reaches by itself; the loop waits for it, not for a guessed time). */
	while (flight_written(f) < fx->size - 100)
		sched_yield();
	/* Written, but the last bytes to arrive (FLIGHT_HOLD_BYTES with the 100 to come) wait
	 * for the hash: they may be anywhere (the tail reader split off a stream of its own). */
	uint64_t written, published;
	flight_progress(f, &written, &published, NULL);
	assert_int_equal(written, fx->size - 100);
	assert_true(published <= fx->size - FLIGHT_HOLD_BYTES);
	assert_int_equal(test_waiter_calls(tail), 0);

	srv_release(&fx->srv);
	assert_int_equal(test_waiter_wait(tail), -EIO);
	engine_stop(fx->engine);
	char *log = read_log(fx);
	assert_int_equal(test_waiter_calls(tail), 1);
	assert_int_equal(flight_ready(f, fx->size - 50, 50), -EIO);
	assert_int_equal(flight_ready(f, 0, 1), -EIO);
	assert_non_null(strstr(log, "sha256 mismatch"));
	flight_unref(f);
}

/* ---- the recorder: a durable cache records completion, and a new session uses it --- */

static void test_recorder_completion_record(void **state)
{
	struct fixture *fx = *state;
	struct test_waiter *again = &fx->w[1];
	struct srv_request req[MAX_REQUESTS];
	char err[256] = "";
	struct util_ranges ranges;
	bool complete = false;

	assert_int_equal(index_records_open_at(fx->dirfd, fx->dir, &fx->records, err, sizeof(err)),
	                 0);
	fx->cfg.durable = true;
	fx->cfg.records = fx->records;
	serve(fx, 2 * MIB + 3);
	struct flight *f;
	assert_int_equal(read_once(fx, fx->sha256, 0, fx->size, &f), 0);
	assert_true(atomic_load(&f->durable));
	util_ranges_init(&ranges);
	assert_int_equal(index_records_lookup(fx->records, fx->key, &complete, &ranges), 0);
	assert_true(complete);
	assert_int_equal(ranges.total, fx->size);
	util_ranges_free(&ranges);
	flight_unref(f);

	/* A later session over the same cache directory serves it from the record. */
	engine_destroy(fx->engine);
	fx->engine = NULL;
	flight_table_destroy(fx->table);
	fx->table = NULL;
	assert_int_equal(flight_table_create(fx->dirfd, &fx->table), 0);
	assert_int_equal(flight_table_start_hasher(fx->table), 0);
	start_engine(fx);
	f = join(fx, fx->sha256);
	test_waiter_init(again, 1 * MIB, 4 * KIB);
	engine_kick(fx->engine, f);
	int rc = flight_park(f, &again->w);
	assert_true(rc == 0 || rc == 1);
	if (rc == 0)
		assert_int_equal(test_waiter_wait(again), 0);
	check_spool(fx, f, 0, fx->size);
	engine_stop(fx->engine);
	assert_int_equal(atomic_load(&engine_stats(fx->engine)->restored), 1);
	assert_int_equal(atomic_load(&engine_stats(fx->engine)->requests), 0);
	assert_int_equal(srv_requests(&fx->srv, req), 1);
	flight_unref(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_download_once_in_order, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_far_read_scheduled_ahead, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_503_then_success_backs_off, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_503_forever_gives_up, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_404_fails_at_once, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_sha256_mismatch_withholds_tail, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_recorder_completion_record, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

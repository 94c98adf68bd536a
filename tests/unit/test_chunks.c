/*
 * Unit tests for chunk verification (fetch/engine/chunks.c), without curl or FUSE: each test
 * makes a flight table on a temporary spool directory, joins a flight with chunk hashes and
 * plays the transfer thread with flight_deliver_from and flight_adopt. Readers are parked
 * test_waiters. Without a pool the chunks are hashed inline, so every check is settled
 * when a deliver returns; one test runs the pool and waits for its answers.
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
#include <unistd.h>

#include "fetch/engine/flight.h"
#include "fetch/engine/flight_i.h" /* white-box: written, chunk_bad_url */
#include "helpers.h"

#define KIB (1024ull)
#define CHUNK (16 * KIB)

struct fixture {
	char dir[64];
	int dirfd;
	struct flight_table *table;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned refetches; /* on_refetch calls; guarded by lock */
};

static void count_refetch(void *ctx, struct flight *f)
{
	struct fixture *fx = ctx;

	(void)f;
	pthread_mutex_lock(&fx->lock);
	fx->refetches++;
	pthread_cond_broadcast(&fx->cond);
	pthread_mutex_unlock(&fx->lock);
}

/* Waits until on_refetch was called n times (a pool thread calls it); returns the count. */
static unsigned refetches(struct fixture *fx, unsigned n)
{
	unsigned got;

	pthread_mutex_lock(&fx->lock);
	while (fx->refetches < n)
		pthread_cond_wait(&fx->cond, &fx->lock);
	got = fx->refetches;
	pthread_mutex_unlock(&fx->lock);
	return got;
}

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));

	if (!fx)
		return -1;
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/spoolfs-test-chunks-XXXXXX");
	if (!mkdtemp(fx->dir) || (fx->dirfd = open(fx->dir, O_RDONLY | O_DIRECTORY)) < 0 ||
	    flight_table_create(fx->dirfd, &fx->table) != 0) {
		free(fx);
		return -1;
	}
	pthread_mutex_init(&fx->lock, NULL);
	pthread_cond_init(&fx->cond, NULL);
	flight_table_on_refetch(fx->table, count_refetch, fx);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;
	char path[PATH_MAX];
	struct dirent *de;
	DIR *d;

	flight_table_destroy(fx->table);
	d = opendir(fx->dir);
	while (d && (de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", fx->dir, de->d_name);
		unlink(path);
	}
	if (d)
		closedir(d);
	close(fx->dirfd);
	rmdir(fx->dir);
	pthread_cond_destroy(&fx->cond);
	pthread_mutex_destroy(&fx->lock);
	free(fx);
	return 0;
}

static uint8_t *make_object(uint64_t size)
{
	uint8_t *data = malloc(size);

	assert_non_null(data);
	for (uint64_t i = 0; i < size; i++)
		data[i] = (uint8_t)((i * 0x9e3779b97f4a7c15ull) >> 56) ^ (uint8_t)i;
	return data;
}

/* The hash list of data: what the publisher writes. */
static unsigned char *hash_list(const uint8_t *data, uint64_t size)
{
	uint64_t n = flight_chunk_count(size, CHUNK);
	unsigned char *list = malloc(n * FLIGHT_DIGEST_BYTES + 1);
	unsigned int len = 0;

	assert_non_null(list);
	for (uint64_t c = 0; c < n; c++) {
		uint64_t lo = c * CHUNK, hi = lo + CHUNK < size ? lo + CHUNK : size;
		assert_int_equal(EVP_Digest(data + lo, hi - lo, list + c * FLIGHT_DIGEST_BYTES,
		                            &len, EVP_sha256(), NULL),
		                 1);
	}
	return list;
}

/* A new chunked flight of size bytes, its spool open (as the engine activates it). */
static struct flight *start(struct fixture *fx, const uint8_t *data, uint64_t size,
                            const char *urls_mirror)
{
	unsigned char *list = hash_list(data, size);
	const char *mirrors[1] = {urls_mirror};
	struct flight_spec spec = {.key = "sha256:chunked",
	                           .url = "http://example.invalid/object",
	                           .sha256 = "",
	                           .name = "/test/chunked",
	                           .size = size,
	                           .ino = 42,
	                           .mirror_urls = mirrors,
	                           .n_mirror_urls = urls_mirror ? 1 : 0,
	                           .chunk_size = CHUNK,
	                           .chunk_digests = list};
	struct flight *f = NULL;
	bool created = false;

	assert_int_equal(flight_table_join(fx->table, &spec, &f, &created), 0);
	assert_true(created);
	assert_true(flight_has_chunks(f));
	free(list); /* the flight keeps a copy */
	assert_int_equal(flight_open_spool(f), 0);
	return f;
}

/* Ends a test: the table first (as after the engine stopped), then f and the object. */
static void finish(struct fixture *fx, struct flight *f, uint8_t *data)
{
	flight_table_destroy(fx->table);
	fx->table = NULL;
	flight_unref(f);
	free(data);
}

static enum flight_state state_of(struct flight *f)
{
	enum flight_state st;

	flight_progress(f, NULL, NULL, &st);
	return st;
}

/* Delivers [off, off + len) of data from url_idx, flipping the byte at `flip` (if inside). */
static void deliver(struct flight *f, const uint8_t *data, uint64_t off, uint64_t len,
                    unsigned url_idx, uint64_t flip)
{
	uint8_t *copy = malloc(len);

	assert_non_null(copy);
	memcpy(copy, data + off, len);
	if (flip >= off && flip < off + len)
		copy[flip - off] ^= 0x20;
	assert_int_equal(flight_deliver_from(f, url_idx, off, copy, len), 0);
	free(copy);
}

static void test_chunk_published_only_whole_and_verified(void **state)
{
	struct fixture *fx = *state;
	const uint64_t size = 5 * CHUNK + 100;
	uint8_t *data = make_object(size);
	struct flight *f = start(fx, data, size, NULL);
	struct test_waiter w1, w_last;
	uint64_t published;

	test_waiter_init(&w1, CHUNK + 10, 20);
	assert_int_equal(flight_park(f, &w1.w), 0);
	/* Most of chunk 1: nothing readable, not even the bytes written. */
	deliver(f, data, CHUNK, CHUNK - 1, 0, UINT64_MAX);
	assert_int_equal(flight_ready(f, CHUNK, 100), 0);
	assert_int_equal(w1.calls, 0);
	flight_progress(f, NULL, &published, NULL);
	assert_int_equal(published, 0);
	/* Its last byte: checked, published, its reader answered; only that chunk. */
	deliver(f, data, 2 * CHUNK - 1, 1, 0, UINT64_MAX);
	assert_int_equal(w1.calls, 1);
	assert_int_equal(w1.err, 0);
	assert_int_equal(flight_ready(f, CHUNK, CHUNK), 1);
	assert_int_equal(flight_ready(f, CHUNK, CHUNK + 1), 0);
	assert_int_equal(flight_ready(f, 0, 1), 0);
	/* The short last chunk, far ahead: verified alone, no whole-object wait. */
	test_waiter_init(&w_last, size - 50, 50);
	assert_int_equal(flight_park(f, &w_last.w), 0);
	deliver(f, data, 5 * CHUNK, 100, 0, UINT64_MAX);
	assert_int_equal(w_last.calls, 1);
	assert_int_equal(flight_ready(f, 5 * CHUNK, 100), 1);
	/* The rest in one write: every chunk checked, the flight complete. */
	deliver(f, data, 0, CHUNK, 0, UINT64_MAX);
	deliver(f, data, 2 * CHUNK, 3 * CHUNK, 0, UINT64_MAX);
	assert_int_equal(state_of(f), FLIGHT_COMPLETE);
	assert_int_equal(flight_ready(f, 0, size), 1);
	assert_int_equal(refetches(fx, 0), 0);
	finish(fx, f, data);
}

static void test_bad_chunk_refetched_once_then_eio(void **state)
{
	struct fixture *fx = *state;
	const uint64_t size = 4 * CHUNK;
	uint8_t *data = make_object(size);
	struct flight *f = start(fx, data, size, "http://mirror.invalid/object");
	struct test_waiter w_bad, w_span, w_good;
	struct flight_want want[4];
	uint64_t written;
	bool whole;

	test_waiter_init(&w_bad, 2 * CHUNK + 5, 10);
	test_waiter_init(&w_span, CHUNK, 2 * CHUNK); /* chunks 1 and 2 */
	test_waiter_init(&w_good, 3 * CHUNK, 10);
	assert_int_equal(flight_park(f, &w_bad.w), 0);
	assert_int_equal(flight_park(f, &w_span.w), 0);
	assert_int_equal(flight_park(f, &w_good.w), 0);
	/* Chunk 2 arrives corrupt from url 0: not published, its bytes unwritten again, the
	 * URL named for the transfer thread to leave, and the engine asked to look. */
	deliver(f, data, 0, size, 0, 2 * CHUNK + 7);
	assert_int_equal(w_bad.calls, 0);
	assert_int_equal(w_span.calls, 0);
	assert_int_equal(w_good.calls, 1);
	assert_int_equal(flight_ready(f, 2 * CHUNK, 1), 0);
	flight_progress(f, &written, NULL, NULL);
	assert_int_equal(written, size - CHUNK);
	assert_int_equal(refetches(fx, 0), 1);
	assert_int_equal(f->verify.chunk_bad_url, 1); /* url 0, plus one */
	/* What readers want again is that chunk, whole. */
	assert_int_equal(flight_wanted(f, want, 4, &whole), 2);
	assert_int_equal(want[0].off, 2 * CHUNK);
	assert_int_equal(want[1].off, 2 * CHUNK);
	/* The second copy (from the mirror) is corrupt too: EIO for the reads that touch it,
	 * and only them. */
	deliver(f, data, 2 * CHUNK, CHUNK, 1, 2 * CHUNK + 9);
	assert_int_equal(w_bad.calls, 1);
	assert_int_equal(w_bad.err, -EIO);
	assert_int_equal(w_span.calls, 1);
	assert_int_equal(w_span.err, -EIO);
	assert_int_equal(flight_ready(f, 2 * CHUNK + 100, 1), -EIO);
	assert_int_equal(flight_ready(f, 0, 2 * CHUNK), 1);
	assert_int_equal(flight_ready(f, 3 * CHUNK, CHUNK), 1);
	assert_int_equal(state_of(f), FLIGHT_ACTIVE); /* never complete, never failed */
	assert_int_equal(refetches(fx, 0), 1);
	test_waiter_init(&w_bad, 2 * CHUNK, 1);
	assert_int_equal(flight_park(f, &w_bad.w), -EIO);
	/* A new open: one more try, which a good copy wins. */
	assert_true(flight_retry_bad_chunks(f));
	assert_false(flight_retry_bad_chunks(f));
	assert_int_equal(flight_ready(f, 2 * CHUNK, 1), 0);
	deliver(f, data, 2 * CHUNK, CHUNK, 1, UINT64_MAX);
	assert_int_equal(state_of(f), FLIGHT_COMPLETE);
	finish(fx, f, data);
}

static void test_restored_chunks_are_checked(void **state)
{
	struct fixture *fx = *state;
	const uint64_t size = 3 * CHUNK;
	uint8_t *data = make_object(size);
	struct flight *f = start(fx, data, size, NULL);
	struct util_ranges recorded;
	uint8_t bad = data[CHUNK + 3] ^ 1;

	/* What an earlier session left: chunk 1 changed on disk since. */
	assert_int_equal(pwrite(flight_spool_fd(f), data, size, 0), (ssize_t)size);
	assert_int_equal(pwrite(flight_spool_fd(f), &bad, 1, CHUNK + 3), 1);
	util_ranges_init(&recorded);
	assert_int_equal(util_ranges_add(&recorded, 0, size), 0);
	assert_int_equal(flight_adopt(f, &recorded, false), 0);
	assert_int_equal(flight_ready(f, 0, CHUNK), 1);
	assert_int_equal(flight_ready(f, 2 * CHUNK, CHUNK), 1);
	assert_int_equal(flight_ready(f, CHUNK, 1), 0); /* fetched again, never served */
	assert_int_equal(refetches(fx, 0), 1);
	deliver(f, data, CHUNK, CHUNK, 0, UINT64_MAX);
	assert_int_equal(state_of(f), FLIGHT_COMPLETE);
	util_ranges_free(&recorded);
	finish(fx, f, data);
}

/* With the pool running, chunks are checked on its threads; readers are answered there. */
static void test_pool_checks_every_chunk(void **state)
{
	struct fixture *fx = *state;
	const uint64_t size = 64 * CHUNK + 1;
	uint8_t *data = make_object(size);
	struct flight *f;
	struct test_waiter w[8];

	assert_int_equal(flight_table_start_hasher(fx->table), 0);
	f = start(fx, data, size, NULL);
	for (unsigned i = 0; i < 8; i++) {
		test_waiter_init(&w[i], i * 8 * CHUNK + 3, 8 * CHUNK - 3);
		assert_int_equal(flight_park(f, &w[i].w), 0);
	}
	for (uint64_t off = 0; off < size; off += 3 * KIB)
		deliver(f, data, off, size - off < 3 * KIB ? size - off : 3 * KIB, 0,
		        off == 33 * CHUNK ? 33 * CHUNK + 1 : UINT64_MAX);
	/* Chunk 33 failed: its reader waits for the refetch; the others have their bytes. */
	for (unsigned i = 0; i < 8; i++)
		if (i != 4)
			assert_int_equal(test_waiter_wait(&w[i]), 0);
	assert_int_equal(test_waiter_calls(&w[4]), 0);
	assert_int_equal(refetches(fx, 1), 1); /* its bytes are unwritten again */
	assert_int_equal(flight_written(f), size - CHUNK);
	deliver(f, data, 33 * CHUNK, CHUNK, 0, UINT64_MAX);
	assert_int_equal(test_waiter_wait(&w[4]), 0);
	flight_table_stop_hasher(fx->table);
	assert_int_equal(state_of(f), FLIGHT_COMPLETE);
	finish(fx, f, data);
}

static void test_join_without_digests_only_joins(void **state)
{
	struct fixture *fx = *state;
	const uint64_t size = 2 * CHUNK;
	struct flight_spec spec = {.key = "sha256:chunked",
	                           .url = "http://example.invalid/object",
	                           .sha256 = "",
	                           .name = "/test/chunked",
	                           .size = size,
	                           .chunk_size = CHUNK};
	uint8_t *data = make_object(size);
	struct flight *f = NULL, *g = NULL;
	bool created = true;

	/* No flight: the caller fetches the hash list first. */
	assert_int_equal(flight_table_join(fx->table, &spec, &f, &created), -ENOENT);
	assert_null(f);
	g = start(fx, data, size, NULL);
	assert_int_equal(flight_table_join(fx->table, &spec, &f, &created), 0);
	assert_false(created);
	assert_ptr_equal(f, g);
	assert_int_equal(flight_chunk_count(0, CHUNK), 0);
	assert_int_equal(flight_chunk_count(CHUNK, CHUNK), 1);
	assert_int_equal(flight_chunk_count(CHUNK + 1, CHUNK), 2);
	flight_unref(g);
	finish(fx, f, data);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_chunk_published_only_whole_and_verified, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_bad_chunk_refetched_once_then_eio, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_restored_chunks_are_checked, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pool_checks_every_chunk, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_join_without_digests_only_joins, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

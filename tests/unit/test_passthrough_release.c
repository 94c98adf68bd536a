/*
 * Which release of a complete object's page-cache handles is the last (fs/passthrough.c):
 * that one, and only that one, drops the object's pages from FUSE's cache. Two releases on
 * two FUSE threads at once must not both see no handle left (the pages would be dropped,
 * and counted, twice) nor both see one left (they would stay, and the next passthrough
 * open would pay for dropping them). Many rounds of two released together, started by a
 * barrier; under TSan an unguarded count also fails as a data race.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs/handles.h"
#include "fs/passthrough.h"
#include "fs/session.h"

#define ROUNDS 2000

/* fs/handles.c's, which the rest of this suite does not need: an fh per handle. */
uint64_t fs_handle_assign_id(struct fs_session *s, struct fs_handle *h)
{
	static atomic_uint_fast64_t serial;

	(void)s;
	if (!h->id)
		h->id = atomic_fetch_add(&serial, 1) + 1;
	return h->id;
}
#define OBJECT_BYTES 4096u

struct fixture {
	char dir[64];
	int dirfd; /* 0 until opened (calloc): closed only then */
	struct flight_table *table;
	struct flight *flight;
	struct fs_session session;
};

static const struct flight_spec object_spec = {
    .key = "url:4096:http://example.invalid/object",
    .url = "http://example.invalid/object",
    .sha256 = "",
    .name = "/object",
    .size = OBJECT_BYTES,
    .ino = 42,
};

static int setup(void **state)
{
	static const char bytes[OBJECT_BYTES];
	struct fixture *fx = calloc(1, sizeof(*fx));
	bool created = false;

	if (!fx)
		return -1;
	*state = fx;
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/spoolfs-test-pt-XXXXXX");
	if (!mkdtemp(fx->dir) || (fx->dirfd = open(fx->dir, O_RDONLY | O_DIRECTORY)) < 0 ||
	    flight_table_create(fx->dirfd, &fx->table) != 0 ||
	    flight_table_join(fx->table, &object_spec, &fx->flight, &created) != 0 || !created ||
	    flight_open_spool(fx->flight) != 0 ||
	    flight_deliver(fx->flight, 0, bytes, sizeof(bytes)) != 0)
		return -1;
	pthread_mutex_init(&fx->session.pt.lock, NULL);
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;
	char path[128];

	if (fx->table) {
		flight_table_destroy(fx->table);
		flight_unref(fx->flight);
		pthread_mutex_destroy(&fx->session.pt.lock);
	}
	if (fx->dirfd > 0)
		close(fx->dirfd);
	snprintf(path, sizeof(path), "rm -rf '%s'", fx->dir);
	if (system(path) != 0)
		fprintf(stderr, "could not remove %s\n", fx->dir);
	free(fx);
	return 0;
}

struct releaser {
	struct fixture *fx;
	pthread_barrier_t *start, *done;
	struct fs_handle handle;
	unsigned last_count; /* rounds in which this release was the last */
};

static void *releaser_main(void *arg)
{
	struct releaser *r = arg;

	for (int i = 0; i < ROUNDS; i++) {
		pthread_barrier_wait(r->start);
		if (fs_passthrough_release(&r->fx->session, &r->handle))
			r->last_count++;
		pthread_barrier_wait(r->done);
	}
	return NULL;
}

/* Opens h through the page cache (the session has no passthrough): counted in its object. */
static void open_cached(struct fixture *fx, struct fs_handle *h)
{
	assert_int_equal(fs_passthrough_open(&fx->session, h), 0);
	assert_false(h->passthrough);
	assert_non_null(h->object);
}

/* Handles of the fixture's flight open through the page cache, as its object counts them. */
static unsigned cached_handles(struct fixture *fx, struct flight *f)
{
	struct fs_object *o;
	unsigned n;

	pthread_mutex_lock(&fx->session.pt.lock);
	o = fs_object_find_locked(&fx->session, flight_id(f));
	n = o ? o->pt_cached_handles : 0;
	pthread_mutex_unlock(&fx->session.pt.lock);
	return n;
}

static void test_two_releases_at_once_make_exactly_one_last(void **state)
{
	struct fixture *fx = *state;
	pthread_barrier_t start, done;
	struct releaser r[2];
	pthread_t threads[2];

	pthread_barrier_init(&start, NULL, 3);
	pthread_barrier_init(&done, NULL, 3);
	for (int k = 0; k < 2; k++) {
		r[k] = (struct releaser){.fx = fx, .start = &start, .done = &done};
		r[k].handle.flight = fx->flight;
		assert_int_equal(pthread_create(&threads[k], NULL, releaser_main, &r[k]), 0);
	}
	for (int i = 0; i < ROUNDS; i++) {
		/* Before the barrier: the releasers see them. */
		open_cached(fx, &r[0].handle);
		open_cached(fx, &r[1].handle);
		assert_int_equal(cached_handles(fx, fx->flight), 2);
		pthread_barrier_wait(&start);
		pthread_barrier_wait(&done);
		assert_int_equal(cached_handles(fx, fx->flight), 0);
		/* The object's entry went with its last handle. */
		pthread_mutex_lock(&fx->session.pt.lock);
		assert_null(fs_object_find_locked(&fx->session, flight_id(fx->flight)));
		pthread_mutex_unlock(&fx->session.pt.lock);
	}
	for (int k = 0; k < 2; k++)
		pthread_join(threads[k], NULL);
	pthread_barrier_destroy(&start);
	pthread_barrier_destroy(&done);
	assert_int_equal(r[0].last_count + r[1].last_count, ROUNDS);
}

static void test_a_release_with_handles_left_is_not_last(void **state)
{
	struct fixture *fx = *state;
	struct fs_handle h1 = {.flight = fx->flight}, h2 = {.flight = fx->flight};

	open_cached(fx, &h1);
	open_cached(fx, &h2);
	assert_ptr_equal(h1.object, h2.object);
	assert_false(fs_passthrough_release(&fx->session, &h1));
	assert_true(fs_passthrough_release(&fx->session, &h2));
}

static void test_after_a_failure_nothing_is_dropped_at_release(void **state)
{
	static const char bytes[OBJECT_BYTES];
	struct fixture *fx = *state;
	struct flight *next = NULL;
	bool created = false;

	/* Its pages may be a failed flight's: the failure's own invalidation drops them. The
	 * next flight of a failed one's key is complete here, and after the failure. */
	flight_fail(fx->flight, -EIO);
	assert_int_equal(flight_table_join(fx->table, &object_spec, &next, &created), 0);
	assert_true(created);
	assert_true(flight_after_failure(next));
	assert_int_equal(flight_open_spool(next), 0);
	assert_int_equal(flight_deliver(next, 0, bytes, sizeof(bytes)), 0);
	assert_int_equal(flight_ready(next, 0, OBJECT_BYTES), 1);

	struct fs_handle h = {.flight = next};
	open_cached(fx, &h);
	assert_false(fs_passthrough_release(&fx->session, &h));
	flight_unref(next);
}

static void test_a_virtual_file_has_nothing_to_drop(void **state)
{
	struct fixture *fx = *state;
	struct fs_handle h = {.flight = NULL};

	assert_false(fs_passthrough_release(&fx->session, &h));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_two_releases_at_once_make_exactly_one_last, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_a_release_with_handles_left_is_not_last, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_after_a_failure_nothing_is_dropped_at_release,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_a_virtual_file_has_nothing_to_drop, setup,
	                                    teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

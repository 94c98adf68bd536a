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
#include <fcntl.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs/fs_i.h"

#define ROUNDS 2000
#define OBJECT_BYTES 4096u

struct fixture {
	char dir[64];
	int dirfd; /* 0 until opened (calloc): closed only then */
	struct flight_table *table;
	struct flight *flight;
	struct fs_session session;
};

static int setup(void **state)
{
	static const struct flight_spec spec = {
	    .key = "url:object",
	    .url = "http://example.invalid/object",
	    .sha256 = "",
	    .name = "/object",
	    .size = OBJECT_BYTES,
	    .ino = 42,
	};
	static const char bytes[OBJECT_BYTES];
	struct fixture *fx = calloc(1, sizeof(*fx));
	bool created = false;

	if (!fx)
		return -1;
	*state = fx;
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/spoolfs-test-pt-XXXXXX");
	if (!mkdtemp(fx->dir) || (fx->dirfd = open(fx->dir, O_RDONLY | O_DIRECTORY)) < 0 ||
	    flight_table_create(fx->dirfd, &fx->table) != 0 ||
	    flight_table_join(fx->table, &spec, &fx->flight, &created) != 0 || !created ||
	    flight_open_spool(fx->flight) != 0 ||
	    flight_deliver(fx->flight, 0, bytes, sizeof(bytes)) != 0)
		return -1;
	pthread_mutex_init(&fx->session.passthrough_lock, NULL);
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;
	char path[128];

	if (fx->table) {
		flight_table_destroy(fx->table);
		flight_unref(fx->flight);
		pthread_mutex_destroy(&fx->session.passthrough_lock);
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

static void set_cached_handles(struct fixture *fx, unsigned n)
{
	pthread_mutex_lock(&fx->session.passthrough_lock);
	fx->flight->pt_cached_handles = n;
	pthread_mutex_unlock(&fx->session.passthrough_lock);
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
		set_cached_handles(fx, 2); /* before the barrier: the releasers see it */
		pthread_barrier_wait(&start);
		pthread_barrier_wait(&done);
		pthread_mutex_lock(&fx->session.passthrough_lock);
		unsigned left = fx->flight->pt_cached_handles;
		pthread_mutex_unlock(&fx->session.passthrough_lock);
		assert_int_equal(left, 0);
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
	struct fs_handle h = {.flight = fx->flight};

	set_cached_handles(fx, 2);
	assert_false(fs_passthrough_release(&fx->session, &h));
	assert_true(fs_passthrough_release(&fx->session, &h));
}

static void test_after_a_failure_nothing_is_dropped_at_release(void **state)
{
	struct fixture *fx = *state;
	struct fs_handle h = {.flight = fx->flight};

	/* Its pages may be a failed flight's: the failure's own invalidation drops them. */
	fx->flight->after_failure = true;
	set_cached_handles(fx, 1);
	assert_false(fs_passthrough_release(&fx->session, &h));
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

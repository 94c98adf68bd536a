/*
 * The listing single-flight (fetch/source/listing_flight.c), on a real lazy index and a listing
 * function that the test holds at a gate: no S3 server is needed, since the single-flight
 * only asks the index whether a directory is listed and calls the function once.
 * Workers collect their results; the main thread asserts after pthread_join.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>

#include "fetch/source/listing_flight.h"
#include "index/index.h"

#define JOINERS 2

struct fixture {
	char dir[64];
	struct index *idx;
	struct listing_flights *lf;
	uint64_t dir_a; /* the root's child directories, unlisted: a's listings are gated */
	uint64_t dir_b;
	/* The listing function's gate and record; guarded by mu. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool hold;   /* listings of a wait until it is cleared */
	int started; /* listings of a begun */
	int calls;   /* listing function calls, any directory */
	int fail;    /* this many listings of a fail (-EIO) before one succeeds */
};

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));
	const struct index_entry subdirs[] = {{.name = "a", .is_dir = true},
	                                      {.name = "b", .is_dir = true}};
	struct index_node a, b;

	if (!fx)
		return -1;
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/spoolfs-listing-XXXXXX");
	if (!mkdtemp(fx->dir))
		return -1;
	if (index_open(&fx->idx) != 0 || index_begin_lazy(fx->idx) != 0 ||
	    listing_flights_create(&fx->lf) != 0)
		return -1;
	/* The root, listed by hand: its child directories start unlisted. */
	if (index_add_listing(fx->idx, INDEX_ROOT_INO, subdirs, 2) != 0 ||
	    index_lookup(fx->idx, INDEX_ROOT_INO, "a", &a) != 0 ||
	    index_lookup(fx->idx, INDEX_ROOT_INO, "b", &b) != 0)
		return -1;
	fx->dir_a = a.ino;
	fx->dir_b = b.ino;
	pthread_mutex_init(&fx->mu, NULL);
	pthread_cond_init(&fx->cv, NULL);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;
	char cmd[128];

	listing_flights_destroy(fx->lf);
	index_close(fx->idx);
	pthread_cond_destroy(&fx->cv);
	pthread_mutex_destroy(&fx->mu);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fx->dir);
	if (system(cmd) != 0)
		return -1;
	free(fx);
	return 0;
}

/* listing_flight_list_fn: counts, waits at the gate (a only), then lists or fails. */
static int list_fn(void *ctx, uint64_t dir)
{
	struct fixture *fx = ctx;
	bool fail = false;

	pthread_mutex_lock(&fx->mu);
	fx->calls++;
	if (dir != fx->dir_a) {
		pthread_mutex_unlock(&fx->mu);
		return index_add_listing(fx->idx, dir, NULL, 0);
	}
	fx->started++;
	pthread_cond_broadcast(&fx->cv);
	while (fx->hold)
		pthread_cond_wait(&fx->cv, &fx->mu);
	if (fx->fail > 0) {
		fx->fail--;
		fail = true;
	}
	pthread_mutex_unlock(&fx->mu);
	return fail ? -EIO : index_add_listing(fx->idx, dir, NULL, 0);
}

struct caller {
	struct fixture *fx;
	uint64_t dir;
	int rc;
};

static void *caller_main(void *arg)
{
	struct caller *c = arg;

	c->rc = listing_flight_ensure(c->fx->lf, c->fx->idx, c->dir, list_fn, c->fx);
	return NULL;
}

static void wait_started(struct fixture *fx, int n)
{
	pthread_mutex_lock(&fx->mu);
	while (fx->started < n)
		pthread_cond_wait(&fx->cv, &fx->mu);
	pthread_mutex_unlock(&fx->mu);
}

/* Each joiner counts itself under the table's lock just before it waits: once the count is
 * seen, the joiner is waiting (it gave the lock up in pthread_cond_wait). */
static void wait_joined(struct fixture *fx, uint64_t n)
{
	while (listing_flights_joined(fx->lf) < n)
		sched_yield();
}

static void open_gate(struct fixture *fx)
{
	pthread_mutex_lock(&fx->mu);
	fx->hold = false;
	pthread_cond_broadcast(&fx->cv);
	pthread_mutex_unlock(&fx->mu);
}

/* The leader, held in its listing, and two joiners who arrive meanwhile: one listing. */
static void run_leader_and_joiners(struct fixture *fx, struct caller *callers)
{
	pthread_t threads[1 + JOINERS];

	fx->hold = true;
	for (int i = 0; i <= JOINERS; i++)
		callers[i] = (struct caller){.fx = fx, .dir = fx->dir_a, .rc = 1};
	assert_int_equal(pthread_create(&threads[0], NULL, caller_main, &callers[0]), 0);
	wait_started(fx, 1);
	for (int i = 1; i <= JOINERS; i++)
		assert_int_equal(pthread_create(&threads[i], NULL, caller_main, &callers[i]), 0);
	wait_joined(fx, JOINERS);
	open_gate(fx);
	for (int i = 0; i <= JOINERS; i++)
		pthread_join(threads[i], NULL);
}

static void test_two_joiners_share_one_listing(void **state)
{
	struct fixture *fx = *state;
	struct caller callers[1 + JOINERS];
	bool listed = false;

	run_leader_and_joiners(fx, callers);
	for (int i = 0; i <= JOINERS; i++)
		assert_int_equal(callers[i].rc, 0);
	assert_int_equal(fx->calls, 1);
	assert_int_equal(listing_flights_joined(fx->lf), JOINERS);
	assert_int_equal(index_dir_listed(fx->idx, fx->dir_a, &listed), 0);
	assert_true(listed);
	/* Listed now: the next caller does not list again. */
	assert_int_equal(listing_flight_ensure(fx->lf, fx->idx, fx->dir_a, list_fn, fx), 0);
	assert_int_equal(fx->calls, 1);
}

/* A failed listing leaves the directory unlisted: its leader gets the error, and a joiner
 * lists it again itself (the other joiner then waits for that one). */
static void test_a_failed_listing_is_tried_again_by_a_joiner(void **state)
{
	struct fixture *fx = *state;
	struct caller callers[1 + JOINERS];
	bool listed = false;

	fx->fail = 1;
	run_leader_and_joiners(fx, callers);
	assert_int_equal(callers[0].rc, -EIO);
	for (int i = 1; i <= JOINERS; i++)
		assert_int_equal(callers[i].rc, 0);
	assert_int_equal(fx->calls, 2);
	assert_int_equal(index_dir_listed(fx->idx, fx->dir_a, &listed), 0);
	assert_true(listed);
}

/* One directory's listing does not hold up another's. */
static void test_other_directories_do_not_wait(void **state)
{
	struct fixture *fx = *state;
	struct caller leader;
	pthread_t thread;

	fx->hold = true;
	leader = (struct caller){.fx = fx, .dir = fx->dir_a, .rc = 1};
	assert_int_equal(pthread_create(&thread, NULL, caller_main, &leader), 0);
	wait_started(fx, 1);
	assert_int_equal(listing_flight_ensure(fx->lf, fx->idx, fx->dir_b, list_fn, fx), 0);
	assert_int_equal(listing_flights_joined(fx->lf), 0);
	open_gate(fx);
	pthread_join(thread, NULL);
	assert_int_equal(leader.rc, 0);
	assert_int_equal(fx->calls, 2);
}

static void test_an_unknown_directory_is_not_listed(void **state)
{
	struct fixture *fx = *state;

	assert_int_equal(listing_flight_ensure(fx->lf, fx->idx, 987654, list_fn, fx), -ENOENT);
	assert_int_equal(fx->calls, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_two_joiners_share_one_listing, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_a_failed_listing_is_tried_again_by_a_joiner, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_other_directories_do_not_wait, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_an_unknown_directory_is_not_listed, setup,
	                                    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * Leases between mounts (fetch/cache/lease.c): two open file descriptions of one lease file stand
 * for two mounts, since OFD locks conflict between open files, not processes.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <unistd.h>

#include <cmocka.h>

#include "fetch/cache/lease.h"

struct fixture {
	char dir[64];
	int dirfd;
	char lease_path[96];
	char spool_path[96];
};

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));

	snprintf(fx->dir, sizeof(fx->dir), "/tmp/spoolfs-lease-XXXXXX");
	if (!mkdtemp(fx->dir) || (fx->dirfd = open(fx->dir, O_RDONLY | O_DIRECTORY)) < 0)
		return -1;
	snprintf(fx->lease_path, sizeof(fx->lease_path), "%s/leases", fx->dir);
	snprintf(fx->spool_path, sizeof(fx->spool_path), "%s/x.spool", fx->dir);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;

	close(fx->dirfd);
	unlink(fx->lease_path);
	unlink(fx->spool_path);
	rmdir(fx->dir);
	free(fx);
	return 0;
}

static void test_one_holder_per_key(void **state)
{
	struct fixture *fx = *state;
	int a = lease_open(fx->dirfd), b = lease_open(fx->dirfd);

	assert_true(a >= 0 && b >= 0);
	assert_int_equal(lease_try(a, "sha256:one"), 1);
	assert_int_equal(lease_try(a, "sha256:one"), 1); /* holding it again is fine */
	assert_int_equal(lease_try(b, "sha256:one"), 0);
	/* Another key is another lease. */
	assert_int_equal(lease_try(b, "sha256:two"), 1);
	/* The holder goes (closes, or dies): the other takes over. */
	close(a);
	assert_int_equal(lease_try(b, "sha256:one"), 1);
	close(b);
}

static void test_watchers_are_seen_by_the_holder(void **state)
{
	struct fixture *fx = *state;
	int holder = lease_open(fx->dirfd), watcher = lease_open(fx->dirfd);

	assert_int_equal(lease_try(holder, "url:x#1"), 1);
	assert_false(lease_watched(holder, "url:x#1"));
	assert_int_equal(lease_try(watcher, "url:x#1"), 0);
	assert_int_equal(lease_watch(watcher, "url:x#1"), 0);
	assert_true(lease_watched(holder, "url:x#1"));
	assert_false(lease_watched(holder, "url:y#1"));
	/* A watcher that takes over does not count itself. */
	close(holder);
	assert_int_equal(lease_try(watcher, "url:x#1"), 1);
	assert_false(lease_watched(watcher, "url:x#1"));
	close(watcher);
}

/* Two lease sets stand for two mounts; flights of one mount share its set's one fd. */
static void test_a_set_shares_one_fd_and_still_excludes(void **state)
{
	struct fixture *fx = *state;
	struct lease_set *mine = NULL, *other = NULL;

	assert_int_equal(lease_set_create(fx->dirfd, &mine), 0);
	assert_int_equal(lease_set_create(fx->dirfd, &other), 0);
	assert_int_equal(lease_set_try(mine, "sha256:one"), 1);
	/* A second flight of this mount waits as a second mount would. */
	assert_int_equal(lease_set_try(mine, "sha256:one"), 0);
	assert_int_equal(lease_set_try(other, "sha256:one"), 0);
	assert_int_equal(lease_set_try(mine, "sha256:two"), 1);
	/* Another mount's watch is seen; this mount's own (on the same fd) is not. */
	assert_int_equal(lease_set_watch(other, "sha256:one"), 0);
	assert_int_equal(lease_set_watch(other, "sha256:one"), 0); /* a second flight */
	assert_true(lease_set_watched(mine, "sha256:one"));
	lease_set_unwatch(other, "sha256:one");
	assert_true(lease_set_watched(mine, "sha256:one")); /* one watcher left */
	lease_set_unwatch(other, "sha256:one");
	assert_false(lease_set_watched(mine, "sha256:one"));
	/* Letting one key go keeps the other held. */
	lease_set_release(mine, "sha256:one");
	assert_int_equal(lease_set_try(other, "sha256:one"), 1);
	assert_int_equal(lease_set_try(other, "sha256:two"), 0);
	/* A set destroyed (a mount gone) lets all it held go. */
	lease_set_destroy(mine);
	assert_int_equal(lease_set_try(other, "sha256:two"), 1);
	lease_set_destroy(other);
}

static void test_in_use_marks(void **state)
{
	struct fixture *fx = *state;
	FILE *f = fopen(fx->spool_path, "w");
	int reader;

	assert_non_null(f);
	fclose(f);
	assert_false(lease_in_use_elsewhere(fx->dirfd, "x.spool"));
	reader = open(fx->spool_path, O_RDWR);
	assert_true(reader >= 0);
	assert_int_equal(lease_mark_in_use(reader), 0);
	assert_true(lease_in_use_elsewhere(fx->dirfd, "x.spool"));
	close(reader);
	assert_false(lease_in_use_elsewhere(fx->dirfd, "x.spool"));
	assert_false(lease_in_use_elsewhere(fx->dirfd, "nonexistent.spool"));
}

/* A lease file planted as a symbolic link is refused, and what it names is not created. */
static void test_a_linked_lease_file_is_refused(void **state)
{
	struct fixture *fx = *state;
	char victim[96];

	snprintf(victim, sizeof(victim), "%s/victim", fx->dir);
	assert_int_equal(symlink(victim, fx->lease_path), 0);
	assert_int_equal(lease_open(fx->dirfd), -ELOOP);
	assert_int_equal(access(victim, F_OK), -1);
	/* Nor is a spool linked elsewhere taken as in use through its target. */
	assert_int_equal(symlink(fx->lease_path, fx->spool_path), 0);
	assert_false(lease_in_use_elsewhere(fx->dirfd, "x.spool"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_one_holder_per_key, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_watchers_are_seen_by_the_holder, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_a_set_shares_one_fd_and_still_excludes, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_in_use_marks, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_a_linked_lease_file_is_refused, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * The cache directory's life cycle (fetch/cache/cache_dir.c): what it creates, what it refuses,
 * and what its clean-up deletes. We run as root, so another user's directory is one
 * chowned to nobody (65534). Two opens of one directory stand for two mounts: flock
 * conflicts between open files, not processes.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "fetch/cache/cache_dir.h"

#define NOBODY 65534

struct fixture {
	char top[64];      /* a private directory for each test */
	char cache[128];   /* top/cache: the directory under test */
	char outside[128]; /* top/outside: what no clean-up may touch */
	char err[4200];
};

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));

	if (!fx)
		return -1;
	snprintf(fx->top, sizeof(fx->top), "/tmp/spoolfs-cachedir-XXXXXX");
	if (!mkdtemp(fx->top))
		return -1;
	snprintf(fx->cache, sizeof(fx->cache), "%s/cache", fx->top);
	snprintf(fx->outside, sizeof(fx->outside), "%s/outside", fx->top);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fx->top);
	if (system(cmd) != 0)
		return -1;
	free(fx);
	return 0;
}

static char *at(const char *dir, const char *name)
{
	static char buf[4][256];
	static int next;
	char *p = buf[next++ % 4];

	if (snprintf(p, sizeof(buf[0]), "%s/%s", dir, name) >= (int)sizeof(buf[0]))
		fail_msg("path too long: %s/%s", dir, name);
	return p;
}

static void write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

static void assert_file_holds(const char *path, const char *text)
{
	char buf[64] = "";
	int fd = open(path, O_RDONLY);

	assert_true(fd >= 0);
	assert_int_equal(read(fd, buf, sizeof(buf) - 1), (ssize_t)strlen(text));
	close(fd);
	assert_string_equal(buf, text);
}

static bool exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

static void test_a_missing_directory_is_made_private(void **state)
{
	struct fixture *fx = *state;
	struct cache_dir *cd = NULL;
	struct stat st;

	assert_int_equal(cache_dir_open(fx->cache, true, &cd, fx->err, sizeof(fx->err)), 0);
	assert_true(cache_dir_made(cd));
	assert_true(cache_dir_alone(cd));
	assert_int_equal(lstat(fx->cache, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0700);
	assert_int_equal(st.st_uid, geteuid());
	assert_int_equal(lstat(at(fx->cache, "spool"), &st), 0);
	assert_int_equal(st.st_mode & 07777, 0700);
	assert_true(exists(at(fx->cache, "lock")));
	assert_string_equal(cache_dir_path(cd), fx->cache);
	assert_int_equal(fstatat(cache_dir_fd(cd), "spool", &st, 0), 0);
	assert_int_equal(cache_dir_share(cd, fx->err, sizeof(fx->err)), 0);
	assert_false(cache_dir_alone(cd));
	cache_dir_close(cd, false);
	assert_false(exists(fx->cache));
}

static void test_a_trailing_slash_is_the_same_directory(void **state)
{
	struct fixture *fx = *state;
	struct cache_dir *cd = NULL;
	char given[160];

	snprintf(given, sizeof(given), "%s//", fx->cache);
	assert_int_equal(cache_dir_open(given, true, &cd, fx->err, sizeof(fx->err)), 0);
	assert_string_equal(cache_dir_path(cd), fx->cache);
	cache_dir_close(cd, false);
	assert_false(exists(fx->cache));
}

static void test_others_may_not_write_in_it(void **state)
{
	static const mode_t modes[] = {0777, 0770, 01777, 0720};
	struct fixture *fx = *state;
	struct cache_dir *cd = NULL;

	assert_int_equal(mkdir(fx->cache, 0700), 0);
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		assert_int_equal(chmod(fx->cache, modes[i]), 0);
		assert_int_equal(cache_dir_open(fx->cache, true, &cd, fx->err, sizeof(fx->err)),
		                 -EPERM);
		assert_null(cd);
		assert_non_null(strstr(fx->err, fx->cache));
		assert_non_null(strstr(fx->err, "writable by group or others"));
		/* Nothing was made in it. */
		assert_false(exists(at(fx->cache, "lock")));
		assert_false(exists(at(fx->cache, "spool")));
	}
	assert_true(exists(fx->cache));
}

static void test_another_users_directory_is_refused(void **state)
{
	struct fixture *fx = *state;
	struct cache_dir *cd = NULL;

	assert_int_equal(mkdir(fx->cache, 0700), 0);
	assert_int_equal(chown(fx->cache, NOBODY, NOBODY), 0);
	assert_int_equal(cache_dir_open(fx->cache, true, &cd, fx->err, sizeof(fx->err)), -EPERM);
	assert_null(cd);
	assert_non_null(strstr(fx->err, "owned by another user"));
	assert_false(exists(at(fx->cache, "lock")));
	assert_true(exists(fx->cache));
}

static void test_a_symbolic_link_as_the_directory_is_refused(void **state)
{
	struct fixture *fx = *state;
	struct cache_dir *cd = NULL;
	char given[160];

	assert_int_equal(mkdir(fx->outside, 0700), 0);
	assert_int_equal(symlink(fx->outside, fx->cache), 0);
	for (int slash = 0; slash < 2; slash++) {
		snprintf(given, sizeof(given), "%s%s", fx->cache, slash ? "/" : "");
		/* O_DIRECTORY with O_NOFOLLOW fails a link with ENOTDIR, without: ELOOP. */
		int rc = cache_dir_open(given, true, &cd, fx->err, sizeof(fx->err));
		assert_true(rc == -ENOTDIR || rc == -ELOOP);
		assert_null(cd);
		assert_non_null(strstr(fx->err, "is a symbolic link"));
		assert_false(exists(at(fx->outside, "lock")));
	}
	assert_true(exists(fx->cache));
}

/* A link planted as each name the directory holds for us: refused, naming it, never
 * followed (its target is neither written nor created), and left for the operator. */
static void test_a_planted_symbolic_link_is_refused(void **state)
{
	static const char *const names[] = {"lock",         "index.db",         "index.db-wal",
	                                    "index.db-shm", "index.db-journal", "leases",
	                                    "spool"};
	struct fixture *fx = *state;
	struct cache_dir *cd = NULL;
	char named[160];

	assert_int_equal(mkdir(fx->outside, 0700), 0);
	write_file(at(fx->outside, "victim"), "theirs");
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		assert_int_equal(mkdir(fx->cache, 0700), 0);
		assert_int_equal(symlink(strcmp(names[i], "spool") == 0 ? fx->outside
		                                                        : at(fx->outside, "victim"),
		                         at(fx->cache, names[i])),
		                 0);
		int rc = cache_dir_open(fx->cache, true, &cd, fx->err, sizeof(fx->err));
		assert_true(rc == -EPERM || rc == -ELOOP || rc == -ENOTDIR);
		assert_null(cd);
		snprintf(named, sizeof(named), "%s/%s ", fx->cache, names[i]);
		assert_non_null(strstr(fx->err, named));
		assert_non_null(strstr(fx->err, "symbolic link"));
		assert_file_holds(at(fx->outside, "victim"), "theirs");
		assert_false(exists(at(fx->outside, "lock")));
		assert_true(exists(at(fx->cache, names[i])));
		/* A refused directory that was there loses nothing (a test's next round). */
		char cmd[200];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fx->cache);
		assert_int_equal(system(cmd), 0);
	}
}

static void test_another_users_file_is_refused(void **state)
{
	struct fixture *fx = *state;
	struct cache_dir *cd = NULL;

	assert_int_equal(mkdir(fx->cache, 0700), 0);
	write_file(at(fx->cache, "index.db"), "");
	assert_int_equal(chown(at(fx->cache, "index.db"), NOBODY, NOBODY), 0);
	assert_int_equal(cache_dir_open(fx->cache, true, &cd, fx->err, sizeof(fx->err)), -EPERM);
	assert_non_null(strstr(fx->err, "index.db is owned by another user: refused"));
	assert_true(exists(at(fx->cache, "index.db")));
}

/*
 * The clean-up deletes what is ours by name through the directory's fd: a link found in the
 * spool directory goes itself, a directory there (never ours) stays, a file we do not know
 * stays, and a directory moved away and replaced by a link leads it nowhere.
 */
static void test_cleanup_deletes_only_ours_and_follows_no_link(void **state)
{
	struct fixture *fx = *state;
	struct cache_dir *cd = NULL;
	char moved[160];

	assert_int_equal(mkdir(fx->outside, 0700), 0);
	write_file(at(fx->outside, "precious"), "keep me");
	write_file(at(fx->outside, "index.db"), "keep me");
	assert_int_equal(mkdir(fx->cache, 0700), 0); /* there before: it stays */
	assert_int_equal(cache_dir_open(fx->cache, true, &cd, fx->err, sizeof(fx->err)), 0);
	assert_false(cache_dir_made(cd));
	write_file(at(fx->cache, "index.db"), "ours");
	write_file(at(fx->cache, "leases"), "");
	write_file(at(fx->cache, "unknown"), "not ours");
	write_file(at(fx->cache, "spool/a.spool"), "ours");
	assert_int_equal(mkdir(at(fx->cache, "spool/subdir"), 0700), 0);
	assert_int_equal(symlink(fx->outside, at(fx->cache, "spool/evil")), 0);
	assert_int_equal(symlink(at(fx->outside, "precious"), at(fx->cache, "spool/evil-file")), 0);
	/* After the open, as a race would: sqlite's sidecar as a link. */
	assert_int_equal(symlink(at(fx->outside, "precious"), at(fx->cache, "index.db-wal")), 0);
	snprintf(moved, sizeof(moved), "%s/moved", fx->top);
	assert_int_equal(rename(fx->cache, moved), 0);
	assert_int_equal(symlink(fx->outside, fx->cache), 0);

	cache_dir_close(cd, false);
	assert_file_holds(at(fx->outside, "precious"), "keep me");
	assert_file_holds(at(fx->outside, "index.db"), "keep me");
	assert_true(exists(at(moved, "unknown")));
	assert_true(exists(at(moved, "spool/subdir")));
	assert_false(exists(at(moved, "index.db")));
	assert_false(exists(at(moved, "index.db-wal")));
	assert_false(exists(at(moved, "leases")));
	assert_false(exists(at(moved, "lock")));
	assert_false(exists(at(moved, "spool/a.spool")));
	assert_false(exists(at(moved, "spool/evil")));
	assert_false(exists(at(moved, "spool/evil-file")));
}

static void test_keep_leaves_a_named_directory_whole(void **state)
{
	struct fixture *fx = *state;
	struct cache_dir *cd = NULL;

	assert_int_equal(cache_dir_open(fx->cache, true, &cd, fx->err, sizeof(fx->err)), 0);
	write_file(at(fx->cache, "index.db"), "kept");
	cache_dir_close(cd, true);
	assert_file_holds(at(fx->cache, "index.db"), "kept");
	assert_true(exists(at(fx->cache, "lock")));
	/* A later session finds it, not made by it, and may remove its files. */
	assert_int_equal(cache_dir_open(fx->cache, true, &cd, fx->err, sizeof(fx->err)), 0);
	assert_false(cache_dir_made(cd));
	cache_dir_close(cd, false);
	assert_false(exists(at(fx->cache, "index.db")));
	assert_true(exists(fx->cache));
}

/* Two opens of one directory share it: the first out leaves everything to the last, which
 * deletes the files, and the directory goes with the open that made it. */
static void test_two_opens_share_and_the_last_cleans_up(void **state)
{
	struct fixture *fx = *state;
	struct cache_dir *first = NULL, *second = NULL;

	assert_int_equal(cache_dir_open(fx->cache, true, &first, fx->err, sizeof(fx->err)), 0);
	assert_true(cache_dir_made(first));
	assert_true(cache_dir_alone(first));
	assert_int_equal(cache_dir_share(first, fx->err, sizeof(fx->err)), 0);
	assert_int_equal(cache_dir_open(fx->cache, true, &second, fx->err, sizeof(fx->err)), 0);
	assert_false(cache_dir_made(second));
	assert_false(cache_dir_alone(second));
	write_file(at(fx->cache, "index.db"), "shared");

	cache_dir_close(second, false);
	assert_file_holds(at(fx->cache, "index.db"), "shared");
	assert_true(exists(at(fx->cache, "lock")));
	cache_dir_close(first, false);
	assert_false(exists(fx->cache));
}

static void test_the_last_one_out_keeps_a_directory_it_did_not_make(void **state)
{
	struct fixture *fx = *state;
	struct cache_dir *first = NULL, *second = NULL;

	assert_int_equal(cache_dir_open(fx->cache, true, &first, fx->err, sizeof(fx->err)), 0);
	assert_int_equal(cache_dir_share(first, fx->err, sizeof(fx->err)), 0);
	assert_int_equal(cache_dir_open(fx->cache, true, &second, fx->err, sizeof(fx->err)), 0);
	cache_dir_close(first, false);
	assert_true(exists(at(fx->cache, "lock")));
	cache_dir_close(second, false);
	assert_true(exists(fx->cache));
	assert_false(exists(at(fx->cache, "lock")));
	assert_false(exists(at(fx->cache, "spool")));
}

/* Without a name: a fresh private directory in the one given, removed whole at close. */
static void test_a_session_directory_goes_whole(void **state)
{
	struct fixture *fx = *state;
	struct cache_dir *cd = NULL;
	char path[256];
	struct stat st;

	assert_int_equal(cache_dir_open(fx->top, false, &cd, fx->err, sizeof(fx->err)), 0);
	snprintf(path, sizeof(path), "%s", cache_dir_path(cd));
	assert_int_equal(strncmp(path, at(fx->top, "spoolfs-"), strlen(fx->top) + 9), 0);
	assert_int_equal(lstat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0700);
	assert_false(cache_dir_made(cd));
	write_file(at(path, "index.db"), "");
	/* keep is for named directories: the session's own has no later session. */
	cache_dir_close(cd, true);
	assert_false(exists(path));
}

#define GIB ((uint64_t)1 << 30)

/* Without --cache-max-size a cache leaves a tenth of its filesystem free, at least 1 GiB,
 * and what it holds already counts as room it may keep. */
static void test_the_default_bound_leaves_a_share_of_the_disk_free(void **state)
{
	(void)state;
	/* 100 GiB disk, 50 free, cache holds 5: may grow to 55 - 10 = 45 GiB. */
	assert_int_equal(cache_dir_default_bound(100 * GIB, 50 * GIB, 5 * GIB), 45 * GIB);
	/* A small disk: the reserve is 1 GiB, not a tenth. */
	assert_int_equal(cache_dir_default_bound(4 * GIB, 3 * GIB, 0), 2 * GIB);
	/* A full disk: a small cache that evicts, not none and not a wrapped-around huge one. */
	assert_int_equal(cache_dir_default_bound(100 * GIB, GIB, 0), CACHE_DIR_BOUND_MIN);
	assert_int_equal(cache_dir_default_bound(100 * GIB, 10 * GIB + GIB / 8, 0),
	                 CACHE_DIR_BOUND_MIN);
	/* A tiny filesystem: half of it, never more than there is. */
	assert_int_equal(cache_dir_default_bound(32 << 20, 30 << 20, 0), 15 << 20);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_a_missing_directory_is_made_private, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_a_trailing_slash_is_the_same_directory, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_others_may_not_write_in_it, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_another_users_directory_is_refused, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_a_symbolic_link_as_the_directory_is_refused, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_a_planted_symbolic_link_is_refused, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_another_users_file_is_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cleanup_deletes_only_ours_and_follows_no_link,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_keep_leaves_a_named_directory_whole, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_two_opens_share_and_the_last_cleans_up, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_the_last_one_out_keeps_a_directory_it_did_not_make,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_a_session_directory_goes_whole, setup, teardown),
	    cmocka_unit_test(test_the_default_bound_leaves_a_share_of_the_disk_free),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

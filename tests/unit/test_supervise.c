/*
 * util/supervise.c: the restart bound (a crash loop, too many restarts in a window), how a
 * child's end is described, strings through a descriptor, placing descriptors, removing a
 * tree; and index_open_file, which lets the next serving process reopen the namespace.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "index/index.h"
#include "util/ledger.h"
#include "util/supervise.h"

#define SEC 1000000000ULL

static void test_crash_loop_ends(void **state)
{
	struct util_restarts r;
	char why[128];

	(void)state;
	util_restarts_init(&r, 3, 10, 60);
	assert_int_equal(util_restarts_note(&r, 1 * SEC, false, why, sizeof(why)), 0);
	assert_int_equal(util_restarts_note(&r, 2 * SEC, false, why, sizeof(why)), 0);
	assert_int_equal(util_restarts_note(&r, 3 * SEC, false, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "3 serving processes in a row"));
	assert_int_equal(r.total, 2);
}

static void test_ready_child_resets_the_row(void **state)
{
	struct util_restarts r;
	char why[128];

	(void)state;
	util_restarts_init(&r, 2, 10, 60);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(
		    util_restarts_note(&r, (uint64_t)(10 * i) * SEC, false, why, sizeof(why)), 0);
		assert_int_equal(
		    util_restarts_note(&r, (uint64_t)(10 * i + 1) * SEC, true, why, sizeof(why)),
		    0);
	}
}

static void test_window_bound(void **state)
{
	struct util_restarts r;
	char why[128];

	(void)state;
	util_restarts_init(&r, 3, 4, 60);
	for (int i = 0; i < 4; i++)
		assert_int_equal(
		    util_restarts_note(&r, (uint64_t)(i + 1) * SEC, true, why, sizeof(why)), 0);
	assert_int_equal(util_restarts_note(&r, 5 * SEC, true, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "within 60 s"));
	/* A minute later the old ones are out of the window. */
	assert_int_equal(util_restarts_note(&r, 100 * SEC, true, why, sizeof(why)), 0);
}

static void test_describe_exit(void **state)
{
	char buf[128];
	int status;
	pid_t pid;

	(void)state;
	pid = fork();
	if (pid == 0)
		_exit(3);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	util_describe_exit(status, buf, sizeof(buf));
	assert_string_equal(buf, "exited with status 3");
	pid = fork();
	if (pid == 0) {
		pause();
		_exit(0);
	}
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	util_describe_exit(status, buf, sizeof(buf));
	assert_non_null(strstr(buf, "killed by signal 9"));
}

static void test_strings_round_trip(void **state)
{
	const char *in[] = {"/run/x", "", "s3://b/p?X-Amz-Signature=secret", "--cache-dir=/c"};
	char **out = NULL;
	size_t n = 0;
	int fd = memfd_create("t", MFD_CLOEXEC);

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(util_strings_write(fd, in, 4), 0);
	assert_int_equal(util_strings_read(fd, &out, &n), 0);
	assert_int_equal(n, 4);
	for (size_t i = 0; i < n; i++)
		assert_string_equal(out[i], in[i]);
	assert_null(out[4]);
	util_strings_free(out, n);
	/* Written again shorter: nothing of the longer list is left. */
	assert_int_equal(util_strings_write(fd, in, 1), 0);
	assert_int_equal(util_strings_read(fd, &out, &n), 0);
	assert_int_equal(n, 1);
	util_strings_free(out, n);
	/* Not a list: a last string without its NUL. */
	assert_int_equal(pwrite(fd, "abc", 3, 0), 3);
	assert_int_equal(ftruncate(fd, 3), 0);
	assert_int_equal(util_strings_read(fd, &out, &n), -EINVAL);
	close(fd);
}

static void test_fds_place(void **state)
{
	int p[2], q[2];

	(void)state;
	assert_int_equal(pipe(p), 0);
	assert_int_equal(pipe(q), 0);
	/* Sources that are the targets of each other, swapped. */
	int fds[2] = {q[1], p[0]};
	assert_int_equal(util_fds_place(fds, 2, 50), 0);
	assert_int_equal(write(50, "x", 1), 1); /* 50 is q[1] */
	assert_int_equal(fcntl(50, F_GETFD) & FD_CLOEXEC, 0);
	char c = 0;
	assert_int_equal(read(q[0], &c, 1), 1);
	assert_int_equal(c, 'x');
	assert_int_equal(write(p[1], "y", 1), 1);
	assert_int_equal(read(51, &c, 1), 1); /* 51 is p[0] */
	assert_int_equal(c, 'y');
	close(50);
	close(51);
	close(p[0]);
	close(p[1]);
	close(q[0]);
	close(q[1]);
}

static void test_remove_tree(void **state)
{
	char dir[] = "/tmp/spoolfs-test-XXXXXX", path[256], outside[] = "/tmp/spoolfs-out-XXXXXX";
	int fd;

	(void)state;
	assert_non_null(mkdtemp(dir));
	assert_non_null(mkdtemp(outside));
	snprintf(path, sizeof(path), "%s/a", dir);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/a/b", dir);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/a/b/f", dir);
	fd = open(path, O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	close(fd);
	/* A link out is removed itself, never what it names. */
	snprintf(path, sizeof(path), "%s/a/link", dir);
	assert_int_equal(symlink(outside, path), 0);
	snprintf(path, sizeof(path), "%s/keep", outside);
	fd = open(path, O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(util_remove_tree(AT_FDCWD, dir), 0);
	assert_int_equal(access(dir, F_OK), -1);
	assert_int_equal(access(path, F_OK), 0);
	assert_int_equal(util_remove_tree(AT_FDCWD, outside), 0);
	assert_int_equal(util_remove_tree(AT_FDCWD, dir), 0); /* gone already: fine */
}

/* The next serving process reopens the namespace exactly as the first one left it. */
static void test_index_file_reopens(void **state)
{
	char dir[] = "/tmp/spoolfs-test-XXXXXX", path[256];
	struct index *idx = NULL;
	struct index_builder *b = NULL;
	struct index_node n;
	char why[128], *value = NULL;
	struct stat st;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/namespace.db", dir);
	assert_int_equal(index_open_file(path, true, &idx), 0);
	assert_int_equal(index_set_default_mtime(idx, 1234567), 0);
	assert_int_equal(index_build_begin(idx, &b), 0);
	struct index_build_entry e = {.path = "d/f.bin",
	                              .path_len = 7,
	                              .kind = INDEX_KIND_FILE,
	                              .size = 42,
	                              .url = "https://example.invalid/f.bin"};
	assert_int_equal(index_build_add(b, &e, why, sizeof(why)), 0);
	assert_int_equal(index_build_commit(b), 0);
	assert_int_equal(index_meta_put(idx, "manifest_url", "https://example.invalid/m.json"), 0);
	assert_int_equal(index_lookup(idx, INDEX_ROOT_INO, "d", &n), 0);
	uint64_t dir_ino = n.ino;
	assert_int_equal(index_lookup(idx, dir_ino, "f.bin", &n), 0);
	uint64_t file_ino = n.ino;
	index_close(idx);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);

	assert_int_equal(index_open_file(path, false, &idx), 0);
	assert_int_equal(index_lookup(idx, INDEX_ROOT_INO, "d", &n), 0);
	assert_int_equal(n.ino, dir_ino);
	assert_int_equal(index_lookup(idx, dir_ino, "f.bin", &n), 0);
	assert_int_equal(n.ino, file_ino);
	assert_int_equal(n.size, 42);
	assert_int_equal(n.mtime, 1234567); /* the kept default, not the reopen's time */
	assert_int_equal(index_meta_get(idx, "manifest_url", &value), 0);
	assert_string_equal(value, "https://example.invalid/m.json");
	free(value);
	assert_int_equal(index_meta_get(idx, "nothing", &value), -ENOENT);
	index_close(idx);

	/* Fresh: what was there goes. */
	assert_int_equal(index_open_file(path, true, &idx), 0);
	assert_int_equal(index_lookup(idx, INDEX_ROOT_INO, "d", &n), -ENOENT);
	index_close(idx);
	assert_int_equal(util_remove_tree(AT_FDCWD, dir), 0);
}

/* Counted entries shared with a child process, as a serving process and its successor. */
static void test_ledger_is_shared_and_counted(void **state)
{
	struct util_ledger *l = NULL, *again = NULL;
	int64_t value = 0;
	uint64_t owner = 0;
	bool last = false;
	int fd = -1, status;
	pid_t pid;

	(void)state;
	assert_int_equal(util_ledger_create(&fd, &l), 0);
	assert_int_equal(util_ledger_open(l, 1, 42, 7, 1), 7);
	assert_int_equal(util_ledger_open(l, 2, 42, 9, 1), 7); /* the entry keeps its value */
	assert_int_equal(util_ledger_open(l, 2, 42, 9, 1), 7); /* the same open: counted once */
	assert_int_equal(util_ledger_open(l, 3, 43, 7, 1), 7); /* another key, the same value */
	assert_int_equal(util_ledger_open(l, 4, 0, 1, 1), -EINVAL);
	assert_int_equal(util_ledger_open(l, 0, 44, 1, 1), -EINVAL);
	pid = fork();
	if (pid == 0) {
		struct util_ledger *child = NULL;
		/* A later process joins 42 (another owner's), not its own 44. */
		int ok = util_ledger_map(fd, &child) == 0 &&
		         util_ledger_open(child, 10, 44, 5, 2) == 5 &&
		         util_ledger_join(child, 11, 42, 2) == 7 &&
		         util_ledger_join(child, 11, 42, 2) == 7 &&
		         util_ledger_join(child, 12, 44, 2) == 0 &&
		         util_ledger_get(child, 42, &value, NULL) == 3 && value == 7;
		_exit(ok ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(util_ledger_map(fd, &again), 0);
	assert_int_equal(util_ledger_get(again, 44, &value, &owner), 1);
	assert_int_equal(value, 5);
	assert_int_equal(owner, 2);
	assert_int_equal(util_ledger_close(again, 11, &value, &last), 2);
	assert_int_equal(util_ledger_close(again, 11, &value, &last), -ENOENT); /* resent */
	assert_int_equal(util_ledger_close(again, 1, &value, &last), 1);
	assert_false(last);
	assert_int_equal(util_ledger_close(again, 2, &value, &last), 0);
	assert_int_equal(value, 7);
	assert_false(last); /* 43 still names 7 */
	assert_int_equal(util_ledger_get(l, 42, &value, NULL), 0);
	assert_int_equal(util_ledger_close(l, 3, &value, &last), 0);
	assert_true(last);
	assert_int_equal(util_ledger_close(l, 3, &value, &last), -ENOENT);
	/* Page-cache opens (value 0) are counted like any other. */
	assert_int_equal(util_ledger_open(l, 20, 50, 0, 1), 0);
	assert_int_equal(util_ledger_get(l, 50, &value, NULL), 1);
	assert_int_equal(util_ledger_join(l, 21, 50, 2), 0); /* nothing to join */
	assert_int_equal(util_ledger_get(l, 50, &value, NULL), 1);
	/* Past freed slots (tombstones), a key is still found and added. */
	for (uint64_t k = 1000; k < 1100; k++)
		assert_int_equal(util_ledger_open(l, k + 5000, k, (int64_t)k, 1), (int64_t)k);
	for (uint64_t k = 1000; k < 1100; k += 2)
		assert_int_equal(util_ledger_close(l, k + 5000, &value, NULL), 0);
	for (uint64_t k = 1001; k < 1100; k += 2)
		assert_int_equal(util_ledger_get(l, k, &value, NULL), 1);
	assert_false(util_ledger_overflowed(l));
	util_ledger_unmap(again);
	util_ledger_unmap(l);
	close(fd);
}

/* Opens and closes by the thousand (a restarted process's many opens) leave the tables as
 * they were: no slot stays taken by a freed entry's tombstone for good. */
static void test_ledger_reuses_its_slots(void **state)
{
	struct util_ledger *l = NULL;
	int64_t value;
	int fd = -1;

	(void)state;
	assert_int_equal(util_ledger_create(&fd, &l), 0);
	for (uint64_t round = 0; round < 8; round++) {
		for (uint64_t k = 1; k <= UTIL_LEDGER_SLOTS; k++)
			assert_int_equal(util_ledger_open(l, round * 100000 + k, k, 0, 1), 0);
		for (uint64_t k = 1; k <= UTIL_LEDGER_SLOTS; k++)
			assert_int_equal(util_ledger_close(l, round * 100000 + k, &value, NULL), 0);
	}
	assert_false(util_ledger_overflowed(l));
	util_ledger_unmap(l);
	close(fd);
}

/* A ledger laid out by another build (another size, or no magic at its start: the running
 * supervisor's, met by a reload's new binary) is refused, never read at wrong offsets. */
static void test_ledger_of_another_build_is_refused(void **state)
{
	struct util_ledger *l = NULL, *other = NULL;
	const uint64_t garbage = 0;
	int fd = -1, old_fd;

	(void)state;
	old_fd = memfd_create("old-ledger", MFD_CLOEXEC);
	assert_true(old_fd >= 0);
	assert_int_equal(ftruncate(old_fd, 196648), 0); /* the first format's size */
	assert_int_equal(util_ledger_map(old_fd, &other), -EPROTO);
	assert_null(other);
	close(old_fd);
	assert_int_equal(util_ledger_create(&fd, &l), 0);
	assert_int_equal(pwrite(fd, &garbage, sizeof(garbage), 0), (ssize_t)sizeof(garbage));
	assert_int_equal(util_ledger_map(fd, &other), -EPROTO);
	assert_null(other);
	util_ledger_unmap(l);
	close(fd);
}

/* With the opens table full, a later process's open of an inode the kernel holds on a
 * backing id still gets that id (a new one would fail in the kernel), and the ledger says
 * it is overflowed. */
static void test_ledger_join_with_no_room_still_names_the_backing_id(void **state)
{
	struct util_ledger *l = NULL;
	int fd = -1;

	(void)state;
	assert_int_equal(util_ledger_create(&fd, &l), 0);
	assert_int_equal(util_ledger_open(l, 1, 42, 7, 1), 7);
	for (uint64_t k = 2; k <= UTIL_LEDGER_OPENS; k++)
		assert_int_equal(util_ledger_open(l, k, 43, 0, 1), 0);
	assert_false(util_ledger_overflowed(l));
	assert_int_equal(util_ledger_join(l, UTIL_LEDGER_OPENS + 1, 42, 2), 7);
	assert_true(util_ledger_overflowed(l));
	util_ledger_unmap(l);
	close(fd);
}

static void test_ledger_full(void **state)
{
	struct util_ledger *l = NULL;
	int fd = -1;

	(void)state;
	assert_int_equal(util_ledger_create(&fd, &l), 0);
	for (uint64_t k = 1; k <= UTIL_LEDGER_SLOTS; k++)
		assert_int_equal(util_ledger_open(l, k, k, 1, 1), 1);
	assert_false(util_ledger_overflowed(l));
	assert_int_equal(util_ledger_open(l, UTIL_LEDGER_SLOTS + 1, UTIL_LEDGER_SLOTS + 1, 1, 1),
	                 -ENOSPC);
	assert_true(util_ledger_overflowed(l));
	util_ledger_unmap(l);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_crash_loop_ends),
	    cmocka_unit_test(test_ready_child_resets_the_row),
	    cmocka_unit_test(test_window_bound),
	    cmocka_unit_test(test_describe_exit),
	    cmocka_unit_test(test_strings_round_trip),
	    cmocka_unit_test(test_fds_place),
	    cmocka_unit_test(test_remove_tree),
	    cmocka_unit_test(test_index_file_reopens),
	    cmocka_unit_test(test_ledger_is_shared_and_counted),
	    cmocka_unit_test(test_ledger_reuses_its_slots),
	    cmocka_unit_test(test_ledger_full),
	    cmocka_unit_test(test_ledger_of_another_build_is_refused),
	    cmocka_unit_test(test_ledger_join_with_no_room_still_names_the_backing_id),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

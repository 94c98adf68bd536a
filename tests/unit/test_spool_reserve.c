/*
 * Spool files made ahead (fetch/engine/spool_reserve.c) and the fds left under the limit
 * (util/fd_room.c): a taken file is a new, empty, named file open read-write, a taken name
 * is refused as O_EXCL would, the threads keep files ready, and they keep none when fds
 * are short. Directories are made under a fresh one in /tmp.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "helpers.h"
#include "fetch/engine/spool_reserve.h"
#include "util/fd_room.h"

static char dir[64];
static int dirfd_ = -1;

static int setup(void **state)
{
	(void)state;
	dirfd_ = test_dir_make("reserve", dir, sizeof(dir));
	return dirfd_ < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	(void)state;
	return test_dir_remove(dir, dirfd_);
}

/* Takes name until a file made ahead comes (the threads start with none), at most 10 s. */
static int take_made_ahead(struct spool_reserve *r, const char *name)
{
	for (int i = 0; i < 10000; i++) {
		int fd = spool_reserve_take(r, name);
		if (fd != -EAGAIN)
			return fd;
		nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
	}
	return -EAGAIN;
}

static void test_a_taken_file_is_new_empty_named_and_writable(void **state)
{
	struct spool_reserve *r = NULL;
	struct stat st, named;
	char buf[5] = "";
	int fd;

	(void)state;
	assert_int_equal(spool_reserve_take(NULL, "x"), -EAGAIN);
	assert_int_equal(spool_reserve_start(dirfd_, &r), 0);
	fd = take_made_ahead(r, "a.spool");
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(fstatat(dirfd_, "a.spool", &named, AT_SYMLINK_NOFOLLOW), 0);
	assert_true(st.st_ino == named.st_ino && st.st_dev == named.st_dev);
	assert_true(S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0600);
	assert_int_equal(st.st_size, 0);
	assert_int_equal(st.st_nlink, 1);
	assert_int_equal(pwrite(fd, "spool", 5, 0), 5);
	assert_int_equal(pread(fd, buf, 5, 0), 5);
	assert_memory_equal(buf, "spool", 5);
	close(fd);
	/* A name in use is not replaced, as O_CREAT | O_EXCL would not open it. */
	assert_int_equal(take_made_ahead(r, "a.spool"), -EEXIST);
	assert_int_equal(fstatat(dirfd_, "a.spool", &named, AT_SYMLINK_NOFOLLOW), 0);
	assert_int_equal(named.st_size, 5);
	spool_reserve_stop(r);
	spool_reserve_stop(NULL);
}

static void test_fd_room_counts_what_is_left_under_the_limit(void **state)
{
	struct rlimit old, low;
	int room, room2, fd;

	(void)state;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	low = old;
	low.rlim_cur = 200;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	room = util_fd_room();
	assert_true(room > 0 && room < 200);
	fd = dup(0);
	room2 = util_fd_room();
	close(fd);
	assert_int_equal(room2, room - 1);
	unsigned shorts = util_fd_shorts();
	util_fd_note_short(-ENOENT);
	assert_int_equal(util_fd_shorts(), shorts);
	util_fd_note_short(-EMFILE);
	util_fd_note_short(-ENFILE);
	assert_int_equal(util_fd_shorts(), shorts + 2);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
}

static void test_no_file_is_made_ahead_when_fds_are_short(void **state)
{
	struct spool_reserve *r = NULL;
	struct rlimit old, low;

	(void)state;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	low = old;
	low.rlim_cur = 200;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	/* Fewer than RESERVE_FD_ROOM (96) free: the threads make none. */
	low.rlim_cur = (rlim_t)(200 - util_fd_room()) + 60;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	assert_int_equal(spool_reserve_start(dirfd_, &r), 0);
	for (int i = 0; i < 50; i++) {
		assert_int_equal(spool_reserve_take(r, "b.spool"), -EAGAIN);
		nanosleep(&(struct timespec){.tv_nsec = 2000000}, NULL);
	}
	spool_reserve_stop(r);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_a_taken_file_is_new_empty_named_and_writable),
	    cmocka_unit_test(test_fd_room_counts_what_is_left_under_the_limit),
	    cmocka_unit_test(test_no_file_is_made_ahead_when_fds_are_short),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}

/*
 * Progress notes (fetch/engine/progress_note.c): what a note claims comes back for the
 * spool file it was written for, and nothing for a file made since under the same name,
 * an object of another size, or no note; a note that does not parse is refused whole.
 * Files are made under a fresh directory in /tmp.
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
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "helpers.h"
#include "fetch/engine/progress_note.h"

#define SPOOL "ab12.spool"
#define SIZE (64u << 20)

static char dir[64];
static int dirfd_ = -1;

static int setup(void **state)
{
	(void)state;
	dirfd_ = test_dir_make("note", dir, sizeof(dir));
	return dirfd_ < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	(void)state;
	return test_dir_remove(dir, dirfd_);
}

static int make_spool(void)
{
	int fd = openat(dirfd_, SPOOL, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	return fd;
}

/* Writes a note of [1 MiB, 5 MiB) and [8 MiB, 9 MiB) for fd; skips where the file system
 * shows no birth time (then no note is ever written). */
static void note_two_ranges(int fd)
{
	struct util_ranges w;
	int rc;

	util_ranges_init(&w);
	assert_int_equal(util_ranges_add(&w, 1 << 20, 5 << 20), 0);
	assert_int_equal(util_ranges_add(&w, 8 << 20, 9 << 20), 0);
	rc = progress_note_write(dirfd_, SPOOL, fd, SIZE, &w);
	util_ranges_free(&w);
	if (rc == -EOPNOTSUPP)
		skip();
	assert_int_equal(rc, 0);
}

static void test_a_note_gives_back_its_ranges_for_its_own_file(void **state)
{
	struct util_ranges got;
	int fd = make_spool();

	(void)state;
	note_two_ranges(fd);
	util_ranges_init(&got);
	assert_int_equal(util_ranges_add(&got, 4 << 20, 6 << 20), 0); /* the records' */
	assert_int_equal(progress_note_read(dirfd_, SPOOL, dirfd_, SIZE, &got), 1);
	assert_int_equal(got.n, 2);
	assert_int_equal(got.v[0].start, 1 << 20);
	assert_int_equal(got.v[0].end, 6 << 20);
	assert_int_equal(got.v[1].start, 8 << 20);
	assert_int_equal(got.v[1].end, 9 << 20);
	/* No temporary is left beside it. */
	assert_int_equal(faccessat(dirfd_, SPOOL ".note.new", F_OK, 0), -1);
	util_ranges_free(&got);
	close(fd);
	unlinkat(dirfd_, SPOOL, 0);
	progress_note_remove(dirfd_, SPOOL);
}

static void test_a_file_made_since_under_the_name_is_not_claimed(void **state)
{
	struct util_ranges got;
	int old = make_spool(), fd;

	(void)state;
	note_two_ranges(old);
	/* Replaced while the old one is still open: another inode, as a new download's is. */
	assert_int_equal(unlinkat(dirfd_, SPOOL, 0), 0);
	fd = make_spool();
	util_ranges_init(&got);
	assert_int_equal(progress_note_read(dirfd_, SPOOL, dirfd_, SIZE, &got), 0);
	assert_int_equal(got.total, 0);
	/* Nor is the old file's note any use for another object size. */
	close(fd);
	unlinkat(dirfd_, SPOOL, 0);
	fd = make_spool();
	note_two_ranges(fd);
	assert_int_equal(progress_note_read(dirfd_, SPOOL, dirfd_, SIZE + 1, &got), 0);
	assert_int_equal(got.total, 0);
	/* Removed: nothing to read. */
	progress_note_remove(dirfd_, SPOOL);
	assert_int_equal(progress_note_read(dirfd_, SPOOL, dirfd_, SIZE, &got), 0);
	util_ranges_free(&got);
	close(fd);
	close(old);
	unlinkat(dirfd_, SPOOL, 0);
}

/* Rewrites the note's bytes at `off` (from its start) with `len` bytes of `with`, or cuts it
 * to `off` bytes when with is NULL. */
static void spoil(off_t off, const void *with, size_t len)
{
	int fd = openat(dirfd_, SPOOL ".note", O_RDWR | O_CLOEXEC);

	assert_true(fd >= 0);
	if (with)
		assert_int_equal(pwrite(fd, with, len, off), (ssize_t)len);
	else
		assert_int_equal(ftruncate(fd, off), 0);
	close(fd);
}

static void test_a_note_that_does_not_parse_claims_nothing(void **state)
{
	/* The header is 56 bytes; its ranges follow as (start, end) pairs. */
	const uint64_t past_end = SIZE + 1, inside = 3u << 20, zero = 0;
	struct {
		off_t off;
		const void *with;
		size_t len;
	} spoils[] = {
	    {0, "XXXX", 4},          /* not a note */
	    {60, NULL, 0},           /* cut inside a pair */
	    {56 + 24, &past_end, 8}, /* its second range ends past the object */
	    {56 + 16, &inside, 8},   /* its second range starts inside the first */
	    {56 + 8, &zero, 8},      /* its first range ends before it starts */
	};
	struct util_ranges got;

	(void)state;
	util_ranges_init(&got);
	for (size_t i = 0; i < sizeof(spoils) / sizeof(spoils[0]); i++) {
		int fd = make_spool();
		note_two_ranges(fd);
		spoil(spoils[i].off, spoils[i].with, spoils[i].len);
		assert_int_equal(progress_note_read(dirfd_, SPOOL, dirfd_, SIZE, &got), -EPROTO);
		assert_int_equal(got.total, 0);
		close(fd);
		unlinkat(dirfd_, SPOOL, 0);
	}
	/* A symbolic link under the note's name is not followed. */
	progress_note_remove(dirfd_, SPOOL);
	assert_int_equal(symlinkat("/etc/passwd", dirfd_, SPOOL ".note"), 0);
	int fd = make_spool();
	assert_int_equal(progress_note_read(dirfd_, SPOOL, dirfd_, SIZE, &got), -ELOOP);
	assert_int_equal(got.total, 0);
	close(fd);
	util_ranges_free(&got);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_a_note_gives_back_its_ranges_for_its_own_file,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_a_file_made_since_under_the_name_is_not_claimed,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_a_note_that_does_not_parse_claims_nothing, setup,
	                                    teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

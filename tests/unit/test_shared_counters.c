/*
 * Unit tests for the mount's shared counters (daemon/shared_counters.c): a second mapping of the
 * block sees the first's counts and goes on from them, its gauge starts at 0, and a block
 * another build laid out (another size, another format, not a file at all) is refused and
 * left as it was, never read as this build's.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon/shared_counters.h"

static void test_a_second_mapping_goes_on_from_the_counts(void **state)
{
	struct daemon_shared_counters *first = NULL, *next = NULL;
	int fd = -1;
	(void)state;

	assert_int_equal(daemon_shared_counters_create(&fd, &first), 0);
	atomic_fetch_add(&first->fs.opens_new, 3);
	atomic_fetch_add(&first->engine.requests, 5);
	atomic_store(&first->fs.page_drops_pending, 7);
	/* The next serving process maps what the supervisor kept. */
	assert_int_equal(daemon_shared_counters_map(fd, &next), 0);
	assert_int_equal(atomic_load(&next->fs.opens_new), 3);
	assert_int_equal(atomic_load(&next->engine.requests), 5);
	/* A gauge of a dead process's queue is not carried over. */
	assert_int_equal(atomic_load(&next->fs.page_drops_pending), 0);
	atomic_fetch_add(&next->fs.opens_new, 1);
	assert_int_equal(atomic_load(&first->fs.opens_new), 4);
	daemon_shared_counters_unmap(next);
	daemon_shared_counters_unmap(first);
	close(fd);
}

static void test_another_size_is_refused(void **state)
{
	struct daemon_shared_counters *c = NULL;
	int fd = memfd_create("other-build", MFD_CLOEXEC);
	(void)state;

	assert_true(fd >= 0);
	/* Mapped as this build's, a longer or shorter block would be read past its end. */
	assert_int_equal(ftruncate(fd, sizeof(*c) + 8), 0);
	assert_int_equal(daemon_shared_counters_map(fd, &c), -EPROTO);
	assert_int_equal(ftruncate(fd, sizeof(*c) - 8), 0);
	assert_int_equal(daemon_shared_counters_map(fd, &c), -EPROTO);
	close(fd);
}

static void test_another_format_of_the_same_size_is_refused_untouched(void **state)
{
	struct daemon_shared_counters *c = NULL, *ours = NULL;
	int fd = -1;
	(void)state;

	assert_int_equal(daemon_shared_counters_create(&fd, &ours), 0);
	ours->layout ^= 1ULL << 32; /* the format half: a build whose fields mean other things */
	atomic_store(&ours->fs.page_drops_pending, 7);
	assert_int_equal(daemon_shared_counters_map(fd, &c), -EPROTO);
	assert_null(c);
	/* Not ours to change: not even the gauge a map of our own would zero. */
	assert_int_equal(atomic_load(&ours->fs.page_drops_pending), 7);
	ours->layout ^= 1ULL << 32;
	ours->magic ^= 1;
	assert_int_equal(daemon_shared_counters_map(fd, &c), -EPROTO);
	daemon_shared_counters_unmap(ours);
	close(fd);
}

static void test_a_descriptor_that_is_no_block_is_refused(void **state)
{
	struct daemon_shared_counters *c = NULL;
	int pipe_fds[2];
	(void)state;

	assert_int_equal(pipe(pipe_fds), 0);
	assert_int_equal(daemon_shared_counters_map(pipe_fds[0], &c), -EPROTO);
	close(pipe_fds[0]);
	close(pipe_fds[1]);
	assert_int_equal(daemon_shared_counters_map(pipe_fds[0], &c), -EBADF);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_a_second_mapping_goes_on_from_the_counts),
	    cmocka_unit_test(test_another_size_is_refused),
	    cmocka_unit_test(test_another_format_of_the_same_size_is_refused_untouched),
	    cmocka_unit_test(test_a_descriptor_that_is_no_block_is_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

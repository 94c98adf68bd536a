/*
 * Which mount is on top at a path (daemon/mountinfo.c), from crafted mountinfo tables: a stop
 * must recognise its own mount, and leave alone one made over it, whatever the order of
 * the table's lines.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/mountinfo.h"

#define ROOT "1 0 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
#define OURS "30 1 0:50 / /mnt/store ro,nosuid,nodev shared:20 - fuse.spoolfs spoolfs ro\n"
#define OVER "40 30 0:60 / /mnt/store rw,relatime shared:21 - tmpfs over rw,size=1024k\n"

/* The topmost device at mountpoint in table, or the error as text. */
static const char *topmost(const char *table, const char *mountpoint)
{
	static char dev[32];
	FILE *f = fmemopen((void *)table, strlen(table), "r");
	int rc;

	assert_non_null(f);
	rc = daemon_mount_device_in(f, mountpoint, dev, sizeof(dev));
	fclose(f);
	if (rc == -ENOENT)
		return "ENOENT";
	assert_int_equal(rc, 0);
	return dev;
}

static void test_a_single_mount_is_on_top(void **state)
{
	(void)state;
	assert_string_equal(topmost(ROOT OURS, "/mnt/store"), "0:50");
}

static void test_a_mount_made_over_ours_is_on_top_in_any_line_order(void **state)
{
	(void)state;
	assert_string_equal(topmost(ROOT OURS OVER, "/mnt/store"), "0:60");
	/* Propagated or moved mounts enter the table at their own place, not at its end. */
	assert_string_equal(topmost(ROOT OVER OURS, "/mnt/store"), "0:60");
}

static void test_three_stacked_mounts(void **state)
{
	(void)state;
	assert_string_equal(
	    topmost(ROOT "50 40 0:70 / /mnt/store rw - tmpfs t rw\n" OURS OVER, "/mnt/store"),
	    "0:70");
}

static void test_only_the_exact_path_matches(void **state)
{
	(void)state;
	assert_string_equal(topmost(ROOT OURS, "/mnt/stor"), "ENOENT");
	assert_string_equal(topmost(ROOT OURS, "/mnt"), "ENOENT");
	assert_string_equal(
	    topmost(ROOT "31 1 0:51 / /mnt/store2 ro - fuse.spoolfs s ro\n" OURS, "/mnt/store"),
	    "0:50");
}

static void test_escaped_paths_match(void **state)
{
	(void)state;
	assert_string_equal(
	    topmost(ROOT "30 1 0:52 / /mnt/a\\040b\\011c ro - fuse.spoolfs s ro\n", "/mnt/a b\tc"),
	    "0:52");
}

static void test_malformed_lines_are_skipped(void **state)
{
	(void)state;
	assert_string_equal(topmost("garbage\n\n40 x 0:60 / /mnt/store\n" OURS, "/mnt/store"),
	                    "0:50");
	assert_string_equal(topmost("", "/mnt/store"), "ENOENT");
}

/* The type of the topmost mount: what decides whether a new mount may go on top. */
static void test_the_topmost_type_is_given(void **state)
{
	char dev[32], fstype[64];
	const char *table = ROOT OURS OVER;
	FILE *f = fmemopen((void *)table, strlen(table), "r");

	(void)state;
	assert_non_null(f);
	assert_int_equal(
	    daemon_mount_top_in(f, "/mnt/store", dev, sizeof(dev), fstype, sizeof(fstype)), 0);
	fclose(f);
	assert_string_equal(fstype, "tmpfs");
	table = ROOT "30 1 0:50 / /m\\040-\\040x ro shared:20 - fuse.spoolfs s ro\n";
	f = fmemopen((void *)table, strlen(table), "r");
	assert_non_null(f);
	assert_int_equal(daemon_mount_top_in(f, "/m - x", dev, sizeof(dev), fstype, sizeof(fstype)),
	                 0);
	fclose(f);
	assert_string_equal(fstype, "fuse.spoolfs");
}

/* The whole daemon_mount_top at mountpoint in table (which must have one). */
static struct daemon_mount_top top_info(const char *table, const char *mountpoint)
{
	struct daemon_mount_top top;
	FILE *f = fmemopen((void *)table, strlen(table), "r");

	assert_non_null(f);
	assert_int_equal(daemon_mount_top_info_in(f, mountpoint, &top), 0);
	fclose(f);
	return top;
}

/* Whose daemon made a dead FUSE mount decides whether spoolfs may detach it. */
static void test_the_topmost_id_and_user_id_are_given(void **state)
{
	(void)state;
	struct daemon_mount_top top = top_info(
	    ROOT "31 1 0:51 / /m rw - fuse.x x rw,user_id=65534,group_id=65534,allow_other\n",
	    "/m");
	assert_int_equal(top.id, 31);
	assert_int_equal(top.user_id, 65534);
	assert_string_equal(top.fstype, "fuse.x");
	top = top_info(ROOT "32 1 0:52 / /m rw - fuse f rw,group_id=0,user_id=0\n", "/m");
	assert_int_equal(top.user_id, 0);
	/* No user_id=, or one only looking like it: nobody's, not root's. */
	assert_int_equal(top_info(ROOT OURS, "/mnt/store").user_id, -1);
	assert_int_equal(top_info(ROOT "33 1 0:53 / /m rw - fuse f rw,xuser_id=0\n", "/m").user_id,
	                 -1);
	assert_int_equal(top_info(ROOT "34 1 0:54 / /m rw - fuse f rw,user_id=\n", "/m").user_id,
	                 -1);
	assert_int_equal(top_info(ROOT "35 1 0:55 / /m rw - fuse f rw,user_id=1x\n", "/m").user_id,
	                 -1);
	assert_int_equal(top_info(ROOT OURS OVER, "/mnt/store").id, 40);
}

/* An fd's mount ID is the table's ID of the mount it is on: what spoolfs compares before
 * it detaches a mount through the fd. */
static void test_an_fds_mount_id_is_the_tables(void **state)
{
	struct daemon_mount_top top;
	int fd = open("/proc", O_PATH | O_CLOEXEC);
	FILE *table = fopen("/proc/self/mountinfo", "re");

	(void)state;
	assert_true(fd >= 0);
	assert_non_null(table);
	assert_int_equal(daemon_mount_top_info_in(table, "/proc", &top), 0);
	assert_int_equal(daemon_fd_mount_id(fd), (long)top.id);
	assert_string_equal(top.fstype, "proc");
	fclose(table);
	close(fd);
}

struct seen {
	unsigned long proc_id;
	int calls;
};

static int find_proc(const struct daemon_mount_line *m, void *ctx)
{
	struct seen *seen = ctx;

	seen->calls++;
	if (strcmp(m->where, "/proc") == 0 && strcmp(m->fstype, "proc") == 0) {
		seen->proc_id = m->id;
		return 7; /* stops the walk, and is what daemon_mount_each returns */
	}
	return 0;
}

static int count(const struct daemon_mount_line *m, void *ctx)
{
	(void)m;
	++*(int *)ctx;
	return 0;
}

/* daemon_mount_each gives every line (the table's ID, type and unescaped path: how
 * --writable's watcher and `spoolfs status` find an overlay's mount beneath) and stops at
 * the first non-zero return. */
static void test_each_mount_is_given_until_one_stops_the_walk(void **state)
{
	struct seen seen = {0, 0};
	int all = 0, fd = open("/proc", O_PATH | O_CLOEXEC);

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(daemon_mount_each(find_proc, &seen), 7);
	assert_int_equal((long)seen.proc_id, daemon_fd_mount_id(fd));
	assert_int_equal(daemon_mount_each(count, &all), 0);
	assert_true(all >= seen.calls && seen.calls >= 1);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_a_single_mount_is_on_top),
	    cmocka_unit_test(test_a_mount_made_over_ours_is_on_top_in_any_line_order),
	    cmocka_unit_test(test_three_stacked_mounts),
	    cmocka_unit_test(test_only_the_exact_path_matches),
	    cmocka_unit_test(test_escaped_paths_match),
	    cmocka_unit_test(test_malformed_lines_are_skipped),
	    cmocka_unit_test(test_the_topmost_type_is_given),
	    cmocka_unit_test(test_the_topmost_id_and_user_id_are_given),
	    cmocka_unit_test(test_an_fds_mount_id_is_the_tables),
	    cmocka_unit_test(test_each_mount_is_given_until_one_stops_the_walk),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

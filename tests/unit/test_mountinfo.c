/*
 * Which mount is on top at a path (fs/mountinfo.c), from crafted mountinfo tables: a stop
 * must recognise its own mount, and leave alone one made over it, whatever the order of
 * the table's lines.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "fs/fs_i.h"

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
	rc = fs_mount_device_in(f, mountpoint, dev, sizeof(dev));
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
	assert_int_equal(fs_mount_top_in(f, "/mnt/store", dev, sizeof(dev), fstype, sizeof(fstype)),
	                 0);
	fclose(f);
	assert_string_equal(fstype, "tmpfs");
	table = ROOT "30 1 0:50 / /m\\040-\\040x ro shared:20 - fuse.spoolfs s ro\n";
	f = fmemopen((void *)table, strlen(table), "r");
	assert_non_null(f);
	assert_int_equal(fs_mount_top_in(f, "/m - x", dev, sizeof(dev), fstype, sizeof(fstype)), 0);
	fclose(f);
	assert_string_equal(fstype, "fuse.spoolfs");
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
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

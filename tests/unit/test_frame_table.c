/*
 * Unit tests for fetch/source/frame_table.c: a frame's share, the table's count, each rule
 * of frame_table_check with its message (the loader's and the hash list's refusals come
 * from here, prefixed by their callers), and the little-endian form both ways.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <string.h>
#include <zstd.h>

#include "fetch/source/frame_table.h"

/* 10,000 bytes in frames of 4096: 3 frames (4096, 4096, 1808 bytes). */
#define SIZE 10000
#define FRAME 4096

static void test_share_and_count(void **state)
{
	(void)state;
	assert_int_equal(frame_table_count(SIZE, FRAME), 3);
	assert_int_equal(frame_table_count(8192, FRAME), 2);
	assert_int_equal(frame_table_count(1, FRAME), 1);
	assert_int_equal(frame_table_share(SIZE, FRAME, 0), 4096);
	assert_int_equal(frame_table_share(SIZE, FRAME, 1), 4096);
	assert_int_equal(frame_table_share(SIZE, FRAME, 2), 1808);
	assert_int_equal(frame_table_share(8192, FRAME, 1), 4096);
	/* No overflow near the top: 2^40 bytes in 64 MiB frames. */
	assert_int_equal(frame_table_count(1ULL << 40, 64 << 20), 16384);
	assert_int_equal(frame_table_share((1ULL << 40) + 5, 64 << 20, 16384), 5);
}

static void check_case(const uint32_t *lens, uint64_t n, uint64_t stored, int want_rc,
                       const char *want)
{
	char why[200] = "";
	int rc = frame_table_check(SIZE, FRAME, lens, n, stored, why, sizeof(why));

	assert_int_equal(rc, want_rc);
	if (want && !strstr(why, want))
		fail_msg("wanted \"%s\" in \"%s\"", want, why);
}

static void test_check(void **state)
{
	uint32_t good[] = {100, 200, 300};
	uint32_t zero[] = {0, 300, 300};
	uint32_t big[] = {100, 100, 5800};
	uint32_t bound[] = {(uint32_t)ZSTD_compressBound(4096), 1,
	                    (uint32_t)ZSTD_compressBound(1808)};
	uint32_t four[] = {100, 200, 150, 150};
	char why[8] = "x";

	(void)state;
	check_case(good, 3, 600, 0, NULL);
	/* zstd's bound is allowed, frame by frame. */
	check_case(bound, 3, (uint64_t)bound[0] + 1 + bound[2], 0, NULL);
	check_case(good, 2, 300, -EINVAL,
	           "frames has 2 lengths, not the 3 frames of 4096 bytes that 10000 bytes "
	           "make");
	check_case(four, 4, 600, -EINVAL, "frames has 4 lengths");
	check_case(zero, 3, 600, -EINVAL, "frames[0] is not a length from 1 to 4174");
	check_case(big, 3, 6000, -EINVAL,
	           "frames[2] is not a length from 1 to 1878 (zstd's bound for its 1808 bytes)");
	check_case(good, 3, 601, -EINVAL, "frames add up to 600, not stored.size 601");
	/* A reason that does not fit is cut, and no buffer at all is allowed. */
	assert_int_equal(frame_table_check(SIZE, FRAME, good, 3, 601, why, sizeof(why)), -EINVAL);
	assert_int_equal(strlen(why), sizeof(why) - 1);
	assert_int_equal(frame_table_check(SIZE, FRAME, good, 3, 601, NULL, 0), -EINVAL);
}

static void test_little_endian(void **state)
{
	const uint32_t lens[] = {1, 0x01020304, UINT32_MAX};
	unsigned char le[3 * FRAME_TABLE_LE_BYTES];
	const unsigned char want[] = {1, 0, 0, 0, 4, 3, 2, 1, 0xff, 0xff, 0xff, 0xff};
	uint32_t back[3];

	(void)state;
	frame_table_encode_le(lens, 3, le);
	assert_memory_equal(le, want, sizeof(want));
	frame_table_decode_le(le, 3, back);
	assert_memory_equal(back, lens, sizeof(lens));
	assert_int_equal(frame_table_get_le(want + 4), 0x01020304);
	frame_table_put_le(le, 0xa0b0c0d0);
	assert_int_equal(le[0], 0xd0);
	assert_int_equal(le[3], 0xa0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_share_and_count),
	    cmocka_unit_test(test_check),
	    cmocka_unit_test(test_little_endian),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

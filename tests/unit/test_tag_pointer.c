/*
 * Unit tests for release tags' pointers (fetch/source/tag_pointer.c): the names a tag and
 * the manifest it names may have, what publish writes read back the same, what is no
 * pointer (left to the manifest's loader), and every pointer refused with its reason.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fetch/source/tag_pointer.h"
#include "util/hex.h"

static void test_names(void **state)
{
	static const char *const good[] = {"latest", "v1.2_rc-3", "release-42.json"};
	static const char *const bad[] = {"",     ".hidden", "a/b",         "../x",
	                                  "a..b", "a b",     "caf\xc3\xa9", "x\n"};
	char longest[SOURCE_TAG_NAME_MAX + 2];

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		assert_true(source_tag_name_ok(good[i], false));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_false(source_tag_name_ok(bad[i], false));
		assert_false(source_tag_name_ok(bad[i], true));
	}
	/* A tag never looks like a manifest to gc. */
	assert_true(source_tag_name_ok("latest", true));
	assert_false(source_tag_name_ok("release-42.json", true));
	assert_false(source_tag_name_ok("objects", true));
	memset(longest, 'x', SOURCE_TAG_NAME_MAX);
	longest[SOURCE_TAG_NAME_MAX] = '\0';
	assert_true(source_tag_name_ok(longest, true));
	memcpy(longest + SOURCE_TAG_NAME_MAX, "x", 2);
	assert_false(source_tag_name_ok(longest, true));
}

static void test_what_publish_writes_reads_back(void **state)
{
	static const char manifest[] = "{\"version\":2,\"entries\":[]}\n";
	char hex[UTIL_SHA256_HEX_LEN], err[256] = "", *text = NULL;
	struct source_tag t;
	size_t len = 0;

	(void)state;
	assert_int_equal(source_tag_format("r1.json", manifest, strlen(manifest), &text, &len), 0);
	assert_int_equal(util_sha256_hex(manifest, strlen(manifest), hex), 0);
	assert_int_equal(source_tag_parse(text, len, &t, err, sizeof(err)), 1);
	assert_string_equal(t.manifest, "r1.json");
	assert_string_equal(t.sha256, hex);
	assert_int_equal(t.size, strlen(manifest));
	free(text);
	assert_int_equal(source_tag_format("../r1.json", manifest, 1, &text, &len), -EINVAL);
	assert_null(text);
}

static void test_what_is_no_pointer(void **state)
{
	static const char *const texts[] = {"{\"version\":2,\"entries\":[]}", "not json", "[1]", "",
	                                    "{\"version\":2,\"entries\":[],\"x\":\"spoolfs_tag\"}"};
	struct source_tag t;
	char err[256] = "", *big;

	(void)state;
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
		assert_int_equal(source_tag_parse(texts[i], strlen(texts[i]), &t, err, sizeof(err)),
		                 0);
	/* Longer than any pointer: a manifest, never parsed here. */
	big = malloc(SOURCE_TAG_TEXT_MAX + 64);
	assert_non_null(big);
	snprintf(big, SOURCE_TAG_TEXT_MAX + 64, "{\"spoolfs_tag\":1,\"pad\":\"%*s\"}",
	         SOURCE_TAG_TEXT_MAX, "");
	assert_int_equal(source_tag_parse(big, strlen(big), &t, err, sizeof(err)), 0);
	free(big);
}

static void test_a_bad_pointer_is_refused_with_its_reason(void **state)
{
	static const struct {
		const char *text, *why;
	} cases[] = {
	    {"{\"spoolfs_tag\":2,\"manifest\":\"r.json\",\"sha256\":\"" /* 64 */
	     "0000000000000000000000000000000000000000000000000000000000000000\",\"size\":1}",
	     "a format this binary does not know"},
	    {"{\"spoolfs_tag\":1,\"manifest\":\"a/r.json\",\"sha256\":\""
	     "0000000000000000000000000000000000000000000000000000000000000000\",\"size\":1}",
	     "\"manifest\" is not a plain name"},
	    {"{\"spoolfs_tag\":1,\"manifest\":\"r.json\",\"sha256\":\"00\",\"size\":1}",
	     "\"sha256\" is not 64 hex digits"},
	    {"{\"spoolfs_tag\":1,\"manifest\":\"r.json\",\"sha256\":\""
	     "0000000000000000000000000000000000000000000000000000000000000000\",\"size\":-1}",
	     "\"size\" is not a non-negative integer"},
	    {"{\"spoolfs_tag\":1,\"manifest\":\"r.json\",\"sha256\":\""
	     "0000000000000000000000000000000000000000000000000000000000000000\",\"size\":1,"
	     "\"also\":\"r2.json\"}",
	     "a field this binary does not know"},
	    {"{\"spoolfs_tag\":1,\"manifest\":\"r.json\",\"manifest\":\"s.json\",\"sha256\":\""
	     "0000000000000000000000000000000000000000000000000000000000000000\",\"size\":1}",
	     "a field is given twice"},
	};
	struct source_tag t;
	char err[256];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		err[0] = '\0';
		assert_int_equal(
		    source_tag_parse(cases[i].text, strlen(cases[i].text), &t, err, sizeof(err)),
		    -EINVAL);
		assert_non_null(strstr(err, cases[i].why));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_names),
	    cmocka_unit_test(test_what_publish_writes_reads_back),
	    cmocka_unit_test(test_what_is_no_pointer),
	    cmocka_unit_test(test_a_bad_pointer_is_refused_with_its_reason),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * Unit tests for the streaming read of a manifest's entry array
 * (fetch/source/manifest_entries.c): what each entry hands over (types, numbers that do and
 * do not fit, decoded strings with a NUL, an object field as its exact text), which array is
 * read (the first of its name, at the top only), what is skipped, and how the walk stops
 * (the callback's error, a text that is not JSON).
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

#include "fetch/source/manifest_entries.h"

#define SEEN_MAX 8

/* What the callback kept of each entry (a field's text dies with the callback). */
struct seen {
	int n;
	int stop_at; /* return -EPERM at this entry; -1: never */
	int64_t i[SEEN_MAX];
	bool is_object[SEEN_MAX];
	char path[SEEN_MAX][64];
	struct manifest_field size[SEEN_MAX];
	char chunks[SEEN_MAX][128];
	enum manifest_json_type mode_type[SEEN_MAX];
	bool path_has_nul[SEEN_MAX];
	size_t path_len[SEEN_MAX];
};

static int keep(void *ctx, const struct manifest_entry *e)
{
	struct seen *s = ctx;
	int k = s->n++;

	if (k == s->stop_at)
		return -EPERM;
	assert_true(k < SEEN_MAX);
	s->i[k] = e->i;
	s->is_object[k] = e->is_object;
	if (e->f[F_PATH].seen && e->f[F_PATH].type == J_TEXT) {
		snprintf(s->path[k], sizeof(s->path[k]), "%s", e->f[F_PATH].text);
		s->path_has_nul[k] = e->f[F_PATH].has_nul;
		s->path_len[k] = e->f[F_PATH].len;
	}
	s->size[k] = e->f[F_SIZE];
	s->size[k].text = NULL;
	if (e->f[F_CHUNKS].seen && e->f[F_CHUNKS].type == J_OBJECT)
		snprintf(s->chunks[k], sizeof(s->chunks[k]), "%s", e->f[F_CHUNKS].text);
	s->mode_type[k] = e->f[F_MODE].seen ? e->f[F_MODE].type : J_NONE;
	return 0;
}

static int walk(const char *json, const char *array, struct seen *s, char *err, size_t err_len)
{
	memset(s, 0, sizeof(*s));
	s->stop_at = -1;
	return manifest_entries_walk(json, strlen(json), array, keep, s, err, err_len);
}

static void test_fields_and_types(void **state)
{
	struct seen s;
	char err[256] = "";
	(void)state;

	assert_int_equal(
	    walk("{\"version\":2,\"entries\":["
	         "{\"path\":\"a\",\"size\":12,\"mode\":\"0644\"},"
	         "{\"path\":\"b\",\"size\":99999999999999999999,\"mode\":7},"
	         "{\"path\":\"c\",\"size\":1.5,\"mode\":null},"
	         "{\"path\":\"d\",\"size\":-9223372036854775808,\"mode\":[1,{\"x\":2}]},"
	         "{\"path\":\"e\",\"size\":1e3,\"mode\":true}]}",
	         "entries", &s, err, sizeof(err)),
	    0);
	assert_int_equal(s.n, 5);
	assert_string_equal(s.path[0], "a");
	assert_true(s.size[0].is_int64);
	assert_int_equal(s.size[0].i, 12);
	assert_int_equal(s.mode_type[0], J_TEXT);
	/* An integer too large for 64 bits is still an integer, as sqlite's json_type says. */
	assert_int_equal(s.size[1].type, J_INTEGER);
	assert_false(s.size[1].is_int64);
	assert_int_equal(s.mode_type[1], J_INTEGER);
	assert_int_equal(s.size[2].type, J_REAL);
	assert_int_equal(s.mode_type[2], J_NULL);
	assert_true(s.size[3].is_int64);
	assert_int_equal(s.size[3].i, INT64_MIN);
	assert_int_equal(s.mode_type[3], J_ARRAY);
	assert_int_equal(s.size[4].type, J_REAL);
	assert_int_equal(s.mode_type[4], J_TRUE);
	for (int k = 0; k < 5; k++)
		assert_int_equal(s.i[k], k);
}

static void test_strings_are_decoded_and_keep_a_nul(void **state)
{
	struct seen s;
	char err[256] = "";
	(void)state;

	assert_int_equal(walk("{\"version\":1,\"files\":[{\"pa\\u0074h\":\"x\\u0000y\"},"
	                      "{\"path\":\"a\\\\u0000b\"},{\"path\":\"\\u00e9\\/\"}]}",
	                      "files", &s, err, sizeof(err)),
	                 0);
	assert_int_equal(s.n, 3);
	/* An escaped key is its decoded name; a decoded NUL is kept and said. */
	assert_true(s.path_has_nul[0]);
	assert_int_equal(s.path_len[0], 3);
	assert_string_equal(s.path[0], "x");
	/* A backslash then "u0000" is no NUL. */
	assert_false(s.path_has_nul[1]);
	assert_string_equal(s.path[1], "a\\u0000b");
	assert_string_equal(s.path[2], "\xc3\xa9/");
}

static void test_object_field_is_its_text_and_duplicates_keep_the_first(void **state)
{
	struct seen s;
	char err[256] = "";
	(void)state;

	assert_int_equal(
	    walk("{\"version\":2,\"entries\":[{\"path\":\"a\",\"chunks\": {\"size\":4096,"
	         "\"sha256\":\"x\", \"deep\":{\"path\":\"no\"}} ,\"path\":\"second\","
	         "\"chunks\":{\"size\":1}}]}",
	         "entries", &s, err, sizeof(err)),
	    0);
	assert_int_equal(s.n, 1);
	assert_string_equal(s.path[0], "a");
	assert_string_equal(s.chunks[0],
	                    "{\"size\":4096,\"sha256\":\"x\", \"deep\":{\"path\":\"no\"}}");
}

static void test_only_the_first_top_level_array_is_read(void **state)
{
	struct seen s;
	char err[256] = "";
	(void)state;

	/* "entries" inside another value is not the array; a second "entries" is ignored. */
	assert_int_equal(
	    walk("{\"x\":{\"entries\":[{\"path\":\"inner\"}]},\"files\":[{\"path\":\"v1\"}],"
	         "\"entries\":[{\"path\":\"first\"},[\"not an object\"],7],"
	         "\"entries\":[{\"path\":\"again\"}],\"after\":[{\"path\":\"no\"}]}",
	         "entries", &s, err, sizeof(err)),
	    0);
	assert_int_equal(s.n, 3);
	assert_string_equal(s.path[0], "first");
	assert_true(s.is_object[0]);
	assert_false(s.is_object[1]);
	assert_int_equal(s.i[1], 1);
	assert_false(s.is_object[2]);
	assert_int_equal(s.i[2], 2);
}

static void test_numbers_at_their_edges(void **state)
{
	struct seen s;
	char err[256] = "";
	(void)state;

	assert_int_equal(
	    walk("{\"version\":1,\"files\":[{\"size\":-0},{\"size\":1E5},"
	         "{\"size\":123456789012345678901234},{\"size\":9223372036854775807}]}",
	         "files", &s, err, sizeof(err)),
	    0);
	assert_int_equal(s.n, 4);
	assert_int_equal(s.size[0].type, J_INTEGER);
	assert_true(s.size[0].is_int64);
	assert_int_equal(s.size[0].i, 0);
	assert_int_equal(s.size[1].type, J_REAL);
	/* Longer than any int64_t's text: an integer all the same, not one that fits. */
	assert_int_equal(s.size[2].type, J_INTEGER);
	assert_false(s.size[2].is_int64);
	assert_true(s.size[3].is_int64);
	assert_int_equal(s.size[3].i, INT64_MAX);
}

static void test_the_array_is_the_key_spelled_plainly(void **state)
{
	struct seen s;
	char err[256] = "";
	(void)state;

	/* sqlite's '$.entries' compares a key's raw text: an escaped spelling is another key,
	 * whatever its value. */
	assert_int_equal(walk("{\"version\":2,\"entr\\u0069es\":5,\"entries\":[{\"path\":\"a\"}]}",
	                      "entries", &s, err, sizeof(err)),
	                 0);
	assert_int_equal(s.n, 1);
	assert_string_equal(s.path[0], "a");
	assert_int_equal(walk("{\"version\":2,\"entr\\u0069es\":[{\"path\":\"x\"}],"
	                      "\"entries\":[{\"path\":\"b\"}]}",
	                      "entries", &s, err, sizeof(err)),
	                 0);
	assert_int_equal(s.n, 1);
	assert_string_equal(s.path[0], "b");
	/* A key with a NUL after the name is not the name; no array is then no load. */
	assert_int_equal(walk("{\"version\":2,\"entries\\u0000\":[{\"path\":\"x\"}],\"entries\":5}",
	                      "entries", &s, err, sizeof(err)),
	                 -EINVAL);
	assert_int_equal(s.n, 0);
	assert_string_equal(err, "manifest has no \"entries\" array");
}

static void test_half_a_surrogate_pair_is_refused(void **state)
{
	static const char *const bad[] = {"\\ud800", "\\ud800\\u0041", "\\udc00", "x\\uDBFF"};
	struct seen s;
	char json[128], err[256] = "";
	(void)state;

	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		snprintf(json, sizeof(json), "{\"version\":1,\"files\":[{\"path\":\"%s\"}]}",
		         bad[k]);
		assert_int_equal(walk(json, "files", &s, err, sizeof(err)), -EINVAL);
		assert_int_equal(s.n, 0);
		assert_non_null(strstr(err, "is half of a surrogate pair"));
		assert_non_null(strstr(err, "at byte "));
	}
	/* A whole pair, and a backslash followed by "ud800", are fine. */
	assert_int_equal(walk("{\"version\":1,\"files\":[{\"path\":\"\\ud83d\\ude00\"},"
	                      "{\"path\":\"\\\\ud800\"}]}",
	                      "files", &s, err, sizeof(err)),
	                 0);
	assert_int_equal(s.n, 2);
	assert_string_equal(s.path[0], "\xf0\x9f\x98\x80");
	assert_string_equal(s.path[1], "\\ud800");
}

static void test_callback_error_stops_the_walk(void **state)
{
	struct seen s = {.stop_at = 1};
	char err[256] = "";
	const char *json = "{\"version\":1,\"files\":[{\"path\":\"a\"},{\"path\":\"b\"},"
	                   "{\"path\":\"c\"}]}";
	(void)state;

	assert_int_equal(
	    manifest_entries_walk(json, strlen(json), "files", keep, &s, err, sizeof(err)), -EPERM);
	assert_int_equal(s.n, 2);
	assert_string_equal(err, "");
	/* Also at an entry that is not an object. */
	const char *mixed = "{\"version\":1,\"files\":[{\"path\":\"a\"},5,{\"path\":\"c\"}]}";
	memset(&s, 0, sizeof(s));
	s.stop_at = 1;
	assert_int_equal(
	    manifest_entries_walk(mixed, strlen(mixed), "files", keep, &s, err, sizeof(err)),
	    -EPERM);
	assert_int_equal(s.n, 2);
}

static void test_text_that_is_not_json_is_named(void **state)
{
	struct seen s;
	char err[256] = "";
	(void)state;

	assert_int_equal(walk("{\"version\":1,\"files\":[{\"path\":\"a\"},{\"path\" \"b\"}]}",
	                      "files", &s, err, sizeof(err)),
	                 -EINVAL);
	assert_int_equal(s.n, 1);
	assert_non_null(strstr(err, "manifest is not valid JSON: "));
	assert_non_null(strstr(err, "at byte "));
	assert_null(strchr(err, '\n'));
	assert_null(strstr(err, "parse error"));
	/* Cut short: the parser says so at the end of the text. */
	const char *cut = "{\"version\":1,\"files\":[{\"path\":\"a\"}";
	char at[32];
	snprintf(at, sizeof(at), "at byte %zu", strlen(cut));
	assert_int_equal(walk(cut, "files", &s, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "manifest is not valid JSON: "));
	assert_non_null(strstr(err, at));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_fields_and_types),
	    cmocka_unit_test(test_strings_are_decoded_and_keep_a_nul),
	    cmocka_unit_test(test_object_field_is_its_text_and_duplicates_keep_the_first),
	    cmocka_unit_test(test_only_the_first_top_level_array_is_read),
	    cmocka_unit_test(test_numbers_at_their_edges),
	    cmocka_unit_test(test_the_array_is_the_key_spelled_plainly),
	    cmocka_unit_test(test_half_a_surrogate_pair_is_refused),
	    cmocka_unit_test(test_callback_error_stops_the_walk),
	    cmocka_unit_test(test_text_that_is_not_json_is_named),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

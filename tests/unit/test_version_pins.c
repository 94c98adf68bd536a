/*
 * The set of versions failed flights had pinned (fetch/engine/version_pins.c): a key keeps its
 * first version, per URL it was fetched from.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "fetch/engine/version_pins.h"

static void test_a_pinned_key_gives_its_version(void **state)
{
	struct version_pins *pins = version_pins_new();

	(void)state;
	assert_non_null(pins);
	assert_null(version_pins_get(pins, "url:http://h/a", "http://h/a"));
	assert_int_equal(version_pins_put(pins, "url:http://h/a", "http://h/a", "\"v1\""), 0);
	assert_string_equal(version_pins_get(pins, "url:http://h/a", "http://h/a"), "\"v1\"");
	assert_null(version_pins_get(pins, "url:http://h/b", "http://h/b"));
	version_pins_free(pins);
}

static void test_the_first_version_stays(void **state)
{
	struct version_pins *pins = version_pins_new();

	(void)state;
	assert_int_equal(version_pins_put(pins, "k", "http://h/a", "\"v1\""), 0);
	assert_int_equal(version_pins_put(pins, "k", "http://h/a", "\"v2\""), 0);
	assert_string_equal(version_pins_get(pins, "k", "http://h/a"), "\"v1\"");
	version_pins_free(pins);
}

static void test_one_hash_at_two_urls_has_two_versions(void **state)
{
	struct version_pins *pins = version_pins_new();

	(void)state;
	/* ETags are the server's: another URL of the same bytes need not share them. */
	assert_int_equal(version_pins_put(pins, "sha256:ab", "http://one/x", "\"a\""), 0);
	assert_null(version_pins_get(pins, "sha256:ab", "http://two/x"));
	assert_int_equal(version_pins_put(pins, "sha256:ab", "http://two/x", "\"b\""), 0);
	assert_string_equal(version_pins_get(pins, "sha256:ab", "http://one/x"), "\"a\"");
	assert_string_equal(version_pins_get(pins, "sha256:ab", "http://two/x"), "\"b\"");
	version_pins_free(pins);
}

static void test_the_set_is_bounded(void **state)
{
	struct version_pins *pins = version_pins_new();
	char key[32];
	int rc = 0;
	unsigned n = 0;

	(void)state;
	while (rc == 0 && n < 1000000) {
		snprintf(key, sizeof(key), "url:%u", n++);
		rc = version_pins_put(pins, key, key, "\"v\"");
	}
	assert_int_equal(rc, -ENOSPC);
	assert_string_equal(version_pins_get(pins, "url:0", "url:0"), "\"v\"");
	version_pins_free(pins);
	version_pins_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_a_pinned_key_gives_its_version),
	    cmocka_unit_test(test_the_first_version_stays),
	    cmocka_unit_test(test_one_hash_at_two_urls_has_two_versions),
	    cmocka_unit_test(test_the_set_is_bounded),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

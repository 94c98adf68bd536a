/*
 * Nested manifests' texts by digest (fetch/source/nested_cache.h): a miss makes the caller
 * the one fetcher of that digest, others wait for it, and the texts kept stay bounded.
 * Each test uses digests of its own: the cache is the process's.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fetch/source/nested_cache.h"

/* A digest-like key: 64 hex digits from a tag and a number. */
static const char *digest(char buf[65], char tag, unsigned n)
{
	snprintf(buf, 65, "%c%063x", tag, n);
	return buf;
}

static void test_miss_put_hit(void **state)
{
	char d[65], *text;
	size_t len;

	(void)state;
	assert_int_equal(nested_cache_get(digest(d, 'a', 1), &text, &len), 0);
	nested_cache_put(d, "{\"version\":2}", 13);
	assert_int_equal(nested_cache_get(d, &text, &len), 1);
	assert_int_equal(len, 13);
	assert_string_equal(text, "{\"version\":2}");
	free(text);
	/* Abandoned: the next caller fetches it. */
	assert_int_equal(nested_cache_get(digest(d, 'a', 2), &text, &len), 0);
	nested_cache_abandon(d);
	assert_int_equal(nested_cache_get(d, &text, &len), 0);
	nested_cache_abandon(d);
	/* Not a digest: never kept. */
	assert_int_equal(nested_cache_get("abc", &text, &len), 0);
}

static void test_bounded(void **state)
{
	char d[65], *text, *big;
	size_t len;

	(void)state;
	/* More texts than slots: the least recently used go, the one just used stays. */
	assert_int_equal(nested_cache_get(digest(d, 'b', 0), &text, &len), 0);
	nested_cache_put(d, "first", 5);
	for (unsigned k = 1; k <= NESTED_CACHE_ENTRIES; k++) {
		assert_int_equal(nested_cache_get(digest(d, 'b', 0), &text, &len), 1);
		free(text);
		assert_int_equal(nested_cache_get(digest(d, 'b', k), &text, &len), 0);
		nested_cache_put(d, "other", 5);
	}
	assert_int_equal(nested_cache_get(digest(d, 'b', 0), &text, &len), 1);
	free(text);
	assert_int_equal(nested_cache_get(digest(d, 'b', 1), &text, &len), 0);
	nested_cache_abandon(d);
	/* A text over half the bound is not kept. */
	big = calloc(1, NESTED_CACHE_BYTES / 2 + 2);
	assert_non_null(big);
	assert_int_equal(nested_cache_get(digest(d, 'b', 100), &text, &len), 0);
	nested_cache_put(d, big, NESTED_CACHE_BYTES / 2 + 1);
	assert_int_equal(nested_cache_get(d, &text, &len), 0);
	nested_cache_abandon(d);
	free(big);
}

struct waiter {
	const char *digest;
	int rc;
	char *text;
	size_t len;
};

static void *wait_for_text(void *arg)
{
	struct waiter *w = arg;

	w->rc = nested_cache_get(w->digest, &w->text, &w->len);
	return NULL;
}

/* A second caller for a digest being fetched gets the first one's text, not a miss. */
static void test_single_flight(void **state)
{
	char d[65], *text;
	size_t len;
	pthread_t t;
	struct waiter w = {.digest = digest(d, 'c', 1)};

	(void)state;
	assert_int_equal(nested_cache_get(d, &text, &len), 0);
	assert_int_equal(pthread_create(&t, NULL, wait_for_text, &w), 0);
	nested_cache_put(d, "shared", 6);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(w.rc, 1);
	assert_string_equal(w.text, "shared");
	free(w.text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_miss_put_hit),
	    cmocka_unit_test(test_bounded),
	    cmocka_unit_test(test_single_flight),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * The command line's secrets are overwritten in place (daemon/options.c, daemon_argv_scrub): other
 * users read /proc/PID/cmdline. Each case checks what is hidden and that the rest, which
 * says which mount the process is, stays as it was.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/options.h"

/* arg (after the program name, and after `before` when not NULL) once scrubbed. */
static char *scrubbed(const char *before, const char *arg, bool *hidden)
{
	static char buf[512];
	char prog[] = "spoolfs", first[512];
	char *argv[4] = {prog, NULL, NULL, NULL};
	int argc = 1;

	snprintf(buf, sizeof(buf), "%s", arg);
	if (before) {
		snprintf(first, sizeof(first), "%s", before);
		argv[argc++] = first;
	}
	argv[argc++] = buf;
	*hidden = daemon_argv_scrub(argc, argv);
	return buf;
}

static void expect(const char *before, const char *arg, const char *want, bool want_hidden)
{
	bool hidden;

	assert_string_equal(scrubbed(before, arg, &hidden), want);
	assert_int_equal(hidden, want_hidden);
}

static void test_a_source_loses_its_userinfo_and_query(void **state)
{
	(void)state;
	expect(NULL, "https://user:pw@h:1/m.json?X-Amz-Signature=ab&e=1",
	       "https://*******@h:1/m.json?**********************", true);
	/* An '@' unescaped in a password: the last one ends the userinfo. */
	expect(NULL, "http://u:p@x@h/m.json", "http://*****@h/m.json", true);
	expect(NULL, "http://TOKEN@h/m", "http://*****@h/m", true);
	/* A ',' is legal in a password: outside a -o list it ends nothing. */
	expect(NULL, "http://alice:pa,ss@h:1/m.json", "http://***********@h:1/m.json", true);
	expect(NULL, "http://a:p,w@x@h/m", "http://*******@h/m", true);
}

static void test_proxies_lose_their_password(void **state)
{
	(void)state;
	expect(NULL, "-oro,proxy=u:pw@h:3128,allow_other", "-oro,proxy=****@h:3128,allow_other",
	       true);
	expect("-o", "proxy=http://u:pw@h:3128", "proxy=http://****@h:3128", true);
	expect("--proxy", "u:pw@h:3128", "****@h:3128", true);
	expect(NULL, "--proxy=u:pw@h:3128", "--proxy=****@h:3128", true);
	/* A ',' in the password: ends nothing outside a -o list, nor escaped in one. */
	expect("--proxy", "http://bob:se,cr@h:3128", "http://*********@h:3128", true);
	expect("--proxy", "bob:se,cr@h:3128", "*********@h:3128", true);
	expect(NULL, "--proxy=bob:se,cr@h:3128", "--proxy=*********@h:3128", true);
	expect("-o", "proxy=bob:s\\,cr@h:3128,ro", "proxy=*********@h:3128,ro", true);
	expect(NULL, "-oro,proxy=b:s\\,c@d@h:1", "-oro,proxy=********@h:1", true);
	/* An unescaped ',' in a -o list does end the option: the next one is not a password. */
	expect("-o", "proxy=h:3128,no_proxy=a@b", "proxy=h:3128,no_proxy=a@b", false);
}

static void test_what_holds_no_secret_is_left_alone(void **state)
{
	(void)state;
	expect(NULL, "http://h:1/m.json", "http://h:1/m.json", false);
	expect(NULL, "/srv/a@b/manifest.json", "/srv/a@b/manifest.json", false);
	expect(NULL, "-ono_proxy=a@b,ro", "-ono_proxy=a@b,ro", false);
	expect("--cache-dir", "/var/cache/u:p@x", "/var/cache/u:p@x", false);
	expect(NULL, "http://h/m.json?", "http://h/m.json?", false);
}

/* An option set as daemon_options_parse leaves it for `spoolfs SOURCE MOUNTPOINT`. */
static void plain_options(struct daemon_options *o, const char *source)
{
	memset(o, 0, sizeof(*o));
	o->source = strdup(source);
	o->mountpoint = strdup("/mnt");
}

/* daemon_options_check turns the size options into numbers and refuses what is not one,
 * and refuses --keep-cache without a directory to keep: usage errors, before any mount. */
static void test_checks_sizes_and_keep_cache(void **state)
{
	struct daemon_options o;
	uint64_t cache_max = 0;
	size_t manifest_max = 1;

	plain_options(&o, "http://h/m.json");
	assert_int_equal(daemon_options_check(&o, &cache_max, &manifest_max), 0);
	assert_int_equal(cache_max, 0);
	assert_int_equal(manifest_max, 0);
	o.cache_max_size = strdup("10G");
	o.max_manifest_size = strdup("64M");
	assert_int_equal(daemon_options_check(&o, &cache_max, &manifest_max), 0);
	assert_int_equal(cache_max, 10ull << 30);
	assert_int_equal(manifest_max, 64u << 20);
	daemon_options_free(&o);

	plain_options(&o, "http://h/m.json");
	o.cache_max_size = strdup("ten gigs");
	assert_int_equal(daemon_options_check(&o, &cache_max, &manifest_max), -EINVAL);
	daemon_options_free(&o);
	plain_options(&o, "http://h/m.json");
	o.max_manifest_size = strdup("0");
	assert_int_equal(daemon_options_check(&o, &cache_max, &manifest_max), -EINVAL);
	daemon_options_free(&o);
	plain_options(&o, "http://h/m.json");
	o.keep_cache = 1;
	assert_int_equal(daemon_options_check(&o, &cache_max, &manifest_max), -EINVAL);
	daemon_options_free(&o);
	plain_options(&o, "http://h/m.json");
	o.net.ca_file = strdup("/nonexistent/ca.pem");
	assert_int_equal(daemon_options_check(&o, &cache_max, &manifest_max), -EINVAL);
	daemon_options_free(&o);
}

/* A bucket's requests are signed: --mirror and --netrc-file are dropped (and said). */
static void test_a_bucket_drops_what_it_ignores(void **state)
{
	struct daemon_options o;
	uint64_t cache_max = 0;
	size_t manifest_max = 0;

	plain_options(&o, "s3://bucket/");
	o.net.mirrors = calloc(1, sizeof(*o.net.mirrors));
	o.net.mirrors[0] = strdup("http://m/");
	o.net.n_mirrors = 1;
	o.net.netrc_file = strdup("/nonexistent/netrc");
	assert_int_equal(daemon_options_check(&o, &cache_max, &manifest_max), 0);
	assert_int_equal(o.net.n_mirrors, 0);
	assert_null(o.net.netrc_file);
	o.net.n_mirrors = 1; /* freed by its count */
	daemon_options_free(&o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_a_source_loses_its_userinfo_and_query),
	    cmocka_unit_test(test_proxies_lose_their_password),
	    cmocka_unit_test(test_what_holds_no_secret_is_left_alone),
	    cmocka_unit_test(test_checks_sizes_and_keep_cache),
	    cmocka_unit_test(test_a_bucket_drops_what_it_ignores),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * Unit tests for fetch/http/http.h: Content-Range parsing, header-line parsing, weak ETags and
 * retry backoff, the redirect schemes; and fetch/http/net.h's link-local address check. Pure
 * functions: no fixtures, no threads.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "fetch/http/http.h"
#include "util/log.h"
#include "fetch/http/net.h"

/* Parses a NUL-terminated value; the out-parameters are poisoned first. */
static int parse_cr(const char *value, uint64_t *start, uint64_t *end, bool *known, uint64_t *total)
{
	*start = *end = *total = 0xdeadbeef;
	*known = true;
	return http_parse_content_range(value, strlen(value), start, end, known, total);
}

static void test_content_range_valid(void **state)
{
	uint64_t start, end, total;
	bool known;

	assert_int_equal(parse_cr("bytes 0-99/1000", &start, &end, &known, &total), 0);
	assert_int_equal(start, 0);
	assert_int_equal(end, 99);
	assert_true(known);
	assert_int_equal(total, 1000);

	/* The last byte of the object. */
	assert_int_equal(parse_cr("bytes 999-999/1000", &start, &end, &known, &total), 0);
	assert_int_equal(start, 999);
	assert_int_equal(end, 999);
	assert_int_equal(total, 1000);

	/* The range unit is case-insensitive. */
	assert_int_equal(parse_cr("BYTES 5-9/10", &start, &end, &known, &total), 0);
	assert_int_equal(start, 5);
	assert_int_equal(end, 9);
	assert_int_equal(total, 10);

	/* The largest values that fit. */
	assert_int_equal(parse_cr("bytes 0-18446744073709551614/18446744073709551615", &start, &end,
	                          &known, &total),
	                 0);
	assert_int_equal(end, UINT64_MAX - 1);
	assert_int_equal(total, UINT64_MAX);
}

static void test_content_range_star_total(void **state)
{
	uint64_t start, end, total;
	bool known;

	assert_int_equal(parse_cr("bytes 100-199/*", &start, &end, &known, &total), 0);
	assert_int_equal(start, 100);
	assert_int_equal(end, 199);
	assert_false(known);
	assert_int_equal(total, 0);

	/* "*" must be the whole total. */
	assert_int_equal(parse_cr("bytes 100-199/*1", &start, &end, &known, &total), -EINVAL);
	assert_int_equal(parse_cr("bytes 100-199/1*", &start, &end, &known, &total), -EINVAL);
	assert_int_equal(parse_cr("bytes 100-199/**", &start, &end, &known, &total), -EINVAL);
}

static void test_content_range_bounds(void **state)
{
	uint64_t start, end, total;
	bool known;

	/* End before start. */
	assert_int_equal(parse_cr("bytes 200-100/1000", &start, &end, &known, &total), -EINVAL);
	assert_int_equal(parse_cr("bytes 1-0/*", &start, &end, &known, &total), -EINVAL);
	/* End at or past the total. */
	assert_int_equal(parse_cr("bytes 0-1000/1000", &start, &end, &known, &total), -EINVAL);
	assert_int_equal(parse_cr("bytes 0-5000/1000", &start, &end, &known, &total), -EINVAL);
	assert_int_equal(parse_cr("bytes 0-0/0", &start, &end, &known, &total), -EINVAL);
}

static void test_content_range_garbage(void **state)
{
	static const char *const bad[] = {
	    "",
	    "bytes",
	    "bytes ",
	    "bytes abc-def/ghi",
	    "bytes 0-99",
	    "bytes 0-99/",
	    "bytes -99/100",
	    "bytes 0-/100",
	    "bytes 0--99/100",
	    "bytes +0-99/100",
	    "bytes 0-+99/100",
	    "bytes 0-99/+100",
	    "bytes 0-99/-100",
	    "bytes 0-99/100x",
	    "bytes 0x0-0x63/0x100",
	    "bytes */1000", /* the 416 form is not a range we can use */
	    "bytes 0-99/100, bytes 0-99/100",
	    "bytes 0.5-99/100",
	};
	uint64_t start, end, total;
	bool known;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (parse_cr(bad[i], &start, &end, &known, &total) != -EINVAL)
			fail_msg("accepted \"%s\"", bad[i]);
	}
}

static void test_content_range_overflow(void **state)
{
	uint64_t start, end, total;
	bool known;

	/* 2^64 and 20+ digit numbers in each position. */
	assert_int_equal(parse_cr("bytes 0-99/18446744073709551616", &start, &end, &known, &total),
	                 -EINVAL);
	assert_int_equal(
	    parse_cr("bytes 0-99/99999999999999999999999", &start, &end, &known, &total), -EINVAL);
	assert_int_equal(parse_cr("bytes 0-18446744073709551616/*", &start, &end, &known, &total),
	                 -EINVAL);
	assert_int_equal(parse_cr("bytes 18446744073709551616-18446744073709551617/*", &start, &end,
	                          &known, &total),
	                 -EINVAL);
	assert_int_equal(parse_cr("bytes 100000000000000000000-1/2", &start, &end, &known, &total),
	                 -EINVAL);
	/* Leading zeros are digits, not overflow. */
	assert_int_equal(
	    parse_cr("bytes 000000000000000000000000-0099/01000", &start, &end, &known, &total), 0);
	assert_int_equal(start, 0);
	assert_int_equal(end, 99);
	assert_int_equal(total, 1000);
}

static void test_content_range_missing_unit(void **state)
{
	uint64_t start, end, total;
	bool known;

	assert_int_equal(parse_cr("0-99/1000", &start, &end, &known, &total), -EINVAL);
	assert_int_equal(parse_cr("items 0-99/1000", &start, &end, &known, &total), -EINVAL);
	assert_int_equal(parse_cr("bytes=0-99/1000", &start, &end, &known, &total), -EINVAL);
	assert_int_equal(parse_cr("bytes0-99/1000", &start, &end, &known, &total), -EINVAL);
	assert_int_equal(parse_cr("byte 0-99/1000", &start, &end, &known, &total), -EINVAL);
}

static void test_content_range_spaces(void **state)
{
	uint64_t start, end, total;
	bool known;

	/* Surrounding whitespace (and CRLF) is trimmed, extra spaces after the unit skipped. */
	assert_int_equal(parse_cr("  bytes 0-99/1000 \r\n", &start, &end, &known, &total), 0);
	assert_int_equal(end, 99);
	assert_int_equal(total, 1000);
	assert_int_equal(parse_cr("bytes   0-99/1000", &start, &end, &known, &total), 0);
	assert_int_equal(end, 99);

	/* No spaces inside the numbers' syntax. */
	assert_int_equal(parse_cr("bytes 0 -99/1000", &start, &end, &known, &total), -EINVAL);
	assert_int_equal(parse_cr("bytes 0- 99/1000", &start, &end, &known, &total), -EINVAL);
	assert_int_equal(parse_cr("bytes 0-99 /1000", &start, &end, &known, &total), -EINVAL);
	assert_int_equal(parse_cr("bytes 0-99/ 1000", &start, &end, &known, &total), -EINVAL);
	assert_int_equal(parse_cr("bytes 0-99/1 000", &start, &end, &known, &total), -EINVAL);
	assert_int_equal(parse_cr("bytes 0-99/ *", &start, &end, &known, &total), -EINVAL);
}

static void test_content_range_not_nul_terminated(void **state)
{
	/* Only len bytes count: the digits after them are not part of the total. */
	const char buf[] = "bytes 0-99/1000999";
	uint64_t start, end, total;
	bool known;

	assert_int_equal(
	    http_parse_content_range(buf, strlen("bytes 0-99/1000"), &start, &end, &known, &total),
	    0);
	assert_int_equal(total, 1000);
	/* Cut inside the unit. */
	assert_int_equal(http_parse_content_range(buf, 5, &start, &end, &known, &total), -EINVAL);
	assert_int_equal(http_parse_content_range(buf, 0, &start, &end, &known, &total), -EINVAL);
}

/* Feeds a NUL-terminated header line. */
static void feed(struct http_response *resp, const char *line)
{
	http_response_header(resp, line, strlen(line));
}

static void test_header_reset_on_status_line(void **state)
{
	struct http_response resp;

	http_response_reset(&resp);
	assert_int_equal(resp.retry_after_s, -1);
	assert_false(resp.has_content_range);
	assert_false(resp.has_content_length);
	assert_string_equal(resp.etag, "");

	feed(&resp, "HTTP/1.1 301 Moved Permanently\r\n");
	feed(&resp, "Content-Length: 42\r\n");
	feed(&resp, "Content-Range: bytes 0-9/100\r\n");
	feed(&resp, "ETag: \"old\"\r\n");
	feed(&resp, "Retry-After: 7\r\n");
	assert_true(resp.has_content_length);
	assert_true(resp.has_content_range);
	assert_string_equal(resp.etag, "\"old\"");
	assert_int_equal(resp.retry_after_s, 7);

	/* The redirect's headers must not leak into the final response. */
	feed(&resp, "HTTP/2 206\r\n");
	assert_false(resp.has_content_length);
	assert_int_equal(resp.content_length, 0);
	assert_false(resp.has_content_range);
	assert_false(resp.range_total_known);
	assert_string_equal(resp.etag, "");
	assert_int_equal(resp.retry_after_s, -1);

	feed(&resp, "HTTP/1.1 100 Continue\r\n");
	feed(&resp, "\r\n");
	feed(&resp, "HTTP/1.1 206 Partial Content\r\n");
	feed(&resp, "Content-Range: bytes 10-19/100\r\n");
	feed(&resp, "\r\n");
	assert_true(resp.has_content_range);
	assert_int_equal(resp.range_start, 10);
	assert_int_equal(resp.range_end, 19);
	assert_true(resp.range_total_known);
	assert_int_equal(resp.range_total, 100);
}

static void test_header_case_insensitive_names(void **state)
{
	struct http_response resp;

	http_response_reset(&resp);
	feed(&resp, "content-length: 5\r\n");
	assert_true(resp.has_content_length);
	assert_int_equal(resp.content_length, 5);
	feed(&resp, "CONTENT-LENGTH: 6\r\n");
	assert_int_equal(resp.content_length, 6);
	feed(&resp, "eTaG: \"x\"\r\n");
	assert_string_equal(resp.etag, "\"x\"");
	feed(&resp, "RETRY-after: 3\r\n");
	assert_int_equal(resp.retry_after_s, 3);
	feed(&resp, "CoNtEnT-RaNgE: bytes 1-2/3\r\n");
	assert_true(resp.has_content_range);
	assert_int_equal(resp.range_start, 1);
	assert_int_equal(resp.range_end, 2);
	assert_int_equal(resp.range_total, 3);
}

static void test_header_line_endings_and_unknown(void **state)
{
	struct http_response resp;
	const char buf[] = "Content-Length: 1234567";

	http_response_reset(&resp);
	/* CRLF, bare LF and no line ending at all. */
	feed(&resp, "Content-Length: 10\r\n");
	assert_int_equal(resp.content_length, 10);
	feed(&resp, "Content-Length: 11\n");
	assert_int_equal(resp.content_length, 11);
	feed(&resp, "Content-Length:12");
	assert_int_equal(resp.content_length, 12);
	feed(&resp, "ETag: \"abc\"\r\n");
	assert_string_equal(resp.etag, "\"abc\"");

	/* Only len bytes count. */
	http_response_header(&resp, buf, strlen("Content-Length: 123"));
	assert_true(resp.has_content_length);
	assert_int_equal(resp.content_length, 123);

	/* Lines without a colon, other headers and longer names are ignored. */
	feed(&resp, "garbage without colon\r\n");
	feed(&resp, "Content-Type: text/plain\r\n");
	feed(&resp, "Content-Length-Extra: 99\r\n");
	feed(&resp, "X-ETag: \"other\"\r\n");
	feed(&resp, "Content-Length : 77\r\n");
	feed(&resp, "\r\n");
	assert_int_equal(resp.content_length, 123);
	assert_string_equal(resp.etag, "\"abc\"");
	assert_int_equal(resp.retry_after_s, -1);
}

static void test_header_etag(void **state)
{
	struct http_response resp;
	char line[400], value[300];

	http_response_reset(&resp);
	feed(&resp, "ETag: \"33a64df551425fcc55e4d42a148795d9f25f89d4\"\r\n");
	assert_string_equal(resp.etag, "\"33a64df551425fcc55e4d42a148795d9f25f89d4\"");
	feed(&resp, "ETag: W/\"0815\"\r\n");
	assert_string_equal(resp.etag, "W/\"0815\"");
	assert_false(http_etag_sendable(resp.etag));

	/* The longest that fits: HTTP_ETAG_MAX - 1 characters. */
	memset(value, 'a', HTTP_ETAG_MAX - 1);
	value[0] = '"';
	value[HTTP_ETAG_MAX - 2] = '"';
	value[HTTP_ETAG_MAX - 1] = '\0';
	snprintf(line, sizeof(line), "ETag: %s\r\n", value);
	feed(&resp, line);
	assert_string_equal(resp.etag, value);

	/* One more is too long to send back, but still tells versions apart: kept as a
	 * digest that compares unequal to the same start with another end. */
	memset(value, 'a', HTTP_ETAG_MAX);
	value[0] = '"';
	value[HTTP_ETAG_MAX - 1] = '"';
	value[HTTP_ETAG_MAX] = '\0';
	snprintf(line, sizeof(line), "ETag: %s\r\n", value);
	feed(&resp, line);
	char first[HTTP_ETAG_MAX];
	strcpy(first, resp.etag);
	assert_int_equal(first[0], '~');
	assert_false(http_etag_sendable(first));
	value[HTTP_ETAG_MAX - 2] = 'b';
	snprintf(line, sizeof(line), "ETag: %s\r\n", value);
	feed(&resp, line);
	assert_string_not_equal(resp.etag, first);
	value[HTTP_ETAG_MAX - 2] = 'a';
	snprintf(line, sizeof(line), "ETag: %s\r\n", value);
	feed(&resp, line);
	assert_string_equal(resp.etag, first);

	feed(&resp, "ETag: \"x\"\r\n");
	memset(value, 'b', 299);
	value[299] = '\0';
	snprintf(line, sizeof(line), "ETag: %s\r\n", value);
	feed(&resp, line);
	assert_int_equal(resp.etag[0], '~');

	/* Empty value. */
	feed(&resp, "ETag: \"x\"\r\n");
	feed(&resp, "ETag: \r\n");
	assert_string_equal(resp.etag, "");
}

static void test_header_content_length(void **state)
{
	static const char *const bad[] = {
	    "Content-Length: abc\r\n",
	    "Content-Length: 12abc\r\n",
	    "Content-Length: -1\r\n",
	    "Content-Length: +1\r\n",
	    "Content-Length: \r\n",
	    "Content-Length: 1 2\r\n",
	    "Content-Length: 0x10\r\n",
	    "Content-Length: 18446744073709551616\r\n",
	    "Content-Length: 99999999999999999999999\r\n",
	};
	struct http_response resp;

	http_response_reset(&resp);
	feed(&resp, "Content-Length:   42  \r\n");
	assert_true(resp.has_content_length);
	assert_int_equal(resp.content_length, 42);
	feed(&resp, "Content-Length: 18446744073709551615\r\n");
	assert_true(resp.has_content_length);
	assert_int_equal(resp.content_length, UINT64_MAX);
	feed(&resp, "Content-Length: 0\r\n");
	assert_true(resp.has_content_length);
	assert_int_equal(resp.content_length, 0);

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		feed(&resp, "Content-Length: 5\r\n");
		feed(&resp, bad[i]);
		if (resp.has_content_length || resp.content_length != 0)
			fail_msg("accepted %s", bad[i]);
	}
}

static void test_header_content_range(void **state)
{
	struct http_response resp;

	http_response_reset(&resp);
	feed(&resp, "Content-Range: bytes 0-99/*\r\n");
	assert_true(resp.has_content_range);
	assert_int_equal(resp.range_start, 0);
	assert_int_equal(resp.range_end, 99);
	assert_false(resp.range_total_known);

	/* A present but bad Content-Range must not pass for a good one. */
	feed(&resp, "Content-Range: bytes 0-99/1000\r\n");
	feed(&resp, "Content-Range: bytes 0-1000/1000\r\n");
	assert_false(resp.has_content_range);
	assert_false(resp.range_total_known);
	assert_int_not_equal(resp.range_start, 0);

	feed(&resp, "Content-Range: bytes */1000\r\n");
	assert_false(resp.has_content_range);
	assert_false(resp.range_total_known);
}

static void test_header_retry_after(void **state)
{
	struct http_response resp;

	http_response_reset(&resp);
	feed(&resp, "Retry-After: 120\r\n");
	assert_int_equal(resp.retry_after_s, 120);
	feed(&resp, "Retry-After: 0\r\n");
	assert_int_equal(resp.retry_after_s, 0);

	/* An HTTP-date: the wait is until then, none for one past. */
	http_response_reset(&resp);
	feed(&resp, "Retry-After: Wed, 21 Oct 2015 07:28:00 GMT\r\n");
	assert_int_equal(resp.retry_after_s, 0);
	char line[96], date[64];
	time_t soon = time(NULL) + 100;
	strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", gmtime(&soon));
	snprintf(line, sizeof(line), "Retry-After: %s\r\n", date);
	http_response_reset(&resp);
	feed(&resp, line);
	assert_in_range(resp.retry_after_s, 98, 100);
	http_response_reset(&resp);

	/* So are other non-delta values. */
	feed(&resp, "Retry-After: -5\r\n");
	assert_int_equal(resp.retry_after_s, -1);
	feed(&resp, "Retry-After: 5s\r\n");
	assert_int_equal(resp.retry_after_s, -1);
	feed(&resp, "Retry-After: \r\n");
	assert_int_equal(resp.retry_after_s, -1);
	feed(&resp, "Retry-After: 99999999999999999999999\r\n");
	assert_int_equal(resp.retry_after_s, -1);

	/* A huge delta fits in an int (clamped to a day) rather than wrapping negative. */
	feed(&resp, "Retry-After: 4294967296\r\n");
	assert_int_equal(resp.retry_after_s, 86400);
	feed(&resp, "Retry-After: 18446744073709551615\r\n");
	assert_int_equal(resp.retry_after_s, 86400);
}

/* Credentials and queries never reach a log line: userinfo up to its last '@' (a raw '@'
 * in a password left the rest of it shown), everything from '?'. */
static void test_redact_url(void **state)
{
	char buf[256];

	assert_string_equal(
	    util_redact_url("http://alice:S3cret@PW@host:80/p/a.bin?sig=x", buf, sizeof(buf)),
	    "http://host:80/p/a.bin");
	assert_string_equal(util_redact_url("https://u:p@h/a#frag", buf, sizeof(buf)),
	                    "https://h/a");
	assert_string_equal(util_redact_url("http://h/a@b?x=1", buf, sizeof(buf)), "http://h/a@b");
}

static void test_etag_sendable(void **state)
{
	assert_true(http_etag_sendable("\"abc\""));
	assert_true(http_etag_sendable("\"W/abc\""));
	assert_false(http_etag_sendable("W/\"abc\""));
	assert_false(http_etag_sendable("W/\"\""));
	assert_false(http_etag_sendable(""));
	assert_false(http_etag_sendable("W"));
	assert_false(http_etag_sendable("w/\"abc\""));
	assert_false(http_etag_sendable("~\"abc:0123456789abcdef"));
}

static void test_header_last_modified_and_encoding(void **state)
{
	struct http_response resp;

	http_response_reset(&resp);
	assert_string_equal(resp.last_modified, "");
	assert_false(resp.encoded);
	feed(&resp, "Last-Modified: Wed, 21 Oct 2015 07:28:00 GMT\r\n");
	assert_string_equal(resp.last_modified, "Wed, 21 Oct 2015 07:28:00 GMT");
	feed(&resp, "Content-Encoding: identity\r\n");
	assert_false(resp.encoded);
	feed(&resp, "content-encoding: gzip\r\n");
	assert_true(resp.encoded);
	/* A new response (a redirect's target) starts clean. */
	feed(&resp, "HTTP/1.1 200 OK\r\n");
	assert_string_equal(resp.last_modified, "");
	assert_false(resp.encoded);
}

static void test_backoff_growth_and_cap(void **state)
{
	/* jitter 1.0 takes the full delay. */
	assert_int_equal(http_backoff_ms(1, 100, 30000, 1.0, -1, 60000), 100);
	assert_int_equal(http_backoff_ms(2, 100, 30000, 1.0, -1, 60000), 200);
	assert_int_equal(http_backoff_ms(3, 100, 30000, 1.0, -1, 60000), 400);
	assert_int_equal(http_backoff_ms(4, 100, 30000, 1.0, -1, 60000), 800);
	assert_int_equal(http_backoff_ms(9, 100, 30000, 1.0, -1, 60000), 25600);
	assert_int_equal(http_backoff_ms(10, 100, 30000, 1.0, -1, 60000), 30000);
	assert_int_equal(http_backoff_ms(64, 100, 30000, 1.0, -1, 60000), 30000);
	assert_int_equal(http_backoff_ms(65, 100, 30000, 1.0, -1, 60000), 30000);
	assert_int_equal(http_backoff_ms(UINT32_MAX, 100, 30000, 1.0, -1, 60000), 30000);
	/* A base above the cap is capped too. */
	assert_int_equal(http_backoff_ms(1, 1000, 500, 1.0, -1, 60000), 500);

	/* Never shrinks as attempts grow. */
	uint64_t prev = 0;
	for (unsigned attempt = 1; attempt < 100; attempt++) {
		uint64_t d = http_backoff_ms(attempt, 250, 60000, 1.0, -1, 60000);
		assert_true(d >= prev);
		assert_true(d <= 60000);
		prev = d;
	}
}

static void test_backoff_jitter_bounds(void **state)
{
	/* jitter 0 halves; out-of-range jitter is clamped to [0, 1]. */
	assert_int_equal(http_backoff_ms(3, 100, 30000, 0.0, -1, 60000), 200);
	assert_int_equal(http_backoff_ms(3, 100, 30000, 0.5, -1, 60000), 300);
	assert_int_equal(http_backoff_ms(3, 100, 30000, -3.0, -1, 60000), 200);
	assert_int_equal(http_backoff_ms(3, 100, 30000, 7.0, -1, 60000), 400);
	assert_int_equal(http_backoff_ms(20, 100, 30000, 0.0, -1, 60000), 15000);

	for (unsigned attempt = 1; attempt <= 12; attempt++) {
		uint64_t full = http_backoff_ms(attempt, 100, 30000, 1.0, -1, 60000);
		for (int i = 0; i <= 1000; i++) {
			double j = i / 1000.0;
			uint64_t d = http_backoff_ms(attempt, 100, 30000, j, -1, 60000);
			if (d * 2 < full || d > full)
				fail_msg("attempt %u jitter %f: %llu outside [%llu/2, %llu]",
				         attempt, j, (unsigned long long)d,
				         (unsigned long long)full, (unsigned long long)full);
		}
	}
}

static void test_backoff_retry_after(void **state)
{
	/* Retry-After raises the delay above the backoff... */
	assert_int_equal(http_backoff_ms(1, 100, 30000, 1.0, 5, 60000), 5000);
	assert_int_equal(http_backoff_ms(1, 100, 30000, 0.0, 5, 60000), 5000);
	/* ...even above the backoff cap, but not above its own cap. */
	assert_int_equal(http_backoff_ms(1, 100, 30000, 1.0, 45, 60000), 45000);
	assert_int_equal(http_backoff_ms(1, 100, 30000, 1.0, 3600, 60000), 60000);
	assert_int_equal(http_backoff_ms(1, 100, 30000, 1.0, 86400, 60000), 60000);
	/* It never lowers the delay. */
	assert_int_equal(http_backoff_ms(10, 100, 30000, 1.0, 1, 60000), 30000);
	assert_int_equal(http_backoff_ms(10, 100, 30000, 1.0, 0, 60000), 30000);
	assert_int_equal(http_backoff_ms(3, 100, 30000, 1.0, 3600, 100), 400);
	/* -1 means none. */
	assert_int_equal(http_backoff_ms(2, 100, 30000, 1.0, -1, 60000), 200);
}

static bool link_local4(const char *text)
{
	struct sockaddr_in a = {.sin_family = AF_INET};

	assert_int_equal(inet_pton(AF_INET, text, &a.sin_addr), 1);
	return fetch_net_link_local((const struct sockaddr *)&a, sizeof(a));
}

static bool link_local6(const char *text)
{
	struct sockaddr_in6 a = {.sin6_family = AF_INET6};

	assert_int_equal(inet_pton(AF_INET6, text, &a.sin6_addr), 1);
	return fetch_net_link_local((const struct sockaddr *)&a, sizeof(a));
}

/* The addresses a manifest or a redirect may not send the daemon to, however spelled. */
static void test_link_local_addresses(void **state)
{
	(void)state;
	assert_true(link_local4("169.254.169.254"));
	assert_true(link_local4("169.254.0.0"));
	assert_true(link_local4("169.254.255.255"));
	assert_false(link_local4("169.253.255.255"));
	assert_false(link_local4("169.255.0.1"));
	assert_false(link_local4("127.0.0.1"));
	assert_false(link_local4("10.0.0.1"));
	assert_true(link_local6("fe80::1"));
	assert_true(link_local6("febf:ffff::1"));
	assert_false(link_local6("fec0::1"));
	assert_false(link_local6("fe7f::1"));
	assert_true(link_local6("::ffff:169.254.169.254"));
	assert_false(link_local6("::ffff:127.0.0.1"));
	assert_true(link_local6("fd00:ec2::254"));
	assert_false(link_local6("fd00:ec2::253"));
	assert_false(link_local6("::1"));
	assert_false(link_local6("2001:db8::1"));
	/* A length too short for its family is not read past. */
	struct sockaddr_in a = {.sin_family = AF_INET};
	inet_pton(AF_INET, "169.254.1.1", &a.sin_addr);
	assert_false(fetch_net_link_local((const struct sockaddr *)&a, 4));
}

static void test_redirect_protocols(void **state)
{
	(void)state;
	assert_string_equal(http_redirect_protocols("https://h/m.json"), "https");
	assert_string_equal(http_redirect_protocols("HTTPS://h/m.json"), "https");
	assert_string_equal(http_redirect_protocols("http://h/m.json"), "http,https");
	assert_string_equal(http_redirect_protocols("file:///m.json"), "http,https");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_content_range_valid),
	    cmocka_unit_test(test_content_range_star_total),
	    cmocka_unit_test(test_content_range_bounds),
	    cmocka_unit_test(test_content_range_garbage),
	    cmocka_unit_test(test_content_range_overflow),
	    cmocka_unit_test(test_content_range_missing_unit),
	    cmocka_unit_test(test_content_range_spaces),
	    cmocka_unit_test(test_content_range_not_nul_terminated),
	    cmocka_unit_test(test_header_reset_on_status_line),
	    cmocka_unit_test(test_header_case_insensitive_names),
	    cmocka_unit_test(test_header_line_endings_and_unknown),
	    cmocka_unit_test(test_header_etag),
	    cmocka_unit_test(test_header_content_length),
	    cmocka_unit_test(test_header_content_range),
	    cmocka_unit_test(test_header_retry_after),
	    cmocka_unit_test(test_etag_sendable),
	    cmocka_unit_test(test_redact_url),
	    cmocka_unit_test(test_header_last_modified_and_encoding),
	    cmocka_unit_test(test_backoff_growth_and_cap),
	    cmocka_unit_test(test_backoff_jitter_bounds),
	    cmocka_unit_test(test_backoff_retry_after),
	    cmocka_unit_test(test_link_local_addresses),
	    cmocka_unit_test(test_redirect_protocols),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * libFuzzer target: HTTP response header parsing (fetch/http/http.h).
 *
 * The whole input goes to http_parse_content_range as a Content-Range value, then is split
 * at '\n' into header lines for http_response_header (as curl hands them over, CRLF and
 * all). Invariants: a parsed range is ordered and inside its total; the ETag is always a
 * NUL-terminated string that fits; Retry-After is -1 or a sane delay; http_backoff_ms never
 * exceeds its caps.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fetch/http/http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_response(const struct http_response *r)
{
	if (memchr(r->etag, '\0', sizeof(r->etag)) == NULL)
		abort();
	if (r->has_content_range) {
		if (r->range_end < r->range_start)
			abort();
		if (r->range_total_known && r->range_end >= r->range_total)
			abort();
	}
	if (r->retry_after_s < -1 || r->retry_after_s > 86400)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data;
	uint64_t start = 0, end = 0, total = 0;
	bool known = false;
	struct http_response resp;

	/* A heap copy of exactly `size` bytes: ASan catches any read past the value. */
	char *value = malloc(size ? size : 1);
	if (!value)
		return 0;
	memcpy(value, data, size);
	if (http_parse_content_range(value, size, &start, &end, &known, &total) == 0) {
		if (end < start || (known && end >= total))
			abort();
	}
	free(value);

	http_response_reset(&resp);
	for (size_t off = 0; off < size;) {
		const char *nl = memchr(text + off, '\n', size - off);
		size_t len = nl ? (size_t)(nl - (text + off)) + 1 : size - off;
		char *line = malloc(len);
		if (!line)
			return 0;
		memcpy(line, text + off, len);
		http_response_header(&resp, line, len);
		free(line);
		check_response(&resp);
		off += len;
	}

	if (size >= 16) {
		uint64_t base, cap, rcap;
		memcpy(&base, data, 4);
		base &= 0xffffffu;
		memcpy(&cap, data + 4, 4);
		cap &= 0xffffffu;
		memcpy(&rcap, data + 8, 4);
		rcap &= 0xffffffu;
		unsigned attempt = data[12];
		int ra = (int)(int8_t)data[13] * 1000;
		double jitter = (double)data[14] / 255.0 * 1.2 - 0.1;
		uint64_t d = http_backoff_ms(attempt, base, cap, jitter, ra, rcap);
		uint64_t limit = cap > rcap ? cap : rcap;
		if (d > limit && d > base)
			abort();
	}
	return 0;
}

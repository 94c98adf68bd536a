/*
 * stderr logging. One fprintf per line: stdio locks the stream per call, so lines from the
 * transfer thread and FUSE workers never interleave mid-line.
 */
#include "util/log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

/* Written once at start-up, before any thread starts; read-only afterwards. */
static enum util_log_level min_level = UTIL_LOG_INFO;
static bool use_syslog;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void util_log_set_level(enum util_log_level level)
{
	min_level = level;
}

void util_log_use_syslog(void)
{
	openlog("spoolfs", LOG_PID, LOG_DAEMON);
	use_syslog = true;
}

/*
 * Copies line with control bytes as \xNN: names come from the store (an S3 key may hold a
 * newline), and a raw one would start a line the store wrote in the daemon's log.
 */
static void escape_controls(const char *line, char *out, size_t cap)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = 0;

	for (const unsigned char *p = (const unsigned char *)line; *p && n + 5 < cap; p++) {
		if (*p == '\\') { /* so that a name holding the text "\x0a" reads as that */
			out[n++] = '\\';
			out[n++] = '\\';
		} else if (*p < 0x20 || *p == 0x7f) {
			out[n++] = '\\';
			out[n++] = 'x';
			out[n++] = hex[*p >> 4];
			out[n++] = hex[*p & 0xf];
		} else {
			out[n++] = (char)*p;
		}
	}
	out[n] = '\0';
}

void util_log(enum util_log_level level, const char *fmt, ...)
{
	char raw[1024], escaped[sizeof(raw) * 4];
	char *text = raw, *line = escaped, *long_text = NULL, *long_line = NULL;
	va_list ap, again;
	int n;

	if (level < min_level)
		return;
	va_start(ap, fmt);
	va_copy(again, ap);
	n = vsnprintf(raw, sizeof(raw), fmt, ap);
	va_end(ap);
	/* A name may take 4 KiB and a URL more: a line cut short would lose the reason, which
	 * comes after them. Long lines are rare, so only they cost an allocation. */
	if (n >= (int)sizeof(raw) && vasprintf(&long_text, fmt, again) >= 0) {
		long_line = malloc((size_t)n * 4 + 6);
		if (long_line) {
			text = long_text;
			line = long_line;
		}
	}
	va_end(again);
	escape_controls(text, line, line == escaped ? sizeof(escaped) : (size_t)n * 4 + 6);
	if (use_syslog) {
		static const int priorities[] = {LOG_DEBUG, LOG_INFO, LOG_WARNING, LOG_ERR};
		syslog(priorities[level], "%s: %s", level_names[level], line);
	} else {
		fprintf(stderr, "spoolfs: %s: %s\n", level_names[level], line);
	}
	free(long_text);
	free(long_line);
}

const char *util_redact_url(const char *url, char *buf, size_t len)
{
	const char *scheme_end = strstr(url, "://");
	const char *authority = scheme_end ? scheme_end + 3 : url;
	const char *path = authority + strcspn(authority, "/?#");
	const char *at = NULL;

	/* The last '@': one unescaped in a password must not leave the rest of it shown. */
	for (const char *c = authority; c < path; c++)
		if (*c == '@')
			at = c;
	size_t path_len = strcspn(path, "?#");

	if (len == 0)
		return buf;
	if (at)
		snprintf(buf, len, "%.*s%.*s", (int)(authority - url), url,
		         (int)(path_len + (size_t)(path - at - 1)), at + 1);
	else
		snprintf(buf, len, "%.*s", (int)(path - url + (ptrdiff_t)path_len), url);
	return buf;
}

bool util_url_has_secret(const char *url)
{
	const char *scheme_end = strstr(url, "://");
	const char *authority = scheme_end ? scheme_end + 3 : url;

	return memchr(authority, '@', strcspn(authority, "/?#")) || strchr(authority, '?');
}

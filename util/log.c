/*
 * Logging to stderr, syslog or a file. One fprintf (or one write) per line: lines from
 * the transfer thread and FUSE workers never interleave mid-line.
 */
#include "util/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "util/trusted_path.h"

/* Written once at start-up, before any thread starts; read-only afterwards. */
static enum util_log_level min_level = UTIL_LOG_INFO;
static bool use_syslog;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

/* The log file (util_log_use_file), or -1. Its directory (held, util/trusted_path.h) and
 * name are set once at start-up; the descriptor number never changes afterwards:
 * util_log_reopen dup3()s the new file onto it, so a line being written goes whole to the
 * old file or whole to the new one. The reopen goes through the held directory: whatever
 * its path names by then, a link or another user's directory put there is never written. */
static int file_dir_fd = -1;
static char file_name[NAME_MAX + 1];
static atomic_int file_fd = -1;

int util_log_use_file(const char *path, char *why, size_t why_len)
{
	char *name = NULL;
	int dir_fd, fd;

	fd = util_trusted_parent(path, &dir_fd, &name, NULL, why, why_len);
	if (fd < 0)
		return fd;
	if (strlen(name) >= sizeof(file_name)) {
		fd = -ENAMETOOLONG;
		snprintf(why, why_len, "%s: %s", path, strerror(-fd));
		goto out;
	}
	fd = util_trusted_openat(dir_fd, name, UTIL_TRUSTED_APPEND, why, why_len);
	if (fd < 0) {
		char said[256];
		snprintf(said, sizeof(said), "%s", why_len ? why : "");
		snprintf(why, why_len, "%s: %s", path, said);
		goto out;
	}
	strcpy(file_name, name);
	file_dir_fd = dir_fd;
	dir_fd = -1;
	atomic_store(&file_fd, fd);
	fd = 0;
out:
	if (dir_fd >= 0)
		close(dir_fd);
	free(name);
	return fd;
}

void util_log_reopen(void)
{
	int saved_errno = errno; /* a signal handler must leave errno as it found it */
	int old = atomic_load(&file_fd);

	if (old >= 0) {
		/* why_len 0: no message, nothing but system calls (async-signal-safe). */
		int fd = util_trusted_openat(file_dir_fd, file_name, UTIL_TRUSTED_APPEND, NULL, 0);
		if (fd >= 0) {
			dup3(fd, old, O_CLOEXEC);
			close(fd);
		}
	}
	errno = saved_errno;
}

/* One line to the log file: "2026-12-04T22:50:01.123Z spoolfs[123]: level: text\n". */
static void write_file_line(int fd, enum util_log_level level, const char *line)
{
	struct timespec now;
	struct tm tm;
	char stamp[32], head[96];

	clock_gettime(CLOCK_REALTIME, &now);
	gmtime_r(&now.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
	int n = snprintf(head, sizeof(head), "%s.%03ldZ spoolfs[%d]: %s: ", stamp,
	                 now.tv_nsec / 1000000, (int)getpid(), level_names[level]);
	size_t line_len = strlen(line);
	char *buf = malloc((size_t)n + line_len + 2);

	if (!buf)
		return;
	memcpy(buf, head, (size_t)n);
	memcpy(buf + n, line, line_len);
	buf[(size_t)n + line_len] = '\n';
	/* O_APPEND and one write: lines of several threads never mix. A full disk loses the
	 * line, never the mount. */
	ssize_t written = write(fd, buf, (size_t)n + line_len + 1);
	(void)written;
	free(buf);
}

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
	int fd = atomic_load(&file_fd);
	if (fd >= 0) {
		write_file_line(fd, level, line);
	} else if (use_syslog) {
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

int util_url_without_userinfo(const char *url, char **out)
{
	const char *scheme_end = strstr(url, "://");
	const char *authority = scheme_end ? scheme_end + 3 : url;
	const char *path = authority + strcspn(authority, "/?#"), *host = authority;

	/* The last '@' ends the userinfo, as util_redact_url reads it. */
	for (const char *c = authority; c < path; c++)
		if (*c == '@')
			host = c + 1;
	if (asprintf(out, "%.*s%s", (int)(authority - url), url, host) < 0) {
		*out = NULL;
		return -ENOMEM;
	}
	return 0;
}

/*
 * Logging for the whole daemon: one line per event on stderr, with a level.
 *
 * Lines never carry credentials: URLs go through fetch_redact_url first, which drops the
 * userinfo and the query string (presigned URLs keep their signatures there).
 * The level is set once at start-up, before any thread starts.
 */
#ifndef SPOOLFS_FETCH_LOG_H
#define SPOOLFS_FETCH_LOG_H

#include <stdbool.h>
#include <stddef.h>

enum fetch_log_level {
	FETCH_LOG_DEBUG,
	FETCH_LOG_INFO,
	FETCH_LOG_WARN,
	FETCH_LOG_ERROR,
};

void fetch_log_set_level(enum fetch_log_level level);
/* Sends lines to syslog (daemon facility) instead of stderr: for a daemonised mount. */
void fetch_log_use_syslog(void);
void fetch_log(enum fetch_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Copies url into buf (always NUL-terminated) without userinfo and query. Returns buf. */
const char *fetch_redact_url(const char *url, char *buf, size_t len);

/* Whether fetch_redact_url would hide something that matters: userinfo, or a query. */
bool fetch_url_has_secret(const char *url);

#endif

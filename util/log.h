/*
 * Logging for the whole daemon: one line per event on stderr, with a level.
 *
 * Lines never carry credentials: URLs go through util_redact_url first, which drops the
 * userinfo and the query string (presigned URLs keep their signatures there).
 * The level is set once at start-up, before any thread starts.
 */
#ifndef SPOOLFS_UTIL_LOG_H
#define SPOOLFS_UTIL_LOG_H

#include <stdbool.h>
#include <stddef.h>

enum util_log_level {
	UTIL_LOG_DEBUG,
	UTIL_LOG_INFO,
	UTIL_LOG_WARN,
	UTIL_LOG_ERROR,
};

void util_log_set_level(enum util_log_level level);
/* Sends lines to syslog (daemon facility) instead of stderr: for a daemonised mount. */
void util_log_use_syslog(void);
/*
 * Sends lines to the file at path (appended, created 0600), each with a UTC timestamp,
 * instead of stderr or syslog: for hosts with neither journald nor syslog. The path is
 * opened as util/trusted_path.h says (no directory another user controls, no symlink or
 * another user's file at the name) and its directory held. 0, or -errno with why said.
 */
int util_log_use_file(const char *path, char *why, size_t why_len);
/*
 * Opens the log file's name again in the directory held since util_log_use_file, under
 * the same rules, and writes there from now on (logrotate renames the file, then signals).
 * Async-signal-safe: meant for a SIGUSR1 handler. A failure keeps the old file.
 */
void util_log_reopen(void);
void util_log(enum util_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Copies url into buf (always NUL-terminated) without userinfo and query. Returns buf. */
const char *util_redact_url(const char *url, char *buf, size_t len);

/* Whether util_redact_url would hide something that matters: userinfo, or a query. */
bool util_url_has_secret(const char *url);

/*
 * url without its userinfo (user:password@), its query kept, in *out (malloc'd, the
 * caller's): what may be hashed into a file that outlives the mount (a signature cannot be
 * guessed back from its hash, and two queries may name two objects; a weak password can).
 * 0 or -ENOMEM.
 */
int util_url_without_userinfo(const char *url, char **out);

#endif

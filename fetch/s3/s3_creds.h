/*
 * S3 credentials (a key pair, maybe a session token, and when they expire) and the parts
 * of the shared files every step of the chain (creds_chain.h) reads: the INI scanner of
 * ~/.aws/credentials and ~/.aws/config, and a bounded file reader.
 *
 * INI rules (those of Python's configparser, which the AWS CLI uses): "[name]" opens a section
 * (name trimmed); "key = value" or "key: value" with both sides trimmed; whole-line comments
 * start with '#' or ';' (no inline comments: a value runs to the end of its line); a line
 * indented deeper than the key before it continues that value and is ignored here; blank
 * lines are skipped; a section given twice merges, later keys win. Files over 1 MiB and lines
 * that are none of these are errors.
 *
 * Secrets are never put in an error message (only file names, line numbers, key and profile
 * names). No globals, no environment: pure functions but for the file reader.
 */
#ifndef SPOOLFS_FETCH_S3_CREDS_H
#define SPOOLFS_FETCH_S3_CREDS_H

#include <stddef.h>
#include <time.h>

struct s3_creds {
	char *access_key_id;
	char *secret_access_key;
	char *session_token; /* NULL when none */
	/* Where they came from, safe to log: "environment" or "/root/.aws/credentials [dev]". */
	char *origin;
	/* When they stop working (UTC seconds since the epoch); 0: never (static keys). */
	time_t expiration;
};

/*
 * Parses a credentials file's text (for tests and for callers that read the file
 * themselves); `name` is used in messages. profile NULL is "default". 0, -ENOENT (no such
 * profile, or one without aws_access_key_id), -EINVAL (half-set keys, an empty profile
 * name, a malformed text: err names the line), -ENOMEM; on failure *out is empty.
 */
int s3_creds_parse(const char *text, size_t len, const char *name, const char *profile,
                   struct s3_creds *out, char *err, size_t err_len);

/*
 * Calls fn(ctx, key, key_len, value, value_len) for each key of [section] in an INI text
 * (the rules above; neither string is NUL-terminated; a section given twice is scanned
 * twice, so later keys win). fn returns 0, or -ENOMEM to stop. Returns 1 when the section
 * is there, 0 when it is not, -EINVAL for a malformed text (err names file and line),
 * -ENOMEM.
 */
typedef int (*s3_ini_fn)(void *ctx, const char *key, size_t key_len, const char *value,
                         size_t value_len);
int s3_ini_scan(const char *text, size_t len, const char *name, const char *section, s3_ini_fn fn,
                void *ctx, char *err, size_t err_len);

/*
 * Reads a whole regular file of at most 1 MiB into *buf (malloc'd, NOT NUL-terminated;
 * cleanse it before freeing: it may hold secrets) and *len. -ENOENT (err says "no
 * credentials: ... does not exist"), -EACCES, -EFBIG, -EINVAL (not a regular file), ...
 */
int s3_creds_read_file(const char *path, char **buf, size_t *len, char *err, size_t err_len);

/* Deep copy (dst is overwritten, not freed first). 0 or -ENOMEM (dst then empty). */
int s3_creds_copy(const struct s3_creds *src, struct s3_creds *dst);

/* Cleanses (OPENSSL_cleanse) and frees the strings, zeroes *c. NULL-safe and idempotent. */
void s3_creds_free(struct s3_creds *c);

#endif

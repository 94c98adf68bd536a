/*
 * S3 credentials, found the way the AWS CLI and SDKs find static credentials:
 *
 *   1. the environment: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN),
 *      skipped when a profile is named explicitly (the `profile` argument, i.e. --profile),
 *      as the AWS CLI does;
 *   2. the shared credentials file, AWS_SHARED_CREDENTIALS_FILE (a leading "~/" is $HOME)
 *      or $HOME/.aws/credentials, section [PROFILE] where PROFILE is the argument, else
 *      AWS_PROFILE, else "default". Keys aws_access_key_id, aws_secret_access_key,
 *      aws_session_token (case-insensitive).
 *
 * Not covered: ~/.aws/config, SSO, assume-role, credential_process, instance metadata.
 *
 * INI rules (those of Python's configparser, which the AWS CLI uses): "[name]" opens a section
 * (name trimmed); "key = value" or "key: value" with both sides trimmed; whole-line comments
 * start with '#' or ';' (no inline comments: a value runs to the end of its line); a line
 * indented deeper than the key before it continues that value and is ignored here; blank
 * lines are skipped; a section given twice merges, later keys win. Files over 1 MiB and lines
 * that are none of these are errors.
 *
 * Secrets are never put in an error message (only file names, line numbers, key and profile
 * names). No globals; reads the environment (getenv) and the file only: call it at start-up,
 * before threads that might setenv start.
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
 * Resolves credentials into *out (all strings malloc'd, release with s3_creds_free).
 * profile: the --profile value, or NULL.
 * Returns:
 *   0        found;
 *   -ENOENT  no credentials anywhere (not an error for --no-sign): no environment variables,
 *            no file, or no such profile, or a profile without aws_access_key_id; err says
 *            what was looked at;
 *   -EINVAL  half-set credentials (a key id without a secret or the reverse, in the
 *            environment or a profile), an empty profile name, or a malformed file (err
 *            names the file and line);
 *   -EIO, -EACCES, -EFBIG, ...: the file exists but cannot be read (err says which);
 *   -ENOMEM.
 * On any failure *out is empty (all NULL). err (may be NULL) gets a one-line message.
 */
int s3_creds_resolve(const char *profile, struct s3_creds *out, char *err, size_t err_len);

/*
 * Parses a credentials file's text (for tests and for callers that read the file
 * themselves); `name` is used in messages. Same results as the file step above.
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

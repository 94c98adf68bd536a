/*
 * The documents credential endpoints answer, parsed with the project's parsers: STS's XML
 * (AssumeRole, AssumeRoleWithWebIdentity, and its <ErrorResponse>) with expat, the JSON of
 * credential_process, container endpoints, instance metadata and GitHub's OIDC token
 * endpoint with sqlite's JSON functions (an in-memory database per call), and their
 * ISO 8601 expiration times with sqlite's unixepoch().
 *
 * Pure functions: no globals, no I/O, no logging; any thread. Secrets never go into err.
 */
#ifndef SPOOLFS_FETCH_S3_CREDS_DOC_H
#define SPOOLFS_FETCH_S3_CREDS_DOC_H

#include <stddef.h>

#include "fetch/s3/s3_creds.h"

/* Documents larger than this are refused (the endpoints answer a few KiB). */
#define CREDS_DOC_MAX (64u << 10)

/*
 * An STS answer: the <Credentials> of an AssumeRole(WithWebIdentity)Result into *out
 * (expiration set, origin NULL), or, for an <ErrorResponse>, -EACCES with its Code and
 * Message in err. -EINVAL for anything else (err says what), -ENOMEM.
 */
int creds_doc_sts(const char *xml, size_t len, struct s3_creds *out, char *err, size_t err_len);

/*
 * A JSON credentials object: AccessKeyId, SecretAccessKey, Token or SessionToken,
 * Expiration (optional: none means they never expire). version_required: the object must
 * have "Version": 1 (credential_process). An object with "Code" other than "Success"
 * (instance metadata) is -EACCES. -EINVAL when a field is missing or of the wrong type, or
 * the text is not JSON; -ENOMEM.
 */
int creds_doc_json(const char *json, size_t len, int version_required, struct s3_creds *out,
                   char *err, size_t err_len);

/* The string member `name` of a JSON object (GitHub's {"value": "..."}) into *value
 * (malloc'd). -EINVAL when absent or not a string or not JSON; -ENOMEM. */
int creds_doc_json_string(const char *json, size_t len, const char *name, char **value);

/* An ISO 8601 time ("2026-12-05T06:00:00Z", fractions and offsets allowed) as UTC seconds
 * since the epoch, or -1. */
long long creds_doc_time(const char *iso);

#endif

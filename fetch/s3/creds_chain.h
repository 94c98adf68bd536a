/*
 * The credential chain of the AWS SDKs and CLI, in their order (doc/s3.md says which
 * variables and files each step reads):
 *
 *   1. environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN;
 *   2. web identity: AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN (AWS_ROLE_SESSION_NAME):
 *      AssumeRoleWithWebIdentity against STS, the token file read again at each fetch;
 *   3. the shared files (~/.aws/credentials and ~/.aws/config, AWS_SHARED_CREDENTIALS_FILE,
 *      AWS_CONFIG_FILE, AWS_PROFILE): static keys, role_arn with source_profile,
 *      credential_source or web_identity_token_file (AssumeRole or
 *      AssumeRoleWithWebIdentity), credential_process;
 *   4. container credentials: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI, with
 *      AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE (read again at each fetch) or _TOKEN;
 *   5. instance metadata, IMDSv2 only (AWS_EC2_METADATA_SERVICE_ENDPOINT,
 *      AWS_EC2_METADATA_DISABLED).
 *
 * A step that is not configured is skipped quietly. One that is configured but fails logs
 * one line (which source, why) and the next step is tried, as the SDKs' default chains do.
 * Explicit choices narrow the chain: --profile NAME uses step 3 alone with that profile
 * (as the CLI's --profile does), --role-arn ARN uses step 2 alone with that role, its
 * token from AWS_WEB_IDENTITY_TOKEN_FILE or else from GitHub Actions' OIDC endpoint
 * (ACTIONS_ID_TOKEN_REQUEST_URL and _TOKEN, audience sts.amazonaws.com).
 *
 * The environment is read once, by creds_chain_create (at start-up, before threads that
 * might setenv): fetches later, from the refresh thread, use that snapshot. Files and
 * endpoints are read at every fetch. No secret, token or token file content goes into an
 * error message or the log; the snapshot is cleansed when freed.
 *
 * Thread-safety: the chain is immutable after creation; fetches may run in any thread, one
 * at a time or several (each has its own buffers and curl handle).
 */
#ifndef SPOOLFS_FETCH_S3_CREDS_CHAIN_H
#define SPOOLFS_FETCH_S3_CREDS_CHAIN_H

#include <stddef.h>

#include "fetch/http/net.h"
#include "fetch/s3/s3_creds.h"

enum creds_source {
	CREDS_SOURCE_ENV,
	CREDS_SOURCE_WEB_IDENTITY,
	CREDS_SOURCE_PROFILE,
	CREDS_SOURCE_CONTAINER,
	CREDS_SOURCE_IMDS,
	CREDS_SOURCE_COUNT,
};

struct creds_chain_options {
	const char *profile;  /* --profile, or NULL */
	const char *role_arn; /* --role-arn, or NULL */
	const char *region;   /* --region, or NULL: the profile's, $AWS_REGION, ... */
	struct fetch_net net; /* STS and GitHub requests: trust store, proxy, address policy */
};

struct creds_chain;

/* Copies the options and a snapshot of the environment. 0, -EINVAL (an empty --profile or
 * --role-arn; err says so), -ENOMEM. */
int creds_chain_create(const struct creds_chain_options *o, struct creds_chain **out, char *err,
                       size_t err_len);
void creds_chain_free(struct creds_chain *c);

/*
 * Tries the steps in order into *out (origin set: which step, file and profile, safe to log);
 * *source gets the step that answered. -ENOENT: no step is configured or every configured
 * one failed; err then sums up what was tried. Other -errno: an explicit choice (--profile,
 * --role-arn) failed; err says why.
 */
int creds_chain_resolve(struct creds_chain *c, enum creds_source *source, struct s3_creds *out,
                        char *err, size_t err_len);

/* Asks one step again (a refresh): 0, or -errno with one line in err. */
int creds_chain_fetch(struct creds_chain *c, enum creds_source source, struct s3_creds *out,
                      char *err, size_t err_len);

/* "environment", "web identity", "shared files", "container", "instance metadata". */
const char *creds_source_name(enum creds_source s);

#endif

/*
 * What the files of the credential chain share (creds_chain.c: the environment snapshot,
 * the chain and its first step; creds_sts.c: STS and web identity; creds_profile.c: the
 * shared files; creds_metadata.c: container credentials and instance metadata). Each step
 * returns 0 with credentials (origin set), -ENOENT when it is not configured, or another
 * -errno with one line in err. Nothing here is for code outside fetch/s3/.
 */
#ifndef SPOOLFS_FETCH_S3_CREDS_CHAIN_I_H
#define SPOOLFS_FETCH_S3_CREDS_CHAIN_I_H

#include <curl/curl.h>
#include <stddef.h>

#include "fetch/s3/creds_chain.h"

/* STS and GitHub's token endpoint are remote services. */
#define REMOTE_CONNECT_MS 5000
#define REMOTE_TIMEOUT_MS 15000

enum env_var {
	E_ACCESS_KEY,
	E_SECRET,
	E_TOKEN,
	E_PROFILE,
	E_CREDS_FILE,
	E_CONFIG_FILE,
	E_HOME,
	E_REGION,
	E_DEFAULT_REGION,
	E_WEB_TOKEN_FILE,
	E_ROLE_ARN,
	E_ROLE_SESSION,
	E_ENDPOINT_STS,
	E_ENDPOINT,
	E_CONTAINER_REL,
	E_CONTAINER_FULL,
	E_CONTAINER_TOKEN,
	E_CONTAINER_TOKEN_FILE,
	E_IMDS_ENDPOINT,
	E_IMDS_DISABLED,
	E_GITHUB_URL,
	E_GITHUB_TOKEN,
	E_COUNT,
};

struct creds_chain {
	char *env[E_COUNT]; /* the snapshot: NULL for unset or empty */
	char *profile;
	char *role_arn;
	char *region;
	char *ca_file;
	char *proxy;
	struct fetch_net net; /* points into ca_file and proxy */
};

/* The snapshot's value of v: NULL when unset or empty. */
const char *creds_env(const struct creds_chain *c, enum env_var v);
/* Cleanses and frees *s, sets it NULL. */
void creds_free_secret(char **s);
/* A copy of s, NULL for NULL or "". */
char *creds_dup_or_null(const char *s);
/* Sets out->origin from a format; on failure frees *out: -ENOMEM. */
int creds_set_origin(struct s3_creds *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A path with a leading "~/" as $HOME (malloc'd); NULL with *rc set. */
char *creds_expand_home(const struct creds_chain *c, const char *path, int *rc, char *err,
                        size_t err_len);
/* A token file's content without surrounding blanks (malloc'd, a secret). */
int creds_read_token_file(const struct creds_chain *c, const char *path, char **token, char *err,
                          size_t err_len);
/* Adds "Name: value" to *list (the line is cleansed: it may hold a token). -ENOMEM. */
int creds_add_header(struct curl_slist **list, const char *name, const char *value);

/* creds_sts.c */
/* The region STS is asked in: --region, the profile's, $AWS_REGION, ..., us-east-1. */
const char *creds_sts_region(const struct creds_chain *c, const char *profile_region);
/* AssumeRoleWithWebIdentity (unsigned). session NULL: $AWS_ROLE_SESSION_NAME or
 * spoolfs-<time>. */
int creds_sts_web_identity(const struct creds_chain *c, const char *role_arn, const char *session,
                           const char *token, const char *region, struct s3_creds *out, char *err,
                           size_t err_len);
/* AssumeRole signed with src; external_id and duration may be NULL. */
int creds_sts_assume_role(const struct creds_chain *c, const char *role_arn, const char *session,
                          const char *external_id, const char *duration, const char *region,
                          const struct s3_creds *src, struct s3_creds *out, char *err,
                          size_t err_len);

/* The steps. */
int creds_step_env(struct creds_chain *c, struct s3_creds *out, char *err, size_t err_len);
int creds_step_web_identity(struct creds_chain *c, struct s3_creds *out, char *err, size_t err_len);
int creds_step_profile(struct creds_chain *c, struct s3_creds *out, char *err, size_t err_len);
int creds_step_container(struct creds_chain *c, struct s3_creds *out, char *err, size_t err_len);
int creds_step_imds(struct creds_chain *c, struct s3_creds *out, char *err, size_t err_len);

#endif

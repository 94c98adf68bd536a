/*
 * Step 3 of the chain: the shared files ~/.aws/credentials and ~/.aws/config (see
 * creds_chain.h): static keys, role_arn through AssumeRole (source_profile chains,
 * credential_source) or AssumeRoleWithWebIdentity, credential_process.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>

#include "fetch/s3/creds_chain_i.h"
#include "fetch/s3/creds_process.h"

/* source_profile chains longer than this are refused (the CLI has no bound; a loop is
 * caught by name before). */
#define PROFILE_DEPTH_MAX 8

/* ------------------------------------------------------------------ 3. shared files */

enum pkey {
	P_KEY_ID,
	P_SECRET,
	P_TOKEN,
	P_ROLE_ARN,
	P_SOURCE_PROFILE,
	P_CREDENTIAL_SOURCE,
	P_PROCESS,
	P_WEB_TOKEN_FILE,
	P_SESSION_NAME,
	P_EXTERNAL_ID,
	P_DURATION,
	P_REGION,
	P_COUNT,
};

static const char *const pkey_names[P_COUNT] = {
    "aws_access_key_id", "aws_secret_access_key", "aws_session_token",  "role_arn",
    "source_profile",    "credential_source",     "credential_process", "web_identity_token_file",
    "role_session_name", "external_id",           "duration_seconds",   "region",
};

struct profile {
	char *v[P_COUNT];
};

static void profile_free(struct profile *p)
{
	for (int i = 0; i < P_COUNT; i++)
		creds_free_secret(&p->v[i]);
}

static int take_profile_key(void *ctx, const char *k, size_t kn, const char *v, size_t vn)
{
	struct profile *p = ctx;

	for (int i = 0; i < P_COUNT; i++) {
		if (strlen(pkey_names[i]) == kn && strncasecmp(k, pkey_names[i], kn) == 0) {
			creds_free_secret(&p->v[i]);
			if (vn && !(p->v[i] = strndup(v, vn)))
				return -ENOMEM;
			return 0;
		}
	}
	return 0;
}

/* Both files' text, read once per fetch; NULL text: the file does not exist. */
struct files {
	char *creds_path, *config_path;
	char *creds, *config;
	size_t creds_len, config_len;
};

static void files_free(struct files *f)
{
	if (f->creds)
		OPENSSL_cleanse(f->creds, f->creds_len);
	if (f->config)
		OPENSSL_cleanse(f->config, f->config_len);
	free(f->creds);
	free(f->config);
	free(f->creds_path);
	free(f->config_path);
}

static int read_one(const struct creds_chain *c, enum env_var var, const char *dflt, char **path,
                    char **text, size_t *len, char *err, size_t err_len)
{
	int rc = 0;

	if (creds_env(c, var)) {
		*path = creds_expand_home(c, creds_env(c, var), &rc, err, err_len);
	} else if (creds_env(c, E_HOME)) {
		if (asprintf(path, "%s/%s", creds_env(c, E_HOME), dflt) < 0) {
			*path = NULL;
			rc = -ENOMEM;
		}
	} else {
		return 0; /* no HOME: no default file */
	}
	if (!*path)
		return rc;
	rc = s3_creds_read_file(*path, text, len, err, err_len);
	return rc == -ENOENT ? 0 : rc;
}

static int files_read(const struct creds_chain *c, struct files *f, char *err, size_t err_len)
{
	int rc;

	memset(f, 0, sizeof(*f));
	rc = read_one(c, E_CREDS_FILE, ".aws/credentials", &f->creds_path, &f->creds, &f->creds_len,
	              err, err_len);
	if (rc == 0)
		rc = read_one(c, E_CONFIG_FILE, ".aws/config", &f->config_path, &f->config,
		              &f->config_len, err, err_len);
	return rc;
}

/* Profile `name` from both files: the config's [profile NAME] (or [default]), then the
 * credentials file's [NAME], whose keys win. 1 found, 0 in neither, or -errno. */
static int profile_load(const struct files *f, const char *name, struct profile *p, char *err,
                        size_t err_len)
{
	char section[300];
	int found = 0, rc;

	memset(p, 0, sizeof(*p));
	if (f->config) {
		if (strcmp(name, "default") == 0) {
			rc = s3_ini_scan(f->config, f->config_len, f->config_path, "default",
			                 take_profile_key, p, err, err_len);
			if (rc < 0)
				return rc;
			found |= rc;
		}
		snprintf(section, sizeof(section), "profile %s", name);
		rc = s3_ini_scan(f->config, f->config_len, f->config_path, section,
		                 take_profile_key, p, err, err_len);
		if (rc < 0)
			return rc;
		found |= rc;
	}
	if (f->creds) {
		rc = s3_ini_scan(f->creds, f->creds_len, f->creds_path, name, take_profile_key, p,
		                 err, err_len);
		if (rc < 0)
			return rc;
		found |= rc;
	}
	return found;
}

int creds_step_container(struct creds_chain *c, struct s3_creds *out, char *err, size_t err_len);
int creds_step_imds(struct creds_chain *c, struct s3_creds *out, char *err, size_t err_len);

static int resolve_profile(struct creds_chain *c, const struct files *f, const char *name,
                           const char **visited, unsigned depth, struct s3_creds *out, char *err,
                           size_t err_len);

static int static_keys(const struct profile *p, const char *name, struct s3_creds *out, char *err,
                       size_t err_len)
{
	if (!p->v[P_KEY_ID] || !p->v[P_SECRET]) {
		snprintf(err, err_len, "profile [%s] has %s but no %s", name,
		         p->v[P_KEY_ID] ? "aws_access_key_id" : "aws_secret_access_key",
		         p->v[P_KEY_ID] ? "aws_secret_access_key" : "aws_access_key_id");
		return -EINVAL;
	}
	out->access_key_id = strdup(p->v[P_KEY_ID]);
	out->secret_access_key = strdup(p->v[P_SECRET]);
	out->session_token = creds_dup_or_null(p->v[P_TOKEN]);
	if (!out->access_key_id || !out->secret_access_key ||
	    (p->v[P_TOKEN] && !out->session_token)) {
		s3_creds_free(out);
		return -ENOMEM;
	}
	return 0;
}

/* The credentials a role_arn profile assumes the role with. */
static int role_source(struct creds_chain *c, const struct files *f, const char *name,
                       const struct profile *p, const char **visited, unsigned depth,
                       struct s3_creds *src, char *err, size_t err_len)
{
	const char *sp = p->v[P_SOURCE_PROFILE], *cs = p->v[P_CREDENTIAL_SOURCE];

	if (sp && cs) {
		snprintf(err, err_len, "profile [%s] has both source_profile and credential_source",
		         name);
		return -EINVAL;
	}
	if (sp) {
		/* A profile may name itself: its own static keys assume its role. */
		if (strcmp(sp, name) == 0 && (p->v[P_KEY_ID] || p->v[P_SECRET]))
			return static_keys(p, name, src, err, err_len);
		for (unsigned i = 0; i <= depth; i++) {
			if (strcmp(visited[i], sp) == 0) {
				snprintf(err, err_len,
				         "profile [%s]: source_profile %s makes a loop", name, sp);
				return -ELOOP;
			}
		}
		if (depth + 1 >= PROFILE_DEPTH_MAX) {
			snprintf(err, err_len,
			         "profile [%s]: source_profile chain longer than %d profiles", name,
			         PROFILE_DEPTH_MAX);
			return -ELOOP;
		}
		visited[depth + 1] = sp;
		return resolve_profile(c, f, sp, visited, depth + 1, src, err, err_len);
	}
	if (!cs) {
		snprintf(err, err_len,
		         "profile [%s] has role_arn but no source_profile, credential_source or "
		         "web_identity_token_file",
		         name);
		return -EINVAL;
	}
	int rc;
	if (strcmp(cs, "Environment") == 0)
		rc = creds_step_env(c, src, err, err_len);
	else if (strcmp(cs, "Ec2InstanceMetadata") == 0)
		rc = creds_step_imds(c, src, err, err_len);
	else if (strcmp(cs, "EcsContainer") == 0)
		rc = creds_step_container(c, src, err, err_len);
	else {
		snprintf(err, err_len,
		         "profile [%s]: credential_source %.40s is not Environment, "
		         "Ec2InstanceMetadata or EcsContainer",
		         name, cs);
		return -EINVAL;
	}
	if (rc == -ENOENT && !err[0])
		snprintf(err, err_len, "profile [%s]: credential_source %s has no credentials",
		         name, cs);
	return rc == -ENOENT ? -EINVAL : rc;
}

static int assume_role(struct creds_chain *c, const char *name, const struct profile *p,
                       const struct s3_creds *src, struct s3_creds *out, char *err, size_t err_len)
{
	char why[400] = "";
	int rc = creds_sts_assume_role(
	    c, p->v[P_ROLE_ARN], p->v[P_SESSION_NAME], p->v[P_EXTERNAL_ID], p->v[P_DURATION],
	    creds_sts_region(c, p->v[P_REGION]), src, out, why, sizeof(why));

	if (rc)
		snprintf(err, err_len, "profile [%s]: AssumeRole %s: %s", name, p->v[P_ROLE_ARN],
		         why);
	return rc;
}

static int resolve_profile(struct creds_chain *c, const struct files *f, const char *name,
                           const char **visited, unsigned depth, struct s3_creds *out, char *err,
                           size_t err_len)
{
	struct profile p;
	struct s3_creds src = {0};
	int rc;

	rc = profile_load(f, name, &p, err, err_len);
	if (rc == 0) {
		snprintf(err, err_len, "no profile [%s] in %s or %s", name,
		         f->creds_path ? f->creds_path : "~/.aws/credentials",
		         f->config_path ? f->config_path : "~/.aws/config");
		rc = -ENOENT;
	}
	if (rc < 0)
		goto out;
	/* A source profile with keys gives its keys, whatever else it has (as the CLI). */
	if (p.v[P_ROLE_ARN] && !(depth > 0 && p.v[P_KEY_ID])) {
		if (p.v[P_WEB_TOKEN_FILE]) {
			char *token = NULL;
			rc = creds_read_token_file(c, p.v[P_WEB_TOKEN_FILE], &token, err, err_len);
			if (rc == 0)
				rc = creds_sts_web_identity(
				    c, p.v[P_ROLE_ARN], p.v[P_SESSION_NAME], token,
				    creds_sts_region(c, p.v[P_REGION]), out, err, err_len);
			creds_free_secret(&token);
			goto out;
		}
		rc = role_source(c, f, name, &p, visited, depth, &src, err, err_len);
		if (rc == 0)
			rc = assume_role(c, name, &p, &src, out, err, err_len);
	} else if (p.v[P_PROCESS] && !(p.v[P_KEY_ID] && p.v[P_SECRET])) {
		char why[300] = "";
		rc = creds_process_run(p.v[P_PROCESS], out, why, sizeof(why));
		if (rc)
			snprintf(err, err_len, "profile [%s]: %s", name, why);
	} else if (p.v[P_KEY_ID] || p.v[P_SECRET]) {
		rc = static_keys(&p, name, out, err, err_len);
	} else {
		snprintf(err, err_len,
		         "profile [%s] has no aws_access_key_id, role_arn or credential_process",
		         name);
		rc = -ENOENT;
	}
out:
	s3_creds_free(&src);
	profile_free(&p);
	return rc;
}

/* The profile's way to credentials, for the log: "[dev] in FILE". */
int creds_step_profile(struct creds_chain *c, struct s3_creds *out, char *err, size_t err_len)
{
	const char *name = c->profile ? c->profile : creds_env(c, E_PROFILE);
	const char *visited[PROFILE_DEPTH_MAX + 1] = {0};
	struct files f;
	int rc;

	if (!name)
		name = "default";
	rc = files_read(c, &f, err, err_len);
	if (rc)
		goto out;
	if (!f.creds && !f.config) {
		snprintf(err, err_len, "no %s and no %s",
		         f.creds_path ? f.creds_path : "~/.aws/credentials",
		         f.config_path ? f.config_path : "~/.aws/config");
		rc = -ENOENT;
		goto out;
	}
	visited[0] = name;
	rc = resolve_profile(c, &f, name, visited, 0, out, err, err_len);
	/* The default profile missing is no error: nothing is configured. A named one is. */
	if (rc == -ENOENT && (c->profile || creds_env(c, E_PROFILE)))
		rc = -EINVAL;
	if (rc == 0)
		rc = creds_set_origin(out, "%s%s%s [%s]", f.creds ? f.creds_path : "",
		                      f.creds && f.config ? " and " : "",
		                      f.config ? f.config_path : "", name);
out:
	files_free(&f);
	return rc;
}

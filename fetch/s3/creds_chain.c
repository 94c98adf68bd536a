/*
 * The credential chain (see creds_chain.h): the environment snapshot, the order of the
 * steps, and step 1, the environment. The other steps are in creds_sts.c (2),
 * creds_profile.c (3) and creds_metadata.c (4, 5); creds_chain_i.h is what they share.
 */
#include "fetch/s3/creds_chain.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "fetch/s3/creds_chain_i.h"
#include "util/log.h"

static const char *const env_names[E_COUNT] = {
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "HOME",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_ROLE_SESSION_NAME",
    "AWS_ENDPOINT_URL_STS",
    "AWS_ENDPOINT_URL",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT",
    "AWS_EC2_METADATA_DISABLED",
    "ACTIONS_ID_TOKEN_REQUEST_URL",
    "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
};

void creds_free_secret(char **s)
{
	if (*s) {
		OPENSSL_cleanse(*s, strlen(*s));
		free(*s);
		*s = NULL;
	}
}

char *creds_dup_or_null(const char *s)
{
	return s && *s ? strdup(s) : NULL;
}

int creds_chain_create(const struct creds_chain_options *o, struct creds_chain **out, char *err,
                       size_t err_len)
{
	struct creds_chain *c;

	*out = NULL;
	if ((o->profile && !*o->profile) || (o->role_arn && !*o->role_arn)) {
		snprintf(err, err_len, "empty %s",
		         o->profile && !*o->profile ? "profile name" : "--role-arn");
		return -EINVAL;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	for (int i = 0; i < E_COUNT; i++) {
		/* Start-up only (see creds_chain.h): nothing setenv()s concurrently. */
		const char *v = getenv(env_names[i]); /* NOLINT(concurrency-mt-unsafe) */
		if (v && *v && !(c->env[i] = strdup(v)))
			goto nomem;
	}
	if ((o->profile && !(c->profile = strdup(o->profile))) ||
	    (o->role_arn && !(c->role_arn = strdup(o->role_arn))) ||
	    (o->region && !(c->region = strdup(o->region))) ||
	    (o->net.ca_file && !(c->ca_file = strdup(o->net.ca_file))) ||
	    (o->net.proxy && !(c->proxy = strdup(o->net.proxy))))
		goto nomem;
	c->net = o->net;
	c->net.ca_file = c->ca_file;
	c->net.proxy = c->proxy;
	c->net.netrc_file = NULL; /* no password of a manifest's host goes to AWS */
	*out = c;
	return 0;
nomem:
	creds_chain_free(c);
	return -ENOMEM;
}

void creds_chain_free(struct creds_chain *c)
{
	if (!c)
		return;
	for (int i = 0; i < E_COUNT; i++)
		creds_free_secret(&c->env[i]);
	free(c->profile);
	free(c->role_arn);
	free(c->region);
	free(c->ca_file);
	free(c->proxy);
	free(c);
}

const char *creds_env(const struct creds_chain *c, enum env_var v)
{
	return c->env[v];
}

const char *creds_source_name(enum creds_source s)
{
	switch (s) {
	case CREDS_SOURCE_ENV:
		return "environment";
	case CREDS_SOURCE_WEB_IDENTITY:
		return "web identity";
	case CREDS_SOURCE_PROFILE:
		return "shared files";
	case CREDS_SOURCE_CONTAINER:
		return "container";
	case CREDS_SOURCE_IMDS:
		return "instance metadata";
	default:
		return "?";
	}
}

int creds_set_origin(struct s3_creds *out, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&out->origin, fmt, ap);
	va_end(ap);
	if (n >= 0)
		return 0;
	out->origin = NULL;
	s3_creds_free(out);
	return -ENOMEM;
}

/* ------------------------------------------------------------------ helpers */

/* A path from a variable or a profile: a leading "~/" is $HOME. NULL with *rc set. */
char *creds_expand_home(const struct creds_chain *c, const char *path, int *rc, char *err,
                        size_t err_len)
{
	char *out = NULL;

	if (strncmp(path, "~/", 2) == 0) {
		if (!creds_env(c, E_HOME)) {
			snprintf(err, err_len, "%s starts with ~/ but HOME is not set", path);
			*rc = -EINVAL;
			return NULL;
		}
		if (asprintf(&out, "%s/%s", creds_env(c, E_HOME), path + 2) < 0)
			out = NULL;
	} else {
		out = strdup(path);
	}
	if (!out)
		*rc = -ENOMEM;
	return out;
}

/* A token file's content without surrounding blanks and newlines (Kubernetes writes none,
 * editors add one). Read at every fetch: the kubelet rotates it. */
int creds_read_token_file(const struct creds_chain *c, const char *path, char **token, char *err,
                          size_t err_len)
{
	char *full, *text = NULL, why[300];
	size_t len = 0, start = 0;
	int rc = 0;

	*token = NULL;
	full = creds_expand_home(c, path, &rc, err, err_len);
	if (!full)
		return rc;
	rc = s3_creds_read_file(full, &text, &len, why, sizeof(why));
	if (rc) {
		if (rc == -ENOENT)
			snprintf(err, err_len, "token file %s does not exist", full);
		else
			snprintf(err, err_len, "token file: %s", why);
		goto out;
	}
	while (len > 0 && strchr(" \t\r\n", text[len - 1]))
		len--;
	while (start < len && strchr(" \t\r\n", text[start]))
		start++;
	if (start == len || memchr(text + start, '\0', len - start)) {
		snprintf(err, err_len, "token file %s is empty", full);
		rc = -EINVAL;
		goto out;
	}
	*token = strndup(text + start, len - start);
	rc = *token ? 0 : -ENOMEM;
out:
	if (text) {
		OPENSSL_cleanse(text, len);
		free(text);
	}
	free(full);
	return rc;
}

/* Appends "&key=value" (form-encoded) to *body. */

/* Adds "Name: value" to *list; -ENOMEM. The line is cleansed: it may hold a token. */
int creds_add_header(struct curl_slist **list, const char *name, const char *value)
{
	char *line = NULL;
	struct curl_slist *next;

	if (asprintf(&line, "%s: %s", name, value) < 0)
		return -ENOMEM;
	next = curl_slist_append(*list, line);
	OPENSSL_cleanse(line, strlen(line));
	free(line);
	if (!next)
		return -ENOMEM;
	*list = next;
	return 0;
}

/* ------------------------------------------------------------------ 1. environment */

int creds_step_env(struct creds_chain *c, struct s3_creds *out, char *err, size_t err_len)
{
	const char *id = creds_env(c, E_ACCESS_KEY), *secret = creds_env(c, E_SECRET);

	if (!id && !secret)
		return -ENOENT;
	if (!id || !secret) {
		snprintf(err, err_len, "%s is set but %s is not",
		         id ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
		         id ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
		return -EINVAL;
	}
	out->access_key_id = strdup(id);
	out->secret_access_key = strdup(secret);
	out->session_token = creds_dup_or_null(creds_env(c, E_TOKEN));
	out->origin = strdup("environment");
	if (!out->access_key_id || !out->secret_access_key ||
	    (creds_env(c, E_TOKEN) && !out->session_token) || !out->origin) {
		s3_creds_free(out);
		return -ENOMEM;
	}
	return 0;
}

/* ------------------------------------------------------------------ the chain */

typedef int (*step_fn)(struct creds_chain *c, struct s3_creds *out, char *err, size_t err_len);

static const step_fn steps[CREDS_SOURCE_COUNT] = {
    [CREDS_SOURCE_ENV] = creds_step_env,
    [CREDS_SOURCE_WEB_IDENTITY] = creds_step_web_identity,
    [CREDS_SOURCE_PROFILE] = creds_step_profile,
    [CREDS_SOURCE_CONTAINER] = creds_step_container,
    [CREDS_SOURCE_IMDS] = creds_step_imds,
};

int creds_chain_fetch(struct creds_chain *c, enum creds_source source, struct s3_creds *out,
                      char *err, size_t err_len)
{
	int rc;

	memset(out, 0, sizeof(*out));
	err[0] = '\0';
	rc = steps[source](c, out, err, err_len);
	if (rc == -ENOENT && !err[0])
		snprintf(err, err_len, "%s: no longer configured", creds_source_name(source));
	return rc;
}

int creds_chain_resolve(struct creds_chain *c, enum creds_source *source, struct s3_creds *out,
                        char *err, size_t err_len)
{
	char why[512], tried[1024] = "";
	size_t used = 0;
	int rc = -ENOENT;

	memset(out, 0, sizeof(*out));
	/* Explicit choices: that source alone, and its failure is the mount's. */
	if (c->role_arn || c->profile) {
		*source = c->role_arn ? CREDS_SOURCE_WEB_IDENTITY : CREDS_SOURCE_PROFILE;
		rc = creds_chain_fetch(c, *source, out, why, sizeof(why));
		if (rc)
			snprintf(err, err_len, "%s%s", c->role_arn ? "" : "--profile: ", why);
		return rc == -ENOENT ? -EINVAL : rc;
	}
	for (int s = 0; s < CREDS_SOURCE_COUNT; s++) {
		why[0] = '\0';
		rc = steps[s](c, out, why, sizeof(why));
		if (rc == 0) {
			*source = (enum creds_source)s;
			return 0;
		}
		if (rc == -ENOMEM) {
			snprintf(err, err_len, "out of memory");
			return rc;
		}
		if (rc != -ENOENT)
			util_log(UTIL_LOG_WARN, "S3 credentials: %s: %s; trying the next source",
			         creds_source_name((enum creds_source)s), why);
		if (why[0] && used < sizeof(tried)) {
			int n = snprintf(tried + used, sizeof(tried) - used, "%s%s: %s",
			                 used ? "; " : "", creds_source_name((enum creds_source)s),
			                 why);
			used += n > 0 ? (size_t)n : 0;
		}
	}
	snprintf(err, err_len, "%s", tried[0] ? tried : "no source is configured");
	return -ENOENT;
}

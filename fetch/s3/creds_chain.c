/*
 * The credential chain (see creds_chain.h). Each step is a function that returns 0 with
 * credentials, -ENOENT when it is not configured (the next step is tried quietly), or
 * another -errno with one line in err when it is configured and failed.
 */
#include "fetch/s3/creds_chain.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "fetch/s3/creds_doc.h"
#include "fetch/s3/creds_http.h"
#include "fetch/s3/creds_process.h"
#include "fetch/s3/sigv4.h"
#include "util/log.h"

/* source_profile chains longer than this are refused (the CLI has no bound; a loop is
 * caught by name before). */
#define PROFILE_DEPTH_MAX 8
/* Instance metadata and container endpoints answer at once or not at all: a machine
 * without them moves on in well under a second. */
#define METADATA_CONNECT_MS 300
#define METADATA_TIMEOUT_MS 1000
/* STS and GitHub's token endpoint are remote services. */
#define REMOTE_CONNECT_MS 5000
#define REMOTE_TIMEOUT_MS 15000
#define IMDS_DEFAULT "http://169.254.169.254"
#define CONTAINER_HOST "http://169.254.170.2"

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

struct creds_chain {
	char *env[E_COUNT]; /* the snapshot: NULL for unset or empty */
	char *profile;
	char *role_arn;
	char *region;
	char *ca_file;
	char *proxy;
	struct fetch_net net; /* points into ca_file and proxy */
};

static void free_secret(char **s)
{
	if (*s) {
		OPENSSL_cleanse(*s, strlen(*s));
		free(*s);
		*s = NULL;
	}
}

static char *dup_or_null(const char *s)
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
		free_secret(&c->env[i]);
	free(c->profile);
	free(c->role_arn);
	free(c->region);
	free(c->ca_file);
	free(c->proxy);
	free(c);
}

static const char *env(const struct creds_chain *c, enum env_var v)
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

/* Sets out->origin from a format; on failure frees *out: -ENOMEM. */
static int set_origin(struct s3_creds *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int set_origin(struct s3_creds *out, const char *fmt, ...)
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
static char *expand_home(const struct creds_chain *c, const char *path, int *rc, char *err,
                         size_t err_len)
{
	char *out = NULL;

	if (strncmp(path, "~/", 2) == 0) {
		if (!env(c, E_HOME)) {
			snprintf(err, err_len, "%s starts with ~/ but HOME is not set", path);
			*rc = -EINVAL;
			return NULL;
		}
		if (asprintf(&out, "%s/%s", env(c, E_HOME), path + 2) < 0)
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
static int read_token_file(const struct creds_chain *c, const char *path, char **token, char *err,
                           size_t err_len)
{
	char *full, *text = NULL, why[300];
	size_t len = 0, start = 0;
	int rc = 0;

	*token = NULL;
	full = expand_home(c, path, &rc, err, err_len);
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
static int form_add(char **body, const char *key, const char *value)
{
	char *enc = curl_easy_escape(NULL, value, 0), *grown = NULL;
	int rc = -ENOMEM;

	if (!enc)
		return -ENOMEM;
	if (asprintf(&grown, "%s%s%s=%s", *body ? *body : "", *body ? "&" : "", key, enc) >= 0) {
		free_secret(body);
		*body = grown;
		rc = 0;
	}
	OPENSSL_cleanse(enc, strlen(enc));
	curl_free(enc);
	return rc;
}

static const char *sts_region(const struct creds_chain *c, const char *profile_region)
{
	if (c->region)
		return c->region;
	if (profile_region)
		return profile_region;
	if (env(c, E_REGION))
		return env(c, E_REGION);
	if (env(c, E_DEFAULT_REGION))
		return env(c, E_DEFAULT_REGION);
	return "us-east-1";
}

/* The regional STS endpoint, or AWS_ENDPOINT_URL_STS, or AWS_ENDPOINT_URL; no '/' at the
 * end. */
static char *sts_endpoint(const struct creds_chain *c, const char *region)
{
	const char *e = env(c, E_ENDPOINT_STS) ? env(c, E_ENDPOINT_STS) : env(c, E_ENDPOINT);
	char *out = NULL;

	if (e) {
		size_t n = strlen(e);
		while (n > 0 && e[n - 1] == '/')
			n--;
		return strndup(e, n);
	}
	if (asprintf(&out, "https://sts.%s.amazonaws.com", region) < 0)
		return NULL;
	return out;
}

static void sha256_hex(const char *data, size_t len, char hex[65])
{
	unsigned char md[32];
	unsigned int n = 0;

	EVP_Digest(data, len, md, &n, EVP_sha256(), NULL);
	for (unsigned i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

/* Adds "Name: value" to *list; -ENOMEM. The line is cleansed: it may hold a token. */
static int add_header(struct curl_slist **list, const char *name, const char *value)
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

/*
 * POSTs an STS action (form body) and parses its answer. With `signer` the request is
 * signed with those credentials (AssumeRole); without, it is not (AssumeRoleWithWebIdentity
 * carries its proof in the body).
 */
static int sts_call(const struct creds_chain *c, const char *region, const char *body,
                    const struct s3_creds *signer, struct s3_creds *out, char *err, size_t err_len)
{
	struct creds_http_response resp = {0};
	struct curl_slist *headers = NULL;
	struct sigv4_signed sig = {0};
	char *base = sts_endpoint(c, region), *host = NULL, *url = NULL, hash[65], why[300] = "";
	int rc = -ENOMEM;

	memset(out, 0, sizeof(*out));
	if (!base || asprintf(&url, "%s/", base) < 0) {
		url = NULL;
		goto out;
	}
	rc = add_header(&headers, "Content-Type", "application/x-www-form-urlencoded");
	if (rc == 0 && signer) {
		rc = fetch_net_host_header(base, &host);
		if (rc) {
			snprintf(err, err_len, "bad STS endpoint %s", base);
			goto out;
		}
		sha256_hex(body, strlen(body), hash);
		struct sigv4_request req = {
		    .method = "POST",
		    .host = host,
		    .path = "/",
		    .payload_hash = hash,
		    .region = region,
		    .service = "sts",
		    .access_key_id = signer->access_key_id,
		    .secret_access_key = signer->secret_access_key,
		    .session_token = signer->session_token,
		    .now = time(NULL),
		};
		rc = sigv4_sign(&req, &sig);
		if (rc == 0)
			rc = add_header(&headers, "Authorization", sig.authorization);
		if (rc == 0)
			rc = add_header(&headers, "x-amz-date", sig.amz_date);
		if (rc == 0 && signer->session_token && *signer->session_token)
			rc = add_header(&headers, "x-amz-security-token", signer->session_token);
	}
	if (rc)
		goto out;
	struct creds_http_request hreq = {.method = "POST",
	                                  .url = url,
	                                  .headers = headers,
	                                  .body = body,
	                                  .body_len = strlen(body),
	                                  .net = &c->net,
	                                  .connect_timeout_ms = REMOTE_CONNECT_MS,
	                                  .timeout_ms = REMOTE_TIMEOUT_MS};
	rc = creds_http(&hreq, &resp, why, sizeof(why));
	if (rc) {
		snprintf(err, err_len, "STS: %s", why);
		goto out;
	}
	rc = creds_doc_sts(resp.body, resp.len, out, why, sizeof(why));
	if (rc == 0 && resp.status != 200)
		rc = -EACCES;
	if (rc)
		snprintf(err, err_len, "%s (HTTP %ld from %s)",
		         why[0] ? why : "STS answered no credentials", resp.status, base);
out:
	if (rc == -ENOMEM && !err[0])
		snprintf(err, err_len, "out of memory");
	if (rc)
		s3_creds_free(out);
	creds_http_response_free(&resp);
	sigv4_signed_free(&sig);
	curl_slist_free_all(headers);
	free(host);
	free(url);
	free(base);
	return rc;
}

/* A RoleSessionName: $AWS_ROLE_SESSION_NAME, the profile's, else spoolfs-<time>. */
static void session_name(const struct creds_chain *c, const char *given, char out[65])
{
	if (!given)
		given = env(c, E_ROLE_SESSION);
	if (given)
		snprintf(out, 65, "%s", given);
	else
		snprintf(out, 65, "spoolfs-%lld", (long long)time(NULL));
}

static int assume_role_with_web_identity(const struct creds_chain *c, const char *role_arn,
                                         const char *session, const char *token, const char *region,
                                         struct s3_creds *out, char *err, size_t err_len)
{
	char *body = NULL, name[65];
	int rc;

	session_name(c, session, name);
	rc = form_add(&body, "Action", "AssumeRoleWithWebIdentity");
	if (rc == 0)
		rc = form_add(&body, "Version", "2011-06-15");
	if (rc == 0)
		rc = form_add(&body, "RoleArn", role_arn);
	if (rc == 0)
		rc = form_add(&body, "RoleSessionName", name);
	if (rc == 0)
		rc = form_add(&body, "WebIdentityToken", token);
	if (rc == 0)
		rc = sts_call(c, region, body, NULL, out, err, err_len);
	else
		snprintf(err, err_len, "out of memory");
	free_secret(&body);
	return rc;
}

/* ------------------------------------------------------------------ 1. environment */

static int step_env(struct creds_chain *c, struct s3_creds *out, char *err, size_t err_len)
{
	const char *id = env(c, E_ACCESS_KEY), *secret = env(c, E_SECRET);

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
	out->session_token = dup_or_null(env(c, E_TOKEN));
	out->origin = strdup("environment");
	if (!out->access_key_id || !out->secret_access_key ||
	    (env(c, E_TOKEN) && !out->session_token) || !out->origin) {
		s3_creds_free(out);
		return -ENOMEM;
	}
	return 0;
}

/* ------------------------------------------------------------------ 2. web identity */

/* A fresh OIDC token from GitHub Actions' endpoint for the audience STS expects. */
static int github_token(const struct creds_chain *c, char **token, char *err, size_t err_len)
{
	struct creds_http_response resp = {0};
	struct curl_slist *headers = NULL;
	const char *base = env(c, E_GITHUB_URL);
	char *url = NULL, *bearer = NULL, why[300] = "";
	int rc = -ENOMEM;

	*token = NULL;
	if (asprintf(&url, "%s%saudience=sts.amazonaws.com", base, strchr(base, '?') ? "&" : "?") <
	    0) {
		url = NULL;
		goto out;
	}
	if (asprintf(&bearer, "Bearer %s", env(c, E_GITHUB_TOKEN)) < 0) {
		bearer = NULL;
		goto out;
	}
	rc = add_header(&headers, "Authorization", bearer);
	if (rc == 0)
		rc = add_header(&headers, "Accept", "application/json");
	if (rc)
		goto out;
	struct creds_http_request req = {.method = "GET",
	                                 .url = url,
	                                 .headers = headers,
	                                 .net = &c->net,
	                                 .connect_timeout_ms = REMOTE_CONNECT_MS,
	                                 .timeout_ms = REMOTE_TIMEOUT_MS};
	rc = creds_http(&req, &resp, why, sizeof(why));
	if (rc) {
		snprintf(err, err_len, "GitHub's OIDC token endpoint: %s", why);
		goto out;
	}
	if (resp.status != 200) {
		snprintf(err, err_len,
		         "GitHub's OIDC token endpoint answered HTTP %ld (does the job have "
		         "permissions: id-token: write?)",
		         resp.status);
		rc = -EACCES;
		goto out;
	}
	rc = creds_doc_json_string(resp.body, resp.len, "value", token);
	if (rc == -EINVAL)
		snprintf(err, err_len, "GitHub's OIDC token endpoint answered no \"value\"");
out:
	if (rc == -ENOMEM && !err[0])
		snprintf(err, err_len, "out of memory");
	creds_http_response_free(&resp);
	curl_slist_free_all(headers);
	free_secret(&bearer);
	free(url);
	return rc;
}

static int step_web_identity(struct creds_chain *c, struct s3_creds *out, char *err, size_t err_len)
{
	const char *file = env(c, E_WEB_TOKEN_FILE);
	const char *role = c->role_arn ? c->role_arn : env(c, E_ROLE_ARN);
	const char *from;
	char *token = NULL;
	int rc;

	if (c->role_arn) {
		if (file) {
			rc = read_token_file(c, file, &token, err, err_len);
			from = "AWS_WEB_IDENTITY_TOKEN_FILE";
		} else if (env(c, E_GITHUB_URL) && env(c, E_GITHUB_TOKEN)) {
			rc = github_token(c, &token, err, err_len);
			from = "GitHub Actions";
		} else {
			snprintf(
			    err, err_len,
			    "--role-arn needs a web identity token: AWS_WEB_IDENTITY_TOKEN_FILE, "
			    "or in GitHub Actions ACTIONS_ID_TOKEN_REQUEST_URL and "
			    "ACTIONS_ID_TOKEN_REQUEST_TOKEN (give the job permissions: "
			    "id-token: write)");
			return -EINVAL;
		}
	} else {
		if (!file && !role)
			return -ENOENT;
		if (!file || !role) {
			/* AWS_ROLE_ARN alone is common (for other tools): not ours to use. */
			if (!file)
				return -ENOENT;
			snprintf(err, err_len,
			         "AWS_WEB_IDENTITY_TOKEN_FILE is set but AWS_ROLE_ARN is not");
			return -EINVAL;
		}
		rc = read_token_file(c, file, &token, err, err_len);
		from = "AWS_WEB_IDENTITY_TOKEN_FILE";
	}
	if (rc == 0)
		rc = assume_role_with_web_identity(c, role, NULL, token, sts_region(c, NULL), out,
		                                   err, err_len);
	if (rc == 0)
		rc = set_origin(out, "web identity: role %s, token from %s", role, from);
	free_secret(&token);
	return rc;
}

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
		free_secret(&p->v[i]);
}

static int take_profile_key(void *ctx, const char *k, size_t kn, const char *v, size_t vn)
{
	struct profile *p = ctx;

	for (int i = 0; i < P_COUNT; i++) {
		if (strlen(pkey_names[i]) == kn && strncasecmp(k, pkey_names[i], kn) == 0) {
			free_secret(&p->v[i]);
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

	if (env(c, var)) {
		*path = expand_home(c, env(c, var), &rc, err, err_len);
	} else if (env(c, E_HOME)) {
		if (asprintf(path, "%s/%s", env(c, E_HOME), dflt) < 0) {
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

static int step_container(struct creds_chain *c, struct s3_creds *out, char *err, size_t err_len);
static int step_imds(struct creds_chain *c, struct s3_creds *out, char *err, size_t err_len);

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
	out->session_token = dup_or_null(p->v[P_TOKEN]);
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
		rc = step_env(c, src, err, err_len);
	else if (strcmp(cs, "Ec2InstanceMetadata") == 0)
		rc = step_imds(c, src, err, err_len);
	else if (strcmp(cs, "EcsContainer") == 0)
		rc = step_container(c, src, err, err_len);
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
	char *body = NULL, session[65];
	int rc;

	session_name(c, p->v[P_SESSION_NAME], session);
	rc = form_add(&body, "Action", "AssumeRole");
	if (rc == 0)
		rc = form_add(&body, "Version", "2011-06-15");
	if (rc == 0)
		rc = form_add(&body, "RoleArn", p->v[P_ROLE_ARN]);
	if (rc == 0)
		rc = form_add(&body, "RoleSessionName", session);
	if (rc == 0 && p->v[P_EXTERNAL_ID])
		rc = form_add(&body, "ExternalId", p->v[P_EXTERNAL_ID]);
	if (rc == 0 && p->v[P_DURATION])
		rc = form_add(&body, "DurationSeconds", p->v[P_DURATION]);
	if (rc == 0) {
		char why[400] = "";
		rc = sts_call(c, sts_region(c, p->v[P_REGION]), body, src, out, why, sizeof(why));
		if (rc)
			snprintf(err, err_len, "profile [%s]: AssumeRole %s: %s", name,
			         p->v[P_ROLE_ARN], why);
	}
	free_secret(&body);
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
			rc = read_token_file(c, p.v[P_WEB_TOKEN_FILE], &token, err, err_len);
			if (rc == 0)
				rc = assume_role_with_web_identity(
				    c, p.v[P_ROLE_ARN], p.v[P_SESSION_NAME], token,
				    sts_region(c, p.v[P_REGION]), out, err, err_len);
			free_secret(&token);
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
static int step_profile(struct creds_chain *c, struct s3_creds *out, char *err, size_t err_len)
{
	const char *name = c->profile ? c->profile : env(c, E_PROFILE);
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
	if (rc == -ENOENT && (c->profile || env(c, E_PROFILE)))
		rc = -EINVAL;
	if (rc == 0)
		rc = set_origin(out, "%s%s%s [%s]", f.creds ? f.creds_path : "",
		                f.creds && f.config ? " and " : "", f.config ? f.config_path : "",
		                name);
out:
	files_free(&f);
	return rc;
}

/* ------------------------------------------------------------------ 4. container */

/*
 * The hosts a FULL_URI may name over plain http, as the SDKs allow: loopback, and the ECS
 * (169.254.170.2) and EKS Pod Identity (169.254.170.23, fd00:ec2::23) agents. Any host
 * over https.
 */
static bool container_host_allowed(const char *url, char *host_out, size_t host_len)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL;
	bool ok = false;

	snprintf(host_out, host_len, "?");
	if (!u || curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK)
		goto out;
	snprintf(host_out, host_len, "%s", host);
	if (strcmp(scheme, "https") == 0) {
		ok = true;
		goto out;
	}
	if (strcmp(scheme, "http") != 0)
		goto out;
	struct in_addr a4;
	struct in6_addr a6;
	char bare[64];
	size_t n = strlen(host);
	if (n >= 2 && host[0] == '[' && n - 2 < sizeof(bare)) {
		snprintf(bare, sizeof(bare), "%.*s", (int)(n - 2), host + 1);
		if (inet_pton(AF_INET6, bare, &a6) == 1) {
			struct in6_addr eks;
			inet_pton(AF_INET6, "fd00:ec2::23", &eks);
			ok = IN6_IS_ADDR_LOOPBACK(&a6) || memcmp(&a6, &eks, sizeof(eks)) == 0;
		}
	} else if (inet_pton(AF_INET, host, &a4) == 1) {
		uint32_t h = ntohl(a4.s_addr);
		ok = (h >> 24) == 127 || strcmp(host, "169.254.170.2") == 0 ||
		     strcmp(host, "169.254.170.23") == 0;
	} else {
		ok = strcasecmp(host, "localhost") == 0;
	}
out:
	curl_free(scheme);
	curl_free(host);
	curl_url_cleanup(u);
	return ok;
}

static int step_container(struct creds_chain *c, struct s3_creds *out, char *err, size_t err_len)
{
	struct creds_http_response resp = {0};
	struct curl_slist *headers = NULL;
	char *url = NULL, *token = NULL, host[256], shown[512], why[300] = "";
	int rc = -ENOMEM;

	if (env(c, E_CONTAINER_REL)) {
		if (asprintf(&url, "%s%s%s", CONTAINER_HOST,
		             env(c, E_CONTAINER_REL)[0] == '/' ? "" : "/",
		             env(c, E_CONTAINER_REL)) < 0) {
			url = NULL;
			goto out;
		}
	} else if (env(c, E_CONTAINER_FULL)) {
		if (!container_host_allowed(env(c, E_CONTAINER_FULL), host, sizeof(host))) {
			snprintf(err, err_len,
			         "AWS_CONTAINER_CREDENTIALS_FULL_URI names %s: over http only "
			         "loopback, 169.254.170.2 and 169.254.170.23 are allowed",
			         host);
			rc = -EACCES;
			goto out;
		}
		if (!(url = strdup(env(c, E_CONTAINER_FULL))))
			goto out;
	} else {
		return -ENOENT;
	}
	util_redact_url(url, shown, sizeof(shown));
	if (env(c, E_CONTAINER_TOKEN_FILE)) {
		rc = read_token_file(c, env(c, E_CONTAINER_TOKEN_FILE), &token, err, err_len);
		if (rc)
			goto out;
	} else if (env(c, E_CONTAINER_TOKEN) && !(token = strdup(env(c, E_CONTAINER_TOKEN)))) {
		rc = -ENOMEM;
		goto out;
	}
	if (token &&
	    (strpbrk(token, "\r\n") || (rc = add_header(&headers, "Authorization", token)))) {
		if (rc != -ENOMEM) {
			snprintf(err, err_len,
			         "the container authorization token holds a line break");
			rc = -EINVAL;
		}
		goto out;
	}
	struct creds_http_request req = {.method = "GET",
	                                 .url = url,
	                                 .headers = headers,
	                                 .net = &c->net,
	                                 .metadata_endpoint = true,
	                                 .connect_timeout_ms = METADATA_CONNECT_MS,
	                                 .timeout_ms = 2 * METADATA_TIMEOUT_MS};
	rc = creds_http(&req, &resp, why, sizeof(why));
	if (rc) {
		snprintf(err, err_len, "%s", why);
		goto out;
	}
	if (resp.status != 200) {
		snprintf(err, err_len, "%s answered HTTP %ld", shown, resp.status);
		rc = -EACCES;
		goto out;
	}
	rc = creds_doc_json(resp.body, resp.len, 0, out, why, sizeof(why));
	if (rc) {
		snprintf(err, err_len, "%s: %s", shown, why);
		goto out;
	}
	rc = set_origin(out, "container endpoint %s", shown);
out:
	if (rc == -ENOMEM && !err[0])
		snprintf(err, err_len, "out of memory");
	creds_http_response_free(&resp);
	curl_slist_free_all(headers);
	free_secret(&token);
	free(url);
	return rc;
}

/* ------------------------------------------------------------------ 5. IMDSv2 */

static int imds_request(const struct creds_chain *c, const char *method, const char *url,
                        struct curl_slist *headers, struct creds_http_response *resp, char *err,
                        size_t err_len)
{
	struct creds_http_request req = {.method = method,
	                                 .url = url,
	                                 .headers = headers,
	                                 .net = &c->net,
	                                 .metadata_endpoint = true,
	                                 .connect_timeout_ms = METADATA_CONNECT_MS,
	                                 .timeout_ms = METADATA_TIMEOUT_MS};
	char why[300] = "";
	int rc = creds_http(&req, resp, why, sizeof(why));

	if (rc) {
		snprintf(err, err_len, "%s", why);
		return rc;
	}
	if (resp->status != 200) {
		snprintf(err, err_len, "%s %s answered HTTP %ld", method, url, resp->status);
		creds_http_response_free(resp);
		return -EACCES;
	}
	return 0;
}

static int step_imds(struct creds_chain *c, struct s3_creds *out, char *err, size_t err_len)
{
	struct creds_http_response resp = {0};
	struct curl_slist *put_h = NULL, *get_h = NULL;
	const char *disabled = env(c, E_IMDS_DISABLED);
	char *base = NULL, *url = NULL, *token = NULL, *role = NULL, why[300] = "";
	int rc = -ENOMEM;

	if (disabled && strcasecmp(disabled, "true") == 0)
		return -ENOENT;
	const char *e = env(c, E_IMDS_ENDPOINT) ? env(c, E_IMDS_ENDPOINT) : IMDS_DEFAULT;
	size_t n = strlen(e);
	while (n > 0 && e[n - 1] == '/')
		n--;
	if (!(base = strndup(e, n)))
		goto out;
	if (asprintf(&url, "%s/latest/api/token", base) < 0 ||
	    add_header(&put_h, "X-aws-ec2-metadata-token-ttl-seconds", "21600"))
		goto out;
	rc = imds_request(c, "PUT", url, put_h, &resp, why, sizeof(why));
	if (rc) {
		/* No instance metadata here: not an error, the chain just ends. */
		snprintf(err, err_len, "no IMDSv2 token: %s", why);
		rc = rc == -EHOSTUNREACH ? -ENOENT : rc;
		goto out;
	}
	token = strndup(resp.body, strcspn(resp.body, "\r\n"));
	creds_http_response_free(&resp);
	rc = -ENOMEM;
	if (!token || add_header(&get_h, "X-aws-ec2-metadata-token", token))
		goto out;
	free(url);
	if (asprintf(&url, "%s/latest/meta-data/iam/security-credentials/", base) < 0) {
		url = NULL;
		goto out;
	}
	rc = imds_request(c, "GET", url, get_h, &resp, err, err_len);
	if (rc)
		goto out;
	role = strndup(resp.body, strcspn(resp.body, "\r\n"));
	creds_http_response_free(&resp);
	rc = -ENOMEM;
	if (!role)
		goto out;
	if (!*role || strchr(role, '/')) {
		snprintf(err, err_len,
		         "instance metadata names no IAM role (no instance profile?)");
		rc = -ENOENT;
		goto out;
	}
	free(url);
	if (asprintf(&url, "%s/latest/meta-data/iam/security-credentials/%s", base, role) < 0) {
		url = NULL;
		goto out;
	}
	rc = imds_request(c, "GET", url, get_h, &resp, err, err_len);
	if (rc)
		goto out;
	rc = creds_doc_json(resp.body, resp.len, 0, out, why, sizeof(why));
	if (rc) {
		snprintf(err, err_len, "instance metadata role %s: %s", role, why);
		goto out;
	}
	rc = set_origin(out, "instance metadata (IMDSv2) role %s", role);
out:
	if (rc == -ENOMEM && !err[0])
		snprintf(err, err_len, "out of memory");
	creds_http_response_free(&resp);
	curl_slist_free_all(put_h);
	curl_slist_free_all(get_h);
	free_secret(&token);
	free(role);
	free(url);
	free(base);
	return rc;
}

/* ------------------------------------------------------------------ the chain */

typedef int (*step_fn)(struct creds_chain *c, struct s3_creds *out, char *err, size_t err_len);

static const step_fn steps[CREDS_SOURCE_COUNT] = {
    [CREDS_SOURCE_ENV] = step_env,         [CREDS_SOURCE_WEB_IDENTITY] = step_web_identity,
    [CREDS_SOURCE_PROFILE] = step_profile, [CREDS_SOURCE_CONTAINER] = step_container,
    [CREDS_SOURCE_IMDS] = step_imds,
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

/*
 * STS (AssumeRole, AssumeRoleWithWebIdentity) and step 2 of the chain, web identity: a
 * token file, or GitHub Actions' OIDC endpoint with --role-arn (see creds_chain.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>

#include "util/hex.h"
#include "fetch/s3/creds_chain_i.h"
#include "fetch/s3/creds_doc.h"
#include "fetch/s3/creds_http.h"
#include "fetch/s3/sigv4.h"

static int form_add(char **body, const char *key, const char *value)
{
	char *enc = curl_easy_escape(NULL, value, 0), *grown = NULL;
	int rc = -ENOMEM;

	if (!enc)
		return -ENOMEM;
	if (asprintf(&grown, "%s%s%s=%s", *body ? *body : "", *body ? "&" : "", key, enc) >= 0) {
		creds_free_secret(body);
		*body = grown;
		rc = 0;
	}
	OPENSSL_cleanse(enc, strlen(enc));
	curl_free(enc);
	return rc;
}

const char *creds_sts_region(const struct creds_chain *c, const char *profile_region)
{
	if (c->region)
		return c->region;
	if (profile_region)
		return profile_region;
	if (creds_env(c, E_REGION))
		return creds_env(c, E_REGION);
	if (creds_env(c, E_DEFAULT_REGION))
		return creds_env(c, E_DEFAULT_REGION);
	return "us-east-1";
}

/* The regional STS endpoint, or AWS_ENDPOINT_URL_STS, or AWS_ENDPOINT_URL; no '/' at the
 * end. */
static char *sts_endpoint(const struct creds_chain *c, const char *region)
{
	const char *e =
	    creds_env(c, E_ENDPOINT_STS) ? creds_env(c, E_ENDPOINT_STS) : creds_env(c, E_ENDPOINT);
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
	rc = creds_add_header(&headers, "Content-Type", "application/x-www-form-urlencoded");
	if (rc == 0 && signer) {
		rc = fetch_net_host_header(base, &host);
		if (rc) {
			snprintf(err, err_len, "bad STS endpoint %s", base);
			goto out;
		}
		rc = util_sha256_hex(body, strlen(body), hash);
		if (rc)
			goto out;
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
			rc = creds_add_header(&headers, "Authorization", sig.authorization);
		if (rc == 0)
			rc = creds_add_header(&headers, "x-amz-date", sig.amz_date);
		if (rc == 0 && signer->session_token && *signer->session_token)
			rc = creds_add_header(&headers, "x-amz-security-token",
			                      signer->session_token);
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
		given = creds_env(c, E_ROLE_SESSION);
	if (given)
		snprintf(out, 65, "%s", given);
	else
		snprintf(out, 65, "spoolfs-%lld", (long long)time(NULL));
}

/*
 * An STS action for role_arn: its form (Action, Version, RoleArn, RoleSessionName, then the
 * pairs of `more`, name and value, up to a NULL name; a NULL value leaves its pair out),
 * sent signed by `signer` or unsigned (NULL).
 */
static int sts_action(const struct creds_chain *c, const char *action, const char *role_arn,
                      const char *session, const char *const *more, const char *region,
                      const struct s3_creds *signer, struct s3_creds *out, char *err,
                      size_t err_len)
{
	char *body = NULL, name[65];
	int rc;

	session_name(c, session, name);
	rc = form_add(&body, "Action", action);
	if (rc == 0)
		rc = form_add(&body, "Version", "2011-06-15");
	if (rc == 0)
		rc = form_add(&body, "RoleArn", role_arn);
	if (rc == 0)
		rc = form_add(&body, "RoleSessionName", name);
	for (size_t i = 0; rc == 0 && more[i]; i += 2)
		if (more[i + 1])
			rc = form_add(&body, more[i], more[i + 1]);
	if (rc == 0)
		rc = sts_call(c, region, body, signer, out, err, err_len);
	else
		snprintf(err, err_len, "out of memory");
	creds_free_secret(&body);
	return rc;
}

int creds_sts_web_identity(const struct creds_chain *c, const char *role_arn, const char *session,
                           const char *token, const char *region, struct s3_creds *out, char *err,
                           size_t err_len)
{
	const char *const more[] = {"WebIdentityToken", token, NULL};

	return sts_action(c, "AssumeRoleWithWebIdentity", role_arn, session, more, region, NULL,
	                  out, err, err_len);
}

int creds_sts_assume_role(const struct creds_chain *c, const char *role_arn, const char *session,
                          const char *external_id, const char *duration, const char *region,
                          const struct s3_creds *src, struct s3_creds *out, char *err,
                          size_t err_len)
{
	const char *const more[] = {"ExternalId", external_id, "DurationSeconds", duration, NULL};

	return sts_action(c, "AssumeRole", role_arn, session, more, region, src, out, err, err_len);
}

/* ------------------------------------------------------------------ 2. web identity */

/* A fresh OIDC token from GitHub Actions' endpoint for the audience STS expects. */
static int github_token(const struct creds_chain *c, char **token, char *err, size_t err_len)
{
	struct creds_http_response resp = {0};
	struct curl_slist *headers = NULL;
	const char *base = creds_env(c, E_GITHUB_URL);
	char *url = NULL, *bearer = NULL, why[300] = "";
	int rc = -ENOMEM;

	*token = NULL;
	if (asprintf(&url, "%s%saudience=sts.amazonaws.com", base, strchr(base, '?') ? "&" : "?") <
	    0) {
		url = NULL;
		goto out;
	}
	if (asprintf(&bearer, "Bearer %s", creds_env(c, E_GITHUB_TOKEN)) < 0) {
		bearer = NULL;
		goto out;
	}
	rc = creds_add_header(&headers, "Authorization", bearer);
	if (rc == 0)
		rc = creds_add_header(&headers, "Accept", "application/json");
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
	creds_free_secret(&bearer);
	free(url);
	return rc;
}

int creds_step_web_identity(struct creds_chain *c, struct s3_creds *out, char *err, size_t err_len)
{
	const char *file = creds_env(c, E_WEB_TOKEN_FILE);
	const char *role = c->role_arn ? c->role_arn : creds_env(c, E_ROLE_ARN);
	const char *from;
	char *token = NULL;
	int rc;

	if (c->role_arn) {
		if (file) {
			rc = creds_read_token_file(c, file, &token, err, err_len);
			from = "AWS_WEB_IDENTITY_TOKEN_FILE";
		} else if (creds_env(c, E_GITHUB_URL) && creds_env(c, E_GITHUB_TOKEN)) {
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
		rc = creds_read_token_file(c, file, &token, err, err_len);
		from = "AWS_WEB_IDENTITY_TOKEN_FILE";
	}
	if (rc == 0)
		rc = creds_sts_web_identity(c, role, NULL, token, creds_sts_region(c, NULL), out,
		                            err, err_len);
	if (rc == 0)
		rc = creds_set_origin(out, "web identity: role %s, token from %s", role, from);
	creds_free_secret(&token);
	return rc;
}

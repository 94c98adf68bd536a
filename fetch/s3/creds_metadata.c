/*
 * Steps 4 and 5 of the chain: container credentials and instance metadata (IMDSv2), both
 * at link-local addresses the requests for credentials alone may reach (creds_http.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fetch/s3/creds_chain_i.h"
#include "fetch/s3/creds_doc.h"
#include "fetch/s3/creds_http.h"
#include "util/log.h"

/* Instance metadata and container endpoints answer at once or not at all: a machine
 * without them moves on in well under a second. */
#define METADATA_CONNECT_MS 300
#define METADATA_TIMEOUT_MS 1000
#define IMDS_DEFAULT "http://169.254.169.254"
#define CONTAINER_HOST "http://169.254.170.2"

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

int creds_step_container(struct creds_chain *c, struct s3_creds *out, char *err, size_t err_len)
{
	struct creds_http_response resp = {0};
	struct curl_slist *headers = NULL;
	char *url = NULL, *token = NULL, host[256], shown[512], why[300] = "";
	int rc = -ENOMEM;

	if (creds_env(c, E_CONTAINER_REL)) {
		if (asprintf(&url, "%s%s%s", CONTAINER_HOST,
		             creds_env(c, E_CONTAINER_REL)[0] == '/' ? "" : "/",
		             creds_env(c, E_CONTAINER_REL)) < 0) {
			url = NULL;
			goto out;
		}
	} else if (creds_env(c, E_CONTAINER_FULL)) {
		if (!container_host_allowed(creds_env(c, E_CONTAINER_FULL), host, sizeof(host))) {
			snprintf(err, err_len,
			         "AWS_CONTAINER_CREDENTIALS_FULL_URI names %s: over http only "
			         "loopback, 169.254.170.2 and 169.254.170.23 are allowed",
			         host);
			rc = -EACCES;
			goto out;
		}
		if (!(url = strdup(creds_env(c, E_CONTAINER_FULL))))
			goto out;
	} else {
		return -ENOENT;
	}
	util_redact_url(url, shown, sizeof(shown));
	if (creds_env(c, E_CONTAINER_TOKEN_FILE)) {
		rc = creds_read_token_file(c, creds_env(c, E_CONTAINER_TOKEN_FILE), &token, err,
		                           err_len);
		if (rc)
			goto out;
	} else if (creds_env(c, E_CONTAINER_TOKEN) &&
	           !(token = strdup(creds_env(c, E_CONTAINER_TOKEN)))) {
		rc = -ENOMEM;
		goto out;
	}
	if (token &&
	    (strpbrk(token, "\r\n") || (rc = creds_add_header(&headers, "Authorization", token)))) {
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
	rc = creds_set_origin(out, "container endpoint %s", shown);
out:
	if (rc == -ENOMEM && !err[0])
		snprintf(err, err_len, "out of memory");
	creds_http_response_free(&resp);
	curl_slist_free_all(headers);
	creds_free_secret(&token);
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

int creds_step_imds(struct creds_chain *c, struct s3_creds *out, char *err, size_t err_len)
{
	struct creds_http_response resp = {0};
	struct curl_slist *put_h = NULL, *get_h = NULL;
	const char *disabled = creds_env(c, E_IMDS_DISABLED);
	char *base = NULL, *url = NULL, *token = NULL, *role = NULL, why[300] = "";
	int rc = -ENOMEM;

	if (disabled && strcasecmp(disabled, "true") == 0)
		return -ENOENT;
	const char *e =
	    creds_env(c, E_IMDS_ENDPOINT) ? creds_env(c, E_IMDS_ENDPOINT) : IMDS_DEFAULT;
	size_t n = strlen(e);
	while (n > 0 && e[n - 1] == '/')
		n--;
	if (!(base = strndup(e, n)))
		goto out;
	if (asprintf(&url, "%s/latest/api/token", base) < 0 ||
	    creds_add_header(&put_h, "X-aws-ec2-metadata-token-ttl-seconds", "21600"))
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
	if (!token || creds_add_header(&get_h, "X-aws-ec2-metadata-token", token))
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
	rc = creds_set_origin(out, "instance metadata (IMDSv2) role %s", role);
out:
	if (rc == -ENOMEM && !err[0])
		snprintf(err, err_len, "out of memory");
	creds_http_response_free(&resp);
	curl_slist_free_all(put_h);
	curl_slist_free_all(get_h);
	creds_free_secret(&token);
	free(role);
	free(url);
	free(base);
	return rc;
}

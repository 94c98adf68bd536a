/*
 * One blocking HTTP request to a credential endpoint (STS, the container endpoint,
 * instance metadata, GitHub's OIDC token endpoint), with the shared network settings
 * (fetch_net_apply) and a bounded answer. Called by the chain at mount time and by the
 * credentials' refresh thread: never by a FUSE thread's read, never under a lock.
 */
#ifndef SPOOLFS_FETCH_S3_CREDS_HTTP_H
#define SPOOLFS_FETCH_S3_CREDS_HTTP_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>

#include "fetch/http/net.h"

struct creds_http_request {
	const char *method; /* "GET", "PUT", "POST" */
	const char *url;
	struct curl_slist *headers; /* may be NULL; may hold secrets (never logged) */
	const char *body;           /* NULL: none */
	size_t body_len;
	const struct fetch_net *net; /* trust store and proxy; its link-local rule applies... */
	/* ...unless this is an endpoint the AWS SDKs themselves reach there (instance
	 * metadata, container credentials): allowed for this request alone, without any
	 * proxy (a proxy cannot reach the machine's own link-local addresses). */
	bool metadata_endpoint;
	long connect_timeout_ms;
	long timeout_ms;
};

struct creds_http_response {
	long status; /* 0 when there was no answer */
	char *body;  /* NUL-terminated, malloc'd; may hold secrets: cleanse with _free */
	size_t len;
};

/*
 * Performs req. 0 when an answer came (any status: the caller judges it), else -errno with
 * a line in err naming the host (never the query, never a header): -EHOSTUNREACH (no
 * answer, a timeout), -EACCES (refused by the address policy), -EFBIG (an answer over
 * CREDS_DOC_MAX), -ENOMEM.
 */
int creds_http(const struct creds_http_request *req, struct creds_http_response *resp, char *err,
               size_t err_len);
void creds_http_response_free(struct creds_http_response *resp);

#endif

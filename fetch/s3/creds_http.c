/* See creds_http.h. */
#include "fetch/s3/creds_http.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "fetch/s3/creds_doc.h"
#include "util/log.h"

struct sink {
	char *buf;
	size_t len;
	bool too_big;
	bool nomem;
};

static size_t on_body(char *data, size_t size, size_t nmemb, void *ud)
{
	struct sink *s = ud;
	size_t n = size * nmemb;
	char *grown;

	if (s->len + n > CREDS_DOC_MAX) {
		s->too_big = true;
		return CURL_WRITEFUNC_ERROR;
	}
	grown = malloc(s->len + n + 1);
	if (!grown) {
		s->nomem = true;
		return CURL_WRITEFUNC_ERROR;
	}
	if (s->buf) {
		memcpy(grown, s->buf, s->len);
		OPENSSL_cleanse(s->buf, s->len);
		free(s->buf);
	}
	memcpy(grown + s->len, data, n);
	s->len += n;
	grown[s->len] = '\0';
	s->buf = grown;
	return n;
}

int creds_http(const struct creds_http_request *req, struct creds_http_response *resp, char *err,
               size_t err_len)
{
	struct fetch_net net = *req->net;
	struct fetch_net_guard guard;
	struct sink sink = {0};
	char errbuf[CURL_ERROR_SIZE] = "", shown[512];
	CURL *easy;
	CURLcode res;
	int rc;

	memset(resp, 0, sizeof(*resp));
	util_redact_url(req->url, shown, sizeof(shown));
	easy = curl_easy_init();
	if (!easy)
		return -ENOMEM;
	if (req->metadata_endpoint) {
		net.allow_link_local = true;
		net.proxy = NULL;
	}
	fetch_net_apply(easy, &net, &guard);
	if (req->metadata_endpoint)
		curl_easy_setopt(easy, CURLOPT_NOPROXY, "*");
	curl_easy_setopt(easy, CURLOPT_URL, req->url);
	curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L); /* headers hold tokens */
	curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, req->method);
	if (strcmp(req->method, "GET") != 0) {
		curl_easy_setopt(easy, CURLOPT_POSTFIELDS, req->body ? req->body : "");
		curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE,
		                 (long)(req->body ? req->body_len : 0));
	}
	curl_easy_setopt(easy, CURLOPT_HTTPHEADER, req->headers);
	curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(easy, CURLOPT_WRITEDATA, &sink);
	curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, errbuf);
	if (req->connect_timeout_ms)
		curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, req->connect_timeout_ms);
	if (req->timeout_ms)
		curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, req->timeout_ms);
	res = curl_easy_perform(easy);
	curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &resp->status);
	if (sink.nomem) {
		rc = -ENOMEM;
		goto out;
	}
	if (sink.too_big) {
		snprintf(err, err_len, "%s answered over %u bytes", shown, CREDS_DOC_MAX);
		rc = -EFBIG;
		goto out;
	}
	if (res != CURLE_OK) {
		if (guard.refused)
			snprintf(err, err_len, "%s", guard.why);
		else
			snprintf(err, err_len, "no answer from %s: %s", shown,
			         errbuf[0] ? errbuf : curl_easy_strerror(res));
		rc = guard.refused ? -EACCES : -EHOSTUNREACH;
		goto out;
	}
	if (!sink.buf && !(sink.buf = calloc(1, 1))) {
		rc = -ENOMEM;
		goto out;
	}
	resp->body = sink.buf;
	resp->len = sink.len;
	sink.buf = NULL;
	rc = 0;
out:
	if (sink.buf) {
		OPENSSL_cleanse(sink.buf, sink.len);
		free(sink.buf);
	}
	curl_easy_cleanup(easy);
	return rc;
}

void creds_http_response_free(struct creds_http_response *resp)
{
	if (resp->body) {
		OPENSSL_cleanse(resp->body, resp->len);
		free(resp->body);
	}
	memset(resp, 0, sizeof(*resp));
}

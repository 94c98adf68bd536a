/*
 * Fetches the manifest text. A blocking curl easy transfer is fine here: it runs before
 * the mount and before any other thread exists.
 */
#include "fetch/source/source.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "fetch/http/http.h"
#include "util/log.h"

struct buffer {
	char *data;
	size_t len;
	size_t cap;
	size_t max; /* bytes of text allowed */
	bool too_big;
};

static size_t on_data(char *data, size_t size, size_t nmemb, void *userdata)
{
	struct buffer *b = userdata;
	size_t n = size * nmemb;

	/* Refused at the first byte past the bound: a short count ends the transfer. */
	if (n > b->max - b->len) {
		b->too_big = true;
		return CURL_WRITEFUNC_ERROR;
	}
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 64 * 1024;
		while (cap < b->len + n + 1)
			cap *= 2;
		if (cap > b->max + 1)
			cap = b->max + 1;
		char *p = realloc(b->data, cap);
		if (!p)
			return CURL_WRITEFUNC_ERROR;
		b->data = p;
		b->cap = cap;
	}
	memcpy(b->data + b->len, data, n);
	b->len += n;
	b->data[b->len] = '\0';
	return n;
}

/* Turns a local path into a file:// URL (percent-encoding it) so one resolver serves all. */
static int path_to_url(const char *path, char **url)
{
	char resolved[PATH_MAX];
	CURLU *u = NULL;
	int rc = -ENOMEM;

	if (!realpath(path, resolved))
		return -errno;
	u = curl_url();
	if (!u)
		goto out;
	if (curl_url_set(u, CURLUPART_SCHEME, "file", 0) != CURLUE_OK ||
	    curl_url_set(u, CURLUPART_PATH, resolved, CURLU_URLENCODE) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_URL, url, 0) != CURLUE_OK) {
		rc = -EINVAL;
		goto out;
	}
	rc = 0;
out:
	curl_url_cleanup(u);
	return rc;
}

/* What a download's Retry-After may ask for: the manifest is waited for the same way. */
#define MANIFEST_RETRY_AFTER_CAP_MS 20000

static size_t on_header(char *line, size_t size, size_t nitems, void *userdata)
{
	http_response_header(userdata, line, size * nitems);
	return size * nitems;
}

/*
 * One GET of url into buf. Returns 0 (with *code), or -errno with err written;
 * *retry_after_s is -1 when trying again cannot help, else the server's wish (0: none).
 */
static int fetch_once(CURL *easy, const char *url, const char *shown, struct buffer *buf,
                      const struct fetch_net_guard *guard, long *code, int *retry_after_s,
                      char *err, size_t err_len)
{
	struct http_response resp;
	char errbuf[CURL_ERROR_SIZE] = "";
	CURLcode res;

	http_response_reset(&resp);
	*retry_after_s = -1;
	curl_easy_setopt(easy, CURLOPT_WRITEDATA, buf);
	curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(easy, CURLOPT_HEADERDATA, &resp);
	curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, errbuf);
	res = curl_easy_perform(easy);
	*code = 0;
	curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, code);
	if (buf->too_big) {
		snprintf(
		    err, err_len,
		    "manifest %s is larger than %zu bytes (--max-manifest-size raises the bound)",
		    shown, buf->max);
		return -EFBIG;
	}
	bool local = strncmp(url, "file:", 5) == 0;
	char why[512];
	if (res != CURLE_OK && guard->refused) {
		snprintf(err, err_len, "cannot fetch manifest %s: %s", shown, guard->why);
		return -EACCES;
	}
	if (res != CURLE_OK && fetch_net_redirect_refused(easy, res, url, why, sizeof(why))) {
		snprintf(err, err_len, "cannot fetch manifest %s: %s", shown, why);
		return -EACCES;
	}
	if (res != CURLE_OK) {
		snprintf(err, err_len, "cannot fetch manifest %s: %s", shown,
		         errbuf[0] ? errbuf : curl_easy_strerror(res));
		if (!local && http_curl_error_is_transient(res))
			*retry_after_s = 0;
		return -EIO;
	}
	if (!local && *code != 200) {
		snprintf(err, err_len, "cannot fetch manifest %s: HTTP %ld", shown, *code);
		if (http_status_is_transient(*code))
			*retry_after_s = resp.retry_after_s > 0 ? resp.retry_after_s : 0;
		return -EIO;
	}
	return 0;
}

int source_manifest_read(const char *source, const struct source_options *opts, char **text,
                         size_t *len, char **base_url, int64_t *mtime, char *err, size_t err_len)
{
	struct buffer buf = {.max =
	                         opts->max_bytes ? opts->max_bytes : SOURCE_MANIFEST_DEFAULT_MAX};
	struct fetch_net_guard guard;
	struct curl_slist *signed_headers = NULL;
	char *url = NULL, shown[512];
	CURL *easy = NULL;
	long code = 0;
	int rc, retry_after_s;

	if (strstr(source, "://")) {
		/* curl would refuse another scheme with the code it also gives a garbled HTTP
		 * answer, which is retried: say so at once instead. */
		if (strncasecmp(source, "http://", 7) != 0 &&
		    strncasecmp(source, "https://", 8) != 0 &&
		    strncasecmp(source, "file://", 7) != 0) {
			util_redact_url(source, shown, sizeof(shown));
			snprintf(err, err_len,
			         "cannot read manifest %s: unsupported scheme (http://, https://,"
			         " file:// or a local path; s3://bucket for a bucket)",
			         shown);
			rc = -EPROTONOSUPPORT;
			goto out;
		}
		url = strdup(source);
		rc = url ? 0 : -ENOMEM;
	} else {
		rc = path_to_url(source, &url);
	}
	if (rc) {
		/* A local path holds no secret, and redacting would cut it at a '?' or '#'. */
		snprintf(err, err_len, "cannot read manifest %s: %s",
		         strstr(source, "://") ? util_redact_url(source, shown, sizeof(shown))
		                               : source,
		         strerror(-rc));
		goto out;
	}
	util_redact_url(url, shown, sizeof(shown));
	easy = curl_easy_init();
	if (!easy) {
		rc = -ENOMEM;
		snprintf(err, err_len, "out of memory");
		goto out;
	}
	curl_easy_setopt(easy, CURLOPT_URL, url);
	fetch_net_apply(easy, &opts->net, &guard);
	curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https,file");
	curl_easy_setopt(easy, CURLOPT_REDIR_PROTOCOLS_STR, http_redirect_protocols(url));
	curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(easy, CURLOPT_MAXREDIRS, 5L);
	curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_data);
	/* No bound on the whole transfer's time: a large manifest on a slow link takes what it
	 * takes; one that stops or trickles is dropped after net.stall_timeout_s
	 * (fetch_net_apply), and one past buf.max at its first byte too many. */
	curl_easy_setopt(easy, CURLOPT_ACCEPT_ENCODING, "");
	/* Last-Modified over HTTP, the file's mtime for file://: what entries without an mtime
	 * show (a manifest's files are no newer than the manifest). */
	curl_easy_setopt(easy, CURLOPT_FILETIME, 1L);

	/* A CI job that cannot mount fails: a passing 503 or a dropped connection gets the
	 * tries a download would. */
	if (opts->sign)
		curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
	for (unsigned attempt = 1;; attempt++) {
		buf.len = 0; /* an empty answer must not leave the last try's text behind */
		if (buf.data)
			buf.data[0] = '\0';
		buf.too_big = false;
		guard.refused = false;
		curl_slist_free_all(signed_headers);
		signed_headers = NULL;
		if (opts->sign) { /* signed afresh for each try: a signature expires */
			uint64_t gen;
			rc = opts->sign(opts->sign_ctx, url, &signed_headers, &gen);
			if (rc) {
				snprintf(err, err_len,
				         "cannot sign the request for manifest %s: %s", shown,
				         strerror(-rc));
				break;
			}
			curl_easy_setopt(easy, CURLOPT_HTTPHEADER, signed_headers);
		}
		rc =
		    fetch_once(easy, url, shown, &buf, &guard, &code, &retry_after_s, err, err_len);
		if (rc == 0 || !fetch_net_retry_wait(&opts->net, attempt, retry_after_s,
		                                     MANIFEST_RETRY_AFTER_CAP_MS, err))
			break;
	}
	if (rc)
		goto out;
	if (!buf.data) {
		buf.data = strdup("");
		if (!buf.data) {
			rc = -ENOMEM;
			goto out;
		}
	}
	/* Relative URLs resolve against where the manifest really was, after redirects. */
	char *effective = NULL;
	curl_easy_getinfo(easy, CURLINFO_EFFECTIVE_URL, &effective);
	if (effective && strcmp(effective, url) != 0) {
		char *copy = strdup(effective);
		if (!copy) {
			rc = -ENOMEM;
			goto out;
		}
		free(url);
		url = copy;
	}
	curl_off_t filetime = -1;
	if (curl_easy_getinfo(easy, CURLINFO_FILETIME_T, &filetime) != CURLE_OK)
		filetime = -1;
	*mtime = filetime > 0 ? (int64_t)filetime : 0;
	*text = buf.data;
	*len = buf.len;
	*base_url = url;
	buf.data = NULL;
	url = NULL;
	rc = 0;
out:
	curl_easy_cleanup(easy);
	curl_slist_free_all(signed_headers);
	free(buf.data);
	free(url);
	return rc;
}

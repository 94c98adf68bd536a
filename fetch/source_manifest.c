/*
 * Fetches the manifest text. A blocking curl easy transfer is fine here: it runs before
 * the mount and before any other thread exists.
 */
#include "fetch/source.h"

#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fetch/log.h"

struct buffer {
	char *data;
	size_t len;
	size_t cap;
	bool too_big;
};

static size_t on_data(char *data, size_t size, size_t nmemb, void *userdata)
{
	struct buffer *b = userdata;
	size_t n = size * nmemb;

	if (b->len + n + 1 > SOURCE_MANIFEST_MAX) {
		b->too_big = true;
		return CURL_WRITEFUNC_ERROR;
	}
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 64 * 1024;
		while (cap < b->len + n + 1)
			cap *= 2;
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

int source_manifest_read(const char *source, const struct source_options *opts, char **text,
                         size_t *len, char **base_url, char *err, size_t err_len)
{
	struct buffer buf = {0};
	char *url = NULL, shown[512], errbuf[CURL_ERROR_SIZE] = "";
	CURL *easy = NULL;
	CURLcode res;
	long code = 0;
	int rc;

	if (strstr(source, "://")) {
		url = strdup(source);
		rc = url ? 0 : -ENOMEM;
	} else {
		rc = path_to_url(source, &url);
	}
	if (rc) {
		snprintf(err, err_len, "cannot read manifest %s: %s", source, strerror(-rc));
		goto out;
	}
	fetch_redact_url(url, shown, sizeof(shown));
	easy = curl_easy_init();
	if (!easy) {
		rc = -ENOMEM;
		snprintf(err, err_len, "out of memory");
		goto out;
	}
	curl_easy_setopt(easy, CURLOPT_URL, url);
	fetch_net_apply(easy, &opts->net);
	curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https,file");
	curl_easy_setopt(easy, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(easy, CURLOPT_MAXREDIRS, 5L);
	curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(easy, CURLOPT_WRITEDATA, &buf);
	curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, errbuf);

	curl_easy_setopt(easy, CURLOPT_TIMEOUT, (long)opts->total_timeout_s);

	curl_easy_setopt(easy, CURLOPT_ACCEPT_ENCODING, "");

	res = curl_easy_perform(easy);
	curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &code);
	if (buf.too_big) {
		rc = -EFBIG;
		snprintf(err, err_len, "manifest %s is larger than %u bytes", shown,
		         SOURCE_MANIFEST_MAX);
		goto out;
	}
	if (res != CURLE_OK) {
		rc = -EIO;
		snprintf(err, err_len, "cannot fetch manifest %s: %s", shown,
		         errbuf[0] ? errbuf : curl_easy_strerror(res));
		goto out;
	}
	if (strncmp(url, "file:", 5) != 0 && code != 200) {
		rc = -EIO;
		snprintf(err, err_len, "cannot fetch manifest %s: HTTP %ld", shown, code);
		goto out;
	}
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
	*text = buf.data;
	*len = buf.len;
	*base_url = url;
	buf.data = NULL;
	url = NULL;
	rc = 0;
out:
	curl_easy_cleanup(easy);
	free(buf.data);
	free(url);
	return rc;
}

/*
 * The requests `spoolfs publish` and `spoolfs verify` make of an S3 store (s3_i.h): signed
 * with the mount's client (source_s3.c), one curl easy handle each, blocking or on the
 * multi loop pub_s3_run runs in the calling thread. Nothing here is shared with another
 * thread: the credentials provider has its own lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

#include "fetch/http/http.h"
#include "fetch/s3/s3_list.h"
#include "fetch/s3/source_s3.h"
#include "publish/s3_i.h"

volatile sig_atomic_t pub_s3_interrupted;

/* The body's next bytes: from memory, or read at base + off of the file (a part's range),
 * so parts of one file go up at once from one descriptor and none is held in memory. */
static size_t on_read(char *buf, size_t size, size_t nitems, void *ctx)
{
	struct up_body *b = ctx;
	uint64_t left = b->len - b->off;
	size_t want = size * nitems < left ? size * nitems : (size_t)left;
	ssize_t n;

	if (b->mem) {
		n = (ssize_t)want;
		memcpy(buf, b->mem + b->off, want);
	} else {
		while ((n = pread(b->fd, buf, want, (off_t)(b->base + b->off))) < 0 &&
		       errno == EINTR)
			;
		/* A file shorter than planned: the store must not get a short body. */
		if (n < 0 || (n == 0 && want))
			return CURL_READFUNC_ABORT;
	}
	b->off += (uint64_t)n;
	return (size_t)n;
}

static int on_seek(void *ctx, curl_off_t offset, int origin)
{
	struct up_body *b = ctx;

	if (origin != SEEK_SET || offset < 0 || (uint64_t)offset > b->len)
		return CURL_SEEKFUNC_CANTSEEK;
	b->off = (uint64_t)offset;
	return CURL_SEEKFUNC_OK;
}

static size_t on_answer(char *data, size_t size, size_t nmemb, void *ctx)
{
	struct up_xfer *x = ctx;
	size_t n = size * nmemb, room = x->answer_max - x->answer_len;

	/* Kept to its bound, read to its end: the connection stays usable. */
	n = n < room ? n : room;
	if (x->answer_len + n > x->answer_cap) {
		size_t cap = x->answer_cap ? x->answer_cap : 16384;
		while (cap < x->answer_len + n)
			cap *= 2;
		char *v = realloc(x->answer, cap);
		if (!v)
			return 0; /* the transfer fails: out of memory */
		x->answer = v;
		x->answer_cap = cap;
	}
	memcpy(x->answer + x->answer_len, data, n);
	x->answer_len += n;
	return size * nmemb;
}

void pub_s3_hex(const unsigned char *d, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", d[i]);
}

int pub_s3_unhex(const char *s, unsigned char *d, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return -EINVAL;
		d[i] = (unsigned char)v;
	}
	return 0;
}

/* An answer's ETag header: what completes a multipart upload names each part by. */
static size_t on_header(char *line, size_t size, size_t nitems, void *ctx)
{
	struct up_xfer *x = ctx;
	size_t len = size * nitems;

	if (len > 5 && strncasecmp(line, "etag:", 5) == 0) {
		const char *v = line + 5;
		size_t n;
		while (*v == ' ' || *v == '\t')
			v++;
		n = strcspn(v, "\r\n");
		if (n < sizeof(x->etag))
			snprintf(x->etag, sizeof(x->etag), "%.*s", (int)n, v);
	}
	return len;
}

/* A request ends at the first interrupt (a stalled store would hold it for minutes),
 * but for one that cleans up (x->to_the_end). */
static int on_progress(void *ctx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
	const struct up_xfer *x = ctx;

	(void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
	return pub_s3_interrupted && !x->to_the_end;
}

int pub_s3_easy(struct pub_s3 *s, struct up_xfer *x)
{
	x->easy = curl_easy_init();
	if (!x->easy)
		return -ENOMEM;
	curl_easy_setopt(x->easy, CURLOPT_URL, x->url);
	fetch_net_apply(x->easy, s3_source_net(s->src), &x->guard);
	curl_easy_setopt(x->easy, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(x->easy, CURLOPT_PATH_AS_IS, 1L);
	curl_easy_setopt(x->easy, CURLOPT_HTTPHEADER, x->headers);
	curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION, on_answer);
	curl_easy_setopt(x->easy, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(x->easy, CURLOPT_ERRORBUFFER, x->errbuf);
	curl_easy_setopt(x->easy, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(x->easy, CURLOPT_HEADERDATA, x);
	curl_easy_setopt(x->easy, CURLOPT_PRIVATE, x);
	curl_easy_setopt(x->easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(x->easy, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(x->easy, CURLOPT_XFERINFODATA, x);
	curl_easy_setopt(x->easy, CURLOPT_NOPROGRESS, 0L);
	return 0;
}

int pub_s3_put_setup(struct pub_s3 *s, struct up_xfer *x, const char *key,
                     const struct sigv4_param *params, size_t n_params,
                     const unsigned char sha256[PUB_SHA256_LEN], const char *cache_control,
                     bool if_absent)
{
	char payload[2 * PUB_SHA256_LEN + 1], b64[4 * ((PUB_SHA256_LEN + 2) / 3) + 1];
	struct sigv4_header h[4] = {{"x-amz-checksum-sha256", b64}};
	size_t n = 1;
	int rc;

	/* A part takes its object's headers from the upload's creation, not from itself. */
	if (cache_control) {
		h[n++] = (struct sigv4_header){"Cache-Control", cache_control};
		h[n++] = (struct sigv4_header){"Content-Type", "application/octet-stream"};
	}
	if (if_absent)
		h[n++] = (struct sigv4_header){"If-None-Match", "*"};
	pub_s3_hex(sha256, PUB_SHA256_LEN, payload);
	EVP_EncodeBlock((unsigned char *)b64, sha256, PUB_SHA256_LEN);
	rc = s3_source_request(s->src, "PUT", key, params, n_params, h, n, payload, &x->url,
	                       &x->headers);
	if (rc)
		return rc;
	/* curl would ask the store to confirm before a large body: a round trip lost. */
	struct curl_slist *more = curl_slist_append(x->headers, "Expect:");
	if (!more)
		return -ENOMEM;
	x->headers = more;
	rc = pub_s3_easy(s, x);
	if (rc)
		return rc;
	curl_easy_setopt(x->easy, CURLOPT_UPLOAD, 1L);
	curl_easy_setopt(x->easy, CURLOPT_INFILESIZE_LARGE, (curl_off_t)x->body.len);
	curl_easy_setopt(x->easy, CURLOPT_READFUNCTION, on_read);
	curl_easy_setopt(x->easy, CURLOPT_READDATA, &x->body);
	curl_easy_setopt(x->easy, CURLOPT_SEEKFUNCTION, on_seek);
	curl_easy_setopt(x->easy, CURLOPT_SEEKDATA, &x->body);
	return 0;
}

void pub_s3_xfer_free(struct up_xfer *x)
{
	if (!x)
		return;
	curl_easy_cleanup(x->easy);
	curl_slist_free_all(x->headers);
	free(x->url);
	free(x->answer);
	if (x->body.fd >= 0)
		close(x->body.fd);
	free(x);
}

struct up_xfer *pub_s3_xfer_new(void)
{
	struct up_xfer *x = calloc(1, sizeof(*x));

	if (x) {
		x->body.fd = -1;
		x->answer_max = ANSWER_MAX;
	}
	return x;
}

/* "HTTP 400 BadDigest: the message" from an answer, or curl's reason. */
void pub_s3_why(struct up_xfer *x, CURLcode res, long code, char *why, size_t cap)
{
	struct s3_list_result r = {0};

	if (res != CURLE_OK) {
		snprintf(why, cap, "%s",
		         res == CURLE_ABORTED_BY_CALLBACK ? "interrupted"
		         : x->guard.refused               ? x->guard.why
		         : x->errbuf[0]                   ? x->errbuf
		                                          : curl_easy_strerror(res));
		return;
	}
	if (x->answer_len && s3_list_parse(x->answer, x->answer_len, NULL, &r, NULL, 0) == 0 &&
	    r.kind == S3_DOC_ERROR)
		snprintf(why, cap, "HTTP %ld %s%s%s", code, r.error.code,
		         r.error.message[0] ? ": " : "", r.error.message);
	else
		snprintf(why, cap, "HTTP %ld", code);
	s3_list_result_free(&r);
}

/* Runs one request set up on x to its end: the status, or 0 with why set. */
long pub_s3_perform(struct up_xfer *x, char *why, size_t cap)
{
	CURLcode res = curl_easy_perform(x->easy);
	long code = 0;

	curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
	if (res != CURLE_OK || code / 100 != 2)
		pub_s3_why(x, res, code, why, cap);
	return res == CURLE_OK ? code : 0;
}

static int cmp_have(const void *a, const void *b)
{
	return strcmp(((const struct pub_s3_have *)a)->key, ((const struct pub_s3_have *)b)->key);
}

void pub_s3_list_free(struct pub_s3_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i].key);
	free(l->v);
	*l = (struct pub_s3_list){0};
}

int pub_s3_list_add(struct pub_s3_list *l, const char *key, uint64_t size, int64_t mtime)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 1024;
		struct pub_s3_have *v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	if (!(l->v[l->n].key = strdup(key)))
		return -ENOMEM;
	l->v[l->n].size = size;
	l->v[l->n].mtime = mtime;
	atomic_init(&l->v[l->n].named, false);
	l->n++;
	return 0;
}

struct pub_s3_have *pub_s3_list_find(const struct pub_s3_list *l, const char *key)
{
	struct pub_s3_have want = {.key = (char *)key};

	return l->n ? bsearch(&want, l->v, l->n, sizeof(*l->v), cmp_have) : NULL;
}

int64_t pub_s3_list_size(const struct pub_s3_list *l, const char *key)
{
	struct pub_s3_have *hit = pub_s3_list_find(l, key);

	return hit ? (int64_t)hit->size : -1;
}

int pub_s3_list(struct pub_s3 *s, const char *under, struct pub_s3_list *l)
{
	char *full = NULL, *token = NULL;
	const char *prefix = s3_source_prefix(s->src);
	int rc = asprintf(&full, "%s%s", prefix, under) < 0 ? -ENOMEM : 0;
	size_t plen = strlen(prefix);

	for (unsigned page = 0; rc == 0; page++) {
		struct sigv4_param p[4] = {
		    {"list-type", "2"}, {"prefix", full}, {"encoding-type", "url"}};
		struct up_xfer *x = pub_s3_xfer_new();
		struct s3_list_result r = {0};
		char why[700] = "";
		long code;
		if (token)
			p[3] = (struct sigv4_param){"continuation-token", token};
		rc = x ? pub_s3_prepare(s, x, "GET", NULL, p, token ? 4 : 3, NULL, 0, NULL, 0)
		       : -ENOMEM;
		if (rc) {
			pub_s3_xfer_free(x);
			break;
		}
		x->answer_max = S3_LIST_DEFAULT_MAX_BYTES;
		code = pub_s3_perform(x, why, sizeof(why));
		if (code == 200 && x->answer_len >= x->answer_max)
			snprintf(why, sizeof(why), "a listing page over %u bytes",
			         S3_LIST_DEFAULT_MAX_BYTES);
		else if (code == 200 &&
		         (s3_list_parse(x->answer, x->answer_len, NULL, &r, why, sizeof(why)) ||
		          r.kind != S3_DOC_LIST))
			snprintf(why + strlen(why), sizeof(why) - strlen(why), "%s",
			         why[0] ? "" : "not a listing");
		pub_s3_xfer_free(x);
		if (why[0]) {
			pub_say("", s->display, under, why, false);
			s3_list_result_free(&r);
			rc = code == 403 ? -EACCES : -EIO;
			break;
		}
		for (size_t i = 0; i < r.page.n_objects && rc == 0; i++) {
			const struct s3_object *o = &r.page.objects[i];
			if (strncmp(o->key, prefix, plen) == 0)
				rc = pub_s3_list_add(l, o->key + plen, o->size, o->mtime);
		}
		free(token);
		token = NULL;
		if (rc == 0 && r.page.is_truncated) {
			if (!r.page.next_token || page + 1 == LIST_MAX_PAGES) {
				pub_say("", s->display, under, "a listing that does not end",
				        false);
				rc = -EIO;
			} else if (!(token = strdup(r.page.next_token))) {
				rc = -ENOMEM;
			}
		}
		bool more = r.page.is_truncated;
		s3_list_result_free(&r);
		if (!more)
			break;
	}
	free(token);
	free(full);
	if (rc == 0 && l->n)
		qsort(l->v, l->n, sizeof(*l->v), cmp_have);
	return rc;
}

double pub_s3_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Runs x, made with rc, to its end and frees it: the status, or 0 with why set. */
static long run_once(struct up_xfer *x, int rc, char *why, size_t cap)
{
	long code = 0;

	if (rc)
		snprintf(why, cap, "%s", strerror(-rc));
	else
		code = pub_s3_perform(x, why, cap);
	pub_s3_xfer_free(x);
	return code;
}

/*
 * PUTs len bytes at mem to key (blocking), with its checksums; with if_absent, on the
 * condition that key is absent. The HTTP status (412: it was there), or 0 with why set.
 */
long pub_s3_put_bytes(struct pub_s3 *s, const char *key, const void *mem, size_t len,
                      const char *cache_control, bool if_absent, char *why, size_t cap)
{
	struct up_xfer *x = pub_s3_xfer_new();
	unsigned char sha256[PUB_SHA256_LEN];
	int rc;

	if (!x) {
		snprintf(why, cap, "%s", strerror(ENOMEM));
		return 0;
	}
	SHA256(mem, len, sha256);
	x->body = (struct up_body){.fd = -1, .mem = mem, .len = len};
	rc = pub_s3_put_setup(s, x, key, NULL, 0, sha256, cache_control, if_absent);
	return run_once(x, rc, why, cap);
}

struct get_sink {
	struct up_xfer *x;
	size_t (*sink)(char *data, size_t size, size_t nmemb, void *ctx);
	void *ctx;
};

/* The body of a 2xx answer goes to the caller's sink; any other is kept for its message. */
static size_t on_get(char *data, size_t size, size_t nmemb, void *ctx)
{
	struct get_sink *g = ctx;
	long code = 0;

	curl_easy_getinfo(g->x->easy, CURLINFO_RESPONSE_CODE, &code);
	return code / 100 == 2 ? g->sink(data, size, nmemb, g->ctx)
	                       : on_answer(data, size, nmemb, g->x);
}

int pub_s3_prepare(struct pub_s3 *s, struct up_xfer *x, const char *method, const char *key,
                   const struct sigv4_param *params, size_t n_params, const struct sigv4_header *h,
                   size_t n_h, const void *body, size_t len)
{
	unsigned char sha[PUB_SHA256_LEN];
	char hex[2 * PUB_SHA256_LEN + 1];
	int rc;

	if (body) {
		SHA256(body, len, sha);
		pub_s3_hex(sha, PUB_SHA256_LEN, hex);
	}
	rc = s3_source_request(s->src, method, key, params, n_params, h, n_h, body ? hex : NULL,
	                       &x->url, &x->headers);
	if (rc == 0)
		rc = pub_s3_easy(s, x);
	if (rc)
		return rc;
	if (strcmp(method, "GET") != 0)
		curl_easy_setopt(x->easy, CURLOPT_CUSTOMREQUEST, method);
	if (body) {
		curl_easy_setopt(x->easy, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(x->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	}
	return 0;
}

long pub_s3_get(struct pub_s3 *s, const char *key,
                size_t (*sink)(char *data, size_t size, size_t nmemb, void *ctx), void *ctx,
                char *why, size_t cap)
{
	struct up_xfer *x = pub_s3_xfer_new();
	struct get_sink g = {.x = x, .sink = sink, .ctx = ctx};
	int rc = x ? pub_s3_prepare(s, x, "GET", key, NULL, 0, NULL, 0, NULL, 0) : -ENOMEM;

	if (rc == 0) {
		curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION, on_get);
		curl_easy_setopt(x->easy, CURLOPT_WRITEDATA, &g);
	}
	return run_once(x, rc, why, cap);
}

long pub_s3_delete(struct pub_s3 *s, const char *key, const struct sigv4_param *params,
                   size_t n_params, char *why, size_t cap)
{
	struct up_xfer *x = pub_s3_xfer_new();
	int rc =
	    x ? pub_s3_prepare(s, x, "DELETE", key, params, n_params, NULL, 0, NULL, 0) : -ENOMEM;

	/* A DELETE cleans up (an upload's abort, the probe key): it runs after an interrupt. */
	if (x)
		x->to_the_end = true;

	return run_once(x, rc, why, cap);
}

int pub_s3_outcome(struct pub_s3 *s, struct up_xfer *x, CURLcode res, unsigned tries, char *why,
                   size_t cap)
{
	long code = 0;

	curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
	if (res == CURLE_OK && code / 100 == 2)
		return 0;
	pub_s3_why(x, res, code, why, cap);
	if ((res != CURLE_OK ? http_curl_error_is_transient(res) && !x->guard.refused
	                     : http_status_is_transient(code)) &&
	    tries < s->max_tries)
		return -EAGAIN;
	return -EIO;
}

int pub_s3_run(struct pub_s3 *s, const struct pub_s3_batch *b)
{
	CURLM *multi = curl_multi_init();
	unsigned *tries = calloc(b->n + 1, sizeof(*tries));
	double *not_before = calloc(b->n + 1, sizeof(*not_before));
	struct up_xfer **live = calloc(s->uploads, sizeof(*live));
	size_t next = 0, running = 0, waiting = 0;
	int rc = multi && tries && not_before && live ? 0 : -ENOMEM;

	while (rc == 0 || running) {
		size_t start = SIZE_MAX;
		if (pub_s3_interrupted && rc == 0)
			rc = -EINTR;
		if (rc == -EINTR)
			break; /* the running ones are cut below */
		/* Jobs to try again go before new ones, once their wait is over. */
		for (size_t i = 0; rc == 0 && waiting && running < s->uploads && i < b->n; i++) {
			if (not_before[i] > 0 && not_before[i] <= pub_s3_now()) {
				not_before[i] = 0;
				waiting--;
				start = i;
				break;
			}
		}
		while (start == SIZE_MAX && rc == 0 && running < s->uploads && next < b->n) {
			if (!b->go || b->go[next])
				start = next;
			next++;
		}
		if (start != SIZE_MAX) {
			struct up_xfer *x = NULL;
			rc = b->start(s, b->ctx, start, &x);
			if (rc == 0 && curl_multi_add_handle(multi, x->easy) != CURLM_OK) {
				pub_s3_xfer_free(x);
				rc = -ENOMEM;
			}
			if (rc == 0) {
				x->item = start;
				for (size_t k = 0; k < s->uploads; k++) {
					if (!live[k]) {
						live[k] = x;
						break;
					}
				}
				running++;
				continue; /* start as many as may run before waiting */
			}
		}
		if (!running && !waiting && (rc || next == b->n))
			break;
		int still, left;
		CURLMsg *msg;
		curl_multi_perform(multi, &still);
		while ((msg = curl_multi_info_read(multi, &left))) {
			struct up_xfer *x = NULL;
			if (msg->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
			curl_multi_remove_handle(multi, x->easy);
			for (size_t k = 0; k < s->uploads; k++)
				if (live[k] == x)
					live[k] = NULL;
			running--;
			/* Cut by the interrupt (on_progress): not a failure to say. */
			int r = msg->data.result == CURLE_ABORTED_BY_CALLBACK
			            ? -EINTR
			            : b->end(s, b->ctx, x, msg->data.result, ++tries[x->item]);
			if (r == -EAGAIN) {
				unsigned t = tries[x->item] < 5 ? tries[x->item] : 5;
				not_before[x->item] = pub_s3_now() + 0.2 * (double)(1u << t);
				waiting++;
			} else if (r && rc == 0) {
				rc = r;
			}
			pub_s3_xfer_free(x);
		}
		if (rc && !running)
			break;
		if (b->progress)
			b->progress(s, false);
		curl_multi_poll(multi, NULL, 0, 100, NULL);
	}
	/* Interrupted: what is on the way is cut; the caller takes back what it started. */
	for (size_t k = 0; live && k < s->uploads; k++) {
		if (live[k]) {
			curl_multi_remove_handle(multi, live[k]->easy);
			pub_s3_xfer_free(live[k]);
		}
	}
	if (b->progress)
		b->progress(s, true);
	curl_multi_cleanup(multi);
	free(live);
	free(tries);
	free(not_before);
	return rc;
}

/*
 * `spoolfs publish SRC s3://BUCKET/PREFIX`: uploads a staged OUT_DIR (run.c wrote it, see
 * s3.c) into an S3 store, objects first, manifest last.
 *
 * One listing of PREFIX/objects/ tells which objects the store holds already: those are
 * never sent again. Every other object goes up with a PUT whose x-amz-content-sha256 (signed)
 * and x-amz-checksum-sha256 are the sha256 its name already is, so bytes damaged on the way
 * are refused by the store, not found by a reader. The PUTs run several at a time on one
 * curl multi handle in this thread. A PUT is atomic in S3: a killed publish leaves whole
 * objects or none, and a rerun skips what is there. After the last object, a second listing
 * confirms each is present with its size; only then is the manifest written (with
 * --if-absent, conditionally, on a store that was seen to honour If-None-Match).
 *
 * Nothing here is shared with another thread: the credentials provider has its own lock.
 * Secrets stay in the signed headers and never reach a message.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "fetch/http/http.h"
#include "fetch/s3/s3_list.h"
#include "fetch/s3/source_s3.h"
#include "publish/publish_i.h"

/* What an answer's body may hold: an S3 <Error> document is far smaller. */
#define ANSWER_MAX (64u << 10)
#define LIST_MAX_PAGES 100000
#define KEY_LEN (PUB_URL_LEN) /* "objects/ab/<64 hex>" */
#define CACHE_IMMUTABLE "public, max-age=31536000, immutable"

/* One object of the staged store: its key under the prefix, its bytes, its digest. */
struct up_item {
	char key[KEY_LEN + 1];
	uint64_t size;
	unsigned char sha256[PUB_SHA256_LEN];
};

/* A body sent from a file or from memory; rewound when curl must send it again. */
struct up_body {
	int fd;
	const unsigned char *mem;
	uint64_t len, off;
};

/* One PUT in flight: owned by the multi loop. */
struct up_xfer {
	CURL *easy;
	struct curl_slist *headers;
	char *url;
	struct up_body body;
	char *answer; /* what the store answered, at most answer_max bytes kept */
	size_t answer_len, answer_cap, answer_max;
	struct fetch_net_guard guard;
	char errbuf[CURL_ERROR_SIZE];
	size_t item;
};

static size_t on_read(char *buf, size_t size, size_t nitems, void *ctx)
{
	struct up_body *b = ctx;
	size_t want = size * nitems;
	ssize_t n;

	if (b->mem) {
		uint64_t left = b->len - b->off;
		n = (ssize_t)(want < left ? want : left);
		memcpy(buf, b->mem + b->off, (size_t)n);
	} else {
		while ((n = read(b->fd, buf, want)) < 0 && errno == EINTR)
			;
		if (n < 0)
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
	if (!b->mem && lseek(b->fd, (off_t)offset, SEEK_SET) < 0)
		return CURL_SEEKFUNC_FAIL;
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

static void hex(const unsigned char *d, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static int unhex(const char *s, unsigned char *d, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return -EINVAL;
		d[i] = (unsigned char)v;
	}
	return 0;
}

/* A handle for the request x->url, x->headers: the options every request of the store
 * has. 0 or -ENOMEM. */
static int easy_setup(struct pub_s3 *s, struct up_xfer *x)
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
	curl_easy_setopt(x->easy, CURLOPT_PRIVATE, x);
	curl_easy_setopt(x->easy, CURLOPT_NOSIGNAL, 1L);
	return 0;
}

/*
 * Sets up x->easy for a PUT of key with body b (its digest sha256), signed with the
 * digest, checked by the store with x-amz-checksum-sha256, and cache_control; with
 * if_absent, conditional on the key being absent. 0 or -errno.
 */
static int put_setup(struct pub_s3 *s, struct up_xfer *x, const char *key,
                     const unsigned char sha256[PUB_SHA256_LEN], const char *cache_control,
                     bool if_absent)
{
	char payload[2 * PUB_SHA256_LEN + 1], b64[4 * ((PUB_SHA256_LEN + 2) / 3) + 1];
	struct sigv4_header h[4] = {{"x-amz-checksum-sha256", b64},
	                            {"Cache-Control", cache_control},
	                            {"Content-Type", "application/octet-stream"},
	                            {"If-None-Match", "*"}};
	int rc;

	hex(sha256, PUB_SHA256_LEN, payload);
	EVP_EncodeBlock((unsigned char *)b64, sha256, PUB_SHA256_LEN);
	rc = s3_source_request(s->src, "PUT", key, NULL, 0, h, if_absent ? 4 : 3, payload, &x->url,
	                       &x->headers);
	if (rc)
		return rc;
	/* curl would ask the store to confirm before a large body: a round trip lost. */
	struct curl_slist *more = curl_slist_append(x->headers, "Expect:");
	if (!more)
		return -ENOMEM;
	x->headers = more;
	rc = easy_setup(s, x);
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

static void xfer_free(struct up_xfer *x)
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

static struct up_xfer *xfer_new(void)
{
	struct up_xfer *x = calloc(1, sizeof(*x));

	if (x) {
		x->body.fd = -1;
		x->answer_max = ANSWER_MAX;
	}
	return x;
}

/* "HTTP 400 BadDigest: the message" from an answer, or curl's reason. */
static void answer_why(struct up_xfer *x, CURLcode res, long code, char *why, size_t cap)
{
	struct s3_list_result r = {0};

	if (res != CURLE_OK) {
		snprintf(why, cap, "%s",
		         x->guard.refused ? x->guard.why
		         : x->errbuf[0]   ? x->errbuf
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
static long perform(struct up_xfer *x, char *why, size_t cap)
{
	CURLcode res = curl_easy_perform(x->easy);
	long code = 0;

	curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
	if (res != CURLE_OK || code / 100 != 2)
		answer_why(x, res, code, why, cap);
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

static int list_add(struct pub_s3_list *l, const char *key, uint64_t size)
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
	l->v[l->n++].size = size;
	return 0;
}

int64_t pub_s3_list_size(const struct pub_s3_list *l, const char *key)
{
	struct pub_s3_have want = {.key = (char *)key}, *hit;

	hit = l->n ? bsearch(&want, l->v, l->n, sizeof(*l->v), cmp_have) : NULL;
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
		struct up_xfer *x = xfer_new();
		struct s3_list_result r = {0};
		char why[700] = "";
		long code;
		if (token)
			p[3] = (struct sigv4_param){"continuation-token", token};
		rc = x ? s3_source_request(s->src, "GET", NULL, p, token ? 4 : 3, NULL, 0, NULL,
		                           &x->url, &x->headers)
		       : -ENOMEM;
		if (rc == 0)
			rc = easy_setup(s, x);
		if (rc) {
			xfer_free(x);
			break;
		}
		x->answer_max = S3_LIST_DEFAULT_MAX_BYTES;
		code = perform(x, why, sizeof(why));
		if (code == 200 && x->answer_len >= x->answer_max)
			snprintf(why, sizeof(why), "a listing page over %u bytes",
			         S3_LIST_DEFAULT_MAX_BYTES);
		else if (code == 200 &&
		         (s3_list_parse(x->answer, x->answer_len, NULL, &r, why, sizeof(why)) ||
		          r.kind != S3_DOC_LIST))
			snprintf(why + strlen(why), sizeof(why) - strlen(why), "%s",
			         why[0] ? "" : "not a listing");
		xfer_free(x);
		if (why[0]) {
			pub_say("", s->display, under, why, false);
			s3_list_result_free(&r);
			rc = code == 403 ? -EACCES : -EIO;
			break;
		}
		for (size_t i = 0; i < r.page.n_objects && rc == 0; i++) {
			const struct s3_object *o = &r.page.objects[i];
			if (strncmp(o->key, prefix, plen) == 0)
				rc = list_add(l, o->key + plen, o->size);
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

/* The staged objects: every objects/XX/<sha256> of the stage. 0 or -errno, said. */
static int stage_items(struct pub_s3 *s, struct up_item **out, size_t *n_out)
{
	struct up_item *v = NULL;
	size_t n = 0, cap = 0;
	char dir[PATH_MAX];
	int rc = 0;

	for (unsigned b = 0; b < 256 && rc == 0; b++) {
		snprintf(dir, sizeof(dir), "%s/objects/%02x", s->stage, b);
		DIR *d = opendir(dir);
		struct dirent *de;
		if (!d) {
			if (errno != ENOENT)
				rc = -errno;
			continue;
		}
		while (rc == 0 && (de = readdir(d))) {
			struct stat sb;
			if (strlen(de->d_name) != 2 * PUB_SHA256_LEN)
				continue; /* ".", "..", a temporary file of a failed run */
			if (fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
				rc = -errno;
				break;
			}
			if (n == cap) {
				size_t c = cap ? 2 * cap : 256;
				struct up_item *w = realloc(v, c * sizeof(*w));
				if (!w) {
					rc = -ENOMEM;
					break;
				}
				v = w;
				cap = c;
			}
			snprintf(v[n].key, sizeof(v[n].key), "objects/%02x/%s", b, de->d_name);
			v[n].size = (uint64_t)sb.st_size;
			if (unhex(de->d_name, v[n].sha256, PUB_SHA256_LEN) == 0)
				n++;
		}
		closedir(d);
	}
	if (rc)
		pub_say("", s->stage, "objects", strerror(-rc), false);
	*out = v;
	*n_out = n;
	return rc;
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* One line, rewritten in place, on a terminal only. */
static void progress(struct pub_s3 *s, bool last)
{
	double t = now_s();
	char sent[32], all[32], rate[32];

	if (!s->tty || (!last && t - s->shown < 0.5))
		return;
	s->shown = t;
	fprintf(stderr, "\rspoolfs publish: %zu/%zu objects, %s of %s, %zu skipped, %s/s  %s",
	        s->uploaded, s->to_upload, pub_human(s->sent_bytes, sent, sizeof(sent)),
	        pub_human(s->upload_bytes, all, sizeof(all)), s->skipped,
	        pub_human((uint64_t)(s->sent_bytes / (t - s->started + 1e-9)), rate, sizeof(rate)),
	        last ? "\n" : "");
}

/* Starts the PUT of item i on the multi handle. 0 or -errno, said. */
static int start_put(struct pub_s3 *s, CURLM *multi, const struct up_item *it, size_t i)
{
	struct up_xfer *x = xfer_new();
	char path[PATH_MAX];
	int rc = -ENOMEM;

	if (!x)
		goto fail;
	snprintf(path, sizeof(path), "%s/%s", s->stage, it->key);
	x->item = i;
	x->body.len = it->size;
	x->body.fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (x->body.fd < 0) {
		rc = -errno;
		pub_say("", s->stage, it->key, strerror(-rc), false);
		goto fail;
	}
	rc = put_setup(s, x, it->key, it->sha256, CACHE_IMMUTABLE, false);
	if (rc == 0 && curl_multi_add_handle(multi, x->easy) != CURLM_OK)
		rc = -ENOMEM;
	if (rc == 0)
		return 0;
	pub_say("", s->display, it->key, strerror(-rc), false);
fail:
	xfer_free(x);
	return rc;
}

/* A finished PUT: done, to be tried again (-EAGAIN), or failed (said). */
static int end_put(struct pub_s3 *s, struct up_xfer *x, CURLcode res, unsigned tries)
{
	const struct up_item *it = &s->items[x->item];
	long code = 0;
	char why[700];

	curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
	if (res == CURLE_OK && code / 100 == 2) {
		s->uploaded++;
		s->sent_bytes += it->size;
		return 0;
	}
	answer_why(x, res, code, why, sizeof(why));
	if ((res != CURLE_OK ? http_curl_error_is_transient(res) && !x->guard.refused
	                     : http_status_is_transient(code)) &&
	    tries < s->max_tries)
		return -EAGAIN;
	pub_say("", s->display, it->key, why, false);
	return -EIO;
}

/*
 * PUTs the items marked to go, s->uploads at a time, each tried again (after a short
 * wait) while it fails transiently. The first failure stops new ones; those running end.
 * 0 or -errno, said.
 */
static int upload_all(struct pub_s3 *s, const bool *go)
{
	CURLM *multi = curl_multi_init();
	unsigned *tries = calloc(s->n_items + 1, sizeof(*tries));
	double *not_before = calloc(s->n_items + 1, sizeof(*not_before));
	size_t next = 0, running = 0, waiting = 0;
	int rc = multi && tries && not_before ? 0 : -ENOMEM;

	s->started = now_s();
	while (rc == 0 || running) {
		/* Items to try again go before new ones, once their wait is over. */
		for (size_t i = 0; rc == 0 && waiting && running < s->uploads && i < s->n_items;
		     i++) {
			if (not_before[i] > 0 && not_before[i] <= now_s()) {
				not_before[i] = 0;
				waiting--;
				rc = start_put(s, multi, &s->items[i], i);
				running += rc == 0;
			}
		}
		while (rc == 0 && running < s->uploads && next < s->n_items) {
			size_t i = next++;
			if (!go[i])
				continue;
			rc = start_put(s, multi, &s->items[i], i);
			running += rc == 0;
		}
		if (!running && !waiting && (rc || next == s->n_items))
			break;
		int still;
		curl_multi_perform(multi, &still);
		CURLMsg *msg;
		int left;
		while ((msg = curl_multi_info_read(multi, &left))) {
			struct up_xfer *x = NULL;
			if (msg->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
			curl_multi_remove_handle(multi, x->easy);
			running--;
			int r = end_put(s, x, msg->data.result, ++tries[x->item]);
			if (r == -EAGAIN) {
				double wait =
				    0.2 * (double)(1u << (tries[x->item] < 5 ? tries[x->item] : 5));
				not_before[x->item] = now_s() + wait;
				waiting++;
			} else if (r && rc == 0) {
				rc = r;
			}
			xfer_free(x);
		}
		if (rc && !running)
			break;
		progress(s, false);
		curl_multi_poll(multi, NULL, 0, 100, NULL);
	}
	progress(s, true);
	curl_multi_cleanup(multi);
	free(tries);
	free(not_before);
	return rc;
}

/*
 * PUTs len bytes at mem to key (blocking), with its checksums; with if_absent, on the
 * condition that key is absent. The HTTP status (412: it was there), or 0 with why set.
 */
static long put_bytes(struct pub_s3 *s, const char *key, const void *mem, size_t len,
                      const char *cache_control, bool if_absent, char *why, size_t cap)
{
	struct up_xfer *x = xfer_new();
	unsigned char sha256[PUB_SHA256_LEN];
	long code = 0;
	int rc;

	if (!x) {
		snprintf(why, cap, "%s", strerror(ENOMEM));
		return 0;
	}
	SHA256(mem, len, sha256);
	x->body = (struct up_body){.fd = -1, .mem = mem, .len = len};
	rc = put_setup(s, x, key, sha256, cache_control, if_absent);
	if (rc)
		snprintf(why, cap, "%s", strerror(-rc));
	else
		code = perform(x, why, cap);
	xfer_free(x);
	return code;
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

long pub_s3_get(struct pub_s3 *s, const char *key,
                size_t (*sink)(char *data, size_t size, size_t nmemb, void *ctx), void *ctx,
                char *why, size_t cap)
{
	struct up_xfer *x = xfer_new();
	struct get_sink g = {.x = x, .sink = sink, .ctx = ctx};
	long code = 0;
	int rc =
	    x ? s3_source_request(s->src, "GET", key, NULL, 0, NULL, 0, NULL, &x->url, &x->headers)
	      : -ENOMEM;

	if (rc == 0)
		rc = easy_setup(s, x);
	if (rc) {
		snprintf(why, cap, "%s", strerror(-rc));
	} else {
		curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION, on_get);
		curl_easy_setopt(x->easy, CURLOPT_WRITEDATA, &g);
		code = perform(x, why, cap);
	}
	xfer_free(x);
	return code;
}

/* DELETEs key; what it answers is not a publish's concern. */
static void delete_key(struct pub_s3 *s, const char *key)
{
	struct up_xfer *x = xfer_new();
	char why[300];

	if (!x ||
	    s3_source_request(s->src, "DELETE", key, NULL, 0, NULL, 0, NULL, &x->url,
	                      &x->headers) != 0 ||
	    easy_setup(s, x) != 0) {
		xfer_free(x);
		return;
	}
	curl_easy_setopt(x->easy, CURLOPT_CUSTOMREQUEST, "DELETE");
	perform(x, why, sizeof(why));
	xfer_free(x);
}

/*
 * --if-absent: whether the store honours If-None-Match: * on a PUT. A probe key is written
 * twice with the condition: the second must be refused (412). Some stores (s3rver) write
 * both and answer 200: then the condition would protect nothing, and the publish refuses
 * instead of pretending. The probe key goes again either way. 0 or -errno, said.
 */
static int probe_if_absent(struct pub_s3 *s)
{
	unsigned char rnd[8];
	char key[64], why[700] = "";
	long first, second = 0;

	if (RAND_bytes(rnd, sizeof(rnd)) != 1)
		return -EIO;
	snprintf(key, sizeof(key), ".spoolfs-if-absent-probe-");
	hex(rnd, sizeof(rnd), key + strlen(key));
	first = put_bytes(s, key, "probe\n", 6, "no-cache", true, why, sizeof(why));
	if (first / 100 == 2)
		second = put_bytes(s, key, "probe\n", 6, "no-cache", true, why, sizeof(why));
	delete_key(s, key);
	if (first / 100 != 2) {
		pub_say("", s->display, key, why, false);
		return -EIO;
	}
	if (second == 412)
		return 0;
	pub_say("", s->display, "",
	        second / 100 == 2
	            ? "--if-absent refused: this store does not honour If-None-Match: * (a second"
	              " conditional write of one key succeeded), so it could not keep two"
	              " publishers from overwriting one manifest"
	            : why,
	        false);
	return second / 100 == 2 ? -EOPNOTSUPP : -EIO;
}

/* Every staged object present in the store with its size. 0, or -EIO with each missing
 * or wrong one said. */
static int confirm(struct pub_s3 *s)
{
	struct pub_s3_list have = {0};
	size_t bad = 0;
	int rc = pub_s3_list(s, "objects/", &have);

	for (size_t i = 0; rc == 0 && i < s->n_items; i++) {
		int64_t size = pub_s3_list_size(&have, s->items[i].key);
		char why[120];
		if (size == (int64_t)s->items[i].size)
			continue;
		if (size < 0)
			snprintf(why, sizeof(why), "missing from the store after its upload");
		else
			snprintf(why, sizeof(why),
			         "the store holds %" PRId64 " bytes, not %" PRIu64, size,
			         s->items[i].size);
		pub_say("", s->display, s->items[i].key, why, false);
		bad++;
	}
	pub_s3_list_free(&have);
	return rc ? rc : bad ? -EIO : 0;
}

/* Reads the staged manifest whole. 0 or -errno, said. */
static int read_manifest(struct pub_s3 *s, const char *name, char **data, size_t *len)
{
	char path[PATH_MAX];
	struct stat sb;
	int fd, rc = 0;

	*data = NULL;
	snprintf(path, sizeof(path), "%s/%s", s->stage, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &sb) != 0) {
		rc = -errno;
	} else if (!(*data = malloc((size_t)sb.st_size + 1))) {
		rc = -ENOMEM;
	} else {
		size_t got = 0;
		ssize_t n = 0;
		while (
		    got < (size_t)sb.st_size &&
		    ((n = read(fd, *data + got, (size_t)sb.st_size - got)) > 0 || errno == EINTR))
			got += n > 0 ? (size_t)n : 0;
		*len = got;
		if (n < 0)
			rc = -errno;
	}
	if (fd >= 0)
		close(fd);
	if (rc)
		pub_say("", s->stage, name, strerror(-rc), false);
	return rc;
}

int pub_s3_upload(struct pub_s3 *s, const char *manifest)
{
	struct pub_s3_list have = {0};
	bool *go = NULL;
	char *body = NULL, why[700] = "", a[32], b[32];
	size_t len = 0;
	long code;
	int rc;

	rc = s->if_absent && !s->dry_run ? probe_if_absent(s) : 0;
	if (rc == 0)
		rc = stage_items(s, &s->items, &s->n_items);
	if (rc == 0)
		rc = pub_s3_list(s, "objects/", &have);
	if (rc == 0 && !(go = calloc(s->n_items + 1, sizeof(*go))))
		rc = -ENOMEM;
	for (size_t i = 0; rc == 0 && i < s->n_items; i++) {
		/* Content-addressed: a name of the right size holds these bytes (or was
		 * damaged by hand; `spoolfs verify --deep` finds that). */
		go[i] = pub_s3_list_size(&have, s->items[i].key) != (int64_t)s->items[i].size;
		s->to_upload += go[i];
		s->upload_bytes += go[i] ? s->items[i].size : 0;
		s->skipped += !go[i];
		if (go[i] && s->dry_run)
			printf("would upload %s/%s (%s)\n", s->display, s->items[i].key,
			       pub_human(s->items[i].size, a, sizeof(a)));
	}
	if (rc == 0 && s->dry_run) {
		printf("would upload %s/%s (manifest, last)\n", s->display, manifest);
		goto out;
	}
	if (rc == 0)
		rc = upload_all(s, go);
	if (rc == 0)
		rc = confirm(s);
	if (rc == 0)
		rc = read_manifest(s, manifest, &body, &len);
	if (rc == 0) {
		code =
		    put_bytes(s, manifest, body, len, "no-cache", s->if_absent, why, sizeof(why));
		if (code == 412 && s->if_absent) {
			pub_say("", s->display, manifest,
			        "exists already (--if-absent): another publish wrote it; left as it"
			        " is",
			        false);
			rc = -EEXIST;
		} else if (code / 100 != 2) {
			pub_say("", s->display, manifest, why, false);
			rc = -EIO;
		}
	}
out:
	if (rc == 0)
		printf("spoolfs publish: %s%zu objects (%s)%s, %zu already there; %s %s/%s\n",
		       s->dry_run ? "would upload " : "", s->to_upload,
		       pub_human(s->upload_bytes, b, sizeof(b)), s->dry_run ? "" : " uploaded",
		       s->skipped, s->dry_run ? "would write" : "wrote", s->display, manifest);
	free(body);
	free(go);
	pub_s3_list_free(&have);
	return rc;
}

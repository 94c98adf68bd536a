/*
 * What the S3 side of publish/ shares (s3_client.c makes the requests; upload_s3.c and
 * multipart_s3.c use them; verify.c lists and reads). Single-threaded: every request runs
 * in the thread that calls.
 */
#ifndef SPOOLFS_PUBLISH_S3_I_H
#define SPOOLFS_PUBLISH_S3_I_H

#include <signal.h>

#include <curl/curl.h>

#include "fetch/http/net.h"
#include "fetch/s3/s3_list.h"
#include "publish/publish_i.h"

/* What an answer's body may hold: an S3 <Error> document is far smaller. */
#define ANSWER_MAX (64u << 10)
#define LIST_MAX_PAGES 100000
#define KEY_LEN (PUB_URL_LEN) /* "objects/ab/<64 hex>" */

/* One object of the staged store: its key under the prefix, its bytes, its digest. */
struct up_item {
	char key[KEY_LEN + 1];
	uint64_t size;
	unsigned char sha256[PUB_SHA256_LEN];
};

/* A body sent from memory, or from len bytes of a file at base; rewound when curl must
 * send it again. */
struct up_body {
	int fd;
	const unsigned char *mem;
	uint64_t base, len, off;
};

/* One request: owned by whoever made it (the multi loop, for a batch's). */
struct up_xfer {
	CURL *easy;
	struct curl_slist *headers;
	char *url;
	struct up_body body;
	char *answer; /* what the store answered, at most answer_max bytes kept */
	size_t answer_len, answer_cap, answer_max;
	struct fetch_net_guard guard;
	char errbuf[CURL_ERROR_SIZE];
	size_t item;            /* the batch's job it is for */
	char etag[S3_ETAG_MAX]; /* the ETag header of the answer (an uploaded part's) */
	bool to_the_end;        /* not cut by an interrupt: it cleans up (a DELETE) */
};

/* Set by SIGINT or SIGTERM during an S3 publish: staging stops, the batch stops, every
 * request but a cleaning one is cut (s3_client.c's progress callback). */
extern volatile sig_atomic_t pub_s3_interrupted;

struct up_xfer *pub_s3_xfer_new(void);
void pub_s3_xfer_free(struct up_xfer *x); /* NULL is fine */
/* Makes x->easy for x->url and x->headers, with the store's network options; its answer
 * goes to x->answer, its ETag to x->etag. 0 or -ENOMEM. */
int pub_s3_easy(struct pub_s3 *s, struct up_xfer *x);
/*
 * Sets up x (its body set) as a PUT of key with params (a part's), signed with the body's
 * sha256 and carrying it as x-amz-checksum-sha256, with cache_control (NULL: none); with
 * if_absent, on the condition the key is absent. 0 or -errno.
 */
int pub_s3_put_setup(struct pub_s3 *s, struct up_xfer *x, const char *key,
                     const struct sigv4_param *params, size_t n_params,
                     const unsigned char sha256[PUB_SHA256_LEN], const char *cache_control,
                     bool if_absent);
/* Makes x a request of method on key (NULL: the bucket) with params and headers h, signed;
 * body (len bytes in memory, the caller's until x ends) is sent when not NULL. 0 or -errno. */
int pub_s3_prepare(struct pub_s3 *s, struct up_xfer *x, const char *method, const char *key,
                   const struct sigv4_param *params, size_t n_params, const struct sigv4_header *h,
                   size_t n_h, const void *body, size_t len);
/* "HTTP 400 BadDigest: message" from the answer, or curl's reason. */
void pub_s3_why(struct up_xfer *x, CURLcode res, long code, char *why, size_t cap);
/* Runs x to its end (blocking): the status, or 0; why is set unless 2xx. */
long pub_s3_perform(struct up_xfer *x, char *why, size_t cap);
/* A blocking PUT of len bytes at mem (see pub_s3_put_setup): the status, or 0; why set
 * unless 2xx. */
long pub_s3_put_bytes(struct pub_s3 *s, const char *key, const void *mem, size_t len,
                      const char *cache_control, bool if_absent, char *why, size_t cap);
/* DELETEs key (with params: an upload's id); what it answers, as pub_s3_perform. */
long pub_s3_delete(struct pub_s3 *s, const char *key, const struct sigv4_param *params,
                   size_t n_params, char *why, size_t cap);
void pub_s3_hex(const unsigned char *d, size_t n, char *out);
int pub_s3_unhex(const char *s, unsigned char *d, size_t n);
double pub_s3_now(void); /* CLOCK_MONOTONIC seconds */

/* Requests run several at once (s->uploads) on one multi handle. */
struct pub_s3_batch {
	size_t n;       /* jobs 0..n-1 */
	const bool *go; /* NULL: every job; else only those marked */
	/* Makes job i's request into *x. 0 or -errno, said. */
	int (*start)(struct pub_s3 *s, void *ctx, size_t i, struct up_xfer **x);
	/* Job x->item's request ended with res: 0 done, -EAGAIN to be tried again (tries so
	 * far), or -errno, said (pub_s3_outcome decides the common cases). */
	int (*end)(struct pub_s3 *s, void *ctx, struct up_xfer *x, CURLcode res, unsigned tries);
	void (*progress)(struct pub_s3 *s, bool last); /* NULL: none */
	void *ctx;
};
/* Runs the batch: a job failing transiently is tried again after a growing wait; the
 * first failure stops new ones (the running ones end); an interrupt (pub_s3_interrupted)
 * cuts them all (-EINTR). 0 or the first -errno. */
int pub_s3_run(struct pub_s3 *s, const struct pub_s3_batch *b);
/* 0 (2xx), -EAGAIN (transient, tries left) or -EIO, with why set unless 0. */
int pub_s3_outcome(struct pub_s3 *s, struct up_xfer *x, CURLcode res, unsigned tries, char *why,
                   size_t cap);

/* The progress line (objects, bytes, skipped, rate), rewritten in place on a terminal
 * only; last ends it. */
void pub_s3_progress(struct pub_s3 *s, bool last);

/* Uploads the items marked in go over s->multipart_over bytes in parts (multipart_s3.c).
 * 0 or -errno, said; an upload that fails or is interrupted is aborted. */
int pub_s3_multipart(struct pub_s3 *s, const bool *go);

/* Writes o's tags into the store (tag.c), after the manifest's PUT succeeded: each names
 * the staged manifest, whose bytes it sent. With s->dry_run says what it would write. 0 or
 * -errno, said. */
int pub_tags_write_s3(struct pub_s3 *s, const struct publish_options *o);

#endif

/*
 * load_pipe.c owns the builder thread of a large manifest load (load_pipe.h): the reader
 * fills a batch of copied entries of its own, hands full batches over through a ring of
 * PIPE_DEPTH, and the builder adds them in the order they came. A reader's thread does
 * the JSON and the checks, the builder the namespace's inserts (for 100,000 entries about
 * 0.16 s and 0.25 s of CPU); batches keep the lock out of the way (one handover per
 * PIPE_BATCH entries).
 *
 * Lock: p->lock guards the ring, done and failed; p->cond is signalled when any of them
 * changes, and both sides wait on it. Nothing is called with the lock held. The reader's
 * batch being filled is the reader's alone; rc and err are the builder's until the join.
 */
#include "fetch/source/load_pipe.h"
#include "util/thread.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PIPE_BATCH 256
/* Batches queued at most: the reader waits beyond, so a slow builder bounds the memory
 * (about 400 KiB of entries), not the manifest. */
#define PIPE_DEPTH 8

/* An entry put, with its strings copied after it. */
struct queued {
	int64_t i;
	struct index_build_entry be;
	char data[];
};

/* Room for a batch's entries in its own block: one allocation per batch, not one per entry
 * made on this thread and freed on the builder's (glibc then locks this thread's arena). An
 * entry that does not fit has a block of its own. */
#define PIPE_ROOM (PIPE_BATCH * 384)

struct batch {
	size_t n, used; /* entries, and bytes of room taken */
	struct queued *q[PIPE_BATCH];
	bool own[PIPE_BATCH]; /* q[k] is a block of its own, not in room */
	_Alignas(max_align_t) char room[PIPE_ROOM];
};

struct load_pipe {
	pthread_t thread;
	load_pipe_add_fn add;
	void *ctx;
	struct batch *filling; /* the reader's, not handed over yet */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	/* Guarded by lock. */
	struct batch *ring[PIPE_DEPTH];
	size_t head, count;
	bool done;   /* the reader hands nothing more over */
	bool failed; /* an add failed: what is left is freed unadded */
	/* The builder's until joined. */
	int rc;
	char err[1024];
};

static void batch_free(struct batch *b)
{
	if (!b)
		return;
	for (size_t k = 0; k < b->n; k++)
		if (b->own[k])
			free(b->q[k]);
	free(b);
}

/* Copies s (n bytes) to *at, NUL-terminated, moving *at past it. */
static const char *put_text(char **at, const char *s, size_t n)
{
	char *d = *at;

	memcpy(d, s, n);
	d[n] = '\0';
	*at += n + 1;
	return d;
}

/* Copies entry i into b's room, or a block of its own when it does not fit (b->own). */
static struct queued *copy_entry(struct batch *b, int64_t i, const struct index_build_entry *be)
{
	struct queued *q;
	const char *const src[] = {
	    be->path,        be->sha256,        be->url,        be->etag,         be->target,
	    be->pack_sha256, be->nested_sha256, be->nested_url, be->chunk_sha256, be->chunk_url};
	size_t len[sizeof(src) / sizeof(src[0])], total = 0;
	enum { N = sizeof(src) / sizeof(src[0]) };

	for (size_t k = 0; k < N; k++) {
		len[k] = !src[k]  ? 0
		         : k == 0 ? be->path_len
		         : k == 4 ? be->target_len
		                  : strlen(src[k]);
		total += src[k] ? len[k] + 1 : 0;
	}
	total += be->stored.le ? be->stored.le_len : 0;
	size_t need =
	    (sizeof(*q) + total + _Alignof(max_align_t) - 1) & ~(_Alignof(max_align_t) - 1);
	b->own[b->n] = need > PIPE_ROOM - b->used;
	if (b->own[b->n]) {
		q = malloc(sizeof(*q) + total);
		if (!q)
			return NULL;
	} else {
		q = (struct queued *)(b->room + b->used);
		b->used += need;
	}
	q->i = i;
	q->be = *be;
	const char **const dst[N] = {&q->be.path,          &q->be.sha256,     &q->be.url,
	                             &q->be.etag,          &q->be.target,     &q->be.pack_sha256,
	                             &q->be.nested_sha256, &q->be.nested_url, &q->be.chunk_sha256,
	                             &q->be.chunk_url};
	char *at = q->data;
	for (size_t k = 0; k < N; k++)
		if (src[k])
			*dst[k] = put_text(&at, src[k], len[k]);
	if (be->stored.le) { /* bytes, not text: after the texts, no alignment needed */
		memcpy(at, be->stored.le, be->stored.le_len);
		q->be.stored.le = (const unsigned char *)at;
	}
	return q;
}

static void *builder_main(void *arg)
{
	struct load_pipe *p = arg;
	int rc = 0;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (p->count == 0 && !p->done)
			pthread_cond_wait(&p->cond, &p->lock);
		if (p->count == 0)
			break;
		struct batch *b = p->ring[p->head];
		p->head = (p->head + 1) % PIPE_DEPTH;
		p->count--;
		pthread_cond_broadcast(&p->cond);
		pthread_mutex_unlock(&p->lock);
		for (size_t k = 0; k < b->n && rc == 0; k++)
			rc = p->add(p->ctx, b->q[k]->i, &b->q[k]->be, p->err, sizeof(p->err));
		batch_free(b);
		pthread_mutex_lock(&p->lock);
		if (rc < 0 && !p->failed) {
			p->failed = true;
			pthread_cond_broadcast(&p->cond);
		}
	}
	pthread_mutex_unlock(&p->lock);
	p->rc = rc;
	return NULL;
}

/* Hands the reader's batch to the builder, waiting for room. 0, or -ECANCELED when the
 * builder failed (the batch stays the reader's). */
static int hand_over(struct load_pipe *p)
{
	int rc = 0;

	pthread_mutex_lock(&p->lock);
	while (p->count == PIPE_DEPTH && !p->failed)
		pthread_cond_wait(&p->cond, &p->lock);
	if (p->failed) {
		rc = -ECANCELED;
	} else {
		p->ring[(p->head + p->count) % PIPE_DEPTH] = p->filling;
		p->count++;
		p->filling = NULL;
		pthread_cond_broadcast(&p->cond);
	}
	pthread_mutex_unlock(&p->lock);
	return rc;
}

int load_pipe_start(struct load_pipe **out, load_pipe_add_fn add, void *ctx)
{
	struct load_pipe *p = calloc(1, sizeof(*p));
	int rc;

	*out = NULL;
	if (!p)
		return -ENOMEM;
	p->add = add;
	p->ctx = ctx;
	rc = -pthread_mutex_init(&p->lock, NULL);
	if (rc < 0)
		goto err_free;
	rc = -pthread_cond_init(&p->cond, NULL);
	if (rc < 0)
		goto err_mutex;
	rc = util_thread_start(&p->thread, "spoolfs-load", builder_main, p);
	if (rc < 0)
		goto err_cond;
	*out = p;
	return 0;

err_cond:
	pthread_cond_destroy(&p->cond);
err_mutex:
	pthread_mutex_destroy(&p->lock);
err_free:
	free(p);
	return rc;
}

int load_pipe_put(struct load_pipe *p, int64_t i, const struct index_build_entry *be)
{
	struct queued *q;

	if (!p->filling) {
		p->filling = malloc(sizeof(*p->filling));
		if (!p->filling)
			return -ENOMEM;
		p->filling->n = p->filling->used = 0;
	}
	q = copy_entry(p->filling, i, be);
	if (!q)
		return -ENOMEM;
	p->filling->q[p->filling->n++] = q;
	return p->filling->n == PIPE_BATCH ? hand_over(p) : 0;
}

int load_pipe_finish(struct load_pipe *p, char *err, size_t err_len)
{
	int rc;

	if (!p)
		return 0;
	if (p->filling && p->filling->n)
		(void)hand_over(p); /* refused once the builder failed: freed below */
	pthread_mutex_lock(&p->lock);
	p->done = true;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
	pthread_join(p->thread, NULL);
	batch_free(p->filling);
	/* Whatever the builder did not take (it stopped at its failure) is freed here. */
	while (p->count) {
		batch_free(p->ring[p->head]);
		p->head = (p->head + 1) % PIPE_DEPTH;
		p->count--;
	}
	rc = p->rc;
	if (rc < 0 && err && err_len)
		snprintf(err, err_len, "%s", p->err);
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->lock);
	free(p);
	return rc;
}

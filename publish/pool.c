/*
 * The publisher's workers: `threads` threads take job indices in order from one counter,
 * so a long job (a large file) never holds up the short ones queued behind it on another
 * thread. One file is hashed by one thread (a hash is serial); many files are hashed at
 * once.
 *
 * Lock: pool.lock guards next and first_error. Jobs run without it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "publish/publish_i.h"
#include "util/thread.h"

struct pool {
	int (*run)(void *ctx, size_t i);
	void *ctx;
	size_t n;
	atomic_bool *stop;
	pthread_mutex_t lock;
	/* Guarded by lock. */
	size_t next;
	int first_error;
};

static void *pool_main(void *arg)
{
	struct pool *p = arg;

	for (;;) {
		size_t i;
		pthread_mutex_lock(&p->lock);
		i = p->first_error ? p->n : p->next;
		if (i < p->n)
			p->next++;
		pthread_mutex_unlock(&p->lock);
		if (i >= p->n)
			break;
		int rc = p->run(p->ctx, i);
		if (rc) {
			pthread_mutex_lock(&p->lock);
			/* A job that gave up for another's failure is not the failure. */
			if (!p->first_error || p->first_error == -ECANCELED)
				p->first_error = rc;
			pthread_mutex_unlock(&p->lock);
			atomic_store(p->stop, true);
		}
	}
	return NULL;
}

int pub_pool_run(size_t n, unsigned threads, int (*run)(void *ctx, size_t i), void *ctx,
                 atomic_bool *stop)
{
	struct pool p = {.run = run, .ctx = ctx, .n = n, .stop = stop};
	pthread_t *tids = NULL;
	unsigned started = 0;
	int rc;

	pthread_mutex_init(&p.lock, NULL);
	if (threads > n)
		threads = n ? (unsigned)n : 1;
	if (threads > 1)
		tids = calloc(threads, sizeof(*tids));
	for (; tids && started < threads; started++) {
		char name[24];
		snprintf(name, sizeof(name), "publish-%u", started);
		if (util_thread_start(&tids[started], name, pool_main, &p) != 0)
			break; /* the ones started (or this thread) do the work */
	}
	if (started == 0)
		pool_main(&p);
	for (unsigned i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
	free(tids);
	rc = p.first_error;
	pthread_mutex_destroy(&p.lock);
	return rc;
}

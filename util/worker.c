/* Threads sharing a FIFO of jobs (see worker.h). */
#include "util/worker.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/thread.h"

struct util_worker {
	pthread_t *threads;
	unsigned n_threads;
	void (*run)(void *ctx, struct util_worker_job *job);
	void *ctx;
	pthread_mutex_t lock;
	pthread_cond_t ready;
	/* Guarded by lock. */
	struct util_worker_job *head;
	struct util_worker_job *tail;
	bool stopping;
};

static void *util_worker_main(void *arg)
{
	struct util_worker *w = arg;

	pthread_mutex_lock(&w->lock);
	for (;;) {
		struct util_worker_job *job = w->head;
		if (!job && w->stopping)
			break;
		if (!job) {
			pthread_cond_wait(&w->ready, &w->lock);
			continue;
		}
		w->head = job->next;
		if (!w->head)
			w->tail = NULL;
		pthread_mutex_unlock(&w->lock);
		w->run(w->ctx, job);
		pthread_mutex_lock(&w->lock);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

int util_worker_start_pool(const char *name, unsigned n,
                           void (*run)(void *ctx, struct util_worker_job *job), void *ctx,
                           struct util_worker **out)
{
	struct util_worker *w;
	char thread_name[32];
	int rc = 0;

	*out = NULL;
	if (n == 0 || n > UTIL_WORKER_MAX_THREADS)
		return -EINVAL;
	w = calloc(1, sizeof(*w));
	if (!w || !(w->threads = calloc(n, sizeof(*w->threads)))) {
		free(w);
		return -ENOMEM;
	}
	w->run = run;
	w->ctx = ctx;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->ready, NULL);
	for (; w->n_threads < n && rc == 0; w->n_threads += rc == 0) {
		if (n > 1)
			snprintf(thread_name, sizeof(thread_name), "%s%u", name, w->n_threads);
		rc = util_thread_start(&w->threads[w->n_threads], n > 1 ? thread_name : name,
		                       util_worker_main, w);
	}
	if (rc) {
		util_worker_stop(w); /* the threads started so far */
		return rc;
	}
	*out = w;
	return 0;
}

int util_worker_start(const char *name, void (*run)(void *ctx, struct util_worker_job *job),
                      void *ctx, struct util_worker **out)
{
	return util_worker_start_pool(name, 1, run, ctx, out);
}

bool util_worker_queue(struct util_worker *w, struct util_worker_job *job)
{
	bool queued = false;

	job->next = NULL;
	pthread_mutex_lock(&w->lock);
	if (!w->stopping) {
		if (w->tail)
			w->tail->next = job;
		else
			w->head = job;
		w->tail = job;
		queued = true;
		pthread_cond_signal(&w->ready);
	}
	pthread_mutex_unlock(&w->lock);
	return queued;
}

void util_worker_stop(struct util_worker *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->stopping = true;
	pthread_cond_broadcast(&w->ready);
	pthread_mutex_unlock(&w->lock);
	for (unsigned i = 0; i < w->n_threads; i++)
		pthread_join(w->threads[i], NULL);
	free(w->threads);
	pthread_cond_destroy(&w->ready);
	pthread_mutex_destroy(&w->lock);
	free(w);
}

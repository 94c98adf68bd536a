/* A thread with a FIFO of jobs (see worker.h). */
#include "util/worker.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "util/thread.h"

struct util_worker {
	pthread_t thread;
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

int util_worker_start(const char *name, void (*run)(void *ctx, struct util_worker_job *job),
                      void *ctx, struct util_worker **out)
{
	struct util_worker *w = calloc(1, sizeof(*w));
	int rc;

	*out = NULL;
	if (!w)
		return -ENOMEM;
	w->run = run;
	w->ctx = ctx;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->ready, NULL);
	rc = util_thread_start(&w->thread, name, util_worker_main, w);
	if (rc) {
		pthread_cond_destroy(&w->ready);
		pthread_mutex_destroy(&w->lock);
		free(w);
		return rc;
	}
	*out = w;
	return 0;
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
	pthread_cond_signal(&w->ready);
	pthread_mutex_unlock(&w->lock);
	pthread_join(w->thread, NULL);
	pthread_cond_destroy(&w->ready);
	pthread_mutex_destroy(&w->lock);
	free(w);
}

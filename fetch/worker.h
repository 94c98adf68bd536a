/*
 * A worker: one thread that runs queued jobs in the order they were queued, so the thread
 * that queues them (the transfer thread) never waits for what they do. Jobs embed struct
 * worker_job; the run callback gets it back and owns it from then on.
 *
 * Lock: each worker's mutex guards its queue and its stop flag; it is never held while a
 * job runs, so a job may queue more work.
 */
#ifndef SPOOLFS_FETCH_WORKER_H
#define SPOOLFS_FETCH_WORKER_H

#include <stdbool.h>

struct worker_job {
	struct worker_job *next; /* guarded by the worker's lock while queued */
};

struct worker;

/* Starts the thread (fetch_thread_start: named `name`, every signal blocked). 0 or -errno. */
int worker_start(const char *name, void (*run)(void *ctx, struct worker_job *job), void *ctx,
                 struct worker **out);

/* Queues job; false when the worker is stopping (the caller then runs or drops it). */
bool worker_queue(struct worker *w, struct worker_job *job);

/* Runs every job queued so far, then ends the thread and frees w. NULL is fine. */
void worker_stop(struct worker *w);

#endif

/*
 * A worker: one thread that runs queued jobs in the order they were queued, so the thread
 * that queues them (the transfer thread) never waits for what they do. Jobs embed struct
 * util_worker_job; the run callback gets it back and owns it from then on.
 *
 * Lock: each worker's mutex guards its queue and its stop flag; it is never held while a
 * job runs, so a job may queue more work.
 */
#ifndef SPOOLFS_UTIL_WORKER_H
#define SPOOLFS_UTIL_WORKER_H

#include <stdbool.h>

struct util_worker_job {
	struct util_worker_job *next; /* guarded by the worker's lock while queued */
};

struct util_worker;

/* Starts the thread (util_thread_start: named `name`, every signal blocked). 0 or -errno. */
int util_worker_start(const char *name, void (*run)(void *ctx, struct util_worker_job *job),
                      void *ctx, struct util_worker **out);

/* Queues job; false when the worker is stopping (the caller then runs or drops it). */
bool util_worker_queue(struct util_worker *w, struct util_worker_job *job);

/* Runs every job queued so far, then ends the thread and frees w. NULL is fine. */
void util_worker_stop(struct util_worker *w);

#endif

/*
 * A worker: one thread that runs queued jobs in the order they were queued, so the thread
 * that queues them (the transfer thread) never waits for what they do. Jobs embed struct
 * util_worker_job; the run callback gets it back and owns it from then on. A pool
 * (util_worker_start_pool) is the same queue served by several threads: jobs start in
 * order and run at once, one per thread (chunk hashes on every core).
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

/*
 * A worker of n threads (1 to UTIL_WORKER_MAX_THREADS), named `name` followed by their
 * number. run must be safe to call on several threads at once. 0 or -errno (none started).
 */
#define UTIL_WORKER_MAX_THREADS 64
int util_worker_start_pool(const char *name, unsigned n,
                           void (*run)(void *ctx, struct util_worker_job *job), void *ctx,
                           struct util_worker **out);

/* Queues job; false when the worker is stopping (the caller then runs or drops it). */
bool util_worker_queue(struct util_worker *w, struct util_worker_job *job);

/* Runs every job queued so far, then ends the threads and frees w. NULL is fine. */
void util_worker_stop(struct util_worker *w);

#endif

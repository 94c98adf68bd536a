/*
 * The hasher: verifies objects off the transfer thread, which then only receives and
 * writes. It reads each flight's newly contiguous prefix back from the spool (hot in the
 * page cache) and feeds the flight's sha256; the last flight_hash_progress call publishes
 * the withheld bytes or fails the flight. Its thread and queue are a worker (worker.c):
 * flights are hashed in the order they were kicked.
 *
 * A flight is in the queue at most once (hash_queued, from its kick until its turn): a
 * kick while it waits finds its new bytes hashed at that turn anyway. The queue holds a
 * reference to each flight in it. What is still queued when the hasher stops is not
 * hashed: the engine stopped first, and its flights end with the session.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

#include "fetch/engine/flight_i.h"
#include "util/worker.h"

struct flight_hasher {
	struct util_worker *worker;
	atomic_bool stopping; /* set before the worker stops: what it still runs is dropped */
};

static void hash_run(void *ctx, struct util_worker_job *job)
{
	struct flight_hasher *h = ctx;
	struct flight *f =
	    (struct flight *)((char *)job - offsetof(struct flight, verify.hash_link));

	/* Cleared before hashing: bytes that arrive from now on need a turn of their own. */
	atomic_store(&f->verify.hash_queued, false);
	if (!atomic_load(&h->stopping)) {
		int rc = flight_hash_progress(f);
		if (rc)
			flight_fail(f, rc);
	}
	flight_unref(f);
}

int flight_hasher_start(struct flight_hasher **out)
{
	struct flight_hasher *h = calloc(1, sizeof(*h));
	int rc;

	*out = NULL;
	if (!h)
		return -ENOMEM;
	rc = util_worker_start("spoolfs-hash", hash_run, h, &h->worker);
	if (rc) {
		free(h);
		return rc;
	}
	*out = h;
	return 0;
}

void flight_hasher_stop(struct flight_hasher *h)
{
	if (!h)
		return;
	atomic_store(&h->stopping, true);
	util_worker_stop(h->worker); /* lets the flight being hashed finish; drops the rest */
	free(h);
}

void flight_hasher_kick(struct flight_hasher *h, struct flight *f)
{
	if (atomic_load(&h->stopping) || atomic_exchange(&f->verify.hash_queued, true))
		return;
	flight_ref(f);
	if (!util_worker_queue(h->worker, &f->verify.hash_link)) {
		atomic_store(&f->verify.hash_queued, false);
		flight_unref(f);
	}
}

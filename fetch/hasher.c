/*
 * The hasher thread: verifies objects off the transfer thread, which then only receives
 * and writes. It reads each flight's newly contiguous prefix back from the spool (hot in
 * the page cache) and feeds the flight's sha256; the last flight_hash_progress call
 * publishes the withheld bytes or fails the flight.
 *
 * Lock: h->lock guards the queue, each queued flight's hash_queued/hash_next, and
 * stopping. It is never held while hashing or while calling into a flight.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>

#include "fetch/flight_i.h"

struct flight_hasher {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	/* Guarded by lock. */
	struct flight *head;
	struct flight *tail;
	bool stopping;
};

static struct flight *next_job(struct flight_hasher *h)
{
	struct flight *f = NULL;

	pthread_mutex_lock(&h->lock);
	while (!h->head && !h->stopping)
		pthread_cond_wait(&h->wake, &h->lock);
	if (!h->stopping) {
		f = h->head;
		h->head = f->hash_next;
		if (!h->head)
			h->tail = NULL;
		f->hash_next = NULL;
		f->hash_queued = false;
	}
	pthread_mutex_unlock(&h->lock);
	return f;
}

static void *hasher_main(void *arg)
{
	struct flight_hasher *h = arg;
	struct flight *f;
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	while ((f = next_job(h))) {
		int rc = flight_hash_progress(f);
		if (rc)
			flight_fail(f, rc);
		flight_unref(f);
	}
	return NULL;
}

int flight_hasher_start(struct flight_hasher **out)
{
	struct flight_hasher *h = calloc(1, sizeof(*h));
	int rc;

	*out = NULL;
	if (!h)
		return -ENOMEM;
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->wake, NULL);
	rc = pthread_create(&h->thread, NULL, hasher_main, h);
	if (rc) {
		pthread_cond_destroy(&h->wake);
		pthread_mutex_destroy(&h->lock);
		free(h);
		return -rc;
	}
	pthread_setname_np(h->thread, "spoolfs-hash");
	*out = h;
	return 0;
}

void flight_hasher_stop(struct flight_hasher *h)
{
	struct flight *f;

	if (!h)
		return;
	pthread_mutex_lock(&h->lock);
	h->stopping = true;
	pthread_cond_signal(&h->wake);
	pthread_mutex_unlock(&h->lock);
	pthread_join(h->thread, NULL);
	while ((f = h->head)) {
		h->head = f->hash_next;
		f->hash_next = NULL;
		f->hash_queued = false;
		flight_unref(f);
	}
	pthread_cond_destroy(&h->wake);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

void flight_hasher_kick(struct flight_hasher *h, struct flight *f)
{
	pthread_mutex_lock(&h->lock);
	if (!f->hash_queued && !h->stopping) {
		flight_ref(f);
		f->hash_queued = true;
		if (h->tail)
			h->tail->hash_next = f;
		else
			h->head = f;
		h->tail = f;
		pthread_cond_signal(&h->wake);
	}
	pthread_mutex_unlock(&h->lock);
}

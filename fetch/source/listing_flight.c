/*
 * The listing single-flight (see listing_flight.h): a small set of the directories being
 * listed now, and one condition variable that wakes their waiters when any listing ends
 * (listings are few and short-lived: a set per directory would buy nothing).
 */
#include "fetch/source/listing_flight.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "index/index.h"

struct listing_flights {
	pthread_mutex_t lock;
	pthread_cond_t done; /* a listing ended; waits with lock */
	uint64_t *listing;   /* the directories being listed now; guarded by lock */
	size_t n_listing;    /* guarded by lock */
	size_t cap_listing;  /* guarded by lock */
	uint64_t joined;     /* callers that waited for another's listing; guarded by lock */
};

int listing_flights_create(struct listing_flights **out)
{
	struct listing_flights *lf = calloc(1, sizeof(*lf));

	*out = NULL;
	if (!lf)
		return -ENOMEM;
	pthread_mutex_init(&lf->lock, NULL);
	pthread_cond_init(&lf->done, NULL);
	*out = lf;
	return 0;
}

void listing_flights_destroy(struct listing_flights *lf)
{
	if (!lf)
		return;
	pthread_cond_destroy(&lf->done);
	pthread_mutex_destroy(&lf->lock);
	free(lf->listing);
	free(lf);
}

/* Caller holds lf->lock. */
static bool in_progress(const struct listing_flights *lf, uint64_t dir)
{
	for (size_t i = 0; i < lf->n_listing; i++)
		if (lf->listing[i] == dir)
			return true;
	return false;
}

/* Caller holds lf->lock. -ENOMEM. */
static int mark(struct listing_flights *lf, uint64_t dir)
{
	if (lf->n_listing == lf->cap_listing) {
		size_t cap = lf->cap_listing ? 2 * lf->cap_listing : 16;
		uint64_t *v = realloc(lf->listing, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		lf->listing = v;
		lf->cap_listing = cap;
	}
	lf->listing[lf->n_listing++] = dir;
	return 0;
}

/* Caller holds lf->lock. */
static void unmark(struct listing_flights *lf, uint64_t dir)
{
	for (size_t i = 0; i < lf->n_listing; i++) {
		if (lf->listing[i] == dir) {
			lf->listing[i] = lf->listing[--lf->n_listing];
			return;
		}
	}
}

int listing_flight_ensure(struct listing_flights *lf, struct index *idx, uint64_t dir,
                          listing_flight_list_fn list, void *ctx)
{
	bool listed = false;
	int rc;

	rc = index_dir_listed(idx, dir, &listed);
	if (rc || listed)
		return rc;
	pthread_mutex_lock(&lf->lock);
	if (in_progress(lf, dir))
		lf->joined++;
	while (in_progress(lf, dir))
		pthread_cond_wait(&lf->done, &lf->lock);
	/* Find-or-insert under the lock: the check and the claim are one step. */
	rc = index_dir_listed(idx, dir, &listed);
	if (rc == 0 && !listed)
		rc = mark(lf, dir);
	pthread_mutex_unlock(&lf->lock);
	if (rc || listed)
		return rc;

	rc = list(ctx, dir);

	pthread_mutex_lock(&lf->lock);
	unmark(lf, dir);
	pthread_cond_broadcast(&lf->done);
	pthread_mutex_unlock(&lf->lock);
	return rc;
}

uint64_t listing_flights_joined(struct listing_flights *lf)
{
	uint64_t n;

	pthread_mutex_lock(&lf->lock);
	n = lf->joined;
	pthread_mutex_unlock(&lf->lock);
	return n;
}

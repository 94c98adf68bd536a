/*
 * The credentials provider and its refresh thread (see creds_provider.h). Lock order: lock
 * alone. Times are wall-clock milliseconds: expiries are wall-clock.
 */
#include "fetch/s3/creds_provider.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/log.h"
#include "util/thread.h"

struct s3_provider {
	struct creds_chain *chain; /* immutable after open */
	enum creds_source source;  /* immutable after open: the step refreshes ask */
	char *origin;              /* immutable after open: the first answer's origin */
	pthread_t thread;
	bool started; /* set before the thread runs, read by free */

	pthread_mutex_t lock;
	pthread_cond_t changed; /* a new generation, a forced refresh, stopping */
	/* Guarded by lock: */
	struct s3_creds cur;
	uint64_t gen;
	int64_t obtained_ms; /* when cur came */
	uint64_t forced_gen; /* a request signed with this generation was refused */
	bool forced;
	bool stopping;
	unsigned failures; /* refreshes failed in a row */
	int64_t retry_ms;  /* after a failure: when to try again */
};

static int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t s3_provider_refresh_due_ms(int64_t obtained_ms, int64_t expiration_ms)
{
	int64_t life, margin;

	if (expiration_ms == 0)
		return INT64_MAX;
	/* Halves are taken in ms: a 3 s test credential is refreshed after 1.5 s. */
	life = expiration_ms - obtained_ms;
	margin = life / 2 < REFRESH_MARGIN_MAX_S * 1000 ? life / 2 : REFRESH_MARGIN_MAX_S * 1000;
	return expiration_ms - (margin > 0 ? margin : 0);
}

/* When the refresh thread acts next (wall ms); INT64_MAX: never. Under lock. */
static int64_t next_due_ms(const struct s3_provider *p)
{
	if (p->forced)
		return 0;
	if (p->failures)
		return p->retry_ms;
	return s3_provider_refresh_due_ms(p->obtained_ms, (int64_t)p->cur.expiration * 1000);
}

static void log_obtained(const struct s3_creds *c, const char *what)
{
	if (c->expiration)
		util_log(UTIL_LOG_INFO, "S3 credentials %s %s; they expire in %lld s", what,
		         c->origin ? c->origin : "?", (long long)(c->expiration - time(NULL)));
	else
		util_log(UTIL_LOG_INFO, "S3 credentials %s %s", what, c->origin ? c->origin : "?");
}

/* One refresh: fetch unlocked, swap in under the lock. Called with the lock held; returns
 * with it held. */
static void refresh_locked(struct s3_provider *p)
{
	struct s3_creds fresh = {0};
	char err[600] = "";
	int rc;

	p->forced = false;
	pthread_mutex_unlock(&p->lock);
	rc = creds_chain_fetch(p->chain, p->source, &fresh, err, sizeof(err));
	if (rc == 0)
		log_obtained(&fresh, "refreshed from");
	pthread_mutex_lock(&p->lock);
	if (rc == 0) {
		s3_creds_free(&p->cur);
		p->cur = fresh;
		p->gen++;
		p->obtained_ms = wall_ms();
		p->failures = 0;
	} else {
		unsigned delay = REFRESH_RETRY_MIN_MS;
		for (unsigned i = 1; i < p->failures + 1 && delay < REFRESH_RETRY_MAX_MS; i++)
			delay *= 2;
		if (delay > REFRESH_RETRY_MAX_MS)
			delay = REFRESH_RETRY_MAX_MS;
		p->failures++;
		p->retry_ms = wall_ms() + delay;
		long long left =
		    p->cur.expiration ? (long long)(p->cur.expiration - time(NULL)) : 0;
		util_log(UTIL_LOG_WARN,
		         "S3 credentials: refreshing from %s failed: %s; trying again in %u ms (%s "
		         "%lld s)",
		         creds_source_name(p->source), err, delay,
		         left > 0 ? "the current ones expire in" : "the current ones expired",
		         left > 0 ? left : -left);
	}
	pthread_cond_broadcast(&p->changed);
}

static void *refresh_main(void *arg)
{
	struct s3_provider *p = arg;

	pthread_mutex_lock(&p->lock);
	while (!p->stopping) {
		int64_t due = next_due_ms(p), now = wall_ms();
		if (due > now) {
			if (due == INT64_MAX) {
				pthread_cond_wait(&p->changed, &p->lock);
			} else {
				struct timespec ts = {.tv_sec = (time_t)(due / 1000),
				                      .tv_nsec = (long)(due % 1000) * 1000000};
				pthread_cond_timedwait(&p->changed, &p->lock, &ts);
			}
			continue;
		}
		refresh_locked(p);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int s3_provider_open(struct creds_chain *chain, struct s3_provider **out, char *err, size_t err_len)
{
	struct s3_provider *p = calloc(1, sizeof(*p));
	int rc;

	*out = NULL;
	if (!p) {
		creds_chain_free(chain);
		return -ENOMEM;
	}
	p->chain = chain;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->changed, NULL);
	rc = creds_chain_resolve(chain, &p->source, &p->cur, err, err_len);
	if (rc == 0 && !(p->origin = strdup(p->cur.origin ? p->cur.origin : "?")))
		rc = -ENOMEM;
	if (rc) {
		s3_provider_free(p);
		return rc;
	}
	p->gen = 1;
	p->obtained_ms = wall_ms();
	log_obtained(&p->cur, "from");
	*out = p;
	return 0;
}

int s3_provider_start(struct s3_provider *p)
{
	int rc = util_thread_start(&p->thread, "s3-creds", refresh_main, p);

	p->started = rc == 0;
	return rc;
}

void s3_provider_free(struct s3_provider *p)
{
	if (!p)
		return;
	if (p->started) {
		pthread_mutex_lock(&p->lock);
		p->stopping = true;
		pthread_cond_broadcast(&p->changed);
		pthread_mutex_unlock(&p->lock);
		pthread_join(p->thread, NULL);
	}
	s3_creds_free(&p->cur);
	creds_chain_free(p->chain);
	pthread_cond_destroy(&p->changed);
	pthread_mutex_destroy(&p->lock);
	free(p->origin);
	free(p);
}

int s3_provider_get(struct s3_provider *p, struct s3_creds *out, uint64_t *gen)
{
	int rc;

	pthread_mutex_lock(&p->lock);
	rc = s3_creds_copy(&p->cur, out);
	*gen = p->gen;
	pthread_mutex_unlock(&p->lock);
	return rc;
}

uint64_t s3_provider_generation(struct s3_provider *p)
{
	uint64_t gen;

	pthread_mutex_lock(&p->lock);
	gen = p->gen;
	pthread_mutex_unlock(&p->lock);
	return gen;
}

void s3_provider_expired(struct s3_provider *p, uint64_t gen)
{
	pthread_mutex_lock(&p->lock);
	/* Once per generation: every request signed with it is refused alike, and a refresh
	 * that failed is tried again by its backoff, not by each refused request. */
	if (p->gen == gen && p->forced_gen != gen) {
		if (!p->forced)
			util_log(UTIL_LOG_INFO,
			         "S3 credentials from %s refused as expired: refreshing them now",
			         creds_source_name(p->source));
		p->forced = true;
		p->forced_gen = gen;
		pthread_cond_broadcast(&p->changed);
	}
	pthread_mutex_unlock(&p->lock);
}

bool s3_provider_wait_newer(struct s3_provider *p, uint64_t gen, unsigned timeout_ms)
{
	int64_t deadline = wall_ms() + timeout_ms;
	bool newer;

	s3_provider_expired(p, gen);
	pthread_mutex_lock(&p->lock);
	if (!p->started && p->gen == gen && p->forced)
		refresh_locked(p); /* no thread yet (the mount's first listing): do it here */
	while (p->gen == gen && !p->stopping && wall_ms() < deadline) {
		struct timespec ts = {.tv_sec = (time_t)(deadline / 1000),
		                      .tv_nsec = (long)(deadline % 1000) * 1000000};
		pthread_cond_timedwait(&p->changed, &p->lock, &ts);
		if (p->failures && p->forced_gen == gen && !p->forced)
			break; /* the refresh this wait asked for failed: said in the log */
	}
	newer = p->gen != gen;
	pthread_mutex_unlock(&p->lock);
	return newer;
}

const char *s3_provider_origin(struct s3_provider *p)
{
	return p->origin;
}

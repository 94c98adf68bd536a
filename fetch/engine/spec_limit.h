/*
 * How many speculative requests (prefetch: objects fetched before a reader asks) may run at
 * once: additive increase, multiplicative decrease, as TCP backs off. An upstream that
 * answers 503 (S3's SlowDown) or 429 halves the bound, once per burst of such answers, down
 * to one; each completed speculative request then earns credit, and a bound's worth of
 * successes raises it by one, up to the configured maximum. Speculation so yields before it
 * costs readers a retry, and comes back slowly.
 *
 * Pure logic, no locks: the transfer thread owns one (engine.c); cur is copied to an atomic
 * for stats.
 */
#ifndef SPOOLFS_FETCH_SPEC_LIMIT_H
#define SPOOLFS_FETCH_SPEC_LIMIT_H

#include <stdint.h>

/* Throttling answers within this long of a cut belong to the same burst: one cut. */
#define SPEC_LIMIT_BURST_MS 250

struct spec_limit {
	unsigned max;         /* the configured bound; 0: no speculation */
	unsigned cur;         /* the bound now, 1..max (0 when max is 0) */
	unsigned credit;      /* successes since the last raise or cut */
	uint64_t last_cut_ms; /* when it was last cut, 0: never */
	uint64_t cuts;        /* how many times it was cut */
};

void spec_limit_init(struct spec_limit *l, unsigned max);
/* An answer of 503 or 429 at now_ms. */
void spec_limit_throttled(struct spec_limit *l, uint64_t now_ms);
/* A speculative request completed. */
void spec_limit_success(struct spec_limit *l);

#endif

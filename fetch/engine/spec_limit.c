/* The bound on speculative requests at once (see spec_limit.h). */
#include "fetch/engine/spec_limit.h"

void spec_limit_init(struct spec_limit *l, unsigned max)
{
	*l = (struct spec_limit){.max = max, .cur = max};
}

void spec_limit_throttled(struct spec_limit *l, uint64_t now_ms)
{
	/* Every request already sent when the store pushed back answers alike: those are
	 * one signal, not one each (32 answers would take the bound to 1 at once). */
	if (l->max == 0 || (l->last_cut_ms && now_ms - l->last_cut_ms < SPEC_LIMIT_BURST_MS))
		return;
	l->cur = l->cur / 2 ? l->cur / 2 : 1;
	l->credit = 0;
	l->last_cut_ms = now_ms ? now_ms : 1;
	l->cuts++;
}

void spec_limit_success(struct spec_limit *l)
{
	if (l->cur >= l->max)
		return;
	/* One more per bound's worth of successes: about one per round of requests. */
	if (++l->credit >= l->cur) {
		l->cur++;
		l->credit = 0;
	}
}

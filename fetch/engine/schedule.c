/*
 * Which requests a flight needs now: far readers first, then the rest of the object in
 * pieces, within the engine's connection limits. Transfer thread only.
 */
#include <inttypes.h>

#include "fetch/engine/engine_i.h"
#include "util/log.h"
#include "util/ranges.h"

/* A reader this far ahead of a stream's position gets a stream of its own. */
#define FAR_AHEAD_BYTES FLIGHT_CHUNK_BYTES
/*
 * Splitting a stream for a far reader throws away what the old one has in flight past the
 * split point: on a fast link, the rest of a small object (its tail was fetched twice when
 * a head and a tail reader came together). So a far reader waits for the stream when it
 * will get there within this long, at the rate it has been going; a stream with no rate
 * yet gets this long to show one.
 */
#define SPLIT_WAIT_MS 100
/* A rate measured over less than this is not trusted yet. */
#define RATE_SAMPLE_MS 10
#define RATE_SAMPLE_BYTES (256u << 10)
#define MAX_WANTED 32
/* What one request of a whole download asks for: big enough that a request's own cost
 * does not show, small enough that the prefix readers wait on keeps up with the sum. */
#define PIECE_BYTES (8u << 20)

/* written plus what running streams will write and frames being decompressed will: what
 * nobody needs to ask for again. */
static int claimed_ranges(struct flight *f, struct util_ranges *claimed)
{
	int rc = flight_copy_written(f, claimed);

	for (struct stream *s = f->xfer.streams; s && rc == 0; s = s->next)
		rc = util_ranges_add(claimed, s->pos, s->end);
	for (size_t i = 0; i < f->xfer.decoding.n && rc == 0; i++)
		rc = util_ranges_add(claimed, f->xfer.decoding.v[i].start,
		                     f->xfer.decoding.v[i].end);
	return rc;
}

static struct stream *stream_covering(struct flight *f, uint64_t off)
{
	for (struct stream *s = f->xfer.streams; s; s = s->next)
		if (s->pos <= off && off < s->end)
			return s;
	return NULL;
}

static bool can_start(struct engine *e, struct flight *f)
{
	return e->n_transfers < e->cfg.max_transfers &&
	       f->xfer.n_streams < e->cfg.max_streams_per_flight && unframe_budget_room(e, f);
}

/*
 * Slots background streams may take: some are always left for readers, so a reader of a
 * new object never waits for whole other objects nobody is reading.
 */
static unsigned background_room(struct engine *e)
{
	unsigned reserve = e->cfg.max_transfers / 4 ? e->cfg.max_transfers / 4 : 1;
	unsigned cap = e->cfg.max_transfers > reserve ? e->cfg.max_transfers - reserve : 1;
	unsigned free_slots;

	if (e->n_background >= cap || e->n_transfers >= e->cfg.max_transfers)
		return 0;
	free_slots = e->cfg.max_transfers - e->n_transfers;
	return cap - e->n_background < free_slots ? cap - e->n_background : free_slots;
}

/* Streams of f that fill the object for nobody in particular. */
static unsigned background_streams(const struct flight *f)
{
	unsigned n = 0;

	for (const struct stream *s = f->xfer.streams; s; s = s->next)
		n += s->background;
	return n;
}

/* Where a piece of a whole download that starts the gap [gap_start, gap_end) ends: one
 * piece (PIECE_BYTES, or one frame when frames are larger: a stream asks for whole frames)
 * unless what would be left is a small tail. */
static uint64_t piece_end(const struct flight *f, uint64_t gap_start, uint64_t gap_end)
{
	uint64_t piece = f->frames.size > PIECE_BYTES ? f->frames.size : PIECE_BYTES;

	if (!f->xfer.no_ranges && gap_end - gap_start >= piece + piece / 2)
		return gap_start + piece;
	return gap_end;
}

/*
 * Starts one piece of a whole download: the gap [gap_start, gap_end) from its start, to
 * piece_end. Adds to claimed what the stream really fetches: a compressed object's stream
 * rounds its range out to whole frames, and a claim of less would have the next piece ask
 * for the same frame again.
 */
static int start_piece(struct engine *e, struct flight *f, struct util_ranges *claimed,
                       uint64_t gap_start, uint64_t gap_end, bool background)
{
	struct stream *s;
	int rc = stream_start(e, f, gap_start, piece_end(f, gap_start, gap_end));

	if (rc)
		return rc;
	s = f->xfer.streams; /* stream_start puts it first */
	if (background) {
		s->background = true;
		e->n_background++;
	}
	return util_ranges_add(claimed, s->pos, s->end);
}

/* Whether f may start another piece now. One slot per flight stays free for far readers. */
static bool room_for_piece(struct engine *e, const struct flight *f)
{
	unsigned room = e->cfg.max_streams_per_flight > 1 ? e->cfg.max_streams_per_flight - 1 : 1;

	/* One request until a 206 shows that the server honours Range: one that answers
	 * each with the whole object would send it again for every piece. */
	return background_room(e) > 0 && f->xfer.n_streams < room &&
	       (f->xfer.n_streams == 0 || (f->xfer.ranges_seen && !f->xfer.no_ranges &&
	                                   background_streams(f) < e->cfg.parallel_parts)) &&
	       unframe_budget_room(e, f);
}

/*
 * Keeps up to parallel_parts background pieces running on a whole download, each taking
 * the first unclaimed bytes at or after `from` (then from the start). Pieces in order,
 * not one long part per connection, so the contiguous prefix that sequential readers and
 * the hash wait on grows at the speed of all connections together; several connections
 * win where each is capped.
 */
static int fill_pieces(struct engine *e, struct flight *f, struct util_ranges *claimed,
                       uint64_t from)
{
	uint64_t gap_start, gap_end;
	int rc = 0;

	while (rc == 0 && room_for_piece(e, f)) {
		if (!util_ranges_next_gap(claimed, from, f->size, &gap_start, &gap_end) &&
		    !util_ranges_next_gap(claimed, 0, f->size, &gap_start, &gap_end))
			break;
		rc = start_piece(e, f, claimed, gap_start, gap_end, true);
	}
	return rc;
}

/*
 * The unit f's requests for readers start at: `unit`, or its chunk or frame when that is
 * larger, so that what a reader waits for is whole chunks that can be checked as they
 * arrive, and a compressed object's requests split at frame boundaries. Chunk and frame
 * sizes and units are powers of two: the larger is a multiple of the smaller.
 */
static uint64_t unit_of(const struct flight *f, uint64_t unit)
{
	if (f->verify.chunk_size > unit)
		unit = f->verify.chunk_size;
	return f->frames.size > unit ? f->frames.size : unit;
}

/*
 * A sparse flight's stream for one missed read: its range rounded out to the demand unit
 * (whole chunks, with chunk hashes), within the gap that holds its first missing byte.
 */
static int start_demand(struct engine *e, struct flight *f, const struct util_ranges *claimed,
                        const struct flight_want *want)
{
	uint64_t unit = unit_of(f, FLIGHT_DEMAND_BYTES);
	uint64_t from = want->off - want->off % unit, gap_start, gap_end;
	uint64_t to = want->end + (unit - 1) - (want->end - 1) % unit;

	gap_end = from;
	while (util_ranges_next_gap(claimed, gap_end, f->size, &gap_start, &gap_end) &&
	       gap_end <= want->off)
		;
	if (!(gap_start <= want->off && want->off < gap_end))
		return 0;
	return stream_start(e, f, from > gap_start ? from : gap_start, to < gap_end ? to : gap_end);
}

/*
 * A speculative flight nobody has opened yet (prefetch): one piece at a time, in a slot of
 * its own (spec.n_running, bounded by spec_limit.h) rather than one of the readers', so a reader's
 * miss never queues behind speculation. A reader who opens it meanwhile joins the stream.
 */
static int start_speculative(struct engine *e, struct flight *f, struct util_ranges *claimed)
{
	uint64_t gap_start, gap_end;
	int rc = claimed_ranges(f, claimed);

	if (rc || !util_ranges_next_gap(claimed, 0, f->size, &gap_start, &gap_end))
		return rc;
	rc = stream_start(e, f, gap_start, piece_end(f, gap_start, gap_end));
	if (rc == 0) {
		/* stream_start counted it among the readers' transfers, and put it first. */
		f->xfer.streams->speculative = true;
		e->n_transfers--;
		e->spec.n_running++;
	}
	return rc;
}

/* The earlier of two times, 0 standing for none. */
static uint64_t earliest(uint64_t a, uint64_t b)
{
	return !a || (b && b < a) ? b : a;
}

/*
 * How long s will take to reach byte `to` at the rate it has been going, in ms:
 * UINT64_MAX when it has shown no rate within SPLIT_WAIT_MS of its start (slow to start:
 * no reason to believe it will be quick); 0 when it is too young to tell, with *recheck
 * set to when it may be.
 */
static uint64_t eta_ms(const struct stream *s, uint64_t to, uint64_t now, uint64_t *recheck)
{
	uint64_t got = s->pos - s->attempt_start, elapsed;

	if (to <= s->pos)
		return 0;
	if (!s->clock.first_body_ms || got == 0 ||
	    (now - s->clock.first_body_ms < RATE_SAMPLE_MS && got < RATE_SAMPLE_BYTES)) {
		if (now - s->clock.started_ms >= SPLIT_WAIT_MS)
			return UINT64_MAX;
		*recheck = s->clock.started_ms + SPLIT_WAIT_MS;
		return 0;
	}
	elapsed = now - s->clock.first_body_ms ? now - s->clock.first_body_ms : 1;
	*recheck = now + RATE_SAMPLE_MS;
	if (to - s->pos > UINT64_MAX / elapsed)
		return UINT64_MAX;
	return (to - s->pos) * elapsed / got;
}

/*
 * Whether a reader waiting at `chunk`, ahead of stream s, should have a stream of its own
 * now (see SPLIT_WAIT_MS). When not, asks the loop to look again by the time it would be.
 */
static bool split_worth(struct engine *e, const struct stream *s, uint64_t chunk, uint64_t now)
{
	uint64_t recheck = 0;

	if (eta_ms(s, chunk, now, &recheck) > SPLIT_WAIT_MS)
		return true;
	e->recheck_ms = earliest(e->recheck_ms, recheck);
	return false;
}

/* Whether s fetches one of the bytes readers wait for (n of them in wanted). */
static bool awaited(const struct stream *s, const struct flight_want *wanted, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (s->pos <= wanted[i].off && wanted[i].off < s->end)
			return true;
	return false;
}

/*
 * Makes room for a stream a reader of f waits on, when the limits leave none: stops a
 * stream nobody waits on now that still has more than SPLIT_WAIT_MS to go: a background
 * piece (one that fills an object for nobody in particular) before one started for readers
 * who have their bytes by now and left, and of those the one with the most to go; of f
 * itself when f is at its own limit, else of any object; never one of a server that
 * ignores ranges, where a new request would start over. Its unfetched part is claimed
 * again by a later piece; what it had in flight is lost, which a reader kept waiting for
 * a whole piece (8 s at 1 MiB/s) would cost more. One about to end is waited for instead.
 * True when there is room now; a stopped piece may have left f a gap to claim.
 */
static bool room_for_reader(struct engine *e, struct flight *f, const struct stream *spare)
{
	bool own = f->xfer.n_streams >= e->cfg.max_streams_per_flight;
	/* Short of frame budget only: stopping a stream that holds none frees nothing. */
	bool budget_only = !own && e->n_transfers < e->cfg.max_transfers;
	struct stream *victim = NULL;
	uint64_t now = now_ms(), recheck = 0, victim_eta = 0;
	bool victim_background = false;

	if (can_start(e, f))
		return true;
	for (size_t i = 0; i < e->n_active; i++) {
		struct flight *g = e->active[i];
		struct flight_want wanted[MAX_WANTED];
		unsigned n_wanted = 0;
		bool wanted_known = false, whole;
		/* Without ranges a new request starts over from byte 0. */
		if ((own && g != f) || g->xfer.no_ranges)
			continue;
		for (struct stream *s = g->xfer.streams; s; s = s->next) {
			uint64_t when = 0, eta;
			/* A speculative stream holds no reader's slot: stopping it frees none (but
			 * it may hold frame budget, which a reader is not to wait for). */
			if (s == spare || s->skip > 0 || (s->speculative && !budget_only) ||
			    (budget_only && !s->z.budget))
				continue;
			/* A reader's stream whose reader is between two reads, or that another
			 * mount's readers wait on, is still theirs: stopping it would have readers
			 * take each other's streams in turn. */
			if (!s->background &&
			    (g->xfer.watched || flight_read_continues_into(g, s->pos, s->end)))
				continue;
			eta = eta_ms(s, s->end, now, &when);
			if (eta <= SPLIT_WAIT_MS) {
				recheck = earliest(recheck, when);
				continue;
			}
			if (victim && (victim_background > s->background ||
			               (victim_background == s->background && eta <= victim_eta)))
				continue;
			/* Whoever it was started for, someone may wait for it now. */
			if (!wanted_known) {
				n_wanted = flight_wanted(g, wanted, MAX_WANTED, &whole);
				wanted_known = true;
			}
			if (!awaited(s, wanted, n_wanted)) {
				victim = s;
				victim_eta = eta;
				victim_background = s->background;
			}
		}
	}
	if (!victim) {
		e->recheck_ms = earliest(e->recheck_ms, recheck);
		return false;
	}
	util_log(UTIL_LOG_DEBUG, "%s: %s piece at byte %" PRIu64 " stopped for a reader of %s",
	         victim->f->name, victim->background ? "background" : "unawaited", victim->pos,
	         f->name);
	stream_free(e, victim);
	return can_start(e, f);
}

/* Starts the streams f needs now: far readers first, then the rest of the object. */
void schedule_flight(struct engine *e, struct flight *f)
{
	struct flight_want wanted[MAX_WANTED];
	uint64_t gap_start, gap_end;
	struct util_ranges claimed;
	enum flight_state state;
	uint64_t anchor = UINT64_MAX; /* the chunk of the first byte a reader waits for */
	uint64_t written;
	bool whole;
	unsigned n;
	bool no_room = false;
	int rc = 0;

	flight_progress(f, &written, NULL, &state);
	if (state != FLIGHT_ACTIVE || f->spool.fd < 0 || f->xfer.retry_due_ms > now_ms() ||
	    watching(e, f))
		return;
	/* Refused for expired credentials: wait for fresh ones (or the wait's end), looking
	 * again every 50 ms; the next request sent is the resend. */
	if (f->xfer.auth.wait) {
		uint64_t now = now_ms();
		if (e->cfg.creds_generation(e->cfg.sign_ctx) > f->xfer.auth.gen ||
		    now >= f->xfer.auth.until_ms) {
			f->xfer.auth.wait = false;
		} else {
			f->xfer.retry_due_ms = now + 50;
			return;
		}
	}
	f->xfer.retry_due_ms = 0;
	engine_avoid_bad_source(e, f);
	uint64_t starved_since = f->xfer.starved_ms;
	f->xfer.starved_ms = 0;
	util_ranges_init(&claimed);
	n = flight_wanted(f, wanted, MAX_WANTED, &whole);
	for (unsigned i = 0; i < n && rc == 0; i++) {
		uint64_t unit = unit_of(f, FLIGHT_CHUNK_BYTES);
		uint64_t off = wanted[i].off, chunk = off - off % unit;
		struct stream *s = stream_covering(f, off);
		anchor = anchor < chunk ? anchor : chunk;
		if (s) {
			if (!whole || off - s->pos <= FAR_AHEAD_BYTES || chunk <= s->pos ||
			    f->xfer.no_ranges || !split_worth(e, s, chunk, now_ms()))
				continue;
			/* Once nothing could be stopped, this turn stops trying: each try scans
			 * every stream, and the loop looks again soon (recheck_ms). */
			if (no_room)
				continue;
			if (!room_for_reader(e, f, s)) {
				no_room = true;
				f->xfer.starved_ms = starved_since ? starved_since : now_ms();
				continue;
			}
			/* Split: the new stream takes the far part, the old one stops there. */
			uint64_t end = s->end;
			rc = stream_start(e, f, chunk, end);
			if (rc == 0)
				s->end = chunk;
			continue;
		}
		rc = claimed_ranges(f, &claimed);
		if (rc)
			break;
		if (util_ranges_covers(&claimed, off, off + 1))
			continue; /* written, withheld until verification */
		bool had_room = can_start(e, f);
		if (no_room || !room_for_reader(e, f, NULL)) {
			f->xfer.starved_ms = starved_since ? starved_since : now_ms();
			break;
		}
		if (!had_room && (rc = claimed_ranges(f, &claimed)) != 0)
			break; /* (a stopped piece left a gap to claim) */
		if (!whole && !f->xfer.no_ranges) {
			rc = start_demand(e, f, &claimed, &wanted[i]);
			continue;
		}
		/* The gap holding the reader's byte, from its chunk boundary at the earliest. */
		gap_end = chunk;
		while (util_ranges_next_gap(&claimed, gap_end, f->size, &gap_start, &gap_end) &&
		       gap_end <= off)
			;
		if (gap_start <= off && off < gap_end)
			rc = start_piece(e, f, &claimed, gap_start, gap_end, false);
	}
	/* Once it is read through, the download belongs to the object: with nobody waiting it
	 * still runs to the end, nearest the first waiting reader first. */
	/* Called on every turn of the transfer loop: the ranges are copied only while there is
	 * something left to fetch. */
	if (rc == 0 && whole && written < f->size && flight_speculation_unclaimed(f)) {
		if (f->xfer.n_streams == 0 && e->spec.n_running < e->spec.limit.cur &&
		    unframe_budget_room(e, f))
			rc = start_speculative(e, f, &claimed);
	} else if (rc == 0 && whole && written < f->size && room_for_piece(e, f)) {
		rc = claimed_ranges(f, &claimed);
		if (rc == 0)
			rc = fill_pieces(e, f, &claimed, anchor == UINT64_MAX ? 0 : anchor);
	}
	util_ranges_free(&claimed);
	/* Nothing else would ever start a request for it: its readers must not wait forever. */
	if (rc)
		engine_fail_flight(e, f, rc, "cannot start a request");
}

/*
 * The body of a compressed object's request (doc/manifest.md, version 3): stored bytes of
 * whole zstd frames, decompressed into the spool one frame at a time.
 *
 * A frame is decompressed once all its stored bytes are in (in one go, into a buffer of
 * exactly its share of the object), and its bytes are delivered only when it gave exactly
 * that share from exactly its stored length: a stream that is cut leaves no partial frame
 * behind, and the next request starts at a frame boundary. zstd never writes past the
 * buffer, so a frame that would decompress to more (a bomb) costs at most its share; a
 * frame header that asks for more than its frame (a window or a content size) is refused.
 *
 * Decompressing on the transfer thread made a cold read on loopback 2.3x the raw one's time
 * (tests/bench/unframe_speed.c): a received frame goes to a pool of threads instead, which
 * decode it into a buffer of the job's own. The transfer thread writes decoded frames to
 * the spool on its next turn, so that it alone writes spools and keeps the flight's ranges
 * (xfer.decoding holds what is being decoded: not asked for again, and the flight is not
 * retired before it is in). Jobs hold at most UNFRAME_JOB_BYTES: beyond, or without a pool,
 * a frame is decoded on the transfer thread at once.
 *
 * Which stored bytes a range needs is frames.c's (flight_frames_stored_range); decoding one
 * frame is zframe.c's. This file holds the pool, the frame-buffer budget and the body's
 * state machine.
 *
 * Locks: engine_unframe.lock guards the decoded list and the idle contexts; it is held for
 * list operations only. Everything else here is the transfer thread's, but a job's fields,
 * which its pool thread alone touches until it is on the decoded list.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fetch/engine/engine_i.h"
#include "fetch/engine/zframe.h"
#include "util/log.h"

uint64_t unframe_stored_pos(const struct stream *s)
{
	return s->f->frames.stored_off[s->z.frame] + s->z.in_len;
}

/* The inline decoding buffer is kept between frames up to this size, freed after use above:
 * one frame of 64 MiB must not hold 64 MiB for the rest of the session. */
#define UNFRAME_KEEP_OUT_BYTES (4u << 20)

/* Counts n bytes of frame buffers taken (or, negative, given back) in the engine's stats. */
static void frame_bytes_add(struct engine *e, int64_t n)
{
	if (n >= 0)
		atomic_fetch_add_explicit(&e->stats->frame_bytes, (uint64_t)n,
		                          memory_order_relaxed);
	else
		atomic_fetch_sub_explicit(&e->stats->frame_bytes, (uint64_t)-n,
		                          memory_order_relaxed);
}

/* Takes n bytes of cfg.frame_budget (or, negative, gives them back). Transfer thread. */
static void budget_add(struct engine *e, int64_t n)
{
	struct engine_unframe *u = &e->unframe;

	u->budget = n >= 0 ? u->budget + (uint64_t)n : u->budget - (uint64_t)-n;
	atomic_store_explicit(&e->stats->frame_budget_used, u->budget, memory_order_relaxed);
	if (u->budget > atomic_load_explicit(&e->stats->frame_budget_peak, memory_order_relaxed))
		atomic_store_explicit(&e->stats->frame_budget_peak, u->budget,
		                      memory_order_relaxed);
}

bool unframe_budget_room(struct engine *e, const struct flight *f)
{
	struct engine_unframe *u = &e->unframe;

	if (!flight_is_compressed(f) || u->budget == 0 ||
	    u->budget + f->frames.max_stored <= e->cfg.frame_budget)
		return true;
	atomic_fetch_add_explicit(&e->stats->frame_budget_waits, 1, memory_order_relaxed);
	return false;
}

void unframe_stream_reserve(struct stream *s)
{
	s->z.budget = s->f->frames.max_stored;
	budget_add(s->engine, (int64_t)s->z.budget);
}

/* The transfer thread's own context and buffer, for frames decoded inline. */
static int decode_inline(struct engine *e, const struct flight *f, const void *src, size_t len,
                         size_t share, char *why, size_t cap)
{
	struct engine_unframe *u = &e->unframe;

	if (!u->dctx && !(u->dctx = ZSTD_createDCtx()))
		return -ENOMEM;
	if (u->out_cap < share) {
		size_t want = share > UNFRAME_KEEP_OUT_BYTES ? share : f->frames.size;
		unsigned char *out = realloc(u->out, want ? want : 1);
		if (!out)
			return -ENOMEM;
		frame_bytes_add(e, (int64_t)want - (int64_t)u->out_cap);
		u->out = out;
		u->out_cap = want;
	}
	return zframe_decode(u->dctx, f->frames.size, src, len, u->out, share, why, cap);
}

/* After an inline frame is delivered: a buffer over UNFRAME_KEEP_OUT_BYTES is not kept. */
static void release_inline(struct engine *e)
{
	struct engine_unframe *u = &e->unframe;

	if (u->out_cap <= UNFRAME_KEEP_OUT_BYTES)
		return;
	frame_bytes_add(e, -(int64_t)u->out_cap);
	free(u->out);
	u->out = NULL;
	u->out_cap = 0;
}

/*
 * Settles frame i of f from url_idx that decode refused (why): logged, then with chunk
 * hashes fetched again or failed for good; without, the flight fails. s: the stream it came
 * in, when it was decoded inline (in its curl callback): it stops before the frame or goes
 * on past it, or fails. Without s (a job's frame, decoded while its stream went on), the
 * frame is a gap the scheduler fills, and the flight is failed here. 0 to go on, or -EIO.
 */
static int refuse_frame(struct engine *e, struct flight *f, struct stream *s, unsigned url_idx,
                        uint64_t i, const char *why)
{
	bool chunked = flight_has_chunks(f), again = false;
	char shown[512], line[400];
	uint64_t lo, hi;

	flight_frame_bounds(f, i, &lo, &hi);
	if (chunked)
		again = flight_chunk_undecodable(f, i, url_idx);
	snprintf(line, sizeof(line),
	         "frame %" PRIu64 " (bytes %" PRIu64 "-%" PRIu64 ", stored %" PRIu64 "-%" PRIu64
	         ") %s",
	         i, lo, hi, f->frames.stored_off[i], f->frames.stored_off[i + 1], why);
	util_log(again ? UTIL_LOG_WARN : UTIL_LOG_ERROR, "%s: %s, from %s; %s", f->name, line,
	         util_redact_url(f->src.urls[url_idx], shown, sizeof(shown)),
	         again     ? "fetching it again"
	         : chunked ? "reads of it get EIO"
	                   : "the download fails");
	if (chunked) {
		/* Inline, the request stops before a frame to fetch again (what follows is
		 * asked for anew), or goes on past one that failed for good. */
		if (s)
			s->end = again ? s->pos : s->end;
		if (s && !again)
			s->pos = hi;
		return 0;
	}
	if (!s) {
		engine_fail_flight(e, f, -EIO, line);
		return -EIO;
	}
	s->fatal = -EIO;
	s->undecodable = true;
	stream_why(s, "%s", line);
	return -EIO;
}

/* A frame the pool decodes: stored bytes in, decoded bytes out. */
struct unframe_job {
	struct util_worker_job link; /* first: the pool hands this pointer back */
	struct engine *e;
	struct flight *f; /* a reference of its own */
	uint64_t frame;
	uint64_t from; /* the first byte of the object to deliver (stream_unframe.drop_before) */
	unsigned url_idx;
	int rc; /* decode's */
	char why[160];
	unsigned char *out;       /* the frame's share, decoded */
	struct unframe_job *next; /* in engine_unframe.decoded */
	size_t len;
	unsigned char in[]; /* its stored bytes */
};

/* A decompression context of the pool's, kept for the next job. */
struct unframe_dctx {
	ZSTD_DCtx *dctx;
	struct unframe_dctx *next;
};

/* Frames in jobs hold at most this many bytes (stored and decoded): beyond, inline. */
#define UNFRAME_JOB_BYTES (32u << 20)

static void job_run(void *ctx, struct util_worker_job *link)
{
	struct engine *e = ctx;
	struct engine_unframe *u = &e->unframe;
	struct unframe_job *job = (struct unframe_job *)link;
	struct unframe_dctx *d;
	uint64_t lo, hi;

	flight_frame_bounds(job->f, job->frame, &lo, &hi);
	pthread_mutex_lock(&u->lock);
	d = u->idle;
	if (d)
		u->idle = d->next;
	pthread_mutex_unlock(&u->lock);
	if (!d && (d = calloc(1, sizeof(*d))) != NULL && !(d->dctx = ZSTD_createDCtx())) {
		free(d);
		d = NULL;
	}
	job->out = d ? malloc(hi - lo ? hi - lo : 1) : NULL;
	job->rc = job->out ? zframe_decode(d->dctx, job->f->frames.size, job->in, job->len,
	                                   job->out, hi - lo, job->why, sizeof(job->why))
	                   : -ENOMEM;
	pthread_mutex_lock(&u->lock);
	if (d) {
		d->next = u->idle;
		u->idle = d;
	}
	job->next = u->decoded;
	u->decoded = job;
	pthread_mutex_unlock(&u->lock);
	curl_multi_wakeup(e->multi);
}

/*
 * Hands frame s->z.frame (its stored bytes [src, src + len)) to the pool. 1 when queued,
 * 0 when it is to be decoded inline (no pool, jobs full), or -ENOMEM.
 */
static int queue_frame(struct stream *s, const unsigned char *src, size_t len, uint64_t lo,
                       uint64_t hi)
{
	struct engine *e = s->engine;
	struct engine_unframe *u = &e->unframe;
	struct flight *f = s->f;
	uint64_t cost = len + (hi - lo);
	struct unframe_job *job;

	/* Beyond the budget the frame is decoded inline (one frame's buffer, given back above
	 * UNFRAME_KEEP_OUT_BYTES), not held. */
	if (!u->pool || (u->job_bytes > 0 && u->job_bytes + cost > UNFRAME_JOB_BYTES) ||
	    u->budget + cost > e->cfg.frame_budget || u->job_failed) {
		u->job_failed = false;
		return 0;
	}
	job = malloc(sizeof(*job) + len);
	if (!job || util_ranges_add(&f->xfer.decoding, lo, hi) != 0) {
		free(job);
		return -ENOMEM;
	}
	*job = (struct unframe_job){.e = e,
	                            .f = f,
	                            .frame = s->z.frame,
	                            .len = len,
	                            .from = s->z.drop_before > lo ? s->z.drop_before : lo,
	                            .url_idx = s->url_idx};
	memcpy(job->in, src, len);
	flight_ref(f);
	if (!util_worker_queue(u->pool, &job->link)) {
		flight_unref(f);
		free(job);
		return util_ranges_remove(&f->xfer.decoding, lo, hi) ? -ENOMEM : 0;
	}
	f->xfer.decoding_jobs++;
	u->job_bytes += cost;
	frame_bytes_add(e, (int64_t)cost);
	budget_add(e, (int64_t)cost);
	return 1;
}

/* Frame s->z.frame's stored bytes are all in [src, src + len): decompress and deliver it,
 * here or in the pool. */
static int finish_frame(struct stream *s, const unsigned char *src, size_t len)
{
	struct engine *e = s->engine;
	struct flight *f = s->f;
	uint64_t i = s->z.frame, lo, hi, from;
	char why[160];
	int rc;

	flight_frame_bounds(f, i, &lo, &hi);
	rc = queue_frame(s, src, len, lo, hi); /* 1: unframe_deliver_decoded writes it */
	if (rc == 0) {
		rc = decode_inline(e, f, src, len, (size_t)(hi - lo), why, sizeof(why));
		if (rc)
			release_inline(e);
	}
	s->z.frame++;
	s->z.in_len = 0;
	if (rc == -EIO)
		return refuse_frame(e, f, s, s->url_idx, i, why);
	if (rc < 0) {
		s->fatal = rc;
		stream_why(s, "cannot decompress: %s", strerror(-rc));
		return rc;
	}
	if (rc == 1) {
		s->pos = hi;
		return 0;
	}
	from = s->z.drop_before > lo ? s->z.drop_before - lo : 0;
	rc = stream_take_body(s, lo + from, (const char *)e->unframe.out + from,
	                      (size_t)(hi - lo - from));
	release_inline(e);
	if (rc) {
		stream_write_failed(e, f, s, rc);
		return rc;
	}
	atomic_fetch_add_explicit(&e->stats->delivered_bytes, hi - lo - from, memory_order_relaxed);
	s->pos = hi;
	return 0;
}

/* Writes job's decoded frame to its flight's spool, or settles it as bad. */
static void deliver_job(struct engine *e, struct unframe_job *job)
{
	struct flight *f = job->f;
	enum flight_state state;
	uint64_t lo, hi;
	int rc;

	flight_frame_bounds(f, job->frame, &lo, &hi);
	f->xfer.decoding_jobs--;
	e->unframe.job_bytes -= job->len + (hi - lo);
	frame_bytes_add(e, -(int64_t)(job->len + (hi - lo)));
	budget_add(e, -(int64_t)(job->len + (hi - lo)));
	if (util_ranges_remove(&f->xfer.decoding, lo, hi) != 0) {
		engine_fail_flight(e, f, -ENOMEM, "out of memory");
		return;
	}
	flight_progress(f, NULL, NULL, &state);
	if (state != FLIGHT_ACTIVE)
		return;
	if (job->rc == -EIO) {
		(void)refuse_frame(e, f, NULL, job->url_idx, job->frame, job->why);
		return;
	}
	if (job->rc) {
		/* No memory for its decoding: it is a gap again (out of decoding above), which
		 * the scheduler fetches anew on its next turn; the next frame is decoded inline,
		 * so that a shortage that lasts fails a stream (and counts a try) instead of
		 * fetching one frame for ever. */
		e->unframe.job_failed = true;
		util_log(UTIL_LOG_WARN, "%s: frame %" PRIu64 ": %s; fetching it again", f->name,
		         job->frame, strerror(-job->rc));
		return;
	}
	rc = flight_deliver_from(f, job->url_idx, job->from, job->out + (job->from - lo),
	                         (size_t)(hi - job->from));
	if (rc) {
		stream_write_failed(e, f, NULL, rc);
		return;
	}
	atomic_fetch_add_explicit(&e->stats->delivered_bytes, hi - job->from, memory_order_relaxed);
	engine_cache_note_written(e, f);
}

static void job_free(struct unframe_job *job)
{
	flight_unref(job->f);
	free(job->out);
	free(job);
}

void unframe_deliver_decoded(struct engine *e)
{
	struct engine_unframe *u = &e->unframe;
	struct unframe_job *list, *oldest = NULL;

	if (!u->pool)
		return;
	pthread_mutex_lock(&u->lock);
	list = u->decoded;
	u->decoded = NULL;
	pthread_mutex_unlock(&u->lock);
	while (list) { /* oldest first: the prefix readers wait on grows in order */
		struct unframe_job *next = list->next;
		list->next = oldest;
		oldest = list;
		list = next;
	}
	while (oldest) {
		struct unframe_job *next = oldest->next;
		deliver_job(e, oldest);
		job_free(oldest);
		oldest = next;
	}
}

int unframe_start(struct engine *e)
{
	struct engine_unframe *u = &e->unframe;
	int rc;

	if (!e->cfg.unframe_threads)
		return 0;
	pthread_mutex_init(&u->lock, NULL);
	rc = util_worker_start_pool("spoolfs-unzstd", e->cfg.unframe_threads, job_run, e, &u->pool);
	if (rc)
		pthread_mutex_destroy(&u->lock);
	return rc;
}

void unframe_stop(struct engine *e)
{
	struct engine_unframe *u = &e->unframe;

	if (!u->pool)
		return;
	util_worker_stop(u->pool); /* runs what is queued: each lands on decoded */
	u->pool = NULL;
	while (u->decoded) {
		struct unframe_job *job = u->decoded;
		u->decoded = job->next;
		job->f->xfer.decoding_jobs--;
		job_free(job);
	}
	frame_bytes_add(e, -(int64_t)u->job_bytes);
	budget_add(e, -(int64_t)u->job_bytes);
	while (u->idle) {
		struct unframe_dctx *d = u->idle;
		u->idle = d->next;
		ZSTD_freeDCtx(d->dctx);
		free(d);
	}
	u->job_bytes = 0;
	pthread_mutex_destroy(&u->lock);
}

int unframe_body(struct stream *s, const char *data, size_t len, size_t *used)
{
	const struct flight *f = s->f;
	int rc;

	*used = 0;
	while (*used < len && s->pos < s->end) {
		uint64_t i = s->z.frame;
		size_t flen = (size_t)(f->frames.stored_off[i + 1] - f->frames.stored_off[i]);
		size_t take = len - *used < flen - s->z.in_len ? len - *used : flen - s->z.in_len;
		const unsigned char *src = (const unsigned char *)data + *used;
		*used += take;
		/* A frame that came whole in this piece is decoded where it lies. */
		if (s->z.in_len > 0 || take < flen) {
			if (!s->z.in) {
				s->z.in = malloc(f->frames.max_stored);
				if (!s->z.in) {
					s->fatal = -ENOMEM;
					stream_why(s, "out of memory for a frame");
					return -ENOMEM;
				}
				frame_bytes_add(s->engine, (int64_t)f->frames.max_stored);
			}
			memcpy(s->z.in + s->z.in_len, src, take);
			s->z.in_len += take;
			if (s->z.in_len < flen)
				continue;
			src = s->z.in;
		}
		rc = finish_frame(s, src, flen);
		if (rc)
			return rc;
	}
	return 0;
}

void unframe_stream_free(struct stream *s)
{
	if (s->z.in)
		frame_bytes_add(s->engine, -(int64_t)s->f->frames.max_stored);
	if (s->z.budget)
		budget_add(s->engine, -(int64_t)s->z.budget);
	s->z.budget = 0;
	free(s->z.in);
	s->z.in = NULL;
}

void unframe_engine_free(struct engine *e)
{
	ZSTD_freeDCtx(e->unframe.dctx);
	frame_bytes_add(e, -(int64_t)e->unframe.out_cap);
	free(e->unframe.out);
	e->unframe.dctx = NULL;
	e->unframe.out = NULL;
	e->unframe.out_cap = 0;
}

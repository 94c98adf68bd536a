/*
 * The transfer thread (see engine.h). Lock order when it takes locks: queue_lock alone;
 * a flight's lock inside flight.h calls, and alone to change the flight's version and
 * URL or take its bad-chunk source (transfer_i.h, flight_i.h). Streams, the active list
 * and each flight's xfer belong to the transfer thread alone. The loop itself and the
 * flight's life in it are here; the rest of the thread's work is in stream.c, schedule.c
 * and engine_cache.c (engine_i.h).
 */
#include "fetch/engine/engine.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fetch/engine/engine_i.h"
#include "fetch/cache/lease.h"
#include "fetch/s3/s3_list.h"
#include "util/log.h"
#include "fetch/engine/recorder.h"
#include "util/fd_room.h"
#include "util/thread.h"
#include "index/records.h"

/* What a failed attempt must have brought to count as progress, not as a failure. */
#define RESUME_PROGRESS_BYTES (64u << 10)
/*
 * File descriptors left to readers under RLIMIT_NOFILE: speculation starts no flight that
 * would leave fewer (a reader's open needs one for its spool and its own request may need a
 * connection; --max-transfers is 16 by default). Each speculative flight takes about
 * SPEC_FDS_EACH (its spool file and a connection); the count is looked at again at most
 * every SPEC_FD_LOOK_MS, and every SPEC_FD_WAIT_MS while a flight waits for fds.
 */
#define SPEC_FD_HEADROOM 32
#define SPEC_FDS_EACH 2
#define SPEC_FD_LOOK_MS 5
#define SPEC_FD_WAIT_MS 50

void engine_config_defaults(struct engine_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->stall_timeout_s = 30;
	cfg->net.connect_timeout_s = 10;
	cfg->max_tries = 6;
	cfg->max_transfers = 16;
	cfg->max_streams_per_flight = 10;
	cfg->parallel_parts = 8;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	cfg->unframe_threads = cpus < 1 ? 1 : cpus > 16 ? 16 : (unsigned)cpus;
	cfg->spec_max = 32;
	cfg->frame_budget = 256u << 20;
	cfg->backoff_base_ms = HTTP_BACKOFF_BASE_MS;
	cfg->backoff_cap_ms = HTTP_BACKOFF_CAP_MS;
	cfg->lease_dirfd = -1;
	cfg->progress_dirfd = -1;
}

int engine_create(const struct engine_config *cfg, struct engine **out)
{
	struct engine *e = calloc(1, sizeof(*e));
	int rc = -ENOMEM;

	if (!e)
		goto fail;
	e->cfg = *cfg;
	e->stats = cfg->stats ? cfg->stats : &e->own_stats;
	spec_limit_init(&e->spec.limit, cfg->spec_max);
	atomic_store(&e->stats->spec_limit, e->spec.limit.cur);
	e->pending.buf = malloc(SPOOL_WRITE_BYTES);
	if (!e->pending.buf)
		goto fail_engine;
	if (cfg->lease_dirfd >= 0 && (rc = lease_set_create(cfg->lease_dirfd, &e->leases)) != 0)
		goto fail_engine;
	rc = -ENOMEM;
	e->multi = curl_multi_init();
	if (!e->multi)
		goto fail_engine;
	pthread_mutex_init(&e->queue_lock, NULL);
	*out = e;
	return 0;
fail_engine:
	lease_set_destroy(e->leases);
	free(e->pending.buf);
	free(e);
fail:
	return rc;
}

const struct engine_stats *engine_stats(struct engine *e)
{
	return e->stats;
}

void engine_kick(struct engine *e, struct flight *f)
{
	bool queued = false;

	pthread_mutex_lock(&e->queue_lock);
	if (!f->xfer.engine_queued && !e->stopping) {
		flight_ref(f);
		f->xfer.engine_queued = true;
		f->xfer.engine_next = e->queue;
		e->queue = f;
		queued = true;
	}
	pthread_mutex_unlock(&e->queue_lock);
	if (queued)
		curl_multi_wakeup(e->multi);
}

/* Speculation backs off (spec_limit.h), saying why when the bound moved. */
static void cut_speculation(struct engine *e, const char *why)
{
	unsigned before = e->spec.limit.cur;

	spec_limit_throttled(&e->spec.limit, now_ms());
	if (e->spec.limit.cur != before)
		util_log(UTIL_LOG_INFO, "%s: at most %u speculative requests at once now", why,
		         e->spec.limit.cur);
	atomic_store(&e->stats->spec_limit, e->spec.limit.cur);
}

void engine_note_throttled(struct engine *e)
{
	atomic_fetch_add_explicit(&e->stats->throttled, 1, memory_order_relaxed);
	cut_speculation(e, "upstream asks to slow down (503 or 429)");
}

/* Fds ran short somewhere in the process (an open failed with EMFILE or ENFILE): speculation
 * backs off as on a 503, once per burst. */
static void note_fds_short(struct engine *e)
{
	unsigned shorts = util_fd_shorts();

	if (shorts == e->spec.fd_shorts_seen)
		return;
	e->spec.fd_shorts_seen = shorts;
	e->spec.fd_checked_ms = 0; /* count again before the next one starts */
	cut_speculation(e, "out of file descriptors (EMFILE or ENFILE)");
}

/* Whether one more speculative flight may start now: a slot free under the bound, and fds
 * to spare for it above what readers keep. Takes its share of the fds when it may. */
static bool spec_may_start(struct engine *e)
{
	uint64_t now;

	if (e->spec.n_running >= e->spec.limit.cur)
		return false;
	now = now_ms();
	if (e->spec.fd_checked_ms == 0 || now - e->spec.fd_checked_ms >= SPEC_FD_LOOK_MS) {
		e->spec.fd_left = util_fd_room() - SPEC_FD_HEADROOM;
		e->spec.fd_checked_ms = now;
	}
	if (e->spec.fd_left < SPEC_FDS_EACH) {
		e->spec.fd_blocked = true;
		return false;
	}
	e->spec.fd_left -= SPEC_FDS_EACH;
	return true;
}

void engine_drop_speculation(struct engine *e, struct flight *f, int err)
{
	util_log(UTIL_LOG_INFO, "%s: not fetched ahead: %s", f->name, strerror(-err));
	note_fds_short(e); /* flight_open_spool counted the shortage */
	while (f->xfer.streams)
		stream_free(e, f->xfer.streams);
	flight_fail(f, err);
}

void engine_fail_flight(struct engine *e, struct flight *f, int err, const char *why)
{
	char url[512];

	util_log(UTIL_LOG_ERROR, "%s: download failed (%s) from %s", f->name, why,
	         util_redact_url(f->src.urls[f->xfer.url_idx], url, sizeof(url)));
	atomic_fetch_add_explicit(&e->stats->failures, 1, memory_order_relaxed);
	while (f->xfer.streams)
		stream_free(e, f->xfer.streams);
	flight_fail(f, err);
}

static int activate(struct engine *e, struct flight *f)
{
	int rc;

	if (e->n_active == e->cap_active) {
		size_t cap = e->cap_active ? e->cap_active * 2 : 16;
		struct flight **v = realloc(e->active, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		e->active = v;
		e->cap_active = cap;
	}
	f->xfer.engine_started = true;
	if (f->speculative)
		atomic_fetch_add_explicit(&e->stats->spec_flights, 1, memory_order_relaxed);
	flight_ref(f);
	e->active[e->n_active++] = f;
	if (e->cfg.durable && e->cfg.records)
		index_records_touch(e->cfg.records, f->key, f->size, engine_cache_use_stamp(e));
	if (e->leases) {
		rc = lease_set_try(e->leases, f->key);
		if (rc < 0) {
			engine_fail_flight(e, f, rc,
			                   "cannot lock the cache directory's lease file");
			return 0;
		}
		f->xfer.lease_held = rc == 1;
		/* Said before the first look at the records: the holder then goes whole. */
		if (!f->xfer.lease_held && (rc = lease_set_watch(e->leases, f->key)) < 0) {
			engine_fail_flight(e, f, rc,
			                   "cannot lock the cache directory's lease file");
			return 0;
		}
		f->xfer.lease_watching = !f->xfer.lease_held;
		if (!f->xfer.lease_held) {
			util_log(UTIL_LOG_INFO, "%s: another mount of the cache is downloading it",
			         f->name);
			engine_cache_watch(e, f);
			return 0;
		}
	}
	engine_cache_start_owned(e, f);
	return 0;
}

/*
 * After a failed attempt the next goes to the next mirror. A hash keeps bytes from two
 * servers honest, so a hashed object switches at any point and drops its pinned ETag
 * (mirrors need not agree on ETags); an unhashed one switches only before its first byte.
 */
static bool may_switch_mirror(struct flight *f)
{
	return f->src.n_urls > 1 && (flight_hash_names_version(f) || flight_written(f) == 0);
}

/* Whether url i answered this flight with a refusal (see urls_refused in flight_i.h). */
static bool refused(const struct flight *f, unsigned i)
{
	return f->xfer.urls_refused >> i & 1u; /* i < n_urls <= FLIGHT_MAX_URLS */
}

static void next_mirror(struct flight *f)
{
	unsigned next = f->xfer.url_idx;

	if (!may_switch_mirror(f))
		return;
	do
		next = (next + 1) % f->src.n_urls;
	while (refused(f, next) && next != f->xfer.url_idx);
	pthread_mutex_lock(&f->lock);
	f->xfer.url_idx = next;
	/* A version the source named is part of the object's identity: every mirror must
	 * serve that one (the key says so). */
	if (flight_hash_names_version(f) || !f->source_etag) {
		f->xfer.version.etag[0] = '\0';
		f->xfer.version.last_modified[0] = '\0';
		f->xfer.version.seen = false;
	}
	pthread_mutex_unlock(&f->lock);
}

/*
 * A mirror that refuses an object (404, a size or version that is not the manifest's, a
 * certificate it cannot prove) is often one not yet synced: the object goes on from the
 * other URLs, and fails only once each has refused it (or, unhashed, once bytes came from
 * one of them). True when it goes on.
 */
bool engine_try_other_mirror(struct engine *e, struct flight *f, unsigned from, const char *why)
{
	char url[512];

	if (!may_switch_mirror(f))
		return false;
	f->xfer.urls_refused |= 1u << from;
	if (f->xfer.url_idx == from) /* else another stream of it has switched already */
		next_mirror(f);
	if (refused(f, f->xfer.url_idx))
		return false;
	util_log(UTIL_LOG_WARN, "%s: %s from %s; trying %s", f->name, why,
	         util_redact_url(f->src.urls[from], url, sizeof(url)),
	         f->xfer.url_idx == 0 ? "the manifest's URL" : "the next mirror");
	atomic_fetch_add_explicit(&e->stats->retries, 1, memory_order_relaxed);
	return true;
}

void engine_avoid_bad_source(struct engine *e, struct flight *f)
{
	unsigned bad;

	pthread_mutex_lock(&f->lock);
	bad = f->verify.chunk_bad_url;
	f->verify.chunk_bad_url = 0;
	pthread_mutex_unlock(&f->lock);
	/* Only when it is still the one asked: another stream may have moved on already. */
	if (!bad || f->xfer.url_idx != bad - 1 || !may_switch_mirror(f))
		return;
	next_mirror(f);
	if (f->xfer.url_idx != bad - 1)
		atomic_fetch_add_explicit(&e->stats->retries, 1, memory_order_relaxed);
}

/* The <Code> of a refused request's S3 error body into code ("" when there is none). */
static void refusal_code(const struct stream *s, char *code, size_t len)
{
	struct s3_list_result r = {0};

	code[0] = '\0';
	if (s3_list_parse(s->auth.err_body, s->auth.err_len, NULL, &r, NULL, 0) == 0 &&
	    r.kind == S3_DOC_ERROR)
		snprintf(code, len, "%s", r.error.code);
	s3_list_result_free(&r);
}

/*
 * A signed request answered 400 or 403. Expired credentials (a refresh came late, or the
 * clock runs behind the server's): ask for fresh ones and send again once they are there,
 * without counting a failure, unless this request was that resend already. True when s
 * is done with (freed); else s is marked retryable (counted) or fatal.
 */
static bool on_refused(struct engine *e, struct stream *s)
{
	struct flight *f = s->f;
	char code[64];
	long status = 0;

	refusal_code(s, code, sizeof(code));
	curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &status);
	stream_why(s, "HTTP %ld%s%s", status, code[0] ? " " : "", code);
	if (!e->cfg.error_is_expired(code)) {
		s->fatal = -EIO;
		return false;
	}
	uint64_t gen = s->auth.creds_gen;
	if (e->cfg.creds_expired)
		e->cfg.creds_expired(e->cfg.sign_ctx, gen);
	/* Free once until a request succeeds again, for every request signed with the
	 * generation refused first (or an older one): they were all sent before the refresh. */
	if (f->xfer.auth.retried && gen > f->xfer.auth.gen) {
		s->retryable = true; /* refused again after a refresh: a failure like any */
		return false;
	}
	f->xfer.auth.retried = true;
	if (!f->xfer.auth.wait)
		util_log(UTIL_LOG_INFO,
		         "%s: %s: credentials refused as expired; sending again"
		         " with fresh ones (not counted as a failure)",
		         f->name, s->why);
	f->xfer.auth.wait = true;
	if (f->xfer.auth.gen < gen)
		f->xfer.auth.gen = gen;
	f->xfer.auth.until_ms = now_ms() + AUTH_WAIT_MS;
	stream_free(e, s);
	return true;
}

static void on_done(struct engine *e, struct stream *s, CURLcode result)
{
	struct flight *f = s->f;
	uint64_t progress = s->pos - s->attempt_start;
	char why[sizeof(s->why)];
	int fatal;

	if (!s->checked && result == CURLE_OK)
		stream_check_response(s);
	/* A part answered short (less than asked) counts as a success only if it brought real
	 * progress: a server that answers a few bytes at a time would be asked for ever. */
	if (s->reached_end && !s->fatal &&
	    (!s->answered_short || progress >= RESUME_PROGRESS_BYTES)) {
		/* A reader's range is worth a record at once; pieces of a whole download are
		 * recorded every so many bytes (each record is an fdatasync), and at completion. */
		bool for_reader = !s->background;
		if (s->speculative) {
			spec_limit_success(&e->spec.limit);
			atomic_store(&e->stats->spec_limit, e->spec.limit.cur);
		}
		f->xfer.failures = 0;
		f->xfer.auth.retried = false;
		stream_free(e, s);
		engine_cache_record_progress(e, f, for_reader);
		return;
	}
	if (s->auth.refused && !s->fatal && on_refused(e, s))
		return;
	fatal = s->fatal;
	if (fatal == 0 && s->stalled) {
		stream_why(s, "no byte for %u s (stalled)", e->cfg.stall_timeout_s);
	} else if (fatal == 0 && s->too_slow) {
		stream_why(s, "under 1 KiB/s for %u s (stalled)", e->cfg.stall_timeout_s);
	} else if (fatal == 0 && s->reached_end) {
		/* (unless the answer said why: a frame that did not fit) */
		if (!(s->answered_short && s->why[0]))
			stream_why(s, "answered %" PRIu64 " bytes of the range asked", progress);
	} else if (fatal == 0 && !s->retryable && result == CURLE_OK) {
		/* A body that ends with its connection (no length) and ends early is a cut like
		 * any other: resumed from where it stopped. */
		stream_why(s, "upstream body ended at byte %" PRIu64 ", expected %" PRIu64, s->pos,
		           s->end);
	} else if (fatal == 0 && !s->retryable && s->guard.refused) {
		fatal = -EIO;
		stream_why(s, "%s", s->guard.why);
	} else if (fatal == 0 && !s->retryable &&
	           fetch_net_redirect_refused(s->easy, result, f->src.urls[s->url_idx], s->why,
	                                      sizeof(s->why))) {
		fatal = -EIO;
	} else if (fatal == 0 && !s->retryable) {
		if (!http_curl_error_is_transient(result))
			fatal = -EIO;
		stream_why(s, "%s", s->errbuf[0] ? s->errbuf : curl_easy_strerror(result));
	}
	snprintf(why, sizeof(why), "%s", s->why);
	int retry_after = s->retryable ? s->resp.retry_after_s : -1;
	unsigned round = s->round;
	/* Neither a spool fault nor a frame that did not decompress is a refusal that another
	 * mirror could mend: a bad frame fails the object as a bad hash does. */
	bool servers_answer = !s->spool_fault && !s->undecodable;
	unsigned asked = s->url_idx;
	stream_free(e, s);
	if (fatal && servers_answer && engine_try_other_mirror(e, f, asked, why))
		return;
	if (fatal) {
		engine_fail_flight(e, f, fatal, why);
		return;
	}
	/* An outage cuts every connection of a flight at once: the streams started before the
	 * last counted failure share its try, its backoff and its mirror switch (counting each
	 * would use up the tries at once and switch mirrors back and forth). */
	if (round != f->xfer.fail_round) {
		util_log(UTIL_LOG_DEBUG, "%s: %s (counted with the previous failure)", f->name,
		         why);
		return;
	}
	f->xfer.fail_round++;
	/* Only real progress earns the tries back: a server that cuts every answer after a few
	 * bytes would otherwise be asked again for ever. Progress of the object, not only of
	 * this request: several slow ones may each bring little. */
	uint64_t now_written = flight_written(f);
	/* (A chunk that failed its hash leaves `written`: less than before is no progress.) */
	if (progress >= RESUME_PROGRESS_BYTES ||
	    (now_written > f->xfer.written_at_failure &&
	     now_written - f->xfer.written_at_failure >= RESUME_PROGRESS_BYTES))
		f->xfer.failures = 0;
	f->xfer.written_at_failure = now_written;
	f->xfer.failures++;
	if (f->xfer.failures >= e->cfg.max_tries) {
		char msg[sizeof(why) + 40];
		snprintf(msg, sizeof(msg), "giving up after %u tries, last: %s", f->xfer.failures,
		         why);
		engine_fail_flight(e, f, -EIO, msg);
		return;
	}
	uint64_t delay =
	    http_backoff_ms(f->xfer.failures, e->cfg.backoff_base_ms, e->cfg.backoff_cap_ms,
	                    fetch_net_jitter(), retry_after, 4 * e->cfg.backoff_cap_ms);
	char url[512];
	uint64_t written = 0;
	flight_progress(f, &written, NULL, NULL);
	util_log(UTIL_LOG_WARN,
	         "%s: %s from %s; retry %u in %" PRIu64 " ms (%" PRIu64 " of %" PRIu64
	         " bytes local)",
	         f->name, why, util_redact_url(f->src.urls[f->xfer.url_idx], url, sizeof(url)),
	         f->xfer.failures, delay, written, f->size);
	atomic_fetch_add_explicit(&e->stats->retries, 1, memory_order_relaxed);
	next_mirror(f);
	/* Other streams of this flight keep going; new ones wait for the backoff. */
	uint64_t due = now_ms() + delay;
	if (f->xfer.retry_due_ms < due)
		f->xfer.retry_due_ms = due;
}

/* Drops flights that need nothing more from the engine. */
static void retire_finished(struct engine *e)
{
	size_t kept = 0;

	for (size_t i = 0; i < e->n_active; i++) {
		struct flight *f = e->active[i];
		enum flight_state state;
		flight_progress(f, NULL, NULL, &state);
		if (state != FLIGHT_ACTIVE && f->xfer.n_streams == 0 &&
		    f->xfer.decoding_jobs == 0) {
			if (state == FLIGHT_COMPLETE)
				atomic_fetch_add_explicit(&e->stats->completed, 1,
				                          memory_order_relaxed);
			engine_cache_record_progress(e, f, true);
			engine_cache_release_lease(e, f);
			flight_engine_done(f);
			flight_unref(f);
			continue;
		}
		e->active[kept++] = f;
	}
	e->n_active = kept;
}

/* Keeps f (a new speculative flight nobody has opened) until a speculative slot is free. */
static int park_speculative(struct engine *e, struct flight *f)
{
	if (e->spec.n_waiting == e->spec.cap_waiting && e->spec.head > 0) {
		/* Drop what was taken from the front before growing. */
		memmove(e->spec.waiting, e->spec.waiting + e->spec.head,
		        (e->spec.n_waiting - e->spec.head) * sizeof(*e->spec.waiting));
		e->spec.n_waiting -= e->spec.head;
		e->spec.head = 0;
	}
	if (e->spec.n_waiting == e->spec.cap_waiting) {
		size_t cap = e->spec.cap_waiting ? e->spec.cap_waiting * 2 : 64;
		struct flight **v = realloc(e->spec.waiting, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		e->spec.waiting = v;
		e->spec.cap_waiting = cap;
	}
	flight_ref(f);
	e->spec.waiting[e->spec.n_waiting++] = f;
	return 0;
}

/* Activates waiting speculative flights while slots are free, in the order they came. */
static void admit_speculative(struct engine *e)
{
	while (e->spec.head < e->spec.n_waiting && spec_may_start(e)) {
		struct flight *f = e->spec.waiting[e->spec.head++];
		enum flight_state state;
		flight_progress(f, NULL, NULL, &state);
		/* A reader's kick may have activated it meanwhile. */
		if (!f->xfer.engine_started && state == FLIGHT_ACTIVE && activate(e, f) != 0)
			engine_fail_flight(e, f, -ENOMEM, "out of memory");
		else if (f->xfer.engine_started)
			schedule_flight(e, f);
		flight_unref(f);
	}
	if (e->spec.head == e->spec.n_waiting)
		e->spec.head = e->spec.n_waiting = 0;
}

static void drain_queue(struct engine *e)
{
	struct flight *f;

	pthread_mutex_lock(&e->queue_lock);
	f = e->queue;
	e->queue = NULL;
	/* Once unqueued, a flight can be queued again (engine_next rewritten) at any time.
	 * The queue is last-kicked first: reversed, flights start in the order they were
	 * kicked (prefetch hands them over in the order it wants them fetched). */
	struct flight *fifo = NULL;
	for (struct flight *q = f; q; q = q->xfer.engine_next) {
		q->xfer.engine_queued = false;
		q->xfer.engine_drain_next = fifo;
		fifo = q;
	}
	f = fifo;
	pthread_mutex_unlock(&e->queue_lock);
	while (f) {
		struct flight *next = f->xfer.engine_drain_next;
		enum flight_state state;
		flight_progress(f, NULL, NULL, &state);
		bool wait = !f->xfer.engine_started && state == FLIGHT_ACTIVE &&
		            flight_speculation_unclaimed(f) && !spec_may_start(e);
		if (wait && park_speculative(e, f) != 0)
			engine_fail_flight(e, f, -ENOMEM, "out of memory");
		else if (!wait && !f->xfer.engine_started && state == FLIGHT_ACTIVE &&
		         activate(e, f) != 0)
			engine_fail_flight(e, f, -ENOMEM, "out of memory");
		if (f->xfer.engine_started)
			schedule_flight(e, f);
		flight_unref(f);
		f = next;
	}
}

/*
 * Ends every stream still running with a spool write failure. A flush can fail for a
 * stream other than the one whose callback is running, or after curl_multi_perform: curl
 * keeps such a stream until its next callback, which an idle upstream may not send before
 * the stall timeout, and until then its unwritten bytes would look unclaimed to
 * schedule_flight() and be asked for again. on_done may free other streams and flights: start
 * over after each.
 */
static void end_failed_streams(struct engine *e)
{
	e->write_failed = false;
again:
	for (size_t i = 0; i < e->n_active; i++) {
		for (struct stream *s = e->active[i]->xfer.streams; s; s = s->next) {
			if (s->fatal) {
				on_done(e, s, CURLE_WRITE_ERROR);
				goto again;
			}
		}
	}
}

/* Frees the streams a callback stopped at their position (stream_check_response): they
 * have nothing left to fetch, and waiting for their next bytes could mean a stall. */
static void end_stopped_streams(struct engine *e)
{
	e->streams_stopped = false;
	for (size_t i = 0; i < e->n_active; i++) {
		struct stream *s = e->active[i]->xfer.streams;
		while (s) {
			struct stream *next = s->next;
			if (s->pos >= s->end && !s->fatal)
				stream_free(e, s);
			s = next;
		}
	}
}

/* One turn's work for f: follow another mount's download, or start what f needs now; lowers
 * *timeout to when f next needs a look. */
static void tend(struct engine *e, struct flight *f, uint64_t now, long *timeout)
{
	if (watching(e, f)) {
		enum flight_state state;
		flight_progress(f, NULL, NULL, &state);
		if (state != FLIGHT_ACTIVE)
			return; /* failed or finished: retire_finished lets it go */
		if (f->xfer.next_watch_ms <= now)
			engine_cache_watch(e, f);
		if (watching(e, f) && (long)(f->xfer.next_watch_ms - now) < *timeout)
			*timeout = (long)(f->xfer.next_watch_ms - now);
		return;
	}
	if (f->xfer.lease_held && f->xfer.next_watch_ms <= now)
		engine_cache_look_for_watchers(e, f, now);
	if (f->xfer.lease_held && !f->xfer.watched &&
	    (long)(f->xfer.next_watch_ms - now) < *timeout)
		*timeout = (long)(f->xfer.next_watch_ms - now);
	if (f->xfer.retry_due_ms && f->xfer.retry_due_ms > now) {
		if ((long)(f->xfer.retry_due_ms - now) < *timeout)
			*timeout = (long)(f->xfer.retry_due_ms - now);
		return;
	}
	schedule_flight(e, f);
	engine_cache_record_progress(e, f, false);
}

static void *engine_main(void *arg)
{
	struct engine *e = arg;
	bool stopping = false;

	while (!stopping) {
		int running = 0, pending;
		CURLMsg *msg;
		long timeout = 1000;
		uint64_t now;

		note_fds_short(e);
		e->spec.fd_blocked = false;
		drain_queue(e);
		curl_multi_perform(e->multi, &running);
		(void)stream_flush_pending(
		    e); /* a failure marks its stream: see end_failed_streams */
		unframe_deliver_decoded(e);
		while ((msg = curl_multi_info_read(e->multi, &pending))) {
			struct stream *s = NULL;
			if (msg->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&s);
			on_done(e, s, msg->data.result);
		}
		if (e->write_failed)
			end_failed_streams(e);
		if (e->streams_stopped)
			end_stopped_streams(e);
		admit_speculative(e);
		/* Waiting for fds, not a slot: nothing wakes it when readers close some. */
		if (e->spec.fd_blocked && e->spec.head < e->spec.n_waiting &&
		    timeout > SPEC_FD_WAIT_MS)
			timeout = SPEC_FD_WAIT_MS;
		now = now_ms();
		/* The flight whose readers have waited longest for room first: a slot freed this
		 * turn goes to it before the next piece of another object (a reader of a new
		 * object waited for another object's whole download). */
		struct flight *first = NULL;
		for (size_t i = 0; i < e->n_active; i++) {
			struct flight *f = e->active[i];
			if (f->xfer.starved_ms &&
			    (!first || f->xfer.starved_ms < first->xfer.starved_ms))
				first = f;
		}
		if (first)
			tend(e, first, now, &timeout);
		for (size_t i = 0; i < e->n_active; i++)
			if (e->active[i] != first)
				tend(e, e->active[i], now, &timeout);
		retire_finished(e);
		if (e->recheck_ms) {
			now = now_ms();
			if ((long)(e->recheck_ms - now) < timeout)
				timeout = e->recheck_ms > now ? (long)(e->recheck_ms - now) : 1;
			e->recheck_ms = 0; /* schedule sets it again while it still defers */
		}
		curl_multi_poll(e->multi, NULL, 0, timeout > 0 ? (int)timeout : 1, NULL);
		pthread_mutex_lock(&e->queue_lock);
		stopping = e->stopping;
		pthread_mutex_unlock(&e->queue_lock);
	}
	return NULL;
}

int engine_start(struct engine *e)
{
	int rc = 0;

	/* Records matter only in a cache directory that a later session may reuse. */
	if (e->cfg.durable && e->cfg.records)
		rc = recorder_start(e->cfg.records, &e->recorder);
	if (rc)
		return rc;
	rc = unframe_start(e);
	if (rc) {
		recorder_stop(e->recorder);
		e->recorder = NULL;
		return rc;
	}
	rc = util_thread_start(&e->thread, "spoolfs-xfer", engine_main, e);
	if (rc) {
		unframe_stop(e);
		recorder_stop(e->recorder);
		e->recorder = NULL;
		return rc;
	}
	e->thread_started = true;
	return 0;
}

void engine_stop(struct engine *e)
{
	pthread_mutex_lock(&e->queue_lock);
	bool already = e->stopping;
	e->stopping = true;
	pthread_mutex_unlock(&e->queue_lock);
	if (already)
		return;
	curl_multi_wakeup(e->multi);
	if (e->thread_started)
		pthread_join(e->thread, NULL);
	/* Frames still being decompressed are dropped: their flights stop below. */
	unframe_stop(e);
	/* The thread is gone: this thread now owns the engine's state. */
	pthread_mutex_lock(&e->queue_lock);
	struct flight *queued = e->queue;
	e->queue = NULL;
	pthread_mutex_unlock(&e->queue_lock);
	while (queued) {
		struct flight *next = queued->xfer.engine_next;
		if (!queued->xfer.engine_started)
			flight_stop(queued, -EIO); /* its parked readers must not wait forever */
		flight_unref(queued);
		queued = next;
	}
	for (size_t i = e->spec.head; i < e->spec.n_waiting; i++) {
		if (!e->spec.waiting[i]->xfer.engine_started)
			flight_stop(e->spec.waiting[i], -EIO);
		flight_unref(e->spec.waiting[i]);
	}
	e->spec.head = e->spec.n_waiting = 0;
	for (size_t i = 0; i < e->n_active; i++) {
		enum flight_state state;
		flight_progress(e->active[i], NULL, NULL, &state);
		if (state == FLIGHT_ACTIVE) {
			while (e->active[i]->xfer.streams)
				stream_free(e, e->active[i]->xfer.streams);
			/* Kept for the next session: a persistent cache resumes from here. */
			engine_cache_record_progress(e, e->active[i], true);
			flight_stop(e->active[i], -EIO);
		} else {
			/* Finished or failed since the last retire: its final record first. */
			engine_cache_record_progress(e, e->active[i], true);
		}
		engine_cache_release_lease(e, e->active[i]);
		flight_unref(e->active[i]);
	}
	e->n_active = 0;
	/* Every record queued above is written before the index closes. */
	recorder_stop(e->recorder);
	e->recorder = NULL;
}

void engine_destroy(struct engine *e)
{
	if (!e)
		return;
	engine_stop(e);
	curl_multi_cleanup(e->multi);
	lease_set_destroy(e->leases); /* after the recorder let its leases go */
	pthread_mutex_destroy(&e->queue_lock);
	free(e->pending.buf);
	unframe_engine_free(e);
	free(e->active);
	free(e->spec.waiting);
	free(e);
}

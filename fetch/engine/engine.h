/*
 * The transfer engine: one thread that owns a curl multi handle and runs every download.
 *
 * Other threads hand it flights with engine_kick (new flights, new waiters that may need a
 * chunk fetched out of order) and wake it with curl_multi_wakeup. For each flight it runs
 * one or more streams: ranged GETs that each fill one gap of the spool front to back. A
 * reader parked far ahead of every stream splits off a stream at its chunk, so it does not
 * wait for the prefix. A failed attempt resumes from the written frontier with Range,
 * pinned to the first response's ETag with If-Match, after a backoff; attempts without
 * progress are bounded, then the flight fails and its readers get -EIO.
 *
 * With a cache directory shared by several mounts, one mount downloads each object (it holds
 * the object's lease) and records its progress in the shared index as it goes; the others
 * watch those records, serve their readers from the same spool file, and take the download
 * over from the recorded ranges if the holder lets go without finishing (killed, unmounted).
 *
 * Locks: queue_lock guards the hand-over queue and the stop flag. Everything else in the
 * engine is owned by the transfer thread. The engine takes flight locks only through
 * flight.h calls and never holds its queue lock while doing so.
 */
#ifndef SPOOLFS_FETCH_ENGINE_H
#define SPOOLFS_FETCH_ENGINE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <curl/curl.h>

#include "fetch/engine/flight.h"
#include "fetch/engine/spec_limit.h"
#include "fetch/http/net.h"
#include "util/histogram.h"

struct index_records;

struct engine_config {
	unsigned stall_timeout_s; /* no byte for this long: the attempt is dropped and resumed */
	unsigned connect_timeout_s;
	unsigned max_tries;     /* consecutive attempts without progress before giving up */
	unsigned max_transfers; /* concurrent transfers over all flights */
	unsigned max_streams_per_flight;
	unsigned parallel_parts; /* ranged requests a large object is fetched with at once */
	/* Threads that decompress compressed objects' frames beside the transfer thread (one
	 * per online CPU by default, at most 16); 0: the transfer thread decompresses them. */
	unsigned unframe_threads;
	/* Bytes compressed objects' frame buffers may hold at once, over all flights (a
	 * request's buffer for a frame that comes in pieces, the pool's jobs): a request that
	 * would go over waits, as one over max_transfers does; the first always starts. */
	uint64_t frame_budget;
	/* Speculative requests at once (flight_spec.speculative), on top of max_transfers so a
	 * reader never waits for speculation; lowered while the upstream throttles
	 * (spec_limit.h). 0: speculative flights wait for a reader. */
	unsigned spec_max;
	uint64_t backoff_base_ms;
	uint64_t backoff_cap_ms;
	struct fetch_net net;
	bool durable;            /* fdatasync the spool before recording its ranges */
	uint64_t cache_max_size; /* with durable: evict least recently used beyond it; 0 = no */
	struct index_records *records; /* records ranges and completions; may be NULL */
	/* With durable: the cache directory (held open by the caller for the engine's life)
	 * whose lease file decides which of the mounts sharing it downloads an object (lease.h);
	 * the others read its records. -1 (engine_config_defaults): no other mount shares it. */
	int lease_dirfd;
	/* With durable: the session's directory of progress notes (progress_note.h), for the
	 * serving process that replaces this one; -1 (engine_config_defaults): none. */
	int progress_dirfd;
	/* Where the counters live: in memory the mount's later serving processes map too, so
	 * that they go on counting from there (doc/survive.md); NULL: the engine's own. */
	struct engine_stats *stats;
	/* Adds per-request headers (S3 signatures) before every attempt; may be NULL. *gen
	 * gets the generation of the credentials signed with. */
	int (*sign)(void *ctx, const char *url, struct curl_slist **headers, uint64_t *gen);
	void *sign_ctx;
	/* With sign: a signed request was refused because its credentials expired (S3's
	 * ExpiredToken, RequestExpired, InvalidToken, TokenRefreshRequired): asks for fresh
	 * ones without blocking; and the generation now, so the flight sends it again once a
	 * newer one is there. Such a refusal is not counted as a failed try, once per
	 * generation. */
	void (*creds_expired)(void *ctx, uint64_t gen);
	uint64_t (*creds_generation)(void *ctx);
	/* Whether an error code from a refused request's body means expired credentials. */
	bool (*error_is_expired)(const char *code);
};

/* Upstream counters, updated by the transfer thread, readable from any thread. Shared by
 * the mount's serving processes (fs/shared_counters.c): a change of its fields raises
 * COUNTERS_FORMAT there. */
struct engine_stats {
	atomic_uint_fast64_t requests;
	atomic_uint_fast64_t bytes; /* body bytes received: on the wire (compressed or not) */
	atomic_uint_fast64_t retries;
	atomic_uint_fast64_t failures;
	atomic_uint_fast64_t completed;
	/* New flights found complete in the cache directory (an earlier session's download, or
	 * another mount's): their opens were counted as misses, and were hits. */
	atomic_uint_fast64_t restored;
	/* Prefetch: speculative flights started, body bytes received for them, answers of 503
	 * or 429 (any request), and the speculative bound now (spec_limit.h). */
	atomic_uint_fast64_t spec_flights;
	atomic_uint_fast64_t spec_bytes;
	atomic_uint_fast64_t throttled;
	atomic_uint_fast64_t spec_limit;
	/* Connections the downloads opened (a reused one counts once), and responses that came
	 * over HTTP/2: with h2 many downloads share one connection. */
	atomic_uint_fast64_t connections;
	atomic_uint_fast64_t http2_responses;
	/* Seconds from sending each request until its response's headers, by HTTP status; a
	 * request that ended without one (refused, stalled, stopped, a file: mirror) is key 0. */
	struct util_histogram_set latency;
	/* Bytes of objects the bodies gave the spool: bytes less what no request kept
	 * (skipped, past a split), more what compressed objects decompressed to. */
	atomic_uint_fast64_t delivered_bytes;
	/* Bytes compressed objects' frame buffers hold now (unframe.c): stored frames that came
	 * in pieces, the pool's jobs, the transfer thread's decoding buffer. */
	atomic_uint_fast64_t frame_bytes;
	/* cfg.frame_budget: bytes held of it now, the most held at once, and how often a
	 * request was not started for want of it. */
	atomic_uint_fast64_t frame_budget_used;
	atomic_uint_fast64_t frame_budget_peak;
	atomic_uint_fast64_t frame_budget_waits;
};

struct engine;

void engine_config_defaults(struct engine_config *cfg);

/* Creates the engine (no thread yet). The config's strings must outlive it. 0 or -errno. */
int engine_create(const struct engine_config *cfg, struct engine **out);

/* Starts the transfer thread. Call after any fork (daemonising). 0 or -errno. */
int engine_start(struct engine *e);

/*
 * Stops the thread, aborts every transfer and fails the flights still running with -EIO,
 * so every parked waiter is answered. Idempotent.
 */
void engine_stop(struct engine *e);
void engine_destroy(struct engine *e);

/*
 * Asks the engine to look at f: start it if new, or schedule for its waiters. Takes its
 * own reference; cheap to call repeatedly (a flight is queued once).
 */
void engine_kick(struct engine *e, struct flight *f);

const struct engine_stats *engine_stats(struct engine *e);

#endif

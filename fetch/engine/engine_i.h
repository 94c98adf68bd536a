/*
 * What the transfer thread's files share (engine.c: the loop and flight lifecycle;
 * stream.c: one request and its curl callbacks; schedule.c: which requests to start;
 * engine_cache.c: a cache directory's records and the leases shared with other mounts).
 * Streams, the active list and everything marked "transfer thread only" belong to the
 * transfer thread alone; nothing here is for code outside fetch/.
 */
#ifndef SPOOLFS_FETCH_ENGINE_I_H
#define SPOOLFS_FETCH_ENGINE_I_H

#include <curl/curl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <zstd.h>

#include "fetch/engine/engine.h"
#include "fetch/engine/flight_i.h"
#include "fetch/http/http.h"

/*
 * Body bytes are written to the spool in runs of up to this, and each transfer's curl
 * receives into a buffer of CURL_BUFFER_BYTES. Measured on a cold 1 GiB read (4 runs
 * each): 512/512 KiB peaked at 17.7 MiB RSS, 256/64 KiB at 13.5 MiB, in the same time.
 */
#define SPOOL_WRITE_BYTES (256u << 10)
#define CURL_BUFFER_BYTES (64L << 10)

/* When a stream's bytes came (a stream's own, like the rest of it). */
struct stream_clock {
	uint64_t started_ms;    /* when this request started */
	uint64_t started_ns;    /* the same, for the latency histogram */
	uint64_t first_body_ms; /* when its first body byte arrived, 0 = not yet */
	uint64_t last_byte_ms;  /* when the last header or body byte arrived */
	uint64_t window_ms;     /* when the current low-speed window started */
	uint64_t window_bytes;  /* received when it did */
};

/* A signed request's credentials, and what a refusal of them said. */
struct stream_auth {
	uint64_t creds_gen; /* the credentials generation it was signed with (0: unsigned) */
	/* A signed request answered 400 or 403: its S3 error body is kept (bounded) to tell
	 * expired credentials from a real refusal. */
	bool refused;
	bool creds_expired; /* ...and it says the credentials expired */
	size_t err_len;
	char err_body[2048];
};

/*
 * A compressed flight's request (unframe.c): it asks for whole frames, and its body is their
 * stored bytes, decompressed one frame at a time. pos and end stay in the object's bytes, at
 * frame boundaries (end may be the object's size).
 */
struct stream_unframe {
	uint64_t frame;       /* the frame the next body bytes belong to */
	uint64_t drop_before; /* bytes of the object below this are not delivered: the request
	                         was for a range starting inside its first frame */
	unsigned char *in;    /* a frame's stored bytes that came in pieces (frames.max_stored) */
	size_t in_len;
	uint64_t budget; /* of engine_unframe.budget, held for in (frames.max_stored) */
};

/* One request of a flight. Transfer thread only. */
struct stream {
	struct engine *engine;
	struct flight *f;
	CURL *easy;
	struct curl_slist *headers;
	uint64_t pos;           /* next byte to write */
	uint64_t end;           /* exclusive; lowered when a far reader splits the stream */
	uint64_t attempt_start; /* pos when this request started */
	uint64_t skip;          /* leading bytes to drop: a 200 answered a ranged request */
	struct stream_clock clock;
	bool checked; /* status and headers validated */
	bool reached_end;
	bool retryable;      /* the status asked for a retry (5xx, 429, 408) */
	bool stalled;        /* aborted: no byte for the stall timeout */
	bool background;     /* fills the object for nobody in particular */
	bool speculative;    /* counted in n_spec, not n_transfers (spec_limit.h) */
	bool ranged;         /* asked with Range: a 200 then means the server ignores it */
	bool answered_short; /* a 206 with less than asked: end lowered to what it sends */
	unsigned round;      /* the flight's fail_round when it started */
	uint64_t received;   /* body bytes curl handed over, skipped ones included */
	bool too_slow;    /* aborted: slower than FETCH_NET_LOW_SPEED_BYTES_PER_S over a window */
	bool undecodable; /* fatal: a frame did not decompress to its bytes (no other mirror) */
	struct stream_unframe z;
	int fatal;        /* -errno decided in a callback; the flight fails with it */
	bool spool_fault; /* fatal is ours (the spool), not the server's answer */
	unsigned url_idx; /* which of the flight's urls it asked */
	int obj_fd;       /* a file: mirror's object, read by curl through /proc; or -1 */
	char why[320];    /* what went wrong, for the log line */
	struct stream_auth auth;
	struct fetch_net_guard guard; /* a link-local address refused (fetch_net_apply) */
	struct http_response resp;
	char errbuf[CURL_ERROR_SIZE];
	struct stream *next; /* in f->streams */
};

struct lease_set;

/* Speculation (prefetch's flights). Transfer thread only. */
struct engine_spec {
	unsigned n_running;      /* speculative transfers, outside n_transfers */
	struct spec_limit limit; /* how many n_running may be */
	/* Speculative flights nobody has opened, waiting for a slot before they are activated
	 * (an activated flight holds its spool file open: a walk's window of them would hold
	 * an fd each). Kicked order, from head; each holds a reference. */
	struct flight **waiting;
	size_t head, n_waiting, cap_waiting;
	/* fds speculation may still take before it looks again (what util_fd_room leaves
	 * above SPEC_FD_HEADROOM), when it last looked, whether a flight waits for fds, and
	 * the fd shortages (util_fd_shorts) already answered with a cut. */
	int fd_left;
	uint64_t fd_checked_ms;
	bool fd_blocked;
	unsigned fd_shorts_seen;
};

/* Transfer thread only: what the last look at the cache's usage found (bytes), the sizes
 * of objects started since, and when it looked: make_room's estimate between looks. */
struct engine_room {
	uint64_t seen, added, checked_ms;
	bool checked;
};

/*
 * Transfer thread only: body bytes of one stream not yet written to its spool. curl hands
 * a body over 16 KiB at a time, and writing each piece on its own cost a pwrite and a
 * flight update per 16 KiB (65,536 per GiB). Always empty outside curl_multi_perform, so
 * everything else sees a stream's bytes as written up to pos.
 */
struct engine_pending {
	struct stream *stream; /* NULL when empty */
	uint64_t off;
	size_t len;
	char *buf; /* SPOOL_WRITE_BYTES */
};

/*
 * What decompresses compressed streams' frames (unframe.c). A frame received whole goes to
 * the pool as a job, which decodes it into a buffer of its own; the transfer thread writes
 * the decoded frames to their spools when it next turns (it alone writes spools and keeps a
 * flight's ranges). With too many bytes in jobs, or no pool (unit tests of the inline
 * path), a frame is decoded on the transfer thread at once, with dctx and out.
 */
struct unframe_job;
struct engine_unframe {
	/* Transfer thread only. */
	ZSTD_DCtx *dctx;
	unsigned char *out;
	size_t out_cap;
	struct util_worker *pool; /* NULL: every frame inline */
	uint64_t job_bytes;       /* stored and decoded bytes held by jobs not yet delivered */
	uint64_t budget;          /* of cfg.frame_budget: streams' in buffers and job_bytes */
	bool job_failed;          /* a job had no memory: the next frame is decoded inline */
	pthread_mutex_t lock;
	/* Guarded by lock. */
	struct unframe_job *decoded; /* for the transfer thread to deliver, newest first */
	struct unframe_dctx *idle;   /* contexts the pool's threads share, free ones */
};

struct engine {
	struct engine_config cfg;
	struct engine_stats *stats; /* cfg.stats, or own_stats */
	struct engine_stats own_stats;
	CURLM *multi;
	pthread_t thread;
	bool thread_started;

	pthread_mutex_t queue_lock;
	/* Guarded by queue_lock. */
	struct flight *queue;
	bool stopping;

	/* Transfer thread only. */
	struct flight **active;
	size_t n_active;
	size_t cap_active;
	unsigned n_transfers;
	unsigned n_background; /* transfers of streams nobody is waiting on */
	struct engine_spec spec;
	int64_t last_use_stamp;
	struct engine_room room;
	struct recorder *recorder; /* with durable: writes progress records; else NULL */
	struct lease_set *leases;  /* with cfg.lease_dirfd: this mount's leases (lease.h) */
	struct engine_pending pending;
	struct engine_unframe unframe;
	/* Transfer thread only: a flush failed, so some stream curl still runs may carry a
	 * fatal error no callback of its own will report; engine_main ends such streams. */
	bool write_failed;
	uint64_t recheck_ms; /* when a deferred split is looked at again, 0 = none */
	/* Transfer thread only: a callback ended some streams by their end (pos == end);
	 * engine_main frees them. */
	bool streams_stopped;
};

static inline uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A flight that another mount's download serves; the lease says who downloads. */
static inline bool watching(const struct engine *e, const struct flight *f)
{
	return e->cfg.lease_dirfd >= 0 && !f->xfer.lease_held;
}

/* engine.c. Stops every stream of f and fails its readers with err; why goes to the log. */
void engine_fail_flight(struct engine *e, struct flight *f, int err, const char *why);
/* Notes that urls[from] refused f (why goes to the log) and moves f to its next url. False
 * when none is left to try (or f may not switch): the caller fails f. */
bool engine_try_other_mirror(struct engine *e, struct flight *f, unsigned from, const char *why);

/* A chunk of f failed its hash (chunks.c): the next requests go to another of its URLs,
 * when there is one the transfer thread may switch to. */
void engine_avoid_bad_source(struct engine *e, struct flight *f);

/* How long a flight refused for expired credentials waits for fresh ones before it sends
 * again anyway (and, refused again, counts a failure). */
#define AUTH_WAIT_MS 30000

/* engine.c. The upstream answered 503 or 429: speculation backs off. */
void engine_note_throttled(struct engine *e);
/*
 * engine.c. A speculative flight nobody has opened could not get an fd for its spool
 * (err: -EMFILE or -ENFILE): it is dropped without a word to any reader (the next open
 * starts afresh) and speculation backs off, as on a 503.
 */
void engine_drop_speculation(struct engine *e, struct flight *f, int err);

/* stream.c */
/* Starts a request for [start, end) of f. Fails with -ENOMEM, -EIO, or the signer's error. */
int stream_start(struct engine *e, struct flight *f, uint64_t start, uint64_t end);
void stream_free(struct engine *e, struct stream *s);
/* Writes the body bytes held back for the spool. Fails with -errno, which also marks the
 * stream they belong to as failed. */
int stream_flush_pending(struct engine *e);
void stream_check_response(struct stream *s);
void stream_why(struct stream *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* stream.c. Takes decompressed or raw body bytes of s for the spool at off (see take_body);
 * -errno when they could not be written (the caller marks s failed). */
int stream_take_body(struct stream *s, uint64_t off, const char *data, size_t len);
/* A spool write of f's bytes failed with rc: one reason and one way for every path. s: the
 * stream they came in, marked failed (the first failure is the one its reason names; it
 * fails f when it ends, and tries no other mirror); NULL (a frame the pool decoded, whose
 * stream has gone on): f fails now with the same reason. */
void stream_write_failed(struct engine *e, struct flight *f, struct stream *s, int rc);

/* unframe.c: a compressed flight's requests (stream_unframe). */
/* The stored offset s's next body byte belongs at. */
uint64_t unframe_stored_pos(const struct stream *s);
/*
 * Takes body bytes of s up to its end (*used of them), decompressing each frame once all its
 * stored bytes are in and delivering it whole (a frame's bytes are written only once they
 * decompressed right, so a request that is cut resumes at a frame boundary). A frame that
 * does not decompress to its share is logged; with chunk hashes it is fetched again or fails
 * its readers (flight_chunk_undecodable); without, s->fatal is set. 0 or -errno (s->fatal set,
 * or a spool write failed).
 */
int unframe_body(struct stream *s, const char *data, size_t len, size_t *used);
void unframe_stream_free(struct stream *s);
/* Whether a stream of f may start within cfg.frame_budget now (always, uncompressed, or
 * when nothing holds any); counts a refusal. Transfer thread. */
bool unframe_budget_room(struct engine *e, const struct flight *f);
/* Takes s's share of the budget (stream_start, once s runs); unframe_stream_free gives it
 * back. */
void unframe_stream_reserve(struct stream *s);
/* Starts the pool (0 or -errno); stops it, dropping what it decoded (after the transfer
 * thread stopped); frees the rest (engine_destroy). */
int unframe_start(struct engine *e);
void unframe_stop(struct engine *e);
void unframe_engine_free(struct engine *e);
/* Transfer thread: writes the frames the pool decoded to their spools, or settles the bad
 * ones (as unframe_body does inline). */
void unframe_deliver_decoded(struct engine *e);

/* schedule.c: starts the requests f needs now (or none, within the limits). */
void schedule_flight(struct engine *e, struct flight *f);

/* engine_cache.c. Each fails f itself (engine_fail_flight) when it cannot go on. */
/* Records f's progress when one is due (force: now), in a cache directory only. */
void engine_cache_record_progress(struct engine *e, struct flight *f, bool force);
/* Notes f's written ranges for a restart when a note is due: called as bytes reach the
 * spool, not once per turn (see stream.c's deliver). */
void engine_cache_note_written(struct engine *e, struct flight *f);
/* A least-recently-used stamp: wall-clock ms, strictly increasing within a session. */
int64_t engine_cache_use_stamp(struct engine *e);
/* This mount downloads f: from what the cache holds, else from the start. */
void engine_cache_start_owned(struct engine *e, struct flight *f);
/* Lets other mounts take f's download over. */
void engine_cache_release_lease(struct engine *e, struct flight *f);
/* Once another mount watches f's download, it fetches everything and records often. */
void engine_cache_look_for_watchers(struct engine *e, struct flight *f, uint64_t now);
/* Follows another mount's download of f; takes it over when that mount lets go. */
void engine_cache_watch(struct engine *e, struct flight *f);

#endif

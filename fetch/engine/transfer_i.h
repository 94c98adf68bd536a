/*
 * A flight's transfer state: what the transfer engine (engine.c, stream.c, schedule.c,
 * engine_cache.c) keeps for each flight it runs. struct flight holds one by value (xfer);
 * this header is apart from engine_i.h only because flight_i.h, which defines struct flight,
 * needs the whole type and engine_i.h builds on flight_i.h.
 *
 * Owner: the transfer thread. It alone writes these fields, and reads them without a lock.
 * The exceptions name their lock: version (written under the flight's lock, which other
 * threads hold to read it) and the queue links (the engine's queue lock). Unit tests may
 * read them once the engine is stopped.
 */
#ifndef SPOOLFS_FETCH_TRANSFER_I_H
#define SPOOLFS_FETCH_TRANSFER_I_H

#include <stdbool.h>
#include <stdint.h>

#include "util/ranges.h"

struct flight;
struct stream;

/*
 * Expired credentials (engine.c): requests wait for a generation newer than gen until
 * until_ms. retried: such a free resend was made since the last request that succeeded; a
 * refusal of a newer one counts.
 */
struct flight_auth_wait {
	bool wait;
	bool retried;
	uint64_t gen;
	uint64_t until_ms;
};

/*
 * The version every request asks for. The transfer thread changes it under the flight's
 * lock, because flight_fail and the version pins (flight.c, flight_table.c) read it under
 * that lock; it alone changes it, so it reads it without. flight_new sets it first.
 */
struct flight_version {
	char etag[256];         /* "" = none yet: the first response's */
	char primary_etag[256]; /* the first ETag urls[0] answered with: the version to pin */
	/* With no ETag: the first response's Last-Modified, which every later one must show
	 * (and asks for with If-Unmodified-Since). "" = none. */
	char last_modified[64];
	bool seen; /* a response has been checked against (or pinned) the version */
};

struct flight_transfer {
	/* Requests and retries. */
	struct stream *streams;
	unsigned n_streams;
	unsigned failures;           /* consecutive failed attempts without progress */
	uint64_t written_at_failure; /* flight_written() when the last one was counted */
	uint64_t starved_ms; /* since when its readers find no room for a request, 0 = they don't */
	unsigned fail_round; /* failures counted so far: streams started since share one */
	uint64_t retry_due_ms; /* 0 = no retry pending */
	struct flight_auth_wait auth;
	int last_status; /* last HTTP status, for the failure log line */
	/* A compressed object's frames received whole and being decompressed (unframe.c):
	 * nobody asks for them again, and the flight is not retired before they are in. */
	struct util_ranges decoding;
	unsigned decoding_jobs;
	bool no_ranges;   /* the server answered a ranged GET with 200: one stream */
	bool ranges_seen; /* it answered one with a valid 206: pieces may run at once */

	/* Which server, and which version of the object. */
	struct flight_version version;
	/* Which of the urls the next request goes to: changed with version, under the lock. */
	unsigned url_idx;
	uint32_t urls_refused; /* bit i: urls[i] refused the object (404...): not asked again */

	/* The engine's queue. */
	bool engine_started;
	bool engine_queued;               /* guarded by the engine's queue lock */
	struct flight *engine_next;       /* guarded by the engine's queue lock */
	struct flight *engine_drain_next; /* the transfer thread's copy of engine_next */

	/* A cache directory's records (engine_cache.c, recorder.c, progress_note.c). */
	uint64_t recorded_bytes; /* written bytes already recorded in the index */
	uint64_t recorded_ms;    /* when they were */
	uint64_t noted_bytes;    /* written bytes in its progress note (progress_note.h) */
	bool final_recorded;     /* its completion or failure is queued for the index */
	bool restored;           /* found complete in the cache directory (engine_stats) */

	/* Leases shared with other mounts (engine_cache.c). */
	bool lease_held;        /* this flight downloads; else another mount does and it watches */
	bool lease_watching;    /* it holds a watch on the key in the engine's lease set */
	uint64_t next_watch_ms; /* when a watching flight next reads the other's records, or a
	                   holder next looks for watchers */
	bool watched;           /* a holder that another mount watches: whole, recorded often */
};

#endif

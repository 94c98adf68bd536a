/*
 * Flight internals: struct flight itself, and what flight.c, flight_table.c and hasher.c
 * share. Only fetch/ source files (and fetch's own white-box unit tests) include this;
 * fs/ and the rest see an opaque struct flight and flight.h's functions.
 */
#ifndef SPOOLFS_FETCH_FLIGHT_I_H
#define SPOOLFS_FETCH_FLIGHT_I_H

#include "fetch/engine/flight.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "util/worker.h"
#include "util/hash.h"

struct stream;

/*
 * One flight. Its fields fall in five zones by owner: immutable after creation; atomics
 * any thread reads; guarded by lock; owned by whoever hashes; owned by the transfer thread.
 * fs/ sees none of them: it goes through flight.h's functions.
 */
struct flight {
	/* Immutable after creation. */
	char *key;
	char *url;
	char *name;
	char **urls; /* url, then its mirrors (n_urls in all) */
	unsigned n_urls;
	int *url_dir_fds; /* per url: its file: mirror's directory, else -1 (flight_spec) */
	char **url_paths; /* per url: the object's path beneath url_dir_fds, else NULL */
	/* Set at creation, or by the transfer thread from the first response (S3 checksums)
	 * before any byte is delivered; read by whoever delivers and hashes. */
	char sha256[65];
	uint64_t size;
	uint64_t ino;
	uint64_t id;
	bool readers_verify; /* flight_spec's: nothing is withheld for the whole hash */
	/* Chunk hashes (flight_spec's, copied): n_chunks of chunk_size bytes, the last one
	 * shorter; 0 chunk_size: none. */
	uint64_t chunk_size;
	uint64_t n_chunks;
	unsigned char *chunk_digests; /* FLIGHT_DIGEST_BYTES per chunk */
	struct flight_table *table;
	bool after_failure; /* the key's previous flight failed: cached pages may be wrong */
	bool source_etag;   /* spec->etag pinned the version: the source, or an earlier flight */
	bool speculative;   /* flight_spec's: started by prefetch */

	atomic_int refs;
	atomic_int handles;  /* holders of the spool for an open handle (flight_hold_spool) */
	atomic_bool durable; /* complete and recorded in the index (persistent caches) */
	atomic_bool opened;  /* a handle has held its spool (flight_hold_spool): a reader came */
	/* Download to the end, else only the ranges readers miss. Only ever turns true, so
	 * every read checks it without the lock; seq_* (below) decide when, under it. */
	atomic_bool whole;

	pthread_mutex_t lock;
	/* Guarded by lock. */
	enum flight_state state;
	int error;            /* -errno once FAILED */
	int spool_fd;         /* -1 until the engine created the spool, or while idle (below) */
	unsigned spool_users; /* open handles using spool_fd (flight_hold_spool) */
	dev_t spool_dev;      /* the spool file's identity, to know it when it is opened again */
	ino_t spool_ino;
	struct timespec spool_ctime; /* its change time when the idle spool was last closed */
	bool engine_done;            /* the transfer thread retired it: it writes no more */
	char *spool_name;            /* in the table's spool directory */
	/* The spool is another mount's download (shared cache directory): read it, never
	 * delete it. */
	bool spool_borrowed;
	struct util_ranges written;   /* on disk */
	struct util_ranges published; /* readable: written, minus what verification withholds */
	struct flight_waiter *waiters;
	/* Every inode opened onto it (aliases share a flight): on failure each one's cached
	 * pages go. inos_lost: one could not be noted (out of memory), so all of the key's do. */
	uint64_t *inos;
	unsigned n_inos, cap_inos;
	bool inos_lost;
	bool bad_hash;     /* its bytes failed their sha256: that version is not the session's */
	bool in_table;     /* also guarded by the table lock (both held to change) */
	bool seq_seen;     /* a read was noted: seq_next means something */
	uint64_t seq_next; /* where a read continuing the last one starts */
	uint64_t seq_run;  /* bytes read in a row up to seq_next */
	/* Chunk verification (chunks.c): per chunk its state (enum chunk_state, with
	 * CHUNK_RETRIED once it was fetched again) and which of urls sent its last bytes;
	 * how many are verified; the byte ranges of the chunks that failed for good (their
	 * readers get -EIO); and a URL (index + 1, 0 = none) that sent a bad chunk, for the
	 * transfer thread to move away from. */
	uint8_t *chunk_state;
	uint8_t *chunk_src;
	uint64_t chunks_verified;
	struct util_ranges chunks_bad;
	unsigned chunk_bad_url;

	/* Owned by whoever hashes: the hasher thread, or the transfer thread without one. */
	EVP_MD_CTX *hash;                 /* running sha256 of the contiguous prefix */
	uint64_t hashed;                  /* bytes of the prefix fed to hash */
	atomic_bool hash_queued;          /* in the hasher's queue, from its kick until its turn */
	struct util_worker_job hash_link; /* the hasher's queue entry (worker.h) */

	/* Owned by the transfer thread: touched only by the engine (and unit tests). */
	struct stream *streams;
	unsigned n_streams;
	unsigned failures;           /* consecutive failed attempts without progress */
	uint64_t written_at_failure; /* flight_written() when the last one was counted */
	uint64_t starved_ms; /* since when its readers find no room for a request, 0 = they don't */
	unsigned fail_round; /* failures counted so far: streams started since share one */
	uint64_t retry_due_ms; /* 0 = no retry pending */
	/* Expired credentials (engine.c): requests wait for a generation newer than
	 * auth_wait_gen until auth_wait_until_ms. auth_retried: such a free resend was made
	 * since the last request that succeeded; a refusal of a newer one counts. */
	bool auth_wait;
	bool auth_retried;
	uint64_t auth_wait_gen;
	uint64_t auth_wait_until_ms;
	/* The version every request asks for ("" = none yet: the first response's), and which
	 * of urls the next request goes to. Also read by flight_fail, so the transfer thread
	 * changes them under lock (it alone changes them, so it reads them without). */
	char etag[256];
	unsigned url_idx;
	char primary_etag[256]; /* the first ETag urls[0] answered with: the version to pin */
	/* With no ETag: the first response's Last-Modified, which every later one must show
	 * (and asks for with If-Unmodified-Since). "" = none. */
	char last_modified[64];
	bool version_seen;     /* a response has been checked against (or pinned) the version */
	uint32_t urls_refused; /* bit i: urls[i] refused the object (404...): not asked again */
	bool engine_started;
	bool engine_queued;               /* guarded by the engine's queue lock */
	struct flight *engine_next;       /* guarded by the engine's queue lock */
	struct flight *engine_drain_next; /* the transfer thread's copy of engine_next */
	uint64_t recorded_bytes;          /* written bytes already recorded in the index */
	uint64_t recorded_ms;             /* when they were */
	uint64_t noted_bytes;             /* written bytes in its progress note (progress_note.h) */
	int last_status;                  /* last HTTP status, for the failure log line */
	bool no_ranges;         /* the server answered a ranged GET with 200: one stream */
	bool ranges_seen;       /* it answered one with a valid 206: pieces may run at once */
	bool lease_held;        /* this flight downloads; else another mount does and it watches */
	bool lease_watching;    /* it holds a watch on the key in the engine's lease set */
	uint64_t next_watch_ms; /* when a watching flight next reads the other's records, or a
	                   holder next looks for watchers */
	bool watched;           /* a holder that another mount watches: whole, recorded often */
	bool final_recorded;    /* its completion or failure is queued for the index */
	bool restored;          /* found complete in the cache directory (engine_stats) */
};

/*
 * Whether f's sha256 names its version. Its bytes are then checked by the hash, whatever
 * server sent them: dates and ETags that differ between servers or sessions do not make
 * it another object, so neither is pinned nor compared, and mirrors may take over mid-way.
 * Only a different ETag from the one server still fails it (see check_version).
 */
static inline bool flight_hash_names_version(const struct flight *f)
{
	return f->sha256[0] != '\0' || f->chunk_size != 0;
}

/* flight_table.c. Lock order: table->lock, then a flight's lock. */
#define TABLE_BUCKETS 1024
struct spool_reserve;
struct tainted_key;
struct table_entry;
struct version_pins;

struct flight_table {
	int spool_dirfd; /* the spool directory, set at creation */
	pthread_mutex_t lock;
	/* Set at creation, read-only afterwards: picks a key's bucket (keys come from manifests,
	 * listings and upstreams, so the hash is keyed: see util/hash.h). */
	struct util_hash_key key;
	/* Guarded by lock. */
	struct table_entry *buckets[TABLE_BUCKETS];
	uint64_t next_id;
	struct tainted_key *tainted; /* keys whose last flight failed */
	/* Changed under lock; read without it by every open, to skip an empty list. */
	atomic_uint n_tainted;
	struct version_pins *pins; /* the versions failed flights had pinned */
	/* Set before the first flight exists, read-only afterwards. */
	bool close_idle_spools;          /* see flight_table_close_idle_spools */
	bool spools_shared;              /* a cache directory: reopened spools are marked in use */
	struct flight_hasher *hasher;    /* NULL: hash inline in flight_deliver */
	struct util_worker *chunk_pool;  /* chunk hashes (chunks.c); NULL: inline */
	struct spool_reserve *reserve;   /* spool files made ahead; NULL: made when needed */
	atomic_bool chunk_pool_stopping; /* what the pool still runs is dropped */
	void (*on_refetch)(void *ctx, struct flight *f);
	void *on_refetch_ctx;
	void (*on_failed)(void *ctx, struct flight *f);
	void *on_failed_ctx;
	void (*on_complete)(void *ctx, struct flight *f);
	void *on_complete_ctx;
};

/*
 * Takes a failed flight out of the table so the next open starts a new one, marks its key
 * so that open drops the kernel's cached pages, and keeps etag (from url), its version, for
 * the next flight of it. No locks held.
 */
void flight_table_remove(struct flight *f, const char *etag, const char *url);

/*
 * The version the next flight of f's key must keep to (version_pins.c): the ETag its first
 * response from the manifest's URL showed, else that response's Last-Modified
 * (VERSION_PIN_LAST_MODIFIED), in out; "" when there is none to keep: the source named the
 * version, or its bytes failed their hash. Caller holds f->lock.
 */
void flight_version_to_pin_locked(const struct flight *f, char *out, size_t cap);

/* flight.c. A new flight for spec, one reference, or NULL when out of memory. */
struct flight *flight_new(struct flight_table *table, const struct flight_spec *spec, uint64_t id);

/*
 * Hashes what became contiguous since the last call and, once the whole object is hashed,
 * verifies it and publishes the withheld bytes. Called by the flight's hashing owner only.
 * Returns 0, or -EIO on a mismatch (the caller fails the flight), or -errno.
 */
int flight_hash_progress(struct flight *f);

/* flight.c, for chunks.c: what publishing and completing share. Caller holds f->lock for
 * flight_collect_locked (the waiters whose range is readable, or all once failed). */
struct flight_waiter *flight_collect_locked(struct flight *f);
/* Caller holds f->lock: the waiters whose range touches a chunk that failed for good. */
struct flight_waiter *flight_collect_bad_locked(struct flight *f);
void flight_answer(struct flight_waiter *ready, int err);
void flight_complete(struct flight *f);
/* A user of the spool (spool_users, counted under f->lock) is done with it. */
void flight_spool_user_left(struct flight *f);

/* chunks.c. Sets up f's chunk state from spec (0, or -ENOMEM); frees it. */
int flight_chunks_init(struct flight *f, const struct flight_spec *spec);
void flight_chunks_free(struct flight *f);
/*
 * Caller holds f->lock: [start, end) was written (by url_idx, or UINT_MAX: restored), so
 * the chunks it touches that are now whole are due for their hash. Notes them.
 */
void flight_chunks_written_locked(struct flight *f, uint64_t start, uint64_t end, unsigned url_idx);
/* No lock held: hashes (or queues on the pool) the due chunks among those [start, end)
 * touches. 0 or -errno (the caller fails f). */
int flight_chunks_dispatch(struct flight *f, uint64_t start, uint64_t end);
/* Caller holds f->lock: whether [off, off + len) touches a chunk that failed for good. */
bool flight_chunks_bad_locked(const struct flight *f, uint64_t off, uint64_t len);
/* [*start, *end) rounded out to whole chunks (unchanged without chunk hashes). */
void flight_chunks_round(const struct flight *f, uint64_t *start, uint64_t *end);
/* Starts and stops the table's chunk pool. */
int flight_chunk_pool_start(struct flight_table *table);
void flight_chunk_pool_stop(struct flight_table *table);

struct flight_hasher;

/* Starts the thread; *out is NULL on failure. 0 or -errno. */
int flight_hasher_start(struct flight_hasher **out);
/* Stops and joins it, dropping what is still queued. NULL is fine. */
void flight_hasher_stop(struct flight_hasher *h);
/* Queues f (once) for flight_hash_progress, taking a reference. Any thread. */
void flight_hasher_kick(struct flight_hasher *h, struct flight *f);

#endif

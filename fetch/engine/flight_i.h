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

#include "fetch/engine/transfer_i.h"
#include "util/hash.h"
#include "util/worker.h"

/*
 * Which URLs serve the object: url (the manifest's or listing's), then its mirrors. Set at
 * creation, immutable afterwards: any thread reads them without a lock.
 */
struct flight_sources {
	char **urls; /* url, then its mirrors (n_urls in all) */
	unsigned n_urls;
	int *dir_fds; /* per url: its file: mirror's directory, else -1 (flight_spec) */
	char **paths; /* per url: the object's path beneath dir_fds, else NULL */
};

/* The spool file. Guarded by the flight's lock. */
struct flight_spool {
	int fd;         /* -1 until the engine created the spool, or while idle (below) */
	unsigned users; /* open handles using fd (flight_hold_spool) */
	dev_t dev;      /* the spool file's identity, to know it when it is opened again */
	ino_t ino;
	struct timespec ctime; /* its change time when the idle spool was last closed */
	char *name;            /* in the table's spool directory */
	/* The spool is another mount's download (shared cache directory): read it, never
	 * delete it. */
	bool borrowed;
};

/*
 * Every inode opened onto a flight (aliases share a flight): on failure each one's cached
 * pages go. lost: one could not be noted (out of memory), so all of the key's do. Guarded
 * by the flight's lock.
 */
struct flight_inos {
	uint64_t *list;
	unsigned n, cap;
	bool lost;
};

/* What the reads so far say about the next one (flight_note_read). Guarded by the
 * flight's lock. */
struct flight_seq {
	bool seen;     /* a read was noted: next means something */
	uint64_t next; /* where a read continuing the last one starts */
	uint64_t run;  /* bytes read in a row up to next */
};

/*
 * Verification: the whole-object sha256 (flight.c, hasher.c) and the chunk hashes
 * (chunks.c). Each group below names who may touch it.
 */
struct flight_verify {
	/* Set at creation, or by the transfer thread from the first response (S3 checksums)
	 * before any byte is delivered; read by whoever delivers and hashes. */
	char sha256[65];
	bool readers_verify; /* flight_spec's: nothing is withheld for the whole hash */
	/* Chunk hashes (flight_spec's, copied), immutable after creation: n_chunks of
	 * chunk_size bytes, the last one shorter; 0 chunk_size: none. */
	uint64_t chunk_size;
	uint64_t n_chunks;
	unsigned char *chunk_digests; /* FLIGHT_DIGEST_BYTES per chunk */

	/* Owned by whoever hashes: the hasher thread, or the transfer thread without one. */
	EVP_MD_CTX *hash;                 /* running sha256 of the contiguous prefix */
	uint64_t hashed;                  /* bytes of the prefix fed to hash */
	atomic_bool hash_queued;          /* in the hasher's queue, from its kick until its turn */
	struct util_worker_job hash_link; /* the hasher's queue entry (worker.h) */

	/* Guarded by the flight's lock. */
	bool bad_hash; /* its bytes failed their sha256: that version is not the session's */
	/* Chunk verification (chunks.c): per chunk its state (enum chunk_state, with
	 * CHUNK_RETRIED once it was fetched again) and which of the urls sent its last bytes;
	 * how many are verified; the byte ranges of the chunks that failed for good (their
	 * readers get -EIO); and a URL (index + 1, 0 = none) that sent a bad chunk, for the
	 * transfer thread to move away from. */
	uint8_t *chunk_state;
	uint8_t *chunk_src;
	uint64_t chunks_verified;
	struct util_ranges chunks_bad;
	unsigned chunk_bad_url;
};

/*
 * A compressed object's frame table (flight_spec.frame_size, frames.c), copied at creation
 * and immutable afterwards: any thread reads it without a lock. The spool and every range
 * the flight tracks stay in the object's own (decompressed) bytes; only requests and their
 * bodies are in stored bytes. size 0: stored as it is.
 */
struct flight_frames {
	uint64_t size; /* decompressed bytes per frame (a power of two; the last: the rest) */
	uint64_t n;    /* frames: flight_chunk_count(object size, size) */
	uint64_t *stored_off; /* n + 1 offsets: frame i's stored bytes are [off[i], off[i + 1]) */
	uint64_t max_stored;  /* the longest frame's stored length */
};

/*
 * One flight: its identity, state, ranges, waiters and spool (flight.c, flight_table.c),
 * its verification (verify) and its transfer (xfer, transfer_i.h: the engine's). Each
 * field's zone says who touches it. fs/ sees none of them: it goes through flight.h's
 * functions.
 */
struct flight {
	/* Immutable after creation. */
	char *key;
	char *url;
	char *name;
	struct flight_sources src;
	uint64_t size;
	uint64_t ino;
	uint64_t id;
	struct flight_table *table;
	bool after_failure; /* the key's previous flight failed: cached pages may be wrong */
	bool source_etag;   /* spec->etag pinned the version: the source, or an earlier flight */
	bool speculative;   /* flight_spec's: started by prefetch */
	struct flight_frames frames;

	atomic_int refs;
	atomic_int handles;  /* holders of the spool for an open handle (flight_hold_spool) */
	atomic_bool durable; /* complete and recorded in the index (persistent caches) */
	atomic_bool opened;  /* a handle has held its spool (flight_hold_spool): a reader came */
	/* Body bytes its requests received (stored bytes, skipped ones too): added by the
	 * transfer thread, read by anyone (flight_info.wire). */
	atomic_uint_fast64_t wire_bytes;
	/* Download to the end, else only the ranges readers miss. Only ever turns true, so
	 * every read checks it without the lock; seq (below) decides when, under it. */
	atomic_bool whole;

	pthread_mutex_t lock;
	/* Guarded by lock. */
	enum flight_state state;
	int error;        /* -errno once FAILED */
	bool engine_done; /* the transfer thread retired it: it writes no more */
	struct flight_spool spool;
	struct util_ranges written;   /* on disk */
	struct util_ranges published; /* readable: written, minus what verification withholds */
	struct flight_waiter *waiters;
	struct flight_inos inos;
	bool in_table;       /* also guarded by the table lock (both held to change) */
	atomic_bool lingers; /* in table->linger (spool_linger.c; changed under linger_lock) */
	struct flight_seq seq;

	struct flight_verify verify; /* each part names its owner */
	struct flight_transfer xfer; /* the transfer thread's (transfer_i.h) */
};

/*
 * Whether f's sha256 names its version. Its bytes are then checked by the hash, whatever
 * server sent them: dates and ETags that differ between servers or sessions do not make
 * it another object, so neither is pinned nor compared, and mirrors may take over mid-way.
 * Only a different ETag from the one server still fails it (see check_version).
 */
static inline bool flight_hash_names_version(const struct flight *f)
{
	return f->verify.sha256[0] != '\0' || f->verify.chunk_size != 0;
}

/* flight_table.c. Lock order: table->lock, then a flight's lock. */
#define TABLE_BUCKETS 1024
#define FLIGHT_LINGER 32 /* idle spools left open (spool_linger.c) */
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
	/* The idle spools left open, oldest first (spool_linger.c). Guarded by linger_lock,
	 * which is taken before a flight's lock, never with one held. */
	pthread_mutex_t linger_lock;
	struct flight *linger[FLIGHT_LINGER + 1];
	atomic_uint n_linger; /* changed under linger_lock; read without it as a hint */
};

/*
 * flight.c: whether f's spool is idle (complete, retired, unused, open) and may be closed;
 * and taking its fd for the caller to close, noting what the reopen checks. Caller holds
 * f->lock.
 */
bool flight_spool_idle_locked(const struct flight *f);
int flight_spool_take_idle_locked(struct flight *f);

/*
 * spool_linger.c. flight_linger: f's spool went idle (caller holds a reference, no lock):
 * it stays open as the newest lingering one, the oldest beyond FLIGHT_LINGER is closed.
 * flight_linger_forget: f is being freed (its fd closes with it). flight_linger_flush:
 * closes every lingering idle spool (the table's end).
 */
void flight_linger(struct flight *f);
void flight_linger_forget(struct flight *f);
void flight_linger_flush(struct flight_table *t);

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

/* flight.c. A new flight for spec in *out, one reference: 0, -ENOMEM, or -EIO (logged) for
 * a chunk or frame table that does not fit the object. */
int flight_new(struct flight_table *table, const struct flight_spec *spec, uint64_t id,
               struct flight **out);

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
/* A user of the spool (spool.users, counted under f->lock) is done with it. */
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

/*
 * frames.c. Copies spec's frame table into f (0; -EINVAL when it does not add up to
 * spec->stored_size or a length is 0; -ENOMEM); frees it.
 */
int flight_frames_init(struct flight *f, const struct flight_spec *spec);
void flight_frames_free(struct flight *f);
/* Whether f is stored compressed (flight_spec.frame_size). */
static inline bool flight_is_compressed(const struct flight *f)
{
	return f->frames.size != 0;
}
/* The frame holding byte off of the object (off < size), or n for off == size. */
uint64_t flight_frame_of(const struct flight *f, uint64_t off);
/* Frame i's decompressed bytes: [*lo, *hi) of the object. */
void flight_frame_bounds(const struct flight *f, uint64_t i, uint64_t *lo, uint64_t *hi);
/* [*start, *end) rounded out to whole frames (unchanged when stored as it is). */
void flight_frames_round(const struct flight *f, uint64_t *start, uint64_t *end);
/* Rounds [*start, *end) of f out to whole frames and gives their stored bytes [*so, *eo). */
void flight_frames_stored_range(const struct flight *f, uint64_t *start, uint64_t *end,
                                uint64_t *so, uint64_t *eo);
/* The end of the last whole frame in an answer that ends at stored byte eo (exclusive). */
uint64_t flight_frames_whole_end(const struct flight *f, uint64_t eo);
/*
 * chunks.c. Frame c (== chunk c) from url_idx could not be decompressed to its bytes: as a
 * chunk that failed its hash. True when it is fetched again (once, another mirror first);
 * false when it failed for good: its readers got -EIO, and its range counts as written (not
 * served), so the rest of the download goes on.
 */
bool flight_chunk_undecodable(struct flight *f, uint64_t c, unsigned url_idx);

struct flight_hasher;

/* Starts the thread; *out is NULL on failure. 0 or -errno. */
int flight_hasher_start(struct flight_hasher **out);
/* Stops and joins it, dropping what is still queued. NULL is fine. */
void flight_hasher_stop(struct flight_hasher *h);
/* Queues f (once) for flight_hash_progress, taking a reference. Any thread. */
void flight_hasher_kick(struct flight_hasher *h, struct flight *f);

#endif

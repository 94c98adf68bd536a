/*
 * Flights: the single download of one object, shared by every reader of it.
 *
 * A flight is found in the flight table by the object's identity (its lower-case sha256
 * when known, else its URL). The first opener creates it; open handles, parked waiters,
 * the table and the transfer engine each hold a reference. No reader owns the download:
 * a reader that goes away drops only its own references.
 *
 * Bytes are written to the flight's spool file by the transfer thread (flight_deliver),
 * which then publishes them: readers whose range became readable are answered from the
 * spool. For an object with a known sha256 the contiguous prefix is hashed as it grows and
 * the last bytes to arrive (at least FLIGHT_HOLD_BYTES) stay unpublished until the hash
 * matches; on a mismatch the flight fails and every reader gets -EIO.
 *
 * Lock order: flight table lock, then one flight's lock. Waiter callbacks run with no lock
 * held. No lock is held across disk or network I/O.
 */
#ifndef SPOOLFS_FETCH_FLIGHT_H
#define SPOOLFS_FETCH_FLIGHT_H

#include <stdbool.h>
#include <stdint.h>

#include "fetch/engine/flight_key.h"
#include "util/ranges.h"

/* The unit of scheduling: far reads fetch from a chunk boundary, hashes withhold a chunk. */
#define FLIGHT_CHUNK_BYTES (1u << 20)
#define FLIGHT_HOLD_BYTES FLIGHT_CHUNK_BYTES
/* A flight's URLs, its own and its mirrors': one bit each in urls_refused. */
#define FLIGHT_MAX_URLS 32
/*
 * Objects this small are downloaded whole as soon as they are opened. A larger one is too
 * once a reader reads it from the start or reads FLIGHT_SEQUENTIAL_BYTES in a row; until
 * then (sparse access: an index at the end, records here and there) each missed read
 * fetches only its own range, rounded out to FLIGHT_DEMAND_BYTES, which bounds what a small
 * random read costs upstream.
 */
#define FLIGHT_SPARSE_MIN_BYTES (8u << 20)
#define FLIGHT_SEQUENTIAL_BYTES FLIGHT_CHUNK_BYTES
#define FLIGHT_DEMAND_BYTES (256u << 10)

/* Opaque outside fetch/ (fetch/engine/flight_i.h): other folders use the functions below. */
struct flight;

/*
 * A parked read. The owner (fs/) embeds it, fills off, len and done, and keeps it alive
 * until done has been called or flight_unpark returned true.
 */
struct flight_waiter {
	uint64_t off;
	uint64_t len;
	/*
	 * Called exactly once, with no lock held, from the transfer thread: err is 0 when
	 * [off, off+len) is readable from the spool fd, else -errno. Not called for a waiter
	 * that flight_unpark removed.
	 */
	void (*done)(struct flight_waiter *w, int err);
	/* Guarded by the flight's lock. */
	struct flight_waiter *next;
	struct flight_waiter *prev;
	bool listed;
	bool interrupted;
};

enum flight_state {
	FLIGHT_ACTIVE,   /* downloading or waiting for the engine */
	FLIGHT_COMPLETE, /* every byte published (and verified when a hash is known) */
	FLIGHT_FAILED,   /* readers get `error`; the flight is out of the table */
};

struct flight_spec {
	const char *key;    /* flight_key_build's */
	const char *url;    /* where to fetch it */
	const char *sha256; /* lower-case hex, or "" */
	const char *name;   /* the path, for log lines */
	const char *etag;   /* the version to pin every request to, or NULL (first response's) */
	const char *const *mirror_urls; /* the same object elsewhere, tried when url fails */
	unsigned n_mirror_urls;
	/* Per mirror URL, or NULL for none: a file: mirror's directory (a descriptor that
	 * outlives the flight, owned by the caller) and the object's path beneath it (from
	 * fetch_mirror_path); -1 and NULL for other mirrors. Such an object is opened with
	 * fetch_open_beneath, never by curl from the URL, which is kept for log lines. */
	const int *mirror_dir_fds;
	const char *const *mirror_paths;
	uint64_t size;
	uint64_t ino; /* for cache invalidation on failure */
	/*
	 * A pack: each reader checks the range it reads against that member's own sha256
	 * before serving it, so bytes are published as they arrive and nothing is withheld
	 * for the whole hash (which is still checked at the end: a mismatch fails the flight).
	 */
	bool readers_verify;
	/*
	 * Chunk hashes: chunk_size (a power of two) and the sha256 of each chunk in order,
	 * 32 bytes each, flight_chunk_count() of them (the hash list, copied). 0 and NULL:
	 * none. Each chunk is published once its bytes match; the whole sha256 then only names
	 * the object and is not checked.
	 */
	uint64_t chunk_size;
	const unsigned char *chunk_digests;
	/*
	 * Stored compressed (doc/manifest.md, version 3): zstd, one independent frame per
	 * frame_size bytes of the object (a power of two; the last frame holds the rest), so
	 * flight_chunk_count(size, frame_size) frames; frame_stored[i] is frame i's stored
	 * length (copied), and they add up to stored_size, the length url serves. The spool
	 * holds the decompressed bytes, which are what size, sha256, chunk_digests and the
	 * readers' checks describe. frame_size 0 (frame_stored NULL): stored as it is. With
	 * chunk hashes, frame_size == chunk_size. The caller has checked the table adds up.
	 */
	uint64_t frame_size;
	const uint32_t *frame_stored;
	uint64_t stored_size;
	/*
	 * Started by prefetch, before any reader asked (fetch/prefetch/). Until a handle holds
	 * it, its request waits for a speculative slot (engine_config.spec_max) and never
	 * takes one of the readers'.
	 */
	bool speculative;
};

/* Chunks of chunk_size an object of size bytes has (its hash list has 32 bytes each). */
uint64_t flight_chunk_count(uint64_t size, uint64_t chunk_size);
#define FLIGHT_DIGEST_BYTES 32

/* The table of flights by identity. Lock: table->lock guards the buckets and in_table. */
struct flight_table;

/*
 * Spool files are created, opened and deleted in the directory spool_dirfd (a copy of the
 * fd is kept), by name and never through a symbolic link.
 */
int flight_table_create(int spool_dirfd, struct flight_table **out);
/* Drops the table's references (and stops the hasher). Call after the engine stopped. */
void flight_table_destroy(struct flight_table *table);

/*
 * Called once per failed flight, with no lock held, after its waiters were answered (the
 * daemon drops the kernel's cached pages there). Set before the first join.
 */
void flight_table_on_failed(struct flight_table *table, void (*fn)(void *ctx, struct flight *f),
                            void *ctx);

/* Called once per completed flight, with no lock held (the daemon records it). */
void flight_table_on_complete(struct flight_table *table, void (*fn)(void *ctx, struct flight *f),
                              void *ctx);

/*
 * Closes a complete object's spool fd while nothing uses it, and opens it again for the
 * next user: a session that reads more objects than RLIMIT_NOFILE allows would otherwise
 * run out of fds. That holds whatever is still queued for the index: the recorder reopens
 * what it syncs (flight_hold_spool_to_record). With `shared` (a cache directory) a reopened
 * one is marked in use again (lease.h). While closed, another mount of the directory may
 * evict it: the next open then fetches it again (flight_hold_spool says -ENOENT). Call
 * before the first flight.
 */
void flight_table_close_idle_spools(struct flight_table *table, bool shared);

/*
 * Takes a complete flight whose spool file is no longer its own (flight_hold_spool said
 * -ENOENT or -ESTALE: another mount evicted it, or replaced it with its own download) out
 * of the table. Nothing is deleted and a key that names its version is not marked failed:
 * the file under its name now is another mount's, and the next open's flight takes it from
 * the records. Its version stays the session's. No locks held.
 */
void flight_table_forget(struct flight *f);

/*
 * Holds f's spool fd open for a user (an open handle), reopening it if it was closed while
 * idle; each holder counts as one of flight_info's handles. 0; -ESTALE when f failed
 * meanwhile or its spool file is not the one it wrote; -ENOENT when that file is gone
 * (both: open a new flight); or another -errno (EMFILE...: f is fine, this open fails).
 * Pair a success with flight_release_spool.
 */
int flight_hold_spool(struct flight *f);
/*
 * flight_hold_spool for the open that created f: a failure of f is held too, so that the
 * open's reads get f's error, never a reason to fetch again (that made a second request
 * whenever an answer failing at once, a 404 or a refused redirect, beat the open to it).
 */
int flight_hold_spool_created(struct flight *f);
void flight_release_spool(struct flight *f);

/*
 * The recorder's hold on f's spool while it syncs and seals it, and a reply's while libfuse
 * reads from it (fs/reply.c): as flight_hold_spool (an
 * idle one is reopened by name and must still be the file f closed: same device, inode and
 * change time), but no handle. Returns the fd, valid until flight_release_spool_recorded,
 * or -errno (nothing held): -ESTALE when f failed or the name is another file's now,
 * -ENOENT when it was deleted or no spool exists.
 */
int flight_hold_spool_to_record(struct flight *f);
void flight_release_spool_recorded(struct flight *f);

/* The transfer thread is done with f (it writes to the spool no more). */
void flight_engine_done(struct flight *f);

/*
 * Starts the hasher thread and the chunk pool (one thread per online CPU, for chunk hashes):
 * from then on flight_deliver leaves hashing and verification to them, so the transfer
 * thread only receives and writes. Without them (unit tests) hashing runs inline in
 * flight_deliver. Start after any fork; 0 or -errno.
 */
int flight_table_start_hasher(struct flight_table *table);
void flight_table_stop_hasher(struct flight_table *table);

/*
 * Finds the flight for spec->key, or creates it. Either way *out holds a new reference.
 * *created tells the caller to hand the flight to the engine. Returns 0 or -ENOMEM. With
 * spec->chunk_size but no chunk_digests it only joins: -ENOENT when there is no flight
 * (the caller fetches the hash list, then joins with its digests).
 */
int flight_table_join(struct flight_table *table, const struct flight_spec *spec,
                      struct flight **out, bool *created);

/*
 * Drops a complete object nobody uses (the table's is its only reference) from the table
 * and deletes its spool file, also when no flight of this session had it (then complete or
 * not: what an earlier session left). Returns 0, or -EBUSY when it is in use here or in
 * another mount, or still downloading (it stays). For --cache-max-size.
 */
int flight_table_evict(struct flight_table *table, const char *key);

/*
 * True when ino's cached pages may hold bytes of a failed flight of key (a bad hash): its
 * open must drop them. Once per inode and failure, or always after inos.lost.
 */
bool flight_table_take_taint(struct flight_table *table, const char *key, uint64_t ino);

/*
 * The inodes opened onto f, for invalidating their pages: a malloc'd array in *inos (NULL
 * when *n is 0). *all is true when some were not noted: every inode of f's key. 0 or
 * -ENOMEM.
 */
int flight_copy_inos(struct flight *f, uint64_t **inos, size_t *n, bool *all);

/*
 * Whether an open handle of f reads on sequentially into [start, end): its last read ended
 * within a chunk before start, or inside. A stream there feeds it, even between its reads.
 */
bool flight_read_continues_into(struct flight *f, uint64_t start, uint64_t end);

/* True when f's spool name in the spool directory is still the file f has open. */
bool flight_spool_still_named(struct flight *f);

/*
 * Calls fn for f, with no lock held, when its readers need bytes again that were written
 * already (a chunk that failed its hash is fetched again): the daemon kicks the engine.
 * Set before the first join.
 */
void flight_table_on_refetch(struct flight_table *table, void (*fn)(void *ctx, struct flight *f),
                             void *ctx);

/* The flight of key in the table (not failed), with a new reference in *out; 0 or -ENOENT. */
int flight_table_find(struct flight_table *table, const char *key, struct flight **out);

/* Number of flights in the table and how many are complete, for stats. */
void flight_table_counts(struct flight_table *table, unsigned *flights, unsigned *complete);

/* What flight_table_foreach reports of one flight. */
struct flight_info {
	const char *name;
	const char *key;
	uint64_t size;
	uint64_t written;
	uint64_t published;
	enum flight_state state;
	int handles;
	unsigned waiters;
	bool durable;
	bool whole;       /* downloading to the end, else only what readers miss */
	bool speculative; /* started by prefetch (flight_spec) */
	bool opened;      /* a handle has held it: a reader came */
	/* Body bytes its requests received, against written: the bytes they gave the spool
	 * (stored compressed, wire is smaller; a request stopped or resent, larger). */
	uint64_t wire;
	bool compressed; /* stored compressed (flight_spec.frame_size) */
};

/*
 * Calls fn for every flight in the table, under the table lock (fn must not call into the
 * table or a flight). The strings are valid during the call only.
 */
void flight_table_foreach(struct flight_table *table,
                          void (*fn)(void *ctx, const struct flight_info *info), void *ctx);

/* Bytes readable now for the object with this key (0 when no flight). */
uint64_t flight_table_cached_bytes(struct flight_table *table, const char *key);

/*
 * What fs/ reads of a flight; all fixed when it is created, so no lock is taken. The
 * strings live as long as the caller's reference.
 */
const char *flight_key(const struct flight *f);  /* flight_key_build's */
const char *flight_name(const struct flight *f); /* the path, for log lines */
uint64_t flight_size(const struct flight *f);
uint64_t flight_ino(const struct flight *f); /* the inode whose open created it */
/* Unique among the table's flights for the table's life (a key's next flight has another). */
uint64_t flight_id(const struct flight *f);
/* The key's previous flight failed (or its spool was another's): cached pages may be
 * wrong, and the object is not read passthrough. */
bool flight_after_failure(const struct flight *f);
/* Whether f is verified chunk by chunk (flight_spec.chunk_size). */
bool flight_has_chunks(const struct flight *f);
/*
 * Chunks of f that failed their hash twice (their readers got -EIO) are fetched again, once
 * more: a new open's chance, as a failed flight's next open gets a new flight. True when
 * there were some: the caller kicks the engine.
 */
bool flight_retry_bad_chunks(struct flight *f);
/* Downloading to the end (only ever turns true), else only the ranges readers miss. */
bool flight_is_whole(struct flight *f);
/* Started by prefetch (flight_spec.speculative). */
bool flight_is_speculative(const struct flight *f);
/* Speculative, and no handle has held it yet: nobody is waiting for it. */
bool flight_speculation_unclaimed(struct flight *f);

void flight_ref(struct flight *f);
/* Drops a reference; the last one closes the spool (flight_fail already deleted a failed one). */
void flight_unref(struct flight *f);

/*
 * The spool fd. Valid for a holder of the spool (flight_hold_spool: an open handle, which
 * a readable range implies), and for the transfer thread until flight_engine_done. The
 * recorder holds it (flight_hold_spool_to_record).
 */
int flight_spool_fd(struct flight *f);

/*
 * Checks whether [off, off+len) is readable now. Returns 1 (reply from the spool fd),
 * 0 (not yet), or the flight's -errno when it failed.
 */
int flight_ready(struct flight *f, uint64_t off, uint64_t len);

/*
 * Parks w until its range is readable. Returns 0 when parked (done will be called),
 * 1 when the range is readable already, -EINTR when w was interrupted before it could be
 * parked, or the flight's -errno. done is not called unless 0 is returned.
 */
int flight_park(struct flight *f, struct flight_waiter *w);

/*
 * Removes a parked waiter (its reader went away). Returns true when it was removed: done
 * will not be called and the caller replies. Returns false when done has been or is about
 * to be called; w is then marked interrupted.
 */
bool flight_unpark(struct flight *f, struct flight_waiter *w);

/*
 * A hint for readers about to park at off: true when the engine should be woken to
 * schedule it: the download is sparse (nothing fetches what nobody asked for), or off is
 * more than a chunk beyond the end of the written run before it, so no running stream is
 * about to reach it. (Other waiters are picked up by the engine's own loop, which runs
 * whenever data arrives.)
 */
bool flight_should_kick(struct flight *f, uint64_t off);

/*
 * Notes a read of [off, off+len), to tell sparse from sequential access. Returns true when
 * it made the flight download whole: the caller then kicks the engine.
 */
bool flight_note_read(struct flight *f, uint64_t off, uint64_t len);

/* Downloads the rest of the object whatever readers do (shared caches). */
void flight_fetch_whole(struct flight *f);

/* What a parked waiter needs that is not written yet: from off (its first such byte) to
 * end (where its range ends). */
struct flight_want {
	uint64_t off;
	uint64_t end;
};

/* Fills up to max wants, for the scheduler; *whole tells how far to fetch. */
unsigned flight_wanted(struct flight *f, struct flight_want *out, unsigned max, bool *whole);

/*
 * Transfer thread only. Creates the spool file (sized to the object: space is reserved up
 * front so a full disk fails the flight at once, not halfway). 0, or -errno (-ENOSPC).
 */
int flight_open_spool(struct flight *f);

/*
 * Transfer thread only. Reopens the spool file a previous session left (persistent cache
 * directories) and restores what it recorded: `ranges` durably written, all of the object
 * when `complete`. Restored bytes are published under the same rule as received ones.
 * With `borrowed` the file is another mount's download in progress: it is read, never
 * deleted, until flight_claim_spool. 0, or -errno: before the file is installed
 * (f->spool.fd still -1: -ENOENT, -ESTALE for a file that does not match) start afresh or
 * try later; after it, the flight must fail.
 */
int flight_reopen_spool(struct flight *f, const struct util_ranges *ranges, bool complete,
                        bool borrowed);

/*
 * Seals a complete spool file, for index_records_mark_sealed: sets its modification time apart
 * from any write's, so that a later write to it shows (a copy that keeps times does not).
 * The caller makes it durable (fsync, not fdatasync: the time is metadata) before it
 * records the seal. 0 or -errno.
 */
int flight_spool_seal(int fd, char *out, size_t cap);
/* The seal f's spool file shows now (the one it has open, else its path's), to compare
 * with the recorded one. 0 or -errno. */
int flight_spool_seal_found(struct flight *f, char *out, size_t cap);
#define FLIGHT_SEAL_MAX 64

/*
 * Transfer thread only. Adds what another mount recorded since (ranges durably written,
 * all of it when `complete`) to an installed spool, under the same publishing rule.
 * 0 or -errno (the flight must fail).
 */
int flight_adopt(struct flight *f, const struct util_ranges *ranges, bool complete);

/* Transfer thread only. The borrowed spool is this flight's to finish (and delete on
 * failure) now: the mount that was downloading it let go. */
void flight_claim_spool(struct flight *f);

/*
 * Transfer thread only. Writes [off, off+len) to the spool, hashes what became contiguous,
 * publishes, verifies at the end and answers the waiters that can be answered.
 * Returns 0, or -errno: the caller then fails the flight with it.
 */
int flight_deliver(struct flight *f, uint64_t off, const void *data, size_t len);
/* The same, naming which of f's URLs (0: its own, then its mirrors) sent the bytes: a chunk
 * that fails its hash names it in the log and is fetched from another one. */
int flight_deliver_from(struct flight *f, unsigned url_idx, uint64_t off, const void *data,
                        size_t len);

/* Transfer thread only, for size 0 objects: verifies the empty hash and completes. */
int flight_complete_empty(struct flight *f);

/*
 * Fails the flight: state FAILED, every waiter gets err, the flight leaves the table (the
 * next open starts afresh) and its spool is deleted. Idempotent.
 */
void flight_fail(struct flight *f, int err);

/* Bytes written so far. */
uint64_t flight_written(struct flight *f);

/*
 * Shut-down: answers every waiter with err and refuses further reads, but keeps the spool
 * file and the table entry, so a persistent cache can resume the download next session.
 */
void flight_stop(struct flight *f, int err);

/* Snapshot of progress (written bytes, state), for stats and scheduling. */
void flight_progress(struct flight *f, uint64_t *written, uint64_t *published,
                     enum flight_state *state);

/* Copies the written ranges (for recording in the index). -ENOMEM. */
int flight_copy_written(struct flight *f, struct util_ranges *out);

#endif

/*
 * Flight internals shared by flight.c, flight_table.c and hasher.c; nothing outside
 * fetch/ includes this.
 */
#ifndef SPOOLFS_FETCH_FLIGHT_I_H
#define SPOOLFS_FETCH_FLIGHT_I_H

#include "fetch/flight.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "index/hash.h"

/* flight_table.c. Lock order: table->lock, then a flight's lock. */
#define TABLE_BUCKETS 1024
struct tainted_key;
struct table_entry;
struct version_pins;

struct flight_table {
	int spool_dirfd; /* the spool directory, set at creation */
	pthread_mutex_t lock;
	/* Set at creation, read-only afterwards: picks a key's bucket (keys come from manifests,
	 * listings and upstreams, so the hash is keyed: see index/hash.h). */
	struct index_hash_key key;
	/* Guarded by lock. */
	struct table_entry *buckets[TABLE_BUCKETS];
	uint64_t next_id;
	struct tainted_key *tainted; /* keys whose last flight failed */
	/* Changed under lock; read without it by every open, to skip an empty list. */
	atomic_uint n_tainted;
	struct version_pins *pins; /* the versions failed flights had pinned */
	/* Set before the first flight exists, read-only afterwards. */
	bool close_idle_spools;       /* see flight_table_close_idle_spools */
	bool idle_close_after_record; /* only once recorded complete: the recorder uses the fd */
	struct flight_hasher *hasher; /* NULL: hash inline in flight_deliver */
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

struct flight_hasher;

/* Starts the thread; *out is NULL on failure. 0 or -errno. */
int flight_hasher_start(struct flight_hasher **out);
/* Stops and joins it, dropping what is still queued. NULL is fine. */
void flight_hasher_stop(struct flight_hasher *h);
/* Queues f (once) for flight_hash_progress, taking a reference. Any thread. */
void flight_hasher_kick(struct flight_hasher *h, struct flight *f);

#endif

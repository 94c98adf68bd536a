/*
 * The flight table: one flight per object key, found or created under one lock, so two
 * openers never start two downloads; and what outlives a failed flight (the taint that
 * makes the next open drop the kernel's pages, the version it had pinned).
 *
 * Lock order: table->lock, then flight->lock.
 */
#include "fetch/engine/flight.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fetch/engine/spool_reserve.h"
#include "fetch/engine/flight_i.h"
#include "fetch/engine/object.h"
#include "fetch/cache/lease.h"
#include "util/log.h"
#include "fetch/engine/version_pins.h"
#include "util/hash.h"

/* Bounded: past this many, the oldest failures are forgotten (their pages were invalidated
 * asynchronously long ago). */
#define TAINTED_MAX 1024

struct tainted_key {
	char *key;
	uint64_t ino; /* 0: every inode of key */
	struct tainted_key *next;
};

struct table_entry {
	struct flight *flight;
	struct table_entry *next;
};

int flight_table_create(int spool_dirfd, struct flight_table **out)
{
	struct flight_table *table = calloc(1, sizeof(*table));
	int rc = -ENOMEM;

	if (!table)
		goto fail;
	table->spool_dirfd = fcntl(spool_dirfd, F_DUPFD_CLOEXEC, 0);
	if (table->spool_dirfd < 0) {
		rc = -errno;
		goto fail_table;
	}
	rc = util_hash_key_new(&table->key);
	if (rc < 0)
		goto fail_dir;
	table->pins = version_pins_new();
	if (!table->pins) {
		rc = -ENOMEM; /* its only failure; errno may be a stale one */
		goto fail_dir;
	}
	pthread_mutex_init(&table->lock, NULL);
	pthread_mutex_init(&table->linger_lock, NULL);
	table->next_id = 1;
	*out = table;
	return 0;
fail_dir:
	close(table->spool_dirfd);
fail_table:
	free(table);
fail:
	return rc;
}

void flight_table_on_failed(struct flight_table *table, void (*fn)(void *ctx, struct flight *f),
                            void *ctx)
{
	table->on_failed = fn;
	table->on_failed_ctx = ctx;
}

void flight_table_close_idle_spools(struct flight_table *table, bool shared)
{
	table->close_idle_spools = true;
	table->spools_shared = shared;
}

void flight_table_on_complete(struct flight_table *table, void (*fn)(void *ctx, struct flight *f),
                              void *ctx)
{
	table->on_complete = fn;
	table->on_complete_ctx = ctx;
}

void flight_table_on_refetch(struct flight_table *table, void (*fn)(void *ctx, struct flight *f),
                             void *ctx)
{
	table->on_refetch = fn;
	table->on_refetch_ctx = ctx;
}

int flight_table_start_hasher(struct flight_table *table)
{
	int rc = flight_hasher_start(&table->hasher);

	if (rc == 0 && (rc = flight_chunk_pool_start(table)) == 0 &&
	    (rc = spool_reserve_start(table->spool_dirfd, &table->reserve)) != 0)
		flight_chunk_pool_stop(table);
	if (rc) {
		flight_hasher_stop(table->hasher);
		table->hasher = NULL;
	}
	return rc;
}

void flight_table_stop_hasher(struct flight_table *table)
{
	spool_reserve_stop(table->reserve);
	table->reserve = NULL;
	flight_chunk_pool_stop(table);
	flight_hasher_stop(table->hasher);
	table->hasher = NULL;
}

void flight_table_destroy(struct flight_table *table)
{
	if (!table)
		return;
	flight_table_stop_hasher(table);
	flight_linger_flush(table); /* before flights go: they would look for the ring */
	for (size_t i = 0; i < TABLE_BUCKETS; i++) {
		struct table_entry *e = table->buckets[i];
		while (e) {
			struct table_entry *next = e->next;
			pthread_mutex_lock(&e->flight->lock);
			e->flight->in_table = false;
			pthread_mutex_unlock(&e->flight->lock);
			flight_unref(e->flight);
			free(e);
			e = next;
		}
	}
	while (table->tainted) {
		struct tainted_key *next = table->tainted->next;
		free(table->tainted->key);
		free(table->tainted);
		table->tainted = next;
	}
	version_pins_free(table->pins);
	pthread_mutex_destroy(&table->linger_lock);
	pthread_mutex_destroy(&table->lock);
	close(table->spool_dirfd);
	free(table);
}

/* Whether some inode's pages may hold bytes of key's failed flight. Caller holds
 * table->lock. */
static bool key_tainted_locked(struct flight_table *table, const char *key)
{
	for (struct tainted_key *t = table->tainted; t; t = t->next)
		if (strcmp(t->key, key) == 0)
			return true;
	return false;
}

bool flight_table_take_taint(struct flight_table *table, const char *key, uint64_t ino)
{
	bool tainted = false;

	if (atomic_load(&table->n_tainted) == 0)
		return false;
	pthread_mutex_lock(&table->lock);
	for (struct tainted_key **pp = &table->tainted; *pp; pp = &(*pp)->next) {
		struct tainted_key *t = *pp;
		if (strcmp(t->key, key) != 0 || (t->ino != ino && t->ino != 0))
			continue;
		tainted = true;
		if (t->ino == 0)
			break; /* every inode of the key, every time: kept */
		*pp = t->next;
		table->n_tainted--;
		free(t->key);
		free(t);
		break;
	}
	pthread_mutex_unlock(&table->lock);
	return tainted;
}

/* Marks ino (0: every inode) of key. Caller holds table->lock. Allocation failure only
 * loses the hint: the flight's failure invalidated the pages already, asynchronously. */
static void taint_locked(struct flight_table *table, const char *key, uint64_t ino)
{
	struct tainted_key *t;

	if (table->n_tainted >= TAINTED_MAX) {
		while (table->tainted) {
			t = table->tainted->next;
			free(table->tainted->key);
			free(table->tainted);
			table->tainted = t;
		}
		table->n_tainted = 0;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return;
	t->key = strdup(key);
	if (!t->key) {
		free(t);
		return;
	}
	t->ino = ino;
	t->next = table->tainted;
	table->tainted = t;
	table->n_tainted++;
}

/* Notes that ino opened onto f. Caller holds f->lock. */
static void note_ino_locked(struct flight *f, uint64_t ino)
{
	for (unsigned i = 0; i < f->inos.n; i++)
		if (f->inos.list[i] == ino)
			return;
	if (f->inos.n == f->inos.cap) {
		unsigned cap = f->inos.cap ? f->inos.cap * 2 : 2;
		uint64_t *v = cap > f->inos.cap ? realloc(f->inos.list, cap * sizeof(*v)) : NULL;
		if (!v) {
			f->inos.lost = true;
			return;
		}
		f->inos.list = v;
		f->inos.cap = cap;
	}
	f->inos.list[f->inos.n++] = ino;
}

int flight_table_join(struct flight_table *table, const struct flight_spec *spec,
                      struct flight **out, bool *created)
{
	uint64_t bucket = util_hash_str(&table->key, spec->key) % TABLE_BUCKETS;
	struct table_entry *e;
	bool saw_failed = false;
	int rc = 0;

	*created = false;
	/* One find-or-insert under one lock: two openers can never create two flights. */
	pthread_mutex_lock(&table->lock);
	for (e = table->buckets[bucket]; e; e = e->next) {
		if (strcmp(e->flight->key, spec->key) == 0) {
			pthread_mutex_lock(&e->flight->lock);
			bool failed = e->flight->state == FLIGHT_FAILED;
			pthread_mutex_unlock(&e->flight->lock);
			if (failed) {
				saw_failed =
				    true; /* on its way out: the caller gets a new flight */
				continue;
			}
			pthread_mutex_lock(&e->flight->lock);
			note_ino_locked(e->flight, spec->ino);
			pthread_mutex_unlock(&e->flight->lock);
			flight_ref(e->flight);
			*out = e->flight;
			goto out;
		}
	}
	/* Its chunks' digests come from its hash list, which the caller fetches first. */
	if (spec->chunk_size && !spec->chunk_digests) {
		rc = -ENOENT;
		goto out;
	}
	e = calloc(1, sizeof(*e));
	if (!e) {
		rc = -ENOMEM;
		goto out;
	}
	/* The version a failed flight of it had seen is the session's: see version_pins.c. */
	struct flight_spec pinned = *spec;
	if (!spec->etag || !spec->etag[0])
		pinned.etag = version_pins_get(table->pins, spec->key, spec->url);
	rc = flight_new(table, &pinned, table->next_id, &e->flight);
	if (rc) {
		free(e);
		goto out;
	}
	table->next_id++;
	e->flight->after_failure = key_tainted_locked(table, spec->key) || saw_failed;
	note_ino_locked(e->flight, spec->ino); /* no other thread can see it yet */
	e->flight->in_table = true;            /* no other thread can see it yet */
	e->next = table->buckets[bucket];
	table->buckets[bucket] = e;
	flight_ref(e->flight); /* one for the table, one for the caller */
	*out = e->flight;
	*created = true;
out:
	pthread_mutex_unlock(&table->lock);
	return rc;
}

/* Takes f out of the table, pinning its version for the next flight of its key, and
 * with `taint` marks the key so that its next open drops the kernel's cached pages. */
static void take_out(struct flight *f, const char *etag, const char *url, bool taint)
{
	int pin_rc = 0;
	struct flight_table *table = f->table;
	uint64_t bucket = util_hash_str(&table->key, f->key) % TABLE_BUCKETS;
	struct table_entry **pp, *found = NULL;

	pthread_mutex_lock(&table->lock);
	for (pp = &table->buckets[bucket]; *pp; pp = &(*pp)->next) {
		if ((*pp)->flight == f) {
			found = *pp;
			*pp = found->next;
			break;
		}
	}
	if (found) {
		pthread_mutex_lock(&f->lock);
		f->in_table = false;
		for (unsigned i = 0; taint && i < f->inos.n; i++)
			taint_locked(table, f->key, f->inos.list[i]);
		if (taint && f->inos.lost)
			taint_locked(table, f->key, 0);
		pthread_mutex_unlock(&f->lock);
		if (etag[0])
			pin_rc = version_pins_put(table->pins, f->key, url, etag);
	}
	pthread_mutex_unlock(&table->lock);
	if (pin_rc)
		util_log(UTIL_LOG_WARN,
		         "%s: cannot remember the version it had (%s): its next download takes "
		         "what the server has then",
		         f->name,
		         pin_rc == -ENOSPC ? "too many failed objects" : strerror(-pin_rc));
	if (found) {
		flight_unref(f);
		free(found);
	}
}

void flight_table_remove(struct flight *f, const char *etag, const char *url)
{
	take_out(f, etag, url, true);
}

void flight_table_forget(struct flight *f)
{
	char etag[sizeof(f->xfer.version.primary_etag)] = "";

	pthread_mutex_lock(&f->lock);
	flight_version_to_pin_locked(f, etag, sizeof(etag));
	pthread_mutex_unlock(&f->lock);
	/* A key that names no version may be another version's now: the kernel's pages of
	 * this one must not be mixed with the next flight's bytes. */
	take_out(f, etag, f->url, !flight_key_names_version(f->key));
}

int flight_table_find(struct flight_table *table, const char *key, struct flight **out)
{
	uint64_t bucket = util_hash_str(&table->key, key) % TABLE_BUCKETS;
	int rc = -ENOENT;

	*out = NULL;
	pthread_mutex_lock(&table->lock);
	for (struct table_entry *e = table->buckets[bucket]; e && rc; e = e->next) {
		if (strcmp(e->flight->key, key) != 0)
			continue;
		pthread_mutex_lock(&e->flight->lock);
		bool failed = e->flight->state == FLIGHT_FAILED;
		pthread_mutex_unlock(&e->flight->lock);
		if (failed)
			continue; /* on its way out */
		flight_ref(e->flight);
		*out = e->flight;
		rc = 0;
	}
	pthread_mutex_unlock(&table->lock);
	return rc;
}

void flight_table_counts(struct flight_table *table, unsigned *flights, unsigned *complete)
{
	*flights = 0;
	*complete = 0;
	pthread_mutex_lock(&table->lock);
	for (size_t i = 0; i < TABLE_BUCKETS; i++) {
		for (struct table_entry *e = table->buckets[i]; e; e = e->next) {
			pthread_mutex_lock(&e->flight->lock);
			(*flights)++;
			if (e->flight->state == FLIGHT_COMPLETE)
				(*complete)++;
			pthread_mutex_unlock(&e->flight->lock);
		}
	}
	pthread_mutex_unlock(&table->lock);
}

void flight_table_foreach(struct flight_table *table,
                          void (*fn)(void *ctx, const struct flight_info *info), void *ctx)
{
	pthread_mutex_lock(&table->lock);
	for (size_t i = 0; i < TABLE_BUCKETS; i++) {
		for (struct table_entry *e = table->buckets[i]; e; e = e->next) {
			struct flight *f = e->flight;
			struct flight_info info = {.name = f->name, .key = f->key, .size = f->size};
			pthread_mutex_lock(&f->lock);
			info.written = f->written.total;
			info.published = f->published.total;
			info.state = f->state;
			info.whole = atomic_load(&f->whole);
			for (struct flight_waiter *w = f->waiters; w; w = w->next)
				info.waiters++;
			pthread_mutex_unlock(&f->lock);
			info.handles = atomic_load(&f->handles);
			info.durable = atomic_load(&f->durable);
			info.speculative = f->speculative;
			info.opened = atomic_load(&f->opened);
			info.wire = atomic_load(&f->wire_bytes);
			info.compressed = flight_is_compressed(f);
			fn(ctx, &info);
		}
	}
	pthread_mutex_unlock(&table->lock);
}

uint64_t flight_table_cached_bytes(struct flight_table *table, const char *key)
{
	uint64_t bucket = util_hash_str(&table->key, key) % TABLE_BUCKETS;
	uint64_t bytes = 0;

	pthread_mutex_lock(&table->lock);
	for (struct table_entry *e = table->buckets[bucket]; e; e = e->next) {
		if (strcmp(e->flight->key, key) == 0) {
			pthread_mutex_lock(&e->flight->lock);
			bytes = e->flight->published.total;
			pthread_mutex_unlock(&e->flight->lock);
			break;
		}
	}
	pthread_mutex_unlock(&table->lock);
	return bytes;
}

int flight_table_evict(struct flight_table *table, const char *key)
{
	uint64_t bucket = util_hash_str(&table->key, key) % TABLE_BUCKETS;
	struct table_entry **pp, *found = NULL;
	char *name = NULL;
	int rc = 0;

	pthread_mutex_lock(&table->lock);
	for (pp = &table->buckets[bucket]; *pp; pp = &(*pp)->next) {
		struct flight *f = (*pp)->flight;
		if (strcmp(f->key, key) != 0)
			continue;
		/*
		 * Joins take the table lock, so with it held the table's reference being the
		 * only one means no handle, reader, queue or engine can be using the flight.
		 */
		char etag[sizeof(f->xfer.version.primary_etag)] = "";
		pthread_mutex_lock(&f->lock);
		bool idle = f->state == FLIGHT_COMPLETE && atomic_load(&f->refs) == 1;
		if (idle)
			f->in_table = false;
		flight_version_to_pin_locked(f, etag, sizeof(etag));
		pthread_mutex_unlock(&f->lock);
		if (!idle) {
			util_log(UTIL_LOG_DEBUG, "%s: kept in the cache: in use", f->name);
			rc = -EBUSY;
			break;
		}
		/* The version it was read as stays the session's: the next flight of the key
		 * asks for that one, as after a failure (see version_pins.c). */
		if (etag[0])
			rc = version_pins_put(table->pins, key, f->url, etag);
		/* The cache's bound wins over the pin: a later read of it may get what the
		 * server has then, and the log says so. */
		if (rc) {
			util_log(
			    UTIL_LOG_WARN,
			    "%s: evicted without keeping its version (%s): a later read in this "
			    "session fetches what the server has then",
			    f->name, rc == -ENOSPC ? "too many objects" : strerror(-rc));
			rc = 0;
		}
		found = *pp;
		*pp = found->next;
		break;
	}
	pthread_mutex_unlock(&table->lock);
	if (rc)
		return rc;
	if (found) {
		flight_unref(found->flight);
		free(found);
	}
	rc = flight_spool_name(key, &name);
	/* Another mount sharing the cache directory may be reading it (our own mark is gone
	 * with the flight dropped above). */
	if (rc == 0 && lease_in_use_elsewhere(table->spool_dirfd, name))
		rc = -EBUSY;
	else if (rc == 0 && unlinkat(table->spool_dirfd, name, 0) != 0 && errno != ENOENT)
		rc = -errno;
	free(name);
	return rc;
}

/* For fetch/engine/object.c (declared in object.h): an open of a running flight joins it
 * without a spec, so that nothing a new flight needs (its name, its mirrors) is built. */
int flight_table_join_existing(struct flight_table *table, const char *key, uint64_t ino,
                               struct flight **out)
{
	int rc = flight_table_find(table, key, out);

	if (rc == 0) {
		pthread_mutex_lock(&(*out)->lock);
		note_ino_locked(*out, ino);
		pthread_mutex_unlock(&(*out)->lock);
	}
	return rc;
}

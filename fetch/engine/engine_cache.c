/*
 * The transfer thread's side of a cache directory: progress records a later session can
 * resume from, reuse and eviction of what earlier sessions left, and the leases that let
 * several mounts of one directory share a download (one holds it, the others watch its
 * records and take over when it lets go). Transfer thread only.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fetch/engine/engine_i.h"
#include "fetch/cache/lease.h"
#include "util/log.h"
#include "fetch/engine/progress_note.h"
#include "fetch/engine/recorder.h"
#include "index/records.h"

/*
 * Record progress in the index at least this often per flight (each record costs an
 * fdatasync). While another mount sharing the cache directory watches the download, also
 * whatever arrived every so many milliseconds: that is how quickly its readers see bytes.
 */
#define RECORD_EVERY_BYTES (64u << 20)
#define RECORD_WATCHED_BYTES (16u << 20)
#define RECORD_WATCHED_MS 200
/*
 * And note in the session's run directory what was written, every so many bytes, with no
 * sync (progress_note.h): what a serving process killed mid-stream loses beyond what was
 * recorded. Measured: a 256 MiB download killed mid-stream lost 44-108 MiB to the records'
 * lag alone. A note is a small file replaced on this thread: at 1 GiB/s, 250 a second.
 */
#define NOTE_EVERY_BYTES (4u << 20)
/* How often a flight whose download another mount holds reads that mount's records, and
 * how often a holder looks for such watchers. */
#define WATCH_EVERY_MS 50
#define WATCHERS_EVERY_MS 200
/*
 * make_room's look at the index (the sum of every object's size and the least recently used
 * ones) costs a scan of the whole table: once per object, a walk of 1,000 small objects
 * spent a quarter of the transfer thread's time in it. Between looks it adds the sizes of
 * the objects it started to what it last saw, and looks again once that estimate passes
 * this share of the bound, or this long after the last look (other mounts sharing the
 * directory add to it too).
 */
#define ROOM_LOOK_SHARE 0.75
#define ROOM_LOOK_EVERY_MS 1000

/* Whether `fresh` bytes written since the last record are worth an fdatasync now. */
static bool record_due(const struct flight *f, uint64_t fresh, uint64_t now, bool force)
{
	if (fresh == 0)
		return false;
	if (force || fresh >= RECORD_EVERY_BYTES)
		return true;
	/* A watching mount sees only what is recorded: often, then. */
	return f->xfer.watched &&
	       (fresh >= RECORD_WATCHED_BYTES || now - f->xfer.recorded_ms >= RECORD_WATCHED_MS);
}

/* Notes f's written ranges for the next serving process of this session, when due. */
static void note_progress(struct engine *e, struct flight *f, uint64_t total)
{
	struct util_ranges written;
	int rc;

	if (e->cfg.progress_dirfd < 0 || f->spool.fd < 0 || f->spool.borrowed ||
	    f->xfer.noted_bytes == UINT64_MAX || total < f->xfer.noted_bytes + NOTE_EVERY_BYTES)
		return;
	util_ranges_init(&written);
	rc = flight_copy_written(f, &written);
	if (rc == 0)
		rc = progress_note_write(e->cfg.progress_dirfd, f->spool.name, f->spool.fd, f->size,
		                         &written);
	util_ranges_free(&written);
	if (rc == 0) {
		f->xfer.noted_bytes = total;
		return;
	}
	/* Only a restart's refetch depends on it: said once per object, then not tried again. */
	util_log(UTIL_LOG_DEBUG, "%s: cannot note progress for a restart (%s)", f->name,
	         strerror(-rc));
	f->xfer.noted_bytes = UINT64_MAX;
}

/* Records matter only in a cache directory that a later session may reuse, and only the
 * lease holder writes them (and notes); the last one (complete or failed) is written once. */
static bool records_here(struct engine *e, struct flight *f)
{
	return e->recorder && !f->xfer.final_recorded && !atomic_load(&f->durable) &&
	       (e->cfg.lease_dirfd < 0 || f->xfer.lease_held);
}

void engine_cache_note_written(struct engine *e, struct flight *f)
{
	uint64_t total;
	enum flight_state state;

	if (e->cfg.progress_dirfd < 0 || f->xfer.noted_bytes == UINT64_MAX || !records_here(e, f))
		return;
	flight_progress(f, &total, NULL, &state);
	if (state == FLIGHT_ACTIVE)
		note_progress(e, f, total);
}

void engine_cache_record_progress(struct engine *e, struct flight *f, bool force)
{
	struct util_ranges written;
	uint64_t total;
	enum flight_state state;

	if (!records_here(e, f))
		return;
	flight_progress(f, &total, NULL, &state);
	/* Finished or failed: its note has nothing more to tell a restart (the record does). */
	if (state != FLIGHT_ACTIVE && e->cfg.progress_dirfd >= 0 && f->xfer.noted_bytes &&
	    f->spool.name) {
		progress_note_remove(e->cfg.progress_dirfd, f->spool.name);
		f->xfer.noted_bytes = 0;
	}
	if (state == FLIGHT_FAILED) {
		recorder_failed(e->recorder, f);
		f->xfer.final_recorded = true;
		return;
	}
	if (state == FLIGHT_ACTIVE)
		note_progress(e, f, total);
	uint64_t now = now_ms();
	if (state != FLIGHT_COMPLETE && !record_due(f, total - f->xfer.recorded_bytes, now, force))
		return;
	util_ranges_init(&written);
	if (flight_copy_written(f, &written) == 0) {
		recorder_ranges(e->recorder, f, &written, state == FLIGHT_COMPLETE);
		f->xfer.recorded_bytes = total;
		f->xfer.recorded_ms = now;
		f->xfer.final_recorded = state == FLIGHT_COMPLETE;
	}
	util_ranges_free(&written);
}

/*
 * When an object was last put to use, for least-recently-used eviction: wall-clock
 * milliseconds (comparable across sessions), strictly increasing within one, so objects
 * first used in the same millisecond still have an order.
 */
int64_t engine_cache_use_stamp(struct engine *e)
{
	struct timespec ts;
	int64_t now;

	clock_gettime(CLOCK_REALTIME, &ts);
	now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	if (now <= e->last_use_stamp)
		now = e->last_use_stamp + 1;
	e->last_use_stamp = now;
	return now;
}

/*
 * --cache-max-size: evicts complete objects, least recently used first, until the cache
 * fits. Objects in use (open, being read or downloaded) are never evicted; if they alone
 * exceed the limit, the cache stays over it and says so.
 */
static void make_room(struct engine *e, struct flight *f)
{
	struct index_records_entry lru[64];
	uint64_t bytes = 0, now = now_ms(), max = e->cfg.cache_max_size;
	size_t n = 0;

	if (e->room.checked && now - e->room.checked_ms < ROOM_LOOK_EVERY_MS &&
	    (double)(e->room.seen + e->room.added + f->size) < ROOM_LOOK_SHARE * (double)max) {
		e->room.added += f->size;
		return;
	}
	if (index_records_usage(e->cfg.records, &bytes, lru, 64, &n) != 0)
		return;
	for (size_t i = 0; i < n && bytes > e->cfg.cache_max_size; i++) {
		if (strcmp(lru[i].key, f->key) == 0 ||
		    flight_table_evict(f->table, lru[i].key) != 0)
			continue;
		if (index_records_forget(e->cfg.records, lru[i].key) == 0)
			bytes -= lru[i].size < bytes ? lru[i].size : bytes;
		/* Keys name objects by hash or URL (not by path: that is each mount's own). */
		char shown[512];
		util_log(UTIL_LOG_INFO,
		         "evicted %s (%" PRIu64 " bytes) from the cache, for --cache-max-size",
		         flight_key_shown(lru[i].key, shown, sizeof(shown)), lru[i].size);
	}
	for (size_t i = 0; i < n; i++)
		free(lru[i].key);
	/* The sum counts f already (activate touched its row with its size). */
	e->room.checked = true;
	e->room.checked_ms = now;
	e->room.seen = bytes;
	e->room.added = 0;
	if (bytes > e->cfg.cache_max_size)
		util_log(UTIL_LOG_WARN,
		         "cache holds %" PRIu64 " bytes, over --cache-max-size %" PRIu64
		         ": the rest is in use",
		         bytes, e->cfg.cache_max_size);
}

/* A file gone or cut short under its records is fetched again: said, as a seal's change. */
static void say_unmatched(struct flight *f)
{
	util_log(UTIL_LOG_WARN, "%s: the cached copy does not match its records; fetching it again",
	         f->name);
}

/*
 * Whether f's spool file still shows the seal recorded with its completion: one written to
 * since (a stray write, a disk tool) may hold other bytes than the records say. A hashed
 * object is hashed again before its last bytes are served, and only the lease holder
 * (`holder`) marks its record not complete meanwhile; an unhashed one is not reused
 * (-ESTALE). 0, with *complete cleared when the bytes must be checked, or -errno.
 */
static int check_seal(struct engine *e, struct flight *f, bool holder, bool *complete)
{
	char recorded[FLIGHT_SEAL_MAX] = "", found[FLIGHT_SEAL_MAX] = "";
	int rc = index_records_seal(e->cfg.records, f->key, recorded, sizeof(recorded));

	/* A record from a spoolfs before seals has none: checked like a changed one. */
	if (rc && rc != -ENOENT)
		return rc;
	rc = flight_spool_seal_found(f, found, sizeof(found));
	if (rc) {
		say_unmatched(f);
		return rc;
	}
	if (strcmp(found, recorded) == 0)
		return 0;
	const char *why = recorded[0] ? "the cached copy changed since it was complete"
	                              : "the cached copy has no seal (an older spoolfs kept it)";
	if (!flight_hash_names_version(f)) {
		util_log(UTIL_LOG_WARN, "%s: %s; fetching it again", f->name, why);
		return -ESTALE;
	}
	util_log(UTIL_LOG_WARN, "%s: %s; checking its sha256 again", f->name, why);
	*complete = false;
	return holder ? index_records_mark_incomplete(e->cfg.records, f->key) : 0;
}

/* f is complete in the cache directory's records: durable, and its opens were hits. */
static void found_complete(struct engine *e, struct flight *f)
{
	atomic_store(&f->durable, true);
	if (f->xfer.restored)
		return;
	f->xfer.restored = true;
	atomic_fetch_add_explicit(&e->stats->restored, 1, memory_order_relaxed);
}

/*
 * Adds to `recorded` what an earlier serving process of this session noted of f's spool
 * and had not recorded yet (progress_note.h). 1 when it added some, 0 when none, -errno.
 */
static int add_noted(struct engine *e, struct flight *f, struct util_ranges *recorded)
{
	char *name = NULL;
	int rc;

	if (e->cfg.progress_dirfd < 0)
		return 0;
	rc = flight_spool_name(f->key, &name);
	if (rc == 0)
		rc = progress_note_read(e->cfg.progress_dirfd, name, f->table->spool_dirfd, f->size,
		                        recorded);
	if (rc < 0)
		util_log(UTIL_LOG_WARN,
		         "%s: the progress note of the serving process before is "
		         "unusable (%s): fetching what it had not recorded again",
		         f->name, strerror(-rc));
	free(name);
	return rc;
}

/*
 * Picks up what a previous session left in a persistent cache. 0 when it did; otherwise
 * *none says whether the records showed nothing to reset (no ranges, not complete).
 */
static int reuse_spool(struct engine *e, struct flight *f, bool *none)
{
	struct util_ranges recorded;
	bool complete = false;
	uint64_t durable;
	int rc;

	/* After a failed flight, what its predecessor left is suspect: start afresh. */
	if (!e->cfg.records || !e->cfg.durable || !flight_key_names_version(f->key) ||
	    f->after_failure)
		return -ENOENT;
	util_ranges_init(&recorded);
	rc = index_records_lookup(e->cfg.records, f->key, &complete, &recorded);
	*none = (rc == 0 || rc == -ENOENT) && !complete && recorded.total == 0;
	if (rc == 0 && complete)
		rc = check_seal(e, f, true, &complete);
	durable = recorded.total;
	if ((rc == 0 || rc == -ENOENT) && !complete && add_noted(e, f, &recorded) > 0)
		rc = 0;
	if (rc == 0) {
		rc = flight_reopen_spool(f, &recorded, complete, false);
		/* A row without ranges is only a use time (index_records_touch): nothing kept. */
		if ((rc == -ENOENT || rc == -ESTALE) && (complete || recorded.total > 0))
			say_unmatched(f);
	}
	if (rc == 0) {
		/* Noted bytes are not durable yet: the next record makes them so. */
		f->xfer.recorded_bytes = durable;
		f->xfer.noted_bytes = recorded.total;
		if (complete)
			found_complete(e, f);
		if (recorded.total > durable)
			util_log(UTIL_LOG_INFO,
			         "%s: resumed from the cache (%" PRIu64 " of %" PRIu64
			         " bytes, %" PRIu64 " of them noted by the serving process before)",
			         f->name, recorded.total, f->size, recorded.total - durable);
		else
			util_log(UTIL_LOG_INFO,
			         "%s: %s from the cache (%" PRIu64 " of %" PRIu64 " bytes)",
			         f->name, complete ? "served" : "resumed", recorded.total, f->size);
	}
	util_ranges_free(&recorded);
	return rc;
}

/* This mount downloads f: from what the cache holds, else from the start. */
void engine_cache_start_owned(struct engine *e, struct flight *f)
{
	char *name = NULL;
	bool none = false;
	int rc;

	if (e->cfg.durable && e->cfg.records && e->cfg.cache_max_size)
		make_room(e, f);
	rc = reuse_spool(e, f, &none);
	if (rc == 0)
		return;
	if (f->spool.fd >= 0) {
		engine_fail_flight(e, f, rc, "cannot restore the spool file");
		return;
	}
	/* Stale records must go before the file is truncated, or a crash could restore them.
	 * Records that hold nothing (a fresh object: only its use time) need no write: this
	 * mount holds the lease, so no other one records ranges for it meanwhile. */
	if (e->cfg.durable && e->cfg.records && !none) {
		rc = index_records_reset(e->cfg.records, f->key);
		if (rc) {
			engine_fail_flight(e, f, rc, "cannot update the cache index");
			return;
		}
	}
	/* A note of the file this one replaces names another inode; gone all the same. */
	if (e->cfg.progress_dirfd >= 0 && flight_spool_name(f->key, &name) == 0)
		progress_note_remove(e->cfg.progress_dirfd, name);
	free(name);
	rc = flight_open_spool(f);
	/* Out of fds for speculation nobody asked for yet: that is its cue to back off. */
	if ((rc == -EMFILE || rc == -ENFILE) && flight_speculation_unclaimed(f)) {
		engine_drop_speculation(e, f, rc);
		return;
	}
	if (rc) {
		char why[128];
		snprintf(why, sizeof(why), "%s: %s",
		         rc == -ENOSPC ? "no space left in the cache directory"
		                       : "cannot create the spool file",
		         strerror(-rc));
		engine_fail_flight(e, f, rc, why);
		return;
	}
	if (f->size == 0) {
		rc = flight_complete_empty(f);
		if (rc)
			engine_fail_flight(e, f, rc, "sha256 mismatch");
	}
}

/*
 * Lets other mounts take the download over: once finished, failed or stopped. Through the
 * recorder, so the lease goes only after the records the next holder starts from.
 */
void engine_cache_release_lease(struct engine *e, struct flight *f)
{
	if (f->xfer.lease_watching)
		lease_set_unwatch(e->leases, f->key);
	if (f->xfer.lease_held && e->recorder)
		recorder_release(e->recorder, e->leases, f->key);
	else if (f->xfer.lease_held)
		lease_set_release(e->leases, f->key);
	f->xfer.lease_watching = false;
	f->xfer.lease_held = false;
}

/*
 * A holder's readers may all be sparse, but a mount watching its download can only wait for
 * what it fetches: once watched, it fetches everything, and records progress often.
 */
void engine_cache_look_for_watchers(struct engine *e, struct flight *f, uint64_t now)
{
	f->xfer.next_watch_ms = now + WATCHERS_EVERY_MS;
	if (f->xfer.watched || !lease_set_watched(e->leases, f->key))
		return;
	f->xfer.watched = true;
	flight_fetch_whole(f);
}

/*
 * The mount that was downloading f let go: finished, failed, unmounted or killed. What it
 * recorded says which; an unfinished download continues here from its recorded ranges.
 */
static void take_over(struct engine *e, struct flight *f)
{
	const char *why = "cannot take over another mount's download";
	struct util_ranges recorded;
	bool complete = false;
	struct stat st;
	int rc;

	f->xfer.lease_held = true;
	if (f->spool.fd < 0) {
		engine_cache_start_owned(e, f); /* it never got far enough to show us a spool */
		return;
	}
	/* A download that fails deletes its spool: its readers got the error, ours do too. */
	if (fstat(f->spool.fd, &st) != 0 || st.st_nlink == 0) {
		engine_fail_flight(e, f, -EIO, "the download in another mount of the cache failed");
		return;
	}
	flight_claim_spool(f);
	util_ranges_init(&recorded);
	rc = index_records_lookup(e->cfg.records, f->key, &complete, &recorded);
	if (rc == 0 && complete && (rc = check_seal(e, f, true, &complete)) == -ESTALE)
		why = "the cached copy changed since it was complete";
	if (rc == 0) {
		rc = flight_adopt(f, &recorded, complete);
		f->xfer.recorded_bytes = recorded.total;
		if (complete)
			found_complete(e, f);
	}
	util_ranges_free(&recorded);
	/* Without a record, what was adopted earlier was recorded then: keep going from it. */
	if (rc && rc != -ENOENT) {
		engine_fail_flight(e, f, rc, why);
		return;
	}
	util_log(UTIL_LOG_INFO,
	         "%s: %s the download from another mount (%" PRIu64 " of %" PRIu64 " bytes local)",
	         f->name, complete ? "finished by" : "took over", flight_written(f), f->size);
}

/*
 * Another mount holds f's lease: serves its readers what that mount has recorded, from the
 * same spool file, and takes over when the lease comes free. The records are read after
 * the file is opened and trusted only while the path still names that file: a holder that
 * starts afresh makes a new file, and the old one's records say nothing about it.
 */
void engine_cache_watch(struct engine *e, struct flight *f)
{
	const char *why = "cannot follow another mount's download";
	struct util_ranges none, recorded;
	bool complete = false;
	int rc = lease_set_try(e->leases, f->key);

	f->xfer.next_watch_ms = now_ms() + WATCH_EVERY_MS;
	if (rc == 1) {
		take_over(e, f);
		return;
	}
	util_ranges_init(&none);
	util_ranges_init(&recorded);
	if (rc == 0 && f->spool.fd < 0) {
		/* Opened with nothing adopted yet: what it holds is decided below. */
		rc = flight_reopen_spool(f, &none, false, true);
		/* Not created, or not sized, yet: the holder has only just started. */
		if (f->spool.fd < 0 && (rc == -ENOENT || rc == -ESTALE))
			rc = 1;
	}
	if (rc == 0)
		rc = index_records_lookup(e->cfg.records, f->key, &complete, &recorded);
	if (rc == -ENOENT || rc == -EBUSY)
		rc = 1; /* nothing recorded yet, or another mount is writing: next time */
	if (rc == 0 && !flight_spool_still_named(f)) {
		rc = -ESTALE;
		util_log(UTIL_LOG_WARN, "%s: the other mount restarted its download; reopen it",
		         f->name);
	}
	/* The holder checks a changed copy too, but not before this mount may have looked. */
	if (rc == 0 && complete && (rc = check_seal(e, f, false, &complete)) == -ESTALE)
		why = "the cached copy changed since it was complete";
	if (rc == 0)
		rc = flight_adopt(f, &recorded, complete);
	if (rc == 0 && complete)
		found_complete(e, f);
	util_ranges_free(&recorded);
	if (rc < 0)
		engine_fail_flight(e, f, rc, why);
}

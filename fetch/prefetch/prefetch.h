/*
 * Prefetch: fetching what readers will open before they open it. Two sources of
 * speculation, one thread:
 *
 * - walks (walk.h): opens that show a reader walking a tree make the files it will open
 *   next start downloading, a window of them ahead of it;
 * - a prefetch list (reads.h): paths a previous run of the same job opened, in order,
 *   started from mount time within a byte budget, objects already local skipped.
 *
 * Beside a list, walks work only for what it did not foresee (prefetch.c, foreseen.h).
 *
 * Every object it starts is a speculative flight (flight_spec.speculative): the engine runs
 * at most spec_max of their requests at once, beside the readers' own, and backs off when
 * the upstream throttles (spec_limit.h). A reader who opens one joins its download.
 *
 * The caller (fs/) notes opens (prefetch_note_open, cheap: an event queued for the thread)
 * and supplies, in struct prefetch_ops, how a file's flight is started.
 *
 * Lock: prefetch.lock guards the event queue and the stop flag; never held while calling
 * out. The walk, the list reader and the list's flights belong to the thread. Progress
 * counters are atomics.
 */
#ifndef SPOOLFS_FETCH_PREFETCH_H
#define SPOOLFS_FETCH_PREFETCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct flight;
struct index;

struct prefetch_config {
	bool walk;              /* watch opens for walks */
	unsigned ahead_files;   /* a walk's window: files speculated ahead of its reader */
	uint64_t window_bytes;  /* ... and their bytes */
	uint64_t max_object;    /* a walk leaves larger files to their readers */
	int list_fd;            /* a prefetch list to read (owned from prefetch_create), or -1 */
	const char *list_name;  /* its name, for log lines (copied) */
	uint64_t list_budget;   /* bytes the list may start */
	unsigned list_inflight; /* list objects handed to the engine and not finished, at most */
	/* Where the walk counters live (memory the mount's later serving processes map too);
	 * NULL: the prefetch's own. */
	struct prefetch_walk_counters *walk_counters;
	/* A list read before list_fd (the manifest's read order), the same way; its entries
	 * count in the list's figures. Owned from prefetch_create, or -1. */
	int order_fd;
	const char *order_name; /* its name, for log lines (copied) */
};

/* prefetch_ops.start's answer for an object whose hash list is still downloading. */
#define PREFETCH_PENDING 2

struct prefetch_ops {
	/*
	 * Starts file ino's download as a speculative flight: 1 and *out (a reference) when
	 * a new one started, 0 when its object is local or downloading already (nothing held),
	 * or -errno. whole: download all of it however large (a list entry). With whole,
	 * PREFETCH_PENDING and *out (a reference) when the object can start only once flight
	 * *out completes (its hash list, downloading): the thread calls start again then,
	 * without waiting for it, and drops *out after that call.
	 */
	int (*start)(void *ctx, uint64_t ino, bool whole, struct flight **out);
	/* Makes sure directory dir is listed (lazy sources; may wait on the network); NULL:
	 * always listed. 0 or -errno. */
	int (*ensure_listed)(void *ctx, uint64_t dir);
	void *ctx;
};

/* For stats and `spoolfs status`: counts for the mount, whichever process saw them
 * (fs/shared_counters.c: a change of its fields raises COUNTERS_FORMAT there). */
struct prefetch_walk_counters {
	atomic_uint_fast64_t walks;        /* walks seen */
	atomic_uint_fast64_t walk_started; /* objects a walk started */
	atomic_uint_fast64_t walk_hits;    /* opens a walk's window had predicted */
};

/* For stats and `spoolfs status`. The list's figures are this serving process's. */
struct prefetch_stats {
	struct prefetch_walk_counters *walk; /* cfg.walk_counters, or the prefetch's own */
	atomic_bool list_given;              /* a list is in use */
	atomic_bool list_done;               /* read to its end and every object finished */
	atomic_uint_fast64_t list_entries;   /* lines read, blank ones left out */
	atomic_uint_fast64_t list_bad;       /* lines skipped: not a file of the source, garbage */
	atomic_uint_fast64_t list_local;     /* objects local or downloading already */
	atomic_uint_fast64_t list_started;   /* objects it started */
	atomic_uint_fast64_t list_finished;  /* ... of which finished (complete or failed) */
	atomic_uint_fast64_t list_over_budget; /* entries left out: the byte budget */
	atomic_uint_fast64_t list_bytes;       /* bytes of the objects it started */
};

struct prefetch;

/* 0 or -errno; on failure cfg->list_fd and cfg->order_fd are closed all the same. */
int prefetch_create(struct index *idx, const struct prefetch_config *cfg,
                    const struct prefetch_ops *ops, struct prefetch **out);
/* Starts the thread. 0 or -errno. */
int prefetch_start(struct prefetch *p);
/* Stops and joins the thread, dropping the flights it holds. Idempotent; before the engine
 * stops. */
void prefetch_stop(struct prefetch *p);
void prefetch_destroy(struct prefetch *p);

/* File ino in directory dir was opened. Any thread; never blocks on I/O. */
void prefetch_note_open(struct prefetch *p, uint64_t ino, uint64_t dir);

const struct prefetch_stats *prefetch_stats(const struct prefetch *p);

#endif

/*
 * What the FUSE side counts (struct fs_counters).
 */
#ifndef SPOOLFS_FS_COUNTERS_H
#define SPOOLFS_FS_COUNTERS_H

#include <stdatomic.h>
#include <stdint.h>
#include "util/histogram.h"

/* What the FUSE side counts, for /.spoolfs/stats. Atomics: any thread adds. Shared by the
 * mount's serving processes (shared_counters.c): a change of its fields raises
 * COUNTERS_FORMAT there. */
struct fs_counters {
	atomic_uint_fast64_t opens_local;         /* the object was already complete */
	atomic_uint_fast64_t opens_passthrough;   /* ... and the kernel reads its spool itself */
	atomic_uint_fast64_t opens_new;           /* the open started a download */
	atomic_uint_fast64_t opens_joined;        /* the open joined a running download */
	atomic_uint_fast64_t handles_adopted;     /* an earlier serving process's, rebuilt here */
	atomic_uint_fast64_t nested_listed_ahead; /* nested manifests a walk had not reached */
	atomic_uint_fast64_t reads_parked;        /* reads that waited for their bytes */
	atomic_uint_fast64_t reads_failed;
	atomic_uint_fast64_t pages_dropped_bytes; /* FUSE page cache dropped (page_drop.c) */
	atomic_uint_fast64_t page_drops_pending;  /* drops queued, not yet done */
	atomic_uint_fast64_t virtual_snapshots;   /* /.spoolfs contents built (one per open) */
	/* From an open of an object to the answer of its first read that reached the daemon
	 * (reads the kernel answers from its page cache, or passthrough, never do). */
	struct util_histogram first_byte;
	struct util_histogram read_wait;           /* a parked read: from parking to its answer */
	atomic_uint_fast64_t member_hash_failures; /* pack members whose bytes did not match */
	atomic_uint_fast64_t
	    members_pushed; /* members given to the page cache at open (member.c) */
	/* The most cache misses any reader was shown (metrics.c): never shown fewer after. */
	atomic_uint_fast64_t misses_shown;
};

#endif

/*
 * The mounted session the FUSE operations work on (struct fs_session).
 *
 * struct fs_session is created in main() before the mount and destroyed after the FUSE loop
 * ends. Its fields are set before the loop starts and read-only afterwards, except those
 * with their own synchronisation (the index, the flight table and the engine each have
 * their own locks) and those a comment names a lock for. What only the daemon around the
 * session uses (the run directory, shared counters, metrics) is in .daemon
 * (daemon/state.h); the parts of one job each are in structures of their own below.
 */
#ifndef SPOOLFS_FS_SESSION_H
#define SPOOLFS_FS_SESSION_H

#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "daemon/options.h"
#include "util/output.h"
#include "daemon/state.h"
#include "fetch/cache/cache_dir.h"
#include "fetch/engine/engine.h"
#include "fetch/engine/flight.h"
#include "fetch/engine/object.h"
#include "fetch/prefetch/prefetch.h"
#include "fetch/s3/source_s3.h"
#include "fetch/source/listing_flight.h"
#include "fetch/source/manifest_load.h"
#include "fetch/source/source.h"
#include "fs/counters.h"
#include "fs/handles.h"
#include "index/index.h"
#include "index/records.h"
#include "util/ledger.h"
#include "util/worker.h"

/* Pending background (readahead) requests the kernel may send: see fs_init. */
#define FS_MAX_BACKGROUND 1024
/* FUSE worker threads at most: see run_session. */
#define FS_MAX_WORKERS 256

/* The INIT exchange (handover.c): the request as read (or replayed) and, in a later serving
 * process, the reply the first one sent. Written before other requests are read (see
 * handover.c), read-only after. */
struct fs_handover {
	uint64_t init_unique; /* INIT's request id, set before passthrough leaves UNKNOWN */
	void *init_req;
	size_t init_req_len;
	void *init_reply;
	size_t init_reply_len;
	bool init_resend; /* the kernel offered FUSE_HAS_RESEND */
	/* INIT offered FUSE_CAP_NO_OPENDIR_SUPPORT: OPENDIR answers ENOSYS (fs_opendir). Set
	 * by fs_init from the INIT request, which every serving process replays, so all of them
	 * decide alike; any FUSE thread loads it. */
	atomic_bool no_opendir;
	atomic_bool init_seen; /* the first process read INIT and has not replied yet */
	atomic_int replay;     /* handover.c's enum replay */
	pthread_mutex_t lock;
	pthread_cond_t cond; /* replay reached REPLAY_DONE; with lock */
};

/* Handles the kernel has not released (handles.c): a release still queued when the loop
 * ends is never read, so the session frees what is left (fs_handles_free_all). */
struct fs_handle_table {
	pthread_mutex_t lock;
	struct fs_handle *open;                     /* guarded by lock */
	struct fs_handle *by_id[FS_HANDLE_BUCKETS]; /* by fh; guarded by lock */
	atomic_uint_least64_t serial;               /* the last fh serial given */
};

/* Lazy listing and nested manifests (listing.c). */
struct fs_listing {
	struct s3_source *s3; /* a bucket's (listed, or holding --manifest KEY), else NULL */
	/* The directories being listed now; its own lock. */
	struct listing_flights *flights;
	/* Nested manifests are fetched as the manifest was and loaded with its rules; the root
	 * manifest's URL, which their URLs resolve against. Set before the mount exists,
	 * read-only after. */
	char *manifest_url;
	struct source_options nested_src;
	struct manifest_load_options nested_rules;
	/* Nested manifests listed ahead of a walk: the worker that lists them, NULL until
	 * started; the directory listed ahead that a walk has not entered yet (0: none); and
	 * whether the worker should list no more (the session is ending). */
	struct util_worker *ahead;
	atomic_uint_fast64_t ahead_dir;
	atomic_bool ahead_stopping;
};

/* Threads that answer for others, so that the thread that made an answer possible goes
 * back to its own work at once. Set before the FUSE loop starts and cleared after the
 * engine (and the hasher) stopped: no thread can be queueing to them then. */
struct fs_workers {
	/* Invalidations after failed flights (reply.c). */
	struct util_worker *invalidator;
	atomic_int inval_jobs; /* its jobs queued or running, at most FS_INVAL_PENDING_MAX */
	/* Replies to parked reads whose bytes arrived (the transfer thread published them). */
	struct util_worker *replier;
	/* Opens that waited for a hash list (hash_list.c). */
	struct util_worker *opener;
};

/* The objects open through FUSE and how the kernel reads them (passthrough.c, page_drop.c). */
struct fs_pt {
	/* Guards objects, their fields and the handles' passthrough and run_* fields. */
	pthread_mutex_t lock;
	struct fs_object *objects[FS_OBJECT_BUCKETS]; /* by flight id; guarded by lock */
	struct util_worker *dropper;                  /* page_drop.c; NULL with --no-passthrough */
	/* Per inode, the passthrough backing id the kernel holds and how many passthrough files
	 * of it are open, for this and the serving processes after it (util/ledger.h); NULL
	 * without a run directory. Its own lock. */
	struct util_ledger *ledger;
};

/* Pack members given to the kernel's page cache at their open (member_push.c). */
#define FS_MEMBER_OPEN_BUCKETS 256
struct fs_member_open; /* member_push.c: one inode's open member handles */
struct fs_member_pushes {
	pthread_mutex_t lock;
	pthread_cond_t push_ended; /* an inode's push ended; with lock */
	/* A bit per inode whose pages the kernel was given and, as far as the daemon knows,
	 * keeps; guarded by lock. */
	uint64_t *bits;
	size_t words;
	/* The inodes with member handles open now, and whether one is being pushed; guarded by
	 * lock. */
	struct fs_member_open *open[FS_MEMBER_OPEN_BUCKETS];
	bool off; /* an open could not be counted: no push is safe any more; guarded by lock */
};

struct fs_session {
	struct daemon_options opts;
	/* The mountpoint's canonical path (set before mounting), and whether its readahead has
	 * been raised: done at the first open, once the kernel has applied FUSE's INIT reply,
	 * which would undo it (see readahead.c). */
	char *mount_path;
	atomic_bool readahead_tuned;
	/* Its "major:minor" in mountinfo, read right after mounting ("" when unknown; a later
	 * serving process has the first one's): written before the loop starts and only read
	 * after, so no lock. */
	char mount_dev[32];
	struct fs_listing listing;
	struct index *idx; /* the namespace: its own lock (index.h) */
	/* Which object an inode is, and its flight (fetch/engine/object.h): its own lock.
	 * Made with the engine, destroyed after it. */
	struct fetch_objects *resolver;
	struct index_records *records; /* the cache directory's: its own lock (records.h) */
	struct flight_table *flights;
	struct engine *engine;
	struct fuse_session *se;
	struct cache_dir *cache; /* the cache directory in use (fetch/cache/cache_dir.h) */
	uint64_t cache_max_size; /* bytes; 0 = unbounded */
	uid_t uid;
	gid_t gid;
	double timeout_s; /* kernel entry/attr cache: the session is a snapshot */
	struct fs_workers workers;
	/* &daemon.shared_counters->fs, which the mount's serving processes count on one after
	 * another, or &daemon.own_counters when there is no such block (shared_counters.c). */
	struct fs_counters *counters;
	/* The length of each /.spoolfs file's latest snapshot (stats, flights), which stat
	 * shows (virtual.c): any FUSE thread stores or loads it. */
	atomic_uint_fast64_t virtual_len[2];
	/* Writes /.spoolfs/stats' text (the daemon's metrics); set before the loop starts. */
	void (*write_stats)(struct fs_session *s, FILE *out, const char *labels);
	/* Kernel passthrough (passthrough.c): what INIT settled, an enum fs_passthrough. */
	atomic_int passthrough;
	struct fs_handover handover;
	struct fs_pt pt;
	struct fs_member_pushes pushes;
	/* Where --record-reads is written: its directory, resolved and held at start
	 * (util_output_open), written only through it. */
	struct util_output reads_out;
	/* prefetch.c: the prefetch thread (its own lock) and the record of what was opened
	 * (its own lock); NULL when off. Set before the loop starts. */
	struct prefetch *prefetch;
	struct prefetch_record *reads;
	uint64_t prefetch_window;
	uint64_t prefetch_budget;
	char reads_name[48];    /* the record's name in the cache directory ("" without one) */
	atomic_bool loop_ended; /* the FUSE loop returned: no request will be read any more */
	/* read_order.c: the manifest's read order prefetched ("" without one), and its name in
	 * log lines. Set before the loop starts. */
	char read_order_name[72];
	char read_order_label[96];
	struct fs_handle_table handles;
	/* This serving process's place in the mount's line of them (doc/survive.md): 0 for
	 * the first, one more per restart or reload. Fixed before the loop. */
	uint64_t generation;
	struct daemon_state daemon;
};

enum fs_passthrough {
	FS_PASSTHROUGH_UNKNOWN, /* INIT not read yet */
	FS_PASSTHROUGH_OFFERED, /* the kernel offers it; the INIT reply will ask for it */
	FS_PASSTHROUGH_ON,      /* asked for; the first backing open confirms it */
	FS_PASSTHROUGH_OFF,
};

extern const struct fuse_lowlevel_ops fs_ops;

#endif

/*
 * What the fs/ files share: the mounted session and the option set.
 *
 * struct fs_session is created in main() before the mount and destroyed after the FUSE loop
 * ends. Its fields are set before the loop starts and read-only afterwards, except those
 * with their own synchronisation (the index, the flight table and the engine each have
 * their own locks).
 */
#ifndef SPOOLFS_FS_I_H
#define SPOOLFS_FS_I_H

#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "fetch/cache/cache_dir.h"
#include "fetch/engine/engine.h"
#include "fetch/s3/source_s3.h"
#include "fetch/source/manifest_load.h"
#include "fetch/source/source.h"
#include "fetch/engine/flight.h"
#include "fetch/engine/object.h"
#include "fetch/prefetch/prefetch.h"
#include "fetch/source/listing_flight.h"
#include "util/histogram.h"
#include "util/ledger.h"
#include "util/worker.h"
#include "index/index.h"
#include "index/records.h"

struct daemon_options {
	char *source;
	char *mountpoint;
	char *cache_dir; /* NULL: a fresh directory per mount, removed at unmount */
	char *ca_file;
	char *proxy;
	char *netrc_file;        /* userinfo for http(s) hosts, kept out of argv */
	char *cache_max_size;    /* "10G": parsed by main */
	char *max_manifest_size; /* "1G": parsed by main */
	char **mirrors;          /* --mirror bases, in order */
	unsigned n_mirrors;
	char *log_level;
	char *log_file;     /* --log-file: instead of stderr or syslog */
	char *metrics_file; /* --metrics-file: absolute once main checked it; NULL: none */
	char *endpoint;     /* S3 */
	char *region;
	char *profile;
	char *manifest;              /* --manifest KEY: a manifest in the s3:// source's bucket */
	char *role_arn;              /* --role-arn: web identity (GitHub Actions' OIDC token) */
	char *expected_bucket_owner; /* --expected-bucket-owner */
	int requester_pays;          /* --requester-pays */
	int path_style;
	int no_sign;
	/* As given; daemon_options_parse checks them and sets the numbers below. */
	char *stall_timeout_text;
	char *start_timeout_text;
	char *retries_text;
	char *max_transfers_text;
	char *stats_mode_text;
	char *outside_symlinks_text;
	char *uid_text;
	char *gid_text;
	char *file_mode_text;
	char *dir_mode_text;
	char *metrics_interval_text;
	char *prefetch_requests_text;
	char *prefetch_window;      /* "32M": parsed by main */
	char *prefetch_budget;      /* "2G": parsed by main */
	char *prefetch_list;        /* --prefetch-list FILE: paths to fetch from mount time */
	char *record_reads;         /* --record-reads FILE: absolute once main checked it */
	char *read_order_name;      /* --read-order-name NAME; NULL: "default", if any */
	int no_read_order;          /* --no-read-order */
	unsigned prefetch_requests; /* speculative requests at once; 0: no walk prefetch */
	unsigned stall_timeout_s;
	unsigned start_timeout_s; /* --start-timeout: a serving process serves within it */
	unsigned retries;
	unsigned max_transfers;
	unsigned stats_mode; /* permission bits of the /.spoolfs files: read bits only */
	unsigned metrics_interval_s;
	int outside_symlinks; /* enum manifest_outside_symlinks */
	/* --uid, --gid: the owner every node shows (-1: the mounting user's). */
	long long uid;
	long long gid;
	/* --file-mode, --dir-mode: permission bits shown instead of the source's, read and
	 * execute only (-1: the source's). */
	int file_mode;
	int dir_mode;
	int keep_cache;
	int no_passthrough;
	int allow_link_local;
	int foreground;
	int debug;
	int show_help;
	int show_version;
	/* "dev" or "suid" was asked for (mount.fuse3 passes both for root): dropped, and
	 * said once logging is set up. */
	bool asked_dev;
	bool asked_suid;
};

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
	/* The most cache misses any reader was shown (metrics.c): never shown fewer after. */
	atomic_uint_fast64_t misses_shown;
};

/*
 * The mount's counters, in a memfd the supervisor holds and passes to each serving process
 * (DAEMON_RUN_FD_COUNTERS), so that they go on from where a dead or replaced process left them
 * instead of restarting at 0 (doc/survive.md). Atomics only: a process killed mid-update
 * leaves nothing half-done. Another build's block (its layout differs) is never read.
 */
struct daemon_shared_counters {
	uint64_t magic;
	uint64_t layout;    /* the format and this structure's size */
	int64_t mounted_at; /* time() when the first serving process made it: the mount's start */
	struct engine_stats engine;
	struct fs_counters fs;
	struct prefetch_walk_counters prefetch_walk;
};
/* A new block, zeroed, in a memfd (*fd, CLOEXEC). 0 or -errno. */
int daemon_shared_counters_create(int *fd, struct daemon_shared_counters **out);
/* Maps the block on fd; -EPROTO when another build laid it out. Gauges in it (what a dead
 * process had queued) are zeroed. 0 or -errno. */
int daemon_shared_counters_map(int fd, struct daemon_shared_counters **out);
void daemon_shared_counters_unmap(struct daemon_shared_counters *c);
/* Points s->counters at the shared block, or at s's own when there is none. */
struct fs_session;
void daemon_counters_settle(struct fs_session *s);

/*
 * What fs/ keeps of one object (a flight) while handles of it are open: how the kernel
 * reads them (passthrough.c). In fs_session.objects, by the flight's id, from the first
 * open to the last release; guarded, like the table, by fs_session.passthrough_lock. fs/'s
 * own (fetch/ never sees it), and all of it in this one structure, so that a process taking
 * over the mount (DESIGN.md, promise 6) has one thing to rebuild.
 */
struct fs_object { /* every field guarded by fs_session.passthrough_lock */
	uint64_t flight_id;
	int pt_backing_id;   /* the spool registered as a passthrough backing file, 0 = none */
	unsigned pt_handles; /* handles the kernel reads from the spool itself */
	unsigned pt_cached_handles; /* handles read through FUSE's page cache */
	struct fs_object *next;     /* in its bucket of fs_session.objects */
};
#define FS_OBJECT_BUCKETS 256

/* An open file: an object's flight, or a snapshot of a virtual file. */
struct fs_handle {
	struct flight *flight; /* a reference; NULL for a virtual file */
	/* A pack member's handle reads its pack's flight through this view (member.c); both
	 * fixed at open. */
	bool is_member;
	struct fetch_member member;
	atomic_bool member_verified; /* this handle saw the member's bytes match */
	/* Its flight's entry in fs_session.objects, set by fs_passthrough_open; guarded by
	 * passthrough_lock. NULL for a virtual file, or once released. */
	struct fs_object *object;
	char *text; /* virtual file content */
	size_t len;
	/*
	 * The kernel sends release only after every read of the file was answered, but a
	 * sanitizer cannot see that ordering: reads release-increment this once they are done
	 * with the handle, and release acquire-loads it before freeing, which states it.
	 */
	atomic_uint reads_done;
	uint64_t opened_ns;           /* util_monotonic_ns() at the open, for first_byte */
	atomic_bool first_read_taken; /* a read of it has claimed the first_byte observation */
	bool passthrough; /* the kernel reads the spool itself; guarded by passthrough_lock */
	/* Its fh (handles.c), set by fs_handle_track or fs_handle_adopt and fixed after. */
	uint64_t id;
	uint64_t ino;    /* the inode it opens; fixed at open */
	uint64_t parent; /* its directory, as fetch_object_open read it: for walk prefetch */
	/* A passthrough open of an inode an earlier serving process left open passthrough:
	 * the kernel's backing id is that process's (fs_passthrough_inherited). No flight. */
	bool inherited_passthrough;
	/* In fs_session.open_handles and by_id; guarded by fs_session.handles_lock. */
	struct fs_handle *prev;
	struct fs_handle *next;
	struct fs_handle *id_next;
	/* This handle's sequential run (page_drop.c); guarded by passthrough_lock. */
	uint64_t run_start;  /* where the run began */
	uint64_t run_end;    /* the furthest read request's end in it */
	uint64_t dropped_to; /* the kernel's cached pages of the run below it are dropped */
};

/* Buckets of the open-handle table (handles.c). */
#define FS_HANDLE_BUCKETS 1024

/* --mirror options: with the manifest's own URL, a flight's FLIGHT_MAX_URLS. */
#define DAEMON_MAX_MIRRORS (FLIGHT_MAX_URLS - 1u)

/* Pending background (readahead) requests the kernel may send: see fs_init. */
#define FS_MAX_BACKGROUND 1024
/* FUSE worker threads at most: see run_session. */
#define FS_MAX_WORKERS 256

/* A file the daemon writes later by a path a user gave: its directory, held as a descriptor
 * (util/trusted_path.h), and its name in it; dir_fd -1 and name NULL when there is none. */
struct daemon_output {
	int dir_fd;
	char *name;
};

struct fs_session {
	struct daemon_options opts;
	/* The mountpoint's canonical path (set before mounting), and whether its readahead has
	 * been raised: done at the first open, once the kernel has applied FUSE's INIT reply,
	 * which would undo it (see readahead.c). */
	char *mount_path;
	/* Its "major:minor" in mountinfo, read right after mounting ("" when unknown); written
	 * before the loop starts and only read after, so no lock. */
	char mount_dev[32];
	atomic_bool readahead_tuned;
	struct s3_source *s3; /* a bucket's (listed, or holding --manifest KEY), else NULL */
	char *manifest_dir;   /* the manifest's URL up to its last '/': what mirrors replace */
	/* A manifest's nested manifests (listing.c): fetched as the manifest was and loaded
	 * with its rules; the root manifest's URL, which their URLs resolve against. Set before
	 * the mount exists, read-only after. */
	char *manifest_url;
	struct source_options nested_src;
	struct manifest_load_options nested_rules;
	/* Per --mirror, opened at start-up: a file: mirror's directory (O_PATH), whose objects
	 * are opened beneath it (fetch/http/beneath.h), else -1. NULL with no mirrors. */
	int *mirror_dir_fds;
	/* Lazy listing: the directories being listed now (listing.c); its own lock. */
	struct listing_flights *listings;
	/* Nested manifests listed ahead of a walk (listing.c): the worker that lists them, NULL
	 * until started; the directory listed ahead that a walk has not entered yet (0: none);
	 * and whether the worker should list no more (the session is ending). */
	struct util_worker *list_ahead;
	atomic_uint_fast64_t listed_ahead_dir;
	atomic_bool list_ahead_stopping;
	struct index *idx; /* the namespace: its own lock (index.h) */
	/* Which object an inode is, and its flight (fetch/engine/object.h): its own lock.
	 * Made with the engine, destroyed after it. */
	struct fetch_objects *resolver;
	struct index_records *records; /* the cache directory's: its own lock (records.h) */
	struct flight_table *flights;
	struct engine *engine;
	struct fuse_session *se;
	struct cache_dir *cache;  /* the cache directory in use (fetch/cache/cache_dir.h) */
	bool was_mounted;         /* main thread only: the mount came up (cleanup may run) */
	uint64_t cache_max_size;  /* bytes; 0 = unbounded */
	size_t max_manifest_size; /* bytes; 0 = the default (source.h) */
	uid_t uid;
	gid_t gid;
	double timeout_s; /* kernel entry/attr cache: the session is a snapshot */
	/* Invalidations after failed flights (reply.c): set before the FUSE loop starts and
	 * cleared after the engine and the hasher stopped, like the replier. */
	struct util_worker *invalidator;
	atomic_int inval_jobs; /* its jobs queued or running, at most FS_INVAL_PENDING_MAX */
	/* Replies to parked reads whose bytes arrived, so the thread that published them (the
	 * transfer thread) goes back to receiving at once. Set before the FUSE loop starts and
	 * cleared after the engine stopped: no thread can be queueing to it then. */
	struct util_worker *replier;
	/* Opens that waited for a hash list (hash_list.c) finish here, so the thread that
	 * verified it goes back to its work at once. Set and cleared like the replier. */
	struct util_worker *opener;
	/* &shared_counters->fs, which the mount's serving processes count on one after
	 * another, or own_counters when there is no such block (shared_counters.c). */
	struct fs_counters *counters;
	struct fs_counters own_counters;
	struct daemon_shared_counters *shared_counters;
	int shared_counters_fd; /* the first process's, until the supervisor has it; else -1 */
	time_t started;         /* this process's start: the mount's when there is no such block */
	/* The length of each /.spoolfs file's latest snapshot (stats, flights), which stat
	 * shows (virtual.c): any FUSE thread stores or loads it. */
	atomic_uint_fast64_t virtual_len[2];
	/* Kernel passthrough (passthrough.c): what INIT settled, an enum fs_passthrough. */
	atomic_int passthrough;
	uint64_t init_unique; /* INIT's request id, set before passthrough leaves UNKNOWN */
	/* The INIT exchange (handover.c): the request as read (or replayed) and, in a later
	 * serving process, the reply the first one sent. Written before other requests are
	 * read (see handover.c), read-only after. */
	void *init_req;
	size_t init_req_len;
	void *init_reply;
	size_t init_reply_len;
	bool init_resend;      /* the kernel offered FUSE_HAS_RESEND */
	atomic_bool init_seen; /* the first process read INIT and has not replied yet */
	atomic_int replay;     /* handover.c's enum replay */
	pthread_mutex_t handover_lock;
	pthread_cond_t handover_cond; /* replay reached REPLAY_DONE; with handover_lock */
	/* The mount's private run directory (doc/survive.md): the namespace database and the
	 * INIT record; -1 and NULL when there is none. ctl_fd: the pipe to the supervisor. */
	int run_dir_fd;
	int progress_dirfd; /* the run directory's progress/ (with --cache-dir), or -1 */
	char *run_dir;
	int ctl_fd;
	/* The run directory's lock, held by every process of the mount (run_dir.c), or -1. */
	int run_lock_fd;
	/* Per inode, the passthrough backing id the kernel holds and how many passthrough files
	 * of it are open, for this and the serving processes after it (util/ledger.h); NULL
	 * without a run directory. Its own lock. */
	struct util_ledger *ledger;
	/* Guards objects, their fields and the handles' passthrough and run_* fields. */
	pthread_mutex_t passthrough_lock;
	struct fs_object
	    *objects[FS_OBJECT_BUCKETS]; /* by flight id; guarded by passthrough_lock */
	struct util_worker *dropper;     /* page_drop.c; NULL with --no-passthrough */
	struct daemon_metrics *metrics;  /* metrics.c's writer; NULL without --metrics-file */
	/* Where --metrics-file and --record-reads are written: their directories, resolved and
	 * held at start (daemon_output_open), written only through these. Set before any
	 * thread starts; read-only afterwards. */
	struct daemon_output metrics_out;
	struct daemon_output reads_out;
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
	/* Handles the kernel has not released: a release still queued when the loop ends is
	 * never read, so the session frees what is left (fs_handles_free_all). */
	pthread_mutex_t handles_lock;
	struct fs_handle *open_handles;             /* guarded by handles_lock */
	struct fs_handle *by_id[FS_HANDLE_BUCKETS]; /* by fh; guarded by handles_lock */
	atomic_uint_least64_t handle_serial;        /* the last fh serial given (handles.c) */
	/* This serving process's place in the mount's line of them (doc/survive.md): 0 for
	 * the first, one more per restart or reload. Fixed before the loop. */
	uint64_t generation;
};

enum fs_passthrough {
	FS_PASSTHROUGH_UNKNOWN, /* INIT not read yet */
	FS_PASSTHROUGH_OFFERED, /* the kernel offers it; the INIT reply will ask for it */
	FS_PASSTHROUGH_ON,      /* asked for; the first backing open confirms it */
	FS_PASSTHROUGH_OFF,
};

/* Makes the mount's run directory (s->run_dir, run_dir_fd, run_lock_fd), first removing
 * those that mounts killed whole left behind; 0 or -errno, said on stderr. */
int daemon_run_dir_make(struct fs_session *s);
/* A serving process's run directory lock, passed on fd; ignored when fd is not one. */
void daemon_run_dir_adopt_lock(struct fs_session *s, int fd);
/* Lets go of the run directory, removing it first when no supervisor took it over (the
 * mount failed, or ran without one). */
void daemon_run_dir_close(struct fs_session *s);

/*
 * Routes the session's device I/O through handover.c's hooks; call right after
 * fuse_session_mount. With --no-passthrough it also records that passthrough is off.
 * 0 or -errno.
 */
int fs_passthrough_install(struct fs_session *s);
/* INIT as the kernel sent it: whether it offers passthrough. */
void fs_passthrough_note_init(struct fs_session *s, const void *req, size_t n);
/* INIT's reply on its way out: asks for passthrough when offered. */
struct iovec;
void fs_passthrough_amend_init(struct fs_session *s, struct iovec *iov, int count);

/* The device hooks (handover.c). */
int fs_handover_install(struct fs_session *s);
/* A later serving process: loads the first one's INIT exchange from the run directory, to
 * be replayed at its first read. 0, -ENOENT (the kernel will resend INIT itself), -errno. */
int fs_handover_load(struct fs_session *s);
/* Asks the kernel to send again what the dead process had read (when INIT offered it);
 * before the loop reads anything. 0 or -errno. */
int fs_handover_resend(struct fs_session *s);

/*
 * Decides how a new handle of an object opens, counting it in the object's entry (h->object):
 * returns the backing id to send with fs_passthrough_reply_open, 0 for a plain open
 * (fuse_reply_open), or -ENOMEM (nothing counted). After 0 or an id,
 * fs_passthrough_release must follow, also when the reply fails.
 */
int fs_passthrough_open(struct fs_session *s, struct fs_handle *h);
/* True when h was the last handle of a complete (verified) object open through the page
 * cache: then fs_page_drop_released. */
bool fs_passthrough_release(struct fs_session *s, struct fs_handle *h);
/*
 * A later serving process's open h of h->ino (h->passthrough set, h->id chosen): when files
 * of ino that an earlier process opened passthrough are still open, the kernel lets this
 * open be passthrough only, with their backing id: returns it (> 0, h recorded in the
 * ledger), else 0. The release of such a file, or of any file this process does not know
 * (an earlier process's): fs_passthrough_inherited_release with its fh (the ledger forgets
 * it; the backing id goes with the last file that names it).
 */
int fs_passthrough_inherited(struct fs_session *s, struct fs_handle *h);
void fs_passthrough_inherited_release(struct fs_session *s, uint64_t fh);
/* A later serving process: whether the INIT the kernel answered (the recorded reply) asked
 * for passthrough, and the ledger knows every file the kernel holds: new opens may then use
 * it. */
void fs_passthrough_note_replayed_init(struct fs_session *s);

/* Counts a handle rebuilt for an earlier serving process's open (ops.c) as one through
 * the page cache, which it is. 0 or -ENOMEM. */
int fs_passthrough_adopt(struct fs_session *s, struct fs_handle *h);
/* For a handle the kernel never released (the loop ended first): uncounts it, with no call
 * to the kernel. A no-op once released. */
void fs_passthrough_forget(struct fs_session *s, struct fs_handle *h);
/* The entry of the flight with this id, or NULL when no handle of it is open. Caller holds
 * passthrough_lock. */
struct fs_object *fs_object_find_locked(struct fs_session *s, uint64_t flight_id);

/*
 * For a flight just created: when the cache directory holds the object complete (another
 * mount's download, or a --keep-cache remount), waits a moment for the transfer thread to
 * take it up, so that even the first open of it is passthrough.
 */
void fs_passthrough_settle(struct fs_session *s, struct flight *f);

/* Starts and stops page_drop.c's worker (not with --no-passthrough). 0 or -errno. */
int fs_page_drop_start(struct fs_session *s);
void fs_page_drop_stop(struct fs_session *s);

/*
 * The last handle of complete object f open through the page cache was released (as
 * fs_passthrough_release said): the next open passes through, and the kernel would drop
 * the object's pages then, on that open. Drops them now instead.
 */
void fs_page_drop_released(struct fs_session *s, struct flight *f, fuse_ino_t ino);

/* A read request of h for [off, off+len) reached the daemon: drops what h left far behind. */
void fs_page_drop_note_read(struct fs_session *s, struct fs_handle *h, fuse_ino_t ino, uint64_t off,
                            uint64_t len);

/* fuse_reply_open for a passthrough open: libfuse 3.14 cannot send a backing id. */
int fs_passthrough_reply_open(fuse_req_t req, const struct fuse_file_info *fi, int backing_id);

/*
 * Prefetch (prefetch.c). fs_prefetch_open, before daemonising: checks the options, opens
 * the list (--prefetch-list, else a record kept in the cache directory). fs_prefetch_start,
 * once the engine runs: starts the thread. fs_prefetch_stop, after the loop and before the
 * engine stops: stops it and writes the records of what was opened. 0 or -errno (said).
 */
int fs_prefetch_open(struct fs_session *s);
int fs_prefetch_start(struct fs_session *s);
void fs_prefetch_stop(struct fs_session *s);
void fs_prefetch_free(struct fs_session *s);
/*
 * The manifest's read order (read_order.c). fs_read_order_keep, after the root manifest is
 * loaded: logs why none was taken, and keeps the one taken (load_opts->read_order, freed)
 * in the index for every serving process. fs_read_order_open: the kept order as a
 * prefetch list, *fd (-1: none), its name in s->read_order_name and _label. 0 or -errno.
 */
struct manifest_load_options;
int fs_read_order_keep(struct fs_session *s, struct manifest_load_options *load_opts);
int fs_read_order_open(struct fs_session *s, int *fd);
/* An open of file ino in directory parent (not a virtual file). */
void fs_prefetch_note_open(struct fs_session *s, fuse_ino_t ino, uint64_t parent);

/* --log-level NAME (or -d) for util_log. */
void daemon_set_log_level(const char *name, bool debug);

/* Parses argv. Returns 0, or -EINVAL after printing why. args keeps what FUSE must see. */
int daemon_options_parse(struct fuse_args *args, struct daemon_options *opts);
void daemon_options_usage(const char *prog);
/* Makes every relative file option (--log-file, --cache-dir, ...) absolute against cwd,
 * the directory the mount was started from: the supervisor and each serving process run
 * from "/" and open them later (a restart, a log reopened at SIGUSR1). 0 or -ENOMEM. */
int daemon_options_resolve(struct daemon_options *opts, const char *cwd);
void daemon_options_free(struct daemon_options *opts);

/*
 * Overwrites in place, with '*', the secrets in the process's own command line: the
 * userinfo and query of every URL, and the userinfo of a scheme-less --proxy/-o proxy=.
 * /proc/PID/cmdline (what `ps` shows every local user) reads this memory, so after this
 * only the lengths show. Call it once the arguments have been copied (daemon_options_parse
 * does). True when something was hidden.
 */
bool daemon_argv_scrub(int argc, char *argv[]);

extern const struct fuse_lowlevel_ops fs_ops;

/* `spoolfs status MOUNTPOINT [--watch]`; returns the exit status. */
int daemon_status_main(int argc, char **argv);

/*
 * Makes sure directory `dir` is listed (S3 sources list on first use); a no-op for
 * manifests. Concurrent callers for one directory wait for a single listing. 0 or -errno.
 */
int fs_ensure_listed(struct fs_session *s, fuse_ino_t dir);
/* The worker that lists nested manifests ahead of a walk (listing.c): started with the
 * other threads, stopped before the index closes. 0 or -errno. */
int fs_list_ahead_start(struct fs_session *s);
void fs_list_ahead_stop(struct fs_session *s);

/* Gives a new handle its fh (returned; h->passthrough decided before) and links it into
 * the session's tables; fs_handle_free unlinks and frees it (its flight reference or its
 * snapshot). */
/* h's fh, chosen now if it has none yet (fs_handle_track keeps it): the passthrough
 * ledger records an open by its fh before the reply. */
uint64_t fs_handle_assign_id(struct fs_session *s, struct fs_handle *h);
uint64_t fs_handle_track(struct fs_session *s, struct fs_handle *h);
void fs_handle_free(struct fs_session *s, struct fs_handle *h);
/* The handle with fh, or NULL: none of this process's (an earlier serving process opened
 * it, or it was released). The kernel sends RELEASE only after every other request of the
 * file was answered, so the handle stays valid for the request that found it. */
struct fs_handle *fs_handle_find(struct fs_session *s, uint64_t fh);
/* Links h, rebuilt for an earlier process's fh, under that fh; when another thread adopted
 * one first, frees h and returns that one. Counts the handles linked (handles_adopted). */
struct fs_handle *fs_handle_adopt(struct fs_session *s, struct fs_handle *h, uint64_t fh);
/* Bit 63 of an fh: a passthrough open (the kernel reads it itself; only RELEASE comes). */
#define FS_FH_PASSTHROUGH (1ULL << 63)
/* After the FUSE loop and every thread that reads handles have stopped. */
void fs_handles_free_all(struct fs_session *s);

/* Replies to a read from the spool: [off, off+len) must be readable. */
void fs_reply_spool(fuse_req_t req, struct flight *f, uint64_t off, uint64_t len);

/* Reads that are not local yet: parks them on the flight (see reply.c). Replies always. */
/*
 * Opening an object (ops.c): fs_open_object is fetch_object_open (which decides which
 * object, and joins its flight) for the new handle h, which keeps the member's view and the
 * file's directory; *f gets the reference. fs_open_finish holds the flight's spool for h and
 * replies to the open (takes h and the reference f). FETCH_OBJECT_HASH_LIST: a new flight of a
 * chunked object needs its hash list first (fs_open_after_hash_list). With read, h is rebuilt for a
 * read of an earlier serving process's fh (fi->fh; doc/survive.md) instead: linked under that fh,
 * and the read is answered, not an open.
 */
int fs_open_object(struct fs_session *s, fuse_ino_t ino, const unsigned char *digests,
                   struct fs_handle *h, struct flight **f, bool *created);
struct fs_adopting_read {
	off_t off;
	size_t size;
};
void fs_open_finish(fuse_req_t req, struct fs_session *s, fuse_ino_t ino, struct fuse_file_info *fi,
                    struct fs_handle *h, struct flight *f, bool created,
                    const unsigned char *digests, const struct fs_adopting_read *read);
/*
 * hash_list.c: the first open of an object with chunk hashes fetches its hash list (a flight
 * of its own, keyed by its sha256 and verified whole, which every opener joins), then joins
 * the object's flight with its digests and replies; a hash list that cannot be fetched or
 * does not match fails the open with EIO. Replies always, maybe later, from the opener
 * thread. Takes h. With read (copied), the read of an earlier process's fh that rebuilds h
 * is answered instead (fs_open_finish).
 */
void fs_open_after_hash_list(fuse_req_t req, struct fs_session *s, fuse_ino_t ino,
                             const struct fuse_file_info *fi, struct fs_handle *h,
                             const struct fs_adopting_read *read);
int fs_opener_start(struct fs_session *s);
void fs_opener_stop(struct fs_session *s);

/* Starts and stops the replier thread; stopping answers what is queued first. 0 or -errno. */
int fs_replier_start(struct fs_session *s);
void fs_replier_stop(struct fs_session *s);

/* Parks a read of [off, off+len) of f. With a member (NULL otherwise), off is within the
 * member: the wait is for the member's whole range, which is verified before the reply.
 * opened_ns: the open's time when this is its first read (fs_counters.first_byte), else 0. */
void fs_read_wait(fuse_req_t req, struct fs_session *s, struct flight *f, uint64_t off,
                  uint64_t len, const struct fetch_member *member, uint64_t opened_ns);

/*
 * fetch_member_verify, counted (member_hash_failures): 0, or -EIO (after failing the pack's
 * flight when the bytes do not match: every reader of it gets -EIO, and the next open
 * fetches the pack again).
 */
int fs_member_verify(struct fs_session *s, struct flight *f, const struct fetch_member *m);

/* The open's time, for the first read of handle h (fs_counters.first_byte); 0 for the
 * others. Call before the handle's reads_done goes up. */
uint64_t fs_handle_first_read_ns(struct fs_handle *h);

/*
 * Answers a read whose range is ready (1: from the spool), failed (-errno) or not there
 * yet (0: parked). With a member, off is within it (the reply is at member->base + off,
 * and a parked read waits for, and verifies, the whole member).
 */
void fs_answer_read(fuse_req_t req, struct fs_session *s, struct flight *f, int ready, uint64_t off,
                    uint64_t len, const struct fetch_member *member, uint64_t opened_ns);

/* Reads [off, off+len) of member h (off within the member): verified, from the spool, or
 * parked. Replies always. */
void fs_member_read(fuse_req_t req, struct fs_session *s, struct fs_handle *h, uint64_t off,
                    size_t size);

/* Invalidates the kernel's cached pages of a failed object; the engine's on_failed hook.
 * Only queues the invalidation, for fs_inval_start's worker. */
void fs_on_flight_failed(void *ctx, struct flight *f);
int fs_inval_start(struct fs_session *s);
/* Joins the worker once the FUSE loop ended and nothing can fail a flight any more. */
void fs_inval_stop(struct fs_session *s);

/*
 * Raises the kernel's readahead for the FUSE mount at mountpoint (an absolute, canonical
 * path, mounted by this process) to the largest read request libfuse can still splice.
 * 0, or -errno (it needs root; the default then stays).
 */
int fs_raise_readahead(const char *mountpoint);

/* fs_raise_readahead for the session's mount, the first time it is called. */
void fs_tune_readahead_once(struct fs_session *s);

/*
 * The "major:minor" of the topmost mount at mountpoint, an absolute canonical path, from
 * /proc/self/mountinfo. 0, or -ENOENT when nothing is mounted there, or -errno.
 */
int daemon_mount_device(const char *mountpoint, char *dev, size_t len);

/* daemon_mount_device on a table in mountinfo's format; the caller owns table. */
int daemon_mount_device_in(FILE *table, const char *mountpoint, char *dev, size_t len);

/* daemon_mount_device that also gives the topmost mount's filesystem type ("fuse.spoolfs",
 * "tmpfs") in fstype when it is not NULL; and the same on a table. */
int daemon_mount_top(const char *mountpoint, char *dev, size_t len, char *fstype,
                     size_t fstype_len);
int daemon_mount_top_in(FILE *table, const char *mountpoint, char *dev, size_t len, char *fstype,
                        size_t fstype_len);

/* The topmost mount at a path, as the mount table says. */
struct daemon_mount_top {
	unsigned long id; /* the mount ID, as /proc/PID/fdinfo's mnt_id: names */
	long user_id;     /* a FUSE mount's user_id= (its daemon's uid); -1 without one */
	char dev[32];
	char fstype[64];
};

/* daemon_mount_top_in giving the whole daemon_mount_top. */
int daemon_mount_top_info_in(FILE *table, const char *mountpoint, struct daemon_mount_top *top);

/* daemon_mount_top_info_in on this process's table (/proc/self/mountinfo). */
int daemon_mount_top_info(const char *mountpoint, struct daemon_mount_top *top);

/* The mount ID of the mount fd is on (/proc/self/fdinfo's mnt_id:, kernel 3.15), or -errno. */
long daemon_fd_mount_id(int fd);

/*
 * Before mounting on mountpoint (as given): refuses (-EBUSY, with a message) when a live
 * FUSE mount is on top there already, and lazily unmounts a dead one (its daemon gone, so
 * every access fails with ENOTCONN) made by this euid, saying so; another user's dead one
 * is refused (-EPERM), and one whose daemon does not answer within seconds (-ETIMEDOUT).
 * 0 when the mount may go ahead. Starts and joins a thread (but not after -ETIMEDOUT).
 */
int daemon_mountpoint_prepare(const char *mountpoint);

/* Whether the topmost mount at the mountpoint is still this session's (daemon/abort.c). */
bool daemon_mount_still_ours(const struct fs_session *s);

/* Whether the kernel has ended the connection (unmounted, or aborted). */
bool daemon_connection_gone(const struct fs_session *s);

/* Once the FUSE loop has ended: fails every request still pending in the kernel and
 * detaches the mount (daemon/abort.c). Needs root; 0 without doing anything when it cannot
 * apply (not root, unmounted already, another mount on top), or -errno. */
int daemon_abort_connection(struct fs_session *s);

#endif

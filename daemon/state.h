/*
 * What the daemon keeps of a mount beside the FUSE session (struct fs_session.daemon): the
 * run directory and the pipe to the supervisor, the counters shared with the other serving
 * processes, the metrics writer, and what start-up opened for the mount's life. Set in
 * main() before the FUSE loop starts and read-only afterwards, except where a field says.
 */
#ifndef SPOOLFS_DAEMON_STATE_H
#define SPOOLFS_DAEMON_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "util/output.h"
#include "daemon/shared_counters.h"
#include "fs/counters.h"

struct daemon_metrics;
struct daemon_overlay;

struct daemon_state {
	bool was_mounted;         /* main thread only: the mount came up (cleanup may run) */
	char *manifest_dir;       /* the manifest's URL up to its last '/': what mirrors replace */
	size_t max_manifest_size; /* bytes; 0 = the default (source.h) */
	/* The release a tag led to ("NAME sha256 HEX tag TAG"; tag_pointer.h), or NULL. */
	char *release;
	/* Per --mirror, opened at start-up: a file: mirror's directory (O_PATH), whose objects
	 * are opened beneath it (fetch/http/beneath.h), else -1. NULL with no mirrors. */
	int *mirror_dir_fds;
	/* The mount's private run directory (doc/survive.md): the namespace database and the
	 * INIT record; -1 and NULL when there is none. ctl_fd: the pipe to the supervisor. */
	int run_dir_fd;
	int progress_dirfd; /* the run directory's progress/ (with --cache-dir), or -1 */
	char *run_dir;
	int ctl_fd;
	/* The run directory's lock, held by every process of the mount (run_dir.c), or -1. */
	int run_lock_fd;
	/* The passthrough ledger's memfd (fs_session.pt.ledger maps it), for the supervisor;
	 * -1 in a later serving process, which maps the supervisor's. */
	int ledger_fd;
	/* The block fs_session.counters points into, which the mount's serving processes count
	 * on one after another, or NULL: then own_counters is counted (shared_counters.c). */
	struct daemon_shared_counters *shared_counters;
	struct fs_counters own_counters;
	int shared_counters_fd; /* the first process's, until the supervisor has it; else -1 */
	time_t started;         /* this process's start: the mount's when there is no such block */
	struct daemon_metrics *metrics; /* metrics.c's writer; NULL without --metrics-file */
	/* Where --metrics-file is written: its directory, resolved and held at start
	 * (util_output_open), written only through it. */
	struct util_output metrics_out;
	/* --writable's overlay (overlay.c); NULL without. */
	struct daemon_overlay *overlay;
};

#endif

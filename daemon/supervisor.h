/*
 * The supervisor and what it hands a serving process (supervisor.c, doc/survive.md).
 */
#ifndef SPOOLFS_DAEMON_SUPERVISOR_H
#define SPOOLFS_DAEMON_SUPERVISOR_H

#include <stdint.h>

/* The strings on fd 4 (util_strings_read), in this order; the command line follows. */
enum daemon_run_string {
	DAEMON_RUN_DIR,        /* the run directory */
	DAEMON_RUN_MOUNT_PATH, /* the mountpoint, canonical */
	DAEMON_RUN_MOUNT_DEV,  /* its mount's "major:minor" ("" when unknown) */
	DAEMON_RUN_CWD,        /* where spoolfs was started (relative options) */
	DAEMON_RUN_ARGV,       /* argv[0] of the command line, then the rest */
};

/* Descriptors a serving process and the supervisor get: the device, the strings, the
 * pipe to the supervisor (its write end in a serving process, read end in the supervisor),
 * and the supervisor's running binary. */
#define DAEMON_RUN_FD_DEV 3
#define DAEMON_RUN_FD_STRINGS 4
#define DAEMON_RUN_FD_CTL 5
#define DAEMON_RUN_FD_EXE 6
#define DAEMON_RUN_FD_LEDGER 7   /* the passthrough ledger (util/ledger.h) */
#define DAEMON_RUN_FD_LOCK 8     /* the run directory's lock, held while any process lives */
#define DAEMON_RUN_FD_COUNTERS 9 /* the mount's counters (struct daemon_shared_counters) */
#define DAEMON_RUN_FD_COUNT (DAEMON_RUN_FD_COUNTERS - DAEMON_RUN_FD_DEV + 1)
/* --writable: DIR's lock (daemon/overlay.c), a descriptor at or above this one that the
 * first process passes through its exec of the supervisor; nobody reads it, the supervisor
 * holds it (and the lock) until the mount ends. */
#define DAEMON_OVERLAY_LOCK_FD_MIN 64

/* What the supervisor says of itself (its file "supervisor" in the run directory). */
struct fs_session;
struct daemon_supervision {
	uint64_t supervisor_pid; /* 0: no supervisor */
	uint64_t restarts;
	uint64_t reloads;
	uint64_t reloads_failed; /* refused, or rolled back to the running binary */
};
void daemon_supervision_read(const struct fs_session *s, struct daemon_supervision *out);

/* `spoolfs reload MOUNTPOINT`: asks the mount's supervisor for a new serving process of
 * the binary on disk (SIGUSR2). Returns the exit status. */
int daemon_reload_main(int argc, char **argv);

/* The signals the supervisor takes on its signalfd (blocked from before its exec). */
#include <signal.h>
void daemon_supervisor_signals(sigset_t *set);

/* `spoolfs __supervise CHILD_PID`, exec'd by the mount once the mount is up. */
int daemon_supervisor_main(int argc, char **argv);

#endif

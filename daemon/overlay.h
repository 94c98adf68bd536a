/*
 * --writable DIR: an overlay on the mount (overlay.c, doc/writable.md).
 */
#ifndef SPOOLFS_DAEMON_OVERLAY_H
#define SPOOLFS_DAEMON_OVERLAY_H

#include <stddef.h>

struct fs_session;

/*
 * Before the mount, with --writable (a no-op without): the first process checks DIR (a
 * trusted directory, util/trusted_path.h), makes DIR/upper and DIR/work, and moves the
 * spoolfs mount to the run directory's "lower"; the user's mountpoint is the overlay's.
 * A later serving process finds its overlay's path in the run directory. 0 or -errno,
 * said on stderr.
 */
int daemon_overlay_prepare(struct fs_session *s);
void daemon_overlay_free(struct fs_session *s);

/* The overlay's path (the mountpoint the user named); NULL without --writable, or in a
 * later serving process when the overlay never came up. */
const char *daemon_overlay_path(const struct fs_session *s);

/*
 * The first process, once mounted and before it serves: a process of its own that waits
 * until the mount answers, mounts the overlay (overlayfs as root, fuse-overlayfs else) and
 * records the overlay's mount ID in the run directory. In the foreground that process is
 * a child and this one goes on; else this one is the one that waits, and the caller's
 * process (the child) goes on to daemonise: the command returns once the overlay is up,
 * with its status. Returns 0 in the process that serves, -errno when it cannot fork.
 */
int daemon_overlay_start_mounter(struct fs_session *s);

/* Each serving process: a thread that watches the mount table and stops the mount
 * (SIGTERM to this process, a clean stop) once the overlay is unmounted. 0 or -errno. */
int daemon_overlay_watch_start(struct fs_session *s);
void daemon_overlay_watch_stop(struct fs_session *s);

/* At stop, before the spoolfs mount goes: the overlay goes first (a lazy unmount), when
 * it is still there (a stop by a signal, not by the overlay's unmount). */
void daemon_overlay_unmount(struct fs_session *s);
/* The same from the run directory alone (the supervisor, when it ends the mount itself);
 * a no-op without a recorded overlay that is still mounted. */
void daemon_overlay_unmount_recorded(int run_dir_fd);
/* For a run directory whose every process is gone (run_dir.c's sweep holds its lock): a
 * SIGKILLed supervisor leaves its overlay over a lower that answers ENOTCONN. The recorded
 * overlay (only while it is the top mount at its path), then run_dir/lower, lazily
 * unmounted, each said in the log. run_dir is canonical. */
void daemon_overlay_unmount_dead(int run_dir_fd, const char *run_dir);

/*
 * `spoolfs status` and `reload` given the overlay's path: when the topmost mount at
 * canonical (a canonical path) is an overlay that a spoolfs mount recorded as its own,
 * that mount's path in lower. 0; -ENOENT when canonical is no such overlay; -errno.
 */
int daemon_overlay_beneath(const char *canonical, char *lower, size_t len);

#endif

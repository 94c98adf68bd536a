/*
 * --writable DIR: builds that write into the tree (doc/writable.md).
 *
 * The spoolfs mount goes to a private place, the run directory's "lower" (0700, the
 * mount's user's), and the mountpoint the user named is an overlay of it whose upper and
 * work directories are DIR/upper and DIR/work: the kernel's overlayfs as root,
 * fuse-overlayfs (a second FUSE hop) otherwise or where the kernel refuses. Reads of
 * untouched files go to spoolfs; a write copies its file up into DIR/upper whole.
 *
 * The two mounts live and die together:
 *  - the overlay is mounted by a process of its own once the spoolfs mount answers (a
 *    mount of the overlay before that would wait for a daemon not serving yet), and its
 *    mount ID is recorded in the run directory's "overlay" (the ID, then the path);
 *  - every serving process watches the mount table (poll on /proc/self/mountinfo): once the
 *    recorded mount is gone (`umount MNT`, `fusermount3 -u MNT`), it stops the mount as a
 *    SIGTERM does, so the record of --record-reads is written and the supervisor exits;
 *    the supervisor holds the FUSE device, so a serving process's death or a reload never
 *    touches the overlay, and a process started after the overlay went finds it gone;
 *  - a stop by a signal takes the overlay down first (lazily), then the spoolfs mount;
 *  - a SIGKILL of every process of the mount leaves the overlay over a dead lower: the next
 *    start's sweep of run directories (run_dir.c) takes both down (daemon_overlay_unmount_dead).
 * `spoolfs status` and `reload` given the overlay's path find the spoolfs mount beneath
 * through the record (daemon_overlay_beneath).
 *
 * Lock: struct daemon_overlay is written by the main thread before the watcher starts and
 * after it is joined; the watcher only reads it.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/mountinfo.h"
#include "daemon/overlay.h"
#include "daemon/supervisor.h"
#include "fs/session.h"
#include "util/log.h"
#include "util/thread.h"
#include "util/trusted_path.h"

#define RECORD_NAME "overlay"

struct daemon_overlay {
	char *path;  /* the user's mountpoint, canonical: the overlay's; NULL when unknown */
	char *dir;   /* DIR, canonical (the first process only) */
	char *lower; /* the spoolfs mount, RUN_DIR/lower */
	/* The first process: the mountpoint's directory, held from start-up so that the overlay
	 * is mounted on it (/proc/self/fd/N) and on nothing a path swapped in later names; and
	 * DIR/.spoolfs.lock, flocked for the mount's life (two overlays on one upper corrupt
	 * it). -1 when not held. */
	int mnt_fd;
	int lock_fd;
	pthread_t watcher;
	bool watching;
	int stop[2]; /* the watcher's wake-up: a byte on stop[1] ends it */
};

/* The recorded overlay's mount ID (> 0; 0 while it is being mounted), and its path when
 * path is not NULL (malloc'd). -ENOENT before the mount began; -errno. */
static long record_read(int dir_fd, char **path)
{
	char text[PATH_MAX + 32], *nl;
	long id;
	ssize_t n;
	int fd = openat(dir_fd, RECORD_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	n = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (n <= 0)
		return -EIO;
	text[n] = '\0';
	id = strtol(text, &nl, 10);
	if (id < 0 || *nl != '\n')
		return -EIO;
	if (path) {
		char *end = strchr(nl + 1, '\n');
		*path = end ? strndup(nl + 1, (size_t)(end - nl - 1)) : NULL;
		if (!*path)
			return -EIO;
	}
	return id;
}

static int record_write(int dir_fd, long id, const char *path)
{
	int fd = openat(dir_fd, RECORD_NAME ".new",
	                O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	int rc = 0;

	if (fd < 0)
		return -errno;
	if (dprintf(fd, "%ld\n%s\n", id, path) < 0)
		rc = -EIO;
	close(fd);
	/* Whole or not at all: a watcher reads it at any moment. */
	if (rc == 0 && renameat(dir_fd, RECORD_NAME ".new", dir_fd, RECORD_NAME) != 0)
		rc = -errno;
	return rc;
}

static int has_id(const struct daemon_mount_line *m, void *ctx)
{
	return m->id == *(const unsigned long *)ctx;
}

/* 1 when the mount ID is in this process's table, 0 when not, -errno. */
static int id_listed(long id)
{
	unsigned long want = (unsigned long)id;

	return daemon_mount_each(has_id, &want);
}

/* Runs argv (a program from PATH) with no descriptor of ours but stdio and keep_fd (>= 3,
 * or -1): a daemon it leaves behind (fuse-overlayfs) must not hold the FUSE device or the
 * run directory's lock. 0 with its exit status in *status (128 + a signal's number), or
 * -errno: -ENOENT when it is not installed. */
static int run(const char *const argv[], int keep_fd, int *status)
{
	int err[2], exec_errno = 0, wstatus;
	pid_t pid;

	if (pipe2(err, O_CLOEXEC) != 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		close(err[0]);
		close(err[1]);
		return -errno;
	}
	if (pid == 0) {
		int keep[2] = {keep_fd < err[1] ? keep_fd : err[1],
		               keep_fd < err[1] ? err[1] : keep_fd};
		unsigned from = 3;
		int e;

		/* Everything from 3 up but keep_fd and err[1] (closed at the exec). */
		for (int i = 0; i < 2; i++) {
			if (keep[i] < 3)
				continue;
			if ((unsigned)keep[i] > from)
				close_range(from, (unsigned)keep[i] - 1, 0);
			from = (unsigned)keep[i] + 1;
		}
		close_range(from, ~0U, 0);
		if (keep_fd >= 0)
			(void)fcntl(keep_fd, F_SETFD, 0);
		execvp(argv[0], (char *const *)argv);
		e = errno;
		(void)!write(err[1], &e, sizeof(e));
		_exit(127);
	}
	close(err[1]);
	while (read(err[0], &exec_errno, sizeof(exec_errno)) < 0 && errno == EINTR)
		;
	close(err[0]);
	while (waitpid(pid, &wstatus, 0) < 0)
		if (errno != EINTR)
			return -errno;
	if (exec_errno)
		return -exec_errno;
	*status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
	return 0;
}

/* A lazy unmount: a file still open on it keeps it until its close. As root, never
 * through a symbolic link put there since; as a user, fusermount3 unmounts only the
 * user's own mounts. */
static int unmount_lazily(const char *path)
{
	const char *argv[] = {"fusermount3", "-u", "-q", "-z", path, NULL};
	int rc, status;

	if (geteuid() == 0)
		return umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) == 0 ? 0 : -errno;
	rc = run(argv, -1, &status);
	return rc ? rc : status == 0 ? 0 : -EIO;
}

/* The mount types of the overlays this file mounts. */
static bool is_overlay_type(const char *fstype)
{
	return strcmp(fstype, "overlay") == 0 || strcmp(fstype, "fuse.fuse-overlayfs") == 0;
}

/* A name overlayfs' options cannot carry (a comma or colon splits them). */
static bool unusable_in_options(const char *path)
{
	return strpbrk(path, ",:\\\n") != NULL;
}

/*
 * DIR/name, made when missing: a directory of the euid's, or refused (said). owner >= 0:
 * root mounting with --uid makes it that user's (the overlay's root directory is the
 * upper's: without, the user the files show as could create nothing at the top).
 */
static int make_subdir(const struct daemon_overlay *o, int dir_fd, const char *name, mode_t mode,
                       long long owner, long long group)
{
	struct stat st;
	bool made = mkdirat(dir_fd, name, mode) == 0;

	if (!made && errno != EEXIST) {
		fprintf(stderr, "spoolfs: --writable %s: cannot make %s: %s\n", o->dir, name,
		        strerror(errno));
		return -errno;
	}
	if (made && owner >= 0 &&
	    fchownat(dir_fd, name, (uid_t)owner, group >= 0 ? (gid_t)group : (gid_t)-1,
	             AT_SYMLINK_NOFOLLOW) != 0) {
		fprintf(stderr, "spoolfs: --writable %s: cannot give %s to uid %lld: %s\n", o->dir,
		        name, owner, strerror(errno));
		return -errno;
	}
	if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
	    (st.st_uid != geteuid() && (owner < 0 || st.st_uid != (uid_t)owner))) {
		fprintf(stderr, "spoolfs: --writable %s: %s/%s is not a directory of uid %u\n",
		        o->dir, o->dir, name, (unsigned)(owner >= 0 ? owner : geteuid()));
		return -EINVAL;
	}
	return 0;
}

/* Whether one path is the other or beneath it. */
static bool nested(const char *a, const char *b)
{
	size_t n = strlen(a) < strlen(b) ? strlen(a) : strlen(b);

	return strncmp(a, b, n) == 0 && (a[n] == '/' || a[n] == '\0') &&
	       (b[n] == '/' || b[n] == '\0');
}

/* Whether uid may hold the mountpoint (or its parent): root, the euid, or --uid's user when
 * root mounts for them. */
static bool mountpoint_owner(const struct fs_session *s, uid_t uid)
{
	return uid == 0 || uid == geteuid() ||
	       (geteuid() == 0 && s->opts.uid >= 0 && uid == (uid_t)s->opts.uid);
}

/*
 * The mountpoint held (o->mnt_fd) and checked: a directory of the mounting user's (or
 * --uid's), in a directory only they or root can change (or a sticky one). The overlay is
 * mounted seconds later, as root on the user's behalf: what it lands on must be this very
 * directory, never what a symlink put in its place names (/etc/cron.d). 0 or -EINVAL, said.
 */
static int hold_mountpoint(const struct fs_session *s, struct daemon_overlay *o)
{
	char parent[PATH_MAX];
	struct stat st, up;
	int parent_fd;
	char *slash;

	o->mnt_fd = open(o->path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (o->mnt_fd < 0 || fstat(o->mnt_fd, &st) != 0) {
		fprintf(stderr, "spoolfs: --writable: mountpoint %s: %s\n", o->path,
		        strerror(errno));
		return -EINVAL;
	}
	snprintf(parent, sizeof(parent), "%s", o->path);
	slash = strrchr(parent, '/');
	if (slash)
		slash[slash == parent] = '\0';
	parent_fd = open(parent, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (parent_fd < 0 || fstat(parent_fd, &up) != 0) {
		fprintf(stderr, "spoolfs: --writable: mountpoint %s: %s\n", parent,
		        strerror(errno));
		if (parent_fd >= 0)
			close(parent_fd);
		return -EINVAL;
	}
	close(parent_fd);
	if (!mountpoint_owner(s, st.st_uid)) {
		fprintf(stderr,
		        "spoolfs: --writable: refused: the mountpoint %s is uid %u's, not the"
		        " mounting user's\n",
		        o->path, (unsigned)st.st_uid);
		return -EINVAL;
	}
	if (!mountpoint_owner(s, up.st_uid) ||
	    ((up.st_mode & (S_IWGRP | S_IWOTH)) && !(up.st_mode & S_ISVTX))) {
		fprintf(stderr,
		        "spoolfs: --writable: refused: the mountpoint's directory %s can be changed"
		        " by another user\n",
		        parent);
		return -EINVAL;
	}
	return 0;
}

/* DIR/.spoolfs.lock flocked (o->lock_fd) for the mount's life: the kernel refuses a second
 * overlay on one upper, fuse-overlayfs does not. 0, -EBUSY or -errno, said. */
static int lock_dir(struct daemon_overlay *o, int dir_fd)
{
	o->lock_fd =
	    openat(dir_fd, ".spoolfs.lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (o->lock_fd < 0) {
		fprintf(stderr, "spoolfs: --writable %s: cannot make %s/.spoolfs.lock: %s\n",
		        o->dir, o->dir, strerror(errno));
		return -errno;
	}
	if (flock(o->lock_fd, LOCK_EX | LOCK_NB) == 0)
		return 0;
	if (errno == EWOULDBLOCK) {
		fprintf(stderr, "spoolfs: --writable %s: DIR is in use by another mount\n", o->dir);
		return -EBUSY;
	}
	fprintf(stderr, "spoolfs: --writable %s: cannot lock %s/.spoolfs.lock: %s\n", o->dir,
	        o->dir, strerror(errno));
	return -errno;
}

/* The first process: DIR checked and its directories made, the lower mountpoint made. */
static int prepare_first(struct fs_session *s, struct daemon_overlay *o)
{
	char why[PATH_MAX + 256];
	int dir_fd, rc;

	o->path = realpath(s->opts.mountpoint, NULL);
	if (!o->path) {
		fprintf(stderr, "spoolfs: mountpoint %s: %s\n", s->opts.mountpoint,
		        strerror(errno));
		return -EINVAL;
	}
	rc = hold_mountpoint(s, o);
	if (rc)
		return rc;
	/* The daemon often runs as root: what it writes through must be no one else's. */
	dir_fd = util_trusted_dir(s->opts.writable, &o->dir, why, sizeof(why));
	if (dir_fd < 0) {
		fprintf(stderr, "spoolfs: --writable %s: refused: %s\n", s->opts.writable, why);
		return -EINVAL;
	}
	rc = -EINVAL;
	if (nested(o->dir, o->path)) {
		fprintf(stderr,
		        "spoolfs: --writable %s: the directory and the mountpoint %s must not"
		        " hold one another\n",
		        o->dir, o->path);
		goto out;
	}
	if (unusable_in_options(o->dir) || unusable_in_options(o->lower)) {
		fprintf(stderr,
		        "spoolfs: --writable %s: overlay directories cannot have a ',', ':' or '\\'"
		        " in their path (%s)\n",
		        o->dir, unusable_in_options(o->dir) ? o->dir : o->lower);
		goto out;
	}
	rc = lock_dir(o, dir_fd);
	if (rc == 0)
		rc = make_subdir(o, dir_fd, "upper", 0755, geteuid() == 0 ? s->opts.uid : -1,
		                 s->opts.gid);
	if (rc == 0)
		rc = make_subdir(o, dir_fd, "work", 0700, -1, -1);
	if (rc == 0 && mkdirat(s->daemon.run_dir_fd, "lower", 0700) != 0) {
		rc = -errno;
		fprintf(stderr, "spoolfs: cannot make %s: %s\n", o->lower, strerror(errno));
	}
out:
	close(dir_fd);
	return rc;
}

int daemon_overlay_prepare(struct fs_session *s)
{
	struct daemon_overlay *o;
	char lower[PATH_MAX];
	int rc = -ENOMEM;

	if (!s->opts.writable)
		return 0;
	if (!s->daemon.run_dir) {
		fprintf(stderr, "spoolfs: --writable needs the run directory\n");
		return -EINVAL;
	}
	o = calloc(1, sizeof(*o));
	if (!o)
		goto out;
	o->stop[0] = o->stop[1] = -1;
	o->mnt_fd = o->lock_fd = -1;
	s->daemon.overlay = o;
	snprintf(lower, sizeof(lower), "%s/lower", s->daemon.run_dir);
	o->lower = strdup(lower);
	if (!o->lower)
		goto out;
	if (s->generation) {
		/* Where the first process put it; none when the overlay never came up (then the
		 * mount table has nothing of it to wait for). */
		(void)record_read(s->daemon.run_dir_fd, &o->path);
		rc = 0;
	} else {
		rc = prepare_first(s, o);
	}
	if (rc)
		goto out;
	/* Without the owner's write bit on what spoolfs shows, the overlay would let a user's
	 * build write nothing into the tree (root's could): a file copied up gets that mode
	 * (a published 0444 file becomes 0644 in DIR/upper, doc/writable.md). */
	s->opts.owner_writable = true;
	free(s->opts.mountpoint);
	s->opts.mountpoint = strdup(lower);
	rc = s->opts.mountpoint ? 0 : -ENOMEM;
out:
	if (rc == -ENOMEM)
		fprintf(stderr, "spoolfs: out of memory\n");
	return rc;
}

const char *daemon_overlay_path(const struct fs_session *s)
{
	return s->daemon.overlay ? s->daemon.overlay->path : NULL;
}

void daemon_overlay_free(struct fs_session *s)
{
	struct daemon_overlay *o = s->daemon.overlay;

	if (!o)
		return;
	if (o->mnt_fd >= 0)
		close(o->mnt_fd);
	if (o->lock_fd >= 0)
		close(o->lock_fd);
	free(o->path);
	free(o->dir);
	free(o->lower);
	free(o);
	s->daemon.overlay = NULL;
}

/* Whether the mountpoint's path still names the directory held since start-up (a path
 * swapped for a symlink or another directory meanwhile does not). 0 or -errno, said. */
static int mountpoint_unchanged(const struct daemon_overlay *o)
{
	struct stat held, now;

	if (fstat(o->mnt_fd, &held) != 0)
		return -errno;
	if (fstatat(AT_FDCWD, o->path, &now, AT_SYMLINK_NOFOLLOW) == 0 &&
	    held.st_dev == now.st_dev && held.st_ino == now.st_ino)
		return 0;
	fprintf(stderr,
	        "spoolfs: --writable: the mountpoint %s was replaced during start-up (it is not"
	        " the directory it was): the overlay is not mounted\n",
	        o->path);
	return -ESTALE;
}

/* The overlay on the held directory: the kernel's as root (0; -errno with kernel_why
 * said), else or where the kernel cannot (not where it refuses this upper as in use),
 * fuse-overlayfs. */
static int mount_on_held(const struct daemon_overlay *o, const char *opts, char *kernel_why,
                         size_t why_len)
{
	char held[64];
	const char *argv[] = {"fuse-overlayfs", "-o", opts, held, NULL};
	int rc, status;

	snprintf(held, sizeof(held), "/proc/self/fd/%d", o->mnt_fd);
	if (geteuid() == 0) {
		/* mount(2) resolves the magic link to the held directory itself. */
		if (mount("spoolfs", held, "overlay", MS_NOSUID | MS_NODEV, opts) == 0)
			return 0;
		snprintf(kernel_why, why_len, "overlayfs: %s (see the kernel's log); ",
		         strerror(errno));
		/* Only where the kernel cannot: an upper in use (EBUSY) is refused, never shared
		 * through fuse-overlayfs, which does not check. */
		if (errno == EBUSY) {
			fprintf(stderr, "spoolfs: --writable %s: DIR is in use by another mount\n",
			        o->dir);
			return -EBUSY;
		}
		if (errno != EPERM && errno != ENODEV && errno != EINVAL) {
			fprintf(stderr,
			        "spoolfs: --writable %s: cannot mount the overlay on %s: %s\n",
			        o->dir, o->path, kernel_why);
			return -EIO;
		}
		fprintf(stderr, "spoolfs: --writable: %strying fuse-overlayfs\n", kernel_why);
	} else {
		/* fusermount3 takes no magic link: it checks the path as the user (their own
		 * directory, entered before the mount), and no root acts for them here. */
		argv[3] = o->path;
	}
	rc = run(argv, argv[3] == held ? o->mnt_fd : -1, &status);
	if (rc == 0 && status == 0)
		return 0;
	fprintf(stderr, "spoolfs: --writable %s: cannot mount the overlay on %s: %s%s%s\n", o->dir,
	        o->path, kernel_why,
	        rc == -ENOENT ? "fuse-overlayfs is not installed (Debian: fuse-overlayfs)"
	        : rc          ? "cannot run fuse-overlayfs: "
	                      : "fuse-overlayfs failed (see above)",
	        rc && rc != -ENOENT ? strerror(-rc) : "");
	return -EIO;
}

/* Mounts the overlay once the spoolfs mount answers, and records it; on failure, takes
 * the spoolfs mount down again. The exit status of the mounting process. */
static int mount_overlay(struct fs_session *s)
{
	struct daemon_overlay *o = s->daemon.overlay;
	char opts[3 * PATH_MAX + 64], kernel_why[128] = "";
	struct daemon_mount_top top;
	struct statfs st;
	int rc;

	/* This process holds nothing of the mount's: with its copy of the device open, a mount
	 * that ends before it serves would leave the statfs below waiting on a connection that
	 * never closes; with the lock's, the run directory would look alive. */
	close(fuse_session_fd(s->se));
	if (s->daemon.run_lock_fd >= 0)
		close(s->daemon.run_lock_fd);
	/* Answered once a serving process runs (statfs is always a request). */
	if (statfs(o->lower, &st) != 0) {
		fprintf(stderr, "spoolfs: --writable: the spoolfs mount did not come up: %s\n",
		        strerror(errno));
		return 1;
	}
	snprintf(opts, sizeof(opts), "lowerdir=%s,upperdir=%s/upper,workdir=%s/work", o->lower,
	         o->dir, o->dir);
	/* Its path before the overlay shows: status and reload given the path find it as soon
	 * as anyone can see the overlay (its ID follows the mount). */
	rc = record_write(s->daemon.run_dir_fd, 0, o->path);
	if (rc) {
		fprintf(stderr, "spoolfs: --writable: cannot record the overlay on %s: %s\n",
		        o->path, strerror(-rc));
		goto failed;
	}
	if (mountpoint_unchanged(o) != 0 ||
	    mount_on_held(o, opts, kernel_why, sizeof(kernel_why)) != 0)
		goto failed;
	/* From the table, not through the path: an overlay unmounted already (with -f, at
	 * once) must not leave the ID of the filesystem beneath it recorded. */
	rc = daemon_mount_top_info(o->path, &top);
	if (rc == -ENOENT || (rc == 0 && !is_overlay_type(top.fstype))) {
		/* As the watcher says it, which this unmount stands in for. */
		util_log(UTIL_LOG_INFO, "the overlay on %s was unmounted: unmounting %s", o->path,
		         o->lower);
		goto failed;
	}
	if (rc == 0)
		rc = record_write(s->daemon.run_dir_fd, (long)top.id, o->path);
	if (rc == 0)
		return 0;
	fprintf(stderr, "spoolfs: --writable: cannot record the overlay on %s: %s\n", o->path,
	        strerror(-rc));
	(void)unmount_lazily(o->path);
failed:
	/* Its end ends the serving process's loop: the mount stops as at an unmount. */
	(void)unmount_lazily(o->lower);
	return 1;
}

/* The serving process holds neither the mountpoint (the mounter's) nor, past the first
 * generation, DIR's lock: a copy of the lock above the supervisor's descriptors
 * (supervisor.h) goes with this process's exec of the supervisor, which holds it for the
 * mount's life (a lock, like the device, outlives any serving process). */
static void keep_lock_across_exec(struct daemon_overlay *o)
{
	if (o->mnt_fd >= 0)
		close(o->mnt_fd);
	o->mnt_fd = -1;
	if (o->lock_fd >= 0 && fcntl(o->lock_fd, F_DUPFD, DAEMON_OVERLAY_LOCK_FD_MIN) < 0)
		util_log(UTIL_LOG_WARN, "--writable %s: the lock on DIR goes with this process: %s",
		         o->dir, strerror(errno));
}

int daemon_overlay_start_mounter(struct fs_session *s)
{
	int status;
	pid_t pid;

	if (!s->daemon.overlay)
		return 0;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (s->opts.log.foreground) {
		/* This process serves; a grandchild mounts (init reaps it). */
		if (pid == 0) {
			pid = fork();
			_exit(pid == 0 ? mount_overlay(s) : pid > 0 ? 0 : 1);
		}
		while (waitpid(pid, &status, 0) < 0)
			if (errno != EINTR)
				return -errno;
		keep_lock_across_exec(s->daemon.overlay);
		return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EAGAIN;
	}
	if (pid == 0) {
		keep_lock_across_exec(s->daemon.overlay);
		return 0; /* the child daemonises and serves */
	}
	/* The command the user ran: its child's fuse_daemonize says when the daemon is on its
	 * own; the command returns once the overlay is up, or failed. */
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			_exit(1);
	_exit(WIFEXITED(status) && WEXITSTATUS(status) == 0 ? mount_overlay(s) : 1);
}

static void drain(int fd)
{
	char buf[4096];

	if (lseek(fd, 0, SEEK_SET) == 0)
		while (read(fd, buf, sizeof(buf)) > 0)
			;
}

/* Events on the run directory: a record renamed into place (record_write). -1 when
 * inotify cannot be had: the record is then looked at only as the mount table changes. */
static int watch_records(const struct fs_session *s)
{
	int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);

	if (fd < 0 || inotify_add_watch(fd, s->daemon.run_dir, IN_MOVED_TO | IN_ONLYDIR) < 0) {
		util_log(UTIL_LOG_WARN, "cannot watch %s for the overlay's record: %s",
		         s->daemon.run_dir, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

static void *watch(void *arg)
{
	struct fs_session *s = arg;
	struct daemon_overlay *o = s->daemon.overlay;
	int table = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC), records;

	if (table < 0) {
		util_log(UTIL_LOG_WARN,
		         "cannot watch the mount table (%s): unmounting %s leaves spoolfs mounted"
		         " at %s",
		         strerror(errno), o->path ? o->path : "the overlay", o->lower);
		return NULL;
	}
	records = watch_records(s);
	for (;;) {
		/* The mount's change and the record's rename (its mounter writes the ID just
		 * after the mount) each wake this; whichever comes first, the look is redone. */
		struct pollfd p[3] = {{.fd = table, .events = POLLPRI},
		                      {.fd = o->stop[0], .events = POLLIN},
		                      {.fd = records, .events = POLLIN}};
		long id;

		drain(table); /* before the look: a change after it wakes the poll */
		if (records >= 0)
			while (read(records, (char[4096]){0}, 4096) > 0)
				;
		id = record_read(s->daemon.run_dir_fd, NULL);
		if (id > 0 && id_listed(id) == 0) {
			util_log(UTIL_LOG_INFO, "the overlay on %s was unmounted: unmounting %s",
			         o->path ? o->path : "?", o->lower);
			/* As a SIGTERM to the supervisor does: a clean stop. */
			kill(getpid(), SIGTERM);
			break;
		}
		if (poll(p, 3, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
	}
	if (records >= 0)
		close(records);
	close(table);
	return NULL;
}

int daemon_overlay_watch_start(struct fs_session *s)
{
	struct daemon_overlay *o = s->daemon.overlay;
	int rc;

	if (!o)
		return 0;
	if (pipe2(o->stop, O_CLOEXEC) != 0)
		return -errno;
	rc = util_thread_start(&o->watcher, "overlay-watch", watch, s);
	o->watching = rc == 0;
	return rc;
}

void daemon_overlay_watch_stop(struct fs_session *s)
{
	struct daemon_overlay *o = s->daemon.overlay;

	if (!o)
		return;
	if (o->watching) {
		if (write(o->stop[1], "", 1) < 0)
			util_log(UTIL_LOG_WARN, "cannot stop the overlay's watcher: %s",
			         strerror(errno));
		pthread_join(o->watcher, NULL);
		o->watching = false;
	}
	for (int i = 0; i < 2; i++)
		if (o->stop[i] >= 0)
			close(o->stop[i]);
	o->stop[0] = o->stop[1] = -1;
}

void daemon_overlay_unmount_recorded(int run_dir_fd)
{
	char *path = NULL;
	long id = run_dir_fd >= 0 ? record_read(run_dir_fd, &path) : -EBADF;
	struct daemon_mount_top top;
	int rc;

	/* Only the recorded mount, on top at its path: whatever was mounted over it since, or
	 * in its place, is not this mount's to take down. */
	if (id > 0 && daemon_mount_top_info(path, &top) == 0 && top.id == (unsigned long)id) {
		rc = unmount_lazily(path);
		if (rc)
			util_log(UTIL_LOG_WARN, "cannot unmount the overlay on %s: %s", path,
			         strerror(-rc));
		else
			util_log(UTIL_LOG_INFO, "unmounted the overlay on %s", path);
	}
	free(path);
}

void daemon_overlay_unmount_dead(int run_dir_fd, const char *run_dir)
{
	struct daemon_mount_top top;
	char lower[PATH_MAX];
	int rc;

	daemon_overlay_unmount_recorded(run_dir_fd);
	/* In a run directory of this user's, 0700: no one else can have put a mount there. */
	snprintf(lower, sizeof(lower), "%s/lower", run_dir);
	if (daemon_mount_top_info(lower, &top) != 0 || strcmp(top.fstype, "fuse.spoolfs") != 0)
		return;
	rc = unmount_lazily(lower);
	if (rc)
		util_log(UTIL_LOG_WARN, "cannot unmount %s, a dead mount's: %s", lower,
		         strerror(-rc));
	else
		util_log(UTIL_LOG_INFO, "unmounted %s, a dead mount's", lower);
}

void daemon_overlay_unmount(struct fs_session *s)
{
	if (s->daemon.overlay)
		daemon_overlay_unmount_recorded(s->daemon.run_dir_fd);
}

struct beneath {
	unsigned long overlay_id;
	const char *canonical;
	char *lower;
	size_t len;
};

/* A spoolfs mount at some RUN_DIR/lower whose RUN_DIR records the overlay: by its ID, or
 * by its path while the ID is not recorded yet. */
static int records_overlay(const struct daemon_mount_line *m, void *ctx)
{
	struct beneath *b = ctx;
	size_t n = strlen(m->where);
	char run_dir[PATH_MAX];
	int dir_fd;
	char *path = NULL;
	long id;
	bool ours;

	if (strcmp(m->fstype, "fuse.spoolfs") != 0 || n < 7 || n >= sizeof(run_dir) ||
	    strcmp(m->where + n - 6, "/lower") != 0)
		return 0;
	memcpy(run_dir, m->where, n - 6);
	run_dir[n - 6] = '\0';
	dir_fd = open(run_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dir_fd < 0)
		return 0; /* another user's */
	id = record_read(dir_fd, &path);
	close(dir_fd);
	ours = id > 0 ? (unsigned long)id == b->overlay_id
	              : id == 0 && path && strcmp(path, b->canonical) == 0;
	free(path);
	if (!ours)
		return 0;
	snprintf(b->lower, b->len, "%s", m->where);
	return 1;
}

int daemon_overlay_beneath(const char *canonical, char *lower, size_t len)
{
	struct daemon_mount_top top;
	struct beneath b = {0, canonical, lower, len};
	int rc = daemon_mount_top_info(canonical, &top);

	if (rc)
		return rc;
	if (!is_overlay_type(top.fstype))
		return -ENOENT;
	b.overlay_id = top.id;
	rc = daemon_mount_each(records_overlay, &b);
	return rc == 1 ? 0 : rc == 0 ? -ENOENT : rc;
}

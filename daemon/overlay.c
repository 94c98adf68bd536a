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
 *  - a stop by a signal takes the overlay down first (lazily), then the spoolfs mount.
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
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/mountinfo.h"
#include "daemon/overlay.h"
#include "fs/session.h"
#include "util/log.h"
#include "util/thread.h"
#include "util/trusted_path.h"

#define RECORD_NAME "overlay"

struct daemon_overlay {
	char *path;  /* the user's mountpoint, canonical: the overlay's; NULL when unknown */
	char *dir;   /* DIR, canonical (the first process only) */
	char *lower; /* the spoolfs mount, RUN_DIR/lower */
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

/* Runs argv (a program from PATH) with no descriptor of ours but stdio: a daemon it
 * leaves behind (fuse-overlayfs) must not hold the FUSE device or the run directory's
 * lock. Its exit status; 127 when it cannot run; -errno when it cannot start. */
static int run(const char *const argv[])
{
	int status;
	pid_t pid = fork();

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		close_range(3, ~0U, 0);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* A lazy unmount: a file still open on it keeps it until its close. */
static int unmount_lazily(const char *path)
{
	const char *argv[] = {"fusermount3", "-u", "-q", "-z", path, NULL};

	if (geteuid() == 0)
		return umount2(path, MNT_DETACH) == 0 ? 0 : -errno;
	return run(argv) == 0 ? 0 : -EIO;
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
	rc = make_subdir(o, dir_fd, "upper", 0755, geteuid() == 0 ? s->opts.uid : -1, s->opts.gid);
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
	free(o->path);
	free(o->dir);
	free(o->lower);
	free(o);
	s->daemon.overlay = NULL;
}

/* Mounts the overlay once the spoolfs mount answers, and records it; on failure, takes
 * the spoolfs mount down again. The exit status of the mounting process. */
static int mount_overlay(struct fs_session *s)
{
	struct daemon_overlay *o = s->daemon.overlay;
	char opts[3 * PATH_MAX + 64], kernel_why[128] = "";
	const char *argv[] = {"fuse-overlayfs", "-o", opts, o->path, NULL};
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
	if (geteuid() == 0) {
		if (mount("spoolfs", o->path, "overlay", MS_NOSUID | MS_NODEV, opts) == 0)
			goto mounted;
		/* In a container, or over an upper the kernel refuses (its log says which). */
		snprintf(kernel_why, sizeof(kernel_why), "overlayfs: %s (see the kernel's log); ",
		         strerror(errno));
	}
	if (kernel_why[0])
		fprintf(stderr, "spoolfs: --writable: %strying fuse-overlayfs\n", kernel_why);
	rc = run(argv);
	if (rc != 0) {
		fprintf(stderr, "spoolfs: --writable %s: cannot mount the overlay on %s: %s%s\n",
		        o->dir, o->path, kernel_why,
		        rc == 127 ? "fuse-overlayfs is not installed (Debian: fuse-overlayfs)"
		                  : "fuse-overlayfs failed (see above)");
		goto failed;
	}
mounted:
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
		return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EAGAIN;
	}
	if (pid == 0)
		return 0; /* the child daemonises and serves */
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

static void *watch(void *arg)
{
	struct fs_session *s = arg;
	struct daemon_overlay *o = s->daemon.overlay;
	int table = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);

	if (table < 0) {
		util_log(UTIL_LOG_WARN,
		         "cannot watch the mount table (%s): unmounting %s leaves spoolfs mounted"
		         " at %s",
		         strerror(errno), o->path ? o->path : "the overlay", o->lower);
		return NULL;
	}
	for (;;) {
		struct pollfd p[2] = {{.fd = table, .events = POLLPRI},
		                      {.fd = o->stop[0], .events = POLLIN}};
		long id = record_read(s->daemon.run_dir_fd, NULL);

		drain(table); /* before the look: a change after it wakes the poll */
		if (id > 0 && id_listed(id) == 0) {
			util_log(UTIL_LOG_INFO, "the overlay on %s was unmounted: unmounting %s",
			         o->path ? o->path : "?", o->lower);
			/* As a SIGTERM to the supervisor does: a clean stop. */
			kill(getpid(), SIGTERM);
			break;
		}
		/* Until the overlay is recorded (its mounter writes the record just after the
		 * mount's change), the record is looked at again every 100 ms. */
		if (poll(p, 2, id > 0 ? -1 : 100) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
	}
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
	int rc;

	if (id > 0 && id_listed(id) == 1) {
		rc = unmount_lazily(path);
		if (rc)
			util_log(UTIL_LOG_WARN, "cannot unmount the overlay on %s: %s", path,
			         strerror(-rc));
		else
			util_log(UTIL_LOG_INFO, "unmounted the overlay on %s", path);
	}
	free(path);
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

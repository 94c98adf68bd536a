/*
 * The mount's private run directory (doc/survive.md): made at mount in $TMPDIR or /var/tmp,
 * 0700, holding the namespace database, the INIT record, progress notes and the session's
 * own cache directory. The supervisor removes it at unmount; this file owns making it and
 * clearing away the ones whose every process was killed before it could.
 *
 * A run directory's file "lock" is held (flock) by one open file that every process of its
 * mount inherits: the first one, the supervisor and each serving process. The lock is free
 * exactly when none of them lives, whatever killed them, so a later mount that takes it
 * may remove the directory. A directory without "lock" (being made, or made by an older
 * spoolfs) is never removed: "lock" appears by rename only once it is held.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/overlay.h"
#include "daemon/run_dir.h"
#include "util/log.h"
#include "util/supervise.h"
#include "util/trusted_path.h"
#include "fs/session.h"

#define RUN_DIR_PREFIX "spoolfs-run."

/* Takes name's lock if no process of its mount holds it: the lock's fd, or -1. */
static int take_stale_lock(int tmp_fd, const char *name)
{
	struct stat named, opened;
	int dir_fd, lock_fd;

	if (fstatat(tmp_fd, name, &named, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(named.st_mode) ||
	    named.st_uid != geteuid())
		return -1;
	dir_fd = openat(tmp_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dir_fd < 0)
		return -1;
	/* The directory checked is the one opened: not one put at the name in between. */
	if (fstat(dir_fd, &opened) != 0 || opened.st_dev != named.st_dev ||
	    opened.st_ino != named.st_ino) {
		close(dir_fd);
		return -1;
	}
	lock_fd = openat(dir_fd, "lock", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	close(dir_fd);
	if (lock_fd < 0)
		return -1;
	/* A lock already unlinked is another sweep's, which removed the directory just now. */
	if (fstat(lock_fd, &opened) != 0 || !S_ISREG(opened.st_mode) ||
	    opened.st_uid != geteuid() || flock(lock_fd, LOCK_EX | LOCK_NB) != 0 ||
	    fstat(lock_fd, &opened) != 0 || opened.st_nlink == 0) {
		close(lock_fd);
		return -1;
	}
	return lock_fd;
}

/*
 * Removes the run directories in tmp that this user's mounts left when all their
 * processes were killed (kill -9 of the supervisor too, an OOM kill of the whole cgroup):
 * each holds a namespace database as large as its manifest, and /var/tmp outlives reboots.
 */
static void sweep_stale(const char *tmp)
{
	DIR *d = opendir(tmp);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, RUN_DIR_PREFIX, strlen(RUN_DIR_PREFIX)) != 0)
			continue;
		int lock_fd = take_stale_lock(dirfd(d), e->d_name);
		if (lock_fd < 0)
			continue;
		/* Its mounts first (--writable's, when its supervisor was SIGKILLed): the tree
		 * cannot go with a dead mount in it. */
		int run_fd =
		    openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (run_fd >= 0) {
			char run_dir[PATH_MAX];
			snprintf(run_dir, sizeof(run_dir), "%s/%s", strcmp(tmp, "/") ? tmp : "",
			         e->d_name);
			daemon_overlay_unmount_dead(run_fd, run_dir);
			close(run_fd);
		}
		/* Held while it goes: another mount's sweep skips it meanwhile. */
		int rc = util_remove_tree(dirfd(d), e->d_name);
		close(lock_fd);
		if (rc == 0)
			util_log(UTIL_LOG_INFO,
			         "removed %s/%s, the run directory of a mount whose processes"
			         " were all killed",
			         tmp, e->d_name);
		else
			util_log(UTIL_LOG_WARN,
			         "cannot remove %s/%s, a dead mount's run directory: %s", tmp,
			         e->d_name, strerror(-rc));
	}
	closedir(d);
}

/*
 * Makes "lock" in the new run directory, held: its fd, or -errno. Where this filesystem
 * has no flock the file stays unnamed (the directory is then never swept, as an older
 * spoolfs's), and its fd is passed on all the same.
 */
static int make_lock(int run_dir_fd)
{
	int fd = openat(run_dir_fd, "lock.new", O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
	                0600);

	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) != 0 ||
	    renameat(run_dir_fd, "lock.new", run_dir_fd, "lock") != 0) {
		util_log(UTIL_LOG_DEBUG, "the run directory cannot be locked: %s", strerror(errno));
		unlinkat(run_dir_fd, "lock.new", 0);
	}
	return fd;
}

int daemon_run_dir_make(struct fs_session *s)
{
	const char *tmp = getenv("TMPDIR");
	char path[PATH_MAX], why[PATH_MAX + 256], *canonical = NULL;
	int rc;

	if (!tmp || !*tmp)
		tmp = "/var/tmp";
	/* The namespace database is opened by its path (sqlite), and the supervisor removes
	 * the tree by it: TMPDIR must be a directory no one else can rename things in. */
	rc = util_trusted_dir(tmp, &canonical, why, sizeof(why));
	if (rc < 0) {
		fprintf(stderr,
		        "spoolfs: TMPDIR %s refused for the run directory: %s (every directory on "
		        "it must be owned by root or uid %u and writable by no one else unless "
		        "sticky)\n",
		        tmp, why, (unsigned)geteuid());
		return rc;
	}
	close(rc);
	sweep_stale(canonical);
	snprintf(path, sizeof(path), "%s/" RUN_DIR_PREFIX "XXXXXX",
	         strcmp(canonical, "/") ? canonical : "");
	free(canonical);
	if (!mkdtemp(path) || !(s->daemon.run_dir = strdup(path))) {
		rc = -errno;
		fprintf(stderr, "spoolfs: cannot make a run directory in %s: %s\n", tmp,
		        strerror(errno));
		return rc;
	}
	s->daemon.run_dir_fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	rc = s->daemon.run_dir_fd < 0 ? -errno : make_lock(s->daemon.run_dir_fd);
	if (rc < 0) {
		fprintf(stderr, "spoolfs: cannot use the run directory %s: %s\n", path,
		        strerror(-rc));
		daemon_run_dir_close(s); /* no lock: no later mount would remove it */
		return rc;
	}
	s->daemon.run_lock_fd = rc;
	return 0;
}

void daemon_run_dir_adopt_lock(struct fs_session *s, int fd)
{
	struct stat st;

	/* A supervisor of an older build passes none: that fd is then closed, or not ours. */
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		return;
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	s->daemon.run_lock_fd = fd;
}

void daemon_run_dir_close(struct fs_session *s)
{
	/* Before a supervisor exists (the mount failed), the run directory is this one's. */
	if (s->daemon.run_dir && !s->generation && s->daemon.ctl_fd < 0)
		util_remove_tree(AT_FDCWD, s->daemon.run_dir);
	if (s->daemon.run_dir_fd >= 0)
		close(s->daemon.run_dir_fd);
	if (s->daemon.run_lock_fd >= 0)
		close(s->daemon.run_lock_fd);
	free(s->daemon.run_dir);
	s->daemon.run_dir = NULL;
	s->daemon.run_dir_fd = s->daemon.run_lock_fd = -1;
}

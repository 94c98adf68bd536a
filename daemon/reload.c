/*
 * `spoolfs reload MOUNTPOINT`: asks a mount's supervisor for a new serving process of the
 * binary on disk (SIGUSR2), and waits for the supervisor to count the outcome.
 *
 * The PID to signal comes from MOUNTPOINT/.spoolfs/stats, a file whoever serves that path
 * writes: a directory a user made, or another user's FUSE mount, could name any process
 * (root's reload would then signal root's process, whose default action for SIGUSR2 is to
 * end). So before any signal:
 *  - MOUNTPOINT (or, for a --writable mount's overlay, the spoolfs mount its run directory
 *    records beneath it) must be the top mount at that path in the mount table and a spoolfs one
 *    (fuse.spoolfs), and the stats are read through a descriptor of that mount's root;
 *  - the caller must be root or the mount's user (the FUSE mount's user_id=);
 *  - the PID must run as the mount's user (real and effective uid), hold /dev/fuse open,
 *    and be the parent of the serving process the same stats name: what a spoolfs
 *    supervisor is. Another user's process is never signalled, whatever the file says.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon/mountinfo.h"
#include "daemon/overlay.h"
#include "daemon/supervisor.h"
#include "util/pid_signal.h"

/* What /.spoolfs/stats says of the mount's processes; -1 for a line it lacks. */
struct supervision_seen {
	long sup, serving, reloads, failed;
};

/* The stats of the mount whose root root_fd is. 0, -ESRCH without a supervisor, -errno. */
static int read_stats(int root_fd, struct supervision_seen *seen)
{
	char line[256];
	int fd = openat(root_fd, ".spoolfs/stats", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	FILE *f;

	if (fd < 0)
		return -errno;
	f = fdopen(fd, "re");
	if (!f) {
		close(fd);
		return -ENOMEM;
	}
	seen->sup = seen->serving = seen->reloads = seen->failed = -1;
	while (fgets(line, sizeof(line), f)) {
		sscanf(line, "spoolfs_supervisor_pid %ld", &seen->sup);
		sscanf(line, "spoolfs_serving_pid %ld", &seen->serving);
		sscanf(line, "spoolfs_reloads_total %ld", &seen->reloads);
		sscanf(line, "spoolfs_reloads_failed_total %ld", &seen->failed);
	}
	fclose(f);
	return seen->sup > 0 ? 0 : -ESRCH;
}

/* /proc/PID/status's uids (real, effective) and parent. 0 or -errno. */
static int proc_status(long pid, long *ruid, long *euid, long *ppid)
{
	char path[64], line[256];
	FILE *f;

	*ruid = *euid = *ppid = -1;
	snprintf(path, sizeof(path), "/proc/%ld/status", pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		sscanf(line, "Uid: %ld %ld", ruid, euid);
		sscanf(line, "PPid: %ld", ppid);
	}
	fclose(f);
	return *ruid >= 0 && *ppid >= 0 ? 0 : -EIO;
}

/* Whether pid holds a FUSE device open, as a supervisor does for its whole life. */
static bool holds_fuse_device(long pid)
{
	char path[64], target[32];
	struct dirent *e;
	bool found = false;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%ld/fd", pid);
	d = opendir(path);
	if (!d)
		return false;
	while (!found && (e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		ssize_t n = readlinkat(dirfd(d), e->d_name, target, sizeof(target) - 1);
		if (n > 0) {
			target[n] = '\0';
			found = strcmp(target, "/dev/fuse") == 0;
		}
	}
	closedir(d);
	return found;
}

/*
 * Opens the root of the spoolfs mount at dir and reads who supervises it: the root's fd
 * (the caller closes it), or -1 after saying why on stderr.
 */
static int open_mount(const char *dir, struct daemon_mount_top *top)
{
	char *canonical = realpath(dir, NULL);
	struct stat st;
	int fd = -1;

	char lower[PATH_MAX];

	if (!canonical) {
		fprintf(stderr, "spoolfs reload: %s: %s\n", dir, strerror(errno));
		return -1;
	}
	/* A --writable mount's overlay: the spoolfs mount beneath it is the one checked. */
	if (daemon_overlay_beneath(canonical, lower, sizeof(lower)) == 0) {
		free(canonical);
		canonical = strdup(lower);
		if (!canonical) {
			fprintf(stderr, "spoolfs reload: out of memory\n");
			return -1;
		}
	}
	if (daemon_mount_top_info(canonical, top) != 0) {
		fprintf(stderr, "spoolfs reload: %s: not a mount point\n", dir);
		goto out;
	}
	if (strcmp(top->fstype, "fuse.spoolfs") != 0) {
		fprintf(stderr, "spoolfs reload: %s: not a spoolfs mount (%s)\n", dir, top->fstype);
		goto out;
	}
	if (getuid() != 0 && (long)getuid() != top->user_id) {
		fprintf(stderr,
		        "spoolfs reload: %s: the mount of uid %ld: only it or root may reload\n",
		        dir, top->user_id);
		goto out;
	}
	fd = open(canonical, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	/* The root of that very mount, not a directory put at the path since. */
	if (fd < 0 || daemon_fd_mount_id(fd) != (long)top->id || fstat(fd, &st) != 0 ||
	    st.st_ino != 1) {
		fprintf(stderr, "spoolfs reload: %s: %s\n", dir,
		        fd < 0 ? strerror(errno) : "the mount there changed while it was examined");
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
out:
	free(canonical);
	return fd;
}

/* Whether seen->sup is the mount's supervisor (see the top of the file); said when not. */
static bool is_supervisor(const char *dir, const struct daemon_mount_top *top,
                          const struct supervision_seen *seen)
{
	long ruid, euid, ppid, s_ruid, s_euid, s_ppid;
	const char *why = NULL;

	if (proc_status(seen->sup, &ruid, &euid, &ppid) != 0)
		why = "is not running";
	else if (ruid != top->user_id || euid != top->user_id)
		why = "does not run as the mount's user";
	else if (!holds_fuse_device(seen->sup))
		why = "holds no FUSE device";
	else if (seen->serving <= 0 || proc_status(seen->serving, &s_ruid, &s_euid, &s_ppid) != 0 ||
	         s_ppid != seen->sup)
		why = "is not the parent of the serving process";
	if (!why)
		return true;
	fprintf(stderr,
	        "spoolfs reload: %s: refused: process %ld, named as its supervisor, %s (uid %ld's "
	        "mount)\n",
	        dir, seen->sup, why, top->user_id);
	return false;
}

struct supervisor_check {
	const char *dir;
	const struct daemon_mount_top *top;
	const struct supervision_seen *seen;
};

static bool supervisor_checked(pid_t pid, void *ctx)
{
	const struct supervisor_check *c = ctx;

	(void)pid; /* c->seen->sup */
	return is_supervisor(c->dir, c->top, c->seen);
}

int daemon_reload_main(int argc, char **argv)
{
	struct supervisor_check check;
	struct supervision_seen before, now;
	struct daemon_mount_top top;
	int rc, root_fd, status = 1;

	if (argc != 3) {
		fprintf(stderr, "usage: spoolfs reload MOUNTPOINT\n");
		return 2;
	}
	root_fd = open_mount(argv[2], &top);
	if (root_fd < 0)
		return 1;
	rc = read_stats(root_fd, &before);
	if (rc) {
		fprintf(stderr, "spoolfs reload: %s: %s\n", argv[2],
		        rc == -ESRCH ? "no supervisor (a mount of an older spoolfs?)"
		                     : strerror(-rc));
		goto out;
	}
	/* Through a pidfd held across the checks: never a process that took the PID since. */
	check = (struct supervisor_check){argv[2], &top, &before};
	rc = util_pid_signal_checked((pid_t)before.sup, SIGUSR2, supervisor_checked, &check);
	if (rc == -EACCES)
		goto out; /* said */
	if (rc) {
		fprintf(stderr, "spoolfs reload: supervisor %ld: %s\n", before.sup,
		        rc == -ESRCH ? "exited while it was examined" : strerror(-rc));
		goto out;
	}
	/* Until the supervisor counts the outcome: a reload, or one refused or rolled back. */
	for (int i = 0; i < 600; i++) {
		struct timespec tick = {0, 100000000L};
		nanosleep(&tick, NULL);
		if (read_stats(root_fd, &now) != 0)
			continue;
		if (now.reloads > before.reloads) {
			printf("spoolfs reload: %s: serving process %ld replaced by %ld\n", argv[2],
			       before.serving, now.serving);
			status = 0;
			goto out;
		}
		if (now.failed > before.failed) {
			fprintf(
			    stderr,
			    "spoolfs reload: %s: not reloaded (refused, or the new binary did not"
			    " start); serving process %ld serves on (see the log)\n",
			    argv[2], now.serving);
			goto out;
		}
	}
	fprintf(stderr, "spoolfs reload: %s: no outcome within 60 s\n", argv[2]);
out:
	close(root_fd);
	return status;
}

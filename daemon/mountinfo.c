/*
 * Which mount sits at a path, from /proc/self/mountinfo. The mount itself is never asked
 * (stat would send a request to this daemon, which may not serve requests yet, or any
 * more): the kernel's table answers without it.
 *
 * Mounts stacked on one path each name the one below as their parent, so the topmost is
 * the one no other mount at that path names. The table's line order is not that order:
 * it follows the mount namespace's list, which a propagated or moved mount enters at
 * its own place.
 *
 * Before a mount, the same table says whether a FUSE mount is already at the mountpoint:
 * spoolfs does not stack on a live one, and clears a dead one of its own user away
 * (daemon_mountpoint_prepare), through one fd opened on it, so that the mount it asked is the
 * one it detaches.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "daemon/mountinfo.h"
#include "util/thread.h"
#include "util/log.h"

struct mount_entry {
	unsigned long id;
	unsigned long parent;
	char devno[32];
	char fstype[64];
	long user_id; /* a FUSE mount's user_id= super option; -1 without one */
};

/* Undoes mountinfo's octal escapes (\040 for a space) in place. */
static void unescape(char *s)
{
	char *out = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*out++ = (char)((s[1] - '0') << 6 | (s[2] - '0') << 3 | (s[3] - '0'));
			s += 3;
		} else {
			*out++ = *s;
		}
	}
	*out = '\0';
}

/* The user_id= of a super options list ("rw,user_id=1000,group_id=1000"); -1 without one. */
static long super_user_id(const char *super)
{
	for (const char *p = super; p; p = strchr(p, ',')) {
		p += *p == ',';
		if (strncmp(p, "user_id=", 8) == 0) {
			char *end;
			long id = strtol(p + 8, &end, 10);
			return (*end == ',' || *end == '\0') && end != p + 8 && id >= 0 ? id : -1;
		}
	}
	return -1;
}

/* Appends one mount to *at; fails with -ENOMEM. */
static int add_entry(struct mount_entry **at, size_t *n, const struct mount_entry *e)
{
	struct mount_entry *grown = realloc(*at, (*n + 1) * sizeof(**at));

	if (!grown)
		return -ENOMEM;
	grown[(*n)++] = *e;
	*at = grown;
	return 0;
}

/* One line of the table into *e and its mountpoint, unescaped, into where (4096 bytes).
 * 0, or -EINVAL for a line not in mountinfo's format. */
static int parse_line(const char *line, struct mount_entry *e, char *where)
{
	const char *sep;
	char super[1024] = "";

	if (sscanf(line, "%lu %lu %31s %*s %4095s", &e->id, &e->parent, e->devno, where) != 4)
		return -EINVAL;
	/* The optional fields end at " - "; a space in a path is escaped, so the first one is
	 * the separator. */
	sep = strstr(line, " - ");
	if (!sep || sscanf(sep + 3, "%63s %*s %1023s", e->fstype, super) < 1)
		e->fstype[0] = '\0';
	e->user_id = super_user_id(super);
	unescape(where);
	return 0;
}

int daemon_mount_each(int (*fn)(const struct daemon_mount_line *m, void *ctx), void *ctx)
{
	FILE *table = fopen("/proc/self/mountinfo", "re");
	char *line = NULL, where[4096];
	struct mount_entry e;
	size_t cap = 0;
	int rc = 0;

	if (!table)
		return -errno;
	errno = 0;
	while (rc == 0 && getline(&line, &cap, table) > 0)
		if (parse_line(line, &e, where) == 0)
			rc = fn(&(struct daemon_mount_line){e.id, e.fstype, where}, ctx);
	if (rc == 0 && (ferror(table) || errno == ENOMEM))
		rc = -(errno ? errno : EIO);
	free(line);
	fclose(table);
	return rc;
}

int daemon_mount_top_in(FILE *table, const char *mountpoint, char *dev, size_t len, char *fstype,
                        size_t fstype_len)
{
	struct daemon_mount_top top;
	int rc = daemon_mount_top_info_in(table, mountpoint, &top);

	if (rc == 0) {
		snprintf(dev, len, "%s", top.dev);
		if (fstype)
			snprintf(fstype, fstype_len, "%s", top.fstype);
	}
	return rc;
}

int daemon_mount_top_info_in(FILE *table, const char *mountpoint, struct daemon_mount_top *top)
{
	struct mount_entry *at = NULL, e;
	char *line = NULL, where[4096];
	size_t cap = 0, n = 0;
	int rc = 0;

	errno = 0;
	while (rc == 0 && getline(&line, &cap, table) > 0)
		if (parse_line(line, &e, where) == 0 && strcmp(where, mountpoint) == 0)
			rc = add_entry(&at, &n, &e);
	/* A short read (ENOMEM) must not pass for the end of the table. */
	if (rc == 0 && (ferror(table) || errno == ENOMEM))
		rc = -(errno ? errno : EIO);
	if (rc == 0)
		rc = -ENOENT;
	for (size_t i = 0; rc == -ENOENT && i < n; i++) {
		bool covered = false;
		for (size_t j = 0; j < n && !covered; j++)
			covered = at[j].parent == at[i].id;
		if (!covered) {
			top->id = at[i].id;
			top->user_id = at[i].user_id;
			snprintf(top->dev, sizeof(top->dev), "%s", at[i].devno);
			snprintf(top->fstype, sizeof(top->fstype), "%s", at[i].fstype);
			rc = 0;
		}
	}
	free(at);
	free(line);
	return rc;
}

int daemon_mount_device_in(FILE *table, const char *mountpoint, char *dev, size_t len)
{
	return daemon_mount_top_in(table, mountpoint, dev, len, NULL, 0);
}

int daemon_mount_top(const char *mountpoint, char *dev, size_t len, char *fstype, size_t fstype_len)
{
	FILE *table = fopen("/proc/self/mountinfo", "re");
	int rc;

	if (!table)
		return -errno;
	rc = daemon_mount_top_in(table, mountpoint, dev, len, fstype, fstype_len);
	fclose(table);
	return rc;
}

int daemon_mount_top_info(const char *mountpoint, struct daemon_mount_top *top)
{
	FILE *table = fopen("/proc/self/mountinfo", "re");
	int rc;

	if (!table)
		return -errno;
	rc = daemon_mount_top_info_in(table, mountpoint, top);
	fclose(table);
	return rc;
}

int daemon_mount_device(const char *mountpoint, char *dev, size_t len)
{
	return daemon_mount_top(mountpoint, dev, len, NULL, 0);
}

long daemon_fd_mount_id(int fd)
{
	char name[64], *line = NULL;
	size_t cap = 0;
	long id = -ENOENT;
	FILE *info;

	snprintf(name, sizeof(name), "/proc/self/fdinfo/%d", fd);
	info = fopen(name, "re");
	if (!info)
		return -errno;
	while (id == -ENOENT && getline(&line, &cap, info) > 0)
		if (sscanf(line, "mnt_id: %ld", &id) != 1 || id < 0)
			id = -ENOENT;
	free(line);
	fclose(info);
	return id;
}

static bool is_fuse_type(const char *fstype)
{
	return strcmp(fstype, "fuse") == 0 || strcmp(fstype, "fuseblk") == 0 ||
	       strncmp(fstype, "fuse.", 5) == 0;
}

/* Long enough for a daemon that is merely slow; a hung one never answers. */
#define PROBE_TIMEOUT_S 5

/* One fstatfs, shared by the thread that makes it and the one that waits for it: whoever
 * leaves last frees it. */
struct probe {
	pthread_mutex_t lock;
	pthread_cond_t done_cond;
	int fd;    /* the thread's own: closed by the thread */
	int users; /* lock: */
	bool done; /* lock: */
	int err;   /* lock: 0, or fstatfs's errno */
};

static void probe_leave(struct probe *p)
{
	pthread_mutex_lock(&p->lock);
	bool last = --p->users == 0;
	pthread_mutex_unlock(&p->lock);
	if (last) {
		pthread_cond_destroy(&p->done_cond);
		pthread_mutex_destroy(&p->lock);
		free(p);
	}
}

static void *probe_run(void *arg)
{
	struct probe *p = arg;
	struct statfs st;
	int err = fstatfs(p->fd, &st) == 0 ? 0 : errno;

	close(p->fd);
	pthread_mutex_lock(&p->lock);
	p->err = err;
	p->done = true;
	pthread_cond_signal(&p->done_cond);
	pthread_mutex_unlock(&p->lock);
	probe_leave(p);
	return NULL;
}

/*
 * fstatfs on fd, bounded: a FUSE daemon that is alive but hung would hold it forever, and
 * start-up must not hang. 0, -errno of fstatfs, or -ETIMEDOUT: then the thread stays blocked
 * (detached) until the process exits, which kills it (a FUSE request's wait is killable),
 * and the caller refuses, so none is left at the daemon's fork.
 */
static int probe_statfs(int fd)
{
	struct probe *p = calloc(1, sizeof(*p));
	pthread_condattr_t attr;
	struct timespec until;
	pthread_t thread;
	int rc = -ENOMEM;

	if (!p)
		return rc;
	p->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (p->fd < 0) {
		rc = -errno;
		free(p);
		return rc;
	}
	pthread_mutex_init(&p->lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&p->done_cond, &attr);
	pthread_condattr_destroy(&attr);
	p->users = 2;
	rc = util_thread_start(&thread, "spoolfs-probe", probe_run, p);
	if (rc) {
		close(p->fd);
		p->users = 1;
		goto out;
	}
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += PROBE_TIMEOUT_S;
	pthread_mutex_lock(&p->lock);
	while (!p->done && pthread_cond_timedwait(&p->done_cond, &p->lock, &until) != ETIMEDOUT)
		;
	rc = p->done ? -p->err : -ETIMEDOUT;
	pthread_mutex_unlock(&p->lock);
	if (rc == -ETIMEDOUT)
		pthread_detach(thread);
	else
		pthread_join(thread, NULL);
out:
	probe_leave(p);
	return rc;
}

/*
 * One step of daemon_mountpoint_prepare on the mount fd is on, path being where fd is (as the
 * kernel names it). 1 when a dead mount was cleared (another may be under it), 0 when there
 * is nothing to clear, or -errno after a message.
 *
 * The path is looked up once, at the open: every check and the unmount go through fd, so
 * what was checked is what is detached, whatever is renamed or swapped in meanwhile (a
 * FUSE daemon can hold its statfs answer as long as it likes).
 */
static int clear_dead_mount(int fd, const char *path)
{
	struct daemon_mount_top top;
	char self[64];
	long fd_mount = daemon_fd_mount_id(fd);
	int rc;

	/* What cannot be read is left to the caller's check of the directory, and an
	 * unreadable table to the mount itself. */
	if (fd_mount < 0 || daemon_mount_top_info(path, &top) != 0 || !is_fuse_type(top.fstype))
		return 0;
	/* Not the mount fd is on (one hidden by a mount over a directory above it, or the
	 * table changed since the open): nothing this fd could check or detach. */
	if ((unsigned long)fd_mount != top.id)
		return 0;
	/* statfs always asks the daemon (attributes may be answered from the kernel's
	 * cache, a dead mount's too); a live spoolfs answers it without the network. */
	rc = probe_statfs(fd);
	if (rc == 0) {
		fprintf(stderr,
		        "spoolfs: %s is already a live %s mount: unmount it first "
		        "(fusermount3 -u %s); spoolfs does not mount over a FUSE mount\n",
		        path, top.fstype, path);
		return -EBUSY;
	}
	if (rc == -ETIMEDOUT) {
		fprintf(stderr,
		        "spoolfs: %s is a %s mount that does not answer: its daemon hangs; "
		        "unmount it first (fusermount3 -u -z %s)\n",
		        path, top.fstype, path);
		return rc;
	}
	if (rc != -ENOTCONN)
		return 0;
	/* Its daemon is gone (a cancelled CI job): nothing can be read there any more. Only
	 * our own: root must not detach a mount another user's daemon made. */
	if (top.user_id != (long)geteuid()) {
		fprintf(stderr,
		        "spoolfs: %s holds a dead %s mount (its daemon is gone) of another user: "
		        "unmount it first (fusermount3 -u -z %s)\n",
		        path, top.fstype, path);
		return -EPERM;
	}
	/* The magic link is fd's mount itself (UMOUNT_NOFOLLOW would refuse it). */
	snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
	if (umount2(self, MNT_DETACH) != 0) {
		rc = -errno;
		fprintf(stderr,
		        "spoolfs: %s holds a dead %s mount (its daemon is gone) that cannot "
		        "be unmounted: %s; try fusermount3 -u -z %s\n",
		        path, top.fstype, strerror(-rc), path);
		return rc;
	}
	util_log(UTIL_LOG_WARN, "%s held a dead %s mount (its daemon is gone): lazily unmounted it",
	         path, top.fstype);
	return 1;
}

int daemon_mountpoint_prepare(const char *mountpoint)
{
	char self[64], path[PATH_MAX];
	int rc = 1;

	/* Each dead mount cleared may uncover another: bounded, as the stack is. */
	for (unsigned cleared = 0; rc == 1 && cleared < 64; cleared++) {
		/* O_PATH asks no filesystem: a dead or hung FUSE mount's root opens. */
		int fd = open(mountpoint, O_PATH | O_CLOEXEC);
		ssize_t len;

		snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
		if (fd < 0 || (len = readlink(self, path, sizeof(path) - 1)) <= 0 ||
		    path[0] != '/') {
			rc = 0; /* left to the caller's check of the directory */
		} else {
			path[len] = '\0';
			rc = clear_dead_mount(fd, path);
		}
		if (fd >= 0)
			close(fd);
	}
	return rc < 0 ? rc : 0;
}

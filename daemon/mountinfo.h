/*
 * The mount table (mountinfo.c): what is mounted on top at a path.
 */
#ifndef SPOOLFS_DAEMON_MOUNTINFO_H
#define SPOOLFS_DAEMON_MOUNTINFO_H

#include <stddef.h>
#include <stdio.h>

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

/* One line of the mount table, as daemon_mount_each gives it (valid during the call). */
struct daemon_mount_line {
	unsigned long id;   /* the mount ID */
	const char *fstype; /* "fuse.spoolfs", "overlay" */
	const char *where;  /* the mountpoint, unescaped */
};

/* Calls fn on each mount of this process's table (/proc/self/mountinfo) until it returns
 * non-zero: that value; 0 at the table's end; -errno when the table cannot be read. */
int daemon_mount_each(int (*fn)(const struct daemon_mount_line *m, void *ctx), void *ctx);

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

#endif

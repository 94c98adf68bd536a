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
 * spoolfs does not stack on a live one, and clears a dead one away (fs_mountpoint_prepare).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/statfs.h>

#include "fetch/log.h"
#include "fs/fs_i.h"

struct mount_entry {
	unsigned long id;
	unsigned long parent;
	char devno[32];
	char fstype[64];
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

int fs_mount_top_in(FILE *table, const char *mountpoint, char *dev, size_t len, char *fstype,
                    size_t fstype_len)
{
	struct mount_entry *at = NULL, e;
	char *line = NULL, where[4096];
	size_t cap = 0, n = 0;
	int rc = 0;

	errno = 0;
	while (rc == 0 && getline(&line, &cap, table) > 0) {
		if (sscanf(line, "%lu %lu %31s %*s %4095s", &e.id, &e.parent, e.devno, where) != 4)
			continue;
		/* The optional fields end at " - "; a space in a path is escaped, so the first
		 * one is the separator. */
		const char *sep = strstr(line, " - ");
		if (!sep || sscanf(sep + 3, "%63s", e.fstype) != 1)
			e.fstype[0] = '\0';
		unescape(where);
		if (strcmp(where, mountpoint) == 0)
			rc = add_entry(&at, &n, &e);
	}
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
			snprintf(dev, len, "%s", at[i].devno);
			if (fstype)
				snprintf(fstype, fstype_len, "%s", at[i].fstype);
			rc = 0;
		}
	}
	free(at);
	free(line);
	return rc;
}

int fs_mount_device_in(FILE *table, const char *mountpoint, char *dev, size_t len)
{
	return fs_mount_top_in(table, mountpoint, dev, len, NULL, 0);
}

int fs_mount_top(const char *mountpoint, char *dev, size_t len, char *fstype, size_t fstype_len)
{
	FILE *table = fopen("/proc/self/mountinfo", "re");
	int rc;

	if (!table)
		return -errno;
	rc = fs_mount_top_in(table, mountpoint, dev, len, fstype, fstype_len);
	fclose(table);
	return rc;
}

int fs_mount_device(const char *mountpoint, char *dev, size_t len)
{
	return fs_mount_top(mountpoint, dev, len, NULL, 0);
}

/*
 * mountpoint's canonical path. A dead FUSE mount there may answer a lookup of the path
 * itself with ENOTCONN: then its parent's canonical path and its last name, the name the
 * mount table holds (a symlink to a dead mount is not followed, and its name is in no
 * table: the caller's check of the directory then says ENOTCONN, as before). NULL when
 * neither resolves.
 */
static char *canonical_mountpoint(const char *mountpoint)
{
	char *path = realpath(mountpoint, NULL), *copy = NULL, *parent = NULL, *name;
	size_t len;

	if (path || errno != ENOTCONN)
		return path;
	copy = strdup(mountpoint);
	if (!copy)
		return NULL;
	for (len = strlen(copy); len > 1 && copy[len - 1] == '/'; len--)
		copy[len - 1] = '\0';
	name = strrchr(copy, '/');
	if (name && name != copy) {
		*name++ = '\0';
		parent = realpath(copy, NULL);
	} else {
		parent = realpath(name ? "/" : ".", NULL);
		name = name ? name + 1 : copy;
	}
	if (parent && *name && strcmp(name, ".") != 0 && strcmp(name, "..") != 0 &&
	    asprintf(&path, "%s/%s", strcmp(parent, "/") == 0 ? "" : parent, name) < 0)
		path = NULL;
	free(parent);
	free(copy);
	return path;
}

static bool is_fuse_type(const char *fstype)
{
	return strcmp(fstype, "fuse") == 0 || strcmp(fstype, "fuseblk") == 0 ||
	       strncmp(fstype, "fuse.", 5) == 0;
}

int fs_mountpoint_prepare(const char *mountpoint)
{
	char dev[32], fstype[64], *path = canonical_mountpoint(mountpoint);
	struct statfs st;
	int rc = 0;

	/* What cannot be resolved is left to the caller's check of the directory, and an
	 * unreadable table to the mount itself. Each dead mount cleared may uncover another:
	 * bounded, as the stack is. */
	for (unsigned cleared = 0; path && cleared < 64; cleared++) {
		if (fs_mount_top(path, dev, sizeof(dev), fstype, sizeof(fstype)) != 0 ||
		    !is_fuse_type(fstype))
			break;
		/* statfs always asks the daemon (attributes may be answered from the kernel's
		 * cache, a dead mount's too); a live spoolfs answers it without the network. */
		if (statfs(path, &st) == 0) {
			fprintf(stderr,
			        "spoolfs: %s is already a live %s mount: unmount it first "
			        "(fusermount3 -u %s); spoolfs does not mount over a FUSE mount\n",
			        path, fstype, path);
			rc = -EBUSY;
			break;
		}
		if (errno != ENOTCONN)
			break;
		/* Its daemon is gone (a cancelled CI job): nothing can be read there any more. */
		if (umount2(path, MNT_DETACH) != 0) {
			rc = -errno;
			fprintf(
			    stderr,
			    "spoolfs: %s holds a dead %s mount (its daemon is gone) that cannot "
			    "be unmounted: %s; try fusermount3 -u -z %s\n",
			    path, fstype, strerror(-rc), path);
			break;
		}
		fetch_log(FETCH_LOG_WARN,
		          "%s held a dead %s mount (its daemon is gone): lazily unmounted it", path,
		          fstype);
	}
	free(path);
	return rc;
}

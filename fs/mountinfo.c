/*
 * Which mount sits at a path, from /proc/self/mountinfo. The mount itself is never asked
 * (stat would send a request to this daemon, which may not serve requests yet, or any
 * more): the kernel's table answers without it.
 *
 * Mounts stacked on one path each name the one below as their parent, so the topmost is
 * the one no other mount at that path names. The table's line order is not that order:
 * it follows the mount namespace's list, which a propagated or moved mount enters at
 * its own place.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/fs_i.h"

struct mount_entry {
	unsigned long id;
	unsigned long parent;
	char devno[32];
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

int fs_mount_device_in(FILE *table, const char *mountpoint, char *dev, size_t len)
{
	struct mount_entry *at = NULL, e;
	char *line = NULL, where[4096];
	size_t cap = 0, n = 0;
	int rc = 0;

	errno = 0;
	while (rc == 0 && getline(&line, &cap, table) > 0) {
		if (sscanf(line, "%lu %lu %31s %*s %4095s", &e.id, &e.parent, e.devno, where) != 4)
			continue;
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
			rc = 0;
		}
	}
	free(at);
	free(line);
	return rc;
}

int fs_mount_device(const char *mountpoint, char *dev, size_t len)
{
	FILE *table = fopen("/proc/self/mountinfo", "re");
	int rc;

	if (!table)
		return -errno;
	rc = fs_mount_device_in(table, mountpoint, dev, len);
	fclose(table);
	return rc;
}

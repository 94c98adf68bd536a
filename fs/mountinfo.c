/*
 * Which mount sits at a path, from /proc/self/mountinfo. The mount itself is never asked
 * (stat would send a request to this daemon, which may not serve requests yet, or any
 * more): the kernel's table answers without it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/fs_i.h"

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

int fs_mount_device(const char *mountpoint, char *dev, size_t len)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL;
	size_t cap = 0;
	int rc = -ENOENT;

	if (!f)
		return -errno;
	errno = 0;
	while (getline(&line, &cap, f) > 0) {
		char devno[64], where[4096];
		if (sscanf(line, "%*s %*s %63s %*s %4095s", devno, where) != 2)
			continue;
		unescape(where);
		if (strcmp(where, mountpoint) == 0) {
			snprintf(dev, len, "%s", devno);
			rc = 0; /* later lines are newer mounts, on top: keep looking */
		}
	}
	/* A short read (ENOMEM) must not pass for the end of the table. */
	if (ferror(f) || errno == ENOMEM)
		rc = -(errno ? errno : EIO);
	free(line);
	fclose(f);
	return rc;
}

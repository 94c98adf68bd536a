/*
 * The StrictModes walk of path_trust.h: each prefix of a canonical path, from the path up
 * to "/", examined with lstat (a symlink there means the path was not canonical).
 */
#include "fetch/cache/path_trust.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Why st, the directory `dir`, lets someone other than root or us change what names lead
 * to, or NULL. */
static const char *dir_untrusted(const struct stat *st, char *said, size_t said_len)
{
	if (S_ISLNK(st->st_mode))
		return "is a symbolic link";
	if (!S_ISDIR(st->st_mode))
		return "is not a directory";
	if (st->st_uid != 0 && st->st_uid != geteuid()) {
		snprintf(said, said_len, "is owned by uid %u, not root or uid %u",
		         (unsigned)st->st_uid, (unsigned)geteuid());
		return said;
	}
	if ((st->st_mode & (S_IWGRP | S_IWOTH)) && !(st->st_mode & S_ISVTX)) {
		snprintf(said, said_len,
		         "is writable by group or others without the sticky bit "
		         "(mode %04o)",
		         (unsigned)(st->st_mode & 07777));
		return said;
	}
	return NULL;
}

int fetch_path_trusted(const char *path, char *why, size_t why_len)
{
	char *prefix = strdup(path);
	char said[96];
	struct stat st;
	int rc = 0;

	if (why_len)
		why[0] = '\0';
	if (!prefix)
		return -ENOMEM;
	if (path[0] != '/') {
		snprintf(why, why_len, "%s is not an absolute path", path);
		rc = -EINVAL;
		goto out;
	}
	for (;;) {
		const char *fault;
		char *slash;
		if (lstat(prefix[0] ? prefix : "/", &st) != 0) {
			rc = -errno;
			snprintf(why, why_len, "%s cannot be examined: %s",
			         prefix[0] ? prefix : "/", strerror(errno));
			goto out;
		}
		fault = dir_untrusted(&st, said, sizeof(said));
		if (fault) {
			snprintf(why, why_len, "%s %s", prefix[0] ? prefix : "/", fault);
			rc = -EACCES;
			goto out;
		}
		if (!prefix[0])
			break;
		slash = strrchr(prefix, '/');
		*slash = '\0'; /* "/a" becomes "", which stands for "/" */
	}
out:
	free(prefix);
	return rc;
}

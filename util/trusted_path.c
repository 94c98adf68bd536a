/*
 * User-given paths opened under one rule (see trusted_path.h).
 *
 * A path is resolved here, component by component, rather than by realpath: realpath
 * follows any symlink (one another user planted in /tmp too: readlink is not subject to
 * the kernel's protected_symlinks), and says nothing about who could change the directories
 * it passed. Each directory entered and each symlink met is examined as it is reached,
 * with lstat; the canonical path that comes out is then opened with O_NOFOLLOW and
 * checked to be the directory examined last. Between the two no one else can change it:
 * every directory on it is root's or ours, and not writable by others.
 */
#include "util/trusted_path.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/say.h"

/* As the kernel's MAXSYMLINKS: a longer chain is a loop. */
#define MAX_LINKS 40

static bool owner_trusted(uid_t uid)
{
	return uid == 0 || uid == geteuid();
}

/* Why st, a directory, lets someone other than root or us change what names in it lead to,
 * or NULL. */
static const char *dir_untrusted(const struct stat *st, char *said, size_t said_len)
{
	if (!S_ISDIR(st->st_mode))
		return "is not a directory";
	if (!owner_trusted(st->st_uid)) {
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

/* The directory out names ("" for "/"), examined: 0 or -EACCES, said. */
static int check_dir(const char *out, const struct stat *st, char *why, size_t why_len)
{
	char said[96];
	const char *fault = dir_untrusted(st, said, sizeof(said));

	if (!fault)
		return 0;
	(void)util_say(why, why_len, "%s %s", out[0] ? out : "/", fault);
	return S_ISDIR(st->st_mode) ? -EACCES : -ENOTDIR;
}

/*
 * Resolves path into out (PATH_MAX bytes, canonical, "" standing for "/"), examining each
 * directory entered and each symlink met; *last is the lstat of the directory it names.
 */
static int resolve(const char *path, int flags, char *out, struct stat *last, char *why,
                   size_t why_len)
{
	char *todo = NULL, target[PATH_MAX];
	size_t len = 0;
	int links = 0, rc;

	out[0] = '\0';
	if (path[0] != '/') {
		char cwd[PATH_MAX];
		if (flags & UTIL_TRUST_NO_SYMLINKS) {
			(void)util_say(why, why_len, "%s is not an absolute path", path);
			return -EINVAL;
		}
		if (!getcwd(cwd, sizeof(cwd))) {
			rc = -errno;
			(void)util_say(why, why_len, "%s: the working directory: %s", path,
			               strerror(errno));
			return rc;
		}
		if (asprintf(&todo, "%s/%s", cwd, path) < 0)
			return -ENOMEM;
	} else if (!(todo = strdup(path))) {
		return -ENOMEM;
	}
	if (lstat("/", last) != 0) {
		rc = -errno;
		(void)util_say(why, why_len, "/ cannot be examined: %s", strerror(errno));
		goto out;
	}
	if ((rc = check_dir(out, last, why, why_len)) != 0)
		goto out;
	for (char *p = todo; *p;) {
		size_t clen;
		char *next;
		p += strspn(p, "/");
		if (!*p)
			break;
		clen = strcspn(p, "/");
		next = p + clen;
		if (clen == 1 && p[0] == '.') {
			p = next;
			continue;
		}
		if (clen == 2 && p[0] == '.' && p[1] == '.') {
			/* out is canonical (no link left in it): its parent is the path's. */
			while (len > 0 && out[len - 1] != '/')
				len--;
			if (len > 0)
				len--;
			out[len] = '\0';
			if (lstat(len ? out : "/", last) != 0) {
				rc = -errno;
				(void)util_say(
				    why, why_len,
				    "%s (the directory \"..\" leads to) cannot be examined: %s",
				    len ? out : "/", strerror(errno));
				goto out;
			}
			p = next;
			continue;
		}
		if (len + 1 + clen >= PATH_MAX) {
			(void)util_say(why, why_len, "%.64s...: path too long", todo);
			rc = -ENAMETOOLONG;
			goto out;
		}
		size_t parent_len = len;
		out[len++] = '/';
		memcpy(out + len, p, clen);
		len += clen;
		out[len] = '\0';
		if (lstat(out, last) != 0) {
			rc = -errno;
			(void)util_say(why, why_len, "%s cannot be examined: %s", out,
			               strerror(errno));
			goto out;
		}
		if (S_ISLNK(last->st_mode)) {
			ssize_t n;
			char *rest;
			if (flags & UTIL_TRUST_NO_SYMLINKS) {
				(void)util_say(why, why_len, "%s is a symbolic link", out);
				rc = -EACCES;
				goto out;
			}
			if (!owner_trusted(last->st_uid)) {
				(void)util_say(
				    why, why_len,
				    "%s is a symbolic link owned by uid %u, not root or uid %u",
				    out, (unsigned)last->st_uid, (unsigned)geteuid());
				rc = -EACCES;
				goto out;
			}
			if (++links > MAX_LINKS) {
				(void)util_say(why, why_len, "%s: too many symbolic links", out);
				rc = -ELOOP;
				goto out;
			}
			n = readlink(out, target, sizeof(target) - 1);
			if (n < 0) {
				rc = -errno;
				(void)util_say(why, why_len, "%s cannot be read: %s", out,
				               strerror(errno));
				goto out;
			}
			target[n] = '\0';
			if (asprintf(&rest, "%s/%s", target, next) < 0) {
				rc = -ENOMEM;
				goto out;
			}
			free(todo);
			todo = p = rest;
			len = target[0] == '/' ? 0 : parent_len;
			out[len] = '\0';
			/* Where the link's target starts from: what the path names if it ends here.
			 */
			if (lstat(len ? out : "/", last) != 0) {
				rc = -errno;
				(void)util_say(
				    why, why_len,
				    "%s (where the link %s starts from) cannot be examined: %s",
				    len ? out : "/", target, strerror(errno));
				goto out;
			}
			continue;
		}
		if ((rc = check_dir(out, last, why, why_len)) != 0)
			goto out;
		p = next;
	}
	rc = 0;
out:
	free(todo);
	return rc;
}

int util_path_trusted(const char *path, int flags, char *why, size_t why_len)
{
	char out[PATH_MAX];
	struct stat st;

	if (why_len)
		why[0] = '\0';
	return resolve(path, flags, out, &st, why, why_len);
}

int util_trusted_dir(const char *path, char **canonical, char *why, size_t why_len)
{
	char out[PATH_MAX];
	struct stat examined, opened;
	int fd, rc;

	if (why_len)
		why[0] = '\0';
	rc = resolve(path, 0, out, &examined, why, why_len);
	if (rc)
		return rc;
	fd = open(out[0] ? out : "/", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		(void)util_say(why, why_len, "%s cannot be opened: %s", out[0] ? out : "/",
		               strerror(errno));
		return rc;
	}
	if (fstat(fd, &opened) != 0 || opened.st_dev != examined.st_dev ||
	    opened.st_ino != examined.st_ino) {
		(void)util_say(why, why_len, "%s changed while it was examined",
		               out[0] ? out : "/");
		rc = -EAGAIN;
		goto fail;
	}
	if (canonical && !(*canonical = strdup(out[0] ? out : "/"))) {
		rc = -ENOMEM;
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return rc;
}

static bool name_refused(const char *name)
{
	return !name[0] || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
}

int util_trusted_parent(const char *path, int *dir_fd, char **name, char **full, char *why,
                        size_t why_len)
{
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	char *dir = NULL, *canonical = NULL;
	int fd = -1, rc;

	*dir_fd = -1;
	*name = NULL;
	if (full)
		*full = NULL;
	if (why_len)
		why[0] = '\0';
	if (name_refused(base)) {
		(void)util_say(why, why_len, "%s: name a file, not a directory", path);
		return -EINVAL;
	}
	dir = !slash          ? strdup(".")
	      : slash == path ? strdup("/")
	                      : strndup(path, (size_t)(slash - path));
	if (!dir)
		return -ENOMEM;
	fd = util_trusted_dir(dir, &canonical, why, why_len);
	if (fd < 0) {
		rc = fd;
		fd = -1;
		goto out;
	}
	rc = -ENOMEM;
	if (!(*name = strdup(base)))
		goto out;
	if (full &&
	    asprintf(full, "%s%s%s", canonical, strcmp(canonical, "/") ? "/" : "", base) < 0) {
		*full = NULL;
		goto out;
	}
	*dir_fd = fd;
	fd = -1;
	rc = 0;
out:
	if (rc) {
		free(*name);
		*name = NULL;
	}
	if (fd >= 0)
		close(fd);
	free(canonical);
	free(dir);
	return rc;
}

/* Why the file st, opened how, is refused, or NULL; *rc says how. No allocation. */
static const char *file_refused(const struct stat *st, enum util_trusted_how how, int *rc)
{
	*rc = -EACCES;
	if (!S_ISREG(st->st_mode)) {
		*rc = -EINVAL;
		return "is not a regular file";
	}
	if (!owner_trusted(st->st_uid))
		return "is owned by another user";
	/* Reading a file others may change would take their words for ours (a
	 * credential_process to run, a CA to trust, a password to send), whoever we run as:
	 * ssh refuses such a config for every user too. */
	if (how != UTIL_TRUSTED_APPEND && (st->st_mode & (S_IWGRP | S_IWOTH)))
		return "is writable by group or others";
	/* A second name for a file of root's, linked in a sticky /tmp where the kernel does not
	 * protect hard links. */
	if (how == UTIL_TRUSTED_APPEND && st->st_nlink > 1)
		return "has more than one hard link";
	return NULL;
}

int util_trusted_openat(int dir_fd, const char *name, enum util_trusted_how how, char *why,
                        size_t why_len)
{
	int flags = O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
	const char *fault;
	struct stat st;
	int fd, rc;

	if (name_refused(name)) {
		(void)util_say(why, why_len, "%s: name a file, not a directory", name);
		return -EINVAL;
	}
	flags |= how == UTIL_TRUSTED_APPEND ? O_WRONLY | O_APPEND | O_CREAT : O_RDONLY;
	/* A device's open runs its driver (a tape rewinds, a tty becomes ours): what is there
	 * is looked at first. The fstat after the open still decides (it may have changed). */
	if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode) &&
	    !S_ISLNK(st.st_mode)) {
		(void)util_say(why, why_len,
		               "%s is not a regular file (uid %u, mode %04o): refused", name,
		               (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
		return -EINVAL;
	}
	fd = openat(dir_fd, name, flags, 0600);
	if (fd < 0) {
		rc = -errno;
		/* O_NOFOLLOW's answer for a final symlink. */
		if (rc == -ELOOP)
			(void)util_say(why, why_len,
			               "%s is a symbolic link (name the file it leads to)", name);
		else
			(void)util_say(why, why_len, "%s: %s", name, strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st) != 0) {
		rc = -errno;
		goto fail;
	}
	fault = file_refused(&st, how, &rc);
	if (fault) {
		(void)util_say(why, why_len, "%s %s (uid %u, mode %04o): refused", name, fault,
		               (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
		goto fail;
	}
	/* O_NONBLOCK was for the open only (a FIFO would have waited for a writer). */
	if (fcntl(fd, F_SETFL, flags & O_APPEND) != 0) {
		rc = -errno;
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return rc;
}

/* The path a trusted symlink name in dir full/.. leads to (malloc'd), or -errno, said. */
static int follow_last(int dir_fd, const char *name, const char *full, char **next, char *why,
                       size_t why_len)
{
	char target[PATH_MAX];
	struct stat st;
	ssize_t n;

	if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISLNK(st.st_mode))
		return -ELOOP;
	if (!owner_trusted(st.st_uid)) {
		(void)util_say(why, why_len,
		               "%s is a symbolic link owned by uid %u, not root or uid %u", full,
		               (unsigned)st.st_uid, (unsigned)geteuid());
		return -EACCES;
	}
	n = readlinkat(dir_fd, name, target, sizeof(target) - 1);
	if (n < 0)
		return -errno;
	target[n] = '\0';
	if (target[0] == '/')
		*next = strdup(target);
	else if (asprintf(next, "%.*s/%s", (int)(strrchr(full, '/') - full), full, target) < 0)
		*next = NULL;
	return *next ? 0 : -ENOMEM;
}

int util_trusted_open(const char *path, enum util_trusted_how how, char *why, size_t why_len)
{
	char *name = NULL, *full = NULL, *next = NULL;
	int dir_fd, fd, links = 0;

	for (;;) {
		fd = util_trusted_parent(next ? next : path, &dir_fd, &name, &full, why, why_len);
		if (fd < 0)
			break;
		fd = util_trusted_openat(dir_fd, name, how, why, why_len);
		/* The message names the whole path, not the last component only. */
		if (fd < 0 && why_len) {
			char *said = strdup(why);
			if (said && strncmp(said, name, strlen(name)) == 0)
				(void)util_say(why, why_len, "%s%s", full, said + strlen(name));
			free(said);
		}
		free(next);
		next = NULL;
		if (fd == -ELOOP && how == UTIL_TRUSTED_READ_FOLLOW && links++ < MAX_LINKS) {
			int rc = follow_last(dir_fd, name, full, &next, why, why_len);
			if (rc)
				fd = rc;
		}
		close(dir_fd);
		free(name);
		free(full);
		name = full = NULL;
		if (!next)
			break;
	}
	free(next);
	return fd;
}

/* A fresh temporary's name for name: random, so another user cannot make it first (in a
 * sticky directory, one they own could be neither opened nor removed). */
static int temp_name(const char *name, char *tmp, size_t tmp_len)
{
	unsigned char r[8];

	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		return -errno;
	if (snprintf(tmp, tmp_len, ".%.200s.%02x%02x%02x%02x%02x%02x%02x%02x.tmp", name, r[0], r[1],
	             r[2], r[3], r[4], r[5], r[6], r[7]) >= (int)tmp_len)
		return -ENAMETOOLONG;
	return 0;
}

int util_trusted_replace(int dir_fd, const char *name, mode_t mode, int (*fill)(int fd, void *ctx),
                         void *ctx)
{
	char tmp[NAME_MAX + 1];
	int fd = -1, rc;

	if (name_refused(name))
		return -EINVAL;
	for (int tries = 0; fd < 0 && tries < 4; tries++) {
		if ((rc = temp_name(name, tmp, sizeof(tmp))) != 0)
			return rc;
		fd =
		    openat(dir_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 && errno != EEXIST)
			break;
	}
	if (fd < 0)
		return -errno;
	rc = fill(fd, ctx);
	if (rc == 0 && fchmod(fd, mode) != 0)
		rc = -errno;
	/* The bytes are on disk before the name says the file is whole (the record is the
	 * next run's prefetch list). */
	if (rc == 0 && fsync(fd) != 0)
		rc = -errno;
	if (close(fd) != 0 && rc == 0)
		rc = -errno;
	/* renameat replaces the name itself, whatever it is (a symlink too): nothing at it is
	 * followed. */
	if (rc == 0 && renameat(dir_fd, tmp, dir_fd, name) != 0)
		rc = -errno;
	if (rc)
		unlinkat(dir_fd, tmp, 0);
	return rc;
}

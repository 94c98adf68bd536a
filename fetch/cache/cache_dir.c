/*
 * The cache directory's life cycle (see cache_dir.h): every entry is reached through the
 * directory's fd with O_NOFOLLOW or AT_SYMLINK_NOFOLLOW, and checked with
 * index_records_file_unsafe before it is used.
 */
#include "fetch/cache/cache_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "util/trusted_path.h"
#include "index/records.h"

struct cache_dir {
	const char *arg; /* cache_dir_open's path; only during cache_dir_open */
	char *path;      /* the directory in use: canonical once opened */
	bool named;      /* named by the user, not the session's own */
	bool made;       /* a named directory that did not exist: removed when emptied */
	bool alone;      /* lock_fd holds DIR/lock exclusive (no other mount) */
	int fd;          /* the directory, checked ours: all access goes by it */
	int spool_fd;    /* its "spool" directory, also checked ours */
	int kept_fd;     /* its "namespaces" directory (cache_dir_kept_fd), or -1 until used */
	int lock_fd;     /* flock on DIR/lock for the process's life, or -1 */
};

/* The directory of kept namespaces (fetch/cache/kept.h). */
#define KEPT_DIR "namespaces"

/* Every file of ours in the directory besides lock and spool: checked, and deleted. */
static const char *const cache_files[] = {"index.db", "index.db-wal", "index.db-shm",
                                          "index.db-journal", "leases"};

/*
 * One line for a cache directory, or an entry in it, we will not use: why, and for one that
 * is not ours to use (rc -EPERM, -ELOOP, -ENOTDIR) what to do about it. rc passes through.
 */
static int refuse(const struct cache_dir *cd, const char *entry, const char *why, int rc, char *err,
                  size_t err_len)
{
	bool unsafe = rc == -EPERM || rc == -ELOOP || rc == -ENOTDIR;
	const char *advice = !unsafe        ? ""
	                     : entry        ? ": refused (remove it)"
	                     : rc == -EPERM ? ": refused: only the mount's user may write in its "
	                                      "cache directory (chown it to that user and chmod "
	                                      "it 0700, or choose a local one: an NFS export "
	                                      "with root_squash gives root's files to nobody)"
	                                    : ": refused";

	snprintf(err, err_len, "%s%s%s%s%s%s", cd->path ? cd->path : cd->arg, entry ? "/" : "",
	         entry ? entry : "", unsafe ? " " : ": ", why, advice);
	return rc;
}

/*
 * Opens the directory once, never through a symbolic link, and checks that only we can
 * write in it. A named directory that does not exist is made 0700.
 */
static int open_dir(struct cache_dir *cd, char *err, size_t err_len)
{
	const char *why = NULL;
	struct stat st;
	int rc;

	free(cd->path);
	cd->path = NULL;
	if (cd->named) {
		/* A trailing '/' would make open follow a link as the last component. */
		size_t len = strlen(cd->arg);
		while (len > 1 && cd->arg[len - 1] == '/')
			len--;
		cd->path = strndup(cd->arg, len);
		if (!cd->path)
			return refuse(cd, NULL, "cannot be opened: out of memory", -ENOMEM, err,
			              err_len);
		for (int tries = 0; tries < 4; tries++) {
			cd->fd = open(cd->path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (cd->fd >= 0 || errno != ENOENT)
				break;
			if (mkdir(cd->path, 0700) == 0)
				cd->made = true;
			else if (errno != EEXIST)
				break;
		}
	} else {
		if (asprintf(&cd->path, "%s/spoolfs-XXXXXX", cd->arg) < 0) {
			cd->path = NULL;
			return refuse(cd, NULL, "cannot be opened: out of memory", -ENOMEM, err,
			              err_len);
		}
		if (mkdtemp(cd->path))
			cd->fd = open(cd->path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	}
	if (cd->fd < 0) {
		rc = -errno;
		if (rc == -ENOTDIR || rc == -ELOOP)
			why = lstat(cd->path, &st) == 0 && S_ISLNK(st.st_mode)
			          ? "is a symbolic link"
			          : "is not a directory";
		return refuse(cd, NULL, why ? why : strerror(-rc), rc, err, err_len);
	}
	if (fstat(cd->fd, &st) != 0)
		return refuse(cd, NULL, strerror(errno), -errno, err, err_len);
	why = index_records_file_unsafe(&st, S_IFDIR);
	if (why) {
		char said[128];
		snprintf(said, sizeof(said), "%s (uid %u, mode %04o)", why, (unsigned)st.st_uid,
		         (unsigned)(st.st_mode & 07777));
		return refuse(cd, NULL, said, -EPERM, err, err_len);
	}
	/* Canonical for sqlite and the status tool, and checked by index_records_open_at to still
	 * name this directory. */
	char *canonical = realpath(cd->path, NULL);
	if (!canonical)
		return refuse(cd, NULL, strerror(errno), -errno, err, err_len);
	free(cd->path);
	cd->path = canonical;
	/* sqlite opens index.db by this name: no one but root or us may rename a directory on
	 * it. */
	char why_path[PATH_MAX + 128], said[PATH_MAX + 400];
	rc = util_path_trusted(cd->path, UTIL_TRUST_NO_SYMLINKS, why_path, sizeof(why_path));
	if (rc == 0)
		return 0;
	snprintf(said, sizeof(said),
	         "refused: %s: every directory above the cache directory must be owned by root or "
	         "the mount's user (uid %u) and writable by no one else unless sticky (chown or "
	         "chmod it, or choose another directory%s)",
	         why_path, (unsigned)geteuid(), cd->named ? "" : " with TMPDIR");
	return refuse(cd, NULL, said, rc, err, err_len);
}

/* Whether DIR/lock still names the file fd holds locked: a last mount out deletes it. */
static bool lock_still_named(const struct cache_dir *cd, int fd)
{
	struct stat locked, named;

	return fstat(fd, &locked) == 0 &&
	       fstatat(cd->fd, "lock", &named, AT_SYMLINK_NOFOLLOW) == 0 &&
	       named.st_ino == locked.st_ino && named.st_dev == locked.st_dev;
}

/*
 * A mount that starts during a last mount's clean-up waits for it, and retries if the file
 * it locked was the one the clean-up deleted.
 */
static int lock_dir(struct cache_dir *cd, char *err, size_t err_len)
{
	const char *why;
	struct stat st;
	int fd = -1, rc = 0;

	for (;;) {
		fd = openat(cd->fd, "lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK,
		            0600);
		/* The last mount out removed the directory it had made while we waited: ours is
		 * gone from the tree, the name may hold a new one. */
		if (fd < 0 && errno == ENOENT && cd->named) {
			close(cd->fd);
			cd->fd = -1;
			rc = open_dir(cd, err, err_len);
			if (rc)
				break;
			continue;
		}
		if (fd < 0) {
			rc = refuse(cd, "lock",
			            errno == ELOOP ? "is a symbolic link" : strerror(errno), -errno,
			            err, err_len);
			break;
		}
		why =
		    fstat(fd, &st) == 0 ? index_records_file_unsafe(&st, S_IFREG) : strerror(errno);
		if (why) {
			rc = refuse(cd, "lock", why, -EPERM, err, err_len);
			break;
		}
		/* Exclusive while the first mount opens the index: see cache_dir_share. */
		cd->alone = flock(fd, LOCK_EX | LOCK_NB) == 0;
		if (!cd->alone && flock(fd, LOCK_SH) != 0) {
			rc = refuse(cd, "lock", strerror(errno), -errno, err, err_len);
			break;
		}
		if (lock_still_named(cd, fd)) {
			cd->lock_fd = fd;
			fd = -1;
			break;
		}
		close(fd);
	}
	if (fd >= 0)
		close(fd);
	return rc;
}

/*
 * Opens the directory `name` in the cache directory into *fd, made 0700 first when make (else
 * -ENOENT when it is not there), and checks it is ours. 0 or -errno, said in err.
 */
static int open_subdir(struct cache_dir *cd, const char *name, bool make, int *fd, char *err,
                       size_t err_len)
{
	const char *why;
	struct stat st;
	int rc;

	if (make && mkdirat(cd->fd, name, 0700) != 0 && errno != EEXIST)
		return refuse(cd, name, strerror(errno), -errno, err, err_len);
	*fd = openat(cd->fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (*fd < 0) {
		rc = -errno;
		if (rc == -ENOENT && !make)
			return rc;
		why = index_records_file_unsafe_at(cd->fd, name, S_IFDIR);
		return refuse(cd, name, why ? why : strerror(-rc), rc, err, err_len);
	}
	why = fstat(*fd, &st) == 0 ? index_records_file_unsafe(&st, S_IFDIR) : strerror(errno);
	if (why)
		return refuse(cd, name, why, -EPERM, err, err_len);
	return 0;
}

static int open_spool(struct cache_dir *cd, char *err, size_t err_len)
{
	return open_subdir(cd, "spool", true, &cd->spool_fd, err, err_len);
}

int cache_dir_open(const char *path, bool named_by_user, struct cache_dir **out, char *err,
                   size_t err_len)
{
	struct cache_dir *cd;
	const char *why;
	int rc;

	*out = NULL;
	cd = calloc(1, sizeof(*cd));
	if (!cd) {
		snprintf(err, err_len, "%s: %s", path, strerror(ENOMEM));
		return -ENOMEM;
	}
	cd->arg = path;
	cd->named = named_by_user;
	cd->fd = cd->spool_fd = cd->kept_fd = cd->lock_fd = -1;
	rc = open_dir(cd, err, err_len);
	if (rc == 0)
		rc = lock_dir(cd, err, err_len);
	if (rc == 0)
		rc = open_spool(cd, err, err_len);
	/* Each of them may hold what an earlier session kept (and sqlite opens index.db by
	 * name, with its sidecars): one planted there is refused now, not at every use, and
	 * left for the operator to remove. */
	for (size_t i = 0; rc == 0 && i < sizeof(cache_files) / sizeof(cache_files[0]); i++) {
		why = index_records_file_unsafe_at(cd->fd, cache_files[i], S_IFREG);
		if (why)
			rc = refuse(cd, cache_files[i], why, -EPERM, err, err_len);
	}
	why = rc == 0 ? index_records_file_unsafe_at(cd->fd, KEPT_DIR, S_IFDIR) : NULL;
	if (why)
		rc = refuse(cd, KEPT_DIR, why, -EPERM, err, err_len);
	cd->arg = NULL;
	if (rc) {
		/* Only what this open made goes: a named directory that was there stays. */
		cache_dir_close(cd, !cd->made);
		return rc;
	}
	*out = cd;
	return 0;
}

int cache_dir_fd(const struct cache_dir *cd)
{
	return cd->fd;
}

int cache_dir_spool_fd(const struct cache_dir *cd)
{
	return cd->spool_fd;
}

int cache_dir_kept_fd(struct cache_dir *cd, bool make, char *err, size_t err_len)
{
	int fd = -1, rc;

	if (cd->kept_fd >= 0)
		return cd->kept_fd;
	rc = open_subdir(cd, KEPT_DIR, make, &fd, err, err_len);
	if (rc) {
		if (fd >= 0)
			close(fd);
		return rc;
	}
	cd->kept_fd = fd;
	return fd;
}

const char *cache_dir_path(const struct cache_dir *cd)
{
	return cd->path;
}

bool cache_dir_made(const struct cache_dir *cd)
{
	return cd->made;
}

bool cache_dir_alone(const struct cache_dir *cd)
{
	return cd->alone;
}

int cache_dir_share(struct cache_dir *cd, char *err, size_t err_len)
{
	int rc = 0;

	if (!cd->alone)
		return 0;
	if (flock(cd->lock_fd, LOCK_SH) != 0)
		rc = refuse(cd, "lock", strerror(errno), -errno, err, err_len);
	else if (!lock_still_named(cd, cd->lock_fd))
		rc = refuse(cd, NULL, "was cleaned up by the last mount out while this one started",
		            -ESTALE, err, err_len);
	cd->alone = false;
	return rc;
}

/*
 * Deletes what a directory of ours (spool, namespaces) holds, by name through its fd: a
 * symbolic link found there goes itself, never what it points to; a directory (never ours)
 * stays.
 */
static void empty_dir(int dirfd)
{
	int fd = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
	DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;

	if (!dir) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((e = readdir(dir)))
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			unlinkat(dirfd, e->d_name, 0);
	closedir(dir);
}

/* Only our own files go, by name through the directory's fd; the directory itself goes if
 * it is ours. A directory that other mounts still use is left to the last of them. */
static void remove_files(struct cache_dir *cd, bool keep)
{
	if (cd->fd < 0 || (cd->named && keep))
		return;
	/* Refused before the lock was taken: nothing was made in it, and only a directory this
	 * open made (still empty, so rmdir takes nothing else) goes. */
	if (cd->lock_fd < 0) {
		if (!cd->named || cd->made)
			rmdir(cd->path);
		return;
	}
	/* Exclusive only when no other mount holds its shared lock: we are the last one. */
	if (cd->named && flock(cd->lock_fd, LOCK_EX | LOCK_NB) != 0)
		return;
	for (size_t i = 0; i < sizeof(cache_files) / sizeof(cache_files[0]); i++)
		unlinkat(cd->fd, cache_files[i], 0);
	if (cd->spool_fd >= 0) {
		empty_dir(cd->spool_fd);
		unlinkat(cd->fd, "spool", AT_REMOVEDIR);
	}
	/* Kept namespaces, which a --keep-cache mount left, go with the rest: opened here when
	 * this mount did not use them. */
	if (cd->kept_fd >= 0 || open_subdir(cd, KEPT_DIR, false, &cd->kept_fd, NULL, 0) == 0) {
		empty_dir(cd->kept_fd);
		unlinkat(cd->fd, KEPT_DIR, AT_REMOVEDIR);
	}
	unlinkat(cd->fd, "lock", 0);
	/* Only an empty directory goes: anything we do not know stays with it. */
	if (!cd->named || cd->made)
		rmdir(cd->path);
}

void cache_dir_close(struct cache_dir *cd, bool keep)
{
	if (!cd)
		return;
	remove_files(cd, keep);
	if (cd->lock_fd >= 0)
		close(cd->lock_fd);
	if (cd->spool_fd >= 0)
		close(cd->spool_fd);
	if (cd->kept_fd >= 0)
		close(cd->kept_fd);
	if (cd->fd >= 0)
		close(cd->fd);
	free(cd->path);
	free(cd);
}

uint64_t cache_dir_default_bound(uint64_t fs_bytes, uint64_t free_bytes, uint64_t cache_bytes)
{
	uint64_t reserve = fs_bytes / 100 * CACHE_DIR_RESERVE_SHARE;
	uint64_t usable = free_bytes + cache_bytes;

	if (reserve < CACHE_DIR_RESERVE_MIN)
		reserve = CACHE_DIR_RESERVE_MIN;
	if (usable > reserve && usable - reserve >= CACHE_DIR_BOUND_MIN)
		return usable - reserve;
	/* A small or full disk: half of what there is, so it never fills, up to the minimum. */
	return usable / 2 < CACHE_DIR_BOUND_MIN ? usable / 2 : CACHE_DIR_BOUND_MIN;
}

int cache_dir_default_bound_of(const struct cache_dir *cd, uint64_t cache_bytes, uint64_t *bound)
{
	struct statvfs st;

	if (fstatvfs(cache_dir_fd(cd), &st) != 0)
		return -errno;
	/* f_bavail: what an unprivileged writer may use, the runner's jobs included. */
	*bound = cache_dir_default_bound((uint64_t)st.f_blocks * st.f_frsize,
	                                 (uint64_t)st.f_bavail * st.f_frsize, cache_bytes);
	return 0;
}

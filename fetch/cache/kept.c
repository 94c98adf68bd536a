/*
 * The files of kept namespaces (kept.h), in the cache directory's "namespaces" directory:
 * KEY.db (64 hex digits), and .tmp-KEY-RANDOM while one is written.
 */
#include "fetch/cache/kept.h"

#include <dirent.h>
#include <errno.h>
#include <sys/random.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "index/records.h"

#define KEY_HEX 64
#define SUFFIX ".db"
#define TMP_PREFIX ".tmp-"
/* A temporary file this old was left by a mount that died writing it. */
#define TMP_STALE_S 3600

/* "KEY.db" in name (cap bytes). -EINVAL for a key that is not 64 hex digits. */
static int kept_name(const char *key, char *name, size_t cap)
{
	if (strlen(key) != KEY_HEX || strspn(key, "0123456789abcdef") != KEY_HEX)
		return -EINVAL;
	snprintf(name, cap, "%s" SUFFIX, key);
	return 0;
}

/* Whether name is a kept namespace's. */
static bool is_kept_name(const char *name)
{
	return strlen(name) == KEY_HEX + strlen(SUFFIX) &&
	       strspn(name, "0123456789abcdef") == KEY_HEX && strcmp(name + KEY_HEX, SUFFIX) == 0;
}

/*
 * The path of name in the directory dirfd holds, for sqlite, in *path: checked to still lead
 * there (the cache directory is ours alone: what it names now, it names until we rename it).
 */
static int kept_path(struct cache_dir *cd, int dirfd, const char *name, char **path, char *err,
                     size_t err_len)
{
	struct stat held, named;
	char *dir = NULL;
	int rc = 0;

	*path = NULL;
	if (asprintf(&dir, "%s/namespaces", cache_dir_path(cd)) < 0)
		return -ENOMEM;
	if (fstat(dirfd, &held) != 0 || stat(dir, &named) != 0 || held.st_dev != named.st_dev ||
	    held.st_ino != named.st_ino) {
		snprintf(err, err_len, "%s was moved or replaced while mounting", dir);
		rc = -ESTALE;
	} else if (asprintf(path, "%s/%s", dir, name) < 0) {
		*path = NULL;
		rc = -ENOMEM;
	}
	free(dir);
	return rc;
}

int cache_kept_find(struct cache_dir *cd, const char *key, char **path, char *err, size_t err_len)
{
	char name[KEY_HEX + sizeof(SUFFIX)];
	const char *why = NULL;
	struct stat st;
	int dirfd, fd, rc;

	*path = NULL;
	rc = kept_name(key, name, sizeof(name));
	if (rc)
		return rc;
	dirfd = cache_dir_kept_fd(cd, false, err, err_len);
	if (dirfd < 0)
		return dirfd;
	/* O_NONBLOCK: a FIFO planted there must not hang the mount before it is refused. */
	fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return -ENOENT;
	if (fd < 0)
		why = errno == ELOOP ? "is a symbolic link" : strerror(errno);
	else
		why =
		    fstat(fd, &st) == 0 ? index_records_file_unsafe(&st, S_IFREG) : strerror(errno);
	/* Used now: the last to go when there are too many. */
	if (!why && futimens(fd, NULL) != 0)
		why = strerror(errno);
	if (fd >= 0)
		close(fd);
	if (why) {
		snprintf(err, err_len, "%s/namespaces/%s %s: not used (remove it)",
		         cache_dir_path(cd), name, why);
		return -EPERM;
	}
	return kept_path(cd, dirfd, name, path, err, err_len);
}

int cache_kept_remove(struct cache_dir *cd, const char *key)
{
	char name[KEY_HEX + sizeof(SUFFIX)];
	int dirfd = cache_dir_kept_fd(cd, false, NULL, 0);
	int rc = kept_name(key, name, sizeof(name));

	if (rc == 0 && dirfd < 0)
		rc = dirfd;
	if (rc == 0 && unlinkat(dirfd, name, 0) != 0)
		rc = -errno;
	return rc;
}

int cache_kept_begin(struct cache_dir *cd, const char *key, struct cache_kept_new *n, char *err,
                     size_t err_len)
{
	int dirfd, rc;

	n->fd = -1;
	n->path = NULL;
	if (strlen(key) != KEY_HEX)
		return -EINVAL;
	dirfd = cache_dir_kept_fd(cd, true, err, err_len);
	if (dirfd < 0)
		return dirfd;
	/* Random: two mounts sharing the directory from two machines (or pid namespaces) may
	 * have one pid, and each must write its own temporary. */
	unsigned char r[8];
	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		return -errno;
	snprintf(n->name, sizeof(n->name), TMP_PREFIX "%s-%02x%02x%02x%02x%02x%02x%02x%02x", key,
	         r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
	n->fd = openat(dirfd, n->name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (n->fd < 0) {
		rc = -errno;
		snprintf(err, err_len, "%s/namespaces/%s: %s", cache_dir_path(cd), n->name,
		         strerror(-rc));
		return rc;
	}
	rc = kept_path(cd, dirfd, n->name, &n->path, err, err_len);
	if (rc)
		cache_kept_abort(cd, n);
	return rc;
}

/* n done with: its fd and path let go. */
static void kept_new_free(struct cache_kept_new *n)
{
	if (n->fd >= 0)
		close(n->fd);
	n->fd = -1;
	free(n->path);
	n->path = NULL;
}

void cache_kept_abort(struct cache_dir *cd, struct cache_kept_new *n)
{
	int dirfd = cache_dir_kept_fd(cd, false, NULL, 0);

	if (n->fd >= 0 && dirfd >= 0)
		unlinkat(dirfd, n->name, 0);
	kept_new_free(n);
}

int cache_kept_commit(struct cache_dir *cd, const char *key, struct cache_kept_new *n)
{
	char name[KEY_HEX + sizeof(SUFFIX)];
	int dirfd = cache_dir_kept_fd(cd, false, NULL, 0);
	int rc = kept_name(key, name, sizeof(name));

	if (rc == 0 && dirfd < 0)
		rc = dirfd;
	/* Not synced first: a copy a crash left torn fails its checks at the next mount
	 * (index_copy_restore), which then loads the manifest; a sync would be on every first
	 * mount's path. */
	if (rc == 0 && renameat(dirfd, n->name, dirfd, name) != 0)
		rc = -errno;
	if (rc)
		cache_kept_abort(cd, n);
	else
		kept_new_free(n);
	return rc;
}

struct kept_file {
	char name[KEY_HEX + sizeof(SUFFIX)];
	struct timespec used; /* its mtime: set at each use */
	uint64_t bytes;
};

static int newest_first(const void *a, const void *b)
{
	const struct kept_file *x = a, *y = b;

	if (x->used.tv_sec != y->used.tv_sec)
		return x->used.tv_sec < y->used.tv_sec ? 1 : -1;
	return (x->used.tv_nsec < y->used.tv_nsec) - (x->used.tv_nsec > y->used.tv_nsec);
}

/*
 * The kept namespaces in dirfd into *files (malloc'd, *n of them); stale temporary files go.
 * 0 or -errno.
 */
static int list_kept(int dirfd, struct kept_file **files, size_t *n)
{
	int fd = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
	DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
	size_t cap = 0;
	struct dirent *e;
	struct stat st;
	int rc = 0;

	*files = NULL;
	*n = 0;
	if (!dir) {
		rc = -errno;
		if (fd >= 0)
			close(fd);
		return rc;
	}
	while (rc == 0 && (e = readdir(dir))) {
		if (fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		if (strncmp(e->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) == 0) {
			if (st.st_mtime < time(NULL) - TMP_STALE_S)
				unlinkat(dirfd, e->d_name, 0);
			continue;
		}
		if (!is_kept_name(e->d_name))
			continue;
		if (*n == cap) {
			size_t more = cap ? 2 * cap : 8;
			struct kept_file *grown = realloc(*files, more * sizeof(**files));
			if (!grown) {
				rc = -ENOMEM;
				break;
			}
			*files = grown;
			cap = more;
		}
		struct kept_file *f = &(*files)[(*n)++];
		snprintf(f->name, sizeof(f->name), "%s", e->d_name);
		f->used = st.st_mtim;
		f->bytes = (uint64_t)st.st_blocks * 512;
	}
	closedir(dir);
	if (rc) {
		free(*files);
		*files = NULL;
		*n = 0;
	}
	return rc;
}

int cache_kept_prune(struct cache_dir *cd, uint64_t max_bytes, uint64_t *bytes)
{
	int dirfd = cache_dir_kept_fd(cd, false, NULL, 0);
	struct kept_file *files = NULL;
	size_t n = 0, kept = 0;
	int rc;

	*bytes = 0;
	if (dirfd == -ENOENT)
		return 0;
	if (dirfd < 0)
		return dirfd;
	rc = list_kept(dirfd, &files, &n);
	if (rc)
		return rc;
	qsort(files, n, sizeof(*files), newest_first);
	for (size_t i = 0; i < n; i++) {
		if (kept < CACHE_KEPT_MAX && (!max_bytes || *bytes + files[i].bytes <= max_bytes)) {
			kept++;
			*bytes += files[i].bytes;
		} else if (unlinkat(dirfd, files[i].name, 0) != 0 && errno != ENOENT) {
			*bytes += files[i].bytes; /* still there: still counted */
		}
	}
	free(files);
	return 0;
}

/*
 * Objects of a file: mirror, kept beneath the mirror's directory (see beneath.h).
 *
 * curl opens a file: URL's path itself, after decoding it, so no check of the URL's text
 * alone can keep it inside the directory: "%2e%2e" becomes ".." there, and a symlink
 * planted inside leads anywhere. The object is opened here instead, beneath a descriptor
 * of the directory, and curl is handed that descriptor (stream.c).
 */
#include "fetch/http/beneath.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/log.h"

#if defined(SYS_openat2) && __has_include(<linux/openat2.h>)
#include <linux/openat2.h>
#define HAVE_OPENAT2 1
#endif

/* O_PATH: opening a device or a FIFO has effects of its own (a tape rewinds, a writer
 * waiting on the FIFO goes on), so nothing is opened for reading before fstat says it is a
 * regular file; curl reopens the fd through /proc/self/fd (stream.c). O_NOFOLLOW makes a
 * final symlink the fd's own object, which fstat then refuses. */
#define OBJECT_FLAGS (O_PATH | O_CLOEXEC | O_NOFOLLOW)

static bool segment_refused(const char *seg, size_t len)
{
	return len == 0 || (len == 1 && seg[0] == '.') ||
	       (len == 2 && seg[0] == '.' && seg[1] == '.') || memchr(seg, '/', len) ||
	       memchr(seg, '\\', len) || memchr(seg, '%', len) || memchr(seg, '\0', len);
}

int fetch_mirror_path(const char *rel, size_t len, char **out)
{
	char *path = malloc(len + 1), *plain = NULL;
	size_t used = 0, at = 0;
	int rc = -ENOMEM;

	*out = NULL;
	if (!path)
		goto out;
	/* Each segment decodes to no more bytes than it has, so path never overflows. */
	do {
		size_t seg_len = strcspn(rel + at, "/");
		int plain_len = 0;
		if (seg_len > len - at)
			seg_len = len - at;
		if (seg_len > (size_t)INT_MAX) {
			rc = -EINVAL;
			goto out;
		}
		plain = curl_easy_unescape(NULL, rel + at, (int)seg_len, &plain_len);
		if (!plain)
			goto out;
		if (segment_refused(plain, (size_t)plain_len)) {
			rc = -EINVAL;
			goto out;
		}
		if (used)
			path[used++] = '/';
		memcpy(path + used, plain, (size_t)plain_len);
		used += (size_t)plain_len;
		curl_free(plain);
		plain = NULL;
		at += seg_len + 1;
	} while (at <= len);
	path[used] = '\0';
	*out = path;
	path = NULL;
	rc = 0;
out:
	curl_free(plain);
	free(path);
	return rc;
}

/*
 * Without openat2: one directory at a time, none of them (nor the file) a symlink. Each
 * directory is opened O_PATH | O_NOFOLLOW, which opens a symlink itself rather than its
 * target, so that fstat tells a symlink (-ELOOP, as openat2 says) from a file (-ENOTDIR).
 */
static int open_walking(int dir_fd, const char *path)
{
	int cur = dir_fd, rc = -EINVAL;
	const char *seg = path;
	char name[NAME_MAX + 1];
	struct stat st;

	for (;;) {
		size_t len = strcspn(seg, "/");
		if (segment_refused(seg, len) || len > NAME_MAX)
			goto out;
		memcpy(name, seg, len);
		name[len] = '\0';
		bool last = seg[len] == '\0';
		int next = openat(cur, name, last ? OBJECT_FLAGS : O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0) {
			rc = -errno;
			goto out;
		}
		if (cur != dir_fd)
			close(cur);
		cur = next;
		if (last) {
			rc = cur;
			cur = dir_fd; /* handed over */
			goto out;
		}
		if (fstat(cur, &st) != 0) {
			rc = -errno;
			goto out;
		}
		if (!S_ISDIR(st.st_mode)) {
			rc = S_ISLNK(st.st_mode) ? -ELOOP : -ENOTDIR;
			goto out;
		}
		seg += len + 1;
	}
out:
	if (cur != dir_fd)
		close(cur);
	return rc;
}

int fetch_open_beneath(int dir_fd, const char *path)
{
	const char *test_env = getenv("SPOOLFS_TEST_NO_OPENAT2");
	bool no_openat2 = test_env && strcmp(test_env, "1") == 0;
	struct stat st;
	int fd = -ENOSYS;

#ifdef HAVE_OPENAT2
	if (!no_openat2) {
		struct open_how how = {.flags = OBJECT_FLAGS,
		                       .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
		                                  RESOLVE_NO_MAGICLINKS};
		fd = (int)syscall(SYS_openat2, dir_fd, path, &how, sizeof(how));
		if (fd < 0)
			fd = -errno;
	}
#else
	(void)no_openat2;
#endif
	/* ENOSYS: a kernel before 5.6; EPERM: a seccomp filter that does not know it. The
	 * walk is as strict, only slower. */
	if (fd == -ENOSYS || fd == -EPERM) {
		/* Said once, so that one can tell which of the two guards a mount. */
		static atomic_bool said; /* no lock: only ever set */
		if (!atomic_exchange(&said, true))
			util_log(
			    UTIL_LOG_INFO,
			    "file: mirrors: no openat2 (%s): objects are opened by a walk that "
			    "follows no symlink",
			    no_openat2 ? "SPOOLFS_TEST_NO_OPENAT2" : strerror(-fd));
		fd = open_walking(dir_fd, path);
	}
	if (fd < 0)
		return fd;
	int rc = fstat(fd, &st) != 0   ? -errno
	         : S_ISREG(st.st_mode) ? 0
	         : S_ISLNK(st.st_mode) ? -ELOOP
	                               : -EINVAL;
	if (rc) {
		close(fd);
		return rc;
	}
	return fd;
}

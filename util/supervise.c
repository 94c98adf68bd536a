/*
 * util/supervise.h: the pieces of a supervisor that need no FUSE. See the header.
 */
#include "util/supervise.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

void util_restarts_init(struct util_restarts *r, unsigned max_failed_starts, unsigned max_in_window,
                        unsigned window_s)
{
	memset(r, 0, sizeof(*r));
	r->max_failed_starts = max_failed_starts;
	r->max_in_window =
	    max_in_window > UTIL_RESTART_WINDOW_MAX ? UTIL_RESTART_WINDOW_MAX : max_in_window;
	r->window_s = window_s;
}

int util_restarts_note(struct util_restarts *r, uint64_t now_ns, bool was_ready, char *why,
                       size_t why_len)
{
	uint64_t window_ns = (uint64_t)r->window_s * 1000000000ULL;
	unsigned in_window = 0;

	r->failed_in_row = was_ready ? 0 : r->failed_in_row + 1;
	if (r->failed_in_row >= r->max_failed_starts) {
		snprintf(why, why_len, "%u serving processes in a row died before serving",
		         r->failed_in_row);
		return -1;
	}
	for (unsigned i = 0; i < r->n_recent; i++)
		if (now_ns - r->recent_ns[i] < window_ns)
			in_window++;
	if (in_window >= r->max_in_window) {
		snprintf(why, why_len, "%u restarts within %u s", in_window + 1, r->window_s);
		return -1;
	}
	r->recent_ns[r->next] = now_ns;
	r->next = (r->next + 1) % r->max_in_window;
	if (r->n_recent < r->max_in_window)
		r->n_recent++;
	r->total++;
	return 0;
}

void util_describe_exit(int status, char *buf, size_t len)
{
	if (WIFSIGNALED(status))
		snprintf(buf, len, "killed by signal %d (%s)%s", WTERMSIG(status),
		         strsignal(WTERMSIG(status)), WCOREDUMP(status) ? ", core dumped" : "");
	else if (WIFEXITED(status))
		snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
	else
		snprintf(buf, len, "ended (wait status %#x)", (unsigned)status);
}

int util_strings_write(int fd, const char *const *v, size_t n)
{
	off_t off = 0;

	if (ftruncate(fd, 0) != 0)
		return -errno;
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(v[i]) + 1;
		for (size_t done = 0; done < len;) {
			ssize_t w = pwrite(fd, v[i] + done, len - done, off);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				return w < 0 ? -errno : -EIO;
			done += (size_t)w;
			off += w;
		}
	}
	return 0;
}

void util_strings_free(char **v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

/* The whole of fd from its start, NUL-terminated for the scan (not counted in *len). */
static int read_all(int fd, char **out, size_t *len)
{
	size_t cap = 4096, used = 0;
	char *buf = malloc(cap), *bigger;

	if (!buf)
		return -ENOMEM;
	for (;;) {
		if (used + 1 >= cap) {
			bigger = cap > (64u << 20) ? NULL : realloc(buf, cap * 2);
			if (!bigger) {
				free(buf);
				return cap > (64u << 20) ? -EFBIG : -ENOMEM;
			}
			buf = bigger;
			cap *= 2;
		}
		ssize_t r = pread(fd, buf + used, cap - used - 1, (off_t)used);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int rc = -errno;
			free(buf);
			return rc;
		}
		if (r == 0)
			break;
		used += (size_t)r;
	}
	buf[used] = '\0';
	*out = buf;
	*len = used;
	return 0;
}

int util_strings_read(int fd, char ***out, size_t *n)
{
	char *buf = NULL, **v = NULL;
	size_t len = 0, count = 0, i = 0;
	int rc = read_all(fd, &buf, &len);

	*out = NULL;
	*n = 0;
	if (rc)
		return rc;
	if (len && buf[len - 1] != '\0') {
		rc = -EINVAL;
		goto out;
	}
	for (size_t p = 0; p < len; p++)
		count += buf[p] == '\0';
	v = calloc(count + 1, sizeof(*v));
	if (!v) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t p = 0; p < len; p += strlen(buf + p) + 1, i++) {
		v[i] = strdup(buf + p);
		if (!v[i]) {
			util_strings_free(v, i);
			v = NULL;
			rc = -ENOMEM;
			goto out;
		}
	}
	*out = v;
	*n = count;
out:
	free(buf);
	return rc;
}

int util_fds_place(const int *fds, size_t n, int first)
{
	int moved[16];

	if (n > sizeof(moved) / sizeof(moved[0]))
		return -EINVAL;
	/* Above every target first, so that placing one never closes another's source. */
	for (size_t i = 0; i < n; i++) {
		moved[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, first + (int)n);
		if (moved[i] < 0) {
			int rc = -errno;
			while (i-- > 0)
				close(moved[i]);
			return rc;
		}
	}
	for (size_t i = 0; i < n; i++) {
		if (dup2(moved[i], first + (int)i) < 0) {
			/* What is not placed yet is closed; what is placed stays (the caller's
			 * targets, which it execs with or exits over). */
			int rc = -errno;
			for (; i < n; i++)
				close(moved[i]);
			return rc;
		}
		close(moved[i]);
	}
	return 0;
}

int util_remove_tree(int dirfd, const char *name)
{
	struct stat st;
	DIR *d;
	struct dirent *e;
	int fd, rc = 0;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISDIR(st.st_mode))
		return unlinkat(dirfd, name, 0) == 0 || errno == ENOENT ? 0 : -errno;
	fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		rc = -errno;
		close(fd);
		return rc;
	}
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		int one = util_remove_tree(fd, e->d_name);
		if (one && !rc)
			rc = one;
	}
	closedir(d);
	if (unlinkat(dirfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT && !rc)
		rc = -errno;
	return rc;
}

/* Spool files made ahead by a thread of their own (see spool_reserve.h). */
#include "fetch/engine/spool_reserve.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/fd_room.h"
#include "util/log.h"
#include "util/thread.h"

/* Files kept ready at most, and at first: a walk takes them 32 at a time (the default
 * --prefetch-requests), and each one kept is an fd. */
#define RESERVE_MAX 64
#define RESERVE_FIRST 16
/* Free fds the threads leave alone: SPEC_FD_HEADROOM for readers, and speculation's own. */
#define RESERVE_FD_ROOM 96
/* Threads making them: where an inode costs 0.2-1 ms of CPU in the kernel, one thread made
 * 1,000-5,000 a second; two, on two cores, took a W7 walk from 0.56-0.88 s to 0.51-0.68 s
 * (a W7 walk asks for about 3,000 a second). */
#define RESERVE_THREADS 2

struct spool_reserve {
	int dirfd;
	pthread_t threads[RESERVE_THREADS];
	unsigned n_threads;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	/* Guarded by lock. */
	int fds[RESERVE_MAX];
	unsigned n, target;
	bool idle;     /* it could not make one (fds short): waits for the next take */
	bool disabled; /* unnamed files or naming them is not supported here */
	bool stopping;
};

static void *run(void *arg)
{
	struct spool_reserve *r = arg;
	/* Files this thread may make before it counts the free fds again: counting reads all
	 * of /proc/self/fd, so it is done once per refill (at most RESERVE_MAX files, well
	 * inside RESERVE_FD_ROOM), not once per file. */
	int budget = 0;

	pthread_mutex_lock(&r->lock);
	while (!r->stopping) {
		if (r->disabled || r->idle || r->n >= r->target) {
			budget = 0; /* readers may have taken fds while it waited */
			pthread_cond_wait(&r->wake, &r->lock);
			continue;
		}
		pthread_mutex_unlock(&r->lock);
		int fd = -1, err = 0;
		if (budget <= 0)
			budget = util_fd_room() - RESERVE_FD_ROOM;
		if (budget > 0) {
			budget--;
			fd = openat(r->dirfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
			err = fd < 0 ? errno : 0;
		}
		bool unsupported = fd < 0 && err != 0 && err != EMFILE && err != ENFILE &&
		                   err != ENOSPC && err != EDQUOT && err != EINTR;
		if (unsupported) /* EOPNOTSUPP, EISDIR (an old kernel), EINVAL... */
			util_log(UTIL_LOG_DEBUG, "spool files are not made ahead here: %s",
			         strerror(err));
		pthread_mutex_lock(&r->lock);
		if (fd >= 0 && r->n < RESERVE_MAX) {
			r->fds[r->n++] = fd;
			fd = -1;
		} else if (unsupported) {
			r->disabled = true;
		} else if (fd < 0) {
			r->idle = true;
		}
		if (fd >= 0) {
			pthread_mutex_unlock(&r->lock);
			close(fd);
			pthread_mutex_lock(&r->lock);
		}
	}
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

int spool_reserve_start(int dirfd, struct spool_reserve **out)
{
	struct spool_reserve *r = calloc(1, sizeof(*r));
	int rc = 0;

	if (!r)
		return -ENOMEM;
	r->dirfd = dirfd;
	r->target = RESERVE_FIRST;
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->wake, NULL);
	while (rc == 0 && r->n_threads < RESERVE_THREADS) {
		rc = util_thread_start(&r->threads[r->n_threads], "spoolfs-spare", run, r);
		if (rc == 0)
			r->n_threads++;
	}
	/* One thread is enough to go on with; none, and files are made as they are needed. */
	if (r->n_threads == 0) {
		pthread_cond_destroy(&r->wake);
		pthread_mutex_destroy(&r->lock);
		free(r);
		return rc;
	}
	*out = r;
	return 0;
}

void spool_reserve_stop(struct spool_reserve *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	r->stopping = true;
	pthread_cond_broadcast(&r->wake);
	pthread_mutex_unlock(&r->lock);
	for (unsigned i = 0; i < r->n_threads; i++)
		pthread_join(r->threads[i], NULL);
	for (unsigned i = 0; i < r->n; i++)
		close(r->fds[i]);
	pthread_cond_destroy(&r->wake);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

/* Naming fd failed for want of support (no /proc, no CAP_DAC_READ_SEARCH): from now on the
 * caller creates files itself, and the ones kept go. */
static void disable(struct spool_reserve *r)
{
	int fds[RESERVE_MAX];
	unsigned n;

	pthread_mutex_lock(&r->lock);
	r->disabled = true;
	n = r->n;
	for (unsigned i = 0; i < n; i++)
		fds[i] = r->fds[i];
	r->n = 0;
	pthread_mutex_unlock(&r->lock);
	for (unsigned i = 0; i < n; i++)
		close(fds[i]);
}

int spool_reserve_take(struct spool_reserve *r, const char *name)
{
	char path[64];
	int fd = -1, rc;

	if (!r)
		return -EAGAIN;
	pthread_mutex_lock(&r->lock);
	if (!r->disabled && r->n > 0)
		fd = r->fds[--r->n];
	else if (!r->disabled && r->target < RESERVE_MAX)
		r->target *= 2; /* asked for more than it kept: keep more */
	r->idle = false;
	pthread_cond_broadcast(&r->wake);
	pthread_mutex_unlock(&r->lock);
	if (fd < 0)
		return -EAGAIN;
	/* The documented way to name an O_TMPFILE file without CAP_DAC_READ_SEARCH; linkat
	 * never replaces a name, as O_EXCL never opens one. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	if (linkat(AT_FDCWD, path, r->dirfd, name, AT_SYMLINK_FOLLOW) == 0)
		return fd;
	rc = -errno;
	if (rc == -ENOENT && linkat(fd, "", r->dirfd, name, AT_EMPTY_PATH) == 0)
		return fd;
	if (rc == -ENOENT)
		rc = -errno;
	close(fd);
	if (rc == -ENOENT || rc == -EPERM || rc == -EXDEV || rc == -EOPNOTSUPP) {
		disable(r);
		rc = -EAGAIN;
	}
	return rc;
}

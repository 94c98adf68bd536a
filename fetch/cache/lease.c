/*
 * Leases and in-use marks, on Linux open file description locks: unlike POSIX record locks
 * they belong to the open file, not the process, so two mounts exclude each other, and
 * closing an unrelated fd on the same file drops nothing. Two flights of one mount share
 * the set's one open file description: they exclude each other through the set's `held`
 * bytes, not the kernel. Lock: a set's s->lock is innermost (it calls nothing that locks).
 */
#include "fetch/cache/lease.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "index/records.h"

int lease_open(int dirfd)
{
	int fd = openat(dirfd, "leases", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	struct stat st;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) != 0 || index_records_file_unsafe(&st, S_IFREG)) {
		close(fd);
		return -EPERM;
	}
	return fd;
}

/* The lease byte of key: 56 bits of its sha256, so it fits any off_t. */
static int lease_offset(const char *key, off_t *off)
{
	unsigned char digest[EVP_MAX_MD_SIZE];
	unsigned int len = 0;
	uint64_t v = 0;

	if (EVP_Digest(key, strlen(key), digest, &len, EVP_sha256(), NULL) != 1 || len < 7)
		return -EIO;
	for (int i = 0; i < 7; i++)
		v = v << 8 | digest[i];
	*off = (off_t)v;
	return 0;
}

int lease_try(int fd, const char *key)
{
	struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_len = 1};
	int rc = lease_offset(key, &lk.l_start);

	if (rc)
		return rc;
	if (fcntl(fd, F_OFD_SETLK, &lk) == 0)
		return 1;
	return errno == EAGAIN || errno == EACCES ? 0 : -errno;
}

/* The watch byte sits 2^56 above the lease byte: the two ranges never meet. */
#define WATCH_OFFSET ((off_t)1 << 56)

int lease_watch(int fd, const char *key)
{
	struct flock lk = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_len = 1};
	int rc = lease_offset(key, &lk.l_start);

	if (rc)
		return rc;
	lk.l_start += WATCH_OFFSET;
	return fcntl(fd, F_OFD_SETLK, &lk) == 0 ? 0 : -errno;
}

bool lease_watched(int fd, const char *key)
{
	struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_len = 1};

	if (lease_offset(key, &lk.l_start))
		return false;
	lk.l_start += WATCH_OFFSET;
	return fcntl(fd, F_OFD_GETLK, &lk) == 0 && lk.l_type != F_UNLCK;
}

int lease_mark_in_use(int spool_fd)
{
	struct flock lk = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};

	return fcntl(spool_fd, F_OFD_SETLK, &lk) == 0 ? 0 : -errno;
}

bool lease_in_use_elsewhere(int dirfd, const char *name)
{
	struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	bool busy;

	if (fd < 0)
		return false;
	/* Asks whether a write lock could be placed: any read mark on the byte says no. */
	busy = fcntl(fd, F_OFD_GETLK, &lk) != 0 || lk.l_type != F_UNLCK;
	close(fd);
	return busy;
}

/* A byte of the lease file this mount holds (the lease) or watches, with how many flights. */
struct lease_byte {
	off_t off;
	bool held;
	unsigned watchers;
};

struct lease_set {
	pthread_mutex_t lock;
	int fd; /* the lease file, set at creation */
	/* Guarded by lock: the bytes in use on fd. */
	struct lease_byte *v;
	size_t n, cap;
};

int lease_set_create(int dirfd, struct lease_set **out)
{
	struct lease_set *s = calloc(1, sizeof(*s));

	*out = NULL;
	if (!s)
		return -ENOMEM;
	/* Opened here, at mount, so no flight opens a file under the set's lock. */
	s->fd = lease_open(dirfd);
	if (s->fd < 0) {
		int rc = s->fd;
		free(s);
		return rc;
	}
	pthread_mutex_init(&s->lock, NULL);
	*out = s;
	return 0;
}

void lease_set_destroy(struct lease_set *s)
{
	if (!s)
		return;
	close(s->fd); /* drops every lock still on it */
	pthread_mutex_destroy(&s->lock);
	free(s->v);
	free(s);
}

/* key's byte in s, added when `add`; NULL when absent or without memory. Caller holds
 * s->lock. */
static struct lease_byte *find_byte(struct lease_set *s, off_t off, bool add)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->v[i].off == off)
			return &s->v[i];
	if (!add)
		return NULL;
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 16;
		struct lease_byte *v = realloc(s->v, cap * sizeof(*v));
		if (!v)
			return NULL;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n] = (struct lease_byte){.off = off};
	return &s->v[s->n++];
}

/* Forgets b once nothing uses it. Caller holds s->lock. */
static void drop_byte_if_unused(struct lease_set *s, struct lease_byte *b)
{
	if (!b->held && b->watchers == 0)
		*b = s->v[--s->n];
}

/*
 * Locks s and finds key's byte (adding it). 0 with s->lock
 * held and *b set, or -errno with it not held.
 */
static int enter_byte(struct lease_set *s, const char *key, struct lease_byte **b)
{
	off_t off;
	int rc = lease_offset(key, &off);

	if (rc)
		return rc;
	pthread_mutex_lock(&s->lock);
	if (!(*b = find_byte(s, off, true)))
		rc = -ENOMEM;
	if (rc)
		pthread_mutex_unlock(&s->lock);
	return rc;
}

int lease_set_try(struct lease_set *s, const char *key)
{
	struct lease_byte *b;
	int rc = enter_byte(s, key, &b);

	if (rc)
		return rc;
	if (b->held) {
		rc = 0; /* another flight of this mount holds it */
	} else {
		rc = lease_try(s->fd, key);
		b->held = rc == 1;
	}
	drop_byte_if_unused(s, b);
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/* Lets this mount's lease of key go (watch false), or one flight's watch of it: the lock
 * goes with the last user. */
static void let_go(struct lease_set *s, const char *key, bool watch)
{
	struct flock lk = {.l_type = F_UNLCK, .l_whence = SEEK_SET, .l_len = 1};
	struct lease_byte *b;
	bool last;

	if (lease_offset(key, &lk.l_start))
		return;
	pthread_mutex_lock(&s->lock);
	b = find_byte(s, lk.l_start, false);
	last = b && (watch ? b->watchers > 0 && --b->watchers == 0 : b->held);
	if (last) {
		if (watch)
			lk.l_start += WATCH_OFFSET;
		else
			b->held = false;
		(void)fcntl(s->fd, F_OFD_SETLK, &lk);
		drop_byte_if_unused(s, b);
	}
	pthread_mutex_unlock(&s->lock);
}

void lease_set_release(struct lease_set *s, const char *key)
{
	let_go(s, key, false);
}

int lease_set_watch(struct lease_set *s, const char *key)
{
	struct lease_byte *b;
	int rc = enter_byte(s, key, &b);

	if (rc)
		return rc;
	if (b->watchers == 0)
		rc = lease_watch(s->fd, key);
	if (rc == 0)
		b->watchers++;
	drop_byte_if_unused(s, b);
	pthread_mutex_unlock(&s->lock);
	return rc;
}

void lease_set_unwatch(struct lease_set *s, const char *key)
{
	let_go(s, key, true);
}

bool lease_set_watched(struct lease_set *s, const char *key)
{
	bool watched = false;

	pthread_mutex_lock(&s->lock);
	/* Watches by this mount's own flights share the fd, so they never show here. */
	watched = lease_watched(s->fd, key);
	pthread_mutex_unlock(&s->lock);
	return watched;
}

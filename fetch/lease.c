/*
 * Leases and in-use marks, on Linux open file description locks: unlike POSIX record locks
 * they belong to the open file, not the process, so two flights of one mount exclude each
 * other as two mounts do, and closing an unrelated fd on the same file drops nothing.
 */
#include "fetch/lease.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "index/index.h"

int lease_open(int dirfd)
{
	int fd = openat(dirfd, "leases", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	struct stat st;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) != 0 || index_entry_unsafe(&st, S_IFREG)) {
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

/*
 * Opening SRC_DIR's entries after the walk. `spoolfs publish` is often run as root on a
 * tree that someone else owns, who may rename and plant symlinks in it while it runs. A
 * path opened whole would follow a directory swapped for a symlink (O_NOFOLLOW guards the
 * last component only) and copy a file from outside SRC_DIR, world-readable, into the
 * objects. So every open goes through openat2 beneath SRC_DIR's fd, refusing any symlink
 * on the way, and what it opens is checked against the identity the walk recorded.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "publish/publish_i.h"

/* openat2 may say EAGAIN when a rename elsewhere raced its check of ".." (there is none
 * here, but the kernel does not promise that this is the only cause): it asks for a retry. */
#define EAGAIN_TRIES 64

int pub_open_beneath(int dir_fd, const char *rel, int flags)
{
	struct open_how how = {.flags = (uint64_t)(unsigned)flags,
	                       .resolve =
	                           RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
	long fd;
	int tries = 0;

	do
		fd = syscall(SYS_openat2, dir_fd, *rel ? rel : ".", &how, sizeof(how));
	while (fd < 0 && (errno == EINTR || (errno == EAGAIN && ++tries < EAGAIN_TRIES)));
	return fd < 0 ? -errno : (int)fd;
}

const char *pub_beneath_why(int rc)
{
	switch (rc) {
	case -ELOOP:
		return "a symlink is on its path now (a directory replaced since the walk?):"
		       " refused, nothing is read through a symlink";
	case -ENOSYS:
		return "this kernel has no openat2 (Linux 5.6 or later), which publish needs to"
		       " read SRC_DIR without following a symlink swapped in while it runs";
	default:
		return strerror(-rc);
	}
}

int pub_open_seen(int src_fd, const char *src, const struct pub_entry *e)
{
	/* O_NONBLOCK: a FIFO put in the file's place must not block the open; fstat then
	 * refuses it. */
	int fd = pub_open_beneath(src_fd, e->path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	char why[128];
	struct stat sb;
	int rc = 0;

	if (fd < 0) {
		pub_say("", src, e->path, pub_beneath_why(fd), false);
		return fd;
	}
	if (fstat(fd, &sb) != 0) {
		rc = -errno;
		pub_say("", src, e->path, strerror(-rc), false);
		goto out;
	}
	if (!S_ISREG(sb.st_mode)) {
		rc = -EINVAL;
		pub_say("", src, e->path, "no longer a regular file", false);
	} else if (sb.st_dev != e->dev || sb.st_ino != e->ino) {
		rc = -ESTALE;
		pub_say("", src, e->path,
		        "is not the file the walk saw (replaced while it was published)", false);
	} else if ((uint64_t)sb.st_size != e->size) {
		rc = -ESTALE;
		snprintf(why, sizeof(why),
		         "changed size while it was published (%llu bytes at the walk, %llu now)",
		         (unsigned long long)e->size, (unsigned long long)sb.st_size);
		pub_say("", src, e->path, why, false);
	}
out:
	if (rc) {
		close(fd);
		return rc;
	}
	return fd;
}

/*
 * Progress notes (see progress_note.h). A note is a header, then its ranges, in the
 * host's byte order (it never leaves the machine, nor the session):
 *
 *   magic[8] "SPFSPN01", dev, ino, birth seconds, birth nanoseconds, object size, count,
 *   then count pairs of (start, end), sorted, apart, within the size.
 */
#include "fetch/engine/progress_note.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char NOTE_MAGIC[8] = {'S', 'P', 'F', 'S', 'P', 'N', '0', '1'};

/* A spool file can hold millions of ranges only if something is very wrong: a note that
 * claims more is refused rather than read into memory. */
#define NOTE_MAX_RANGES (1u << 20)

struct note_head {
	char magic[8];
	uint64_t dev;
	uint64_t ino;
	int64_t birth_s;
	uint64_t birth_ns;
	uint64_t size;
	uint64_t count;
};

/* What names one spool file for good: device, inode and birth time (an inode number alone
 * comes back for a file made after the old one was deleted). -EOPNOTSUPP without a birth
 * time. */
static int identity(int dirfd, const char *path, int flags, struct note_head *h)
{
	struct statx stx;

	if (statx(dirfd, path, flags | AT_STATX_SYNC_AS_STAT, STATX_INO | STATX_BTIME, &stx) != 0)
		return -errno;
	if (!(stx.stx_mask & STATX_BTIME) || !(stx.stx_mask & STATX_INO))
		return -EOPNOTSUPP;
	h->dev = ((uint64_t)stx.stx_dev_major << 32) | stx.stx_dev_minor;
	h->ino = stx.stx_ino;
	h->birth_s = stx.stx_btime.tv_sec;
	h->birth_ns = stx.stx_btime.tv_nsec;
	return 0;
}

static int note_name(const char *spool_name, const char *suffix, char *out, size_t cap)
{
	int n = snprintf(out, cap, "%s%s", spool_name, suffix);
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

int progress_note_write(int dirfd, const char *spool_name, int spool_fd, uint64_t size,
                        const struct util_ranges *written)
{
	char name[256], tmp[264];
	struct note_head h = {.size = size, .count = written->n};
	size_t len = sizeof(h) + written->n * 2 * sizeof(uint64_t);
	uint64_t *pairs;
	char *buf = NULL;
	int fd = -1, rc;

	memcpy(h.magic, NOTE_MAGIC, sizeof(h.magic));
	rc = note_name(spool_name, ".note", name, sizeof(name));
	if (rc == 0)
		rc = note_name(spool_name, ".note.new", tmp, sizeof(tmp));
	if (rc == 0)
		rc = identity(spool_fd, "", AT_EMPTY_PATH, &h);
	if (rc)
		goto out;
	buf = malloc(len);
	if (!buf) {
		rc = -ENOMEM;
		goto out;
	}
	memcpy(buf, &h, sizeof(h));
	pairs = (uint64_t *)(buf + sizeof(h));
	for (size_t i = 0; i < written->n; i++) {
		pairs[2 * i] = written->v[i].start;
		pairs[2 * i + 1] = written->v[i].end;
	}
	fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		rc = -errno;
		goto out;
	}
	ssize_t n = write(fd, buf, len);
	if (n < 0)
		rc = -errno;
	else if ((size_t)n != len)
		rc = -EIO;
	/* No fsync: the note is for a process of this session, which a crash ends too. */
	if (rc == 0 && renameat(dirfd, tmp, dirfd, name) != 0)
		rc = -errno;
	if (rc)
		unlinkat(dirfd, tmp, 0);
out:
	if (fd >= 0)
		close(fd);
	free(buf);
	return rc;
}

/* Reads the whole note into *buf (malloc'd), at most a bounded size. 0, -ENOENT, -errno. */
static int read_note(int dirfd, const char *name, char **buf, size_t *len)
{
	struct stat st;
	int fd, rc = 0;

	*buf = NULL;
	fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) != 0) {
		rc = -errno;
		goto out;
	}
	if (!S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof(struct note_head) ||
	    (uint64_t)st.st_size > sizeof(struct note_head) + NOTE_MAX_RANGES * 16ull) {
		rc = -EPROTO;
		goto out;
	}
	*len = (size_t)st.st_size;
	*buf = malloc(*len);
	if (!*buf) {
		rc = -ENOMEM;
		goto out;
	}
	ssize_t n = pread(fd, *buf, *len, 0);
	if (n < 0)
		rc = -errno;
	else if ((size_t)n != *len)
		rc = -EPROTO;
out:
	if (rc) {
		free(*buf);
		*buf = NULL;
	}
	close(fd);
	return rc;
}

int progress_note_read(int dirfd, const char *spool_name, int spool_dirfd, uint64_t size,
                       struct util_ranges *out)
{
	struct note_head h, now = {0};
	char name[256], *buf = NULL;
	const uint64_t *pairs;
	uint64_t last_end = 0;
	size_t len = 0;
	int rc;

	rc = note_name(spool_name, ".note", name, sizeof(name));
	if (rc == 0)
		rc = read_note(dirfd, name, &buf, &len);
	if (rc == -ENOENT)
		return 0;
	if (rc)
		return rc;
	memcpy(&h, buf, sizeof(h));
	if (memcmp(h.magic, NOTE_MAGIC, sizeof(h.magic)) != 0 ||
	    h.count != (len - sizeof(h)) / 16 || (len - sizeof(h)) % 16 != 0) {
		rc = -EPROTO;
		goto out;
	}
	/* Another object's size, or another file at the name now: it says nothing of this one. */
	if (h.size != size || identity(spool_dirfd, spool_name, AT_SYMLINK_NOFOLLOW, &now) != 0 ||
	    now.dev != h.dev || now.ino != h.ino || now.birth_s != h.birth_s ||
	    now.birth_ns != h.birth_ns)
		goto out;
	pairs = (const uint64_t *)(buf + sizeof(h));
	for (uint64_t i = 0; i < h.count; i++) {
		uint64_t start = pairs[2 * i], end = pairs[2 * i + 1];
		if (start < last_end || end <= start || end > size) {
			rc = -EPROTO;
			goto out;
		}
		last_end = end;
	}
	for (uint64_t i = 0; i < h.count && rc == 0; i++)
		rc = util_ranges_add(out, pairs[2 * i], pairs[2 * i + 1]);
	if (rc == 0)
		rc = h.count > 0;
out:
	free(buf);
	return rc;
}

void progress_note_remove(int dirfd, const char *spool_name)
{
	char name[256];

	if (note_name(spool_name, ".note", name, sizeof(name)) == 0)
		unlinkat(dirfd, name, 0);
}

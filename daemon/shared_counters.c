/*
 * The mount's counters in memory its serving processes share (shared_counters.h, struct
 * daemon_shared_counters): made by the first process, kept open by the supervisor, mapped by
 * each serving process in turn. /.spoolfs/stats and the metrics file then read totals for
 * the mount, not for one process, so a restart is no counter reset to a collector.
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon/shared_counters.h"
#include "fs/session.h"

#define COUNTERS_MAGIC 0x53504f4f4c435452ULL /* "SPOOLCTR" */
/* Raised whenever a field of the block moves or changes meaning: struct engine_stats,
 * fs_counters, prefetch_walk_counters, util_histogram(_set) and the histogram bounds say
 * so where they are defined. (Only the size is checked besides: a new field changes it.) */
#define COUNTERS_FORMAT 2ULL
/* Processes share the block only through lock-free atomics: one that needs a lock would
 * take a lock of its own process's, which the others never see. */
_Static_assert(ATOMIC_LONG_LOCK_FREE == 2 && ATOMIC_LLONG_LOCK_FREE == 2 &&
                   ATOMIC_INT_LOCK_FREE == 2,
               "the shared counters need lock-free atomics");
#define COUNTERS_LAYOUT ((COUNTERS_FORMAT << 32) | sizeof(struct daemon_shared_counters))

static int map(int fd, struct daemon_shared_counters **out)
{
	void *p = mmap(NULL, sizeof(**out), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	if (p == MAP_FAILED)
		return -errno;
	*out = p;
	return 0;
}

int daemon_shared_counters_create(int *fd, struct daemon_shared_counters **out)
{
	int rc;

	*fd = memfd_create("spoolfs-counters", MFD_CLOEXEC);
	if (*fd < 0)
		return -errno;
	rc = ftruncate(*fd, sizeof(**out)) == 0 ? map(*fd, out) : -errno;
	if (rc) {
		close(*fd);
		*fd = -1;
		return rc;
	}
	/* Zero-filled: every counter at 0. */
	(*out)->magic = COUNTERS_MAGIC;
	(*out)->layout = COUNTERS_LAYOUT;
	(*out)->mounted_at = (int64_t)time(NULL);
	return 0;
}

int daemon_shared_counters_map(int fd, struct daemon_shared_counters **out)
{
	struct stat st;
	int rc;

	if (fstat(fd, &st) != 0)
		return -errno;
	/* Another build's block may be of another size: never mapped past its end. */
	if (!S_ISREG(st.st_mode) || (size_t)st.st_size != sizeof(**out))
		return -EPROTO;
	rc = map(fd, out);
	if (rc)
		return rc;
	if ((*out)->magic != COUNTERS_MAGIC || (*out)->layout != COUNTERS_LAYOUT) {
		daemon_shared_counters_unmap(*out);
		*out = NULL;
		return -EPROTO;
	}
	/* A gauge, not a count: the drops it counted died with their process. */
	atomic_store(&(*out)->fs.page_drops_pending, 0);
	return 0;
}

void daemon_shared_counters_unmap(struct daemon_shared_counters *c)
{
	if (c)
		munmap(c, sizeof(*c));
}

void daemon_counters_settle(struct fs_session *s)
{
	s->counters =
	    s->daemon.shared_counters ? &s->daemon.shared_counters->fs : &s->daemon.own_counters;
}

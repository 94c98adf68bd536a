/*
 * The counters every serving process of a mount adds to (shared_counters.c).
 */
#ifndef SPOOLFS_DAEMON_SHARED_COUNTERS_H
#define SPOOLFS_DAEMON_SHARED_COUNTERS_H

#include <stdint.h>
#include "fetch/engine/engine.h"
#include "fetch/prefetch/prefetch.h"
#include "fs/counters.h"

/*
 * The mount's counters, in a memfd the supervisor holds and passes to each serving process
 * (DAEMON_RUN_FD_COUNTERS), so that they go on from where a dead or replaced process left them
 * instead of restarting at 0 (doc/survive.md). Atomics only: a process killed mid-update
 * leaves nothing half-done. Another build's block (its layout differs) is never read.
 */
struct daemon_shared_counters {
	uint64_t magic;
	uint64_t layout;    /* the format and this structure's size */
	int64_t mounted_at; /* time() when the first serving process made it: the mount's start */
	struct engine_stats engine;
	struct fs_counters fs;
	struct prefetch_walk_counters prefetch_walk;
};
/* A new block, zeroed, in a memfd (*fd, CLOEXEC). 0 or -errno. */
int daemon_shared_counters_create(int *fd, struct daemon_shared_counters **out);
/* Maps the block on fd; -EPROTO when another build laid it out. Gauges in it (what a dead
 * process had queued) are zeroed. 0 or -errno. */
int daemon_shared_counters_map(int fd, struct daemon_shared_counters **out);
void daemon_shared_counters_unmap(struct daemon_shared_counters *c);
/* Points s->counters at the shared block, or at s's own when there is none. */
struct fs_session;
void daemon_counters_settle(struct fs_session *s);

#endif

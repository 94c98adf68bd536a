/*
 * Drops FUSE's cached pages behind a sequential reader, while passthrough is on.
 *
 * A complete object opens passthrough (passthrough.c) only once no handle of it is open
 * through the page cache, and that open makes the kernel drop the inode's cached pages
 * first, synchronously: 0.16 s for 1 GiB on a 2-core VM, more than the passthrough read
 * itself. Dropping what the readers have left far behind while the download runs keeps
 * that cost to the last window, spreads the work over the download, and keeps the page
 * cache of a large object from doubling the spool's.
 *
 * When the last handle reading a complete object through the page cache is released, the
 * rest goes too, so that the next open (passthrough) finds nothing left to drop: measured
 * on the same VM, the first re-read of 1 GiB after a cold read took 0.063-0.200 s (median
 * 0.080) instead of 0.073-0.212 (median 0.101). The kernel sends release only once the
 * handle's reads are answered, so that drop cannot wait on a pending one either.
 *
 * The window is measured per handle, from the end of the furthest read request of its
 * sequential run: the kernel's readahead sends a handle's requests a little out of order,
 * never far. A read that does not continue the run starts a new one, so sparse access
 * keeps its pages (it may come back to them), and a handle that is left alone after
 * another one closed drops nothing ahead of itself. A page dropped too early is only
 * read again from the spool, never wrong.
 *
 * The kernel waits on a locked page while dropping: a page whose read request is pending.
 * That read may wait for the replier, so drops run on a worker of their own, never on the
 * replier or the transfer thread. Drops behind a reader happen only while one handle reads
 * the object through the page cache (its pending requests are at its own frontier, 64 MiB
 * ahead of any drop); several readers sharing the page cache (W1) keep their pages until
 * the last of them is released. A request the daemon never reads (the FUSE loop ended on
 * SIGTERM with requests queued) would hold its page, and a drop waiting on it, until the
 * connection ends: daemon/abort.c ends it as the loop ends, and no drop starts after that.
 *
 * Lock: the handles' run_* and dropped_to, and their objects' counts, are guarded by
 * fs_session.pt.lock.
 * The counters are atomics: a drop counts once the kernel has done it.
 */
#include <errno.h>
#include <stdlib.h>

#include "fs/handles.h"
#include "fs/passthrough.h"
#include "fs/session.h"

#define DROP_BEHIND_BYTES (64ull << 20) /* kept behind the furthest read */
#define DROP_STEP_BYTES (32ull << 20)   /* dropped at a time */
/* How far past a run's end a request still continues it: the kernel's readahead keeps a
 * few requests of up to 1 MiB in flight, and FUSE's threads may take them out of order. */
#define RUN_SLACK_BYTES (8ull << 20)

struct page_drop {
	struct util_worker_job link; /* first: the worker hands this pointer back */
	struct fuse_session *se;
	fuse_ino_t ino;
	uint64_t off;
	uint64_t len;
};

static void drop_run(void *ctx, struct util_worker_job *job)
{
	struct page_drop *d = (struct page_drop *)job;
	struct fs_session *s = ctx;

	/* Fails harmlessly (ENOENT) once the inode is gone: only what was dropped counts. */
	if (!atomic_load(&s->loop_ended) &&
	    fuse_lowlevel_notify_inval_inode(d->se, d->ino, (off_t)d->off, (off_t)d->len) == 0)
		atomic_fetch_add(&s->counters->pages_dropped_bytes, d->len);
	atomic_fetch_sub(&s->counters->page_drops_pending, 1);
	free(d);
}

static void queue_drop(struct fs_session *s, struct page_drop *d)
{
	if (!d)
		return;
	atomic_fetch_add(&s->counters->page_drops_pending, 1);
	if (!util_worker_queue(s->pt.dropper, &d->link)) {
		atomic_fetch_sub(&s->counters->page_drops_pending, 1);
		free(d); /* stopping: nothing will read these pages again */
	}
}

int fs_page_drop_start(struct fs_session *s)
{
	if (s->opts.no_passthrough)
		return 0;
	return util_worker_start("spoolfs-drop", drop_run, s, &s->pt.dropper);
}

void fs_page_drop_stop(struct fs_session *s)
{
	util_worker_stop(s->pt.dropper);
	s->pt.dropper = NULL;
}

void fs_page_drop_note_read(struct fs_session *s, struct fs_handle *h, fuse_ino_t ino, uint64_t off,
                            uint64_t len)
{
	struct flight *f = h->flight;
	struct page_drop *d = NULL;
	uint64_t upto;

	if (!s->pt.dropper || atomic_load(&s->passthrough) != FS_PASSTHROUGH_ON ||
	    !flight_is_whole(f) || flight_size(f) < DROP_BEHIND_BYTES + DROP_STEP_BYTES)
		return;
	pthread_mutex_lock(&s->pt.lock);
	if (off < h->run_start || off > h->run_end + RUN_SLACK_BYTES) {
		h->run_start = h->dropped_to = off;
		h->run_end = off;
	}
	if (off + len > h->run_end)
		h->run_end = off + len;
	upto = h->run_end > DROP_BEHIND_BYTES ? h->run_end - DROP_BEHIND_BYTES : 0;
	if (h->object && h->object->pt_cached_handles == 1 && !h->passthrough &&
	    upto >= h->dropped_to + DROP_STEP_BYTES && (d = malloc(sizeof(*d)))) {
		*d = (struct page_drop){.se = s->se, .ino = ino, .off = h->dropped_to};
		d->len = upto - d->off;
		h->dropped_to = upto;
	}
	pthread_mutex_unlock(&s->pt.lock);
	queue_drop(s, d);
}

void fs_page_drop_released(struct fs_session *s, struct flight *f, fuse_ino_t ino)
{
	struct page_drop *d;

	if (!s->pt.dropper || atomic_load(&s->passthrough) != FS_PASSTHROUGH_ON ||
	    flight_size(f) < DROP_BEHIND_BYTES + DROP_STEP_BYTES)
		return;
	d = malloc(sizeof(*d));
	if (d)
		*d = (struct page_drop){.se = s->se, .ino = ino, .off = 0, .len = flight_size(f)};
	queue_drop(s, d);
}

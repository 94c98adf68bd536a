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
 * The window is measured from the furthest read request that reached the daemon: readers
 * that share the page cache follow within milliseconds of it (W1's followers start within
 * 10 ms), and a reader that lags more than a window only has its pages read again from
 * the spool, never wrong ones. Sparse access keeps its pages: it may come back to them.
 *
 * The kernel may wait on a locked page while dropping, and that page's read may wait for
 * the replier: so drops run on a worker of their own, never on the replier or the
 * transfer thread. Lock: the flights' pt_read_end and pt_dropped_to are guarded by
 * fs_session.passthrough_lock.
 */
#include <errno.h>
#include <stdlib.h>

#include "fs/fs_i.h"

#define DROP_BEHIND_BYTES (64ull << 20) /* kept behind the furthest read */
#define DROP_STEP_BYTES (32ull << 20)   /* dropped at a time */

struct page_drop {
	struct worker_job link; /* first: the worker hands this pointer back */
	struct fuse_session *se;
	fuse_ino_t ino;
	uint64_t off;
	uint64_t len;
};

static void drop_run(void *ctx, struct worker_job *job)
{
	struct page_drop *d = (struct page_drop *)job;

	(void)ctx;
	/* Fails harmlessly (ENOENT, ENOTCONN) once the inode or the mount is gone. */
	fuse_lowlevel_notify_inval_inode(d->se, d->ino, (off_t)d->off, (off_t)d->len);
	free(d);
}

int fs_page_drop_start(struct fs_session *s)
{
	if (s->opts.no_passthrough)
		return 0;
	return worker_start("spoolfs-drop", drop_run, s, &s->dropper);
}

void fs_page_drop_stop(struct fs_session *s)
{
	worker_stop(s->dropper);
	s->dropper = NULL;
}

void fs_page_drop_note_read(struct fs_session *s, struct flight *f, fuse_ino_t ino, uint64_t off,
                            uint64_t len)
{
	struct page_drop *d = NULL;
	uint64_t upto;

	if (!s->dropper || atomic_load(&s->passthrough) != FS_PASSTHROUGH_ON ||
	    !atomic_load(&f->whole) || f->size < DROP_BEHIND_BYTES + DROP_STEP_BYTES)
		return;
	pthread_mutex_lock(&s->passthrough_lock);
	if (off + len > f->pt_read_end)
		f->pt_read_end = off + len;
	upto = f->pt_read_end > DROP_BEHIND_BYTES ? f->pt_read_end - DROP_BEHIND_BYTES : 0;
	if (upto >= f->pt_dropped_to + DROP_STEP_BYTES && (d = malloc(sizeof(*d)))) {
		*d = (struct page_drop){.se = s->se, .ino = ino, .off = f->pt_dropped_to};
		d->len = upto - d->off;
		f->pt_dropped_to = upto;
	}
	pthread_mutex_unlock(&s->passthrough_lock);
	if (d && !worker_queue(s->dropper, &d->link))
		free(d); /* stopping: nothing will read these pages again */
}

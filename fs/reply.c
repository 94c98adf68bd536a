/*
 * Read replies: from the spool at once, or deferred until the bytes are published.
 *
 * A parked read is a struct read_wait. Three threads may race to finish it: the transfer
 * thread (its bytes arrived, or the flight failed), a FUSE worker running the interrupt
 * callback (the reader got a signal or was killed), and the worker that is parking it.
 * flight_park/flight_unpark decide under the flight's lock who owns the reply. Before the
 * transfer thread replies it clears the interrupt callback: libfuse runs that callback with
 * the request's lock held, so clearing it waits out a callback in progress and no later
 * one can see a freed read_wait.
 *
 * The publishing thread only queues a finished wait; the replier thread sends the reply
 * (one copy of the data into the kernel per reply). Measured on a 2-core VM, cold 1 GiB
 * cat: with the transfer thread replying itself, receiving stalled behind every splice.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>

#include "util/log.h"
#include "fs/open.h"
#include "fs/session.h"

struct read_wait {
	struct flight_waiter waiter; /* first: done() gets this pointer */
	fuse_req_t req;
	struct flight *flight;       /* a reference of its own */
	int err;                     /* what done() said, for the replier */
	uint64_t parked_ns;          /* when it was parked (fs_counters.read_wait) */
	uint64_t opened_ns;          /* the open's time if it is the open's first read, else 0 */
	struct util_worker_job link; /* in the replier's queue */
	/* A pack member's read: the waiter waits for the whole member, which the replier
	 * verifies; the reply is [reply_off, reply_off + reply_len) of the pack. */
	bool is_member;
	struct fetch_member member;
	uint64_t reply_off, reply_len;
};

/*
 * Spliced, not moved: to move a page the kernel must steal it from the spool's page cache
 * (waiting out its writeback first, on this thread), and a stolen page is gone from the
 * spool once FUSE's copy is dropped. Measured on a 2-core VM, 1 GiB with --cache-dir:
 * moving left 1004-1023 MiB of the spool cached, so the first passthrough re-read went to
 * the disk for the rest (0.09-0.14 s, median 0.124; 0.088-0.107, median 0.092, without).
 */
void fs_reply_spool(fuse_req_t req, struct flight *f, uint64_t off, uint64_t len)
{
	struct fuse_bufvec buf = FUSE_BUFVEC_INIT(len);
	int fd;

	/*
	 * Held while libfuse reads it: once the reply is out, the reader may close the file and
	 * its release close an idle spool. The kernel orders that after our read, but only a
	 * hold (the flight's lock) shows the order to a thread sanitizer. The reference keeps f
	 * for the release of the hold after the handle's own went.
	 */
	flight_ref(f);
	fd = flight_hold_spool_to_record(f);
	if (fd < 0) {
		fuse_reply_err(req, EIO);
		goto out;
	}
	buf.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	buf.buf[0].fd = fd;
	buf.buf[0].pos = (off_t)off;
	fuse_reply_data(req, &buf, 0);
	flight_release_spool_recorded(f);
out:
	flight_unref(f);
}

static void read_wait_free(struct read_wait *rw)
{
	flight_unref(rw->flight);
	free(rw);
}

/* Times an answered wait: how long it was parked and, for an open's first read, since the
 * open. Taken after the reply, so they include its copy into the kernel. */
static void count_answer(struct fs_session *s, const struct read_wait *rw)
{
	util_histogram_observe_since(&s->counters->read_wait, rw->parked_ns);
	if (!rw->err && rw->opened_ns)
		util_histogram_observe_since(&s->counters->first_byte, rw->opened_ns);
}

static void send_reply(struct read_wait *rw)
{
	struct fs_session *s = fuse_req_userdata(rw->req);

	fuse_req_interrupt_func(rw->req, NULL, NULL);
	if (rw->err == 0 && rw->is_member)
		rw->err = fs_member_verify(fuse_req_userdata(rw->req), rw->flight, &rw->member);
	if (rw->err)
		fuse_reply_err(rw->req, -rw->err);
	else
		fs_reply_spool(rw->req, rw->flight, rw->reply_off, rw->reply_len);
	count_answer(s, rw);
	read_wait_free(rw);
}

/* The publishing thread (transfer or hasher), no locks held. */
static void on_published(struct flight_waiter *w, int err)
{
	struct read_wait *rw = (struct read_wait *)w;
	struct fs_session *s = fuse_req_userdata(rw->req);

	rw->err = err;
	if (!s->workers.replier || !util_worker_queue(s->workers.replier, &rw->link))
		send_reply(rw); /* no replier (shutting down): answer here */
}

static void replier_run(void *ctx, struct util_worker_job *link)
{
	(void)ctx;
	send_reply((struct read_wait *)((char *)link - offsetof(struct read_wait, link)));
}

int fs_replier_start(struct fs_session *s)
{
	return util_worker_start("spoolfs-reply", replier_run, s, &s->workers.replier);
}

void fs_replier_stop(struct fs_session *s)
{
	util_worker_stop(s->workers.replier); /* it answers what was queued before it ends */
	s->workers.replier = NULL;
}

/* A FUSE worker, with libfuse's lock on req held. */
static void on_interrupt(fuse_req_t req, void *data)
{
	struct read_wait *rw = data;

	/* Only this reader's wait goes; the download carries on for everybody else. */
	if (flight_unpark(rw->flight, &rw->waiter)) {
		fuse_reply_err(req, EINTR);
		read_wait_free(rw);
	}
}

void fs_read_wait(fuse_req_t req, struct fs_session *s, struct flight *f, uint64_t off,
                  uint64_t len, const struct fetch_member *member, uint64_t opened_ns)
{
	struct read_wait *rw = calloc(1, sizeof(*rw));
	int rc;

	if (!rw) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	rw->reply_off = member ? member->base + off : off;
	rw->reply_len = len;
	rw->waiter.off = member ? member->base : off;
	rw->waiter.len = member ? member->size : len;
	rw->is_member = member != NULL;
	if (member)
		rw->member = *member;
	rw->waiter.done = on_published;
	rw->req = req;
	rw->parked_ns = util_monotonic_ns();
	rw->opened_ns = opened_ns;
	flight_ref(f);
	rw->flight = f;
	bool kick = flight_should_kick(f, rw->waiter.off);
	/* Registered before parking: an interrupt that already came is seen by flight_park. */
	fuse_req_interrupt_func(req, on_interrupt, rw);
	/*
	 * Once parked, rw may be answered at any moment, and the file then closed and its
	 * handle's reference dropped: hold f ourselves until we are done with it.
	 */
	flight_ref(f);
	rc = flight_park(f, &rw->waiter);
	if (rc == 0) {
		if (kick)
			engine_kick(s->engine, f);
		flight_unref(f);
		return;
	}
	flight_unref(f);
	rw->err = rc == 1 ? 0 : rc;
	send_reply(rw); /* readable already (or failed): answered here, verified first */
}

/*
 * Invalidations after a failed flight. Not on the thread that failed it (the transfer
 * thread or the hasher): the kernel may wait on a page whose read waits for that thread.
 * Not on a FUSE worker either: notify_inval_* from a request handler of the same inode
 * can deadlock. So they are jobs on a worker of their own, run in the order the flights
 * failed, each job's inodes in turn. It waits on pages only, whose reads the transfer
 * thread, the hasher and the replier answer; none of them waits for it.
 *
 * Bounded: at most FS_INVAL_PENDING_MAX jobs wait at once. Past that (the kernel is slow
 * to give the pages up), or without memory, a failure's inodes drop their pages at their
 * next open instead (flight_table_take_taint): the flight's failure tainted them already.
 */
#define FS_INVAL_PENDING_MAX 256

struct inval_job {
	struct util_worker_job link; /* first: the worker hands this pointer back */
	uint64_t *inos;              /* malloc'd; n of them */
	size_t n;
};

static void inval_run(void *ctx, struct util_worker_job *link)
{
	struct inval_job *job = (struct inval_job *)link;
	struct fs_session *s = ctx;

	/* Once the loop has ended the pages can go with the mount; an invalidation now could
	 * wait forever on a page whose read will never be answered (daemon/abort.c). */
	for (size_t i = 0; i < job->n && !atomic_load(&s->loop_ended); i++)
		fuse_lowlevel_notify_inval_inode(s->se, job->inos[i], 0, 0);
	fs_member_push_forget(s, job->inos, job->n); /* their next opens give them again */
	atomic_fetch_sub(&s->workers.inval_jobs, 1);
	free(job->inos);
	free(job);
}

int fs_inval_start(struct fs_session *s)
{
	return util_worker_start("spoolfs-inval", inval_run, s, &s->workers.invalidator);
}

void fs_inval_stop(struct fs_session *s)
{
	util_worker_stop(
	    s->workers.invalidator); /* the jobs left skip the kernel: the loop has ended */
	s->workers.invalidator = NULL;
}

void fs_on_flight_failed(void *ctx, struct flight *f)
{
	struct fs_session *s = ctx;
	struct inval_job *job;
	bool all;

	/* Pages read before a hash check failed must not outlive the flight, on any path to
	 * the object. Before the worker starts, no inode has opened and nothing is cached. */
	if (!s->workers.invalidator)
		return;
	if (atomic_fetch_add(&s->workers.inval_jobs, 1) >= FS_INVAL_PENDING_MAX) {
		atomic_fetch_sub(&s->workers.inval_jobs, 1);
		util_log(UTIL_LOG_DEBUG, "%s: too many invalidations waiting: dropped at next open",
		         flight_name(f));
		return;
	}
	job = calloc(1, sizeof(*job));
	if (!job)
		goto fail;
	if (flight_copy_inos(f, &job->inos, &job->n, &all) != 0 || job->n == 0) {
		free(job->inos);
		job->inos = malloc(sizeof(*job->inos));
		job->n = job->inos ? 1 : 0;
		if (job->inos)
			job->inos[0] = flight_ino(f);
	}
	if (util_worker_queue(s->workers.invalidator, &job->link))
		return;
	free(job->inos);
	free(job);
fail:
	atomic_fetch_sub(&s->workers.inval_jobs, 1);
}

/*
 * Kernel passthrough for objects that are complete: an open of such an object names the
 * spool file as its backing file, and the kernel reads it directly, with no request to
 * this daemon and no second copy in FUSE's page cache (FUSE caches in 4 KiB pages, so a
 * re-read through it costs about twice a local read; measured in the commit).
 *
 * The kernel offers passthrough from Linux 6.9 (FUSE_PASSTHROUGH in INIT's flags2);
 * libfuse supports it from 3.16, but Debian 12 has 3.14, whose INIT reply cannot ask for
 * it and whose open reply cannot carry a backing id. So the session's device I/O goes
 * through libfuse's custom-io hooks (handover.c): reading INIT tells whether the kernel
 * offers it, and the INIT reply is amended on its way out (FUSE_INIT_EXT, FUSE_PASSTHROUGH, a stack
 * depth of 1). Open replies that use it are sent whole by fs_passthrough_reply_open. Any of these
 * missing (old kernel, not root, --no-passthrough) and every open is a plain one.
 *
 * The kernel keeps one I/O mode per inode: while a file is open through the page cache, a
 * passthrough open fails with EIO, and the other way round; and all passthrough opens of
 * an inode must name one backing id. So an object opens passthrough when it is complete
 * (verified) and no handle of it is open through the page cache; once it has passthrough
 * handles, every open of it is one. Our counts go up when we reply and down at RELEASE,
 * which the kernel sends after it counted the file out, so they are never below the
 * kernel's. Deciding per flight (one object, maybe several inodes) is the safe side of
 * per inode. A passthrough open makes the kernel drop the inode's page cache first (0.16 s
 * for 1 GiB on a 2-core VM): page_drop.c keeps what is left to drop small.
 *
 * The counts and the backing id are fs/'s, in a struct fs_object per object with open
 * handles (handles.h), found by the flight's id in fs_session.pt.objects. A table of our own
 * rather than a slot in the flight: fetch/ then holds nothing of the kernel's, and the
 * entry lives exactly as long as there is something to count (first open to last release).
 *
 * Lock: fs_session.pt.lock guards the objects table, each object's fields and
 * each handle's object and passthrough fields; a flight's lock may be taken under it,
 * never the other way round.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "fs/passthrough.h"
#include "util/log.h"
#include "fs/handles.h"
#include "fs/session.h"

/* From the kernel's FUSE protocol 7.40; Debian 12's headers stop at 7.38. */
#ifndef FUSE_PASSTHROUGH
#define FUSE_PASSTHROUGH (1ULL << 37)
#define FOPEN_PASSTHROUGH (1u << 7)
struct fuse_backing_map {
	int32_t fd;
	uint32_t flags;
	uint64_t padding;
};
#define FUSE_DEV_IOC_BACKING_OPEN _IOW(229, 1, struct fuse_backing_map)
#define FUSE_DEV_IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)
#define INIT_OUT_STACK_DEPTH(out) ((out)->unused[0])
#define OPEN_OUT_BACKING_ID(out) ((out)->padding)
#else
#define INIT_OUT_STACK_DEPTH(out) ((out)->max_stack_depth)
#define OPEN_OUT_BACKING_ID(out) ((out)->backing_id)
#endif
#define PASSTHROUGH_FLAG2 ((uint32_t)(FUSE_PASSTHROUGH >> 32))

void fs_passthrough_note_init(struct fs_session *s, const void *req, size_t n)
{
	const struct fuse_in_header *in = req;
	const struct fuse_init_in *init = (const void *)(in + 1);

	if (atomic_load(&s->passthrough) != FS_PASSTHROUGH_UNKNOWN)
		return;
	/* Kernels before 5.17 send a shorter INIT, without flags2. */
	bool offered = n >= sizeof(*in) + sizeof(*init) && init->major == 7 &&
	               (init->flags & FUSE_INIT_EXT) && (init->flags2 & PASSTHROUGH_FLAG2);
	atomic_store(&s->passthrough, offered ? FS_PASSTHROUGH_OFFERED : FS_PASSTHROUGH_OFF);
}

/* Asks for passthrough in the INIT reply. */
void fs_passthrough_amend_init(struct fs_session *s, struct iovec *iov, int count)
{
	const struct fuse_out_header *out;
	struct fuse_init_out *init;

	if (atomic_load(&s->passthrough) != FS_PASSTHROUGH_OFFERED)
		return;
	if (count < 2 || iov[0].iov_len != sizeof(*out) || iov[1].iov_len < sizeof(*init))
		return;
	out = iov[0].iov_base;
	if (out->error != 0)
		return;
	init = iov[1].iov_base;
	init->flags |= FUSE_INIT_EXT;
	init->flags2 |= PASSTHROUGH_FLAG2;
	/* The spool sits on a plain filesystem: one level of stacking. */
	INIT_OUT_STACK_DEPTH(init) = 1;
	atomic_store(&s->passthrough, FS_PASSTHROUGH_ON);
}

int fs_passthrough_install(struct fs_session *s)
{
	if (s->opts.no_passthrough)
		atomic_store(&s->passthrough, FS_PASSTHROUGH_OFF);
	return fs_handover_install(s);
}

static struct fs_object **bucket_of(struct fs_session *s, uint64_t flight_id)
{
	return &s->pt.objects[flight_id % FS_OBJECT_BUCKETS];
}

struct fs_object *fs_object_find_locked(struct fs_session *s, uint64_t flight_id)
{
	struct fs_object *o = *bucket_of(s, flight_id);

	while (o && o->flight_id != flight_id)
		o = o->next;
	return o;
}

/* Under pt.lock: f's entry, made for its first handle. NULL when out of memory. */
static struct fs_object *object_get_locked(struct fs_session *s, struct flight *f)
{
	struct fs_object *o = fs_object_find_locked(s, flight_id(f));
	struct fs_object **bucket;

	if (o)
		return o;
	o = calloc(1, sizeof(*o));
	if (!o)
		return NULL;
	bucket = bucket_of(s, flight_id(f));
	o->flight_id = flight_id(f);
	o->next = *bucket;
	*bucket = o;
	return o;
}

/* Under pt.lock: h no longer counts; its object goes with its last handle. */
static void object_leave_locked(struct fs_session *s, struct fs_handle *h)
{
	struct fs_object *o = h->object, **pp;

	h->object = NULL;
	if (h->passthrough)
		o->pt_handles--;
	else
		o->pt_cached_handles--;
	if (o->pt_handles || o->pt_cached_handles)
		return;
	for (pp = bucket_of(s, o->flight_id); *pp != o; pp = &(*pp)->next)
		;
	*pp = o->next;
	free(o);
}

/* Under pt.lock. The object's backing id, opened on first use; 0 = none. */
static int backing_id_locked(struct fs_session *s, struct fs_object *o, struct flight *f)
{
	struct fuse_backing_map map = {.fd = flight_spool_fd(f)};
	int id;

	if (o->pt_backing_id > 0)
		return o->pt_backing_id;
	id = ioctl(fuse_session_fd(s->se), FUSE_DEV_IOC_BACKING_OPEN, &map);
	if (id < 0 && (errno == EPERM || errno == EINVAL || errno == ENOTTY || errno == ELOOP)) {
		/*
		 * Not root, the kernel ignored the INIT amendment, or the cache directory is on
		 * a stacked filesystem such as overlayfs (ELOOP: a stack depth of 2 would keep
		 * spoolfs from being an overlay's lower layer): plain opens from now on.
		 */
		util_log(UTIL_LOG_INFO, "passthrough reads are off: %s", strerror(errno));
		atomic_store(&s->passthrough, FS_PASSTHROUGH_OFF);
	}
	if (id <= 0)
		return 0;
	o->pt_backing_id = id;
	return id;
}

/* How long an open waits for the transfer thread to pick up a complete cached object. */
#define SETTLE_MS 500

/* An open waiting for its flight; on the heap, since the transfer thread ends the wait. */
struct settle {
	struct flight_waiter waiter; /* first: done() gets this pointer */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;       /* guarded by lock */
	atomic_int refs; /* the opener's, and the waiter's until done() or a successful unpark */
};

static void settle_unref(struct settle *st)
{
	if (atomic_fetch_sub(&st->refs, 1) != 1)
		return;
	pthread_cond_destroy(&st->cond);
	pthread_mutex_destroy(&st->lock);
	free(st);
}

static void settle_done(struct flight_waiter *w, int err)
{
	struct settle *st = (struct settle *)w;

	(void)err; /* the opener looks at the flight's state itself */
	pthread_mutex_lock(&st->lock);
	st->done = true;
	pthread_cond_signal(&st->cond);
	pthread_mutex_unlock(&st->lock);
	settle_unref(st);
}

/* Waits until f is readable in full, at most SETTLE_MS. */
static void wait_readable(struct flight *f)
{
	struct settle *st = calloc(1, sizeof(*st));
	pthread_condattr_t attr;
	struct timespec deadline;
	bool timed_out;

	if (!st)
		return;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&st->cond, &attr);
	pthread_condattr_destroy(&attr);
	pthread_mutex_init(&st->lock, NULL);
	atomic_init(&st->refs, 2);
	st->waiter.off = 0;
	st->waiter.len = flight_size(f);
	st->waiter.done = settle_done;
	if (flight_park(f, &st->waiter) != 0) {
		settle_unref(st); /* not parked: done() will not run */
		goto out;
	}
	clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_nsec += SETTLE_MS * 1000000L;
	deadline.tv_sec += deadline.tv_nsec / 1000000000L;
	deadline.tv_nsec %= 1000000000L;
	pthread_mutex_lock(&st->lock);
	while (!st->done && pthread_cond_timedwait(&st->cond, &st->lock, &deadline) != ETIMEDOUT)
		;
	timed_out = !st->done;
	pthread_mutex_unlock(&st->lock);
	if (timed_out && flight_unpark(f, &st->waiter))
		settle_unref(st); /* done() will not run */
out:
	settle_unref(st);
}

void fs_passthrough_settle(struct fs_session *s, struct flight *f)
{
	struct util_ranges recorded;
	bool complete = false;

	/* After a failure the object is never passthrough (fs_passthrough_open): no use waiting. */
	if (atomic_load(&s->passthrough) != FS_PASSTHROUGH_ON || !s->opts.cache_dir ||
	    flight_size(f) == 0 || flight_after_failure(f))
		return;
	util_ranges_init(&recorded);
	/* All written but not yet recorded complete: the other mount is about to. */
	if (index_records_lookup(s->records, flight_key(f), &complete, &recorded) == 0 &&
	    (complete || recorded.total == flight_size(f)))
		wait_readable(f);
	util_ranges_free(&recorded);
}

/* Whether files of ino that an earlier serving process opened through the page cache are
 * still open (the ledger): the kernel refuses a passthrough open of ino until they close. */
static bool cached_held_locked(struct fs_session *s, uint64_t ino)
{
	int64_t value;

	return s->pt.ledger && ino && util_ledger_get(s->pt.ledger, ino, &value, NULL) > 0 &&
	       value == 0;
}

int fs_passthrough_open(struct fs_session *s, struct fs_handle *h)
{
	struct flight *f = h->flight;
	struct fs_object *o;
	enum flight_state state;
	int id = -ENOMEM;

	pthread_mutex_lock(&s->pt.lock);
	o = object_get_locked(s, f);
	if (!o)
		goto out;
	/*
	 * Once an object has passthrough handles, every open of it must be one, whatever
	 * changed since; and the state is read under the lock, or an open that saw the
	 * download running could go through the page cache after a later one went passthrough.
	 */
	id = o->pt_backing_id;
	if (cached_held_locked(s, h->ino))
		id = 0;
	else if (id == 0 && atomic_load(&s->passthrough) == FS_PASSTHROUGH_ON &&
	         !flight_after_failure(f) && o->pt_cached_handles == 0) {
		flight_progress(f, NULL, NULL, &state);
		if (state == FLIGHT_COMPLETE)
			id = backing_id_locked(s, o, f);
	}
	if (id > 0)
		o->pt_handles++;
	else
		o->pt_cached_handles++;
	h->passthrough = id > 0;
	h->object = o;
	/*
	 * Before the reply, by the fh the reply names: a process that replaces this one must
	 * know how the kernel holds the inode, passthrough or through the page cache. Killed
	 * after this and before the reply, the kernel resends the open (another fh): this
	 * record stays, one too many, which keeps the inode in its mode (and its backing id
	 * open) until the unmount. Never one too few.
	 */
	fs_handle_assign_id(s, h);
	if (s->pt.ledger && h->ino &&
	    util_ledger_open(s->pt.ledger, h->id, h->ino, id, s->generation + 1) == -ENOSPC)
		util_log(UTIL_LOG_WARN,
		         "passthrough ledger full: after a restart, new opens go through the page"
		         " cache (%s)",
		         flight_name(f));
out:
	pthread_mutex_unlock(&s->pt.lock);
	return id;
}

int fs_passthrough_adopt(struct fs_session *s, struct fs_handle *h)
{
	struct fs_object *o;

	pthread_mutex_lock(&s->pt.lock);
	o = object_get_locked(s, h->flight);
	if (o) {
		o->pt_cached_handles++;
		h->object = o;
	}
	pthread_mutex_unlock(&s->pt.lock);
	return o ? 0 : -ENOMEM;
}

bool fs_passthrough_release(struct fs_session *s, struct fs_handle *h)
{
	struct flight *f = h->flight;
	struct fs_object *o;
	enum flight_state state;
	bool last_cached = false;
	int close_id = 0;

	if (!f)
		return false;
	pthread_mutex_lock(&s->pt.lock);
	o = h->object;
	if (!o)
		goto out;
	/* The ledger first, then the backing id: killed between, the id stays open in the
	 * kernel with nothing naming it (a leak until the unmount), never named and closed.
	 * A RELEASE resent after a kill finds its fh forgotten and changes nothing. */
	if (s->pt.ledger && h->ino && !h->is_member) {
		int64_t id;
		(void)util_ledger_close(s->pt.ledger, h->id, &id, NULL); /* the backing: below */
	}
	if (!h->passthrough) {
		/* Decided here, under the lock: two releases racing must not both be the last. */
		if (o->pt_cached_handles == 1 && !flight_after_failure(f)) {
			flight_progress(f, NULL, NULL, &state);
			last_cached = state == FLIGHT_COMPLETE;
		}
	} else if (o->pt_handles == 1) {
		/* The kernel holds the backing file while any passthrough file is open. */
		close_id = o->pt_backing_id;
		o->pt_backing_id = 0;
		uint32_t id = (uint32_t)close_id;
		if (ioctl(fuse_session_fd(s->se), FUSE_DEV_IOC_BACKING_CLOSE, &id) != 0)
			util_log(UTIL_LOG_WARN, "closing passthrough backing %d: %s", close_id,
			         strerror(errno));
	}
	object_leave_locked(s, h);
out:
	pthread_mutex_unlock(&s->pt.lock);
	return last_cached;
}

int fs_passthrough_inherited(struct fs_session *s, struct fs_handle *h)
{
	int64_t id;

	if (!s->pt.ledger || !s->generation)
		return 0;
	/* Found and counted in one step: a release cannot close the id in between. An entry
	 * this process made is its own object's, opened the ordinary way. */
	id = util_ledger_join(s->pt.ledger, h->id, h->ino, s->generation + 1);
	return id > 0 ? (int)id : 0;
}

void fs_passthrough_inherited_release(struct fs_session *s, uint64_t fh)
{
	int64_t id = 0;
	bool last = false;

	/* -ENOENT: never recorded (a virtual file), or forgotten already (a resent RELEASE). */
	if (!s->pt.ledger || util_ledger_close(s->pt.ledger, fh, &id, &last) < 0 || id <= 0 ||
	    !last)
		return;
	/* The last passthrough file of its inode, and no other inode's names its backing id
	 * (an earlier process opened one per object): the id goes. Forgotten first: killed
	 * before the close, the id leaks in the kernel, named by nobody. */
	uint32_t close_id = (uint32_t)id;
	if (ioctl(fuse_session_fd(s->se), FUSE_DEV_IOC_BACKING_CLOSE, &close_id) != 0)
		util_log(UTIL_LOG_WARN, "closing inherited passthrough backing %u: %s", close_id,
		         strerror(errno));
}

void fs_passthrough_note_replayed_init(struct fs_session *s)
{
	const struct fuse_out_header *out = (const struct fuse_out_header *)s->handover.init_reply;
	const struct fuse_init_out *init = (const struct fuse_init_out *)(out + 1);
	bool asked;

	if (atomic_load(&s->passthrough) == FS_PASSTHROUGH_OFF)
		return; /* --no-passthrough, not root */
	/*
	 * Passthrough is the connection's, settled at its one INIT: what the first process
	 * asked (the recorded reply, amended by fs_passthrough_amend_init) holds for every
	 * later one; libfuse's own negotiation in this process never reaches the kernel. New
	 * objects open passthrough again only when the ledger holds every file the kernel
	 * has open (an overflowed one may miss page-cache files, which would fail them).
	 */
	asked = s->handover.init_reply &&
	        s->handover.init_reply_len >= sizeof(*out) + sizeof(*init) && out->error == 0 &&
	        (init->flags & FUSE_INIT_EXT) && (init->flags2 & PASSTHROUGH_FLAG2);
	if (asked && s->pt.ledger && util_ledger_overflowed(s->pt.ledger)) {
		util_log(UTIL_LOG_WARN, "the passthrough ledger overflowed: new opens go through "
		                        "the page cache until the next mount");
		asked = false;
	}
	atomic_store(&s->passthrough,
	             asked && s->pt.ledger ? FS_PASSTHROUGH_ON : FS_PASSTHROUGH_OFF);
}

void fs_passthrough_forget(struct fs_session *s, struct fs_handle *h)
{
	pthread_mutex_lock(&s->pt.lock);
	if (h->object)
		object_leave_locked(s, h);
	pthread_mutex_unlock(&s->pt.lock);
}

int fs_passthrough_reply_open(fuse_req_t req, const struct fuse_file_info *fi, int backing_id)
{
	/*
	 * No other flag: the kernel refuses FOPEN_KEEP_CACHE with passthrough. So it drops
	 * the inode's pages from FUSE's page cache at this open, which nobody reads any more.
	 */
	struct fuse_open_out out = {.fh = fi->fh, .open_flags = FOPEN_PASSTHROUGH};
	OPEN_OUT_BACKING_ID(&out) = (uint32_t)backing_id;
	/* Not fuse_reply_iov: it allocates, and on failure replies ENOMEM yet returns 0. */
	return fuse_reply_buf(req, (const char *)&out, sizeof(out));
}

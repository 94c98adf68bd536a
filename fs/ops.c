/*
 * The FUSE low-level operations. Each handler replies exactly once on every path; the
 * namespace comes from the index, file data from flights. A handler never blocks on the
 * network: a read of bytes that are not local yet is parked (reply.c).
 *
 * Read-only: anything that would change the tree answers EROFS.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/log.h"
#include "fs/handles.h"
#include "fs/listing.h"
#include "fs/open.h"
#include "fs/passthrough.h"
#include "fs/prefetch.h"
#include "fs/readahead.h"
#include "fs/session.h"
#include "fs/notify.h"
#include "fs/virtual.h"

#define XATTR_SHA256 "user.spoolfs.sha256"
#define XATTR_URL "user.spoolfs.url"
#define XATTR_CACHED "user.spoolfs.cached"

static struct fs_session *session_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* --file-mode replaces a file's bits; one executable in the source stays executable by
 * whoever may read it (0440 shows as 0550). */
static mode_t file_mode(const struct fs_session *s, const struct index_node *n)
{
	mode_t mode = (mode_t)s->opts.file_mode;

	if (s->opts.file_mode < 0)
		return n->mode;
	return n->mode & 0111 ? mode | ((mode & 0444) >> 2) : mode;
}

static void node_to_stat(const struct fs_session *s, const struct index_node *n, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = n->ino;
	st->st_uid = s->uid;
	st->st_gid = s->gid;
	st->st_mtime = n->mtime;
	st->st_ctime = n->mtime;
	st->st_atime = n->mtime;
	st->st_blksize = 1 << 20;
	/* The index keeps read and execute bits only: the mount is read-only. */
	switch (n->kind) {
	case INDEX_KIND_DIR:
		st->st_mode =
		    S_IFDIR | (s->opts.dir_mode >= 0 ? (mode_t)s->opts.dir_mode : n->mode);
		st->st_nlink = 2;
		break;
	case INDEX_KIND_SYMLINK:
		st->st_mode = S_IFLNK | 0777;
		st->st_nlink = 1;
		st->st_size = (off_t)n->size; /* the target's length, as lstat gives it */
		break;
	case INDEX_KIND_FILE:
		st->st_mode = S_IFREG | file_mode(s, n);
		st->st_nlink = 1;
		st->st_size = (off_t)n->size;
		st->st_blocks = (blkcnt_t)((n->size + 511) / 512);
		break;
	}
	/* The daemon's choice (options.h): shown, never granted (writes get EROFS). */
	if (s->opts.owner_writable && n->kind != INDEX_KIND_SYMLINK)
		st->st_mode |= S_IWUSR;
}

static void node_to_entry(const struct fs_session *s, const struct index_node *n,
                          struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = n->ino;
	e->generation = 1;
	e->attr_timeout = s->timeout_s;
	e->entry_timeout = s->timeout_s;
	node_to_stat(s, n, &e->attr);
}

static void fs_init(void *userdata, struct fuse_conn_info *conn)
{
	struct fs_session *s = userdata;

	/* tests: SPOOLFS_TEST_NO_OPENDIR is the path of kernels before 5.1 */
	atomic_store(&s->handover.no_opendir, (conn->capable & FUSE_CAP_NO_OPENDIR_SUPPORT) &&
	                                          !getenv("SPOOLFS_TEST_NO_OPENDIR"));
	/* Not SPLICE_MOVE: see fs_reply_spool. */
	if (conn->capable & FUSE_CAP_SPLICE_WRITE)
		conn->want |= FUSE_CAP_SPLICE_WRITE;
	if (conn->capable & FUSE_CAP_READDIRPLUS)
		conn->want |= FUSE_CAP_READDIRPLUS;
	conn->want &= ~(unsigned)FUSE_CAP_READDIRPLUS_AUTO;
	/*
	 * With async direct I/O the kernel sends an O_DIRECT read as background requests and
	 * waits for them uninterruptibly, without ever sending INTERRUPT: a reader killed while
	 * its read was parked here stayed in D state, holding the file open, until the bytes
	 * came (or the retries ran out). Without it, the read is a plain request that a signal
	 * interrupts, and only its own wait goes.
	 */
	conn->want &= ~(unsigned)FUSE_CAP_ASYNC_DIO;
	/*
	 * Readahead reaches us as background requests, and the kernel lets only max_background
	 * of them (12 by default) be pending per mount. A read waiting on a slow upstream is
	 * parked here and holds its slot, so a dozen readers of slow objects used to stall
	 * every cached or cold read on the mount behind them (promise 2). Parked requests cost
	 * the daemon no thread, only a waiter, so the limit goes up to what the kernel allows
	 * (root: any; others: fs.fuse.max_user_bgreq, 1638 by default).
	 */
	conn->max_background = FS_MAX_BACKGROUND;
	conn->congestion_threshold = FS_MAX_BACKGROUND * 3 / 4;

	/* libfuse answers INIT when this returns, and every request after it is served: a unit
	 * ordered after ours may read from the mount from here on. */
	uint64_t files = 0, dirs = 0, bytes = 0;
	index_totals(s->idx, &files, &dirs, &bytes);
	fs_notify_ready(files, dirs, bytes);
}

static void fs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fs_session *s = session_of(req);
	struct fuse_entry_param e;
	struct index_node n;
	int rc = fs_virtual_lookup(s, parent, name, &e.attr);

	if (rc == 1) {
		/* Virtual files change: the kernel must ask again every time. */
		e.ino = e.attr.st_ino;
		e.generation = 1;
		e.attr_timeout = 0;
		e.entry_timeout = 0;
		fuse_reply_entry(req, &e);
		return;
	}
	if (rc == 0)
		rc = fs_ensure_listed(s, parent);
	if (rc == 0)
		rc = index_lookup(s->idx, parent, name, &n);
	if (rc == -ENOENT) {
		/* Negative entries are cached too: the namespace cannot change. */
		memset(&e, 0, sizeof(e));
		e.entry_timeout = s->timeout_s;
		fuse_reply_entry(req, &e);
		return;
	}
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	node_to_entry(s, &n, &e);
	fuse_reply_entry(req, &e);
}

/* Inodes live as long as the session: nothing to free, but the kernel's page cache of the
 * inode went with it (member_push.c gives a member's bytes again at its next open). */
static void fs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	fs_member_push_forget(session_of(req), &ino, 1);
	fuse_reply_none(req);
}

static void fs_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	fs_member_push_forget_batch(session_of(req), forgets, count);
	fuse_reply_none(req);
}

static void fs_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs_session *s = session_of(req);
	struct index_node n;
	struct stat st;
	int rc;

	if (fs_virtual_ino(ino)) {
		/* fi names an open handle when the kernel asks on behalf of one (lseek). */
		rc = fs_virtual_getattr(s, ino, fi && fi->fh ? fs_handle_find(s, fi->fh) : NULL,
		                        &st);
		if (rc)
			fuse_reply_err(req, -rc);
		else
			fuse_reply_attr(req, &st, 0);
		return;
	}
	rc = index_get(s->idx, ino, &n);
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	node_to_stat(s, &n, &st);
	fuse_reply_attr(req, &st, s->timeout_s);
}

struct dir_fill {
	struct fs_session *s;
	fuse_req_t req;
	char *buf;
	size_t size;
	size_t used;
	bool plus;
};

static int fill_one(struct dir_fill *d, const char *name, const struct index_node *n, off_t next)
{
	size_t len;

	if (d->plus) {
		struct fuse_entry_param e;
		node_to_entry(d->s, n, &e);
		len = fuse_add_direntry_plus(d->req, d->buf + d->used, d->size - d->used, name, &e,
		                             next);
	} else {
		struct stat st;
		node_to_stat(d->s, n, &st);
		len =
		    fuse_add_direntry(d->req, d->buf + d->used, d->size - d->used, name, &st, next);
	}
	if (len > d->size - d->used)
		return 1;
	d->used += len;
	return 0;
}

/* Cookies: 1 after ".", 2 after "..", then 2 + the index's cookie. */
static int fill_child(void *ctx, const struct index_node *child, uint64_t next_cookie)
{
	return fill_one(ctx, child->name, child, (off_t)(next_cookie + 2));
}

/* /.spoolfs: its own files, which change, so with no timeouts (as fs_lookup gives them). */
static void readdir_virtual(fuse_req_t req, struct fs_session *s, size_t size, off_t off, bool plus)
{
	static const struct {
		const char *name;
		fuse_ino_t ino;
	} entries[] = {{".", FS_INO_VIRTUAL_DIR},
	               {"..", FUSE_ROOT_ID},
	               {"flights", FS_INO_FLIGHTS},
	               {"stats", FS_INO_STATS}};
	char *buf = malloc(size);
	size_t used = 0;

	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	for (size_t i = off > 0 ? (size_t)off : 0; i < sizeof(entries) / sizeof(entries[0]); i++) {
		struct fuse_entry_param e = {.ino = entries[i].ino, .generation = 1};
		size_t len;
		/* The kernel takes nothing but the type of "..". */
		if (entries[i].ino == FUSE_ROOT_ID) {
			e.attr.st_ino = FUSE_ROOT_ID;
			e.attr.st_mode = S_IFDIR | 0555;
		} else if (fs_virtual_getattr(s, entries[i].ino, NULL, &e.attr) != 0) {
			continue;
		}
		len = plus ? fuse_add_direntry_plus(req, buf + used, size - used, entries[i].name,
		                                    &e, (off_t)i + 1)
		           : fuse_add_direntry(req, buf + used, size - used, entries[i].name,
		                               &e.attr, (off_t)i + 1);
		if (len > size - used)
			break;
		used += len;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus)
{
	struct fs_session *s = session_of(req);
	struct dir_fill d = {.s = s, .req = req, .size = size, .plus = plus};
	struct index_node self, parent;
	int rc;

	if (ino == FS_INO_VIRTUAL_DIR) {
		readdir_virtual(req, s, size, off, plus);
		return;
	}
	rc = fs_virtual_ino(ino) ? -ENOTDIR : index_get(s->idx, ino, &self);
	if (rc)
		goto fail;
	if (!self.is_dir) {
		rc = -ENOTDIR;
		goto fail;
	}
	/* Without OPENDIR (fs_opendir), the first readdir is where a directory gets listed. */
	rc = fs_ensure_listed(s, ino);
	if (rc)
		goto fail;
	d.buf = malloc(size);
	if (!d.buf) {
		rc = -ENOMEM;
		goto fail;
	}
	if (off < 1 && fill_one(&d, ".", &self, 1))
		goto reply;
	if (off < 2) {
		rc = index_get(s->idx, self.parent, &parent);
		if (rc)
			goto fail;
		if (fill_one(&d, "..", &parent, 2))
			goto reply;
	}
	rc = index_readdir(s->idx, ino, off > 2 ? (uint64_t)off - 2 : 0, fill_child, &d);
	if (rc)
		goto fail;
reply:
	fuse_reply_buf(req, d.buf, d.used);
	free(d.buf);
	return;
fail:
	free(d.buf);
	fuse_reply_err(req, -rc);
}

static void fs_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct fs_session *s = session_of(req);
	char target[INDEX_SYMLINK_MAX + 1];
	int rc =
	    fs_virtual_ino(ino) ? -EINVAL : index_readlink(s->idx, ino, target, sizeof(target));

	if (rc < 0)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_readlink(req, target);
}

static void fs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, false);
}

static void fs_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                           struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, true);
}

static void fs_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs_session *s = session_of(req);
	struct index_node n;
	int rc;

	/*
	 * A kernel that offered FUSE_CAP_NO_OPENDIR_SUPPORT takes ENOSYS as "opened", stops
	 * sending OPENDIR and RELEASEDIR for the connection (two round trips per directory
	 * open: Python's importer lists thousands), and gives every directory what the end of
	 * this function does: FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR. Lookup and the first readdir
	 * list a directory then. /.spoolfs is cached too: its names never change, and its
	 * files' sizes come from lookups, which have no timeout. The kernel keeps no_opendir
	 * across serving processes, and each of them decides from the same INIT request.
	 */
	if (atomic_load(&s->handover.no_opendir)) {
		fuse_reply_err(req, ENOSYS);
		return;
	}
	if (ino == FS_INO_VIRTUAL_DIR) {
		fuse_reply_open(req, fi); /* listed afresh each time: its files change */
		return;
	}
	rc = fs_virtual_ino(ino) ? -ENOTDIR : index_get(s->idx, ino, &n);
	if (rc == 0 && !n.is_dir)
		rc = -ENOTDIR;
	if (rc == 0)
		rc = fs_ensure_listed(s, ino);
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	fi->cache_readdir = 1;
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

/*
 * Joins file ino's object for handle h (fetch_object_open), which notes what it is: a pack
 * member's view and the file's directory. *f gets the reference. 0, FETCH_OBJECT_HASH_LIST
 * (no hash list yet for a new flight of a chunked object), or -errno.
 */
int fs_open_object(struct fs_session *s, fuse_ino_t ino, const struct fetch_hash_list *list,
                   struct fs_handle *h, struct flight **f, bool *created)
{
	struct fetch_object obj;
	int rc = fetch_object_open(s->resolver,
	                           &(struct fetch_object_req){.ino = ino, .list = list}, &obj);

	*f = obj.flight;
	*created = obj.created;
	if (rc == 0) {
		h->is_member = obj.is_member;
		h->member = obj.member;
		h->parent = obj.parent;
	}
	return rc;
}

/*
 * Holds *f's spool for a new handle (flight_hold_spool). A complete object's spool closed
 * while idle may be gone (a tmp cleaner) or replaced: its flight fails and a new one
 * fetches it again. It may also have failed just after the join: the same. Other errors
 * (out of fds) fail this open only, and leave the object cached. On failure *f is
 * unreferenced and NULL; returns 0, -errno, or FETCH_OBJECT_HASH_LIST when a new flight of a
 * chunked object needs its hash list (list NULL): it comes first.
 */
static int hold_spool_or_start_over(struct fs_session *s, fuse_ino_t ino, struct fs_handle *h,
                                    struct flight **f, bool *created,
                                    const struct fetch_hash_list *list)
{
	int rc = *created ? flight_hold_spool_created(*f) : flight_hold_spool(*f);

	if (fetch_object_spool_gone(*f, rc)) {
		/* Failed meanwhile, or its idle spool's file is gone or another mount's now
		 * (which is no reason to fetch it again, nor to delete that file). */
		flight_unref(*f);
		*f = NULL;
		rc = fs_open_object(s, ino, list, h, f, created);
		if (rc == FETCH_OBJECT_HASH_LIST)
			return rc; /* its hash list first, as at a first open */
		if (rc == 0)
			rc = *created ? flight_hold_spool_created(*f) : flight_hold_spool(*f);
	}
	if (rc && *f) {
		util_log(UTIL_LOG_WARN, "%s: cannot open its spool file again: %s", flight_name(*f),
		         strerror(-rc));
		flight_unref(*f);
		*f = NULL;
		/* The opener has fds to spare: ours ran out, which is the system's doing to it. */
		rc = rc == -EMFILE ? -ENFILE : -EIO;
	}
	return rc;
}

static void open_object(fuse_req_t req, struct fs_session *s, fuse_ino_t ino,
                        struct fuse_file_info *fi, struct fs_handle *h,
                        const struct fs_adopting_read *read);
static void adopt_and_read(fuse_req_t req, struct fs_session *s, fuse_ino_t ino,
                           const struct fuse_file_info *fi, struct fs_handle *h,
                           const struct fs_adopting_read *read);
static void read_handle(fuse_req_t req, struct fs_session *s, fuse_ino_t ino, struct fs_handle *h,
                        size_t size, off_t off);

static void fs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs_session *s = session_of(req);
	struct fs_handle *h = NULL;
	int backing_id, rc;

	fs_tune_readahead_once(s);

	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		rc = -EROFS;
		goto fail;
	}
	h = calloc(1, sizeof(*h));
	if (!h) {
		rc = -ENOMEM;
		goto fail;
	}
	if (s->generation && !fs_virtual_ino(ino)) {
		h->ino = ino;
		h->passthrough = true; /* its fh then says so, as the kernel keeps it */
		fs_handle_assign_id(s, h);
	}
	backing_id = h->id ? fs_passthrough_inherited(s, h) : 0;
	if (backing_id > 0) {
		/* Open passthrough by an earlier serving process: this open must be one too, with
		 * its backing id. The kernel reads the file it named; no flight here. */
		h->inherited_passthrough = true;
		fi->fh = fs_handle_track(s, h);
		if (fs_passthrough_reply_open(req, fi, backing_id) != 0) {
			fs_passthrough_inherited_release(s, h->id);
			fs_handle_free(s, h);
		}
		return;
	}
	memset(h, 0, sizeof(*h));
	if (fs_virtual_ino(ino)) {
		rc = fs_virtual_read_all(s, ino, &h->text, &h->len);
		if (rc)
			goto fail;
		fi->direct_io = 1;
		fi->fh = fs_handle_track(s, h);
		if (fuse_reply_open(req, fi) != 0)
			fs_handle_free(s, h);
		return;
	}
	open_object(req, s, ino, fi, h, NULL);
	return;
fail:
	free(h);
	fuse_reply_err(req, -rc);
}

/*
 * Joins file ino's flight for the new handle h, its hash list first when it needs one, and
 * goes on in fs_open_finish: the open (or with read, the read that rebuilds h) is
 * answered, now or from the opener thread. Takes h.
 */
static void open_object(fuse_req_t req, struct fs_session *s, fuse_ino_t ino,
                        struct fuse_file_info *fi, struct fs_handle *h,
                        const struct fs_adopting_read *read)
{
	struct flight *f = NULL;
	bool created = false;
	int rc;

	rc = fs_open_object(s, ino, NULL, h, &f, &created);
	if (rc == FETCH_OBJECT_HASH_LIST) {
		fs_open_after_hash_list(req, s, ino, fi, h, read); /* replies, now or later */
		return;
	}
	if (rc) {
		free(h);
		fuse_reply_err(req, -rc);
		return;
	}
	fs_open_finish(req, s, ino, fi, h, f, created, NULL, read);
}

/*
 * Makes f, joined for the new handle h of ino, h's: holds its spool (or starts over), lets
 * a walk be seen in its directory's opens, and makes a speculative download this reader's.
 * 0, FETCH_OBJECT_HASH_LIST (a new flight needs its hash list first), or -errno; f is h's or
 * unreferenced.
 */
static int take_flight(struct fs_session *s, fuse_ino_t ino, struct fs_handle *h, struct flight *f,
                       bool *created, const struct fetch_hash_list *list)
{
	int rc;

	rc = hold_spool_or_start_over(s, ino, h, &f, created, list);
	if (rc)
		return rc;
	fs_prefetch_note_open(s, ino, h->parent);
	/* Held now, a speculative download is this reader's: the engine looks at it again (it
	 * may still be waiting for a speculative slot). */
	if (!*created && flight_is_speculative(f))
		engine_kick(s->engine, f);
	h->flight = f;
	h->opened_ns = util_monotonic_ns();
	h->ino = ino;
	return 0;
}

void fs_open_finish(fuse_req_t req, struct fs_session *s, fuse_ino_t ino, struct fuse_file_info *fi,
                    struct fs_handle *h, struct flight *f, bool created,
                    const struct fetch_hash_list *list, const struct fs_adopting_read *read)
{
	enum flight_state state;
	int backing_id, rc;

	rc = take_flight(s, ino, h, f, &created, list);
	if (rc == FETCH_OBJECT_HASH_LIST) {
		fs_open_after_hash_list(req, s, ino, fi, h, read); /* replies, now or later */
		return;
	}
	if (rc)
		goto fail;
	f = h->flight;
	if (read) {
		adopt_and_read(req, s, ino, fi, h, read);
		return;
	}
	if (created)
		fs_passthrough_settle(s, f);
	flight_progress(f, NULL, NULL, &state);
	atomic_fetch_add(created                    ? &s->counters->opens_new
	                 : state == FLIGHT_COMPLETE ? &s->counters->opens_local
	                                            : &s->counters->opens_joined,
	                 1);
	/*
	 * Content cannot change within the session, so cached pages stay valid across opens,
	 * except after a failed flight (a bad hash): the first open of its successor drops
	 * them, and so does the next open of each inode that read from the failed one (other
	 * paths to the same object). Dropping them on every open would make an open wait for
	 * other readers' pending reads, since the kernel locks those pages.
	 */
	bool drop_cache = flight_table_take_taint(s->flights, flight_key(f), ino);
	fi->keep_cache = !(drop_cache || (created && flight_after_failure(f)));
	/* A member is a range of its pack's spool: the kernel cannot read it from there. */
	backing_id = h->is_member ? 0 : fs_passthrough_open(s, h);
	if (backing_id < 0) {
		rc = backing_id;
		goto fail;
	}
	if (backing_id > 0)
		atomic_fetch_add(&s->counters->opens_passthrough, 1);
	if (h->is_member)
		fs_member_push_open(s, ino, h, fi->keep_cache);
	fi->fh = fs_handle_track(s, h);
	if ((backing_id > 0 ? fs_passthrough_reply_open(req, fi, backing_id)
	                    : fuse_reply_open(req, fi)) != 0) {
		/* The open was interrupted: no release will come. */
		(void)fs_passthrough_release(s, h); /* nothing was read through it to drop */
		fs_handle_free(s, h);
	}
	return;
fail:
	fs_handle_free(s, h); /* not tracked: frees its flight reference, if any */
	fuse_reply_err(req, -rc);
}

/*
 * A read of fi->fh, which an earlier serving process opened (doc/survive.md): the handle is
 * rebuilt from the inode, as an open would make it (a chunked object's hash list first, on
 * another thread), counted as a page-cache open (the kernel reads through its page cache:
 * passthrough handles send no reads), and the read is answered then.
 */
static void adopt(fuse_req_t req, struct fs_session *s, fuse_ino_t ino, struct fuse_file_info *fi,
                  off_t off, size_t size)
{
	const struct fs_adopting_read read = {.off = off, .size = size};
	struct fs_handle *h = calloc(1, sizeof(*h));
	int rc;

	if (!h) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (!fs_virtual_ino(ino)) {
		open_object(req, s, ino, fi, h, &read);
		return;
	}
	rc = fs_virtual_read_all(s, ino, &h->text, &h->len);
	if (rc) {
		free(h);
		fuse_reply_err(req, -rc);
		return;
	}
	adopt_and_read(req, s, ino, fi, h, &read);
}

/* Links h, rebuilt for an earlier serving process's fi->fh, under that fh, and answers the
 * read that found it missing. */
static void adopt_and_read(fuse_req_t req, struct fs_session *s, fuse_ino_t ino,
                           const struct fuse_file_info *fi, struct fs_handle *h,
                           const struct fs_adopting_read *read)
{
	int rc = 0;

	if (h->flight && !h->is_member)
		rc = fs_passthrough_adopt(s, h);
	if (rc) {
		fs_handle_free(s, h);
		fuse_reply_err(req, -rc);
		return;
	}
	h = fs_handle_adopt(s, h, fi->fh);
	read_handle(req, s, ino, h, read->size, read->off);
}

/*
 * Replies from a private copy: the kernel may complete the read and let the file be
 * released (freeing the snapshot) while writev is still returning in this thread.
 */
static void reply_snapshot(fuse_req_t req, struct fs_handle *h, uint64_t off, size_t size)
{
	size_t start = off < h->len ? (size_t)off : h->len;
	size_t len = h->len - start < size ? h->len - start : size;
	char *copy = malloc(len ? len : 1);

	if (!copy) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	memcpy(copy, h->text + start, len);
	atomic_fetch_add_explicit(&h->reads_done, 1, memory_order_release);
	fuse_reply_buf(req, copy, len);
	free(copy);
}

uint64_t fs_handle_first_read_ns(struct fs_handle *h)
{
	/* Loaded first: only the first read writes the flag (many may share the handle). */
	return atomic_load_explicit(&h->first_read_taken, memory_order_relaxed) ||
	               atomic_exchange(&h->first_read_taken, true)
	           ? 0
	           : h->opened_ns;
}

static void fs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
	struct fs_session *s = session_of(req);
	struct fs_handle *h = fs_handle_find(s, fi->fh);

	if (h)
		read_handle(req, s, ino, h, size, off);
	else
		adopt(req, s, ino, fi, off, size); /* an earlier serving process's */
}

static void read_handle(fuse_req_t req, struct fs_session *s, fuse_ino_t ino, struct fs_handle *h,
                        size_t size, off_t off)
{
	struct flight *f = h->flight;
	uint64_t len;
	int rc;

	if (!f && off >= 0) {
		reply_snapshot(req, h, (uint64_t)off, size);
		return;
	}
	uint64_t file_size = h->is_member ? h->member.size : flight_size(f);
	if (off < 0 || (uint64_t)off >= file_size || size == 0) {
		atomic_fetch_add_explicit(&h->reads_done, 1, memory_order_release);
		if (off < 0)
			fuse_reply_err(req, EINVAL);
		else
			fuse_reply_buf(req, NULL, 0);
		return;
	}
	if (h->is_member) {
		fs_member_read(req, s, h, (uint64_t)off, size);
		return;
	}
	len = file_size - (uint64_t)off < size ? file_size - (uint64_t)off : size;
	if (flight_note_read(f, (uint64_t)off, len))
		engine_kick(s->engine, f);
	fs_page_drop_note_read(s, h, ino, (uint64_t)off, len);
	uint64_t opened_ns = fs_handle_first_read_ns(h);
	/* Done with h: from here on only f, which the handle keeps alive until release. */
	atomic_fetch_add_explicit(&h->reads_done, 1, memory_order_release);
	rc = flight_ready(f, (uint64_t)off, len);
	fs_answer_read(req, s, f, rc, (uint64_t)off, len, NULL, opened_ns);
}

void fs_answer_read(fuse_req_t req, struct fs_session *s, struct flight *f, int ready, uint64_t off,
                    uint64_t len, const struct fetch_member *member, uint64_t opened_ns)
{
	if (ready == 1) {
		fs_reply_spool(req, f, member ? member->base + off : off, len);
		if (opened_ns)
			util_histogram_observe_since(&s->counters->first_byte, opened_ns);
	} else if (ready < 0) {
		atomic_fetch_add(&s->counters->reads_failed, 1);
		fuse_reply_err(req, -ready);
	} else {
		atomic_fetch_add(&s->counters->reads_parked, 1);
		fs_read_wait(req, s, f, off, len, member, opened_ns);
	}
}

static void fs_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs_session *s = session_of(req);
	struct fs_handle *h = fs_handle_find(s, fi->fh);

	if (!h || h->inherited_passthrough) {
		/* An earlier serving process's, never used here: nothing of ours to free but
		 * its record in the ledger (a passthrough open's backing id goes with the
		 * inode's last one). */
		fs_passthrough_inherited_release(s, fi->fh);
		if (h)
			fs_handle_free(s, h);
		fuse_reply_err(req, 0);
		return;
	}
	/* Only the handle's reference goes: the download finishes for the object's sake. */
	if (fs_passthrough_release(s, h))
		fs_page_drop_released(s, h->flight, ino);
	fs_handle_free(s, h);
	fuse_reply_err(req, 0);
}

static void fs_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct fs_session *s = session_of(req);
	uint64_t files = 0, dirs = 0, bytes = 0;
	struct statvfs st;

	memset(&st, 0, sizeof(st));
	index_totals(s->idx, &files, &dirs, &bytes);
	st.f_bsize = 4096;
	st.f_frsize = 4096;
	st.f_blocks = (fsblkcnt_t)((bytes + 4095) / 4096);
	st.f_files = (fsfilcnt_t)(files + dirs);
	st.f_namemax = INDEX_NAME_MAX;
	st.f_flag = ST_RDONLY | ST_NOSUID | ST_NODEV;
	fuse_reply_statfs(req, &st);
}

/* Replies with a value, or its size when the caller asked for size 0. */
static void reply_xattr(fuse_req_t req, const char *value, size_t len, size_t size)
{
	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (len > size)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, value, len);
}

static void fs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct fs_session *s = session_of(req);
	struct fetch_object_view v = {0};
	char *shown = NULL, cached[32];
	int rc;

	/*
	 * `ls -l` asks every file for security.selinux and system.posix_acl_access. ENOTSUP
	 * says the namespace does not exist here, and ls then stops asking for the whole
	 * filesystem; ENODATA made it ask for each file, 200,000 round trips (4 s) for a
	 * 100,000-file tree.
	 */
	if (strncmp(name, "user.", 5) != 0) {
		fuse_reply_err(req, ENOTSUP);
		return;
	}
	if ((strcmp(name, XATTR_SHA256) != 0 && strcmp(name, XATTR_URL) != 0 &&
	     strcmp(name, XATTR_CACHED) != 0) ||
	    fs_virtual_ino(ino)) {
		fuse_reply_err(req, ENODATA);
		return;
	}
	rc = fetch_object_view(s->resolver, ino, strcmp(name, XATTR_CACHED) == 0, &v);
	if (rc == 0 && v.node.kind != INDEX_KIND_FILE)
		rc = -ENODATA;
	if (rc)
		goto fail;
	if (strcmp(name, XATTR_SHA256) == 0) {
		if (!v.node.sha256[0]) {
			rc = -ENODATA;
			goto fail;
		}
		reply_xattr(req, v.node.sha256, strlen(v.node.sha256), size);
		goto out;
	}
	if (strcmp(name, XATTR_URL) == 0) {
		/* Query strings carry signatures: never hand them out. Redacted, a URL is never
		 * longer; a path may make it longer than PATH_MAX. */
		shown = malloc(strlen(v.url) + 1);
		if (!shown) {
			rc = -ENOMEM;
			goto fail;
		}
		util_redact_url(v.url, shown, strlen(v.url) + 1);
		reply_xattr(req, shown, strlen(shown), size);
		goto out;
	}
	snprintf(cached, sizeof(cached), "%" PRIu64, v.cached);
	reply_xattr(req, cached, strlen(cached), size);
	goto out;
fail:
	fuse_reply_err(req, -rc);
out:
	free(shown);
	fetch_object_view_clear(&v);
}

static void fs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct fs_session *s = session_of(req);
	struct index_node n;
	char names[128];
	size_t len = 0;
	int rc;

	if (fs_virtual_ino(ino)) {
		reply_xattr(req, names, 0, size);
		return;
	}
	rc = index_get(s->idx, ino, &n);
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	if (n.kind == INDEX_KIND_FILE) {
		if (n.sha256[0]) {
			memcpy(names + len, XATTR_SHA256, sizeof(XATTR_SHA256));
			len += sizeof(XATTR_SHA256);
		}
		memcpy(names + len, XATTR_URL, sizeof(XATTR_URL));
		len += sizeof(XATTR_URL);
		memcpy(names + len, XATTR_CACHED, sizeof(XATTR_CACHED));
		len += sizeof(XATTR_CACHED);
	}
	reply_xattr(req, names, len, size);
}

static void fs_erofs(fuse_req_t req)
{
	fuse_reply_err(req, EROFS);
}

static void fs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
	fs_erofs(req);
}

static void fs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	fs_erofs(req);
}

static void fs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	fs_erofs(req);
}

static void fs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fs_erofs(req);
}

static void fs_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	fs_erofs(req);
}

static void fs_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags)
{
	fs_erofs(req);
}

static void fs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	fs_erofs(req);
}

static void fs_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
	fs_erofs(req);
}

static void fs_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi)
{
	fs_erofs(req);
}

static void fs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                        size_t size, int flags)
{
	fs_erofs(req);
}

static void fs_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	fs_erofs(req);
}

const struct fuse_lowlevel_ops fs_ops = {
    .init = fs_init,
    .lookup = fs_lookup,
    .forget = fs_forget,
    .forget_multi = fs_forget_multi,
    .getattr = fs_getattr,
    .readlink = fs_readlink,
    .setattr = fs_setattr,
    .mknod = fs_mknod,
    .mkdir = fs_mkdir,
    .unlink = fs_unlink,
    .rmdir = fs_unlink,
    .symlink = fs_symlink,
    .rename = fs_rename,
    .link = fs_link,
    .open = fs_open,
    .read = fs_read,
    .write = fs_write,
    .release = fs_release,
    .opendir = fs_opendir,
    .readdir = fs_readdir,
    .readdirplus = fs_readdirplus,
    .statfs = fs_statfs,
    .setxattr = fs_setxattr,
    .getxattr = fs_getxattr,
    .listxattr = fs_listxattr,
    .removexattr = fs_removexattr,
    .create = fs_create,
};

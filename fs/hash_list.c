/*
 * The first open of an object with chunk hashes: its hash list first.
 *
 * The hash list (the sha256 of each chunk, 32 bytes each, in order) is an object of its
 * own, named by its sha256 in the manifest: that is what binds the chunks. It is fetched
 * by a flight like any object, keyed by that sha256, so every opener joins one download
 * and a kept cache keeps it; its length is fixed by the object's size and chunk size (a
 * server sending another fails it), and it is verified whole before any of it is read.
 * Then the object's flight starts with its digests, and the open is answered.
 *
 * No FUSE worker waits for it: the open parks a waiter on the hash list's flight, and
 * when that is answered (by the thread that verified or failed it) the rest of the open
 * runs on the opener thread, which replies. Lock: none of its own; each pending open is
 * owned by whoever holds it (the flight's waiter list, then the opener's queue).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/handles.h"
#include "fs/open.h"
#include "fs/session.h"
#include "util/log.h"

struct pending_open {
	struct flight_waiter waiter; /* first: done() gets this pointer */
	struct util_worker_job link; /* in the opener's queue */
	fuse_req_t req;
	struct fs_session *s;
	fuse_ino_t ino;
	struct fuse_file_info fi; /* a copy: the request's is gone once the open is deferred */
	struct fs_handle *h;
	/* Set for the read of an earlier serving process's fh that rebuilds h (ops.c). */
	bool adopting;
	struct fs_adopting_read read;
	struct flight *list; /* the hash list's flight, a reference */
	char *list_url;      /* for the log line */
	int err;             /* what done() said */
	bool again;          /* its spool was gone once: joined afresh (finish) */
};

static void pending_free(struct pending_open *po)
{
	if (po->list)
		flight_unref(po->list);
	free(po->list_url);
	free(po->h);
	free(po);
}

static void wait_for_list(struct pending_open *po);

/* A complete hash list whose spool file was removed behind the daemon's back: joined
 * afresh, once, as an object's would be (fetch_object_spool_gone). Else every later open
 * would join the complete flight and fail on its missing spool for the session. */
static bool join_again(struct pending_open *po, int rc)
{
	if (po->again || !fetch_object_spool_gone(po->list, rc))
		return false;
	flight_unref(po->list);
	po->list = NULL;
	free(po->list_url);
	po->list_url = NULL;
	po->again = true;
	po->err = 0;
	wait_for_list(po);
	return true;
}

/* The rest of the open, once the hash list's flight answered. Replies; frees po. */
static void finish(struct pending_open *po)
{
	struct fs_session *s = po->s;
	struct fetch_hash_list hl = {0};
	struct flight *f = NULL;
	bool created = false;
	int rc;

	rc = fetch_hash_list_take(s->resolver, po->ino, po->list, po->err, po->again, po->list_url,
	                          &hl);
	if (rc && join_again(po, rc))
		return;
	if (rc) { /* fetch_hash_list_take logged why */
		fuse_reply_err(po->req, EIO);
		pending_free(po);
		return;
	}
	rc = fs_open_object(s, po->ino, &hl, po->h, &f, &created);
	if (rc == FETCH_OBJECT_HASH_LIST)
		rc = -EIO; /* not reached: with its hash list it joins or creates */
	if (rc) {
		fuse_reply_err(po->req, -rc);
	} else {
		fs_open_finish(po->req, s, po->ino, &po->fi, po->h, f, created, &hl,
		               po->adopting ? &po->read : NULL);
		po->h = NULL; /* fs_open_finish's now */
	}
	fetch_hash_list_clear(&hl);
	pending_free(po);
}

static void opener_run(void *ctx, struct util_worker_job *link)
{
	(void)ctx;
	finish((struct pending_open *)((char *)link - offsetof(struct pending_open, link)));
}

/* The thread that verified or failed the hash list, no lock held. */
static void on_list_ready(struct flight_waiter *w, int err)
{
	struct pending_open *po = (struct pending_open *)w;

	po->err = err;
	if (!po->s->workers.opener || !util_worker_queue(po->s->workers.opener, &po->link))
		finish(po); /* shutting down: answered here */
}

/* Joins the hash list's flight for file ino into po->list (fetch_object_open: downloading
 * whole). 0 or -errno. */
static int join_list(struct fs_session *s, fuse_ino_t ino, struct pending_open *po)
{
	struct fetch_object obj;
	int rc = fetch_object_open(s->resolver,
	                           &(struct fetch_object_req){.ino = ino, .hash_list = true}, &obj);

	if (rc)
		return rc;
	po->list = obj.flight;
	po->list_url = obj.url;
	/* Prefetch's (a list entry's): a reader waits for it now, so it is claimed as an open
	 * claims an object. Unclaimed, it would be speculation nobody asked for, which waits
	 * for a speculative slot and which the engine drops when fds run short (failing this
	 * open). */
	if (flight_speculation_unclaimed(po->list) && flight_hold_spool(po->list) == 0) {
		flight_release_spool(po->list);
		engine_kick(s->engine, po->list);
	}
	return 0;
}

void fs_open_after_hash_list(fuse_req_t req, struct fs_session *s, fuse_ino_t ino,
                             const struct fuse_file_info *fi, struct fs_handle *h,
                             const struct fs_adopting_read *read)
{
	struct pending_open *po = calloc(1, sizeof(*po));

	if (!po) {
		free(h);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	po->req = req;
	po->s = s;
	po->ino = ino;
	po->fi = *fi;
	po->h = h;
	if (read) {
		po->adopting = true;
		po->read = *read;
	}
	wait_for_list(po);
}

/* Joins the hash list and parks po on it; replies (and frees po) now if it cannot. */
static void wait_for_list(struct pending_open *po)
{
	int rc = join_list(po->s, po->ino, po);

	if (rc) {
		fuse_reply_err(po->req, -rc);
		pending_free(po);
		return;
	}
	po->waiter.off = 0;
	po->waiter.len = flight_size(po->list);
	po->waiter.done = on_list_ready;
	rc = flight_park(po->list, &po->waiter);
	if (rc == 0)
		return; /* on_list_ready finishes it */
	po->err = rc == 1 ? 0 : rc;
	finish(po); /* verified already (or failed): here, on this worker */
}

int fs_opener_start(struct fs_session *s)
{
	return util_worker_start("spoolfs-open", opener_run, s, &s->workers.opener);
}

void fs_opener_stop(struct fs_session *s)
{
	util_worker_stop(s->workers.opener); /* it finishes what was queued before it ends */
	s->workers.opener = NULL;
}

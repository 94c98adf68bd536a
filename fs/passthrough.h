/*
 * Kernel passthrough (passthrough.c), the device hooks and INIT replay (handover.c), and
 * dropping the page cache of objects that pass through next (page_drop.c).
 */
#ifndef SPOOLFS_FS_PASSTHROUGH_H
#define SPOOLFS_FS_PASSTHROUGH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <fuse_lowlevel.h>
#include "fs/handles.h"

struct fs_session;

/*
 * Routes the session's device I/O through handover.c's hooks; call right after
 * fuse_session_mount. With --no-passthrough it also records that passthrough is off.
 * 0 or -errno.
 */
int fs_passthrough_install(struct fs_session *s);
/* INIT as the kernel sent it: whether it offers passthrough. */
void fs_passthrough_note_init(struct fs_session *s, const void *req, size_t n);
/* INIT's reply on its way out: asks for passthrough when offered. */
struct iovec;
void fs_passthrough_amend_init(struct fs_session *s, struct iovec *iov, int count);

/* The device hooks (handover.c). */
int fs_handover_install(struct fs_session *s);
/* A later serving process: loads the first one's INIT exchange from the run directory, to
 * be replayed at its first read. 0, -ENOENT (the kernel will resend INIT itself), -errno. */
int fs_handover_load(struct fs_session *s);
/* Asks the kernel to send again what the dead process had read (when INIT offered it);
 * before the loop reads anything. 0 or -errno. */
int fs_handover_resend(struct fs_session *s);

/*
 * Decides how a new handle of an object opens, counting it in the object's entry (h->object):
 * returns the backing id to send with fs_passthrough_reply_open, 0 for a plain open
 * (fuse_reply_open), or -ENOMEM (nothing counted). After 0 or an id,
 * fs_passthrough_release must follow, also when the reply fails.
 */
int fs_passthrough_open(struct fs_session *s, struct fs_handle *h);
/* True when h was the last handle of a complete (verified) object open through the page
 * cache: then fs_page_drop_released. */
bool fs_passthrough_release(struct fs_session *s, struct fs_handle *h);
/*
 * A later serving process's open h of h->ino (h->passthrough set, h->id chosen): when files
 * of ino that an earlier process opened passthrough are still open, the kernel lets this
 * open be passthrough only, with their backing id: returns it (> 0, h recorded in the
 * ledger), else 0. The release of such a file, or of any file this process does not know
 * (an earlier process's): fs_passthrough_inherited_release with its fh (the ledger forgets
 * it; the backing id goes with the last file that names it).
 */
int fs_passthrough_inherited(struct fs_session *s, struct fs_handle *h);
void fs_passthrough_inherited_release(struct fs_session *s, uint64_t fh);
/* A later serving process: whether the INIT the kernel answered (the recorded reply) asked
 * for passthrough, and the ledger knows every file the kernel holds: new opens may then use
 * it. */
void fs_passthrough_note_replayed_init(struct fs_session *s);

/* Counts a handle rebuilt for an earlier serving process's open (ops.c) as one through
 * the page cache, which it is. 0 or -ENOMEM. */
int fs_passthrough_adopt(struct fs_session *s, struct fs_handle *h);
/* For a handle the kernel never released (the loop ended first): uncounts it, with no call
 * to the kernel. A no-op once released. */
void fs_passthrough_forget(struct fs_session *s, struct fs_handle *h);
/* The entry of the flight with this id, or NULL when no handle of it is open. Caller holds
 * pt.lock. */
struct fs_object *fs_object_find_locked(struct fs_session *s, uint64_t flight_id);

/*
 * For a flight just created: when the cache directory holds the object complete (another
 * mount's download, or a --keep-cache remount), waits a moment for the transfer thread to
 * take it up, so that even the first open of it is passthrough.
 */
void fs_passthrough_settle(struct fs_session *s, struct flight *f);

/* Starts and stops page_drop.c's worker (not with --no-passthrough). 0 or -errno. */
int fs_page_drop_start(struct fs_session *s);
void fs_page_drop_stop(struct fs_session *s);

/*
 * The last handle of complete object f open through the page cache was released (as
 * fs_passthrough_release said): the next open passes through, and the kernel would drop
 * the object's pages then, on that open. Drops them now instead.
 */
void fs_page_drop_released(struct fs_session *s, struct flight *f, fuse_ino_t ino);

/* A read request of h for [off, off+len) reached the daemon: drops what h left far behind. */
void fs_page_drop_note_read(struct fs_session *s, struct fs_handle *h, fuse_ino_t ino, uint64_t off,
                            uint64_t len);

/* fuse_reply_open for a passthrough open: libfuse 3.14 cannot send a backing id. */
int fs_passthrough_reply_open(fuse_req_t req, const struct fuse_file_info *fi, int backing_id);

#endif

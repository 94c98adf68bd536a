/*
 * The open/read glue between kernel requests and fetch/: opening an object (ops.c,
 * hash_list.c), reading it (reply.c, member.c), and the workers that answer later.
 */
#ifndef SPOOLFS_FS_OPEN_H
#define SPOOLFS_FS_OPEN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <fuse_lowlevel.h>
#include "fetch/engine/flight.h"
#include "fetch/engine/object.h"
#include "fs/handles.h"

struct fs_session;

/* Replies to a read from the spool: [off, off+len) must be readable. */
void fs_reply_spool(fuse_req_t req, struct flight *f, uint64_t off, uint64_t len);

/* Reads that are not local yet: parks them on the flight (see reply.c). Replies always. */
/*
 * Opening an object (ops.c): fs_open_object is fetch_object_open (which decides which
 * object, and joins its flight) for the new handle h, which keeps the member's view and the
 * file's directory; *f gets the reference. fs_open_finish holds the flight's spool for h and
 * replies to the open (takes h and the reference f). FETCH_OBJECT_HASH_LIST: a new flight of a
 * chunked object needs its hash list first (fs_open_after_hash_list). With read, h is rebuilt for a
 * read of an earlier serving process's fh (fi->fh; doc/survive.md) instead: linked under that fh,
 * and the read is answered, not an open.
 */
int fs_open_object(struct fs_session *s, fuse_ino_t ino, const struct fetch_hash_list *list,
                   struct fs_handle *h, struct flight **f, bool *created);
struct fs_adopting_read {
	off_t off;
	size_t size;
};
void fs_open_finish(fuse_req_t req, struct fs_session *s, fuse_ino_t ino, struct fuse_file_info *fi,
                    struct fs_handle *h, struct flight *f, bool created,
                    const struct fetch_hash_list *list, const struct fs_adopting_read *read);
/*
 * hash_list.c: the first open of an object with chunk hashes fetches its hash list (a flight
 * of its own, keyed by its sha256 and verified whole, which every opener joins), then joins
 * the object's flight with it (fetch_hash_list_take) and replies; a hash list that cannot be
 * fetched, does not match or does not describe the stored object fails the open with EIO. Replies
 * always, maybe later, from the opener thread. Takes h. With read (copied), the read of an earlier
 * process's fh that rebuilds h is answered instead (fs_open_finish).
 */
void fs_open_after_hash_list(fuse_req_t req, struct fs_session *s, fuse_ino_t ino,
                             const struct fuse_file_info *fi, struct fs_handle *h,
                             const struct fs_adopting_read *read);
int fs_opener_start(struct fs_session *s);
void fs_opener_stop(struct fs_session *s);

/* Starts and stops the replier thread; stopping answers what is queued first. 0 or -errno. */
int fs_replier_start(struct fs_session *s);
void fs_replier_stop(struct fs_session *s);

/* Parks a read of [off, off+len) of f. With a member (NULL otherwise), off is within the
 * member: the wait is for the member's whole range, which is verified before the reply.
 * opened_ns: the open's time when this is its first read (fs_counters.first_byte), else 0. */
void fs_read_wait(fuse_req_t req, struct fs_session *s, struct flight *f, uint64_t off,
                  uint64_t len, const struct fetch_member *member, uint64_t opened_ns);

/*
 * fetch_member_verify, counted (member_hash_failures): 0, or -EIO (after failing the pack's
 * flight when the bytes do not match: every reader of it gets -EIO, and the next open
 * fetches the pack again).
 */
int fs_member_verify(struct fs_session *s, struct flight *f, const struct fetch_member *m);

/*
 * Answers a read whose range is ready (1: from the spool), failed (-errno) or not there
 * yet (0: parked). With a member, off is within it (the reply is at member->base + off,
 * and a parked read waits for, and verifies, the whole member).
 */
void fs_answer_read(fuse_req_t req, struct fs_session *s, struct flight *f, int ready, uint64_t off,
                    uint64_t len, const struct fetch_member *member, uint64_t opened_ns);

/*
 * member_push.c. At the open of member h of inode ino, before it is answered: counts the
 * handle open and, when keep_cache is set, its bytes are here and match, and no other
 * handle of ino is open, gives them to the kernel's page cache, once until the kernel may
 * have dropped them (fs_member_push_forget). Nothing changes when it does not: the reads
 * come to fs_member_read.
 */
void fs_member_push_open(struct fs_session *s, fuse_ino_t ino, struct fs_handle *h,
                         bool keep_cache);
/* h is freed: no longer counted open (any member handle; a no-op for others). */
void fs_member_push_close(struct fs_session *s, struct fs_handle *h);
/* The kernel forgot these inodes, or dropped their pages: their next open pushes again. */
void fs_member_push_forget(struct fs_session *s, const fuse_ino_t *inos, size_t n);
void fs_member_push_forget_batch(struct fs_session *s, const struct fuse_forget_data *forgets,
                                 size_t n);
/* At the session's end. */
void fs_member_pushes_free(struct fs_session *s);
/* Reads [off, off+len) of member h (off within the member): verified, from the spool, or
 * parked. Replies always. */
void fs_member_read(fuse_req_t req, struct fs_session *s, struct fs_handle *h, uint64_t off,
                    size_t size);

/* Invalidates the kernel's cached pages of a failed object; the engine's on_failed hook.
 * Only queues the invalidation, for fs_inval_start's worker. */
void fs_on_flight_failed(void *ctx, struct flight *f);
int fs_inval_start(struct fs_session *s);
/* Joins the worker once the FUSE loop ended and nothing can fail a flight any more. */
void fs_inval_stop(struct fs_session *s);

#endif

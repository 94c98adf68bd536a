/*
 * Progress notes: which ranges of a spool file this session has written, for the serving
 * process that replaces one that died (doc/survive.md). The cache directory's records say
 * only what an fdatasync made durable, and the recorder's syncs trail a fast download by
 * tens of MiB: a process killed mid-stream left those bytes in the page cache, where the
 * next process of the same session finds them, but nothing said where they were.
 *
 * A note is a small file in the session's run directory (removed at unmount), one per
 * spool, replaced by rename so a kill never leaves half of one. It claims bytes only for
 * the spool file it was written for: the file's device, inode and birth time are in it,
 * so a spool replaced since (by this mount or another sharing the cache directory) makes
 * it say nothing. It promises nothing across a machine crash, which ends the session too.
 *
 * Transfer thread only; no state of its own.
 */
#ifndef SPOOLFS_FETCH_PROGRESS_NOTE_H
#define SPOOLFS_FETCH_PROGRESS_NOTE_H

#include <stdint.h>

#include "util/ranges.h"

/* Writes the note of `spool_name` (its open file spool_fd, of object size `size`): the
 * ranges in `written`. 0 or -errno (-EOPNOTSUPP: the file system shows no birth time,
 * so a note could not tell this spool from a later one: none is written). */
int progress_note_write(int dirfd, const char *spool_name, int spool_fd, uint64_t size,
                        const struct util_ranges *written);

/*
 * Adds to `out` the ranges the note of `spool_name` claims, when it was written for the
 * file now at that name in spool_dirfd and for an object of `size` bytes. 1 when it
 * added some, 0 when there is no note or it names another file, -errno (-EPROTO: a note
 * that does not parse; -ENOMEM).
 */
int progress_note_read(int dirfd, const char *spool_name, int spool_dirfd, uint64_t size,
                       struct util_ranges *out);

/* Removes the note of `spool_name`, if any (its spool is made afresh). */
void progress_note_remove(int dirfd, const char *spool_name);

#endif

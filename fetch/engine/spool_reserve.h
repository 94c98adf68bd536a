/*
 * Spool files made ahead. The transfer thread made each object's spool file itself, and
 * making an inode is not always cheap: on ext4 without a journal a new inode skips every
 * recently deleted one in its block group (`find_inode_bit` -> `recently_deleted`), 0.2 to
 * 1 ms each once earlier sessions have deleted their spools, so a walk of 1,000 small files
 * spent most of its time there, one file after another, between requests. Threads of their
 * own now keep a few unnamed files (O_TMPFILE) open in the spool directory, and the
 * transfer thread only names one (linkat, about 20 us), with the same meaning as the
 * O_CREAT | O_EXCL it replaces. Where unnamed files or naming them is not supported, or
 * none is ready, the caller creates the file itself as before.
 *
 * The files are fds: a thread makes one only while util_fd_room() leaves plenty for
 * readers and speculation (RESERVE_FD_ROOM), and keeps at most a target that doubles when
 * a take finds none ready (up to RESERVE_MAX).
 *
 * Lock: spool_reserve.lock guards the fds, the counts and the flags; no system call runs
 * under it.
 */
#ifndef SPOOLFS_FETCH_SPOOL_RESERVE_H
#define SPOOLFS_FETCH_SPOOL_RESERVE_H

struct spool_reserve;

/* Starts the threads that keep files ready in directory dirfd (not owned: it must stay open
 * until spool_reserve_stop). 0 or -errno. */
int spool_reserve_start(int dirfd, struct spool_reserve **out);

/* Stops and joins the threads and closes the files it kept (they vanish: never named).
 * NULL is fine. */
void spool_reserve_stop(struct spool_reserve *r);

/*
 * A new, empty file named `name` in the directory, open read-write (mode 0600): its fd
 * (the caller's), or -EEXIST when the name is taken, or -EAGAIN when none is ready or
 * naming is not supported here (the caller creates it), or another -errno. NULL r: -EAGAIN.
 */
int spool_reserve_take(struct spool_reserve *r, const char *name);

#endif

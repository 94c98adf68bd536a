/*
 * How many file descriptors this process may still open (RLIMIT_NOFILE's soft limit less
 * those open), and a process-wide count of opens that failed for want of one. Speculation
 * (prefetch, spool files made ahead) takes fds only from what readers leave: it asks
 * util_fd_room before it takes one, and backs off when util_fd_shorts grows.
 *
 * No locks: the count is an atomic; util_fd_room reads /proc/self/fd (one fd for the
 * moment it is read).
 */
#ifndef SPOOLFS_UTIL_FD_ROOM_H
#define SPOOLFS_UTIL_FD_ROOM_H

/* What util_fd_room answers when it cannot tell, or the limit is far away. */
#define UTIL_FD_ROOM_PLENTY (1 << 20)

/* Free fds under the soft limit now (0 when none, not even to look), or
 * UTIL_FD_ROOM_PLENTY when the limit is unbounded or /proc is not there. Any thread. */
int util_fd_room(void);

/* An open failed with EMFILE or ENFILE (err: a negative errno; others are ignored). */
void util_fd_note_short(int err);

/* How many util_fd_note_short calls there were: a change means fds ran short. */
unsigned util_fd_shorts(void);

#endif

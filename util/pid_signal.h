/*
 * Signalling a process named by a PID only while it is the process a caller examined
 * (`spoolfs reload`'s supervisor): a PID read from a file and checked in /proc may be
 * another process's by the time kill() runs, if the first exited and the number was given
 * again. The process is held by a pidfd from before the checks to the signal, which goes
 * through the pidfd (Linux 5.3).
 *
 * No state; nothing is logged here.
 */
#ifndef SPOOLFS_UTIL_PID_SIGNAL_H
#define SPOOLFS_UTIL_PID_SIGNAL_H

#include <stdbool.h>
#include <sys/types.h>

/*
 * Sends sig to pid if check(pid, ctx) says it is the process meant (check examines
 * /proc/pid and says itself why not) and that process has not exited since before check
 * began. 0 when sent; -EACCES when check said no; -ESRCH when there is no such process or
 * it exited during the checks (so what check saw may have been another); else -errno.
 * On a kernel without pidfds the checks then kill() run as they are, with the window open.
 */
int util_pid_signal_checked(pid_t pid, int sig, bool (*check)(pid_t pid, void *ctx), void *ctx);

#endif

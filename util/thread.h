/*
 * The one way spoolfs starts a thread of its own (the transfer thread, the hasher, every
 * worker). Signals are for libfuse's handlers and the FUSE threads whose waits they
 * interrupt to end the loop: taken by a thread of ours, a termination signal would
 * interrupt the wrong wait (curl_multi_poll, a kernel invalidation) and leave the mount
 * up. So a new thread starts with every signal blocked: the mask is set before
 * pthread_create and inherited, not set by the thread once it runs (a signal could reach
 * it in between). Its name shows in top -H, gdb and /proc/PID/task/TID/comm.
 */
#ifndef SPOOLFS_UTIL_THREAD_H
#define SPOOLFS_UTIL_THREAD_H

#include <pthread.h>

/* What /proc/PID/task/TID/comm holds at most (16 bytes with the NUL). */
#define UTIL_THREAD_NAME_MAX 15

/*
 * Starts fn(arg) on a new joinable thread named `name` (cut to UTIL_THREAD_NAME_MAX
 * characters), with every signal blocked that can be (the termination signals among
 * them), already when fn starts. The caller's own mask is the same afterwards. The caller
 * joins *out. 0, or -errno (nothing started, *out untouched).
 */
int util_thread_start(pthread_t *out, const char *name, void *(*fn)(void *arg), void *arg);

#endif

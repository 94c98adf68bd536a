/*
 * What the unit suites share: a flight waiter that records how it was answered (and can be
 * waited for from another thread), and a harness that runs workers in threads.
 *
 * Linked into every suite by tests/CMakeLists.txt. Nothing here allocates, so the
 * allocation-failure suite counts only the allocations of the code it tortures.
 */
#ifndef SPOOLFS_TESTS_HELPERS_H
#define SPOOLFS_TESTS_HELPERS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fetch/engine/flight.h"
#include "index/index.h"

/*
 * A parked read. Single-threaded tests read err and calls directly; a thread other than
 * the one that answers uses test_waiter_wait (or takes lock).
 */
struct test_waiter {
	struct flight_waiter w;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	/* Guarded by lock. */
	int err;       /* 1 until answered: neither 0 nor -errno */
	int calls;     /* times done was called: a correct flight calls it once */
	unsigned rank; /* with order: how many waiters sharing it were answered before */
	/* Shared by waiters whose answering order a test checks; NULL: not counted. */
	atomic_uint *order;
};

/* Fills t for [off, off+len). Its lock and condition need no destroy (static initialisers),
 * so a waiter may be set up again for the next read. */
void test_waiter_init(struct test_waiter *t, uint64_t off, uint64_t len);

/* Blocks until t was answered; returns its err. */
int test_waiter_wait(struct test_waiter *t);

/* Whether t was answered yet (under its lock). */
int test_waiter_calls(struct test_waiter *t);

/*
 * Runs fn in n threads at once, the i-th with args + i * stride, and joins them all. Workers
 * record their results in their argument; the caller asserts on them after this returns.
 */
void test_threads_run(unsigned n, void *(*fn)(void *arg), void *args, size_t stride);

/*
 * A fresh directory /tmp/spoolfs-NAME.XXXXXX: its path in path (at least 64 bytes), its
 * fd returned (-1 on failure). test_dir_remove closes the fd and removes it all (0 or -1,
 * as cmocka's setup and teardown return).
 */
int test_dir_make(const char *name, char *path, size_t cap);
int test_dir_remove(const char *path, int fd);

/*
 * stderr (the code's log) into the file at path until test_log_end, which restores it and
 * returns what was logged (a static buffer of at most 64 KiB): a case checks the reason
 * the code gave. cmocka reports failures on stderr too, so a teardown that finds *saved
 * still >= 0 prints test_log_end's text. *saved is -1 when nothing is captured.
 */
void test_log_begin(const char *path, int *saved);
char *test_log_end(const char *path, int *saved);

/* The inode at path ("a/b", from the root) in idx, or 0 when there is none. */
uint64_t test_index_ino(struct index *idx, const char *path);

#endif

/*
 * Allocation-failure injection for unit tests (curl's "torture" idea).
 *
 * A test executable linked with
 *   -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free,
 *       --wrap=strdup,--wrap=strndup,--wrap=asprintf
 * sends every call of those functions made by its own objects and by the static library
 * spoolcore (fetch/, index/) through alloc_fail.c. Shared libraries (libc itself, curl,
 * sqlite, OpenSSL, expat, cmocka) are not affected: their allocations are neither counted
 * nor failed.
 *
 * Counting: every malloc, calloc, realloc, strdup, strndup and asprintf is one call.
 * alloc_fail_arm(n) makes the n-th call from then on fail (NULL, or -1 for asprintf, errno
 * ENOMEM); only that one call fails, later ones succeed (so recovery paths run too).
 *
 * Live allocations: every pointer handed out by a wrapped function is remembered until it
 * is passed to the wrapped free or realloc; alloc_fail_live() is how many are outstanding.
 * A test records it before an operation and checks it after cleaning up.
 *
 * Thread-safe (one mutex); the counters are global, so arm only while no other thread of
 * the test allocates.
 */
#ifndef SPOOLFS_TESTS_ALLOC_FAIL_H
#define SPOOLFS_TESTS_ALLOC_FAIL_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Fails the n-th counted call from now (n >= 1; 0 fails none but still counts). Resets the
 * call count and the fired flag.
 */
void alloc_fail_arm(unsigned long n);
/* No further failure; the call count and the fired flag are kept for reading. */
void alloc_fail_disarm(void);
/* True when the armed failure has been injected since the last arm. */
bool alloc_fail_fired(void);
/* Counted calls since the last arm. */
unsigned long alloc_fail_calls(void);
/* Allocations handed out by the wrappers and not yet freed. */
size_t alloc_fail_live(void);

#endif

/*
 * The --wrap targets behind alloc_fail.h. __real_* are the C library's functions (or a
 * sanitizer's interceptors of them). strdup, strndup and asprintf are reimplemented on top
 * of the counting malloc rather than forwarded: the C library's own versions allocate
 * inside libc, where --wrap cannot see it, so a forwarded call could neither be failed by
 * its count nor tracked as a live allocation. asprintf leaves *strp untouched on failure,
 * which the C library documents as "undefined": callers must not rely on it.
 *
 * Live pointers are kept in a fixed open-addressing set (linear probing, backward-shift
 * deletion, no tombstones) that allocates nothing itself. They are stored complemented, so
 * the set does not keep a leaked block reachable in LeakSanitizer's eyes.
 */
#include "alloc_fail.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
void __real_free(void *p);

void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);
void __wrap_free(void *p);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
int __wrap_asprintf(char **strp, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define SET_SLOTS (1u << 18)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* Guarded by lock. */
static unsigned long armed_at; /* 0 = disarmed */
static unsigned long calls;
static bool fired;
static uintptr_t set[SET_SLOTS]; /* ~pointer; 0 = empty */
static size_t live;

static size_t slot_of(uintptr_t v)
{
	uint64_t h = (uint64_t)v * 0x9e3779b97f4a7c15ull;
	return (size_t)(h >> 40) & (SET_SLOTS - 1);
}

/* Caller holds lock. */
static void set_add(void *p)
{
	uintptr_t v = ~(uintptr_t)p;
	size_t s = slot_of(v);

	if (live >= SET_SLOTS / 2) {
		fputs("alloc_fail: too many live allocations to track\n", stderr);
		abort();
	}
	while (set[s])
		s = (s + 1) & (SET_SLOTS - 1);
	set[s] = v;
	live++;
}

/* Caller holds lock. Returns whether p was tracked. */
static bool set_remove(const void *p)
{
	uintptr_t v = ~(uintptr_t)p;
	size_t s = slot_of(v);

	while (set[s] && set[s] != v)
		s = (s + 1) & (SET_SLOTS - 1);
	if (!set[s])
		return false;
	/* Backward-shift: move later members of the probe run into the hole. */
	for (size_t hole = s, j = s;;) {
		j = (j + 1) & (SET_SLOTS - 1);
		if (!set[j]) {
			set[hole] = 0;
			break;
		}
		size_t home = slot_of(set[j]);
		/* set[j] may move to hole unless its home lies cyclically in (hole, j]. */
		bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
		if (!stays) {
			set[hole] = set[j];
			hole = j;
		}
	}
	live--;
	return true;
}

/* Counts one call; true when this one must fail. */
static bool count_call(void)
{
	bool fail;

	pthread_mutex_lock(&lock);
	calls++;
	fail = armed_at != 0 && calls == armed_at;
	if (fail)
		fired = true;
	pthread_mutex_unlock(&lock);
	return fail;
}

static void *track(void *p)
{
	if (p) {
		pthread_mutex_lock(&lock);
		set_add(p);
		pthread_mutex_unlock(&lock);
	}
	return p;
}

void alloc_fail_arm(unsigned long n)
{
	pthread_mutex_lock(&lock);
	armed_at = n;
	calls = 0;
	fired = false;
	pthread_mutex_unlock(&lock);
}

void alloc_fail_disarm(void)
{
	pthread_mutex_lock(&lock);
	armed_at = 0;
	pthread_mutex_unlock(&lock);
}

bool alloc_fail_fired(void)
{
	bool f;

	pthread_mutex_lock(&lock);
	f = fired;
	pthread_mutex_unlock(&lock);
	return f;
}

unsigned long alloc_fail_calls(void)
{
	unsigned long n;

	pthread_mutex_lock(&lock);
	n = calls;
	pthread_mutex_unlock(&lock);
	return n;
}

size_t alloc_fail_live(void)
{
	size_t n;

	pthread_mutex_lock(&lock);
	n = live;
	pthread_mutex_unlock(&lock);
	return n;
}

void *__wrap_malloc(size_t size)
{
	if (count_call()) {
		errno = ENOMEM;
		return NULL;
	}
	return track(__real_malloc(size));
}

void *__wrap_calloc(size_t n, size_t size)
{
	if (count_call()) {
		errno = ENOMEM;
		return NULL;
	}
	return track(__real_calloc(n, size));
}

void *__wrap_realloc(void *p, size_t size)
{
	void *np;

	if (count_call()) {
		errno = ENOMEM;
		return NULL; /* p stays valid and owned by the caller */
	}
	np = __real_realloc(p, size);
	if (np || size == 0) {
		pthread_mutex_lock(&lock);
		if (p)
			set_remove(p);
		if (np)
			set_add(np);
		pthread_mutex_unlock(&lock);
	}
	return np;
}

void __wrap_free(void *p)
{
	if (!p)
		return;
	/* Pointers the wrappers did not hand out (from libc's own allocators) are freed too. */
	pthread_mutex_lock(&lock);
	set_remove(p);
	pthread_mutex_unlock(&lock);
	__real_free(p);
}

char *__wrap_strndup(const char *s, size_t n)
{
	size_t len = strnlen(s, n);
	char *d = __wrap_malloc(len + 1);

	if (!d)
		return NULL;
	memcpy(d, s, len);
	d[len] = '\0';
	return d;
}

char *__wrap_strdup(const char *s)
{
	return __wrap_strndup(s, SIZE_MAX);
}

int __wrap_asprintf(char **strp, const char *fmt, ...)
{
	va_list ap, ap2;
	int n;
	char *s;

	va_start(ap, fmt);
	va_copy(ap2, ap);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		va_end(ap2);
		return -1;
	}
	s = __wrap_malloc((size_t)n + 1);
	if (!s) {
		va_end(ap2);
		return -1;
	}
	vsnprintf(s, (size_t)n + 1, fmt, ap2);
	va_end(ap2);
	*strp = s;
	return n;
}

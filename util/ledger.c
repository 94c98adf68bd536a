/*
 * util/ledger.h: counted entries in a shared mapping. Open addressing with linear probing;
 * a freed slot becomes a tombstone (key UINT64_MAX) so that probes go past it.
 */
#include "util/ledger.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define TOMBSTONE UINT64_MAX

struct slot {
	uint64_t key; /* 0: never used; TOMBSTONE: freed */
	int64_t value;
	int64_t count;
};

struct shared {
	pthread_mutex_t lock; /* process-shared, robust */
	struct slot slots[UTIL_LEDGER_SLOTS];
};

struct util_ledger {
	struct shared *sh;
};

static int map(int fd, struct util_ledger **out)
{
	struct util_ledger *l = calloc(1, sizeof(*l));
	void *p;

	if (!l)
		return -ENOMEM;
	p = mmap(NULL, sizeof(struct shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		int rc = -errno;
		free(l);
		return rc;
	}
	l->sh = p;
	*out = l;
	return 0;
}

int util_ledger_create(int *fd, struct util_ledger **out)
{
	pthread_mutexattr_t attr;
	int rc;

	*fd = memfd_create("spoolfs-ledger", MFD_CLOEXEC);
	if (*fd < 0)
		return -errno;
	if (ftruncate(*fd, sizeof(struct shared)) != 0) {
		rc = -errno;
		goto fail;
	}
	rc = map(*fd, out); /* zero-filled: every slot unused */
	if (rc)
		goto fail;
	pthread_mutexattr_init(&attr);
	pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
	rc = -pthread_mutex_init(&(*out)->sh->lock, &attr);
	pthread_mutexattr_destroy(&attr);
	if (rc == 0)
		return 0;
	util_ledger_unmap(*out);
	*out = NULL;
fail:
	close(*fd);
	*fd = -1;
	return rc;
}

int util_ledger_map(int fd, struct util_ledger **out)
{
	return map(fd, out);
}

void util_ledger_unmap(struct util_ledger *l)
{
	if (!l)
		return;
	munmap(l->sh, sizeof(*l->sh));
	free(l);
}

static void lock(struct util_ledger *l)
{
	/* Its holder died: the table is as it left it (see the header). */
	if (pthread_mutex_lock(&l->sh->lock) == EOWNERDEAD)
		pthread_mutex_consistent(&l->sh->lock);
}

/* Under the lock: key's slot, or NULL; *free_slot the first reusable one on its probe. */
static struct slot *find_locked(struct util_ledger *l, uint64_t key, struct slot **free_slot)
{
	size_t start = (size_t)((key * 0x9E3779B97F4A7C15ULL) % UTIL_LEDGER_SLOTS);

	*free_slot = NULL;
	for (size_t i = 0; i < UTIL_LEDGER_SLOTS; i++) {
		struct slot *s = &l->sh->slots[(start + i) % UTIL_LEDGER_SLOTS];
		if (s->key == key)
			return s;
		if ((s->key == 0 || s->key == TOMBSTONE) && !*free_slot)
			*free_slot = s;
		if (s->key == 0)
			break;
	}
	return NULL;
}

int64_t util_ledger_add(struct util_ledger *l, uint64_t key, int64_t value)
{
	struct slot *s, *free_slot;
	int64_t rc;

	if (key == 0 || key == TOMBSTONE)
		return -EINVAL;
	lock(l);
	s = find_locked(l, key, &free_slot);
	if (!s && free_slot) {
		s = free_slot;
		s->value = value;
		s->count = 0;
		s->key = key; /* last: the slot is whole before it is found */
	}
	if (s) {
		s->count++;
		rc = s->value;
	} else {
		rc = -ENOSPC;
	}
	pthread_mutex_unlock(&l->sh->lock);
	return rc;
}

int64_t util_ledger_sub(struct util_ledger *l, uint64_t key, int64_t *value, bool *value_last)
{
	struct slot *s, *free_slot;
	int64_t rc = -ENOENT;
	bool last = false;

	lock(l);
	s = find_locked(l, key, &free_slot);
	if (s) {
		*value = s->value;
		rc = --s->count;
		if (rc <= 0) {
			s->key = TOMBSTONE;
			rc = 0;
			last = true;
			/* Only when asked: a scan of every slot, at an entry's end. */
			for (size_t i = 0; value_last && last && i < UTIL_LEDGER_SLOTS; i++) {
				const struct slot *o = &l->sh->slots[i];
				if (o->key != 0 && o->key != TOMBSTONE && o->value == *value)
					last = false;
			}
		}
	}
	pthread_mutex_unlock(&l->sh->lock);
	if (value_last)
		*value_last = last;
	return rc;
}

int64_t util_ledger_get(struct util_ledger *l, uint64_t key, int64_t *value)
{
	struct slot *s, *free_slot;
	int64_t count = 0;

	*value = 0;
	lock(l);
	s = find_locked(l, key, &free_slot);
	if (s) {
		*value = s->value;
		count = s->count;
	}
	pthread_mutex_unlock(&l->sh->lock);
	return count;
}

/*
 * util/ledger.h: two open-addressed tables (linear probing) in one shared mapping: inodes
 * (key, value, owner, count) and opens (fh -> inode). A freed slot becomes a tombstone (key
 * UINT64_MAX) so that probes go past it, and tombstones at the end of a probe run go back
 * to unused: a run never grows by lookups, and a table of freed slots does not stay long.
 *
 * Order of writes, for a process killed holding the lock (the robust mutex hands the
 * tables over as they are):
 * - a slot is filled whole before its key is set, and freed by its key alone;
 * - an open counts its inode first, then records the open: stopped between, the inode's
 *   count is one too high (the kernel has at most that many files), never too low;
 * - a close forgets the open first, then uncounts its inode: stopped between, likewise.
 * A count too high keeps an inode in its mode (and a backing id open) longer than needed,
 * which the kernel allows; a count too low would let a later process open the inode the
 * other way, which the kernel fails (EIO). An inode entry whose count is 0 (a process
 * stopped between its key and its count, or between its count and its freeing) holds no
 * open: every reader takes it as absent, and an open fills it again. The steps are stores
 * the compiler must keep in order (a kill can land between any two instructions):
 * step() is the fence between them; the robust mutex orders them for the next process.
 *
 * The mapping starts with a magic number and a format version: the supervisor made it with
 * its own binary, and a reload's newer binary that lays it out otherwise must refuse it
 * (the reload is then rolled back), not read slots at the wrong offsets.
 */
#include "util/ledger.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define TOMBSTONE UINT64_MAX
#define LEDGER_MAGIC 0x73706f6f6c6c6467ULL /* "spoolldg" */
#define LEDGER_FORMAT 2

/* Keeps the stores before it before the stores after it (see the top). */
static void step(void)
{
	atomic_signal_fence(memory_order_seq_cst);
}

struct slot {
	uint64_t key;   /* 0: never used; TOMBSTONE: freed */
	int64_t value;  /* inodes: the backing id, or 0; opens: the inode */
	int64_t count;  /* inodes: open files */
	uint64_t owner; /* inodes: who made the entry */
};

struct shared {
	uint64_t magic;       /* LEDGER_MAGIC, written once by the maker */
	uint32_t format;      /* LEDGER_FORMAT */
	pthread_mutex_t lock; /* process-shared, robust */
	int overflowed;
	struct slot inodes[UTIL_LEDGER_SLOTS];
	struct slot opens[UTIL_LEDGER_OPENS];
};

struct util_ledger {
	struct shared *sh;
};

static int map(int fd, struct util_ledger **out)
{
	struct util_ledger *l = calloc(1, sizeof(*l));
	struct stat st;
	void *p;

	if (!l)
		return -ENOMEM;
	if (fstat(fd, &st) != 0 || st.st_size != (off_t)sizeof(struct shared)) {
		free(l);
		return -EPROTO; /* another spoolfs's layout (or not a ledger) */
	}
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
	/* Sparse: pages are made as slots are first written. */
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
	(*out)->sh->magic = LEDGER_MAGIC;
	(*out)->sh->format = LEDGER_FORMAT;
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
	int rc = map(fd, out);

	if (rc == 0 && ((*out)->sh->magic != LEDGER_MAGIC || (*out)->sh->format != LEDGER_FORMAT)) {
		util_ledger_unmap(*out);
		*out = NULL;
		rc = -EPROTO;
	}
	return rc;
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
	/* Its holder died: the tables are as it left them (see the top). */
	if (pthread_mutex_lock(&l->sh->lock) == EOWNERDEAD)
		pthread_mutex_consistent(&l->sh->lock);
}

static size_t home(uint64_t key, size_t n)
{
	return (size_t)((key * 0x9E3779B97F4A7C15ULL) % n);
}

/* Under the lock: key's slot in t, or NULL; *free_slot the first reusable one on its probe
 * (NULL when the table is full). */
static struct slot *find_locked(struct slot *t, size_t n, uint64_t key, struct slot **free_slot)
{
	size_t start = home(key, n);

	*free_slot = NULL;
	for (size_t i = 0; i < n; i++) {
		struct slot *s = &t[(start + i) % n];
		if (s->key == key)
			return s;
		if ((s->key == 0 || s->key == TOMBSTONE) && !*free_slot)
			*free_slot = s;
		if (s->key == 0)
			break;
	}
	return NULL;
}

/* Under the lock: frees s, and turns the tombstones that end a probe run back to unused
 * (one key written at a time: stopped anywhere, every probe still works). */
static void free_locked(struct slot *t, size_t n, struct slot *s)
{
	size_t i = (size_t)(s - t);

	s->key = TOMBSTONE;
	step();
	if (t[(i + 1) % n].key != 0)
		return;
	for (size_t k = 0; k < n && t[i].key == TOMBSTONE; k++) {
		t[i].key = 0;
		step();
		i = (i + n - 1) % n;
	}
}

/* Under the lock: records open for key's entry e (counted first: see the top). */
static int64_t record_locked(struct util_ledger *l, struct slot *e, struct slot *open_free,
                             uint64_t open, uint64_t key)
{
	e->count++;
	step();
	open_free->value = (int64_t)key;
	open_free->count = 0;
	open_free->owner = 0;
	step();
	open_free->key = open;
	step();
	return e->value;
}

int64_t util_ledger_open(struct util_ledger *l, uint64_t open, uint64_t key, int64_t value,
                         uint64_t owner)
{
	struct slot *e, *e_free, *o, *o_free;
	int64_t rc = -ENOSPC;

	if (key == 0 || key == TOMBSTONE || open == 0 || open == TOMBSTONE)
		return -EINVAL;
	lock(l);
	o = find_locked(l->sh->opens, UTIL_LEDGER_OPENS, open, &o_free);
	if (o) {
		/* Recorded already: its inode's value, counted once. */
		e = find_locked(l->sh->inodes, UTIL_LEDGER_SLOTS, (uint64_t)o->value, &e_free);
		rc = e && e->count > 0 ? e->value : 0;
		goto out;
	}
	e = find_locked(l->sh->inodes, UTIL_LEDGER_SLOTS, key, &e_free);
	if (!o_free || (!e && !e_free)) {
		l->sh->overflowed = 1;
		goto out;
	}
	if (e && e->count <= 0) {
		/* Left by a process stopped mid-step: it holds no open, so it is this open's. */
		e->value = value;
		e->owner = owner;
		e->count = 0;
		step();
	} else if (!e) {
		e = e_free;
		e->value = value;
		e->count = 0;
		e->owner = owner;
		step();
		e->key = key; /* last: the slot is whole before it is found */
		step();
	}
	rc = record_locked(l, e, o_free, open, key);
out:
	pthread_mutex_unlock(&l->sh->lock);
	return rc;
}

int64_t util_ledger_join(struct util_ledger *l, uint64_t open, uint64_t key, uint64_t not_owner)
{
	struct slot *e, *e_free, *o, *o_free;
	int64_t rc = 0;

	if (key == 0 || key == TOMBSTONE || open == 0 || open == TOMBSTONE)
		return -EINVAL;
	lock(l);
	e = find_locked(l->sh->inodes, UTIL_LEDGER_SLOTS, key, &e_free);
	if (!e || e->count <= 0 || e->value <= 0 || e->owner == not_owner)
		goto out;
	o = find_locked(l->sh->opens, UTIL_LEDGER_OPENS, open, &o_free);
	if (o) {
		rc = e->value;
	} else if (!o_free) {
		/* The kernel holds the inode on this backing id whatever the ledger can record:
		 * the open uses it (its release is not counted, so the id stays open until the
		 * unmount), where a new id would fail in the kernel (EIO). */
		l->sh->overflowed = 1;
		rc = e->value;
	} else {
		rc = record_locked(l, e, o_free, open, key);
	}
out:
	pthread_mutex_unlock(&l->sh->lock);
	return rc;
}

int64_t util_ledger_close(struct util_ledger *l, uint64_t open, int64_t *value, bool *value_last)
{
	struct slot *e, *o, *unused;
	int64_t rc = -ENOENT;
	bool last = false;

	*value = 0;
	lock(l);
	o = find_locked(l->sh->opens, UTIL_LEDGER_OPENS, open, &unused);
	if (!o)
		goto out;
	e = find_locked(l->sh->inodes, UTIL_LEDGER_SLOTS, (uint64_t)o->value, &unused);
	free_locked(l->sh->opens, UTIL_LEDGER_OPENS, o); /* first: see the top */
	rc = 0;
	if (!e)
		goto out;
	*value = e->value;
	if (e->count > 1) {
		rc = --e->count;
		goto out;
	}
	rc = 0;
	last = true;
	/* Only when asked: a scan of every slot, at an entry's end, before the count drops, so
	 * that the drop and the freeing are next to each other (a count of 0 is absent anyway). */
	for (size_t i = 0; value_last && i < UTIL_LEDGER_SLOTS; i++) {
		const struct slot *s = &l->sh->inodes[i];
		if (s != e && s->key != 0 && s->key != TOMBSTONE && s->count > 0 &&
		    s->value == *value) {
			last = false;
			break;
		}
	}
	e->count = 0;
	step();
	free_locked(l->sh->inodes, UTIL_LEDGER_SLOTS, e);
out:
	pthread_mutex_unlock(&l->sh->lock);
	if (value_last)
		*value_last = last;
	return rc;
}

int64_t util_ledger_get(struct util_ledger *l, uint64_t key, int64_t *value, uint64_t *owner)
{
	struct slot *s, *free_slot;
	int64_t count = 0;

	*value = 0;
	if (owner)
		*owner = 0;
	lock(l);
	s = find_locked(l->sh->inodes, UTIL_LEDGER_SLOTS, key, &free_slot);
	if (s && s->count > 0) {
		*value = s->value;
		count = s->count;
		if (owner)
			*owner = s->owner;
	}
	pthread_mutex_unlock(&l->sh->lock);
	return count;
}

bool util_ledger_overflowed(struct util_ledger *l)
{
	bool overflowed;

	lock(l);
	overflowed = l->sh->overflowed != 0;
	pthread_mutex_unlock(&l->sh->lock);
	return overflowed;
}

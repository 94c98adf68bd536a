/*
 * Idle spools left open a while. A spool that goes idle (complete, retired, no user) was
 * closed at once and opened again by name at its next open: a program that opens the
 * members of one pack one after another (Python's importer, node's require) paid an openat
 * and two fstats per file for the same pack. The table keeps the last FLIGHT_LINGER idle
 * spools open instead, and closes the oldest one beyond them, if it is idle still. Bounded:
 * FLIGHT_LINGER fds at most, taken only while util_fd_room leaves LINGER_FD_ROOM, and none
 * once fds have run short in this process (util_fd_shorts). In a shared cache directory an open
 * spool is marked in use, so at most FLIGHT_LINGER idle ones more are kept from other mounts'
 * eviction.
 *
 * The ring holds no reference: a flight freed while in it takes itself out
 * (flight_linger_forget). Lock: table->linger_lock guards the ring; lock order:
 * linger_lock, then a flight's lock (never taken with a flight's lock held).
 */
#include <string.h>
#include <unistd.h>

#include "fetch/engine/flight_i.h"
#include "util/fd_room.h"

/* The ring grows only while this many fds are left: readers and speculation come first. */
#define LINGER_FD_ROOM 256

/* Caller holds linger_lock: takes slot i out of the ring; the fd to close (f still idle)
 * or -1. f's lingers flag is the last of f touched: once it reads false, f may go. */
static int drop_locked(struct flight_table *t, unsigned i, bool close_idle)
{
	struct flight *f = t->linger[i];
	int fd = -1;

	memmove(&t->linger[i], &t->linger[i + 1], (t->n_linger - i - 1) * sizeof(t->linger[0]));
	atomic_store(&t->n_linger, t->n_linger - 1);
	if (close_idle) {
		pthread_mutex_lock(&f->lock);
		if (flight_spool_idle_locked(f))
			fd = flight_spool_take_idle_locked(f);
		pthread_mutex_unlock(&f->lock);
	}
	atomic_store(&f->lingers, false);
	return fd;
}

void flight_linger(struct flight *f)
{
	struct flight_table *t = f->table;
	int fds[FLIGHT_LINGER + 1];
	unsigned n = 0, before, max = FLIGHT_LINGER;
	bool grow = true;

	/* Out of the locks: util_fd_room reads /proc. Only a growing ring takes fds; a full
	 * one closes one for each it keeps. */
	if (util_fd_shorts() != 0)
		max = 0; /* fds ran short: none lingers */
	else if (atomic_load(&t->n_linger) < FLIGHT_LINGER)
		grow = util_fd_room() >= LINGER_FD_ROOM;

	pthread_mutex_lock(&t->linger_lock);
	before = t->n_linger;
	if (!grow)
		max = before;
	/* Already there (used and idle again): it moves up to the newest. */
	for (unsigned i = 0; atomic_load(&f->lingers) && i < t->n_linger; i++)
		if (t->linger[i] == f)
			(void)drop_locked(t, i, false);
	if (max > 0) {
		t->linger[t->n_linger] = f;
		atomic_store(&t->n_linger, t->n_linger + 1);
		atomic_store(&f->lingers, true);
	}
	while (t->n_linger > max)
		fds[n++] = drop_locked(t, 0, true);
	if (max == 0) {
		pthread_mutex_lock(&f->lock);
		fds[n++] = flight_spool_idle_locked(f) ? flight_spool_take_idle_locked(f) : -1;
		pthread_mutex_unlock(&f->lock);
	}
	pthread_mutex_unlock(&t->linger_lock);
	for (unsigned i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

void flight_linger_forget(struct flight *f)
{
	struct flight_table *t = f->table;

	pthread_mutex_lock(&t->linger_lock);
	for (unsigned i = 0; i < t->n_linger; i++)
		if (t->linger[i] == f) {
			(void)drop_locked(t, i, false); /* its fd goes with it */
			break;
		}
	pthread_mutex_unlock(&t->linger_lock);
}

void flight_linger_flush(struct flight_table *t)
{
	int fds[FLIGHT_LINGER + 1];
	unsigned n = 0;

	pthread_mutex_lock(&t->linger_lock);
	while (t->n_linger)
		fds[n++] = drop_locked(t, 0, true);
	pthread_mutex_unlock(&t->linger_lock);
	for (unsigned i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

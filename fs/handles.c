/*
 * Open files by the id the kernel keeps (FUSE's fh), not by a pointer: a serving process
 * that replaces a dead one (doc/survive.md) gets reads and releases of files an earlier
 * process opened, and must tell "mine" from "not mine" by the number alone.
 *
 * An id is (generation << 40) | serial, with bit 63 set for a passthrough open: the
 * generation is the serving process's (0 for the first, one more per restart), so ids of
 * different processes never collide, and a release of an earlier process's passthrough
 * handle is known as one without a table. ops.c rebuilds a handle it does not know from
 * the request's inode at its first read (fs_handle_adopt).
 *
 * Lock: fs_session.handles.lock guards the table (by_id), the open list and each
 * handle's prev, next and id_next.
 */
#include <stdlib.h>

#include "fs/handles.h"
#include "fs/open.h"
#include "fs/passthrough.h"
#include "fs/session.h"

#define SERIAL_BITS 40

static struct fs_handle **bucket_of(struct fs_session *s, uint64_t id)
{
	return &s->handles.by_id[(id ^ (id >> SERIAL_BITS)) % FS_HANDLE_BUCKETS];
}

static void link_locked(struct fs_session *s, struct fs_handle *h)
{
	struct fs_handle **bucket = bucket_of(s, h->id);

	h->id_next = *bucket;
	*bucket = h;
	h->prev = NULL;
	h->next = s->handles.open;
	if (h->next)
		h->next->prev = h;
	s->handles.open = h;
}

static struct fs_handle *find_locked(struct fs_session *s, uint64_t id)
{
	struct fs_handle *h = *bucket_of(s, id);

	while (h && h->id != id)
		h = h->id_next;
	return h;
}

uint64_t fs_handle_assign_id(struct fs_session *s, struct fs_handle *h)
{
	uint64_t serial, id;

	if (h->id)
		return h->id;
	serial = atomic_fetch_add(&s->handles.serial, 1) + 1;
	id = (s->generation << SERIAL_BITS) | (serial & ((1ULL << SERIAL_BITS) - 1));
	if (h->passthrough)
		id |= FS_FH_PASSTHROUGH;
	h->id = id;
	return id;
}

uint64_t fs_handle_track(struct fs_session *s, struct fs_handle *h)
{
	uint64_t id = fs_handle_assign_id(s, h);

	pthread_mutex_lock(&s->handles.lock);
	link_locked(s, h);
	pthread_mutex_unlock(&s->handles.lock);
	/* Not h->id: once linked, h is the release's to free (after the open's reply). */
	return id;
}

struct fs_handle *fs_handle_find(struct fs_session *s, uint64_t fh)
{
	struct fs_handle *h;

	pthread_mutex_lock(&s->handles.lock);
	h = find_locked(s, fh);
	pthread_mutex_unlock(&s->handles.lock);
	return h;
}

struct fs_handle *fs_handle_adopt(struct fs_session *s, struct fs_handle *h, uint64_t fh)
{
	struct fs_handle *found;

	pthread_mutex_lock(&s->handles.lock);
	found = find_locked(s, fh);
	if (!found) {
		h->id = fh;
		link_locked(s, h);
	}
	pthread_mutex_unlock(&s->handles.lock);
	if (!found) {
		atomic_fetch_add(&s->counters->handles_adopted, 1);
		return h;
	}
	/* Another read of the same file rebuilt it first: that one stays. */
	h->id = 0;
	fs_handle_free(s, h);
	return found;
}

void fs_handle_free(struct fs_session *s, struct fs_handle *h)
{
	pthread_mutex_lock(&s->handles.lock);
	struct fs_handle **pp = h->id ? bucket_of(s, h->id) : NULL;
	while (pp && *pp && *pp != h)
		pp = &(*pp)->id_next;
	if (pp && *pp) { /* linked: out of its bucket and the open list */
		*pp = h->id_next;
		if (h->prev)
			h->prev->next = h->next;
		else
			s->handles.open = h->next;
		if (h->next)
			h->next->prev = h->prev;
	}
	pthread_mutex_unlock(&s->handles.lock);
	(void)atomic_load_explicit(&h->reads_done, memory_order_acquire);
	fs_member_push_close(s, h);
	if (h->flight) {
		fs_passthrough_forget(s, h); /* released already, unless the loop ended first */
		flight_release_spool(h->flight);
		flight_unref(h->flight);
	}
	free(h->text);
	free(h);
}

void fs_handles_free_all(struct fs_session *s)
{
	struct fs_handle *h;

	for (;;) {
		pthread_mutex_lock(&s->handles.lock);
		h = s->handles.open;
		pthread_mutex_unlock(&s->handles.lock);
		if (!h)
			break;
		fs_handle_free(s, h);
	}
}

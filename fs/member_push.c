/*
 * member_push.c gives a pack member's bytes to the kernel's page cache with its open
 * (FUSE_NOTIFY_STORE), when they are here and match: the reads that follow are then the
 * kernel's, with no request. A member cannot be passthrough (it is a range of its pack's
 * spool), so a program that opens thousands of small files made one READ round trip per
 * member otherwise (the AWS CLI's warm run: 610 of its requests, doc/benchmarks.md).
 *
 * Once per inode while the kernel keeps its pages (a bit per inode): a push copies the
 * member, and a header every compiler run opens would be copied at every open for nothing.
 * The bit goes when the kernel forgets the inode, when an open is answered without
 * keep_cache (the kernel drops the pages then) and when a failed flight's pages are
 * invalidated (reply.c). Pages the kernel reclaims on its own are read as requests until it
 * forgets the inode.
 *
 * Why a push waits for no read: FUSE_NOTIFY_STORE locks each page of the inode, and a READ
 * the kernel sent holds its pages locked until it is answered. At the loop's end a READ that
 * was queued but never read is never answered, and a push waiting on it would hang the stop
 * (libfuse joins its workers first; reply.c and page_drop.c avoid the same wait). So an
 * inode is pushed only while no other handle of it is open (an open not yet answered cannot
 * read, and an mmap keeps its handle until munmap), and an open of it that comes during the
 * push is answered once the push ended. A later serving process does not push: handles an
 * earlier one opened are not counted here.
 *
 * Lock: fs_session.pushes.lock guards the bits and the open counts; no I/O under it.
 */
#include <errno.h>
#include <stdlib.h>

#include "fs/handles.h"
#include "fs/open.h"
#include "fs/session.h"

/*
 * Members at most this long are pushed: the push is a copy into the kernel made while the
 * open waits for its answer, so one member's cost stays small; larger members are read as
 * the program asks (it may read a few pages of them only).
 */
#define MEMBER_PUSH_MAX (256u * 1024)

/* One inode's member handles open now. */
struct fs_member_open {
	uint64_t ino;
	unsigned handles;
	bool pushing; /* a push of it is under way: its other opens wait (push_ended) */
	struct fs_member_open *next;
};

static struct fs_member_open **bucket_of(struct fs_member_pushes *p, uint64_t ino)
{
	return &p->open[ino % FS_MEMBER_OPEN_BUCKETS];
}

/* Under lock: the link to ino's entry in its bucket (*link is NULL when it has none). */
static struct fs_member_open **find_open(struct fs_member_pushes *p, uint64_t ino)
{
	struct fs_member_open **link = bucket_of(p, ino);

	while (*link && (*link)->ino != ino)
		link = &(*link)->next;
	return link;
}

/* Under lock: whether ino's bit is set. */
static bool bit_get(const struct fs_member_pushes *p, uint64_t ino)
{
	return ino / 64 < p->words && (p->bits[ino / 64] & (UINT64_C(1) << (ino % 64)));
}

/* Under lock: sets ino's bit, growing the map; false when out of memory. */
static bool bit_set(struct fs_member_pushes *p, uint64_t ino)
{
	size_t word = (size_t)(ino / 64);

	if (word >= p->words) {
		size_t words = word + 1 > p->words * 2 ? word + 1 : p->words * 2;
		uint64_t *grown = realloc(p->bits, words * sizeof(*grown));
		if (!grown)
			return false;
		for (size_t i = p->words; i < words; i++)
			grown[i] = 0;
		p->bits = grown;
		p->words = words;
	}
	p->bits[word] |= UINT64_C(1) << (ino % 64);
	return true;
}

/* Under lock. */
static void bit_clear(struct fs_member_pushes *p, uint64_t ino)
{
	if (ino / 64 < p->words)
		p->bits[ino / 64] &= ~(UINT64_C(1) << (ino % 64));
}

/* Gives member h's bytes to the kernel; true when it took them. */
static bool push(struct fs_session *s, fuse_ino_t ino, struct fs_handle *h)
{
	const struct fetch_member *m = &h->member;
	/* h holds the spool, and its open is not answered yet: no release can close it. */
	int fd = flight_spool_fd(h->flight);
	struct fuse_bufvec buf = FUSE_BUFVEC_INIT(m->size);

	/* A member that does not match is never pushed: its reads come and fail (-EIO). */
	if (fd < 0 || fs_member_verify(s, h->flight, m) != 0)
		return false;
	atomic_store(&h->member_verified, true);
	buf.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	buf.buf[0].fd = fd;
	buf.buf[0].pos = (off_t)m->base;
	/* Refused (the kernel dropped the inode meanwhile, no memory): reads come as before. */
	if (fuse_lowlevel_notify_store(s->se, ino, 0, &buf, 0) != 0)
		return false;
	atomic_fetch_add(&s->counters->members_pushed, 1);
	return true;
}

void fs_member_push_open(struct fs_session *s, fuse_ino_t ino, struct fs_handle *h, bool keep_cache)
{
	struct fs_member_pushes *p = &s->pushes;
	const struct fetch_member *m = &h->member;
	bool here = m->size > 0 && m->size <= MEMBER_PUSH_MAX &&
	            flight_ready(h->flight, m->base, m->size) == 1;
	bool want = false;

	pthread_mutex_lock(&p->lock);
	struct fs_member_open *o = *find_open(p, ino);
	if (!o && (o = calloc(1, sizeof(*o))) != NULL) {
		o->ino = ino;
		o->next = *bucket_of(p, ino);
		*bucket_of(p, ino) = o;
	}
	if (!o) {
		p->off = true; /* this handle goes uncounted: no push may assume it has no reads */
		goto out;
	}
	/* Counted before any wait: a pusher's handle may close meanwhile, and o must stay. */
	o->handles++;
	h->member_counted = true;
	while (o->pushing)
		pthread_cond_wait(&p->push_ended, &p->lock);
	/* Without keep_cache the kernel drops the inode's pages once this open is answered. */
	if (!keep_cache)
		bit_clear(p, ino);
	want = keep_cache && here && !p->off && s->generation == 0 && o->handles == 1 &&
	       !bit_get(p, ino) && !fuse_session_exited(s->se) && bit_set(p, ino);
	o->pushing = want;
out:
	pthread_mutex_unlock(&p->lock);
	if (!want)
		return;
	bool pushed = push(s, ino, h);
	pthread_mutex_lock(&p->lock);
	if (!pushed)
		bit_clear(p, ino);
	o->pushing = false;
	pthread_cond_broadcast(&p->push_ended);
	pthread_mutex_unlock(&p->lock);
}

void fs_member_push_close(struct fs_session *s, struct fs_handle *h)
{
	struct fs_member_pushes *p = &s->pushes;

	if (!h->member_counted)
		return;
	pthread_mutex_lock(&p->lock);
	struct fs_member_open **pp = find_open(p, h->ino);
	struct fs_member_open *o = *pp;
	if (o && --o->handles == 0 && !o->pushing) {
		*pp = o->next;
		free(o);
	}
	pthread_mutex_unlock(&p->lock);
	h->member_counted = false;
}

void fs_member_push_forget(struct fs_session *s, const fuse_ino_t *inos, size_t n)
{
	pthread_mutex_lock(&s->pushes.lock);
	for (size_t i = 0; i < n; i++)
		bit_clear(&s->pushes, inos[i]);
	pthread_mutex_unlock(&s->pushes.lock);
}

void fs_member_push_forget_batch(struct fs_session *s, const struct fuse_forget_data *forgets,
                                 size_t n)
{
	pthread_mutex_lock(&s->pushes.lock);
	for (size_t i = 0; i < n; i++)
		bit_clear(&s->pushes, forgets[i].ino);
	pthread_mutex_unlock(&s->pushes.lock);
}

void fs_member_pushes_free(struct fs_session *s)
{
	for (size_t b = 0; b < FS_MEMBER_OPEN_BUCKETS; b++)
		while (s->pushes.open[b]) {
			struct fs_member_open *o = s->pushes.open[b];
			s->pushes.open[b] = o->next;
			free(o);
		}
	free(s->pushes.bits);
	s->pushes.bits = NULL;
	s->pushes.words = 0;
}

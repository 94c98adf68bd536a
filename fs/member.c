/*
 * member.c serves pack members: small files stored back to back in one pack object, so
 * that a walk of a cold tree costs one request per pack instead of one per file. A member
 * opens its pack's flight (one download, however many members and readers), and each read
 * is answered only once the member's own bytes are there and match the member's own
 * sha256 (fetch_member_verify: once per pack flight, not per open), without waiting for
 * the rest of the pack (flight_spec.readers_verify).
 *
 * A member whose bytes are here and verified when it is opened goes into the kernel's page
 * cache with the open (fs_member_push): its reads are then the kernel's, with no request.
 * A program that opens thousands of small files made one READ round trip per member
 * otherwise (the AWS CLI: 610 of its 4,400 requests, doc/benchmarks.md). Once per inode
 * while the kernel keeps it: the push copies the member each time, and a header opened by
 * every compiler run would be copied at every open for nothing.
 */
#include <errno.h>
#include <stdlib.h>

#include "fs/handles.h"
#include "fs/open.h"
#include "fs/session.h"

int fs_member_verify(struct fs_session *s, struct flight *f, const struct fetch_member *m)
{
	int rc = fetch_member_verify(s->resolver, f, m);

	if (rc == -EBADMSG) {
		atomic_fetch_add(&s->counters->member_hash_failures, 1);
		rc = -EIO;
	}
	return rc;
}

void fs_member_read(fuse_req_t req, struct fs_session *s, struct fs_handle *h, uint64_t off,
                    size_t size)
{
	struct flight *f = h->flight;
	const struct fetch_member *m = &h->member;
	uint64_t len = m->size - off < size ? m->size - off : size;
	bool verified = atomic_load(&h->member_verified);
	int rc;

	/* The pack is small: it downloads whole from the open, so no read needs noting. */
	rc = verified ? flight_ready(f, m->base + off, len) : flight_ready(f, m->base, m->size);
	if (rc == 1 && !verified) {
		rc = fs_member_verify(s, f, m);
		if (rc == 0) {
			atomic_store(&h->member_verified, true);
			rc = 1;
		}
	}
	uint64_t opened_ns = fs_handle_first_read_ns(h);
	/* Done with h: from here on only f, which the handle keeps alive until release. */
	atomic_fetch_add_explicit(&h->reads_done, 1, memory_order_release);
	fs_answer_read(req, s, f, rc, off, len, m, opened_ns);
}

/*
 * Members at most this long are pushed: the push is a copy into the kernel made while the
 * open waits for its answer, so one member's cost stays small; larger members are read as
 * the program asks (it may read a few pages of them only).
 */
#define MEMBER_PUSH_MAX (256u * 1024)

/* Under pt.lock: whether ino's bit is set, and with set, sets it (growing the map). */
static bool pushed_bit(struct fs_pt *pt, uint64_t ino, bool set)
{
	size_t word = (size_t)(ino / 64);
	uint64_t bit = UINT64_C(1) << (ino % 64);

	if (word >= pt->pushed_words) {
		if (!set)
			return false;
		size_t words = word + 1 > pt->pushed_words * 2 ? word + 1 : pt->pushed_words * 2;
		uint64_t *grown = realloc(pt->pushed, words * sizeof(*grown));
		if (!grown)
			return false; /* pushed again at the next open: only a copy more */
		for (size_t i = pt->pushed_words; i < words; i++)
			grown[i] = 0;
		pt->pushed = grown;
		pt->pushed_words = words;
	}
	bool was = pt->pushed[word] & bit;
	if (set)
		pt->pushed[word] |= bit;
	return was;
}

void fs_member_push(struct fs_session *s, fuse_ino_t ino, struct fs_handle *h)
{
	const struct fetch_member *m = &h->member;
	struct flight *f = h->flight;
	bool pushed;

	if (m->size == 0 || m->size > MEMBER_PUSH_MAX || flight_ready(f, m->base, m->size) != 1)
		return;
	pthread_mutex_lock(&s->pt.lock);
	pushed = pushed_bit(&s->pt, ino, false);
	pthread_mutex_unlock(&s->pt.lock);
	/* A member that does not match is never pushed: its reads come and fail (-EIO). */
	if (pushed || fs_member_verify(s, f, m) != 0)
		return;
	atomic_store(&h->member_verified, true);
	/* Held as a read's reply holds it (fs_reply_spool): a release may close an idle spool. */
	int fd = flight_hold_spool_to_record(f);
	if (fd < 0)
		return;
	struct fuse_bufvec buf = FUSE_BUFVEC_INIT(m->size);
	buf.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	buf.buf[0].fd = fd;
	buf.buf[0].pos = (off_t)m->base;
	/* Refused (the kernel dropped the inode meanwhile, no memory): reads come as before. */
	int rc = fuse_lowlevel_notify_store(s->se, ino, 0, &buf, 0);
	flight_release_spool_recorded(f);
	if (rc != 0)
		return;
	atomic_fetch_add(&s->counters->members_pushed, 1);
	pthread_mutex_lock(&s->pt.lock);
	(void)pushed_bit(&s->pt, ino, true);
	pthread_mutex_unlock(&s->pt.lock);
}

void fs_member_forget(struct fs_session *s, fuse_ino_t ino)
{
	pthread_mutex_lock(&s->pt.lock);
	if (ino / 64 < s->pt.pushed_words)
		s->pt.pushed[ino / 64] &= ~(UINT64_C(1) << (ino % 64));
	pthread_mutex_unlock(&s->pt.lock);
}

/*
 * member.c serves pack members: small files stored back to back in one pack object, so
 * that a walk of a cold tree costs one request per pack instead of one per file. A member
 * opens its pack's flight (one download, however many members and readers), and each read
 * is answered only once the member's own bytes are there and match the member's own
 * sha256 (fetch_member_verify: once per pack flight, not per open), without waiting for
 * the rest of the pack (flight_spec.readers_verify).
 * A member whose bytes are here when it is opened may go into the kernel's page cache with
 * the open instead (member_push.c).
 */
#include <errno.h>

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

/*
 * member.c serves pack members: small files stored back to back in one pack object, so
 * that a walk of a cold tree costs one request per pack instead of one per file. A member
 * opens its pack's flight (one download, however many members and readers), and each read
 * is answered only once the member's own bytes are there and match the member's own
 * sha256, without waiting for the rest of the pack (flight_spec.readers_verify).
 */
#include <errno.h>
#include <openssl/evp.h>
#include <string.h>
#include <unistd.h>

#include "util/hex.h"
#include "util/log.h"
#include "fs/fs_i.h"

/* Read back in pieces: a member is small, but --pack-under may make it a few MiB. */
#define VERIFY_PIECE (64u << 10)

static int member_sha256(int fd, const struct fs_member *m, char hex[65])
{
	unsigned char buf[VERIFY_PIECE], md[EVP_MAX_MD_SIZE];
	unsigned int md_len = 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	uint64_t done = 0;
	int rc = 0;

	if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
		rc = -ENOMEM;
		goto out;
	}
	while (done < m->size) {
		size_t want = m->size - done < sizeof(buf) ? (size_t)(m->size - done) : sizeof(buf);
		ssize_t n = pread(fd, buf, want, (off_t)(m->base + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			goto out;
		}
		if (EVP_DigestUpdate(ctx, buf, (size_t)n) != 1) {
			rc = -EIO;
			goto out;
		}
		done += (uint64_t)n;
	}
	if (EVP_DigestFinal_ex(ctx, md, &md_len) != 1 || md_len != 32) {
		rc = -EIO;
		goto out;
	}
	util_hex_encode(md, 32, hex);
out:
	EVP_MD_CTX_free(ctx);
	return rc;
}

int fs_member_verify(struct fs_session *s, struct flight *f, const struct fs_member *m)
{
	char got[65];
	int rc = member_sha256(flight_spool_fd(f), m, got);

	if (rc == 0 && strcmp(got, m->sha256) == 0)
		return 0;
	if (rc < 0) {
		util_log(UTIL_LOG_WARN, "%s: cannot read a member back at %llu: %s", flight_name(f),
		         (unsigned long long)m->base, strerror(-rc));
		return -EIO;
	}
	atomic_fetch_add(&s->counters->member_hash_failures, 1);
	util_log(UTIL_LOG_WARN,
	         "%s: the member at %llu (%llu bytes) has sha256 %.16s..., not %.16s...: the "
	         "pack is fetched again at the next open",
	         flight_name(f), (unsigned long long)m->base, (unsigned long long)m->size, got,
	         m->sha256);
	/* The pack's bytes are not what the manifest names: none of them is trusted now. */
	flight_fail(f, -EIO);
	return -EIO;
}

void fs_member_read(fuse_req_t req, struct fs_session *s, struct fs_handle *h, uint64_t off,
                    size_t size)
{
	struct flight *f = h->flight;
	const struct fs_member *m = &h->member;
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

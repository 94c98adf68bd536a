/*
 * member.c: pack members' bytes checked against their own sha256 (object.h), once per pack
 * flight. A pack is fetched as one object and its bytes are published as they arrive
 * (flight_spec.readers_verify), so each member is checked before any reader sees it; the
 * answer is kept by (flight id, member: offset, size and sha256), so that later opens of a
 * member (a warm
 * walk opens thousands) read nothing back. Lock: verified_lock (object_i.h), innermost;
 * the hashing runs without it.
 */
#include <errno.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fetch/engine/object_i.h"
#include "util/hex.h"
#include "util/log.h"

/* Read back in pieces: a member is small, but --pack-under may make it a few MiB. */
#define VERIFY_PIECE (64u << 10)

static int member_sha256(int fd, const struct fetch_member *m, char hex[INDEX_SHA256_HEX + 1])
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

static size_t bucket_of(uint64_t flight_id, uint64_t base, size_t n_buckets)
{
	uint64_t h = (flight_id * 0x9e3779b97f4a7c15ull) ^ (base * 0xff51afd7ed558ccdull);

	return (size_t)((h ^ (h >> 29)) % n_buckets);
}

static bool same_member(const struct fetch_member *a, const struct fetch_member *b)
{
	return a->base == b->base && a->size == b->size && strcmp(a->sha256, b->sha256) == 0;
}

static bool find_locked(const struct fetch_objects *o, uint64_t flight_id,
                        const struct fetch_member *m)
{
	if (!o->n_buckets)
		return false;
	for (const struct verified_member *v =
	         o->verified[bucket_of(flight_id, m->base, o->n_buckets)];
	     v; v = v->next)
		if (v->flight_id == flight_id && same_member(&v->member, m))
			return true;
	return false;
}

/* Doubles the buckets when chains grow past two on average; keeps the old on failure. */
static void grow_locked(struct fetch_objects *o)
{
	size_t n = o->n_buckets ? o->n_buckets * 2 : 256;
	struct verified_member **b;

	if (o->n_buckets && o->n_verified < 2 * o->n_buckets)
		return;
	b = calloc(n, sizeof(*b));
	if (!b)
		return;
	for (size_t i = 0; i < o->n_buckets; i++) {
		while (o->verified[i]) {
			struct verified_member *v = o->verified[i];
			o->verified[i] = v->next;
			size_t j = bucket_of(v->flight_id, v->member.base, n);
			v->next = b[j];
			b[j] = v;
		}
	}
	free(o->verified);
	o->verified = b;
	o->n_buckets = n;
}

/* Remembers a match. Without memory it is only checked again at the next open. */
static void remember(struct fetch_objects *o, uint64_t flight_id, const struct fetch_member *m)
{
	struct verified_member *v = malloc(sizeof(*v));

	if (!v)
		return;
	v->flight_id = flight_id;
	v->member = *m;
	pthread_mutex_lock(&o->verified_lock);
	grow_locked(o);
	if (!o->n_buckets || find_locked(o, flight_id, m)) {
		free(v); /* another reader checked it meanwhile, or no buckets */
	} else {
		size_t i = bucket_of(flight_id, m->base, o->n_buckets);
		v->next = o->verified[i];
		o->verified[i] = v;
		o->n_verified++;
	}
	pthread_mutex_unlock(&o->verified_lock);
}

bool fetch_member_verified(struct fetch_objects *o, const struct flight *f,
                           const struct fetch_member *m)
{
	bool found;

	pthread_mutex_lock(&o->verified_lock);
	found = find_locked(o, flight_id(f), m);
	pthread_mutex_unlock(&o->verified_lock);
	return found;
}

int fetch_member_verify(struct fetch_objects *o, struct flight *f, const struct fetch_member *m)
{
	char got[INDEX_SHA256_HEX + 1];
	int rc;

	if (fetch_member_verified(o, f, m))
		return 0;
	/* Two first readers may both hash it: a member is small, and neither waits. */
	rc = member_sha256(flight_spool_fd(f), m, got);
	if (rc == 0 && strcmp(got, m->sha256) == 0) {
		remember(o, flight_id(f), m);
		return 0;
	}
	if (rc < 0) {
		util_log(UTIL_LOG_WARN, "%s: cannot read a member back at %llu: %s", flight_name(f),
		         (unsigned long long)m->base, strerror(-rc));
		return -EIO;
	}
	util_log(UTIL_LOG_WARN,
	         "%s: the member at %llu (%llu bytes) has sha256 %.16s..., not %.16s...: the "
	         "pack is fetched again at the next open",
	         flight_name(f), (unsigned long long)m->base, (unsigned long long)m->size, got,
	         m->sha256);
	/* The pack's bytes are not what the manifest names: none of them is trusted now. */
	flight_fail(f, -EIO);
	return -EBADMSG;
}

void fetch_member_forget_all(struct fetch_objects *o)
{
	for (size_t i = 0; i < o->n_buckets; i++) {
		while (o->verified[i]) {
			struct verified_member *v = o->verified[i];
			o->verified[i] = v->next;
			free(v);
		}
	}
	free(o->verified);
	o->verified = NULL;
	o->n_buckets = o->n_verified = 0;
}

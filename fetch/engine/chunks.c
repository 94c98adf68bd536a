/*
 * Chunk verification. An object with chunk hashes (flight_spec.chunk_size) is checked one
 * chunk at a time: a chunk is published only once all its bytes are written and its sha256
 * matches its entry in the hash list, whatever wrote them (a stream, a restored spool,
 * another mount's download). Whole chunks are hashed on the table's chunk pool, one thread
 * per core, so verification keeps up with the network and no reader waits for more than
 * its own chunks.
 *
 * A chunk that does not match is fetched again, once: its bytes leave `written`, the URL
 * that sent them is left for the transfer thread to move away from (another mirror first,
 * when there is one), and its readers stay parked. If the second copy fails too, the reads
 * that touch it get -EIO, and only those: the rest of the object is served. The next open
 * gives it one more try (flight_retry_bad_chunks).
 *
 * Locks: chunk_state, chunk_src, chunks_verified, chunks_bad and chunk_bad_url are guarded
 * by the flight's lock. The pool's queue lock is taken after it (never the other way
 * round). Hashing reads the spool with no lock held, as a counted user of its fd.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fetch/engine/flight_i.h"
#include "util/log.h"
#include "util/worker.h"

enum chunk_state {
	CHUNK_MISSING,  /* some of its bytes are not written */
	CHUNK_DUE,      /* written whole: to be hashed */
	CHUNK_HASHING,  /* queued on the pool, or being hashed */
	CHUNK_VERIFIED, /* matched its entry: published */
	CHUNK_BAD,      /* failed after its second fetch: its readers get -EIO */
};
#define CHUNK_STATE_MASK 0x7fu
#define CHUNK_RETRIED 0x80u /* fetched again already after a mismatch */
/* chunk_src of bytes no URL of this session sent: a restored spool, another mount's. */
#define CHUNK_SRC_CACHE 0xffu
/* The pool's size: a thread per online CPU, within these. */
#define CHUNK_POOL_MAX 16
#define HASH_READ_BYTES (64u << 10)

struct chunk_job {
	struct util_worker_job link; /* first: the pool hands this pointer back */
	struct flight *f;            /* a reference of its own */
	uint64_t chunk;
};

uint64_t flight_chunk_count(uint64_t size, uint64_t chunk_size)
{
	return chunk_size ? size / chunk_size + (size % chunk_size != 0) : 0;
}

bool flight_has_chunks(const struct flight *f)
{
	return f->verify.chunk_size != 0;
}

int flight_chunks_init(struct flight *f, const struct flight_spec *spec)
{
	uint64_t n = flight_chunk_count(spec->size, spec->chunk_size);

	if (!spec->chunk_size)
		return 0;
	if ((spec->chunk_size & (spec->chunk_size - 1)) || !spec->chunk_digests)
		return -EINVAL;
	if (n > SIZE_MAX / FLIGHT_DIGEST_BYTES)
		return -ENOMEM;
	f->verify.chunk_digests = malloc(n ? n * FLIGHT_DIGEST_BYTES : 1);
	f->verify.chunk_state = calloc(n ? n : 1, 1);
	f->verify.chunk_src = calloc(n ? n : 1, 1);
	if (!f->verify.chunk_digests || !f->verify.chunk_state || !f->verify.chunk_src)
		return -ENOMEM;
	memcpy(f->verify.chunk_digests, spec->chunk_digests, n * FLIGHT_DIGEST_BYTES);
	f->verify.chunk_size = spec->chunk_size;
	f->verify.n_chunks = n;
	return 0;
}

void flight_chunks_free(struct flight *f)
{
	free(f->verify.chunk_digests);
	free(f->verify.chunk_state);
	free(f->verify.chunk_src);
	f->verify.chunk_digests = NULL;
	f->verify.chunk_state = NULL;
	f->verify.chunk_src = NULL;
	util_ranges_free(&f->verify.chunks_bad);
}

/* Chunk c's bytes: [*lo, *hi). */
static void chunk_bounds(const struct flight *f, uint64_t c, uint64_t *lo, uint64_t *hi)
{
	*lo = c * f->verify.chunk_size;
	*hi = f->size - *lo < f->verify.chunk_size ? f->size : *lo + f->verify.chunk_size;
}

void flight_chunks_round(const struct flight *f, uint64_t *start, uint64_t *end)
{
	if (!f->verify.chunk_size)
		return;
	*start -= *start % f->verify.chunk_size;
	if (*end % f->verify.chunk_size)
		*end += f->verify.chunk_size - *end % f->verify.chunk_size;
	if (*end > f->size)
		*end = f->size;
}

void flight_chunks_written_locked(struct flight *f, uint64_t start, uint64_t end, unsigned url_idx)
{
	if (!f->verify.chunk_size || start >= end)
		return;
	for (uint64_t c = start / f->verify.chunk_size; c <= (end - 1) / f->verify.chunk_size;
	     c++) {
		uint64_t lo, hi;
		chunk_bounds(f, c, &lo, &hi);
		/* The last writer of a chunk is the one to blame for it. */
		f->verify.chunk_src[c] =
		    url_idx < FLIGHT_MAX_URLS ? (uint8_t)url_idx : CHUNK_SRC_CACHE;
		if ((f->verify.chunk_state[c] & CHUNK_STATE_MASK) == CHUNK_MISSING &&
		    util_ranges_covers(&f->written, lo, hi))
			f->verify.chunk_state[c] =
			    (uint8_t)((f->verify.chunk_state[c] & CHUNK_RETRIED) | CHUNK_DUE);
	}
}

bool flight_chunks_bad_locked(const struct flight *f, uint64_t off, uint64_t len)
{
	return f->verify.chunks_bad.n > 0 &&
	       util_ranges_next_covered(&f->verify.chunks_bad, off, off + len) < off + len;
}

/* The sha256 of [lo, hi) of the spool fd into digest. 0 or -errno. */
static int hash_range(int fd, uint64_t lo, uint64_t hi, unsigned char *digest)
{
	char buf[HASH_READ_BYTES];
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned int len = 0;
	int rc = 0;

	if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
		rc = -ENOMEM;
		goto out;
	}
	while (lo < hi) {
		size_t want = hi - lo < sizeof(buf) ? (size_t)(hi - lo) : sizeof(buf);
		ssize_t n = pread(fd, buf, want, (off_t)lo);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			goto out;
		}
		EVP_DigestUpdate(ctx, buf, (size_t)n);
		lo += (uint64_t)n;
	}
	if (EVP_DigestFinal_ex(ctx, digest, &len) != 1 || len != FLIGHT_DIGEST_BYTES)
		rc = -EIO;
out:
	EVP_MD_CTX_free(ctx);
	return rc;
}

/* Who sent chunk bytes, for a log line. */
static const char *source_shown(const struct flight *f, uint8_t src, char *buf, size_t cap)
{
	if (src >= f->src.n_urls)
		return "the cache directory";
	return util_redact_url(f->src.urls[src], buf, cap);
}

/*
 * Hashes chunk c (written whole, marked CHUNK_HASHING) and settles it: published, fetched
 * again, or failed for good. Runs on a pool thread, or inline without a pool.
 */
static void chunk_check(struct flight *f, uint64_t c)
{
	unsigned char digest[FLIGHT_DIGEST_BYTES];
	struct flight_waiter *ready = NULL, *broken = NULL;
	bool active, match, all = false, refetch = false, bad = false;
	uint64_t lo, hi;
	uint8_t src;
	char shown[512];
	int fd, rc;

	chunk_bounds(f, c, &lo, &hi);
	/* A user of the spool while it reads: a completion elsewhere must not close the fd. */
	pthread_mutex_lock(&f->lock);
	active = f->state == FLIGHT_ACTIVE && f->spool.fd >= 0;
	fd = f->spool.fd;
	f->spool.users += active;
	pthread_mutex_unlock(&f->lock);
	if (!active)
		return;
	rc = hash_range(fd, lo, hi, digest);
	flight_spool_user_left(f);
	if (rc) {
		util_log(UTIL_LOG_ERROR,
		         "%s: cannot read chunk %" PRIu64 " back from the spool: %s", f->name, c,
		         strerror(-rc));
		flight_fail(f, rc);
		return;
	}
	match =
	    memcmp(digest, f->verify.chunk_digests + c * FLIGHT_DIGEST_BYTES, sizeof(digest)) == 0;

	pthread_mutex_lock(&f->lock);
	if (f->state != FLIGHT_ACTIVE) {
		pthread_mutex_unlock(&f->lock);
		return;
	}
	src = f->verify.chunk_src[c];
	if (match) {
		rc = util_ranges_add(&f->published, lo, hi);
		if (rc == 0) {
			f->verify.chunk_state[c] =
			    (uint8_t)((f->verify.chunk_state[c] & CHUNK_RETRIED) | CHUNK_VERIFIED);
			all = ++f->verify.chunks_verified == f->verify.n_chunks;
			ready = flight_collect_locked(f);
		}
	} else if (!(f->verify.chunk_state[c] & CHUNK_RETRIED)) {
		/* Its bytes are unwritten again: the transfer thread fetches them anew. */
		rc = util_ranges_remove(&f->written, lo, hi);
		if (rc == 0) {
			f->verify.chunk_state[c] = CHUNK_MISSING | CHUNK_RETRIED;
			f->verify.chunk_bad_url = src < f->src.n_urls ? src + 1u : 0;
			refetch = true;
		}
	} else {
		rc = util_ranges_add(&f->verify.chunks_bad, lo, hi);
		if (rc == 0) {
			f->verify.chunk_state[c] = CHUNK_BAD | CHUNK_RETRIED;
			bad = true;
			broken = flight_collect_bad_locked(f);
		}
	}
	pthread_mutex_unlock(&f->lock);
	if (rc) {
		flight_fail(f, rc);
		return;
	}
	flight_answer(ready, 0);
	if (refetch || bad)
		util_log(refetch ? UTIL_LOG_WARN : UTIL_LOG_ERROR,
		         "%s: chunk %" PRIu64 " (bytes %" PRIu64 "-%" PRIu64
		         ") does not match its sha256%s, from %s; %s",
		         f->name, c, lo, hi, bad ? " again" : "",
		         source_shown(f, src, shown, sizeof(shown)),
		         bad ? "reads of it get EIO" : "fetching it again");
	flight_answer(broken, -EIO);
	if (all)
		flight_complete(f);
	if (refetch && f->table->on_refetch)
		f->table->on_refetch(f->table->on_refetch_ctx, f);
}

bool flight_chunk_undecodable(struct flight *f, uint64_t c, unsigned url_idx)
{
	struct flight_waiter *broken = NULL;
	bool refetch = false;
	uint64_t lo, hi;
	int rc = 0;

	chunk_bounds(f, c, &lo, &hi);
	pthread_mutex_lock(&f->lock);
	/* Only a missing chunk is this frame's to settle (no other request writes it). */
	if (f->state != FLIGHT_ACTIVE ||
	    (f->verify.chunk_state[c] & CHUNK_STATE_MASK) != CHUNK_MISSING) {
		pthread_mutex_unlock(&f->lock);
		return false;
	}
	if (!(f->verify.chunk_state[c] & CHUNK_RETRIED)) {
		/* Nothing of it was written: it is fetched again as any gap, from elsewhere. */
		f->verify.chunk_state[c] |= CHUNK_RETRIED;
		f->verify.chunk_bad_url = url_idx < f->src.n_urls ? url_idx + 1u : 0;
		refetch = true;
	} else {
		/* Counted as written (its spool bytes are never served) so that no request asks
		 * for it again; flight_retry_bad_chunks gives a later open its try. */
		rc = util_ranges_add(&f->verify.chunks_bad, lo, hi);
		if (rc == 0)
			rc = util_ranges_add(&f->written, lo, hi);
		if (rc == 0) {
			f->verify.chunk_state[c] = CHUNK_BAD | CHUNK_RETRIED;
			broken = flight_collect_bad_locked(f);
		}
	}
	pthread_mutex_unlock(&f->lock);
	if (rc) {
		flight_fail(f, rc);
		return false;
	}
	flight_answer(broken, -EIO);
	if (refetch && f->table->on_refetch)
		f->table->on_refetch(f->table->on_refetch_ctx, f);
	return refetch;
}

static void chunk_run(void *ctx, struct util_worker_job *link)
{
	struct flight_table *table = ctx;
	struct chunk_job *job = (struct chunk_job *)link;

	/* Stopping: the engine is gone and the flight ends with the session. */
	if (!atomic_load(&table->chunk_pool_stopping))
		chunk_check(job->f, job->chunk);
	flight_unref(job->f);
	free(job);
}

int flight_chunks_dispatch(struct flight *f, uint64_t start, uint64_t end)
{
	struct util_worker *pool = f->table->chunk_pool;

	if (!f->verify.chunk_size || start >= end)
		return 0;
	for (uint64_t c = start / f->verify.chunk_size; c <= (end - 1) / f->verify.chunk_size;
	     c++) {
		struct chunk_job *job;
		bool take;
		pthread_mutex_lock(&f->lock);
		take = (f->verify.chunk_state[c] & CHUNK_STATE_MASK) == CHUNK_DUE;
		if (take)
			f->verify.chunk_state[c] =
			    (uint8_t)((f->verify.chunk_state[c] & CHUNK_RETRIED) | CHUNK_HASHING);
		pthread_mutex_unlock(&f->lock);
		if (!take)
			continue;
		if (!pool) {
			chunk_check(f, c);
			continue;
		}
		job = malloc(sizeof(*job));
		if (!job)
			return -ENOMEM; /* the caller fails f: this chunk would never be checked */
		flight_ref(f);
		job->f = f;
		job->chunk = c;
		if (!util_worker_queue(pool, &job->link)) {
			flight_unref(f); /* the pool stops: so does the session */
			free(job);
		}
	}
	return 0;
}

bool flight_retry_bad_chunks(struct flight *f)
{
	bool any = false;

	if (!f->verify.chunk_size)
		return false;
	pthread_mutex_lock(&f->lock);
	while (f->state == FLIGHT_ACTIVE && f->verify.chunks_bad.n > 0) {
		struct util_range r = f->verify.chunks_bad.v[0];
		if (util_ranges_remove(&f->written, r.start, r.end) != 0)
			break; /* out of memory: they stay failed */
		for (uint64_t c = r.start / f->verify.chunk_size;
		     c <= (r.end - 1) / f->verify.chunk_size; c++)
			f->verify.chunk_state[c] =
			    CHUNK_MISSING | CHUNK_RETRIED; /* one fetch more */
		(void)util_ranges_remove(&f->verify.chunks_bad, r.start, r.end); /* a whole range */
		any = true;
	}
	pthread_mutex_unlock(&f->lock);
	return any;
}

int flight_chunk_pool_start(struct flight_table *table)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned n = cpus < 1 ? 1 : cpus > CHUNK_POOL_MAX ? CHUNK_POOL_MAX : (unsigned)cpus;

	atomic_store(&table->chunk_pool_stopping, false);
	return util_worker_start_pool("spoolfs-chunk", n, chunk_run, table, &table->chunk_pool);
}

void flight_chunk_pool_stop(struct flight_table *table)
{
	if (!table->chunk_pool)
		return;
	atomic_store(&table->chunk_pool_stopping, true);
	util_worker_stop(table->chunk_pool); /* lets the checks running finish; drops the rest */
	table->chunk_pool = NULL;
}

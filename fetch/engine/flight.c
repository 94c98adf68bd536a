/*
 * One flight: its waiters, its spool, the bytes delivered into it, and their verification
 * (see flight.h for the contract; the table of flights is flight_table.c).
 *
 * Lock order: table->lock, then flight->lock. Waiters are collected under the flight lock
 * into a private list and answered after it is dropped, so a reply (a splice into
 * /dev/fuse) never runs under a lock.
 */
#include "util/hex.h"
#include "fetch/engine/flight.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fetch/engine/flight_i.h"
#include "fetch/engine/spool_reserve.h"
#include "fetch/cache/lease.h"
#include "util/fd_room.h"
#include "util/log.h"
#include "fetch/engine/version_pins.h"
#include "index/records.h"

/* urls[0] is the flight's url, freed with it. */
static void sources_free(struct flight_sources *src)
{
	for (unsigned i = 1; i < src->n_urls; i++) {
		free(src->urls[i]);
		free(src->paths[i]);
	}
	free(src->urls);
	free(src->dir_fds);
	free(src->paths);
}

int flight_new(struct flight_table *table, const struct flight_spec *spec, uint64_t id,
               struct flight **out)
{
	struct flight *f = calloc(1, sizeof(*f));
	int rc = -ENOMEM;

	*out = NULL;
	if (!f)
		return -ENOMEM;
	f->key = strdup(spec->key);
	f->url = strdup(spec->url);
	f->name = strdup(spec->name);
	f->src.urls = calloc(1 + (size_t)spec->n_mirror_urls, sizeof(*f->src.urls));
	f->src.dir_fds = calloc(1 + (size_t)spec->n_mirror_urls, sizeof(*f->src.dir_fds));
	f->src.paths = calloc(1 + (size_t)spec->n_mirror_urls, sizeof(*f->src.paths));
	if (!f->key || !f->url || !f->name || !f->src.urls || !f->src.dir_fds || !f->src.paths)
		goto fail;
	f->src.dir_fds[0] = -1;
	f->src.urls[f->src.n_urls++] = f->url;
	/* fs/options.c allows no more mirrors than fit. */
	for (unsigned i = 0; i < spec->n_mirror_urls && f->src.n_urls < FLIGHT_MAX_URLS; i++) {
		bool beneath = spec->mirror_dir_fds && spec->mirror_dir_fds[i] >= 0;
		f->src.dir_fds[f->src.n_urls] = beneath ? spec->mirror_dir_fds[i] : -1;
		if (beneath && !(f->src.paths[f->src.n_urls] = strdup(spec->mirror_paths[i])))
			goto fail;
		f->src.urls[f->src.n_urls] = strdup(spec->mirror_urls[i]);
		if (!f->src.urls[f->src.n_urls]) {
			free(f->src.paths[f->src.n_urls]);
			goto fail;
		}
		f->src.n_urls++;
	}
	snprintf(f->verify.sha256, sizeof(f->verify.sha256), "%s", spec->sha256);
	f->verify.readers_verify = spec->readers_verify;
	f->speculative = spec->speculative;
	size_t lm_prefix = strlen(VERSION_PIN_LAST_MODIFIED);
	if (spec->etag && strncmp(spec->etag, VERSION_PIN_LAST_MODIFIED, lm_prefix) == 0) {
		/* Pinned by an earlier flight whose server sent only a Last-Modified. */
		snprintf(f->xfer.version.last_modified, sizeof(f->xfer.version.last_modified), "%s",
		         spec->etag + lm_prefix);
		f->xfer.version.seen = true;
		f->source_etag = true;
	} else {
		snprintf(f->xfer.version.etag, sizeof(f->xfer.version.etag), "%s",
		         spec->etag ? spec->etag : "");
		f->source_etag = f->xfer.version.etag[0] != '\0';
	}
	f->size = spec->size;
	f->ino = spec->ino;
	f->id = id;
	f->table = table;
	atomic_init(&f->refs, 1);
	pthread_mutex_init(&f->lock, NULL);
	f->state = FLIGHT_ACTIVE;
	f->spool.fd = -1;
	atomic_init(&f->whole, spec->size < FLIGHT_SPARSE_MIN_BYTES);
	util_ranges_init(&f->written);
	util_ranges_init(&f->published);
	util_ranges_init(&f->verify.chunks_bad);
	util_ranges_init(&f->xfer.decoding);
	f->verify.hash = EVP_MD_CTX_new();
	if (!f->verify.hash || EVP_DigestInit_ex(f->verify.hash, EVP_sha256(), NULL) != 1)
		goto fail;
	rc = flight_chunks_init(f, spec);
	if (rc == 0)
		rc = flight_frames_init(f, spec);
	if (rc == -EINVAL) {
		/* The loader checks chunk and frame tables; one that does not add up here would
		 * misplace every request, and is no shortage of memory. */
		util_log(UTIL_LOG_ERROR,
		         "%s: its chunk or frame table does not match its size (%" PRIu64
		         " bytes, stored %" PRIu64 "); opening it fails with EIO",
		         f->name, spec->size, spec->stored_size);
		rc = -EIO;
	}
	if (rc)
		goto fail;
	*out = f;
	return 0;
fail:
	flight_frames_free(f);
	flight_chunks_free(f);
	sources_free(&f->src);
	EVP_MD_CTX_free(f->verify.hash);
	free(f->key);
	free(f->url);
	free(f->name);
	free(f);
	return rc;
}

const char *flight_key(const struct flight *f)
{
	return f->key;
}

const char *flight_name(const struct flight *f)
{
	return f->name;
}

uint64_t flight_size(const struct flight *f)
{
	return f->size;
}

uint64_t flight_ino(const struct flight *f)
{
	return f->ino;
}

uint64_t flight_id(const struct flight *f)
{
	return f->id;
}

bool flight_after_failure(const struct flight *f)
{
	return f->after_failure;
}

bool flight_is_whole(struct flight *f)
{
	return atomic_load(&f->whole);
}

bool flight_is_speculative(const struct flight *f)
{
	return f->speculative;
}

bool flight_speculation_unclaimed(struct flight *f)
{
	return f->speculative && !atomic_load(&f->opened);
}

void flight_ref(struct flight *f)
{
	atomic_fetch_add_explicit(&f->refs, 1, memory_order_relaxed);
}

void flight_unref(struct flight *f)
{
	if (atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) != 1)
		return;
	if (atomic_load(&f->lingers))
		flight_linger_forget(f);
	if (f->spool.fd >= 0)
		close(f->spool.fd);
	util_ranges_free(&f->written);
	util_ranges_free(&f->published);
	util_ranges_free(&f->xfer.decoding);
	flight_chunks_free(f);
	flight_frames_free(f);
	EVP_MD_CTX_free(f->verify.hash);
	sources_free(&f->src);
	pthread_mutex_destroy(&f->lock);
	free(f->spool.name);
	free(f->inos.list);
	free(f->key);
	free(f->url);
	free(f->name);
	free(f);
}

bool flight_spool_idle_locked(const struct flight *f)
{
	return f->table->close_idle_spools && f->state == FLIGHT_COMPLETE && f->engine_done &&
	       f->spool.users == 0 && f->spool.fd >= 0;
}

int flight_spool_take_idle_locked(struct flight *f)
{
	struct stat st;
	int fd = f->spool.fd;

	f->spool.fd = -1;
	/* Its inode number may name another file by the reopen (another mount's new download
	 * of the object): the change time a new file cannot share tells. A seal changes it
	 * too, but only while held: it is taken here after. */
	if (fstat(fd, &st) == 0)
		f->spool.ctime = st.st_ctim;
	return fd;
}

/*
 * One user of f's spool is gone (user_left), or the transfer thread is (engine_left): if
 * the spool is now idle (complete, retired, unused), it lingers open a while and is closed
 * later (spool_linger.c). The recorder holds it like any user while it syncs and seals it.
 */
static void leave_spool(struct flight *f, bool user_left, bool engine_left)
{
	bool idle;

	pthread_mutex_lock(&f->lock);
	f->spool.users -= user_left;
	f->engine_done |= engine_left;
	idle = flight_spool_idle_locked(f);
	pthread_mutex_unlock(&f->lock);
	if (idle)
		flight_linger(f); /* checks again under the locks before it closes anything */
}

/* Caller holds f->lock: whether fd is the file f closed while idle. */
static int same_spool_locked(const struct flight *f, int fd)
{
	struct stat st;

	if (fstat(fd, &st) != 0)
		return -errno;
	if (st.st_dev != f->spool.dev || st.st_ino != f->spool.ino ||
	    st.st_ctim.tv_sec != f->spool.ctime.tv_sec ||
	    st.st_ctim.tv_nsec != f->spool.ctime.tv_nsec)
		return -ESTALE; /* another file has its name now: not these bytes */
	return 0;
}

/* Counts a user of f's spool, reopening an idle one by name. 0 or -errno (not counted).
 * With failed_too a failed f is counted too (its users read its error). */
/* use_spool counted a user of f's lingering spool: 0 if the name still names it, else the
 * user is not counted and -ENOENT or -ESTALE, as a reopen would say. */
static int recheck_lingering(struct flight *f)
{
	struct stat st;
	int rc = 0;

	if (fstatat(f->table->spool_dirfd, f->spool.name, &st, AT_SYMLINK_NOFOLLOW) != 0)
		rc = -errno;
	else if (st.st_dev != f->spool.dev || st.st_ino != f->spool.ino)
		rc = -ESTALE;
	if (rc)
		leave_spool(f, true, false);
	return rc;
}

static int use_spool(struct flight *f, bool failed_too)
{
	bool reopen, recheck;
	int fd = -1, rc = 0;

	pthread_mutex_lock(&f->lock);
	/* Counted before the lock goes: no idle close can come between here and the reopen. */
	if (f->state == FLIGHT_FAILED && !failed_too)
		rc = -ESTALE;
	else
		f->spool.users++;
	/* spool.name is set once, before the flight can be complete: read below unlocked. */
	reopen = rc == 0 && f->state == FLIGHT_COMPLETE && f->spool.fd < 0 && f->spool.name;
	/* An idle spool left open (spool_linger.c) is taken up again only if its name still
	 * names it: one removed (a tmp cleaner) or replaced (another mount's new download)
	 * behind our back goes as a closed one would. Its open fd keeps its inode number from
	 * any new file, so the number tells. */
	recheck = rc == 0 && f->spool.users == 1 && f->spool.fd >= 0 && atomic_load(&f->lingers);
	pthread_mutex_unlock(&f->lock);
	if (recheck)
		return recheck_lingering(f);
	if (!reopen)
		return rc;
	/* Not under the lock: an open may wait for the disk. */
	fd = openat(f->table->spool_dirfd, f->spool.name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		rc = -errno;
		util_fd_note_short(rc); /* speculation backs off (engine.c) */
	}
	/* Before it is installed: a reader may use it, and another mount's eviction must see
	 * it in use by then. Advisory, as in install_spool. */
	if (rc == 0 && f->table->spools_shared)
		(void)lease_mark_in_use(fd);
	pthread_mutex_lock(&f->lock);
	/* Checked under the lock against what f remembers now: another user may have reopened
	 * it meanwhile, and the recorder's seal changed its time before that one closed it. */
	if (f->spool.fd >= 0) {
		rc = 0; /* another user reopened it first: that fd passed this check */
	} else if (rc == 0 && (rc = same_spool_locked(f, fd)) == 0) {
		f->spool.fd = fd;
		fd = -1;
	}
	if (rc)
		f->spool.users--; /* the fd was -1 all along: nothing to close */
	pthread_mutex_unlock(&f->lock);
	if (fd >= 0)
		close(fd); /* another user opened it first, or it is not ours */
	return rc;
}

static int hold_spool(struct flight *f, bool failed_too)
{
	int rc = use_spool(f, failed_too);

	if (rc == 0) {
		atomic_fetch_add(&f->handles, 1);
		atomic_store(&f->opened, true);
	}
	return rc;
}

int flight_hold_spool(struct flight *f)
{
	return hold_spool(f, false);
}

int flight_hold_spool_created(struct flight *f)
{
	return hold_spool(f, true);
}

void flight_release_spool(struct flight *f)
{
	atomic_fetch_sub(&f->handles, 1);
	leave_spool(f, true, false);
}

int flight_hold_spool_to_record(struct flight *f)
{
	int rc = use_spool(f, false);

	if (rc)
		return rc;
	rc = flight_spool_fd(f); /* stays open while held */
	if (rc < 0)
		leave_spool(f, true, false); /* no spool created: nothing to sync */
	return rc < 0 ? -ENOENT : rc;
}

void flight_release_spool_recorded(struct flight *f)
{
	leave_spool(f, true, false);
}

void flight_spool_user_left(struct flight *f)
{
	leave_spool(f, true, false);
}

void flight_engine_done(struct flight *f)
{
	leave_spool(f, false, true);
}

int flight_spool_fd(struct flight *f)
{
	int fd;

	pthread_mutex_lock(&f->lock);
	fd = f->spool.fd;
	pthread_mutex_unlock(&f->lock);
	return fd;
}

/* Caller holds f->lock. */
static int ready_locked(struct flight *f, uint64_t off, uint64_t len)
{
	if (f->state == FLIGHT_FAILED)
		return f->error;
	if (off > f->size || len > f->size - off)
		return -EINVAL;
	if (util_ranges_covers(&f->published, off, off + len))
		return 1;
	return flight_chunks_bad_locked(f, off, len) ? -EIO : 0;
}

int flight_ready(struct flight *f, uint64_t off, uint64_t len)
{
	int rc;

	pthread_mutex_lock(&f->lock);
	rc = ready_locked(f, off, len);
	pthread_mutex_unlock(&f->lock);
	return rc;
}

int flight_park(struct flight *f, struct flight_waiter *w)
{
	int rc;

	pthread_mutex_lock(&f->lock);
	if (w->interrupted) {
		rc = -EINTR;
		goto out;
	}
	rc = ready_locked(f, w->off, w->len);
	if (rc != 0)
		goto out;
	w->prev = NULL;
	w->next = f->waiters;
	if (f->waiters)
		f->waiters->prev = w;
	f->waiters = w;
	w->listed = true;
out:
	pthread_mutex_unlock(&f->lock);
	return rc;
}

/* Caller holds f->lock. */
static void unlink_waiter(struct flight *f, struct flight_waiter *w)
{
	if (w->prev)
		w->prev->next = w->next;
	else
		f->waiters = w->next;
	if (w->next)
		w->next->prev = w->prev;
	w->next = w->prev = NULL;
	w->listed = false;
}

bool flight_unpark(struct flight *f, struct flight_waiter *w)
{
	bool removed = false;

	pthread_mutex_lock(&f->lock);
	if (w->listed) {
		unlink_waiter(f, w);
		removed = true;
	} else {
		w->interrupted = true;
	}
	pthread_mutex_unlock(&f->lock);
	return removed;
}

bool flight_should_kick(struct flight *f, uint64_t off)
{
	uint64_t first, run_start = 0;

	if (!atomic_load(&f->whole))
		return true;
	pthread_mutex_lock(&f->lock);
	first = util_ranges_run_end(&f->written, off);
	/* The end of the last written run before `first`, where a stream would be writing. */
	for (size_t i = 0; i < f->written.n && f->written.v[i].end <= first; i++)
		run_start = f->written.v[i].end;
	pthread_mutex_unlock(&f->lock);
	return first - run_start > FLIGHT_CHUNK_BYTES;
}

bool flight_note_read(struct flight *f, uint64_t off, uint64_t len)
{
	bool switched = false;

	/* Every read of a file being read through passes here: no lock for them. */
	if (atomic_load_explicit(&f->whole, memory_order_relaxed))
		return false;
	pthread_mutex_lock(&f->lock);
	if (!atomic_load(&f->whole)) {
		/* Within a chunk of where the last read ended: FUSE's worker threads and the
		 * kernel's readahead deliver a sequential reader's requests slightly out of order.
		 */
		bool continues = f->seq.seen && off + FLIGHT_CHUNK_BYTES >= f->seq.next &&
		                 off <= f->seq.next + FLIGHT_CHUNK_BYTES;
		f->seq.run = continues ? f->seq.run + len : 0;
		if (!continues || off + len > f->seq.next)
			f->seq.next = off + len;
		f->seq.seen = true;
		switched = off == 0 || f->seq.run >= FLIGHT_SEQUENTIAL_BYTES;
		if (switched)
			atomic_store(&f->whole, true);
	}
	pthread_mutex_unlock(&f->lock);
	return switched;
}

void flight_fetch_whole(struct flight *f)
{
	atomic_store(&f->whole, true);
}

unsigned flight_wanted(struct flight *f, struct flight_want *out, unsigned max, bool *whole)
{
	unsigned n = 0;

	pthread_mutex_lock(&f->lock);
	*whole = atomic_load(&f->whole);
	for (struct flight_waiter *w = f->waiters; w && n < max; w = w->next) {
		/* A chunk is readable only whole: its bytes outside the range are wanted too. */
		uint64_t start = w->off, end = w->off + w->len, first;
		flight_chunks_round(f, &start, &end);
		first = util_ranges_run_end(&f->written, start);
		if (first < end)
			out[n++] = (struct flight_want){.off = first, .end = end};
	}
	pthread_mutex_unlock(&f->lock);
	return n;
}

/*
 * Moves the waiters that can be answered (all of them once the flight failed) to a private
 * list. Caller holds f->lock.
 */
static struct flight_waiter *collect_locked(struct flight *f)
{
	struct flight_waiter *ready = NULL, *w = f->waiters;

	while (w) {
		struct flight_waiter *next = w->next;
		if (f->state == FLIGHT_FAILED ||
		    util_ranges_covers(&f->published, w->off, w->off + w->len)) {
			unlink_waiter(f, w);
			w->next = ready;
			ready = w;
		}
		w = next;
	}
	return ready;
}

struct flight_waiter *flight_collect_locked(struct flight *f)
{
	return collect_locked(f);
}

struct flight_waiter *flight_collect_bad_locked(struct flight *f)
{
	struct flight_waiter *broken = NULL, *w = f->waiters;

	while (w) {
		struct flight_waiter *next = w->next;
		if (flight_chunks_bad_locked(f, w->off, w->len)) {
			unlink_waiter(f, w);
			w->next = broken;
			broken = w;
		}
		w = next;
	}
	return broken;
}

static void answer(struct flight_waiter *ready, int err)
{
	while (ready) {
		struct flight_waiter *next = ready->next;
		ready->next = NULL;
		ready->done(ready, err);
		ready = next;
	}
}

static void complete_flight(struct flight *f);

void flight_answer(struct flight_waiter *ready, int err)
{
	answer(ready, err);
}

void flight_complete(struct flight *f)
{
	complete_flight(f);
}

bool flight_spool_still_named(struct flight *f)
{
	struct stat named, open_file;

	return f->spool.name &&
	       fstatat(f->table->spool_dirfd, f->spool.name, &named, AT_SYMLINK_NOFOLLOW) == 0 &&
	       fstat(f->spool.fd, &open_file) == 0 && named.st_ino == open_file.st_ino &&
	       named.st_dev == open_file.st_dev;
}

/* Makes fd the flight's spool, unless the flight failed meanwhile. Takes name. */
static int install_spool(struct flight *f, int fd, char *name, bool borrowed)
{
	struct stat st;

	pthread_mutex_lock(&f->lock);
	if (f->state == FLIGHT_FAILED) {
		int rc = f->error;
		pthread_mutex_unlock(&f->lock);
		/* Failed before it started: nobody else would ever delete this file. */
		if (!borrowed)
			unlinkat(f->table->spool_dirfd, name, 0);
		close(fd);
		free(name);
		return rc;
	}
	f->spool.fd = fd;
	f->spool.name = name;
	f->spool.borrowed = borrowed;
	if (fstat(fd, &st) == 0) {
		f->spool.dev = st.st_dev;
		f->spool.ino = st.st_ino;
	}
	pthread_mutex_unlock(&f->lock);
	/* Advisory: without the mark, eviction elsewhere may delete a file still read here, which
	 * costs a refetch in a later session, never wrong bytes. */
	(void)lease_mark_in_use(fd);
	return 0;
}

void flight_claim_spool(struct flight *f)
{
	pthread_mutex_lock(&f->lock);
	f->spool.borrowed = false;
	pthread_mutex_unlock(&f->lock);
}

int flight_open_spool(struct flight *f)
{
	int dirfd = f->table->spool_dirfd;
	char *name = NULL;
	int fd = -1, rc;

	rc = flight_spool_name(f->key, &name);
	if (rc) {
		name = NULL;
		goto fail;
	}
	/* A new inode, never the old one truncated: a mount sharing the cache directory may
	 * still read the old file, whose bytes must stay what its records say. Whatever had
	 * the name goes (a symbolic link itself, not what it points to). */
	if (unlinkat(dirfd, name, 0) != 0 && errno != ENOENT) {
		rc = -errno;
		goto fail;
	}
	/* One made ahead when there is one (spool_reserve.h): the same file, made sooner. */
	fd = spool_reserve_take(f->table->reserve, name);
	if (fd == -EAGAIN) {
		fd = openat(dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0)
			fd = -errno;
	}
	if (fd < 0) {
		rc = fd;
		fd = -1;
		util_fd_note_short(rc);
		goto fail;
	}
	/* Reserve the space now: a cache dir that cannot hold the object fails it at once. */
	if (f->size > 0) {
		rc = -posix_fallocate(fd, 0, (off_t)f->size);
		if (rc == -EOPNOTSUPP || rc == -EINVAL)
			rc = ftruncate(fd, (off_t)f->size) ? -errno : 0;
		if (rc)
			goto fail_unlink;
	}
	return install_spool(f, fd, name, false);
fail_unlink:
	unlinkat(dirfd, name, 0);
fail:
	if (fd >= 0)
		close(fd);
	free(name);
	return rc;
}

static void seal_of(const struct stat *st, char *out, size_t cap)
{
	snprintf(out, cap, "mtime:%jd.%09ld", (intmax_t)st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
}

/*
 * A sealed spool's mtime is set to a second of its own in the year 2000: any write since
 * stamps the time now, which no seal is (at a clock tick of several ms, a write soon after
 * the download's last one could show the same "now"). Whole seconds survive a copy that
 * keeps times (cp -p, tar, a CI cache restored), which is then the same bytes; the inode
 * is left out for that reason. Random, so that one spool's seal is not another's.
 */
#define SEALED_EPOCH_S 946684800 /* 2000-01-01 */
#define SEALED_SPAN_S (1 << 24)  /* 194 days */

int flight_spool_seal(int fd, char *out, size_t cap)
{
	struct timespec times[2] = {{.tv_nsec = UTIME_OMIT}, {.tv_sec = SEALED_EPOCH_S}};
	uint32_t offset = 0;
	struct stat st;

	if (RAND_bytes((unsigned char *)&offset, sizeof(offset)) != 1)
		return -EIO;
	times[1].tv_sec += offset % SEALED_SPAN_S;
	if (futimens(fd, times) != 0 || fstat(fd, &st) != 0)
		return -errno;
	seal_of(&st, out, cap);
	return 0;
}

int flight_spool_seal_found(struct flight *f, char *out, size_t cap)
{
	char *name = NULL;
	struct stat st;
	int fd = flight_spool_fd(f), rc = 0;

	/* The file f has open, else (not installed yet) the one its name names. */
	if (fd >= 0 ? fstat(fd, &st) != 0
	            : (rc = flight_spool_name(f->key, &name)) == 0 &&
	                  fstatat(f->table->spool_dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
		rc = -errno;
	if (rc == 0)
		seal_of(&st, out, cap);
	free(name);
	return rc;
}

int flight_reopen_spool(struct flight *f, const struct util_ranges *ranges, bool complete,
                        bool borrowed)
{
	char *name = NULL;
	struct stat st;
	int fd = -1, rc;

	rc = flight_spool_name(f->key, &name);
	if (rc) {
		name = NULL;
		goto fail;
	}
	/* A symbolic link or another user's file under the name is not what the records
	 * describe: the caller starts afresh, which replaces it. */
	fd = openat(f->table->spool_dirfd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0 && errno == ELOOP) {
		rc = -ESTALE;
		goto fail;
	}
	if (fd < 0 || fstat(fd, &st) != 0) {
		rc = -errno;
		goto fail;
	}
	if (index_records_file_unsafe(&st, S_IFREG) || (uint64_t)st.st_size != f->size ||
	    (ranges->n > 0 && ranges->v[ranges->n - 1].end > f->size) ||
	    (complete && ranges->total != f->size)) {
		rc = -ESTALE;
		goto fail;
	}
	/* The fd goes in first: a reader that sees bytes published must find it. */
	rc = install_spool(f, fd, name, borrowed);
	if (rc)
		return rc;
	return flight_adopt(f, ranges, complete);
fail:
	if (fd >= 0)
		close(fd);
	free(name);
	return rc;
}

/*
 * With a hash, the bytes that would complete the object wait for it; a sparse flight that
 * got that far fetches the rest (at most FLIGHT_HOLD_BYTES), or its readers of those bytes
 * would wait for a hash that never finishes. A pack's readers check their own ranges
 * (readers_verify), so nothing waits there. Caller holds f->lock.
 */
static bool withhold_locked(struct flight *f, bool verify)
{
	if (!verify || f->verify.readers_verify || f->verify.chunk_size ||
	    f->written.total + FLIGHT_HOLD_BYTES <= f->size)
		return false;
	atomic_store(&f->whole, true);
	return true;
}

int flight_adopt(struct flight *f, const struct util_ranges *ranges, bool complete)
{
	/* Chunks are checked one by one (below); the whole hash is for objects without. */
	bool chunked = f->verify.chunk_size != 0, check_chunks = chunked && !complete;
	bool verify = f->verify.sha256[0] != '\0' && !chunked, borrowed, all_written, grew;
	struct flight_waiter *ready;
	uint64_t before;
	int rc = 0;

	if (complete && ranges->total != f->size)
		return -ESTALE;
	pthread_mutex_lock(&f->lock);
	if (f->state != FLIGHT_ACTIVE) {
		pthread_mutex_unlock(&f->lock);
		return 0;
	}
	/* Another mount may know a hash this one does not (S3 sends it with the object): its
	 * download's last bytes wait for its completion record. */
	borrowed = f->spool.borrowed;
	before = f->written.total;
	for (size_t i = 0; i < ranges->n && rc == 0; i++)
		rc = ranges->v[i].end <= f->size
		         ? util_ranges_add(&f->written, ranges->v[i].start, ranges->v[i].end)
		         : -ESTALE;
	/* Restored or another mount's bytes are checked here like received ones: a chunk is
	 * published once it matches, never on the word of a record. */
	for (size_t i = 0; i < ranges->n && rc == 0 && check_chunks; i++)
		flight_chunks_written_locked(f, ranges->v[i].start, ranges->v[i].end, UINT_MAX);
	/* Restored bytes follow the same rule as received ones: the last ones wait for the hash. */
	bool hold = !complete && withhold_locked(f, verify || borrowed);
	/* All there with nothing to check: complete_flight (below) publishes it all along with
	 * the state, so no reader sees every byte readable while the flight is still active. */
	all_written = f->written.total == f->size;
	bool completes_below = !complete && !verify && !borrowed && all_written && !chunked;
	for (size_t i = 0; i < ranges->n && rc == 0 && !hold && !completes_below && !check_chunks;
	     i++)
		rc = util_ranges_add(&f->published, ranges->v[i].start, ranges->v[i].end);
	if (rc == 0 && complete)
		f->state = FLIGHT_COMPLETE;
	grew = f->written.total > before;
	ready = rc ? NULL : collect_locked(f);
	pthread_mutex_unlock(&f->lock);
	answer(ready, 0);
	for (size_t i = 0; i < ranges->n && rc == 0 && check_chunks; i++)
		rc = flight_chunks_dispatch(f, ranges->v[i].start, ranges->v[i].end);
	if (rc == 0 && completes_below) {
		/* All there, but the crash came before the completion was recorded. */
		complete_flight(f);
	} else if (rc == 0 && !complete && verify && grew) {
		/* What is already there is hashed now; streams bring the rest. */
		if (f->table->hasher)
			flight_hasher_kick(f->table->hasher, f);
		else
			rc = flight_hash_progress(f);
	}
	return rc;
}

static int pwrite_all(int fd, const void *data, size_t len, uint64_t off)
{
	const char *p = data;

	while (len > 0) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* Feeds the hash from the spool (fd) up to `upto` (bytes another stream wrote ahead). */
static int hash_catch_up(struct flight *f, int fd, uint64_t upto)
{
	char buf[64 * 1024];

	while (f->verify.hashed < upto) {
		size_t want = upto - f->verify.hashed < sizeof(buf)
		                  ? (size_t)(upto - f->verify.hashed)
		                  : sizeof(buf);
		ssize_t n = pread(fd, buf, want, (off_t)f->verify.hashed);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		EVP_DigestUpdate(f->verify.hash, buf, (size_t)n);
		f->verify.hashed += (uint64_t)n;
	}
	return 0;
}

/* Whether the whole object hashed to its sha256; a mismatch is logged and marked. */
static bool hash_matches(struct flight *f)
{
	unsigned char digest[EVP_MAX_MD_SIZE];
	char hex[2 * EVP_MAX_MD_SIZE + 1];
	unsigned int digest_len = 0;

	if (EVP_DigestFinal_ex(f->verify.hash, digest, &digest_len) != 1 || digest_len != 32)
		return false;
	util_hex_encode(digest, digest_len, hex);
	if (strcmp(hex, f->verify.sha256) == 0)
		return true;
	util_log(UTIL_LOG_ERROR, "%s: sha256 mismatch: expected %s, got %s", f->name,
	         f->verify.sha256, hex);
	pthread_mutex_lock(&f->lock);
	f->verify.bad_hash = true;
	pthread_mutex_unlock(&f->lock);
	return false;
}

int flight_hash_progress(struct flight *f)
{
	enum flight_state state;
	uint64_t prefix;
	int fd, rc = 0;

	/* A user of the spool while it reads: an adoption that completes the flight (another
	 * mount's record) must not close the fd under it. */
	pthread_mutex_lock(&f->lock);
	prefix = util_ranges_run_end(&f->written, 0);
	state = f->state;
	fd = f->spool.fd;
	f->spool.users += state == FLIGHT_ACTIVE;
	pthread_mutex_unlock(&f->lock);
	if (state != FLIGHT_ACTIVE)
		return 0;
	if (prefix > f->verify.hashed)
		rc = hash_catch_up(f, fd, prefix);
	if (rc == 0 && f->verify.hashed == f->size) {
		if (hash_matches(f))
			complete_flight(f);
		else
			rc = -EIO;
	}
	leave_spool(f, true, false);
	/* Completed meanwhile from a record: nothing here failed it. */
	if (rc) {
		flight_progress(f, NULL, NULL, &state);
		rc = state == FLIGHT_ACTIVE ? rc : 0;
	}
	return rc;
}

/* Publishes everything after a successful verification (or an unhashed last byte). */
static void complete_flight(struct flight *f)
{
	struct flight_waiter *ready;
	int rc;

	pthread_mutex_lock(&f->lock);
	if (f->state != FLIGHT_ACTIVE) {
		pthread_mutex_unlock(&f->lock); /* failed meanwhile (shut-down) */
		return;
	}
	rc = util_ranges_add(&f->published, 0, f->size);
	if (rc == 0)
		f->state = FLIGHT_COMPLETE;
	ready = collect_locked(f);
	pthread_mutex_unlock(&f->lock);
	answer(ready, 0);
	if (rc)
		flight_fail(f, rc);
	else if (f->table->on_complete)
		f->table->on_complete(f->table->on_complete_ctx, f);
}

int flight_deliver(struct flight *f, uint64_t off, const void *data, size_t len)
{
	return flight_deliver_from(f, 0, off, data, len);
}

int flight_deliver_from(struct flight *f, unsigned url_idx, uint64_t off, const void *data,
                        size_t len)
{
	bool chunked = f->verify.chunk_size != 0;
	bool verify = f->verify.sha256[0] != '\0' && !chunked;
	struct flight_waiter *ready;
	uint64_t prefix, prefix_before, written_total;
	int rc;

	if (off > f->size || len > f->size - off)
		return -EIO;
	if (len == 0)
		return 0;
	rc = pwrite_all(f->spool.fd, data, len, off);
	if (rc)
		return rc;

	pthread_mutex_lock(&f->lock);
	if (f->state != FLIGHT_ACTIVE) {
		rc = f->state == FLIGHT_FAILED ? f->error : 0;
		pthread_mutex_unlock(&f->lock);
		return rc;
	}
	prefix_before = util_ranges_run_end(&f->written, 0);
	rc = util_ranges_add(&f->written, off, off + len);
	written_total = f->written.total;
	/*
	 * With a hash to check, the bytes that complete the object (the last
	 * FLIGHT_HOLD_BYTES or more to arrive) stay unpublished until it matches: no reader
	 * can read the whole object unverified.
	 */
	if (rc == 0 && chunked)
		flight_chunks_written_locked(f, off, off + len,
		                             url_idx); /* published once checked */
	else if (rc == 0 && !withhold_locked(f, verify))
		rc = util_ranges_add(&f->published, off, off + len);
	prefix = util_ranges_run_end(&f->written, 0);
	ready = rc ? NULL : collect_locked(f);
	pthread_mutex_unlock(&f->lock);
	answer(ready, 0);
	if (rc)
		return rc;
	if (chunked)
		return flight_chunks_dispatch(f, off, off + len);

	if (verify) {
		/* Hashing reads the spool back: off this thread when a hasher runs. Woken once
		 * per chunk the prefix crosses, not per write (perf stat: a context switch for
		 * every 160 KiB), and at the end, which is all verification waits for. */
		if (f->table->hasher) {
			if (prefix / FLIGHT_CHUNK_BYTES > prefix_before / FLIGHT_CHUNK_BYTES ||
			    (prefix == f->size && prefix > prefix_before))
				flight_hasher_kick(f->table->hasher, f);
			return 0;
		}
		return flight_hash_progress(f);
	}
	if (written_total == f->size)
		complete_flight(f);
	return 0;
}

int flight_complete_empty(struct flight *f)
{
	if (f->verify.sha256[0] != '\0' && !hash_matches(f))
		return -EIO;
	complete_flight(f);
	return 0;
}

void flight_fail(struct flight *f, int err)
{
	struct flight_waiter *ready;
	char etag[sizeof(f->xfer.version.primary_etag)] = "";
	const char *url;
	bool first;

	pthread_mutex_lock(&f->lock);
	first = f->state != FLIGHT_FAILED;
	if (first) {
		f->state = FLIGHT_FAILED;
		f->error = err < 0 ? err : -EIO;
	}
	flight_version_to_pin_locked(f, etag, sizeof(etag));
	url = f->url; /* what the next flight's spec names: a mirror's ETags are its own */
	/* Set once, before any byte is written; a borrowed spool is another mount's to delete. */
	const char *spool_name = f->spool.borrowed ? NULL : f->spool.name;
	pthread_mutex_unlock(&f->lock);
	/*
	 * Out of the table, spool gone, hook run, and only then are the readers told: one who
	 * reopens the moment it gets EIO must start a new flight, not join this one.
	 */
	if (first) {
		flight_table_remove(f, etag, url);
		if (spool_name) /* open fds keep the data for handles still reading */
			unlinkat(f->table->spool_dirfd, spool_name, 0);
		if (f->table->on_failed)
			f->table->on_failed(f->table->on_failed_ctx, f);
	}
	pthread_mutex_lock(&f->lock);
	ready = collect_locked(f);
	err = f->error;
	pthread_mutex_unlock(&f->lock);
	answer(ready, err);
}

uint64_t flight_written(struct flight *f)
{
	uint64_t written;

	flight_progress(f, &written, NULL, NULL);
	return written;
}

void flight_stop(struct flight *f, int err)
{
	struct flight_waiter *ready;

	pthread_mutex_lock(&f->lock);
	if (f->state == FLIGHT_ACTIVE) {
		f->state = FLIGHT_FAILED;
		f->error = err < 0 ? err : -EIO;
	}
	ready = collect_locked(f);
	err = f->error;
	pthread_mutex_unlock(&f->lock);
	answer(ready, err);
}

void flight_progress(struct flight *f, uint64_t *written, uint64_t *published,
                     enum flight_state *state)
{
	pthread_mutex_lock(&f->lock);
	if (written)
		*written = f->written.total;
	if (published)
		*published = f->published.total;
	if (state)
		*state = f->state;
	pthread_mutex_unlock(&f->lock);
}

int flight_copy_written(struct flight *f, struct util_ranges *out)
{
	int rc = 0;

	util_ranges_clear(out);
	pthread_mutex_lock(&f->lock);
	for (size_t i = 0; i < f->written.n && rc == 0; i++)
		rc = util_ranges_add(out, f->written.v[i].start, f->written.v[i].end);
	pthread_mutex_unlock(&f->lock);
	return rc;
}

int flight_copy_inos(struct flight *f, uint64_t **inos, size_t *n, bool *all)
{
	int rc = 0;

	*inos = NULL;
	pthread_mutex_lock(&f->lock);
	*n = f->inos.n;
	*all = f->inos.lost;
	if (*n) {
		*inos = malloc(*n * sizeof(**inos));
		if (*inos)
			memcpy(*inos, f->inos.list, *n * sizeof(**inos));
		else
			rc = -ENOMEM;
	}
	pthread_mutex_unlock(&f->lock);
	if (rc)
		*n = 0;
	return rc;
}

void flight_version_to_pin_locked(const struct flight *f, char *out, size_t cap)
{
	out[0] = '\0';
	/* A version the source named comes with every spec anyway. One whose bytes failed
	 * their hash is not the session's: pinned to it, a fixed object could never be fetched
	 * again. */
	if (f->source_etag || f->verify.bad_hash)
		return;
	if (f->xfer.version.primary_etag[0])
		snprintf(out, cap, "%s", f->xfer.version.primary_etag);
	else if (f->xfer.version.last_modified[0] && !flight_hash_names_version(f))
		snprintf(out, cap, "%s%s", VERSION_PIN_LAST_MODIFIED,
		         f->xfer.version.last_modified);
}

bool flight_read_continues_into(struct flight *f, uint64_t start, uint64_t end)
{
	bool continues;

	if (atomic_load(&f->handles) == 0)
		return false;
	pthread_mutex_lock(&f->lock);
	continues = f->seq.seen && f->seq.next + FLIGHT_CHUNK_BYTES >= start && f->seq.next < end;
	pthread_mutex_unlock(&f->lock);
	return continues;
}

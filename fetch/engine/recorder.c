/*
 * The recorder thread (see recorder.h). Measured on a 2-core VM, a cold 1 GiB read with
 * --cache-dir took 2.5-2.7 s with the transfer thread fdatasyncing every 64 MiB itself,
 * against 1.35 s without a persistent cache: the sync stalled receiving every time.
 *
 * Jobs are taken in batches: everything queued since the last pass. One fdatasync (a
 * journal commit) per record let a session reading many small objects queue records
 * faster than they were written; each queued record kept its spool fd open, until the
 * daemon ran out of descriptors whenever the disk was slow. Now a queued record holds no
 * fd: the recorder holds each spool only while it syncs it, reopening an idle one by name
 * (flight_hold_spool_to_record), a chunk at a time, starting the writeback of the whole
 * chunk first so that their fdatasyncs share one journal commit instead of one each.
 *
 * The thread runs at a lower priority (RECORD_NICE): on a loaded machine a walk of small
 * objects queued a record (two syncs and two transactions) per object, and the recorder's
 * CPU came out of the reader's and the transfer thread's. A record that comes later
 * promises nothing less: the index still says only what the disk holds.
 *
 * Lock: r->lock guards the pending list and drain_queued; never held while a job runs.
 */
#include "fetch/engine/recorder.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "fetch/engine/flight_i.h"
#include "fetch/cache/lease.h"
#include "util/log.h"
#include "util/worker.h"
#include "index/records.h"

enum job_kind { JOB_RANGES, JOB_FAILED, JOB_RELEASE };

struct job {
	struct util_worker_job link; /* first: the worker hands this back */
	enum job_kind kind;
	struct flight *f; /* a reference of its own; NULL for JOB_RELEASE */
	struct util_ranges written;
	bool complete;
	struct lease_set *leases; /* JOB_RELEASE: the lease of `key` in it */
	char *key;
	int fd; /* JOB_RANGES: its spool, held from start_writeback until run (or -errno) */
};

struct recorder {
	struct index_records *records; /* set at start, then read only */
	struct util_worker *worker;
	struct util_worker_job drain; /* queued on the worker while drain_queued */
	pthread_mutex_t lock;
	/* Guarded by lock: jobs not yet taken, in order, and whether a drain will take them. */
	struct job *head;
	struct job *tail;
	bool drain_queued;
	bool niced; /* the worker thread's own */
};

/* The recorder thread's nice value: below the readers', never starved. */
#define RECORD_NICE 10

/*
 * At most this many spools are held open at once, however long the queue: a burst of small
 * objects shares a journal commit per chunk (see start_writeback), and the daemon's fds do
 * not grow with the backlog. 32 syncs per commit already take nearly all of the saving.
 */
#define RECORD_CHUNK 32

/* Syncs j's spool (sealed first once complete), then records its ranges and its seal. */
static void record_ranges(struct recorder *r, struct job *j)
{
	char seal[FLIGHT_SEAL_MAX];
	bool sealed = false;
	int fd = j->fd;

	/* The hold checked the file an idle spool's name opened; one still open may have been
	 * deleted or replaced under it since, and a deleted file is never recorded complete.
	 * A complete one is sealed before its sync, so that one fsync makes its data and its
	 * seal durable (an fdatasync and then an fsync per object were half of the recorder's
	 * syncs in a walk of small objects); a seal only counts once recorded. */
	if (fd >= 0 && j->complete && flight_spool_still_named(j->f))
		sealed = flight_spool_seal(fd, seal, sizeof(seal)) == 0;
	/* The data must be on disk before the index says it is there. */
	if (fd < 0 || (sealed ? fsync(fd) : fdatasync(fd)) != 0) {
		util_log(UTIL_LOG_WARN, "%s: cannot sync the spool (%s): progress not recorded",
		         j->f->name, strerror(fd < 0 ? -fd : errno));
		return;
	}
	if (index_records_set_ranges(r->records, j->f->key, &j->written) == 0 && sealed &&
	    index_records_mark_sealed(r->records, j->f->key, seal) == 0)
		atomic_store(&j->f->durable, true);
}

static void run_one(struct recorder *r, struct job *j)
{
	switch (j->kind) {
	case JOB_RANGES:
		record_ranges(r, j);
		/* A record that failed leaves the next session to hash or fetch again. */
		if (j->complete && !atomic_load(&j->f->durable))
			util_log(UTIL_LOG_WARN, "%s: cannot record it complete in the cache index",
			         j->f->name);
		if (j->fd >= 0)
			flight_release_spool_recorded(j->f);
		break;
	case JOB_FAILED:
		index_records_forget(r->records, j->f->key);
		break;
	case JOB_RELEASE:
		lease_set_release(j->leases, j->key);
		free(j->key);
		break;
	}
	if (j->f)
		flight_unref(j->f);
	util_ranges_free(&j->written);
	free(j);
}

/*
 * Holds the spool of each record in the chunk and starts its writeback before the first
 * fdatasync: that one's journal commit then covers the blocks of all of them, and the
 * others mostly find their data written. (syncfs would sync once, but also every other
 * writer's dirty data on the filesystem, and a record would wait for that.)
 */
static void start_writeback(struct job *chunk)
{
	for (struct job *j = chunk; j; j = (struct job *)j->link.next) {
		if (j->kind != JOB_RANGES)
			continue;
		j->fd = flight_hold_spool_to_record(j->f);
		if (j->fd >= 0)
			(void)sync_file_range(j->fd, 0, 0, SYNC_FILE_RANGE_WRITE);
	}
}

/* Cuts batch after its RECORD_CHUNK-th record; returns the rest. */
static struct job *cut_chunk(struct job *batch)
{
	unsigned records = 0;
	struct job *j = batch, *rest;

	for (; j->link.next; j = (struct job *)j->link.next)
		if (j->kind == JOB_RANGES && ++records == RECORD_CHUNK)
			break;
	rest = (struct job *)j->link.next;
	j->link.next = NULL;
	return rest;
}

/* Runs every job queued so far, in order (the worker's only job kind). */
static void drain(void *ctx, struct util_worker_job *link)
{
	struct recorder *r = ctx;
	struct job *batch, *rest, *next;

	/* On the worker (link set), once: its own priority, not the caller's in a fallback. */
	if (link && !r->niced) {
		r->niced = true;
		(void)setpriority(PRIO_PROCESS, (id_t)gettid(), RECORD_NICE);
	}
	pthread_mutex_lock(&r->lock);
	batch = r->head;
	r->head = r->tail = NULL;
	r->drain_queued = false;
	pthread_mutex_unlock(&r->lock);
	for (; batch; batch = rest) {
		rest = cut_chunk(batch);
		start_writeback(batch);
		for (struct job *j = batch; j; j = next) {
			next = (struct job *)j->link.next;
			run_one(r, j);
		}
	}
}

int recorder_start(struct index_records *records, struct recorder **out)
{
	struct recorder *r = calloc(1, sizeof(*r));
	int rc;

	*out = NULL;
	if (!r)
		return -ENOMEM;
	r->records = records;
	pthread_mutex_init(&r->lock, NULL);
	rc = util_worker_start("spoolfs-record", drain, r, &r->worker);
	if (rc) {
		pthread_mutex_destroy(&r->lock);
		free(r);
		return rc;
	}
	*out = r;
	return 0;
}

void recorder_stop(struct recorder *r)
{
	if (!r)
		return;
	util_worker_stop(r->worker);
	drain(r, NULL); /* anything queued while it stopped */
	pthread_mutex_destroy(&r->lock);
	free(r);
}

/* A job for f (referenced), or NULL without memory. */
static struct job *job_new(enum job_kind kind, struct flight *f)
{
	struct job *j = calloc(1, sizeof(*j));

	if (!j)
		return NULL;
	j->kind = kind;
	j->f = f;
	j->fd = -1;
	util_ranges_init(&j->written);
	if (f)
		flight_ref(f);
	return j;
}

/* Queues j behind the pending jobs; after recorder_stop began, runs them here (nothing
 * else would). */
static void submit(struct recorder *r, struct job *j)
{
	bool wake;

	j->link.next = NULL;
	pthread_mutex_lock(&r->lock);
	if (r->tail)
		r->tail->link.next = &j->link;
	else
		r->head = j;
	r->tail = j;
	wake = !r->drain_queued;
	r->drain_queued = true;
	pthread_mutex_unlock(&r->lock);
	if (wake && !util_worker_queue(r->worker, &r->drain))
		drain(r, NULL);
}

void recorder_ranges(struct recorder *r, struct flight *f, struct util_ranges *written,
                     bool complete)
{
	struct job *j = job_new(JOB_RANGES, f);

	if (!j) {
		util_ranges_clear(written);
		return; /* a later record, or the next session's refetch, covers it */
	}
	j->written = *written;
	util_ranges_init(written);
	j->complete = complete;
	submit(r, j);
}

void recorder_failed(struct recorder *r, struct flight *f)
{
	struct job *j = job_new(JOB_FAILED, f);

	if (j)
		submit(r, j);
}

void recorder_release(struct recorder *r, struct lease_set *leases, const char *key)
{
	struct job *j = job_new(JOB_RELEASE, NULL);
	char *copy = strdup(key);

	if (!j || !copy) {
		free(j);
		free(copy);
		lease_set_release(leases, key); /* out of memory: now rather than never */
		return;
	}
	j->leases = leases;
	j->key = copy;
	submit(r, j);
}

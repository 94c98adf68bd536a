/*
 * The prefetch thread (see prefetch.h): takes the opens fs/ notes, feeds them to the walk,
 * starts what the walk's window has room for, and works through a prefetch list.
 *
 * Beside a list, a walk works only for what the list did not foresee: an open of a file the
 * list named is no news to the walk (it neither starts nor feeds one), and a walk's window
 * passes over files the list named. Measured on a deterministic program's second run (AWS
 * CLI, doc/benchmarks.md), walks beside its list started 179 of 292 requests, 11 MB never
 * read, and made the run slower; an open the list did not foresee still may start one (the
 * program read something else this time). The list is read before the opens each round,
 * so that it has named what it will before the walk hears of an open.
 *
 * Lock: p->lock guards events, n_events, stopping and wake; the thread takes them out and
 * drops the lock before it calls the index or the ops.
 */
#include "fetch/prefetch/prefetch.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fetch/engine/flight.h"
#include "fetch/prefetch/foreseen.h"
#include "fetch/prefetch/reads.h"
#include "fetch/prefetch/walk.h"
#include "index/index.h"
#include "util/log.h"
#include "util/thread.h"

/* Opens queued for the thread, at most: a burst beyond it drops the oldest (a walk seen a
 * little later is all that is lost). */
#define EVENTS_MAX 1024
/* While list objects download, the thread looks at them this often. */
#define LIST_POLL_MS 5
/* Bad lines named one by one in the log; the rest are counted in the summary. */
#define LIST_LOG_MAX 20
/* List entries whose hash list downloads (their objects start once it is in), at most: the
 * list reads on past them meanwhile, and stops while this many wait. */
#define PENDING_MAX 8

struct open_event {
	uint64_t ino;
	uint64_t dir;
};

/* A list entry waiting for its hash list (ops.start said PREFETCH_PENDING). */
struct pending_entry {
	struct flight *list; /* the flight it waits for, a reference */
	uint64_t ino;
	uint64_t size; /* counted in list_bytes already */
};

struct prefetch {
	struct index *idx;
	struct prefetch_config cfg;
	struct prefetch_ops ops;
	char *list_name;
	struct prefetch_stats stats;
	struct prefetch_walk_counters own_walk;
	pthread_t thread;
	bool started;

	pthread_mutex_t lock;
	pthread_cond_t wake;
	/* Guarded by lock. */
	struct open_event events[EVENTS_MAX];
	unsigned ev_head, n_events;
	bool stopping;

	/* The thread's own. */
	struct walk walk;
	struct prefetch_list_reader *list;
	bool list_eof;
	int next_fd;     /* the list read once list's fd ends (the order's successor), or -1 */
	char *next_name; /* its name */
	struct foreseen foreseen; /* files the list named (started or local): no walk's */
	struct flight **inflight; /* list flights not finished (references) */
	unsigned n_inflight;
	/* Entries waiting for their hash lists; with n_inflight, at most list_inflight. */
	struct pending_entry pending[PENDING_MAX];
	unsigned n_pending;
	unsigned logged_bad;
	bool said_budget;
};

int prefetch_create(struct index *idx, const struct prefetch_config *cfg,
                    const struct prefetch_ops *ops, struct prefetch **out)
{
	struct prefetch *p = calloc(1, sizeof(*p));
	int rc = -ENOMEM;

	if (!p)
		goto fail;
	p->idx = idx;
	p->cfg = *cfg;
	p->stats.walk = cfg->walk_counters ? cfg->walk_counters : &p->own_walk;
	p->ops = *ops;
	if (p->cfg.list_inflight == 0)
		p->cfg.list_inflight = 1;
	p->next_fd = -1;
	if (cfg->list_fd >= 0 || cfg->order_fd >= 0) {
		const char *first = cfg->order_fd >= 0 ? cfg->order_name : cfg->list_name;
		p->list = malloc(sizeof(*p->list));
		p->inflight = calloc(p->cfg.list_inflight, sizeof(*p->inflight));
		p->list_name = strdup(first ? first : "the prefetch list");
		if (cfg->order_fd >= 0 && cfg->list_fd >= 0)
			p->next_name =
			    strdup(cfg->list_name ? cfg->list_name : "the prefetch list");
		if (!p->list || !p->inflight || !p->list_name ||
		    (cfg->order_fd >= 0 && cfg->list_fd >= 0 && !p->next_name))
			goto fail_p;
		prefetch_list_reader_init(p->list,
		                          cfg->order_fd >= 0 ? cfg->order_fd : cfg->list_fd);
		if (cfg->order_fd >= 0)
			p->next_fd = cfg->list_fd;
		atomic_store(&p->stats.list_given, true);
	}
	walk_init(&p->walk, idx,
	          &(struct walk_config){.ahead_files = cfg->ahead_files,
	                                .window_bytes = cfg->window_bytes,
	                                .max_object = cfg->max_object,
	                                .ensure_listed = ops->ensure_listed,
	                                .ctx = ops->ctx});
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->wake, NULL);
	*out = p;
	return 0;
fail_p:
	free(p->list);
	free(p->inflight);
	free(p->list_name);
	free(p->next_name);
	free(p);
fail:
	if (cfg->list_fd >= 0)
		close(cfg->list_fd);
	if (cfg->order_fd >= 0)
		close(cfg->order_fd);
	return rc;
}

const struct prefetch_stats *prefetch_stats(const struct prefetch *p)
{
	return &p->stats;
}

void prefetch_note_open(struct prefetch *p, uint64_t ino, uint64_t dir)
{
	if (!p->cfg.walk)
		return;
	pthread_mutex_lock(&p->lock);
	if (p->n_events == EVENTS_MAX) {
		p->ev_head = (p->ev_head + 1) % EVENTS_MAX;
		p->n_events--;
	}
	p->events[(p->ev_head + p->n_events) % EVENTS_MAX] = (struct open_event){ino, dir};
	p->n_events++;
	pthread_cond_signal(&p->wake);
	pthread_mutex_unlock(&p->lock);
}

/* Starts what the walk's window has room for. */
static void fill_walk(struct prefetch *p)
{
	struct walk_item items[WALK_FILL_MAX];
	int n = walk_fill(&p->walk, items, WALK_FILL_MAX);

	if (n < 0) {
		util_log(UTIL_LOG_DEBUG, "prefetch: the walk's plan: %s", strerror(-n));
		return;
	}
	for (int i = 0; i < n; i++) {
		struct flight *f = NULL;
		int rc = foreseen_has(&p->foreseen, items[i].ino)
		             ? 0 /* the list's: fetched by it already, or local */
		             : p->ops.start(p->ops.ctx, items[i].ino, false, &f);
		if (rc == 1) {
			atomic_fetch_add(&p->stats.walk->walk_started, 1);
			flight_unref(f); /* the table keeps it: a reader joins it there */
		} else {
			walk_unfill(&p->walk, items[i].ino); /* local already: costs nothing */
		}
	}
}

/* The inode of path (relative, checked), or -errno: -ENOENT, -ENOTDIR. */
static int resolve(struct prefetch *p, char *path, struct index_node *n)
{
	uint64_t dir = INDEX_ROOT_INO;
	char *seg = path;
	int rc = 0;

	for (;;) {
		char *slash = strchr(seg, '/');
		if (slash)
			*slash = '\0';
		if (p->ops.ensure_listed && (rc = p->ops.ensure_listed(p->ops.ctx, dir)) != 0)
			break;
		rc = index_lookup(p->idx, dir, seg, n);
		if (slash)
			*slash = '/';
		if (rc || !slash)
			break;
		if (!n->is_dir) {
			rc = -ENOTDIR;
			break;
		}
		dir = n->ino;
		seg = slash + 1;
	}
	return rc;
}

/* The line's number and the reason, never its text: the list may be a file the daemon
 * (root) can read and the log's readers cannot, and a planted link to one would copy its
 * lines into the log. */
static void bad_line(struct prefetch *p, const char *why)
{
	atomic_fetch_add(&p->stats.list_bad, 1);
	if (p->logged_bad++ < LIST_LOG_MAX)
		util_log(UTIL_LOG_WARN, "%s: line %u: %s: skipped", p->list_name, p->list->line_no,
		         why);
}

/* One entry of the list: resolved and started, or skipped with a reason. */
static void list_entry(struct prefetch *p, char *path)
{
	struct index_node n;
	struct flight *f = NULL;
	int rc;

	rc = resolve(p, path, &n);
	if (rc == 0 && n.kind != INDEX_KIND_FILE)
		rc = n.is_dir ? -EISDIR : -ELOOP;
	if (rc) {
		bad_line(p, rc == -ENOENT || rc == -ENOTDIR ? "not in the source"
		            : rc == -EISDIR                 ? "a directory"
		            : rc == -ELOOP                  ? "a symbolic link"
		                                            : strerror(-rc));
		return;
	}
	uint64_t spent = atomic_load(&p->stats.list_bytes);
	if (n.size > p->cfg.list_budget || spent > p->cfg.list_budget - n.size) {
		atomic_fetch_add(&p->stats.list_over_budget, 1);
		if (!p->said_budget)
			util_log(UTIL_LOG_INFO,
			         "%s: line %u and others left out: over the prefetch budget"
			         " of %" PRIu64 " bytes",
			         p->list_name, p->list->line_no, p->cfg.list_budget);
		p->said_budget = true;
		return;
	}
	rc = p->ops.start(p->ops.ctx, n.ino, true, &f);
	if (rc < 0) {
		bad_line(p, strerror(-rc));
		return;
	}
	foreseen_add(&p->foreseen, n.ino);
	if (rc == 0) {
		atomic_fetch_add(&p->stats.list_local, 1);
		return;
	}
	atomic_fetch_add(&p->stats.list_started, 1);
	if (rc == PREFETCH_PENDING) {
		/* Its bytes count now: the entries after it are weighed against them. */
		atomic_fetch_add(&p->stats.list_bytes, n.size);
		p->pending[p->n_pending++] = (struct pending_entry){f, n.ino, n.size};
		return;
	}
	atomic_fetch_add(&p->stats.list_bytes, flight_size(f));
	p->inflight[p->n_inflight++] = f;
}

/* Entry e's hash list finished: its object starts now (or was started by a reader, or it
 * failed). True when e waits on (for another flight). */
static bool start_pending(struct prefetch *p, struct pending_entry *e, enum flight_state state)
{
	struct flight *f = NULL;
	int rc = state == FLIGHT_COMPLETE ? p->ops.start(p->ops.ctx, e->ino, true, &f) : -EIO;

	/* Only now: the start joined the hash list's flight while this kept it. */
	flight_unref(e->list);
	e->list = NULL;
	if (rc == PREFETCH_PENDING) {
		e->list = f;
		return true;
	}
	if (rc == 1) {
		p->inflight[p->n_inflight++] = f;
	} else if (rc == 0) {
		/* A reader's open started it first: one download, the reader's. */
		atomic_fetch_sub(&p->stats.list_started, 1);
		atomic_fetch_sub(&p->stats.list_bytes, e->size);
		atomic_fetch_add(&p->stats.list_local, 1);
	} else {
		/* Its reader's open fetches the hash list again and says why it fails. */
		util_log(UTIL_LOG_DEBUG, "prefetch: inode %" PRIu64 ": its hash list: %s", e->ino,
		         strerror(-rc));
		atomic_fetch_add(&p->stats.list_finished, 1);
	}
	return false;
}

/* Starts the objects whose hash lists finished; true while some still download. */
static bool prune_pending(struct prefetch *p)
{
	unsigned kept = 0;

	for (unsigned i = 0; i < p->n_pending; i++) {
		struct pending_entry e = p->pending[i];
		enum flight_state state;
		flight_progress(e.list, NULL, NULL, &state);
		if (state == FLIGHT_ACTIVE || start_pending(p, &e, state))
			p->pending[kept++] = e;
	}
	p->n_pending = kept;
	return kept > 0;
}

/* Drops the list flights that finished; true while some still download. */
static bool prune_inflight(struct prefetch *p)
{
	unsigned kept = 0;

	for (unsigned i = 0; i < p->n_inflight; i++) {
		enum flight_state state;
		flight_progress(p->inflight[i], NULL, NULL, &state);
		if (state == FLIGHT_ACTIVE) {
			p->inflight[kept++] = p->inflight[i];
			continue;
		}
		atomic_fetch_add(&p->stats.list_finished, 1);
		flight_unref(p->inflight[i]);
	}
	p->n_inflight = kept;
	return kept > 0;
}

/* The read order is read: the job's own list follows, by the same reader. Its paths that
 * the order had are found local or downloading already: fetched once. */
static void next_list(struct prefetch *p)
{
	close(p->list->fd);
	prefetch_list_reader_init(p->list, p->next_fd);
	p->next_fd = -1;
	free(p->list_name);
	p->list_name = p->next_name;
	p->next_name = NULL;
	p->list_eof = false;
	p->logged_bad = 0;
}

/* Reads on in the list while fewer than list_inflight of its objects download. True while
 * the list has work left (to read, or downloading). */
static bool work_list(struct prefetch *p)
{
	const char *path, *why;
	int rc;

	if (!p->list)
		return false;
	prune_inflight(p);
	prune_pending(p);
	while (!p->list_eof && p->n_inflight + p->n_pending < p->cfg.list_inflight &&
	       p->n_pending < PENDING_MAX) {
		rc = prefetch_list_next(p->list, &path, &why);
		if (rc <= 0) {
			if (rc < 0)
				util_log(UTIL_LOG_WARN, "%s: cannot read on: %s", p->list_name,
				         strerror(-rc));
			p->list_eof = true;
			util_log(UTIL_LOG_INFO,
			         "%s: %" PRIu64 " entries: %" PRIu64 " started (%" PRIu64
			         " bytes), %" PRIu64 " local already, %" PRIu64 " skipped, %" PRIu64
			         " over the budget",
			         p->list_name, atomic_load(&p->stats.list_entries),
			         atomic_load(&p->stats.list_started),
			         atomic_load(&p->stats.list_bytes),
			         atomic_load(&p->stats.list_local), atomic_load(&p->stats.list_bad),
			         atomic_load(&p->stats.list_over_budget));
			if (p->next_fd >= 0)
				next_list(p);
			break;
		}
		atomic_fetch_add(&p->stats.list_entries, 1);
		if (!path)
			bad_line(p, why);
		else
			list_entry(p, (char *)path);
	}
	if (p->list_eof && p->n_inflight == 0 && p->n_pending == 0) {
		atomic_store(&p->stats.list_done, true);
		close(p->list->fd);
		free(p->list);
		p->list = NULL;
		return false;
	}
	return true;
}

static void *run(void *arg)
{
	struct prefetch *p = arg;
	struct open_event batch[64];
	bool list_busy = p->list != NULL;

	pthread_mutex_lock(&p->lock);
	while (!p->stopping) {
		unsigned n = 0;
		while (p->n_events > 0 && n < 64) {
			batch[n++] = p->events[p->ev_head];
			p->ev_head = (p->ev_head + 1) % EVENTS_MAX;
			p->n_events--;
		}
		if (n == 0 && !list_busy) {
			pthread_cond_wait(&p->wake, &p->lock);
			continue;
		}
		pthread_mutex_unlock(&p->lock);
		/* The list first: it names what it foresees before the walk hears of opens, and
		 * its objects go to the engine ahead of a walk's. */
		list_busy = work_list(p);
		bool fill = false;
		for (unsigned i = 0; i < n; i++) {
			if (foreseen_has(&p->foreseen, batch[i].ino))
				continue;
			uint64_t seen = p->walk.walks_seen, hits = p->walk.hits;
			fill |= walk_note_open(&p->walk, batch[i].ino, batch[i].dir) == 1;
			atomic_fetch_add(&p->stats.walk->walks, p->walk.walks_seen - seen);
			atomic_fetch_add(&p->stats.walk->walk_hits, p->walk.hits - hits);
		}
		if (fill)
			fill_walk(p);
		pthread_mutex_lock(&p->lock);
		if (list_busy && p->n_events == 0 && !p->stopping) {
			struct timespec until;
			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_nsec += LIST_POLL_MS * 1000000L;
			if (until.tv_nsec >= 1000000000L) {
				until.tv_sec++;
				until.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&p->wake, &p->lock, &until);
		}
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int prefetch_start(struct prefetch *p)
{
	int rc;

	if (!p->cfg.walk && !p->list)
		return 0;
	rc = util_thread_start(&p->thread, "spoolfs-prefetch", run, p);
	if (rc == 0)
		p->started = true;
	return rc;
}

void prefetch_stop(struct prefetch *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	pthread_cond_signal(&p->wake);
	pthread_mutex_unlock(&p->lock);
	if (p->started)
		pthread_join(p->thread, NULL);
	p->started = false;
	for (unsigned i = 0; i < p->n_inflight; i++)
		flight_unref(p->inflight[i]);
	p->n_inflight = 0;
	/* Their hash lists' downloads are the engine's to end; their objects never start. */
	for (unsigned i = 0; i < p->n_pending; i++)
		flight_unref(p->pending[i].list);
	p->n_pending = 0;
}

void prefetch_destroy(struct prefetch *p)
{
	if (!p)
		return;
	prefetch_stop(p);
	walk_free(&p->walk);
	foreseen_free(&p->foreseen);
	if (p->list) {
		close(p->list->fd);
		free(p->list);
	}
	if (p->next_fd >= 0)
		close(p->next_fd);
	free(p->inflight);
	free(p->list_name);
	free(p->next_name);
	pthread_cond_destroy(&p->wake);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

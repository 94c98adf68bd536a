/*
 * The Prometheus text of /.spoolfs/stats and of --metrics-file (see metrics.h).
 *
 * Lock: daemon_metrics.lock guards stop, which the writer thread waits on between writes.
 * Everything else of struct daemon_metrics is set before the thread starts and only read by
 * it, or is the writer's own (the thread's, then, once it is joined, daemon_metrics_stop's).
 */
#include "daemon/metrics.h"
#include "daemon/overlay.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fetch/prefetch/prefetch.h"
#include "daemon/supervisor.h"
#include "util/log.h"
#include "util/thread.h"
#include "util/trusted_path.h"

struct daemon_metrics {
	const char *path; /* the session's opts.log.metrics_file, absolute */
	char *labels;     /* `mount="..."`, escaped */
	unsigned interval_s;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake; /* CLOCK_MONOTONIC */
	bool stop;           /* guarded by lock */
	/* The writer's own. */
	int failed; /* the errno of the last failed write, 0 after a good one: said once */
};

struct totals {
	unsigned active;
	unsigned complete;
	uint64_t bytes_local;
	uint64_t spec_unread; /* bytes of speculative flights no reader opened */
};

static void add_flight(void *ctx, const struct flight_info *info)
{
	struct totals *t = ctx;

	if (info->state == FLIGHT_ACTIVE)
		t->active++;
	else if (info->state == FLIGHT_COMPLETE)
		t->complete++;
	t->bytes_local += info->published;
	if (info->speculative && !info->opened)
		t->spec_unread += info->written;
}

static void family(FILE *out, const char *name, const char *type, const char *help)
{
	fprintf(out, "# HELP spoolfs_%s %s\n# TYPE spoolfs_%s %s\n", name, help, name, type);
}

static void metric(FILE *out, const char *labels, const char *name, const char *type,
                   const char *help, uint64_t v)
{
	family(out, name, type, help);
	fprintf(out, "spoolfs_%s%s%s%s %" PRIu64 "\n", name, labels ? "{" : "",
	        labels ? labels : "", labels ? "}" : "", v);
}

/* One family of a table: its name after "spoolfs_", its type and help, and its value now. */
struct metric_row {
	const char *name, *type, *help;
	uint64_t value;
};

static void metric_rows(FILE *out, const char *labels, const char *prefix,
                        const struct metric_row *rows, size_t n)
{
	char name[96];

	for (size_t i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "%s%s", prefix, rows[i].name);
		metric(out, labels, name, rows[i].type, rows[i].help, rows[i].value);
	}
}

#define ROWS(rows) (rows), sizeof(rows) / sizeof((rows)[0])

void daemon_metrics_write_stats(struct fs_session *s, FILE *out, const char *labels)
{
	const struct engine_stats *es = engine_stats(s->engine);
	struct totals t = {0};

	flight_table_foreach(s->flights, add_flight, &t);
	/* An open that started a flight the cache directory then served whole was a hit. */
	uint64_t started = atomic_load(&s->counters->opens_new),
	         restored = atomic_load(&es->restored);
	restored = restored < started ? restored : started;
	/* A miss turns into a hit when the engine finds its object complete in the cache
	 * directory, which may be after the open counted it (or restored flights no open
	 * started, which a later serving process counts too): misses could go down. No reader
	 * may see a counter go down, so the most any reader of any serving process was shown
	 * is kept (an atomic maximum) and shown at least (the hit shows; the miss stays). */
	uint64_t misses = started - restored, shown = atomic_load(&s->counters->misses_shown);
	while (misses > shown &&
	       !atomic_compare_exchange_weak(&s->counters->misses_shown, &shown, misses))
		;
	if (misses < shown)
		misses = shown;
	const struct metric_row rows[] = {
	    {"upstream_requests_total", "counter", "HTTP requests sent upstream",
	     atomic_load(&es->requests)},
	    {"upstream_bytes_total", "counter", "body bytes received from upstream",
	     atomic_load(&es->bytes)},
	    {"upstream_delivered_bytes_total", "counter",
	     "bytes of objects the bodies received gave (decompressed, when stored compressed)",
	     atomic_load(&es->delivered_bytes)},
	    {"upstream_connections_total", "counter",
	     "connections downloads opened (each reused while the server keeps it open)",
	     atomic_load(&es->connections)},
	    {"upstream_http2_responses_total", "counter",
	     "responses that came over HTTP/2 (many share one connection)",
	     atomic_load(&es->http2_responses)},
	    {"upstream_retries_total", "counter", "transfer attempts retried",
	     atomic_load(&es->retries)},
	    {"upstream_failures_total", "counter", "objects whose download failed",
	     atomic_load(&es->failures)},
	    {"cache_hits_total", "counter", "opens of objects already local",
	     atomic_load(&s->counters->opens_local) + restored},
	    {"passthrough_opens_total", "counter",
	     "opens of complete objects that the kernel reads from the spool itself",
	     atomic_load(&s->counters->opens_passthrough)},
	    {"cache_misses_total", "counter", "opens that started a download", misses},
	    {"coalesced_opens_total", "counter", "opens that joined a running download",
	     atomic_load(&s->counters->opens_joined)},
	    {"nested_listed_ahead_total", "counter",
	     "nested manifests loaded ahead of a walk, before it entered their directory",
	     atomic_load(&s->counters->nested_listed_ahead)},
	    {"handles_adopted_total", "counter",
	     "open files of an earlier serving process rebuilt here at their first read",
	     atomic_load(&s->counters->handles_adopted)},
	    {"coalesced_waits_total", "counter", "reads parked until their bytes arrived",
	     atomic_load(&s->counters->reads_parked)},
	    {"read_failures_total", "counter", "reads answered with an error",
	     atomic_load(&s->counters->reads_failed)},
	    {"page_cache_dropped_bytes_total", "counter",
	     "bytes of FUSE's page cache dropped, behind sequential readers and at last close",
	     atomic_load(&s->counters->pages_dropped_bytes)},
	    {"page_cache_drops_pending", "gauge", "page cache drops queued, not yet done",
	     atomic_load(&s->counters->page_drops_pending)},
	    {"pack_member_hash_failures_total", "counter",
	     "pack members whose bytes did not match their sha256 (their pack is fetched again)",
	     atomic_load(&s->counters->member_hash_failures)},
	    {"members_pushed_total", "counter",
	     "pack members given to the kernel's page cache at their open (their reads send no "
	     "request)",
	     atomic_load(&s->counters->members_pushed)},
	    {"virtual_snapshots_total", "counter",
	     "contents of /.spoolfs files built, one per open",
	     atomic_load(&s->counters->virtual_snapshots)},
	    {"bytes_local", "gauge", "bytes readable from the spool now", t.bytes_local},
	    {"flights_in_progress", "gauge", "downloads running", t.active},
	    {"flights_complete", "gauge", "objects fully local and verified", t.complete},
	};
	metric_rows(out, labels, "", ROWS(rows));
	/* The processes of the mount (doc/survive.md). */
	struct daemon_supervision sup = {0};
	daemon_supervision_read(s, &sup);
	const struct metric_row processes[] = {
	    {"serving_pid", "gauge", "the process serving the mount now", (uint64_t)getpid()},
	    {"supervisor_pid", "gauge", "the supervisor holding the mount's FUSE device (0: none)",
	     sup.supervisor_pid},
	    {"restarts_total", "counter", "serving processes started after one died", sup.restarts},
	    {"reloads_total", "counter",
	     "serving processes replaced by the binary on disk (spoolfs reload)", sup.reloads},
	    {"reloads_failed_total", "counter",
	     "reloads refused or rolled back to the running binary", sup.reloads_failed},
	};
	metric_rows(out, labels, "", ROWS(processes));
	/* The mount's own file has no labels: the version is a comment there (spoolfs status). */
	if (!labels)
		fprintf(out, "# version %s\n", SPOOLFS_VERSION);
	/* Plain names and hex only (tag_pointer.h): safe in a comment. */
	if (!labels && s->daemon.release)
		fprintf(out, "# release %s\n", s->daemon.release);
	daemon_metrics_write_prefetch(s, out, labels, t.spec_unread);
}

void daemon_metrics_write_prefetch(struct fs_session *s, FILE *out, const char *labels,
                                   uint64_t spec_unread)
{
	const struct engine_stats *es = engine_stats(s->engine);
	const struct metric_row speculation[] = {
	    {"speculative_flights_total", "counter",
	     "downloads prefetch started before a reader opened the object",
	     atomic_load(&es->spec_flights)},
	    {"speculative_bytes_total", "counter", "body bytes received for speculative downloads",
	     atomic_load(&es->spec_bytes)},
	    {"speculative_unread_bytes", "gauge",
	     "bytes of speculative downloads that no reader has opened (yet)", spec_unread},
	    {"speculative_requests_limit", "gauge",
	     "speculative requests allowed at once now (halved on 503 and 429)",
	     atomic_load(&es->spec_limit)},
	    {"upstream_throttled_total", "counter",
	     "answers of 503 or 429 (the store asking to slow down)", atomic_load(&es->throttled)},
	};
	metric_rows(out, labels, "", ROWS(speculation));
	if (!s->prefetch)
		return;
	const struct prefetch_stats *ps = prefetch_stats(s->prefetch);
	const struct metric_row walks[] = {
	    {"walks_total", "counter", "walks of a directory seen", atomic_load(&ps->walk->walks)},
	    {"walk_started_total", "counter", "objects a walk started ahead of its reader",
	     atomic_load(&ps->walk->walk_started)},
	    {"walk_hits_total", "counter", "opens that a walk's window had started ahead",
	     atomic_load(&ps->walk->walk_hits)},
	};
	metric_rows(out, labels, "prefetch_", ROWS(walks));
	if (!atomic_load(&ps->list_given))
		return;
	/* Names are [A-Za-z0-9._-] (read_orders.h): safe in a comment (spoolfs status). */
	if (!labels && s->read_order_name[0])
		fprintf(out, "# read_order %s\n", s->read_order_name);
	const struct metric_row list[] = {
	    {"entries", "gauge", "lines read from the prefetch list (blank ones left out)",
	     atomic_load(&ps->list_entries)},
	    {"skipped", "gauge",
	     "prefetch list lines skipped: not a file of the source, or not a path",
	     atomic_load(&ps->list_bad)},
	    {"local", "gauge", "prefetch list objects local or downloading already",
	     atomic_load(&ps->list_local)},
	    {"started", "gauge", "prefetch list objects it started",
	     atomic_load(&ps->list_started)},
	    {"finished", "gauge", "prefetch list objects it started that finished",
	     atomic_load(&ps->list_finished)},
	    {"over_budget", "gauge", "prefetch list objects left out: over --prefetch-budget",
	     atomic_load(&ps->list_over_budget)},
	    {"bytes", "gauge", "bytes of the prefetch list objects it started",
	     atomic_load(&ps->list_bytes)},
	    {"done", "gauge", "1 once the prefetch list is read and its objects finished",
	     atomic_load(&ps->list_done) ? 1 : 0},
	};
	metric_rows(out, labels, "prefetch_list_", ROWS(list));
}

/* One histogram's samples; labels already holds what goes before le. */
static void histogram_samples(FILE *out, const char *name, const char *labels,
                              const struct util_histogram_snapshot *snap)
{
	for (unsigned i = 0; i <= UTIL_HISTOGRAM_BOUNDS; i++) {
		if (i < UTIL_HISTOGRAM_BOUNDS)
			fprintf(out, "spoolfs_%s_bucket{%s,le=\"%g\"} %" PRIu64 "\n", name, labels,
			        (double)util_histogram_bounds_ns[i] / 1e9, snap->cumulative[i]);
		else
			fprintf(out, "spoolfs_%s_bucket{%s,le=\"+Inf\"} %" PRIu64 "\n", name,
			        labels, snap->cumulative[i]);
	}
	fprintf(out, "spoolfs_%s_sum{%s} %.9f\nspoolfs_%s_count{%s} %" PRIu64 "\n", name, labels,
	        (double)snap->sum_ns / 1e9, name, labels, snap->cumulative[UTIL_HISTOGRAM_BOUNDS]);
}

static void histogram(FILE *out, const char *labels, const char *name, const char *help,
                      const struct util_histogram *h)
{
	struct util_histogram_snapshot snap;

	family(out, name, "histogram", help);
	util_histogram_read(h, &snap);
	histogram_samples(out, name, labels, &snap);
}

static void write_histograms(struct fs_session *s, FILE *out, const char *labels)
{
	const struct engine_stats *es = engine_stats(s->engine);
	struct util_histogram_snapshot snap;
	char *with_code;
	unsigned key;
	bool other;
	int n;

	histogram(out, labels, "open_first_byte_seconds",
	          "from an open to the answer of its first read that reached the daemon",
	          &s->counters->first_byte);
	histogram(out, labels, "read_wait_seconds",
	          "how long a read waited parked for its bytes to arrive", &s->counters->read_wait);
	family(out, "upstream_request_seconds", "histogram",
	       "from sending an upstream request to its response headers, by HTTP status"
	       " (code none: ended without a status)");
	for (unsigned i = 0; i < UTIL_HISTOGRAM_KEYS; i++) {
		if (!util_histogram_set_read(&es->latency, i, &key, &other, &snap))
			continue;
		if (other || key == 0)
			n = asprintf(&with_code, "%s,code=\"%s\"", labels,
			             other ? "other" : "none");
		else
			n = asprintf(&with_code, "%s,code=\"%u\"", labels, key);
		if (n < 0)
			continue; /* this code is missing from one write */
		histogram_samples(out, "upstream_request_seconds", with_code, &snap);
		free(with_code);
	}
}

/* The file's whole text (malloc'd in *text), or -ENOMEM. */
static int build(struct fs_session *s, bool mounted, char **text, size_t *len)
{
	struct daemon_metrics *m = s->daemon.metrics;
	FILE *out = open_memstream(text, len);

	if (!out)
		return -ENOMEM;
	daemon_metrics_write_stats(s, out, m->labels);
	metric(out, m->labels, "mounted", "gauge",
	       "1 while the mount is up; 0 in the last write, at unmount", mounted ? 1 : 0);
	write_histograms(s, out, m->labels);
	if (fclose(out) != 0) {
		free(*text);
		*text = NULL;
		return -ENOMEM;
	}
	return 0;
}

struct text {
	const char *text;
	size_t len;
};

static int write_text(int fd, void *ctx)
{
	const struct text *t = ctx;

	for (size_t done = 0; done < t->len;) {
		ssize_t n = write(fd, t->text + done, t->len - done);
		if (n < 0 && errno != EINTR)
			return -errno;
		if (n > 0)
			done += (size_t)n;
	}
	return 0;
}

static void write_once(struct fs_session *s, bool mounted)
{
	struct daemon_metrics *m = s->daemon.metrics;
	char *text = NULL;
	size_t len = 0;
	int rc;

	rc = build(s, mounted, &text, &len);
	/* Through the directory held since start; 0644: a collector runs as another user, and
	 * nothing here is secret (no URL, no name). */
	if (rc == 0)
		rc = util_trusted_replace(s->daemon.metrics_out.dir_fd, s->daemon.metrics_out.name,
		                          0644, write_text, &(struct text){text, len});
	free(text);
	if (rc && rc != -m->failed)
		util_log(UTIL_LOG_WARN, "--metrics-file %s: %s (tried again every %u s)", m->path,
		         strerror(-rc), m->interval_s);
	else if (!rc && m->failed)
		util_log(UTIL_LOG_INFO, "--metrics-file %s: written again", m->path);
	m->failed = -rc;
}

static void *writer_main(void *arg)
{
	struct fs_session *s = arg;
	struct daemon_metrics *m = s->daemon.metrics;
	struct timespec due;

	clock_gettime(CLOCK_MONOTONIC, &due);
	pthread_mutex_lock(&m->lock);
	while (!m->stop) {
		due.tv_sec += m->interval_s;
		while (!m->stop && pthread_cond_timedwait(&m->wake, &m->lock, &due) != ETIMEDOUT)
			;
		if (m->stop)
			break;
		pthread_mutex_unlock(&m->lock); /* no lock across the file's I/O */
		write_once(s, true);
		pthread_mutex_lock(&m->lock);
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

/* label="value" with the value escaped as the text format asks: \\, \" and \n. */
static char *label(const char *name, const char *value)
{
	size_t n = strlen(name) + 4;
	char *out, *o;

	for (const char *p = value; *p; p++)
		n += *p == '\\' || *p == '"' || *p == '\n' ? 2 : 1;
	out = malloc(n);
	if (!out)
		return NULL;
	o = out + sprintf(out, "%s=\"", name);
	for (const char *p = value; *p; p++) {
		if (*p == '\\' || *p == '"' || *p == '\n') {
			*o++ = '\\';
			*o++ = *p == '\n' ? 'n' : *p;
		} else {
			*o++ = *p;
		}
	}
	*o++ = '"';
	*o = '\0';
	return out;
}

int daemon_metrics_start(struct fs_session *s)
{
	struct daemon_metrics *m;
	pthread_condattr_t attr;
	int rc = -ENOMEM;

	if (!s->opts.log.metrics_file)
		return 0;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->path = s->opts.log.metrics_file;
	m->interval_s = s->opts.log.metrics_interval_s;
	/* The path users know: --writable's overlay, not the run directory's mount beneath. */
	m->labels = label("mount", daemon_overlay_path(s) ? daemon_overlay_path(s)
	                           : s->mount_path        ? s->mount_path
	                                                  : s->opts.mountpoint);
	if (!m->labels)
		goto fail;
	pthread_mutex_init(&m->lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&m->wake, &attr);
	pthread_condattr_destroy(&attr);
	s->daemon.metrics = m;
	write_once(s, true); /* there from the start, not an interval later */
	rc = util_thread_start(&m->thread, "spoolfs-metrics", writer_main, s);
	if (rc == 0)
		return 0;
	s->daemon.metrics = NULL;
	pthread_cond_destroy(&m->wake);
	pthread_mutex_destroy(&m->lock);
fail:
	free(m->labels);
	free(m);
	return rc;
}

void daemon_metrics_stop(struct fs_session *s)
{
	struct daemon_metrics *m = s->daemon.metrics;

	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	m->stop = true;
	pthread_cond_signal(&m->wake);
	pthread_mutex_unlock(&m->lock);
	pthread_join(m->thread, NULL);
	write_once(s, false);
	s->daemon.metrics = NULL;
	pthread_cond_destroy(&m->wake);
	pthread_mutex_destroy(&m->lock);
	free(m->labels);
	free(m);
}

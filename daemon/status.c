/*
 * `spoolfs status MOUNTPOINT [--watch] [--interval SEC]`: what a mount is doing, read from
 * its virtual files (/.spoolfs/flights and /.spoolfs/stats), so it needs no other channel
 * into the daemon. Rates come from two snapshots taken an interval apart. The JSON lines
 * are parsed with sqlite's JSON functions.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "daemon/overlay.h"
#include "daemon/status.h"

struct row {
	char name[512];
	double size;
	double local;
	char state[16];
	int handles;
	int waiting;
};

struct snapshot {
	struct row *rows;
	size_t n;
	double upstream_requests;
	double upstream_bytes;
	double upstream_delivered; /* bytes the bodies gave: more when stored compressed */
	double upstream_connections;
	double upstream_http2;
	double hits;
	double misses;
	double coalesced;
	double retries;
	double failures;
	double bytes_local;
	/* Prefetch; list_entries is -1 when the mount has no prefetch list. */
	double spec_flights;
	double spec_unread;
	double walks;
	double list_entries;
	double list_started;
	double list_finished;
	double list_local;
	double list_skipped;
	double list_over_budget;
	double list_bytes;
	double list_done;
	double serving_pid;
	double supervisor_pid;
	double restarts;
	double reloads;
	char version[64];
	char read_order[72]; /* the manifest's read order the list begins with; "": none */
	char release[512];   /* "NAME sha256 HEX tag TAG": the release a tag led to; "": none */
	struct timespec at;
};

static volatile sig_atomic_t stop_watching;

static void on_signal(int sig)
{
	stop_watching = 1;
}

static char *read_text(const char *path)
{
	FILE *f = fopen(path, "r");
	char *text = NULL;
	size_t cap = 0, len = 0;

	if (!f)
		return NULL;
	for (;;) {
		if (len + 4096 + 1 > cap) {
			char *p = realloc(text, cap = cap ? cap * 2 : 65536);
			if (!p) {
				free(text);
				text = NULL;
				break;
			}
			text = p;
		}
		size_t n = fread(text + len, 1, cap - len - 1, f);
		len += n;
		if (n == 0) {
			text[len] = '\0';
			break;
		}
	}
	fclose(f);
	return text;
}

static int parse_flights(sqlite3 *db, const char *text, struct snapshot *snap)
{
	const char *sql = "SELECT json_extract(?1,'$.name'), json_extract(?1,'$.size'),"
	                  " json_extract(?1,'$.local'), json_extract(?1,'$.state'),"
	                  " json_extract(?1,'$.handles'), json_extract(?1,'$.waiting_reads')"
	                  " WHERE json_valid(?1)";
	sqlite3_stmt *st = NULL;
	size_t cap = 0;
	int rc = -EIO;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		goto out;
	for (const char *line = text; *line;) {
		const char *end = strchr(line, '\n');
		int len = end ? (int)(end - line) : (int)strlen(line);
		sqlite3_bind_text(st, 1, line, len, SQLITE_STATIC);
		if (sqlite3_step(st) == SQLITE_ROW) {
			if (snap->n == cap) {
				struct row *more = realloc(snap->rows, (cap = cap ? cap * 2 : 256) *
				                                           sizeof(*more));
				if (!more) {
					rc = -ENOMEM;
					goto out;
				}
				snap->rows = more;
			}
			struct row *r = &snap->rows[snap->n++];
			const unsigned char *name = sqlite3_column_text(st, 0);
			const unsigned char *state = sqlite3_column_text(st, 3);
			const char *full = name ? (const char *)name : "?";
			size_t full_len = strlen(full);
			/* The end of a long path names the object: keep that. */
			snprintf(r->name, sizeof(r->name), "%s",
			         full + (full_len >= sizeof(r->name)
			                     ? full_len - (sizeof(r->name) - 1)
			                     : 0));
			r->size = sqlite3_column_double(st, 1);
			r->local = sqlite3_column_double(st, 2);
			snprintf(r->state, sizeof(r->state), "%s",
			         state ? (const char *)state : "?");
			r->handles = sqlite3_column_int(st, 4);
			r->waiting = sqlite3_column_int(st, 5);
		}
		sqlite3_reset(st);
		line = end ? end + 1 : line + len;
	}
	rc = 0;
out:
	sqlite3_finalize(st);
	return rc;
}

static void parse_stats(const char *text, struct snapshot *snap)
{
	static const struct {
		const char *name;
		size_t offset;
	} fields[] = {
	    {"spoolfs_upstream_requests_total", offsetof(struct snapshot, upstream_requests)},
	    {"spoolfs_upstream_bytes_total", offsetof(struct snapshot, upstream_bytes)},
	    {"spoolfs_upstream_delivered_bytes_total",
	     offsetof(struct snapshot, upstream_delivered)},
	    {"spoolfs_upstream_connections_total", offsetof(struct snapshot, upstream_connections)},
	    {"spoolfs_upstream_http2_responses_total", offsetof(struct snapshot, upstream_http2)},
	    {"spoolfs_cache_hits_total", offsetof(struct snapshot, hits)},
	    {"spoolfs_cache_misses_total", offsetof(struct snapshot, misses)},
	    {"spoolfs_coalesced_opens_total", offsetof(struct snapshot, coalesced)},
	    {"spoolfs_upstream_retries_total", offsetof(struct snapshot, retries)},
	    {"spoolfs_upstream_failures_total", offsetof(struct snapshot, failures)},
	    {"spoolfs_bytes_local", offsetof(struct snapshot, bytes_local)},
	    {"spoolfs_speculative_flights_total", offsetof(struct snapshot, spec_flights)},
	    {"spoolfs_speculative_unread_bytes", offsetof(struct snapshot, spec_unread)},
	    {"spoolfs_prefetch_walks_total", offsetof(struct snapshot, walks)},
	    {"spoolfs_prefetch_list_entries", offsetof(struct snapshot, list_entries)},
	    {"spoolfs_prefetch_list_started", offsetof(struct snapshot, list_started)},
	    {"spoolfs_prefetch_list_finished", offsetof(struct snapshot, list_finished)},
	    {"spoolfs_prefetch_list_local", offsetof(struct snapshot, list_local)},
	    {"spoolfs_prefetch_list_skipped", offsetof(struct snapshot, list_skipped)},
	    {"spoolfs_prefetch_list_over_budget", offsetof(struct snapshot, list_over_budget)},
	    {"spoolfs_prefetch_list_bytes", offsetof(struct snapshot, list_bytes)},
	    {"spoolfs_prefetch_list_done", offsetof(struct snapshot, list_done)},
	    {"spoolfs_serving_pid", offsetof(struct snapshot, serving_pid)},
	    {"spoolfs_supervisor_pid", offsetof(struct snapshot, supervisor_pid)},
	    {"spoolfs_restarts_total", offsetof(struct snapshot, restarts)},
	    {"spoolfs_reloads_total", offsetof(struct snapshot, reloads)},
	};
	char name[128];
	double value;

	snap->list_entries = -1;
	for (const char *line = text; line && *line;
	     line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
		if (sscanf(line, "# version %63s", snap->version) == 1)
			continue;
		if (sscanf(line, "# read_order %71s", snap->read_order) == 1)
			continue;
		if (strncmp(line, "# release ", 10) == 0) {
			snprintf(snap->release, sizeof(snap->release), "%.*s",
			         (int)strcspn(line + 10, "\n"), line + 10);
			continue;
		}
		if (*line == '#' || sscanf(line, "%127s %lf", name, &value) != 2)
			continue;
		for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
			if (strcmp(name, fields[i].name) == 0)
				*(double *)((char *)snap + fields[i].offset) = value;
	}
}

static int take_snapshot(sqlite3 *db, const char *mountpoint, struct snapshot *snap)
{
	char path[4096];
	char *flights, *stats;
	int rc;

	memset(snap, 0, sizeof(*snap));
	snprintf(path, sizeof(path), "%s/.spoolfs/flights", mountpoint);
	flights = read_text(path);
	if (flights)
		snprintf(path, sizeof(path), "%s/.spoolfs/stats", mountpoint);
	stats = flights ? read_text(path) : NULL;
	if (!flights || !stats) {
		rc = -errno;
		if (rc == -ENOTCONN)
			fprintf(stderr,
			        "spoolfs status: the daemon of %s is gone (%s); unmount it with"
			        " fusermount3 -u %s\n",
			        mountpoint, strerror(-rc), mountpoint);
		else
			fprintf(stderr, "spoolfs status: %s is not a spoolfs mount (%s: %s)\n",
			        mountpoint, path, strerror(-rc));
		goto out;
	}
	clock_gettime(CLOCK_MONOTONIC, &snap->at);
	parse_stats(stats, snap);
	rc = parse_flights(db, flights, snap);
out:
	free(flights);
	free(stats);
	return rc;
}

static const char *human(double bytes, char *buf, size_t len)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int u = 0;

	while (bytes >= 1024 && u < 4) {
		bytes /= 1024;
		u++;
	}
	snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
	return buf;
}

/* Rows usually keep their order from one snapshot to the next: index i is tried first. */
static double previous_local(const struct snapshot *prev, size_t i, const char *name)
{
	if (prev && i < prev->n && strcmp(prev->rows[i].name, name) == 0)
		return prev->rows[i].local;
	for (i = 0; prev && i < prev->n; i++)
		if (strcmp(prev->rows[i].name, name) == 0)
			return prev->rows[i].local;
	return -1;
}

#define NAME_COLUMNS 40

/*
 * The length of the well-formed UTF-8 sequence of 2 to 4 bytes at p (of len), else 0: no
 * overlong or surrogate forms, nothing past U+10FFFF.
 */
static size_t utf8_sequence(const unsigned char *p, size_t len)
{
	size_t n = p[0] >= 0xC2 && p[0] <= 0xDF   ? 2
	           : p[0] >= 0xE0 && p[0] <= 0xEF ? 3
	           : p[0] >= 0xF0 && p[0] <= 0xF4 ? 4
	                                          : 0;
	if (n == 0 || n > len)
		return 0;
	for (size_t k = 1; k < n; k++)
		if ((p[k] & 0xC0) != 0x80)
			return 0;
	if ((p[0] == 0xE0 && p[1] < 0xA0) || (p[0] == 0xED && p[1] >= 0xA0) ||
	    (p[0] == 0xF0 && p[1] < 0x90) || (p[0] == 0xF4 && p[1] >= 0x90))
		return 0;
	return n;
}

/*
 * name as NAME_COLUMNS characters for a terminal, padded: control bytes (a key may hold
 * any, an escape sequence among them) and bytes that are not UTF-8 show as '?', and a
 * longer name keeps its end, the object's own name, after a '~'. Characters are counted,
 * not bytes, so multi-byte names line up (wide CJK ones still take two columns each).
 */
static const char *column(const char *name, char out[NAME_COLUMNS * 4 + 4])
{
	const unsigned char *p = (const unsigned char *)name;
	size_t starts[512 + 1], n_chars = 0, len = strlen(name), first = 0, o = 0;

	for (size_t i = 0; i < len && n_chars < 512;) {
		size_t n = p[i] < 0x80 ? 1 : utf8_sequence(p + i, len - i);
		starts[n_chars++] = i;
		i += n ? n : 1;
	}
	starts[n_chars] = len;
	if (n_chars > NAME_COLUMNS) {
		first = n_chars - (NAME_COLUMNS - 1);
		out[o++] = '~';
	}
	for (size_t c = first; c < n_chars; c++) {
		size_t from = starts[c], n = starts[c + 1] - from;
		/* Not C0 or C1 controls (U+0080 to U+009F: a terminal may take them as an
		 * escape, as it does ESC), nor a byte that is not UTF-8. */
		bool plain = n > 1 ? !(p[from] == 0xC2 && p[from + 1] < 0xA0)
		                   : p[from] >= 0x20 && p[from] < 0x7F;
		if (!plain) {
			out[o++] = '?';
			continue;
		}
		memcpy(out + o, p + from, n);
		o += n;
	}
	for (size_t c = n_chars - first + (first > 0); c < NAME_COLUMNS; c++)
		out[o++] = ' ';
	out[o] = '\0';
	return out;
}

/*
 * A flight is active until all of it is local, but a sparse one that nobody reads brings
 * nothing: after an eviction, a reopen served from the kernel's cache made one that showed
 * "downloading" for good. Idle is active with no reader, nothing waiting and no progress
 * since the last look (before: the local bytes then, < 0 when not known).
 */
static const char *state_shown(const struct row *r, double before)
{
	if (strcmp(r->state, "active") == 0 && r->handles == 0 && !r->waiting && before >= 0 &&
	    r->local == before)
		return "idle";
	return r->state;
}

/* "release: NAME (sha256 HEX) via tag TAG", from the stats' "NAME sha256 HEX tag TAG". */
static void release_line(const char *release)
{
	char name[201], sha[65], tag[201];

	if (sscanf(release, "%200s sha256 %64s tag %200s", name, sha, tag) == 3)
		printf("release: %s (sha256 %s) via tag %s\n", name, sha, tag);
	else
		printf("release: %s\n", release);
}

static void print(const struct snapshot *now, const struct snapshot *prev)
{
	double dt = prev ? (double)(now->at.tv_sec - prev->at.tv_sec) +
	                       (double)(now->at.tv_nsec - prev->at.tv_nsec) / 1e9
	                 : 0;
	char a[32], b[32], c[40], d[32];
	size_t active = 0;

	printf("%-*s %10s %10s  %-27s %12s %7s  %s\n", NAME_COLUMNS, "OBJECT", "SIZE", "LOCAL",
	       "PROGRESS", "RATE", "OPEN", "STATE");
	for (size_t i = 0; i < now->n; i++) {
		const struct row *r = &now->rows[i];
		double fraction = r->size > 0 ? r->local / r->size : 1.0;
		double before = previous_local(prev, i, r->name);
		const char *state = state_shown(r, before);
		char shown[NAME_COLUMNS * 4 + 4];
		char bar[21];
		int filled = (int)lround(fraction * 20);

		for (int k = 0; k < 20; k++)
			bar[k] = k < filled ? '#' : '-';
		bar[20] = '\0';
		if (dt > 0 && before >= 0)
			snprintf(c, sizeof(c), "%s/s",
			         human((r->local - before) / dt, a, sizeof(a)));
		else
			snprintf(c, sizeof(c), "-");
		printf("%s %10s %10s  [%s] %3.0f%% %12s %7d  %s%s\n", column(r->name, shown),
		       human(r->size, a, sizeof(a)), human(r->local, b, sizeof(b)), bar,
		       fraction * 100, c, r->handles, state, r->waiting ? " (reads waiting)" : "");
		active += strcmp(state, "active") == 0;
	}
	printf("totals: %zu objects (%zu downloading), %s local; upstream %.0f requests over %.0f"
	       " connections (%.0f answers by HTTP/2), %s;"
	       " opens: %.0f local, %.0f started, %.0f joined; %.0f retries, %.0f failures\n",
	       now->n, active, human(now->bytes_local, a, sizeof(a)), now->upstream_requests,
	       now->upstream_connections, now->upstream_http2,
	       human(now->upstream_bytes, b, sizeof(b)), now->hits, now->misses, now->coalesced,
	       now->retries, now->failures);
	/* Apart from the totals line, which action/finish.sh reads: compressed objects (and
	 * bytes no request kept) make what came differ from what the spool got. */
	if (now->upstream_delivered > 0 && now->upstream_delivered != now->upstream_bytes)
		printf("on the wire: %s received for %s delivered\n",
		       human(now->upstream_bytes, b, sizeof(b)),
		       human(now->upstream_delivered, d, sizeof(d)));
	printf("prefetch: %.0f walks, %.0f speculative downloads, %s fetched ahead and not"
	       " opened\n",
	       now->walks, now->spec_flights, human(now->spec_unread, a, sizeof(a)));
	if (now->release[0])
		release_line(now->release);
	if (now->read_order[0])
		printf("read order: \"%s\" from the manifest, first in the prefetch list\n",
		       now->read_order);
	if (now->list_entries >= 0)
		printf("prefetch list: %s; %.0f entries: %.0f of %.0f started finished (%s),"
		       " %.0f local already, %.0f skipped, %.0f over the budget\n",
		       now->list_done > 0 ? "done" : "working", now->list_entries,
		       now->list_finished, now->list_started, human(now->list_bytes, a, sizeof(a)),
		       now->list_local, now->list_skipped, now->list_over_budget);
	if (now->supervisor_pid > 0)
		printf(
		    "processes: serving PID %.0f, supervisor PID %.0f; %.0f restarts, %.0f reloads;"
		    " version %s\n",
		    now->serving_pid, now->supervisor_pid, now->restarts, now->reloads,
		    now->version[0] ? now->version : "?");
	else
		printf("processes: serving PID %.0f, no supervisor; version %s\n", now->serving_pid,
		       now->version[0] ? now->version : "?");
}

int daemon_status_main(int argc, char **argv)
{
	struct snapshot prev = {0}, now = {0};
	const char *mountpoint = NULL;
	char lower[PATH_MAX], *canonical;
	double interval = 1.0;
	bool watch = false;
	sqlite3 *db = NULL;
	char *end = NULL;
	int status = 1;

	for (int i = 2; i < argc; i++) {
		if (strcmp(argv[i], "--watch") == 0 || strcmp(argv[i], "-w") == 0)
			watch = true;
		else if (strcmp(argv[i], "--interval") == 0 && i + 1 < argc)
			interval = strtod(argv[++i], &end);
		else if (!mountpoint && argv[i][0] != '-')
			mountpoint = argv[i];
		else
			mountpoint = NULL, i = argc;
	}
	if (!(interval >= 0.01 && interval <= 86400) || (end && *end)) {
		fprintf(
		    stderr,
		    "spoolfs status: --interval takes a number of seconds from 0.01 to 86400\n");
		return 2;
	}
	if (!mountpoint) {
		fprintf(stderr, "usage: spoolfs status MOUNTPOINT [--watch] [--interval SEC]\n");
		return 2;
	}
	/* A --writable mount's overlay: its files are read from the spoolfs mount beneath. */
	canonical = realpath(mountpoint, NULL);
	if (canonical && daemon_overlay_beneath(canonical, lower, sizeof(lower)) == 0)
		mountpoint = lower;
	free(canonical);
	if (sqlite3_open(":memory:", &db) != SQLITE_OK)
		goto out;
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	if (take_snapshot(db, mountpoint, &prev) != 0)
		goto out;
	do {
		struct timespec pause = {.tv_sec = (time_t)interval,
		                         .tv_nsec =
		                             (long)((interval - (double)(time_t)interval) * 1e9)};
		nanosleep(&pause, NULL);
		if (stop_watching)
			break;
		if (take_snapshot(db, mountpoint, &now) != 0)
			goto out;
		if (watch)
			printf("\033[H\033[2J%s  (every %.1f s, Ctrl-C to stop)\n", mountpoint,
			       interval);
		print(&now, &prev);
		fflush(stdout);
		free(prev.rows);
		prev = now;
		now.rows = NULL;
	} while (watch && !stop_watching);
	status = 0;
out:
	free(prev.rows);
	free(now.rows);
	sqlite3_close(db);
	return status;
}

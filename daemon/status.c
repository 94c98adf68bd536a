#include "daemon/status.h"
/*
#include "daemon/status.h"
 * `spoolfs status MOUNTPOINT [--watch] [--interval SEC]`: what a mount is doing, read from
#include "daemon/status.h"
 * its virtual files (/.spoolfs/flights and /.spoolfs/stats), so it needs no other channel
#include "daemon/status.h"
 * into the daemon. Rates come from two snapshots taken an interval apart. The JSON lines
#include "daemon/status.h"
 * are parsed with sqlite's JSON functions.
#include "daemon/status.h"
 */
#include "daemon/status.h"
#include <stddef.h>
#include <errno.h>
#include "daemon/status.h"
#include <math.h>
#include "daemon/status.h"
#include <signal.h>
#include "daemon/status.h"
#include <sqlite3.h>
#include "daemon/status.h"
#include <stdbool.h>
#include "daemon/status.h"
#include <stdio.h>
#include "daemon/status.h"
#include <stdlib.h>
#include "daemon/status.h"
#include <string.h>
#include "daemon/status.h"
#include <time.h>
#include "daemon/status.h"
#include <unistd.h>
#include "daemon/status.h"

#include "daemon/status.h"

#include "daemon/status.h"
struct row {
#include "daemon/status.h"
	char name[512];
#include "daemon/status.h"
	double size;
#include "daemon/status.h"
	double local;
#include "daemon/status.h"
	char state[16];
#include "daemon/status.h"
	int handles;
#include "daemon/status.h"
	int waiting;
#include "daemon/status.h"
};
#include "daemon/status.h"

#include "daemon/status.h"
struct snapshot {
#include "daemon/status.h"
	struct row *rows;
#include "daemon/status.h"
	size_t n;
#include "daemon/status.h"
	double upstream_requests;
#include "daemon/status.h"
	double upstream_bytes;
	double upstream_delivered; /* bytes the bodies gave: more when stored compressed */
#include "daemon/status.h"
	double upstream_connections;
#include "daemon/status.h"
	double upstream_http2;
#include "daemon/status.h"
	double hits;
#include "daemon/status.h"
	double misses;
#include "daemon/status.h"
	double coalesced;
#include "daemon/status.h"
	double retries;
#include "daemon/status.h"
	double failures;
#include "daemon/status.h"
	double bytes_local;
#include "daemon/status.h"
	/* Prefetch; list_entries is -1 when the mount has no prefetch list. */
#include "daemon/status.h"
	double spec_flights;
#include "daemon/status.h"
	double spec_unread;
#include "daemon/status.h"
	double walks;
#include "daemon/status.h"
	double list_entries;
#include "daemon/status.h"
	double list_started;
#include "daemon/status.h"
	double list_finished;
#include "daemon/status.h"
	double list_local;
#include "daemon/status.h"
	double list_skipped;
#include "daemon/status.h"
	double list_over_budget;
#include "daemon/status.h"
	double list_bytes;
#include "daemon/status.h"
	double list_done;
#include "daemon/status.h"
	double serving_pid;
#include "daemon/status.h"
	double supervisor_pid;
#include "daemon/status.h"
	double restarts;
#include "daemon/status.h"
	double reloads;
#include "daemon/status.h"
	char version[64];
#include "daemon/status.h"
	char read_order[72]; /* the manifest's read order the list begins with; "": none */
#include "daemon/status.h"
	struct timespec at;
#include "daemon/status.h"
};
#include "daemon/status.h"

#include "daemon/status.h"
static volatile sig_atomic_t stop_watching;
#include "daemon/status.h"

#include "daemon/status.h"
static void on_signal(int sig)
#include "daemon/status.h"
{
#include "daemon/status.h"
	stop_watching = 1;
#include "daemon/status.h"
}
#include "daemon/status.h"

#include "daemon/status.h"
static char *read_text(const char *path)
#include "daemon/status.h"
{
#include "daemon/status.h"
	FILE *f = fopen(path, "r");
#include "daemon/status.h"
	char *text = NULL;
#include "daemon/status.h"
	size_t cap = 0, len = 0;
#include "daemon/status.h"

#include "daemon/status.h"
	if (!f)
#include "daemon/status.h"
		return NULL;
#include "daemon/status.h"
	for (;;) {
#include "daemon/status.h"
		if (len + 4096 + 1 > cap) {
#include "daemon/status.h"
			char *p = realloc(text, cap = cap ? cap * 2 : 65536);
#include "daemon/status.h"
			if (!p) {
#include "daemon/status.h"
				free(text);
#include "daemon/status.h"
				text = NULL;
#include "daemon/status.h"
				break;
#include "daemon/status.h"
			}
#include "daemon/status.h"
			text = p;
#include "daemon/status.h"
		}
#include "daemon/status.h"
		size_t n = fread(text + len, 1, cap - len - 1, f);
#include "daemon/status.h"
		len += n;
#include "daemon/status.h"
		if (n == 0) {
#include "daemon/status.h"
			text[len] = '\0';
#include "daemon/status.h"
			break;
#include "daemon/status.h"
		}
#include "daemon/status.h"
	}
#include "daemon/status.h"
	fclose(f);
#include "daemon/status.h"
	return text;
#include "daemon/status.h"
}
#include "daemon/status.h"

#include "daemon/status.h"
static int parse_flights(sqlite3 *db, const char *text, struct snapshot *snap)
#include "daemon/status.h"
{
#include "daemon/status.h"
	const char *sql = "SELECT json_extract(?1,'$.name'), json_extract(?1,'$.size'),"
#include "daemon/status.h"
	                  " json_extract(?1,'$.local'), json_extract(?1,'$.state'),"
#include "daemon/status.h"
	                  " json_extract(?1,'$.handles'), json_extract(?1,'$.waiting_reads')"
#include "daemon/status.h"
	                  " WHERE json_valid(?1)";
#include "daemon/status.h"
	sqlite3_stmt *st = NULL;
#include "daemon/status.h"
	size_t cap = 0;
#include "daemon/status.h"
	int rc = -EIO;
#include "daemon/status.h"

#include "daemon/status.h"
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
#include "daemon/status.h"
		goto out;
#include "daemon/status.h"
	for (const char *line = text; *line;) {
#include "daemon/status.h"
		const char *end = strchr(line, '\n');
#include "daemon/status.h"
		int len = end ? (int)(end - line) : (int)strlen(line);
#include "daemon/status.h"
		sqlite3_bind_text(st, 1, line, len, SQLITE_STATIC);
#include "daemon/status.h"
		if (sqlite3_step(st) == SQLITE_ROW) {
#include "daemon/status.h"
			if (snap->n == cap) {
#include "daemon/status.h"
				struct row *more = realloc(snap->rows, (cap = cap ? cap * 2 : 256) *
#include "daemon/status.h"
				                                           sizeof(*more));
#include "daemon/status.h"
				if (!more) {
#include "daemon/status.h"
					rc = -ENOMEM;
#include "daemon/status.h"
					goto out;
#include "daemon/status.h"
				}
#include "daemon/status.h"
				snap->rows = more;
#include "daemon/status.h"
			}
#include "daemon/status.h"
			struct row *r = &snap->rows[snap->n++];
#include "daemon/status.h"
			const unsigned char *name = sqlite3_column_text(st, 0);
#include "daemon/status.h"
			const unsigned char *state = sqlite3_column_text(st, 3);
#include "daemon/status.h"
			const char *full = name ? (const char *)name : "?";
#include "daemon/status.h"
			size_t full_len = strlen(full);
#include "daemon/status.h"
			/* The end of a long path names the object: keep that. */
#include "daemon/status.h"
			snprintf(r->name, sizeof(r->name), "%s",
#include "daemon/status.h"
			         full + (full_len >= sizeof(r->name)
#include "daemon/status.h"
			                     ? full_len - (sizeof(r->name) - 1)
#include "daemon/status.h"
			                     : 0));
#include "daemon/status.h"
			r->size = sqlite3_column_double(st, 1);
#include "daemon/status.h"
			r->local = sqlite3_column_double(st, 2);
#include "daemon/status.h"
			snprintf(r->state, sizeof(r->state), "%s",
#include "daemon/status.h"
			         state ? (const char *)state : "?");
#include "daemon/status.h"
			r->handles = sqlite3_column_int(st, 4);
#include "daemon/status.h"
			r->waiting = sqlite3_column_int(st, 5);
#include "daemon/status.h"
		}
#include "daemon/status.h"
		sqlite3_reset(st);
#include "daemon/status.h"
		line = end ? end + 1 : line + len;
#include "daemon/status.h"
	}
#include "daemon/status.h"
	rc = 0;
#include "daemon/status.h"
out:
#include "daemon/status.h"
	sqlite3_finalize(st);
#include "daemon/status.h"
	return rc;
#include "daemon/status.h"
}
#include "daemon/status.h"

#include "daemon/status.h"
static void parse_stats(const char *text, struct snapshot *snap)
#include "daemon/status.h"
{
#include "daemon/status.h"
	static const struct {
#include "daemon/status.h"
		const char *name;
#include "daemon/status.h"
		size_t offset;
#include "daemon/status.h"
	} fields[] = {
#include "daemon/status.h"
	    {"spoolfs_upstream_requests_total", offsetof(struct snapshot, upstream_requests)},
#include "daemon/status.h"
	    {"spoolfs_upstream_bytes_total", offsetof(struct snapshot, upstream_bytes)},
	    {"spoolfs_upstream_delivered_bytes_total",
	     offsetof(struct snapshot, upstream_delivered)},
#include "daemon/status.h"
	    {"spoolfs_upstream_connections_total", offsetof(struct snapshot, upstream_connections)},
#include "daemon/status.h"
	    {"spoolfs_upstream_http2_responses_total", offsetof(struct snapshot, upstream_http2)},
#include "daemon/status.h"
	    {"spoolfs_cache_hits_total", offsetof(struct snapshot, hits)},
#include "daemon/status.h"
	    {"spoolfs_cache_misses_total", offsetof(struct snapshot, misses)},
#include "daemon/status.h"
	    {"spoolfs_coalesced_opens_total", offsetof(struct snapshot, coalesced)},
#include "daemon/status.h"
	    {"spoolfs_upstream_retries_total", offsetof(struct snapshot, retries)},
#include "daemon/status.h"
	    {"spoolfs_upstream_failures_total", offsetof(struct snapshot, failures)},
#include "daemon/status.h"
	    {"spoolfs_bytes_local", offsetof(struct snapshot, bytes_local)},
#include "daemon/status.h"
	    {"spoolfs_speculative_flights_total", offsetof(struct snapshot, spec_flights)},
#include "daemon/status.h"
	    {"spoolfs_speculative_unread_bytes", offsetof(struct snapshot, spec_unread)},
#include "daemon/status.h"
	    {"spoolfs_prefetch_walks_total", offsetof(struct snapshot, walks)},
#include "daemon/status.h"
	    {"spoolfs_prefetch_list_entries", offsetof(struct snapshot, list_entries)},
#include "daemon/status.h"
	    {"spoolfs_prefetch_list_started", offsetof(struct snapshot, list_started)},
#include "daemon/status.h"
	    {"spoolfs_prefetch_list_finished", offsetof(struct snapshot, list_finished)},
#include "daemon/status.h"
	    {"spoolfs_prefetch_list_local", offsetof(struct snapshot, list_local)},
#include "daemon/status.h"
	    {"spoolfs_prefetch_list_skipped", offsetof(struct snapshot, list_skipped)},
#include "daemon/status.h"
	    {"spoolfs_prefetch_list_over_budget", offsetof(struct snapshot, list_over_budget)},
#include "daemon/status.h"
	    {"spoolfs_prefetch_list_bytes", offsetof(struct snapshot, list_bytes)},
#include "daemon/status.h"
	    {"spoolfs_prefetch_list_done", offsetof(struct snapshot, list_done)},
#include "daemon/status.h"
	    {"spoolfs_serving_pid", offsetof(struct snapshot, serving_pid)},
#include "daemon/status.h"
	    {"spoolfs_supervisor_pid", offsetof(struct snapshot, supervisor_pid)},
#include "daemon/status.h"
	    {"spoolfs_restarts_total", offsetof(struct snapshot, restarts)},
#include "daemon/status.h"
	    {"spoolfs_reloads_total", offsetof(struct snapshot, reloads)},
#include "daemon/status.h"
	};
#include "daemon/status.h"
	char name[128];
#include "daemon/status.h"
	double value;
#include "daemon/status.h"

#include "daemon/status.h"
	snap->list_entries = -1;
#include "daemon/status.h"
	for (const char *line = text; line && *line;
#include "daemon/status.h"
	     line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
#include "daemon/status.h"
		if (sscanf(line, "# version %63s", snap->version) == 1)
#include "daemon/status.h"
			continue;
#include "daemon/status.h"
		if (sscanf(line, "# read_order %71s", snap->read_order) == 1)
#include "daemon/status.h"
			continue;
#include "daemon/status.h"
		if (*line == '#' || sscanf(line, "%127s %lf", name, &value) != 2)
#include "daemon/status.h"
			continue;
#include "daemon/status.h"
		for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
#include "daemon/status.h"
			if (strcmp(name, fields[i].name) == 0)
#include "daemon/status.h"
				*(double *)((char *)snap + fields[i].offset) = value;
#include "daemon/status.h"
	}
#include "daemon/status.h"
}
#include "daemon/status.h"

#include "daemon/status.h"
static int take_snapshot(sqlite3 *db, const char *mountpoint, struct snapshot *snap)
#include "daemon/status.h"
{
#include "daemon/status.h"
	char path[4096];
#include "daemon/status.h"
	char *flights, *stats;
#include "daemon/status.h"
	int rc;
#include "daemon/status.h"

#include "daemon/status.h"
	memset(snap, 0, sizeof(*snap));
#include "daemon/status.h"
	snprintf(path, sizeof(path), "%s/.spoolfs/flights", mountpoint);
#include "daemon/status.h"
	flights = read_text(path);
#include "daemon/status.h"
	if (flights)
#include "daemon/status.h"
		snprintf(path, sizeof(path), "%s/.spoolfs/stats", mountpoint);
#include "daemon/status.h"
	stats = flights ? read_text(path) : NULL;
#include "daemon/status.h"
	if (!flights || !stats) {
#include "daemon/status.h"
		rc = -errno;
#include "daemon/status.h"
		if (rc == -ENOTCONN)
#include "daemon/status.h"
			fprintf(stderr,
#include "daemon/status.h"
			        "spoolfs status: the daemon of %s is gone (%s); unmount it with"
#include "daemon/status.h"
			        " fusermount3 -u %s\n",
#include "daemon/status.h"
			        mountpoint, strerror(-rc), mountpoint);
#include "daemon/status.h"
		else
#include "daemon/status.h"
			fprintf(stderr, "spoolfs status: %s is not a spoolfs mount (%s: %s)\n",
#include "daemon/status.h"
			        mountpoint, path, strerror(-rc));
#include "daemon/status.h"
		goto out;
#include "daemon/status.h"
	}
#include "daemon/status.h"
	clock_gettime(CLOCK_MONOTONIC, &snap->at);
#include "daemon/status.h"
	parse_stats(stats, snap);
#include "daemon/status.h"
	rc = parse_flights(db, flights, snap);
#include "daemon/status.h"
out:
#include "daemon/status.h"
	free(flights);
#include "daemon/status.h"
	free(stats);
#include "daemon/status.h"
	return rc;
#include "daemon/status.h"
}
#include "daemon/status.h"

#include "daemon/status.h"
static const char *human(double bytes, char *buf, size_t len)
#include "daemon/status.h"
{
#include "daemon/status.h"
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
#include "daemon/status.h"
	int u = 0;
#include "daemon/status.h"

#include "daemon/status.h"
	while (bytes >= 1024 && u < 4) {
#include "daemon/status.h"
		bytes /= 1024;
#include "daemon/status.h"
		u++;
#include "daemon/status.h"
	}
#include "daemon/status.h"
	snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
#include "daemon/status.h"
	return buf;
#include "daemon/status.h"
}
#include "daemon/status.h"

#include "daemon/status.h"
/* Rows usually keep their order from one snapshot to the next: index i is tried first. */
#include "daemon/status.h"
static double previous_local(const struct snapshot *prev, size_t i, const char *name)
#include "daemon/status.h"
{
#include "daemon/status.h"
	if (prev && i < prev->n && strcmp(prev->rows[i].name, name) == 0)
#include "daemon/status.h"
		return prev->rows[i].local;
#include "daemon/status.h"
	for (i = 0; prev && i < prev->n; i++)
#include "daemon/status.h"
		if (strcmp(prev->rows[i].name, name) == 0)
#include "daemon/status.h"
			return prev->rows[i].local;
#include "daemon/status.h"
	return -1;
#include "daemon/status.h"
}
#include "daemon/status.h"

#include "daemon/status.h"
#define NAME_COLUMNS 40
#include "daemon/status.h"

#include "daemon/status.h"
/*
#include "daemon/status.h"
 * The length of the well-formed UTF-8 sequence of 2 to 4 bytes at p (of len), else 0: no
#include "daemon/status.h"
 * overlong or surrogate forms, nothing past U+10FFFF.
#include "daemon/status.h"
 */
#include "daemon/status.h"
static size_t utf8_sequence(const unsigned char *p, size_t len)
#include "daemon/status.h"
{
#include "daemon/status.h"
	size_t n = p[0] >= 0xC2 && p[0] <= 0xDF ? 2
#include "daemon/status.h"
	           : p[0] >= 0xE0 && p[0] <= 0xEF ? 3
#include "daemon/status.h"
	           : p[0] >= 0xF0 && p[0] <= 0xF4 ? 4
#include "daemon/status.h"
	                                          : 0;
#include "daemon/status.h"
	if (n == 0 || n > len)
#include "daemon/status.h"
		return 0;
#include "daemon/status.h"
	for (size_t k = 1; k < n; k++)
#include "daemon/status.h"
		if ((p[k] & 0xC0) != 0x80)
#include "daemon/status.h"
			return 0;
#include "daemon/status.h"
	if ((p[0] == 0xE0 && p[1] < 0xA0) || (p[0] == 0xED && p[1] >= 0xA0) ||
#include "daemon/status.h"
	    (p[0] == 0xF0 && p[1] < 0x90) || (p[0] == 0xF4 && p[1] >= 0x90))
#include "daemon/status.h"
		return 0;
#include "daemon/status.h"
	return n;
#include "daemon/status.h"
}
#include "daemon/status.h"

#include "daemon/status.h"
/*
#include "daemon/status.h"
 * name as NAME_COLUMNS characters for a terminal, padded: control bytes (a key may hold
#include "daemon/status.h"
 * any, an escape sequence among them) and bytes that are not UTF-8 show as '?', and a
#include "daemon/status.h"
 * longer name keeps its end, the object's own name, after a '~'. Characters are counted,
#include "daemon/status.h"
 * not bytes, so multi-byte names line up (wide CJK ones still take two columns each).
#include "daemon/status.h"
 */
#include "daemon/status.h"
static const char *column(const char *name, char out[NAME_COLUMNS * 4 + 4])
#include "daemon/status.h"
{
#include "daemon/status.h"
	const unsigned char *p = (const unsigned char *)name;
#include "daemon/status.h"
	size_t starts[512 + 1], n_chars = 0, len = strlen(name), first = 0, o = 0;
#include "daemon/status.h"

#include "daemon/status.h"
	for (size_t i = 0; i < len && n_chars < 512;) {
#include "daemon/status.h"
		size_t n = p[i] < 0x80 ? 1 : utf8_sequence(p + i, len - i);
#include "daemon/status.h"
		starts[n_chars++] = i;
#include "daemon/status.h"
		i += n ? n : 1;
#include "daemon/status.h"
	}
#include "daemon/status.h"
	starts[n_chars] = len;
#include "daemon/status.h"
	if (n_chars > NAME_COLUMNS) {
#include "daemon/status.h"
		first = n_chars - (NAME_COLUMNS - 1);
#include "daemon/status.h"
		out[o++] = '~';
#include "daemon/status.h"
	}
#include "daemon/status.h"
	for (size_t c = first; c < n_chars; c++) {
#include "daemon/status.h"
		size_t from = starts[c], n = starts[c + 1] - from;
#include "daemon/status.h"
		/* Not C0 or C1 controls (U+0080 to U+009F: a terminal may take them as an
#include "daemon/status.h"
		 * escape, as it does ESC), nor a byte that is not UTF-8. */
#include "daemon/status.h"
		bool plain = n > 1 ? !(p[from] == 0xC2 && p[from + 1] < 0xA0)
#include "daemon/status.h"
		                   : p[from] >= 0x20 && p[from] < 0x7F;
#include "daemon/status.h"
		if (!plain) {
#include "daemon/status.h"
			out[o++] = '?';
#include "daemon/status.h"
			continue;
#include "daemon/status.h"
		}
#include "daemon/status.h"
		memcpy(out + o, p + from, n);
#include "daemon/status.h"
		o += n;
#include "daemon/status.h"
	}
#include "daemon/status.h"
	for (size_t c = n_chars - first + (first > 0); c < NAME_COLUMNS; c++)
#include "daemon/status.h"
		out[o++] = ' ';
#include "daemon/status.h"
	out[o] = '\0';
#include "daemon/status.h"
	return out;
#include "daemon/status.h"
}
#include "daemon/status.h"

#include "daemon/status.h"
/*
#include "daemon/status.h"
 * A flight is active until all of it is local, but a sparse one that nobody reads brings
#include "daemon/status.h"
 * nothing: after an eviction, a reopen served from the kernel's cache made one that showed
#include "daemon/status.h"
 * "downloading" for good. Idle is active with no reader, nothing waiting and no progress
#include "daemon/status.h"
 * since the last look (before: the local bytes then, < 0 when not known).
#include "daemon/status.h"
 */
#include "daemon/status.h"
static const char *state_shown(const struct row *r, double before)
#include "daemon/status.h"
{
#include "daemon/status.h"
	if (strcmp(r->state, "active") == 0 && r->handles == 0 && !r->waiting && before >= 0 &&
#include "daemon/status.h"
	    r->local == before)
#include "daemon/status.h"
		return "idle";
#include "daemon/status.h"
	return r->state;
#include "daemon/status.h"
}
#include "daemon/status.h"

#include "daemon/status.h"
static void print(const struct snapshot *now, const struct snapshot *prev)
#include "daemon/status.h"
{
#include "daemon/status.h"
	double dt = prev ? (double)(now->at.tv_sec - prev->at.tv_sec) +
#include "daemon/status.h"
	                       (double)(now->at.tv_nsec - prev->at.tv_nsec) / 1e9
#include "daemon/status.h"
	                 : 0;
#include "daemon/status.h"
	char a[32], b[32], c[40], d[32];
#include "daemon/status.h"
	size_t active = 0;
#include "daemon/status.h"

#include "daemon/status.h"
	printf("%-*s %10s %10s  %-27s %12s %7s  %s\n", NAME_COLUMNS, "OBJECT", "SIZE", "LOCAL",
#include "daemon/status.h"
	       "PROGRESS", "RATE", "OPEN", "STATE");
#include "daemon/status.h"
	for (size_t i = 0; i < now->n; i++) {
#include "daemon/status.h"
		const struct row *r = &now->rows[i];
#include "daemon/status.h"
		double fraction = r->size > 0 ? r->local / r->size : 1.0;
#include "daemon/status.h"
		double before = previous_local(prev, i, r->name);
#include "daemon/status.h"
		const char *state = state_shown(r, before);
#include "daemon/status.h"
		char shown[NAME_COLUMNS * 4 + 4];
#include "daemon/status.h"
		char bar[21];
#include "daemon/status.h"
		int filled = (int)lround(fraction * 20);
#include "daemon/status.h"

#include "daemon/status.h"
		for (int k = 0; k < 20; k++)
#include "daemon/status.h"
			bar[k] = k < filled ? '#' : '-';
#include "daemon/status.h"
		bar[20] = '\0';
#include "daemon/status.h"
		if (dt > 0 && before >= 0)
#include "daemon/status.h"
			snprintf(c, sizeof(c), "%s/s",
#include "daemon/status.h"
			         human((r->local - before) / dt, a, sizeof(a)));
#include "daemon/status.h"
		else
#include "daemon/status.h"
			snprintf(c, sizeof(c), "-");
#include "daemon/status.h"
		printf("%s %10s %10s  [%s] %3.0f%% %12s %7d  %s%s\n", column(r->name, shown),
#include "daemon/status.h"
		       human(r->size, a, sizeof(a)), human(r->local, b, sizeof(b)), bar,
#include "daemon/status.h"
		       fraction * 100, c, r->handles, state, r->waiting ? " (reads waiting)" : "");
#include "daemon/status.h"
		active += strcmp(state, "active") == 0;
#include "daemon/status.h"
	}
#include "daemon/status.h"
	printf("totals: %zu objects (%zu downloading), %s local; upstream %.0f requests over %.0f"
#include "daemon/status.h"
	       " connections (%.0f answers by HTTP/2), %s;"
#include "daemon/status.h"
	       " opens: %.0f local, %.0f started, %.0f joined; %.0f retries, %.0f failures\n",
#include "daemon/status.h"
	       now->n, active, human(now->bytes_local, a, sizeof(a)), now->upstream_requests,
#include "daemon/status.h"
	       now->upstream_connections, now->upstream_http2,
#include "daemon/status.h"
	       human(now->upstream_bytes, b, sizeof(b)), now->hits, now->misses, now->coalesced,
#include "daemon/status.h"
	       now->retries, now->failures);
	/* Apart from the totals line, which action/finish.sh reads: compressed objects (and
	 * bytes no request kept) make what came differ from what the spool got. */
	if (now->upstream_delivered > 0 && now->upstream_delivered != now->upstream_bytes)
		printf("on the wire: %s received for %s delivered\n",
		       human(now->upstream_bytes, b, sizeof(b)),
		       human(now->upstream_delivered, d, sizeof(d)));
#include "daemon/status.h"
	printf("prefetch: %.0f walks, %.0f speculative downloads, %s fetched ahead and not"
#include "daemon/status.h"
	       " opened\n",
#include "daemon/status.h"
	       now->walks, now->spec_flights, human(now->spec_unread, a, sizeof(a)));
#include "daemon/status.h"
	if (now->read_order[0])
#include "daemon/status.h"
		printf("read order: \"%s\" from the manifest, first in the prefetch list\n",
#include "daemon/status.h"
		       now->read_order);
#include "daemon/status.h"
	if (now->list_entries >= 0)
#include "daemon/status.h"
		printf("prefetch list: %s; %.0f entries: %.0f of %.0f started finished (%s),"
#include "daemon/status.h"
		       " %.0f local already, %.0f skipped, %.0f over the budget\n",
#include "daemon/status.h"
		       now->list_done > 0 ? "done" : "working", now->list_entries,
#include "daemon/status.h"
		       now->list_finished, now->list_started, human(now->list_bytes, a, sizeof(a)),
#include "daemon/status.h"
		       now->list_local, now->list_skipped, now->list_over_budget);
#include "daemon/status.h"
	if (now->supervisor_pid > 0)
#include "daemon/status.h"
		printf(
#include "daemon/status.h"
		    "processes: serving PID %.0f, supervisor PID %.0f; %.0f restarts, %.0f reloads;"
#include "daemon/status.h"
		    " version %s\n",
#include "daemon/status.h"
		    now->serving_pid, now->supervisor_pid, now->restarts, now->reloads,
#include "daemon/status.h"
		    now->version[0] ? now->version : "?");
#include "daemon/status.h"
	else
#include "daemon/status.h"
		printf("processes: serving PID %.0f, no supervisor; version %s\n", now->serving_pid,
#include "daemon/status.h"
		       now->version[0] ? now->version : "?");
#include "daemon/status.h"
}
#include "daemon/status.h"

#include "daemon/status.h"
int daemon_status_main(int argc, char **argv)
#include "daemon/status.h"
{
#include "daemon/status.h"
	struct snapshot prev = {0}, now = {0};
#include "daemon/status.h"
	const char *mountpoint = NULL;
#include "daemon/status.h"
	double interval = 1.0;
#include "daemon/status.h"
	bool watch = false;
#include "daemon/status.h"
	sqlite3 *db = NULL;
#include "daemon/status.h"
	char *end = NULL;
#include "daemon/status.h"
	int status = 1;
#include "daemon/status.h"

#include "daemon/status.h"
	for (int i = 2; i < argc; i++) {
#include "daemon/status.h"
		if (strcmp(argv[i], "--watch") == 0 || strcmp(argv[i], "-w") == 0)
#include "daemon/status.h"
			watch = true;
#include "daemon/status.h"
		else if (strcmp(argv[i], "--interval") == 0 && i + 1 < argc)
#include "daemon/status.h"
			interval = strtod(argv[++i], &end);
#include "daemon/status.h"
		else if (!mountpoint && argv[i][0] != '-')
#include "daemon/status.h"
			mountpoint = argv[i];
#include "daemon/status.h"
		else
#include "daemon/status.h"
			mountpoint = NULL, i = argc;
#include "daemon/status.h"
	}
#include "daemon/status.h"
	if (!(interval >= 0.01 && interval <= 86400) || (end && *end)) {
#include "daemon/status.h"
		fprintf(
#include "daemon/status.h"
		    stderr,
#include "daemon/status.h"
		    "spoolfs status: --interval takes a number of seconds from 0.01 to 86400\n");
#include "daemon/status.h"
		return 2;
#include "daemon/status.h"
	}
#include "daemon/status.h"
	if (!mountpoint) {
#include "daemon/status.h"
		fprintf(stderr, "usage: spoolfs status MOUNTPOINT [--watch] [--interval SEC]\n");
#include "daemon/status.h"
		return 2;
#include "daemon/status.h"
	}
#include "daemon/status.h"
	if (sqlite3_open(":memory:", &db) != SQLITE_OK)
#include "daemon/status.h"
		goto out;
#include "daemon/status.h"
	signal(SIGINT, on_signal);
#include "daemon/status.h"
	signal(SIGTERM, on_signal);
#include "daemon/status.h"
	if (take_snapshot(db, mountpoint, &prev) != 0)
#include "daemon/status.h"
		goto out;
#include "daemon/status.h"
	do {
#include "daemon/status.h"
		struct timespec pause = {.tv_sec = (time_t)interval,
#include "daemon/status.h"
		                         .tv_nsec =
#include "daemon/status.h"
		                             (long)((interval - (double)(time_t)interval) * 1e9)};
#include "daemon/status.h"
		nanosleep(&pause, NULL);
#include "daemon/status.h"
		if (stop_watching)
#include "daemon/status.h"
			break;
#include "daemon/status.h"
		if (take_snapshot(db, mountpoint, &now) != 0)
#include "daemon/status.h"
			goto out;
#include "daemon/status.h"
		if (watch)
#include "daemon/status.h"
			printf("\033[H\033[2J%s  (every %.1f s, Ctrl-C to stop)\n", mountpoint,
#include "daemon/status.h"
			       interval);
#include "daemon/status.h"
		print(&now, &prev);
#include "daemon/status.h"
		fflush(stdout);
#include "daemon/status.h"
		free(prev.rows);
#include "daemon/status.h"
		prev = now;
#include "daemon/status.h"
		now.rows = NULL;
#include "daemon/status.h"
	} while (watch && !stop_watching);
#include "daemon/status.h"
	status = 0;
#include "daemon/status.h"
out:
#include "daemon/status.h"
	free(prev.rows);
#include "daemon/status.h"
	free(now.rows);
#include "daemon/status.h"
	sqlite3_close(db);
#include "daemon/status.h"
	return status;
#include "daemon/status.h"
}

/*
 * `spoolfs status MOUNTPOINT [--watch] [--interval SEC]`: what a mount is doing, read from
 * its virtual files (/.spoolfs/flights and /.spoolfs/stats), so it needs no other channel
 * into the daemon. Rates come from two snapshots taken an interval apart. The JSON lines
 * are parsed with sqlite's JSON functions.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fs/fs_i.h"

#define MAX_ROWS 4096

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
	double hits;
	double misses;
	double coalesced;
	double retries;
	double failures;
	double bytes_local;
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
	int rc = -EIO;

	snap->rows = calloc(MAX_ROWS, sizeof(*snap->rows));
	if (!snap->rows || sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		goto out;
	for (const char *line = text; *line && snap->n < MAX_ROWS;) {
		const char *end = strchr(line, '\n');
		int len = end ? (int)(end - line) : (int)strlen(line);
		sqlite3_bind_text(st, 1, line, len, SQLITE_STATIC);
		if (sqlite3_step(st) == SQLITE_ROW) {
			struct row *r = &snap->rows[snap->n++];
			const unsigned char *name = sqlite3_column_text(st, 0);
			const unsigned char *state = sqlite3_column_text(st, 3);
			snprintf(r->name, sizeof(r->name), "%s", name ? (const char *)name : "?");
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
	    {"spoolfs_cache_hits_total", offsetof(struct snapshot, hits)},
	    {"spoolfs_cache_misses_total", offsetof(struct snapshot, misses)},
	    {"spoolfs_coalesced_opens_total", offsetof(struct snapshot, coalesced)},
	    {"spoolfs_upstream_retries_total", offsetof(struct snapshot, retries)},
	    {"spoolfs_upstream_failures_total", offsetof(struct snapshot, failures)},
	    {"spoolfs_bytes_local", offsetof(struct snapshot, bytes_local)},
	};
	char name[128];
	double value;

	for (const char *line = text; line && *line;
	     line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
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
	snprintf(path, sizeof(path), "%s/.spoolfs/stats", mountpoint);
	stats = read_text(path);
	if (!flights || !stats) {
		fprintf(stderr, "spoolfs status: %s is not a spoolfs mount (no %s)\n", mountpoint,
		        path);
		rc = -ENOENT;
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

static double previous_local(const struct snapshot *prev, const char *name)
{
	for (size_t i = 0; prev && i < prev->n; i++)
		if (strcmp(prev->rows[i].name, name) == 0)
			return prev->rows[i].local;
	return -1;
}

static void print(const struct snapshot *now, const struct snapshot *prev)
{
	double dt = prev ? (double)(now->at.tv_sec - prev->at.tv_sec) +
	                       (double)(now->at.tv_nsec - prev->at.tv_nsec) / 1e9
	                 : 0;
	char a[32], b[32], c[40];
	size_t active = 0;

	for (size_t i = 0; i < now->n; i++)
		active += strcmp(now->rows[i].state, "active") == 0;
	printf("%-40s %10s %10s  %-24s %12s %7s  %s\n", "OBJECT", "SIZE", "LOCAL", "PROGRESS",
	       "RATE", "OPEN", "STATE");
	for (size_t i = 0; i < now->n; i++) {
		const struct row *r = &now->rows[i];
		double fraction = r->size > 0 ? r->local / r->size : 1.0;
		double before = previous_local(prev, r->name);
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
		printf("%-40.40s %10s %10s  [%s] %3.0f%% %12s %7d  %s%s\n", r->name,
		       human(r->size, a, sizeof(a)), human(r->local, b, sizeof(b)), bar,
		       fraction * 100, c, r->handles, r->state,
		       r->waiting ? " (reads waiting)" : "");
	}
	printf("totals: %zu objects (%zu downloading), %s local; upstream %.0f requests, %s;"
	       " opens: %.0f local, %.0f started, %.0f joined; %.0f retries, %.0f failures\n",
	       now->n, active, human(now->bytes_local, a, sizeof(a)), now->upstream_requests,
	       human(now->upstream_bytes, b, sizeof(b)), now->hits, now->misses, now->coalesced,
	       now->retries, now->failures);
}

int fs_status_main(int argc, char **argv)
{
	struct snapshot prev = {0}, now = {0};
	const char *mountpoint = NULL;
	double interval = 1.0;
	bool watch = false;
	sqlite3 *db = NULL;
	int status = 1;

	for (int i = 2; i < argc; i++) {
		if (strcmp(argv[i], "--watch") == 0 || strcmp(argv[i], "-w") == 0)
			watch = true;
		else if (strcmp(argv[i], "--interval") == 0 && i + 1 < argc)
			interval = atof(argv[++i]);
		else if (!mountpoint && argv[i][0] != '-')
			mountpoint = argv[i];
		else
			mountpoint = NULL, i = argc;
	}
	if (!mountpoint || !(interval > 0)) {
		fprintf(stderr, "usage: spoolfs status MOUNTPOINT [--watch] [--interval SEC]\n");
		return 2;
	}
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

/*
 * Content of the /.spoolfs files (see virtual.h). Counters are atomics in the session and
 * the engine; flight details come from flight_table_foreach under the table lock, written
 * into a memory stream that is only formatted text, so nothing here blocks on I/O.
 *
 * Only an open builds a snapshot. getattr, lookup and readdir report size 0, as /proc does:
 * with allow_other any local user may stat these files, and a snapshot per stat let a loop
 * of stat calls hold the flight table's lock, which every open of every object takes. Reads
 * go to the open's snapshot (direct_io), so readers read until EOF and get all of it.
 */
#include "fs/virtual.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

bool fs_virtual_ino(fuse_ino_t ino)
{
	return ino >= FS_INO_VIRTUAL_DIR && ino <= FS_INO_FLIGHTS;
}

static void fill_stat(struct fs_session *s, fuse_ino_t ino, struct stat *st, size_t size)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_uid = s->uid;
	st->st_gid = s->gid;
	if (ino == FS_INO_VIRTUAL_DIR) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
	} else {
		st->st_mode = S_IFREG | (mode_t)s->opts.stats_mode;
		st->st_nlink = 1;
		st->st_size = (off_t)size;
	}
}

int fs_virtual_getattr(struct fs_session *s, fuse_ino_t ino, const struct fs_handle *h,
                       struct stat *st)
{
	if (!fs_virtual_ino(ino))
		return -ENOENT;
	/* An open file's own snapshot has a size (lseek to the end asks for it this way). */
	fill_stat(s, ino, st, h && ino != FS_INO_VIRTUAL_DIR ? h->len : 0);
	return 0;
}

int fs_virtual_lookup(struct fs_session *s, fuse_ino_t parent, const char *name, struct stat *st)
{
	if (parent == FUSE_ROOT_ID && strcmp(name, FS_VIRTUAL_DIR_NAME) == 0)
		return fs_virtual_getattr(s, FS_INO_VIRTUAL_DIR, NULL, st) == 0 ? 1 : -EIO;
	if (parent != FS_INO_VIRTUAL_DIR)
		return 0;
	if (strcmp(name, "stats") == 0)
		return fs_virtual_getattr(s, FS_INO_STATS, NULL, st) == 0 ? 1 : -EIO;
	if (strcmp(name, "flights") == 0)
		return fs_virtual_getattr(s, FS_INO_FLIGHTS, NULL, st) == 0 ? 1 : -EIO;
	return -ENOENT;
}

struct totals {
	unsigned active;
	unsigned complete;
	uint64_t bytes_local;
};

static void add_flight(void *ctx, const struct flight_info *info)
{
	struct totals *t = ctx;

	if (info->state == FLIGHT_ACTIVE)
		t->active++;
	else if (info->state == FLIGHT_COMPLETE)
		t->complete++;
	t->bytes_local += info->published;
}

static void metric(FILE *out, const char *name, const char *type, const char *help, uint64_t v)
{
	fprintf(out, "# HELP spoolfs_%s %s\n# TYPE spoolfs_%s %s\nspoolfs_%s %" PRIu64 "\n", name,
	        help, name, type, name, v);
}

static void write_stats(struct fs_session *s, FILE *out)
{
	const struct engine_stats *es = engine_stats(s->engine);
	struct totals t = {0};

	flight_table_foreach(s->flights, add_flight, &t);
	metric(out, "upstream_requests_total", "counter", "HTTP requests sent upstream",
	       atomic_load(&es->requests));
	metric(out, "upstream_bytes_total", "counter", "body bytes received from upstream",
	       atomic_load(&es->bytes));
	metric(out, "upstream_retries_total", "counter", "transfer attempts retried",
	       atomic_load(&es->retries));
	metric(out, "upstream_failures_total", "counter", "objects whose download failed",
	       atomic_load(&es->failures));
	/* An open that started a flight the cache directory then served whole was a hit. */
	uint64_t started = atomic_load(&s->counters.opens_new),
	         restored = atomic_load(&es->restored);
	restored = restored < started ? restored : started;
	metric(out, "cache_hits_total", "counter", "opens of objects already local",
	       atomic_load(&s->counters.opens_local) + restored);
	metric(out, "passthrough_opens_total", "counter",
	       "opens of complete objects that the kernel reads from the spool itself",
	       atomic_load(&s->counters.opens_passthrough));
	metric(out, "cache_misses_total", "counter", "opens that started a download",
	       started - restored);
	metric(out, "coalesced_opens_total", "counter", "opens that joined a running download",
	       atomic_load(&s->counters.opens_joined));
	metric(out, "coalesced_waits_total", "counter", "reads parked until their bytes arrived",
	       atomic_load(&s->counters.reads_parked));
	metric(out, "read_failures_total", "counter", "reads answered with an error",
	       atomic_load(&s->counters.reads_failed));
	metric(out, "page_cache_dropped_bytes_total", "counter",
	       "bytes of FUSE's page cache dropped, behind sequential readers and at last close",
	       atomic_load(&s->counters.pages_dropped_bytes));
	metric(out, "page_cache_drops_pending", "gauge", "page cache drops queued, not yet done",
	       atomic_load(&s->counters.page_drops_pending));
	metric(out, "virtual_snapshots_total", "counter",
	       "contents of /.spoolfs files built, one per open",
	       atomic_load(&s->counters.virtual_snapshots));
	metric(out, "bytes_local", "gauge", "bytes readable from the spool now", t.bytes_local);
	metric(out, "flights_in_progress", "gauge", "downloads running", t.active);
	metric(out, "flights_complete", "gauge", "objects fully local and verified", t.complete);
}

static void json_string(FILE *out, const char *str)
{
	fputc('"', out);
	for (const unsigned char *p = (const unsigned char *)str; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(out, "\\%c", *p);
		else if (*p < 0x20)
			fprintf(out, "\\u%04x", *p);
		else
			fputc(*p, out);
	}
	fputc('"', out);
}

static void write_flight(void *ctx, const struct flight_info *info)
{
	static const char *const states[] = {"active", "complete", "failed"};
	FILE *out = ctx;

	fputs("{\"name\":", out);
	json_string(out, info->name);
	fprintf(out,
	        ",\"size\":%" PRIu64 ",\"written\":%" PRIu64 ",\"local\":%" PRIu64
	        ",\"state\":\"%s\",\"handles\":%d,\"waiting_reads\":%u,\"durable\":%s,"
	        "\"access\":\"%s\"}\n",
	        info->size, info->written, info->published, states[info->state], info->handles,
	        info->waiters, info->durable ? "true" : "false",
	        info->whole || info->state == FLIGHT_COMPLETE ? "whole" : "sparse");
}

int fs_virtual_read_all(struct fs_session *s, fuse_ino_t ino, char **text, size_t *len)
{
	FILE *out;

	if (ino == FS_INO_VIRTUAL_DIR)
		return -EISDIR;
	if (ino != FS_INO_STATS && ino != FS_INO_FLIGHTS)
		return -ENOENT;
	*text = NULL;
	*len = 0;
	atomic_fetch_add(&s->counters.virtual_snapshots, 1);
	out = open_memstream(text, len);
	if (!out)
		return -ENOMEM;
	if (ino == FS_INO_STATS)
		write_stats(s, out);
	else
		flight_table_foreach(s->flights, write_flight, out);
	if (fclose(out) != 0) {
		free(*text);
		*text = NULL;
		return -ENOMEM;
	}
	return 0;
}

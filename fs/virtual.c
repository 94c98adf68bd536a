/*
 * Content of the /.spoolfs files (see virtual.h). Counters are atomics in the session and
 * the engine, written by metrics.c; flight details come from flight_table_foreach under the table
 * lock, written into a memory stream that is only formatted text, so nothing here blocks on I/O.
 *
 * Only an open builds a snapshot. getattr, lookup and readdir report the size of the latest
 * one (0 before the first), never a new one: with allow_other any local user may stat these
 * files, and a snapshot per stat let a loop of stat calls hold the flight table's lock,
 * which every open of every object takes. Reads go to the open's snapshot (direct_io), so
 * readers read until EOF and get all of it. Their times are the mount's start.
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

/* Which of session.virtual_len is ino's. */
static unsigned len_slot(fuse_ino_t ino)
{
	return ino == FS_INO_STATS ? 0 : 1;
}

static void fill_stat(struct fs_session *s, fuse_ino_t ino, struct stat *st, size_t size)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_uid = s->uid;
	st->st_gid = s->gid;
	/* The mount's start, kept across serving processes in the shared block. */
	st->st_mtime = s->daemon.shared_counters ? (time_t)s->daemon.shared_counters->mounted_at
	                                         : s->daemon.started;
	st->st_atime = st->st_ctime = st->st_mtime;
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
	/* An open file's own snapshot has a size (lseek to the end asks for it this way);
	 * otherwise the latest snapshot's. */
	size_t len = 0;
	if (ino != FS_INO_VIRTUAL_DIR)
		len = h ? h->len : (size_t)atomic_load(&s->virtual_len[len_slot(ino)]);
	fill_stat(s, ino, st, len);
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
	        "\"access\":\"%s\",\"speculative\":%s,\"opened\":%s,\"wire\":%" PRIu64
	        ",\"compressed\":%s}\n",
	        info->size, info->written, info->published, states[info->state], info->handles,
	        info->waiters, info->durable ? "true" : "false",
	        info->whole || info->state == FLIGHT_COMPLETE ? "whole" : "sparse",
	        info->speculative ? "true" : "false", info->opened ? "true" : "false", info->wire,
	        info->compressed ? "true" : "false");
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
	atomic_fetch_add(&s->counters->virtual_snapshots, 1);
	out = open_memstream(text, len);
	if (!out)
		return -ENOMEM;
	if (ino == FS_INO_STATS)
		s->write_stats(s, out, NULL);
	else
		flight_table_foreach(s->flights, write_flight, out);
	if (fclose(out) != 0) {
		free(*text);
		*text = NULL;
		return -ENOMEM;
	}
	atomic_store(&s->virtual_len[len_slot(ino)], *len);
	return 0;
}

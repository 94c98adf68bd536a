/*
 * The daemon's side of prefetch (fetch/prefetch/): the options, the list it reads at mount,
 * the flights it starts (speculative opens, through ops.c), and the records of what was
 * opened, written at unmount: --record-reads FILE, and with --keep-cache a copy in the
 * cache directory, named by the source, that the next mount of that source reads when no
 * --prefetch-list is given.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/prefetch.h"
#include "fetch/prefetch/prefetch.h"
#include "fetch/prefetch/reads.h"
#include "util/output.h"
#include "fs/listing.h"
#include "fs/session.h"
#include "util/hex.h"
#include "util/log.h"
#include "util/size.h"
#include "util/trusted_path.h"

/* Walks leave files over this to their readers: one request's worth (design.md). */
#define WALK_MAX_OBJECT (8u << 20)

/* The kept record's name: "reads-" and the first 128 bits of the sha256 of the source (and
 * of its --manifest KEY: another manifest in the bucket is another source). */
static int name_record(struct fs_session *s)
{
	char *named = NULL, hex[UTIL_SHA256_HEX_LEN];
	int rc;

	if (asprintf(&named, "%s%s%s", s->opts.source, s->opts.manifest ? "\n" : "",
	             s->opts.manifest ? s->opts.manifest : "") < 0)
		return -ENOMEM;
	rc = util_sha256_hex(named, strlen(named), hex);
	free(named);
	if (rc == 0)
		snprintf(s->reads_name, sizeof(s->reads_name), "reads-%.32s", hex);
	return rc;
}

/* The kept record, when the cache directory holds one of ours: its fd, else -1. */
static int open_kept_record(struct fs_session *s)
{
	int dirfd = cache_dir_fd(s->cache);
	const char *why = index_records_file_unsafe_at(dirfd, s->reads_name, S_IFREG);
	int fd;

	if (why) {
		util_log(UTIL_LOG_WARN, "%s/%s: not used: %s", cache_dir_path(s->cache),
		         s->reads_name, why);
		return -1;
	}
	fd = openat(dirfd, s->reads_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0)
		util_log(UTIL_LOG_INFO,
		         "prefetching what the last mount of this source opened (%s/%s)",
		         cache_dir_path(s->cache), s->reads_name);
	return fd;
}

static int parse_size_option(const char *name, const char *text, uint64_t fallback, uint64_t *out)
{
	if (!text) {
		*out = fallback;
		return 0;
	}
	if (util_parse_size(text, out) == 0)
		return 0;
	fprintf(stderr, "spoolfs: bad %s '%s' (e.g. 512M, 10G)\n", name, text);
	return -EINVAL;
}

/* ops: the file's flight, speculative. */
static int start_flight(void *ctx, uint64_t ino, bool whole, struct flight **out)
{
	struct fs_session *s = ctx;
	struct fetch_object obj;
	/* A list entry goes ahead for a chunked object too (its hash list, then the object);
	 * a walk leaves such an object to its reader's open (hash_list.c). */
	int rc = whole ? fetch_object_open_ahead(s->resolver, ino, &obj)
	               : fetch_object_open(
	                     s->resolver,
	                     &(struct fetch_object_req){.ino = ino, .speculative = true}, &obj);

	*out = obj.flight;
	if (rc == FETCH_OBJECT_PENDING)
		return PREFETCH_PENDING; /* *out: the hash list's flight, downloading */
	if (rc == -EEXIST || rc == FETCH_OBJECT_HASH_LIST)
		return 0; /* local already, or a walk's chunked object */
	if (rc)
		return rc;
	if (!obj.created) {
		flight_unref(*out);
		*out = NULL;
		return 0;
	}
	if (whole && !flight_is_whole(*out)) {
		flight_fetch_whole(*out);
		engine_kick(s->engine, *out);
	}
	return 1;
}

static int ensure_listed(void *ctx, uint64_t dir)
{
	return fs_ensure_listed(ctx, dir);
}

int fs_prefetch_open(struct fs_session *s)
{
	struct prefetch_config cfg = {.list_fd = -1, .order_fd = -1};
	int rc;

	if (parse_size_option("--prefetch-window", s->opts.prefetch_window, 32u << 20,
	                      &s->prefetch_window) != 0 ||
	    parse_size_option("--prefetch-budget", s->opts.prefetch_budget, 4ull << 30,
	                      &s->prefetch_budget) != 0)
		return -EINVAL;
	if (s->opts.record_reads &&
	    (rc = util_output_open("--record-reads", &s->opts.record_reads, &s->reads_out)) != 0)
		return rc;
	if (s->opts.keep_cache && (rc = name_record(s)) != 0)
		return rc;
	if (s->opts.prefetch_list) {
		char why[PATH_MAX + 256];
		cfg.list_fd =
		    util_trusted_open(s->opts.prefetch_list, UTIL_TRUSTED_READ, why, sizeof(why));
		if (cfg.list_fd < 0) {
			fprintf(stderr, "spoolfs: --prefetch-list: refused: %s\n", why);
			return -EINVAL;
		}
		cfg.list_name = s->opts.prefetch_list;
	} else if (s->reads_name[0]) {
		cfg.list_fd = open_kept_record(s);
		cfg.list_name = s->reads_name;
	}
	/* The manifest's read order goes first, then the job's own list. */
	rc = fs_read_order_open(s, &cfg.order_fd);
	cfg.order_name = s->read_order_label;
	if (rc == 0 && (s->opts.record_reads || s->reads_name[0]))
		rc = prefetch_record_create(&s->reads);
	if (rc)
		goto fail;
	cfg.walk = s->opts.prefetch_requests > 0;
	/* Enough ahead to keep every speculative request busy while the reader catches up. */
	cfg.ahead_files = s->opts.prefetch_requests ? 4 * s->opts.prefetch_requests : 0;
	cfg.window_bytes = s->prefetch_window;
	cfg.max_object = WALK_MAX_OBJECT;
	cfg.walk_counters =
	    s->daemon.shared_counters ? &s->daemon.shared_counters->prefetch_walk : NULL;
	cfg.list_budget = s->prefetch_budget;
	if (s->cache_max_size && s->cache_max_size < cfg.list_budget)
		cfg.list_budget = s->cache_max_size;
	cfg.list_inflight = s->opts.prefetch_requests ? 4 * s->opts.prefetch_requests : 64;
	if (!cfg.walk && cfg.list_fd < 0 && cfg.order_fd < 0)
		return 0;
	rc = prefetch_create(
	    s->idx, &cfg,
	    &(struct prefetch_ops){.start = start_flight, .ensure_listed = ensure_listed, .ctx = s},
	    &s->prefetch);
	cfg.list_fd = cfg.order_fd = -1; /* prefetch_create's now, or closed */
fail:
	if (cfg.list_fd >= 0)
		close(cfg.list_fd);
	if (cfg.order_fd >= 0)
		close(cfg.order_fd);
	if (rc)
		fprintf(stderr, "spoolfs: cannot set up prefetch: %s\n", strerror(-rc));
	return rc;
}

int fs_prefetch_start(struct fs_session *s)
{
	return s->prefetch ? prefetch_start(s->prefetch) : 0;
}

void fs_prefetch_note_open(struct fs_session *s, fuse_ino_t ino, uint64_t parent)
{
	if (s->reads)
		prefetch_record_note(s->reads, ino);
	if (s->prefetch)
		prefetch_note_open(s->prefetch, ino, parent);
}

static void path_of(void *ctx, uint64_t ino, char *buf, size_t len)
{
	struct fs_session *s = ctx;
	struct index_node n;

	buf[0] = '\0';
	if (index_get(s->idx, ino, &n) == 0)
		index_node_path(s->idx, &n, buf, len);
}

struct record_fill {
	struct fs_session *s;
	size_t left_out;
};

static int fill_record(int fd, void *ctx)
{
	struct record_fill *f = ctx;

	return prefetch_record_write(f->s->reads, fd, path_of, f->s, &f->left_out);
}

/* The record into a new file in dirfd, renamed over name. 0 or -errno; nothing left over. */
static int write_record(struct fs_session *s, int dirfd, const char *name, mode_t mode)
{
	struct record_fill fill = {.s = s};
	int rc = util_trusted_replace(dirfd, name, mode, fill_record, &fill);

	if (rc == 0 && fill.left_out)
		util_log(UTIL_LOG_WARN, "%s: %zu paths left out (a name with a newline)", name,
		         fill.left_out);
	return rc;
}

static void write_records(struct fs_session *s)
{
	int rc;

	if (s->opts.record_reads) {
		/* Through the directory held since start, whatever its path names now. */
		rc = write_record(s, s->reads_out.dir_fd, s->reads_out.name, 0644);
		if (rc)
			util_log(UTIL_LOG_ERROR, "--record-reads %s: %s", s->opts.record_reads,
			         strerror(-rc));
		else
			util_log(UTIL_LOG_INFO, "--record-reads %s: %zu paths",
			         s->opts.record_reads, prefetch_record_count(s->reads));
	}
	if (s->reads_name[0] && prefetch_record_count(s->reads) > 0) {
		rc = write_record(s, cache_dir_fd(s->cache), s->reads_name, 0600);
		if (rc)
			util_log(UTIL_LOG_WARN,
			         "cannot keep the record of what was opened in %s: %s",
			         cache_dir_path(s->cache), strerror(-rc));
	}
}

void fs_prefetch_stop(struct fs_session *s)
{
	prefetch_stop(s->prefetch);
	/* (A mount that opened nothing keeps the record it had in the cache directory.) */
	if (s->reads)
		write_records(s);
}

void fs_prefetch_free(struct fs_session *s)
{
	prefetch_destroy(s->prefetch);
	s->prefetch = NULL;
	prefetch_record_free(s->reads);
	s->reads = NULL;
}

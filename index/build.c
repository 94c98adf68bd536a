/*
 * build.c fills an empty namespace from entries named by path (index_build_*, index.h): it
 * owns the namespace's rules for a whole tree given at once. Paths are checked segment by
 * segment, parents are implied, a path names one thing (a file, a directory or a symlink),
 * one sha256 has one size, and a pack member lies inside its pack. What an entry looked
 * like in its source (JSON, its URLs) is the source's business (fetch/source/).
 *
 * Everything happens in one transaction on the namespace connection, begun by
 * index_build_begin and ended by index_build_commit or index_build_abort. An in-memory
 * table of every path seen (path_table.c) finds parents, duplicates and clashes without a
 * query per segment.
 *
 * Lock: idx->build_lock (index_i.h) for the whole build, then idx->lock, which each call
 * takes for its statements; the builder's own fields belong to the one loading thread
 * (index_build_add may run on another, one at a time).
 */
#include "index/digest_sizes.h"
#include "index/path_table.h"
#include "index/index_i.h"
#include "util/say.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The sha256 of no bytes. */
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* The parameters of ins_sql, in the order ins_params names them. */
enum ins_param {
	P_PARENT,
	P_NAME,
	P_IS_DIR,
	P_KIND,
	P_MODE,
	P_SIZE,
	P_MTIME,
	P_EXECUTABLE,
	P_SHA256,
	P_URL,
	P_ETAG,
	P_TARGET,
	P_PACK,
	P_OFFSET,
	P_CHUNK_SIZE,
	P_CHUNK_SHA256,
	P_CHUNK_URL,
	P_NESTED_SHA256,
	P_NESTED_SIZE,
	P_NESTED_URL,
	P_LISTED,
	P_STORED_SIZE,
	P_STORED_FRAME,
	P_STORED_FRAMES,
	P_COUNT
};
static const char *const ins_params[P_COUNT] = {
    ":parent",       ":name",        ":is_dir",        ":kind",         ":mode",
    ":size",         ":mtime",       ":executable",    ":sha256",       ":url",
    ":etag",         ":target",      ":pack",          ":offset",       ":chunk_size",
    ":chunk_sha256", ":chunk_url",   ":nested_sha256", ":nested_size",  ":nested_url",
    ":listed",       ":stored_size", ":stored_frame",  ":stored_frames"};

struct index_builder {
	struct index *idx;
	sqlite3_stmt *st_ins, *st_dir, *st_pack_find, *st_pack_ins;
	/* st_ins's parameter numbers, looked up once: by name, the lookups were a tenth of a
	 * large load (sqlite compares the name with each parameter's in turn). */
	int ins_at[P_COUNT];
	/* The pack last found (members of one pack come one after another): its sha256
	 * ("" for none), id and size. Packs are only ever added during a build. */
	char last_pack[INDEX_SHA256_HEX + 1];
	int64_t last_pack_id;
	uint64_t last_pack_size;
	struct path_table pt;
	struct digest_sizes digests;
	bool sha256_indexed; /* node(sha256) has an index: see check_other_size */
	uint64_t files, dirs, bytes;
	uint64_t root; /* the directory built: INDEX_ROOT_INO, or a nested manifest's */
	bool subtree;  /* index_build_begin_at: root is listed at commit, totals recomputed */
};

static const char ins_sql[] =
    "INSERT INTO node(parent, name, is_dir, kind, mode, size, mtime, executable, sha256, url,"
    " etag, target, pack, pack_offset, chunk_size, chunk_sha256, chunk_url, nested_sha256,"
    " nested_size, nested_url, listed, stored_size, stored_frame, stored_frames)"
    " VALUES(:parent, :name, :is_dir, :kind, :mode, :size, :mtime, :executable, :sha256,"
    " :url, :etag, :target, :pack, :offset, :chunk_size, :chunk_sha256, :chunk_url,"
    " :nested_sha256, :nested_size, :nested_url, :listed, :stored_size, :stored_frame,"
    " :stored_frames)";

/* A directory's final mtime and mode, written once every entry is in. */
static const char dir_sql[] =
    "UPDATE node SET mtime = :mtime, mode = coalesce(:mode, mode) WHERE ino = :ino";

static const char pack_find_sql[] = "SELECT id, size FROM pack WHERE sha256 = :sha256";
static const char pack_ins_sql[] =
    "INSERT INTO pack(sha256, size, url, stored_size, stored_frame, stored_frames)"
    " VALUES(:sha256, :size, :url, :stored_size, :stored_frame, :stored_frames)";

/* index_check_path, for a path below `at_root` the mount's root or a nested directory. */
static const char *check_path_at(const char *path, size_t len, bool at_root, char *buf, size_t cap)
{
	if (len == 0)
		return "path is empty";
	if (path[0] == '/')
		return "path is absolute";
	for (size_t start = 0; start <= len;) {
		const char *slash = memchr(path + start, '/', len - start);
		size_t end = slash ? (size_t)(slash - path) : len;
		const char *why = start == 0 && at_root
		                      ? index_check_root_segment(path, end)
		                      : index_check_segment(path + start, end - start);
		if (why) {
			snprintf(buf, cap, "path has %s", why);
			return buf;
		}
		start = end + 1;
	}
	return NULL;
}

const char *index_check_path(const char *path, size_t len, bool at_root, char *buf, size_t cap)
{
	return check_path_at(path, len, at_root, buf, cap);
}

static int bind_i64(struct index_builder *b, enum ins_param p, int64_t v)
{
	return index_db_errno(sqlite3_bind_int64(b->st_ins, b->ins_at[p], v));
}

static int bind_null(struct index_builder *b, enum ins_param p)
{
	return index_db_errno(sqlite3_bind_null(b->st_ins, b->ins_at[p]));
}

/* s (len bytes, -1 for up to its NUL) or NULL, bound SQLITE_STATIC: see index_db_bind_text. */
static int bind_text(struct index_builder *b, enum ins_param p, const char *s, int len)
{
	if (!s)
		return bind_null(b, p);
	return index_db_errno(sqlite3_bind_text(b->st_ins, b->ins_at[p], s, len, SQLITE_STATIC));
}

/* Inserts one node row (an implied directory when e is NULL; pack_id -1 when no member);
 * returns its inode, or -errno. */
static int64_t insert_node(struct index_builder *b, int64_t parent, const char *name,
                           size_t name_len, const struct index_build_entry *e, int64_t pack_id)
{
	static const struct index_build_entry implied_dir = {.kind = INDEX_KIND_DIR};
	const struct index_build_entry *a = e ? e : &implied_dir;
	bool is_file = a->kind == INDEX_KIND_FILE, is_link = a->kind == INDEX_KIND_SYMLINK;
	bool chunked = is_file && a->chunk_size;
	bool nested = a->kind == INDEX_KIND_DIR && a->nested_sha256;
	/* A member's bytes are its pack's, stored as the pack is. */
	bool stored = is_file && a->stored.frame && pack_id < 0;
	int rc = bind_i64(b, P_PARENT, parent);

	if (rc == 0)
		rc = bind_text(b, P_NAME, name, (int)name_len);
	if (rc == 0)
		rc = bind_i64(b, P_IS_DIR, a->kind == INDEX_KIND_DIR);
	if (rc == 0)
		rc = bind_i64(b, P_KIND, a->kind);
	if (rc == 0)
		rc = a->has_mode ? bind_i64(b, P_MODE, a->mode & 0555) : bind_null(b, P_MODE);
	if (rc == 0) /* a symlink's size is its target's length, as lstat gives it */
		rc = bind_i64(b, P_SIZE,
		              is_file   ? (int64_t)a->size
		              : is_link ? (int64_t)a->target_len
		                        : 0);
	if (rc == 0)
		rc = bind_i64(b, P_MTIME, a->has_mtime ? a->mtime : b->idx->default_mtime);
	if (rc == 0)
		rc = bind_i64(b, P_EXECUTABLE, is_file && a->has_mode && (a->mode & 0111));
	if (rc == 0)
		rc = bind_text(b, P_SHA256, is_file ? a->sha256 : NULL, INDEX_SHA256_HEX);
	if (rc == 0)
		rc = bind_text(b, P_URL, is_file ? a->url : NULL, -1);
	if (rc == 0)
		rc = bind_text(b, P_ETAG, is_file ? a->etag : NULL, -1);
	if (rc == 0)
		rc = bind_text(b, P_TARGET, is_link ? a->target : NULL, (int)a->target_len);
	if (rc == 0)
		rc = pack_id >= 0 ? bind_i64(b, P_PACK, pack_id) : bind_null(b, P_PACK);
	if (rc == 0)
		rc = pack_id >= 0 ? bind_i64(b, P_OFFSET, (int64_t)a->offset)
		                  : bind_null(b, P_OFFSET);
	if (rc == 0)
		rc = chunked ? bind_i64(b, P_CHUNK_SIZE, (int64_t)a->chunk_size)
		             : bind_null(b, P_CHUNK_SIZE);
	if (rc == 0)
		rc = bind_text(b, P_CHUNK_SHA256, chunked ? a->chunk_sha256 : NULL, -1);
	if (rc == 0)
		rc = bind_text(b, P_CHUNK_URL, chunked ? a->chunk_url : NULL, -1);
	if (rc == 0)
		rc = bind_text(b, P_NESTED_SHA256, nested ? a->nested_sha256 : NULL, -1);
	if (rc == 0)
		rc = nested ? bind_i64(b, P_NESTED_SIZE, (int64_t)a->nested_size)
		            : bind_null(b, P_NESTED_SIZE);
	if (rc == 0)
		rc = bind_text(b, P_NESTED_URL, nested ? a->nested_url : NULL, -1);
	/* Its entries come with its own manifest, at its first lookup. */
	if (rc == 0)
		rc = bind_i64(b, P_LISTED, !nested);
	if (rc == 0)
		rc = stored ? bind_i64(b, P_STORED_SIZE, (int64_t)a->stored.size)
		            : bind_null(b, P_STORED_SIZE);
	if (rc == 0)
		rc = stored ? bind_i64(b, P_STORED_FRAME, (int64_t)a->stored.frame)
		            : bind_null(b, P_STORED_FRAME);
	if (rc == 0)
		rc = stored && a->stored.le
		         ? index_db_errno(sqlite3_bind_blob(b->st_ins, b->ins_at[P_STORED_FRAMES],
		                                            a->stored.le, (int)a->stored.le_len,
		                                            SQLITE_STATIC))
		         : bind_null(b, P_STORED_FRAMES);
	if (rc == 0)
		rc = index_db_exec(b->st_ins);
	if (rc < 0)
		return rc;
	return sqlite3_last_insert_rowid(b->idx->db);
}

static const char *kind_name(enum index_kind kind)
{
	return kind == INDEX_KIND_DIR       ? "directory"
	       : kind == INDEX_KIND_SYMLINK ? "symlink"
	                                    : "file";
}

/* A directory's mtime is the newest below it, up to the first directory that has its own
 * (an entry of its own gave it); ancestors are never older than their children, so the
 * walk also stops at the first that already is new enough. */
static void raise_dir_mtimes(struct index_builder *b, uint32_t dir, int64_t mtime)
{
	for (uint32_t d = dir;; d = b->pt.v[d].parent) {
		struct path_node *p = &b->pt.v[d];
		if (p->has_own_mtime || p->mtime >= mtime)
			break;
		p->mtime = mtime;
		if (d == 0)
			break;
	}
}

/*
 * Adds e at its path with its implied directories. A directory entry for a path that an
 * earlier entry implied gives that directory its mode and mtime. Returns 0, -errno, or
 * -EINVAL with the reason when the path clashes with an earlier one.
 */
static int add_path(struct index_builder *b, const struct index_build_entry *e, int64_t pack_id,
                    char *why, size_t why_len)
{
	const char *path = e->path;
	size_t len = e->path_len, start = 0;
	uint32_t parent = 0; /* the root */
	long found;
	int64_t ino;

	for (;;) {
		const char *slash = memchr(path + start, '/', len - start);
		if (!slash)
			break;
		size_t end = (size_t)(slash - path);
		uint64_t h = path_table_hash(&b->pt, path, end);
		found = path_table_find(&b->pt, path, end, h);
		if (found >= 0) {
			if (!b->pt.v[found].is_dir)
				return util_say(why, why_len,
				                "\"%.*s\" is both a %s and a directory", (int)end,
				                path, kind_name(b->pt.v[found].kind));
			if (b->pt.v[found].nested)
				return util_say(
				    why, why_len,
				    "\"%.*s\" has a manifest of its own: its entries are there",
				    (int)end, path);
		} else {
			ino = insert_node(b, b->pt.v[parent].ino, path + start, end - start, NULL,
			                  -1);
			if (ino < 0)
				return (int)ino;
			found = path_table_add(&b->pt, path, end, h, ino, true, parent);
			if (found < 0)
				return (int)found;
			b->pt.v[found].kind = INDEX_KIND_DIR;
			b->dirs++;
		}
		parent = (uint32_t)found;
		start = end + 1;
	}

	int64_t mtime = e->has_mtime ? e->mtime : b->idx->default_mtime;
	uint64_t h = path_table_hash(&b->pt, path, len);
	found = path_table_find(&b->pt, path, len, h);
	if (found >= 0) {
		struct path_node *p = &b->pt.v[found];
		if (e->kind == INDEX_KIND_DIR && p->is_dir && !p->listed_itself && e->nested_sha256)
			return util_say(why, why_len,
			                "path has a manifest of its own, but entries here too");
		if (e->kind == INDEX_KIND_DIR && p->is_dir && !p->listed_itself) {
			/* Implied by an earlier entry, named now: takes its own mode and mtime. */
			p->listed_itself = p->has_own_mtime = true;
			p->mtime = mtime;
			p->has_mode = e->has_mode;
			p->mode = e->mode & 0555;
			raise_dir_mtimes(b, p->parent, mtime);
			return 0;
		}
		if (p->kind == e->kind)
			return util_say(why, why_len, "duplicate path");
		return util_say(why, why_len, "path is both a %s and a %s", kind_name(e->kind),
		                kind_name(p->kind));
	}
	ino = insert_node(b, b->pt.v[parent].ino, path + start, len - start, e, pack_id);
	if (ino < 0)
		return (int)ino;
	found = path_table_add(&b->pt, path, len, h, ino, e->kind == INDEX_KIND_DIR, parent);
	if (found < 0)
		return (int)found;
	struct path_node *p = &b->pt.v[found];
	p->kind = e->kind;
	if (e->kind == INDEX_KIND_DIR) {
		p->listed_itself = p->has_own_mtime = true;
		p->nested = e->nested_sha256 != NULL;
		p->mtime = mtime;
		p->has_mode = e->has_mode;
		p->mode = e->mode & 0555;
		b->dirs++;
	} else {
		b->files++;
	}
	if (e->kind == INDEX_KIND_FILE)
		b->bytes = b->bytes + e->size < b->bytes ? UINT64_MAX : b->bytes + e->size;
	raise_dir_mtimes(b, parent, mtime);
	return 0;
}

/*
 * Entries with one sha256 share one download, whose size is the first opener's: another
 * entry (already inserted) with this digest and another size makes the namespace wrong.
 * Returns 0, -EINVAL with the reason, or -errno.
 */
static int check_other_size(struct index_builder *b, const char *sha256, uint64_t size, char *why,
                            size_t why_len)
{
	static const char sql[] = "SELECT size FROM node WHERE sha256 = ?1 AND size <> ?2 LIMIT 1";
	sqlite3 *db = b->idx->db;
	sqlite3_stmt *st = NULL;
	int rc = 0;

	/* Made at the first confirmation: a manifest crafted to collide in 64 bits again and
	 * again would otherwise cost a scan of the table for each entry. */
	if (!b->sha256_indexed)
		rc =
		    index_db_exec_sql(db, "CREATE INDEX IF NOT EXISTS node_sha256 ON node(sha256)");
	b->sha256_indexed = rc == 0;
	if (rc == 0)
		rc = index_db_errno(sqlite3_prepare_v2(db, sql, -1, &st, NULL));
	if (rc == 0)
		rc = index_db_errno(sqlite3_bind_text(st, 1, sha256, -1, SQLITE_STATIC));
	if (rc == 0)
		rc = index_db_errno(sqlite3_bind_int64(st, 2, (int64_t)size));
	if (rc == 0) {
		int step = sqlite3_step(st);
		if (step == SQLITE_ROW)
			rc = util_say(why, why_len,
			              "another entry has the same sha256 and size %lld",
			              (long long)sqlite3_column_int64(st, 0));
		else if (step != SQLITE_DONE)
			rc = index_db_step_errno(step);
	}
	sqlite3_finalize(st);
	return rc;
}

/* The rules of an entry's own fields, and a member's place in its pack (whose id goes to
 * *pack_id; -1 for other entries). */
static int check_entry(struct index_builder *b, const struct index_build_entry *e, int64_t *pack_id,
                       char *why, size_t why_len)
{
	char buf[160];
	const char *bad = check_path_at(e->path, e->path_len, !b->subtree, buf, sizeof(buf));
	uint64_t size = 0;
	int rc;

	*pack_id = -1;
	if (bad)
		return util_say(why, why_len, "%s", bad);
	if (e->kind == INDEX_KIND_SYMLINK) {
		if (e->target_len == 0)
			return util_say(why, why_len, "target is empty");
		if (e->target_len > INDEX_SYMLINK_MAX)
			return util_say(why, why_len, "target is longer than %d bytes",
			                INDEX_SYMLINK_MAX);
		if (memchr(e->target, '\0', e->target_len))
			return util_say(why, why_len, "target contains a NUL byte");
		return 0;
	}
	if (e->kind != INDEX_KIND_FILE)
		return 0;
	if (e->size > INT64_MAX)
		return util_say(why, why_len, "size is too large");
	/* Nothing is fetched for an empty object, so nothing else would catch this. */
	if (e->sha256 && e->size == 0 && strcmp(e->sha256, EMPTY_SHA256) != 0)
		return util_say(why, why_len, "size is 0 but sha256 is not that of empty content");
	if (!e->pack_sha256)
		return 0;
	/* A member is checked by its own digest as its range of the pack arrives. */
	if (!e->sha256)
		return util_say(why, why_len, "a pack member needs its own sha256");
	if (strcmp(e->pack_sha256, b->last_pack) == 0) {
		*pack_id = b->last_pack_id;
		size = b->last_pack_size;
	} else {
		rc = index_db_bind_text(b->st_pack_find, ":sha256", e->pack_sha256, -1);
		if (rc == 0)
			rc = index_db_step(b->st_pack_find);
		if (rc == 1) {
			*pack_id = sqlite3_column_int64(b->st_pack_find, 0);
			size = (uint64_t)sqlite3_column_int64(b->st_pack_find, 1);
		}
		rc = index_db_reset_keep(b->st_pack_find, rc);
		if (rc < 0)
			return rc;
		if (*pack_id >= 0 && strlen(e->pack_sha256) == INDEX_SHA256_HEX) {
			memcpy(b->last_pack, e->pack_sha256, INDEX_SHA256_HEX + 1);
			b->last_pack_id = *pack_id;
			b->last_pack_size = size;
		}
	}
	if (*pack_id < 0)
		return util_say(why, why_len, "pack %.16s... is not in \"packs\"", e->pack_sha256);
	if (e->offset > size || e->size > size - e->offset)
		return util_say(why, why_len,
		                "offset %llu + size %llu lies beyond its pack's size %llu",
		                (unsigned long long)e->offset, (unsigned long long)e->size,
		                (unsigned long long)size);
	return 0;
}

int index_build_add(struct index_builder *b, const struct index_build_entry *e, char *why,
                    size_t why_len)
{
	int64_t pack_id;
	int rc;

	pthread_mutex_lock(&b->idx->lock);
	rc = check_entry(b, e, &pack_id, why, why_len);
	if (rc == 0 && e->kind == INDEX_KIND_FILE && e->sha256) {
		rc = digest_sizes_note(&b->digests, e->sha256, (int64_t)e->size);
		if (rc == 1)
			rc = check_other_size(b, e->sha256, e->size, why, why_len);
	}
	if (rc == 0)
		rc = add_path(b, e, pack_id, why, why_len);
	pthread_mutex_unlock(&b->idx->lock);
	return rc;
}

int index_build_add_pack(struct index_builder *b, const char *sha256, uint64_t size,
                         const char *url, const struct index_stored_view *stored, char *why,
                         size_t why_len)
{
	static const struct index_stored_view as_it_is;
	const struct index_stored_view *v = stored ? stored : &as_it_is;
	sqlite3_stmt *find = b->st_pack_find, *ins = b->st_pack_ins;
	int rc;

	if (size > INT64_MAX)
		return util_say(why, why_len, "size is too large");
	pthread_mutex_lock(&b->idx->lock);
	rc = index_db_bind_text(find, ":sha256", sha256, -1);
	if (rc == 0)
		rc = index_db_step(find);
	if (rc == 1) {
		uint64_t had = (uint64_t)sqlite3_column_int64(find, 1);
		rc = had == size
		         ? 0
		         : util_say(why, why_len, "pack %.16s... has two sizes, %llu and %llu",
		                    sha256, (unsigned long long)had, (unsigned long long)size);
		(void)index_db_reset(find);
		goto out;
	}
	rc = index_db_reset_keep(find, rc);
	if (rc == 0)
		rc = index_db_bind_text(ins, ":sha256", sha256, -1);
	if (rc == 0)
		rc = index_db_bind_int64(ins, ":size", (int64_t)size);
	if (rc == 0)
		rc = index_db_bind_text(ins, ":url", url, -1);
	if (rc == 0)
		rc = v->frame ? index_db_bind_int64(ins, ":stored_size", (int64_t)v->size)
		              : index_db_bind_null(ins, ":stored_size");
	if (rc == 0)
		rc = v->frame ? index_db_bind_int64(ins, ":stored_frame", (int64_t)v->frame)
		              : index_db_bind_null(ins, ":stored_frame");
	if (rc == 0)
		rc = v->frame && v->le
		         ? index_db_errno(sqlite3_bind_blob(
		               ins, sqlite3_bind_parameter_index(ins, ":stored_frames"), v->le,
		               (int)v->le_len, SQLITE_STATIC))
		         : index_db_bind_null(ins, ":stored_frames");
	if (rc == 0)
		rc = index_db_exec(ins);
out:
	pthread_mutex_unlock(&b->idx->lock);
	return rc;
}

static int namespace_is_empty(struct index *idx)
{
	sqlite3_stmt *st = NULL;
	int rc = index_db_errno(sqlite3_prepare_v2(
	    idx->db, "SELECT EXISTS(SELECT 1 FROM node WHERE ino <> 1)", -1, &st, NULL));

	if (rc == 0)
		rc = index_db_step(st);
	if (rc == 1)
		rc = sqlite3_column_int(st, 0) ? -EBUSY : 0;
	else if (rc == 0)
		rc = -EIO; /* EXISTS always gives its row */
	sqlite3_finalize(st);
	return rc;
}

static void builder_free(struct index_builder *b)
{
	sqlite3_finalize(b->st_ins);
	sqlite3_finalize(b->st_dir);
	sqlite3_finalize(b->st_pack_find);
	sqlite3_finalize(b->st_pack_ins);
	path_table_free(&b->pt);
	digest_sizes_free(&b->digests);
	free(b);
}

/* Is dir an unlisted, empty directory with a manifest of its own? 0, -EBUSY (listed),
 * -ENOTDIR, -ENOENT, or -errno. */
static int subtree_is_empty(struct index *idx, uint64_t dir)
{
	static const char sql[] =
	    "SELECT kind, listed, nested_sha256 IS NOT NULL,"
	    " EXISTS(SELECT 1 FROM node WHERE parent = ?1 AND ino <> ?1) FROM node WHERE ino = ?1";
	sqlite3_stmt *st = NULL;
	int rc = dir > INT64_MAX ? -ENOENT : index_db_prepare(idx->db, sql, &st);

	if (rc == 0)
		rc = index_db_errno(sqlite3_bind_int64(st, 1, (int64_t)dir));
	if (rc == 0)
		rc = index_db_step(st);
	if (rc == 0)
		rc = -ENOENT;
	if (rc == 1) {
		if (sqlite3_column_int(st, 0) != INDEX_KIND_DIR || !sqlite3_column_int(st, 2))
			rc = -ENOTDIR;
		else if (sqlite3_column_int(st, 1) || sqlite3_column_int(st, 3))
			rc = -EBUSY;
		else
			rc = 0;
	}
	sqlite3_finalize(st);
	return rc;
}

/* Both kinds of build: the whole namespace (subtree false) or directory root's. */
static int build_begin(struct index *idx, uint64_t root_ino, bool subtree,
                       struct index_builder **out)
{
	struct index_builder *b = calloc(1, sizeof(*b));
	bool began = false;
	long root;
	int rc = -ENOMEM;

	*out = NULL;
	if (!b)
		return -ENOMEM;
	b->idx = idx;
	b->root = root_ino;
	b->subtree = subtree;
	pthread_mutex_lock(&idx->build_lock);
	pthread_mutex_lock(&idx->lock);
	rc = path_table_init(&b->pt);
	if (rc == 0)
		rc = digest_sizes_init(&b->digests);
	if (rc == 0)
		rc = subtree ? subtree_is_empty(idx, root_ino) : namespace_is_empty(idx);
	if (rc == 0)
		rc = index_begin(idx);
	began = rc == 0;
	/* Before the rows, not after: kept up per insert on a large load's builder thread, which
	 * waits on the reader's JSON anyway, where built at the commit they were 0.5 s of a
	 * 1,000,000-entry load's end, with nothing else running (doc/benchmarks.md). */
	if (rc == 0)
		rc = index_namespace_indexes(idx);
	if (rc == 0)
		rc = index_db_prepare(idx->db, ins_sql, &b->st_ins);
	for (int p = 0; rc == 0 && p < P_COUNT; p++) {
		b->ins_at[p] = sqlite3_bind_parameter_index(b->st_ins, ins_params[p]);
		if (b->ins_at[p] <= 0)
			rc = -EINVAL; /* ins_params and ins_sql disagree */
	}
	if (rc == 0)
		rc = index_db_prepare(idx->db, dir_sql, &b->st_dir);
	if (rc == 0)
		rc = index_db_prepare(idx->db, pack_find_sql, &b->st_pack_find);
	if (rc == 0)
		rc = index_db_prepare(idx->db, pack_ins_sql, &b->st_pack_ins);
	if (rc < 0)
		goto out;
	root = path_table_add(&b->pt, "", 0, path_table_hash(&b->pt, "", 0), (int64_t)root_ino,
	                      true, 0);
	if (root < 0) {
		rc = (int)root;
		goto out;
	}
	b->pt.v[root].kind = INDEX_KIND_DIR;
	/* A nested directory's mtime is its own, from the entry that named it. */
	b->pt.v[root].has_own_mtime = subtree;
	*out = b;
out:
	if (rc < 0 && began)
		index_rollback(idx);
	pthread_mutex_unlock(&idx->lock);
	if (rc < 0) {
		pthread_mutex_unlock(&idx->build_lock);
		builder_free(b);
	}
	return rc;
}

int index_build_begin(struct index *idx, struct index_builder **out)
{
	return build_begin(idx, INDEX_ROOT_INO, false, out);
}

int index_build_begin_at(struct index *idx, uint64_t dir, struct index_builder **out)
{
	return build_begin(idx, dir, true, out);
}

/* Writes each directory's mtime (its own, or the newest beneath) and its own mode. */
static int write_dirs(struct index_builder *b)
{
	sqlite3_stmt *st = b->st_dir;
	int rc = 0;

	for (size_t k = 0; rc == 0 && k < b->pt.n; k++) {
		const struct path_node *p = &b->pt.v[k];
		if (!p->is_dir || (p->mtime == 0 && !p->has_mode))
			continue;
		rc = index_db_bind_int64(st, ":mtime", p->mtime);
		if (rc == 0)
			rc = p->has_mode ? index_db_bind_int64(st, ":mode", p->mode)
			                 : index_db_bind_null(st, ":mode");
		if (rc == 0)
			rc = index_db_bind_int64(st, ":ino", p->ino);
		if (rc == 0)
			rc = index_db_exec(st);
	}
	return rc;
}

int index_build_commit(struct index_builder *b)
{
	struct index *idx = b->idx;
	int rc;

	pthread_mutex_lock(&idx->lock);
	rc = write_dirs(b);
	if (rc == 0 && b->subtree)
		rc = index_db_bind_int64(idx->st_mark_listed, ":ino", (int64_t)b->root);
	if (rc == 0 && b->subtree)
		rc = index_db_exec(idx->st_mark_listed);
	if (rc == 0)
		rc = index_commit(idx);
	if (rc == 0 && !b->subtree) {
		idx->total_files = b->files;
		idx->total_dirs = b->dirs + 1; /* the root */
		idx->total_bytes = b->bytes;
		idx->totals_valid = true;
	} else if (rc == 0) {
		idx->totals_valid = false; /* the namespace grew: counted again when asked */
	} else {
		index_rollback(idx);
	}
	pthread_mutex_unlock(&idx->lock);
	pthread_mutex_unlock(&idx->build_lock);
	builder_free(b);
	return rc;
}

void index_build_abort(struct index_builder *b)
{
	if (!b)
		return;
	pthread_mutex_lock(&b->idx->lock);
	index_rollback(b->idx);
	pthread_mutex_unlock(&b->idx->lock);
	pthread_mutex_unlock(&b->idx->build_lock);
	builder_free(b);
}

int index_build_find(struct index_builder *b, const char *path, size_t len, enum index_kind *kind,
                     bool *nested)
{
	long found = path_table_find(&b->pt, path, len, path_table_hash(&b->pt, path, len));

	if (found < 0)
		return -ENOENT;
	*kind = (enum index_kind)b->pt.v[found].kind;
	*nested = b->pt.v[found].nested;
	return 0;
}

/*
 * index.c owns struct index (index.h, index_i.h): the session's namespace connection, its
 * schema, and every statement that reads it at run time.
 *
 * Lock: idx->lock serialises every statement on the connection, which is opened
 * SQLITE_OPEN_NOMUTEX because that lock already does sqlite's job. It is an innermost lock
 * of the program: nothing here calls out while holding it, except index_readdir's callback,
 * which must not call back in.
 *
 * The namespace is this session's alone: a private temporary database ("" to sqlite, deleted
 * when closed, so two mounts never see each other's and a crash leaves none behind), or a
 * file in the session's private run directory (index_open_file), which the next serving
 * process of the same mount reopens after a crash or an upgrade, so that it serves exactly
 * the snapshot the kernel knows (doc/survive.md):
 *   node(ino INTEGER PRIMARY KEY, parent, name, is_dir, kind, mode, size, mtime, executable,
 *        sha256, url, etag, listed, target, pack, pack_offset, chunk_size, chunk_sha256,
 *        chunk_url, nested_sha256, nested_size, nested_url, stored_size, stored_frame,
 *        stored_frames)
 *     Built at every open: a session is a snapshot. mode NULL: the kind's default. Its indexes are
 * made when a build begins (index_namespace_indexes) and kept up per insert, on a large load's
 * builder thread, which has time to spare while the reader parses: UNIQUE node_name(parent, name)
 * serves lookup, node_parent(parent), which carries the rowid, serves readdir in inode order,
 * node_nested(parent, ino), of directories with a manifest of their own only, finds a nested
 * directory's next such sibling (index_next_nested_sibling) without a scan of the others.
 * pack(id INTEGER PRIMARY KEY, sha256 UNIQUE, size, url, stored_size, stored_frame,
 * stored_frames) The packs whose byte ranges are files (node.pack, node.pack_offset).
 * stored_*: how an object is stored (index_stored); stored_frame NULL: as it is; stored_frames
 * a BLOB of little-endian u32s, NULL when a chunked file's hash list holds them. The spool records
 * of the cache directory are another database: spool_records.c.
 */
#include "index/copy.h"
#include "index/index_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <unistd.h>

/*
 * The namespace's schema version (PRAGMA user_version). 1 added the stored_* columns
 * (manifest version 3); 0 is every file made before, with them or without (the builds
 * that added them left user_version alone).
 */
#define NAMESPACE_VERSION 1
#define STRING_OF(x) #x
#define SET_VERSION(v) "PRAGMA user_version = " STRING_OF(v)

#define NODE_COLUMNS "ino, parent, name, is_dir, size, mtime, executable, sha256, kind, mode"

static const char namespace_schema_sql[] =
    "CREATE TABLE node("
    " ino INTEGER PRIMARY KEY,"
    " parent INTEGER NOT NULL,"
    " name TEXT NOT NULL,"
    " is_dir INTEGER NOT NULL,"
    " size INTEGER NOT NULL DEFAULT 0,"
    " mtime INTEGER NOT NULL DEFAULT 0,"
    " executable INTEGER NOT NULL DEFAULT 0,"
    " sha256 TEXT,"
    " url TEXT,"
    " etag TEXT,"
    " listed INTEGER NOT NULL DEFAULT 1,"
    " kind INTEGER NOT NULL DEFAULT 0,"
    " mode INTEGER,"
    " target TEXT,"
    " pack INTEGER,"
    " pack_offset INTEGER,"
    " chunk_size INTEGER,"
    " chunk_sha256 TEXT,"
    " chunk_url TEXT,"
    " nested_sha256 TEXT,"
    " nested_size INTEGER,"
    " nested_url TEXT,"
    " stored_size INTEGER,"
    " stored_frame INTEGER,"
    " stored_frames BLOB);"
    "CREATE TABLE pack("
    " id INTEGER PRIMARY KEY,"
    " sha256 TEXT NOT NULL UNIQUE,"
    " size INTEGER NOT NULL,"
    " url TEXT NOT NULL,"
    " stored_size INTEGER,"
    " stored_frame INTEGER,"
    " stored_frames BLOB);"
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "INSERT INTO node(ino, parent, name, is_dir, kind) VALUES(1, 1, '', 1, 1);" SET_VERSION(
        NAMESPACE_VERSION) ";";

int index_init_process(void)
{
	return index_db_errno(sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0));
}

int index_namespace_indexes(struct index *idx)
{
	return index_db_exec_sql(
	    idx->db, "CREATE UNIQUE INDEX IF NOT EXISTS node_name ON node(parent, name);"
	             "CREATE INDEX IF NOT EXISTS node_parent ON node(parent);"
	             "CREATE INDEX IF NOT EXISTS node_nested ON node(parent, ino)"
	             " WHERE nested_sha256 IS NOT NULL;");
}

int index_begin(struct index *idx)
{
	return index_db_exec(idx->st_begin);
}

int index_set_default_mtime(struct index *idx, int64_t mtime)
{
	sqlite3_stmt *st = NULL;
	int rc;

	pthread_mutex_lock(&idx->lock);
	idx->default_mtime = mtime;
	/* The root is made with the namespace, before anyone knew the time to give it. Once, at
	 * start-up: not worth a statement kept for the session. */
	rc = index_db_errno(sqlite3_prepare_v2(
	    idx->db, "UPDATE node SET mtime = :mtime WHERE ino = 1;", -1, &st, NULL));
	if (rc == 0)
		rc = index_db_bind_int64(st, ":mtime", mtime);
	if (rc == 0)
		rc = index_db_exec(st);
	sqlite3_finalize(st);
	pthread_mutex_unlock(&idx->lock);
	if (rc == 0) {
		/* Kept with the namespace: a listing the next serving process adds dates the same.
		 */
		char text[24];
		snprintf(text, sizeof(text), "%lld", (long long)mtime);
		rc = index_meta_put(idx, "default_mtime", text);
	}
	return rc;
}

int index_meta_put(struct index *idx, const char *key, const char *value)
{
	sqlite3_stmt *st = NULL;
	int rc;

	pthread_mutex_lock(&idx->lock);
	rc = index_db_errno(sqlite3_prepare_v2(
	    idx->db, "INSERT OR REPLACE INTO meta(key, value) VALUES(:key, :value)", -1, &st,
	    NULL));
	if (rc == 0)
		rc = index_db_bind_text(st, ":key", key, -1);
	if (rc == 0)
		rc = index_db_bind_text(st, ":value", value, -1);
	if (rc == 0)
		rc = index_db_exec(st);
	sqlite3_finalize(st);
	pthread_mutex_unlock(&idx->lock);
	return rc;
}

int index_meta_get(struct index *idx, const char *key, char **value)
{
	sqlite3_stmt *st = NULL;
	int rc;

	*value = NULL;
	pthread_mutex_lock(&idx->lock);
	rc = index_db_errno(
	    sqlite3_prepare_v2(idx->db, "SELECT value FROM meta WHERE key = :key", -1, &st, NULL));
	if (rc == 0)
		rc = index_db_bind_text(st, ":key", key, -1);
	if (rc == 0)
		rc = index_db_step(st);
	if (rc == 1) {
		const unsigned char *text = sqlite3_column_text(st, 0);
		*value = strdup(text ? (const char *)text : "");
		rc = *value ? 0 : -ENOMEM;
	} else if (rc == 0) {
		rc = -ENOENT;
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&idx->lock);
	return rc;
}

int index_commit(struct index *idx)
{
	return index_db_exec(idx->st_commit);
}

void index_rollback(struct index *idx)
{
	/* A failed statement may already have rolled the transaction back; that is fine. */
	if (!sqlite3_get_autocommit(idx->db))
		(void)index_db_exec(idx->st_rollback);
}

/* The connection's statements, prepared at open and finalized at close. */
#define NAMESPACE_STMTS 16
static void namespace_stmts(struct index *idx, struct index_db_stmt defs[NAMESPACE_STMTS])
{
	const struct index_db_stmt all[NAMESPACE_STMTS] = {
	    {&idx->st_lookup, "SELECT " NODE_COLUMNS " FROM node"
	                      " WHERE parent = :parent AND name = :name AND ino <> 1"},
	    {&idx->st_get, "SELECT " NODE_COLUMNS " FROM node WHERE ino = :ino"},
	    {&idx->st_get_url, "SELECT is_dir, url FROM node WHERE ino = :ino"},
	    {&idx->st_readdir, "SELECT " NODE_COLUMNS " FROM node"
	                       " WHERE parent = :dir AND ino > :cookie ORDER BY ino"},
	    {&idx->st_begin, "BEGIN IMMEDIATE"},
	    {&idx->st_commit, "COMMIT"},
	    {&idx->st_rollback, "ROLLBACK"},
	    {&idx->st_listed, "SELECT is_dir, listed FROM node WHERE ino = :ino"},
	    {&idx->st_get_etag, "SELECT is_dir, etag FROM node WHERE ino = :ino"},
	    {&idx->st_totals,
	     "SELECT count(*) - coalesce(sum(is_dir), 0), coalesce(sum(is_dir), 0),"
	     " coalesce(sum(size), 0) FROM node"},
	    {&idx->st_readlink, "SELECT kind, target FROM node WHERE ino = :ino"},
	    {&idx->st_get_nested,
	     "SELECT kind, nested_sha256, nested_size, nested_url FROM node WHERE ino = :ino"},
	    /* An open's one query: the node's columns in NODE_COLUMNS' order, then OBJECT_*. */
	    {&idx->st_get_object,
	     "SELECT n.ino, n.parent, n.name, n.is_dir, n.size, n.mtime, n.executable, n.sha256,"
	     " n.kind, n.mode, n.url, n.etag, p.sha256, p.size, n.pack_offset, p.url,"
	     " n.chunk_sha256, n.chunk_size, n.chunk_url, n.stored_size, n.stored_frame,"
	     " length(n.stored_frames), p.stored_size, p.stored_frame, length(p.stored_frames)"
	     " FROM node AS n LEFT JOIN pack AS p ON p.id = n.pack WHERE n.ino = :ino"},
	    /* Only a new flight reads a frame table (index_get_stored_frames): a pack member's
	     * is its pack's. */
	    {&idx->st_get_frames, "SELECT coalesce(p.stored_frames, n.stored_frames) FROM node AS n"
	                          " LEFT JOIN pack AS p ON p.id = n.pack WHERE n.ino = :ino"},
	    {&idx->st_mark_listed, "UPDATE node SET listed = 1 WHERE ino = :ino"},
	    {&idx->st_insert_entry,
	     /* OR IGNORE: the first entry of a name wins (node_name is UNIQUE). */
	     "INSERT OR IGNORE INTO node(parent, name, is_dir, kind, size, mtime, sha256, url,"
	     " etag, listed) VALUES(:parent, :name, :is_dir, :is_dir, :size, :mtime, :sha256,"
	     " :url, :etag, :listed)"},
	};

	memcpy(defs, all, sizeof(all));
}

/*
 * The namespace connection, private to this session.
 * - locking_mode EXCLUSIVE: nobody else can open a temporary database, so file locks per
 *   statement would be pure cost (half of a lookup's).
 * - journal_mode MEMORY: the journal only needs to roll a failed load back, never to
 *   survive a crash: the database does not outlive the connection.
 * - cache_size: the default 2 MB spills a 100,000-entry load to the temporary file and
 *   reads it back; 64 MB is a ceiling, used only as the namespace needs it.
 */
static const char *const namespace_pragmas[] = {
    "PRAGMA locking_mode = EXCLUSIVE",
    "PRAGMA journal_mode = MEMORY",
    "PRAGMA cache_size = -65536",
};

/*
 * A namespace in a file outlives its process, never the machine (the mount goes with it):
 * a serving process killed in a write must leave a file the next one can open, so the
 * journal is on disk (synchronous OFF: the kernel has the writes once write() returned,
 * which a process's death does not undo). EXCLUSIVE as above: one serving process at a
 * time uses it, and the lock goes with the process that dies. A cache of 16 MB, not 64:
 * the file's pages are in the kernel's page cache already, and a find over ten nested
 * manifests of 100,000 entries peaked at 240-290 MiB with 64 against 231-235 with 16,
 * with no slower loads (a published 1,000,000-entry manifest mounted in 4.7-4.8 s
 * against 4.9-5.1 s).
 */
static const char *const namespace_file_pragmas[] = {
    "PRAGMA locking_mode = EXCLUSIVE",
    "PRAGMA journal_mode = TRUNCATE",
    "PRAGMA synchronous = OFF",
    "PRAGMA cache_size = -16384",
};

static int open_at(const char *path, bool fresh, struct index **out);

int index_open(struct index **out)
{
	return open_at(NULL, true, out);
}

int index_open_file(const char *path, bool fresh, struct index **out)
{
	return open_at(path, fresh, out);
}

int index_namespace_version(void)
{
	return NAMESPACE_VERSION;
}

int index_load_default_mtime(struct index *idx)
{
	char *text = NULL;
	int rc = index_meta_get(idx, "default_mtime", &text);

	if (rc == 0)
		idx->default_mtime = strtoll(text, NULL, 10);
	free(text);
	return rc == -ENOENT ? 0 : rc;
}

/*
 * Version 0's file (a serving process replaced by an upgrade reopens it) gets the stored_*
 * columns, empty (the build that made it loaded no version 3 manifest), unless a build
 * that added them without a version made it: only "duplicate column name" is let pass,
 * any other refusal (busy, read-only, full) is the open's failure.
 */
static int add_stored_columns(sqlite3 *db)
{
	static const char *const alter[] = {
	    "ALTER TABLE node ADD COLUMN stored_size INTEGER",
	    "ALTER TABLE node ADD COLUMN stored_frame INTEGER",
	    "ALTER TABLE node ADD COLUMN stored_frames BLOB",
	    "ALTER TABLE pack ADD COLUMN stored_size INTEGER",
	    "ALTER TABLE pack ADD COLUMN stored_frame INTEGER",
	    "ALTER TABLE pack ADD COLUMN stored_frames BLOB",
	};

	for (size_t k = 0; k < sizeof(alter) / sizeof(alter[0]); k++) {
		int rc = sqlite3_exec(db, alter[k], NULL, NULL, NULL);
		if (rc != SQLITE_OK &&
		    !(rc == SQLITE_ERROR &&
		      strncmp(sqlite3_errmsg(db), "duplicate column name", 21) == 0))
			return index_db_step_errno(rc);
	}
	return 0;
}

/*
 * Brings a namespace file an earlier serving process made up to NAMESPACE_VERSION, in one
 * transaction. -EPROTO when a newer spoolfs made it (its columns may mean something this
 * one would misread: a downgrade mid-session must remount); else 0 or -errno.
 */
static int upgrade_schema(sqlite3 *db)
{
	int64_t version = 0;
	int rc = index_db_exec_sql(db, "BEGIN IMMEDIATE");

	if (rc < 0)
		return rc;
	rc = index_db_pragma_int(db, "PRAGMA user_version", &version);
	if (rc == 0 && version > NAMESPACE_VERSION)
		rc = -EPROTO;
	if (rc == 0 && version == 0)
		rc = add_stored_columns(db);
	if (rc == 0 && version < NAMESPACE_VERSION)
		rc = index_db_pragma_int(db, SET_VERSION(NAMESPACE_VERSION), NULL);
	if (rc == 0)
		rc = index_db_exec_sql(db, "COMMIT");
	if (rc < 0 && !sqlite3_get_autocommit(db))
		(void)index_db_exec_sql(db, "ROLLBACK"); /* the error to report is rc */
	return rc;
}

static int open_at(const char *path, bool fresh, struct index **out)
{
	struct index *idx = calloc(1, sizeof(*idx));
	struct index_db_stmt defs[NAMESPACE_STMTS];
	int rc;

	*out = NULL;
	if (!idx)
		return -ENOMEM;
	rc = -pthread_mutex_init(&idx->lock, NULL);
	if (rc < 0)
		goto err_free;
	rc = -pthread_mutex_init(&idx->build_lock, NULL);
	if (rc < 0) {
		pthread_mutex_destroy(&idx->lock);
		goto err_free;
	}
	namespace_stmts(idx, defs);
	if (path && fresh && unlink(path) != 0 && errno != ENOENT) {
		rc = -errno;
		goto err_lock;
	}
	rc = index_db_open(path ? path : "", 0, &idx->db);
	if (rc == 0 && path)
		rc = index_db_pragmas(idx->db, namespace_file_pragmas,
		                      sizeof(namespace_file_pragmas) /
		                          sizeof(namespace_file_pragmas[0]));
	else if (rc == 0)
		rc = index_db_pragmas(idx->db, namespace_pragmas,
		                      sizeof(namespace_pragmas) / sizeof(namespace_pragmas[0]));
	if (rc == 0 && fresh)
		rc = index_db_exec_sql(idx->db, namespace_schema_sql);
	else if (rc == 0)
		rc = upgrade_schema(idx->db);
	if (rc == 0)
		rc = index_db_prepare_all(idx->db, defs, NAMESPACE_STMTS);
	if (rc < 0)
		goto err_close;
	*out = idx;
	if (!fresh && (rc = index_load_default_mtime(idx)) != 0) {
		index_close(idx);
		*out = NULL;
	}
	return rc;

err_close:
	index_db_finalize_all(defs, NAMESPACE_STMTS);
	sqlite3_close(idx->db);
err_lock:
	pthread_mutex_destroy(&idx->build_lock);
	pthread_mutex_destroy(&idx->lock);
err_free:
	free(idx);
	return rc;
}

void index_close(struct index *idx)
{
	struct index_db_stmt defs[NAMESPACE_STMTS];

	if (!idx)
		return;
	namespace_stmts(idx, defs);
	index_db_finalize_all(defs, NAMESPACE_STMTS);
	sqlite3_close(idx->db);
	pthread_mutex_destroy(&idx->build_lock);
	pthread_mutex_destroy(&idx->lock);
	free(idx);
}

/* Copies the current row of a NODE_COLUMNS statement. Anything the loader would not have
 * written means the database was changed under us. */
static int row_to_node(sqlite3_stmt *st, struct index_node *out)
{
	const unsigned char *name = sqlite3_column_text(st, 2);
	int name_len = sqlite3_column_bytes(st, 2);
	const unsigned char *sha = sqlite3_column_text(st, 7);
	int sha_len = sqlite3_column_bytes(st, 7);

	if (!name || name_len > INDEX_NAME_MAX || (sha && sha_len != INDEX_SHA256_HEX))
		return -EIO;
	memset(out, 0, sizeof(*out));
	out->ino = (uint64_t)sqlite3_column_int64(st, 0);
	out->parent = (uint64_t)sqlite3_column_int64(st, 1);
	memcpy(out->name, name, (size_t)name_len);
	out->is_dir = sqlite3_column_int(st, 3) != 0;
	out->size = (uint64_t)sqlite3_column_int64(st, 4);
	out->mtime = sqlite3_column_int64(st, 5);
	out->executable = sqlite3_column_int(st, 6) != 0;
	int kind = sqlite3_column_int(st, 8);
	if (kind != INDEX_KIND_FILE && kind != INDEX_KIND_DIR && kind != INDEX_KIND_SYMLINK)
		return -EIO;
	out->kind = (enum index_kind)kind;
	if (out->kind == INDEX_KIND_SYMLINK)
		out->mode = 0777; /* what the kernel shows for every symlink */
	else if (sqlite3_column_type(st, 9) != SQLITE_NULL)
		out->mode = (uint32_t)sqlite3_column_int(st, 9) & 0555;
	else
		out->mode = out->is_dir || out->executable ? 0555 : 0444;
	out->executable = out->kind == INDEX_KIND_FILE && (out->mode & 0111);
	if (sha)
		memcpy(out->sha256, sha, INDEX_SHA256_HEX);
	return 0;
}

/* Steps a NODE_COLUMNS statement expected to give at most one row, then resets it. */
static int step_one_node(sqlite3_stmt *st, struct index_node *out)
{
	int rc = index_db_step(st);

	if (rc == 1)
		rc = row_to_node(st, out);
	else if (rc == 0)
		rc = -ENOENT;
	return index_db_reset_keep(st, rc);
}

static int get_locked(struct index *idx, uint64_t ino, struct index_node *out)
{
	if (ino > INT64_MAX)
		return -ENOENT;
	int rc = index_db_bind_int64(idx->st_get, ":ino", (int64_t)ino);

	if (rc < 0)
		return rc;
	return step_one_node(idx->st_get, out);
}

/* -ENOENT when dir is absent, -ENOTDIR when it is a file, else 0. */
static int check_dir_locked(struct index *idx, uint64_t dir)
{
	struct index_node node;
	int rc = get_locked(idx, dir, &node);

	if (rc < 0)
		return rc;
	return node.is_dir ? 0 : -ENOTDIR;
}

int index_lookup(struct index *idx, uint64_t parent, const char *name, struct index_node *out)
{
	int rc;

	pthread_mutex_lock(&idx->lock);
	if (parent > INT64_MAX) {
		rc = -ENOENT;
		goto out;
	}
	rc = index_db_bind_int64(idx->st_lookup, ":parent", (int64_t)parent);
	if (rc < 0)
		goto out;
	rc = index_db_bind_text(idx->st_lookup, ":name", name, -1);
	if (rc < 0)
		goto out;
	rc = step_one_node(idx->st_lookup, out);
	/* Only a miss needs to know why: the parent may be absent or a file. */
	if (rc == -ENOENT) {
		int prc = check_dir_locked(idx, parent);
		if (prc < 0)
			rc = prc;
	}
out:
	pthread_mutex_unlock(&idx->lock);
	return rc;
}

int index_get(struct index *idx, uint64_t ino, struct index_node *out)
{
	int rc;

	pthread_mutex_lock(&idx->lock);
	rc = get_locked(idx, ino, out);
	pthread_mutex_unlock(&idx->lock);
	return rc;
}

void index_node_path(struct index *idx, const struct index_node *n, char *buf, size_t len)
{
	struct index_node cur = *n;
	size_t used = 1;

	/* Built right to left: each parent's name goes in front of what we have. */
	buf[len - 1] = '\0';
	pthread_mutex_lock(&idx->lock);
	for (int depth = 0; depth < 256 && cur.ino != INDEX_ROOT_INO; depth++) {
		size_t name_len = strlen(cur.name), sep = used > 1 ? 1 : 0;
		if (used + name_len + sep > len)
			break;
		used += name_len + sep;
		memcpy(buf + len - used, cur.name, name_len);
		if (sep)
			buf[len - used + name_len] = '/';
		if (get_locked(idx, cur.parent, &cur) != 0)
			break;
	}
	pthread_mutex_unlock(&idx->lock);
	memmove(buf, buf + len - used, used);
}

int index_get_url(struct index *idx, uint64_t ino, char **url)
{
	sqlite3_stmt *st = idx->st_get_url;
	int rc;

	*url = NULL;
	pthread_mutex_lock(&idx->lock);
	if (ino > INT64_MAX) {
		rc = -ENOENT;
		goto out;
	}
	rc = index_db_bind_int64(st, ":ino", (int64_t)ino);
	if (rc < 0)
		goto out;
	rc = index_db_step(st);
	if (rc == 1) {
		const unsigned char *u = sqlite3_column_text(st, 1);
		if (sqlite3_column_int(st, 0))
			rc = -EISDIR;
		else if (!u)
			rc = -ENOENT;
		else if (!(*url = strdup((const char *)u)))
			rc = -ENOMEM;
		else
			rc = 0;
	} else if (rc == 0) {
		rc = -ENOENT;
	}
	rc = index_db_reset_keep(st, rc);
	if (rc < 0) {
		free(*url);
		*url = NULL;
	}
out:
	pthread_mutex_unlock(&idx->lock);
	return rc;
}

int index_readdir(struct index *idx, uint64_t dir, uint64_t cookie, index_dir_fn fn, void *ctx)
{
	sqlite3_stmt *st = idx->st_readdir;
	struct index_node child;
	int rc;

	pthread_mutex_lock(&idx->lock);
	rc = check_dir_locked(idx, dir);
	if (rc < 0)
		goto out;
	/* The root is its own parent; starting above its inode keeps it out of its listing. */
	if (cookie < INDEX_ROOT_INO)
		cookie = INDEX_ROOT_INO;
	if (cookie > INT64_MAX)
		goto out;
	rc = index_db_bind_int64(st, ":dir", (int64_t)dir);
	if (rc == 0)
		rc = index_db_bind_int64(st, ":cookie", (int64_t)cookie);
	if (rc < 0)
		goto out;
	while ((rc = index_db_step(st)) == 1) {
		rc = row_to_node(st, &child);
		if (rc < 0)
			break;
		rc = fn(ctx, &child, child.ino);
		if (rc != 0) {
			/* 1 means "buffer full", which is not an error for our caller. */
			rc = rc > 0 ? 0 : rc;
			break;
		}
	}
	rc = index_db_reset_keep(st, rc);
out:
	pthread_mutex_unlock(&idx->lock);
	return rc;
}

static int compute_totals_locked(struct index *idx)
{
	sqlite3_stmt *st = idx->st_totals;
	int rc = index_db_step(st);

	if (rc == 1) {
		idx->total_files = (uint64_t)sqlite3_column_int64(st, 0);
		idx->total_dirs = (uint64_t)sqlite3_column_int64(st, 1);
		idx->total_bytes = (uint64_t)sqlite3_column_int64(st, 2);
		rc = 0;
	} else if (rc == 0) {
		rc = -EIO; /* an aggregate always gives its row */
	}
	rc = index_db_reset_keep(st, rc);
	idx->totals_valid = rc == 0;
	return rc;
}

int index_totals(struct index *idx, uint64_t *files, uint64_t *dirs, uint64_t *bytes)
{
	int rc = 0;

	pthread_mutex_lock(&idx->lock);
	if (!idx->totals_valid)
		rc = compute_totals_locked(idx);
	if (rc == 0) {
		*files = idx->total_files;
		*dirs = idx->total_dirs;
		*bytes = idx->total_bytes;
	}
	pthread_mutex_unlock(&idx->lock);
	return rc;
}

const char *index_check_segment(const char *name, size_t len)
{
	if (len == 0)
		return "an empty segment";
	if (memchr(name, '\0', len))
		return "a NUL byte";
	if (memchr(name, '/', len))
		return "a '/' in a segment";
	if (len == 1 && name[0] == '.')
		return "a \".\" segment";
	if (len == 2 && name[0] == '.' && name[1] == '.')
		return "a \"..\" segment";
	if (len > INDEX_NAME_MAX)
		return "a segment longer than 255 bytes";
	return NULL;
}

const char *index_check_root_segment(const char *name, size_t len)
{
	if (len == strlen(INDEX_RESERVED_ROOT_NAME) &&
	    memcmp(name, INDEX_RESERVED_ROOT_NAME, len) == 0)
		return "the name of the mount's own status directory (" INDEX_RESERVED_ROOT_NAME
		       ") at the root";
	return index_check_segment(name, len);
}

int index_step_ino(sqlite3_stmt *st, uint64_t ino)
{
	int rc = ino > INT64_MAX ? -ENOENT : index_db_bind_int64(st, ":ino", (int64_t)ino);

	if (rc == 0)
		rc = index_db_step(st);
	return rc == 0 ? -ENOENT : rc;
}

int index_readlink(struct index *idx, uint64_t ino, char *buf, size_t len)
{
	sqlite3_stmt *st = idx->st_readlink;
	int rc;

	pthread_mutex_lock(&idx->lock);
	rc = index_step_ino(st, ino);
	if (rc == 1) {
		const unsigned char *target = sqlite3_column_text(st, 1);
		size_t n = (size_t)sqlite3_column_bytes(st, 1);
		if (sqlite3_column_int(st, 0) != INDEX_KIND_SYMLINK)
			rc = -EINVAL;
		else if (!target || n > INDEX_SYMLINK_MAX)
			rc = -EIO; /* the builder let neither in */
		else if (n + 1 > len)
			rc = -ERANGE;
		else {
			memcpy(buf, target, n + 1);
			rc = (int)n;
		}
	}
	rc = index_db_reset_keep(st, rc);
	pthread_mutex_unlock(&idx->lock);
	return rc;
}

/*
 * An object reference in a row of st: sha_col its sha256 (NULL: -ENODATA, nothing set),
 * size_col its size, url_col its URL, strdup'd into *url. The shape of a pack, a hash list
 * and a nested manifest alike. 0 or -errno.
 */
static int row_ref(sqlite3_stmt *st, int sha_col, int size_col, int url_col,
                   char sha256[INDEX_SHA256_HEX + 1], uint64_t *size, char **url)
{
	const unsigned char *sha = sqlite3_column_text(st, sha_col);
	const unsigned char *u = sqlite3_column_text(st, url_col);

	if (sqlite3_column_type(st, sha_col) == SQLITE_NULL)
		return -ENODATA;
	if (!sha || !u || sqlite3_column_bytes(st, sha_col) != INDEX_SHA256_HEX)
		return -EIO; /* the builder let neither in */
	*url = strdup((const char *)u);
	if (!*url)
		return -ENOMEM;
	memcpy(sha256, sha, INDEX_SHA256_HEX + 1);
	*size = (uint64_t)sqlite3_column_int64(st, size_col);
	return 0;
}

int index_get_nested(struct index *idx, uint64_t ino, struct index_nested_ref *out)
{
	sqlite3_stmt *st = idx->st_get_nested;
	int rc;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&idx->lock);
	rc = index_step_ino(st, ino);
	if (rc == 1)
		rc = sqlite3_column_int(st, 0) != INDEX_KIND_DIR
		         ? -ENOTDIR
		         : row_ref(st, 1, 2, 3, out->sha256, &out->size, &out->url);
	rc = index_db_reset_keep(st, rc);
	pthread_mutex_unlock(&idx->lock);
	return rc;
}

/* Columns of st_get_object after the node's. */
enum {
	OBJECT_URL = 10,
	OBJECT_ETAG,
	OBJECT_PACK_SHA256,
	OBJECT_PACK_SIZE,
	OBJECT_PACK_OFFSET,
	OBJECT_PACK_URL,
	OBJECT_CHUNK_SHA256,
	OBJECT_CHUNK_SIZE,
	OBJECT_CHUNK_URL,
	OBJECT_STORED, /* size, frame, frames: the file's own object's */
	OBJECT_PACK_STORED = OBJECT_STORED + 3,
};

/*
 * How an object of `size` bytes is stored, from the row's three columns from col on (size,
 * frame, the frame table's length in bytes) into out: the table itself is not read here
 * (index_get_stored_frames), so that an open that joins a running flight, or a getxattr,
 * costs the same whatever the table's size. 0, or -EIO for a table the builder would not
 * have let in (another length than the object's frame count).
 */
static int row_to_stored(sqlite3_stmt *st, int col, uint64_t size, struct index_stored *out)
{
	if (sqlite3_column_type(st, col + 1) == SQLITE_NULL)
		return 0;
	out->size = (uint64_t)sqlite3_column_int64(st, col);
	out->frame = (uint64_t)sqlite3_column_int64(st, col + 1);
	if (out->frame == 0)
		return -EIO;
	out->n_frames = size / out->frame + (size % out->frame != 0);
	if (sqlite3_column_type(st, col + 2) == SQLITE_NULL)
		return 0;
	if ((uint64_t)sqlite3_column_int64(st, col + 2) != out->n_frames * INDEX_FRAME_LE_BYTES)
		return -EIO;
	out->in_index = true;
	return 0;
}

/* A file's part of st_get_object's row into out. 0 or -errno. */
static int row_to_object(sqlite3_stmt *st, struct index_object_ref *out)
{
	const unsigned char *etag = sqlite3_column_text(st, OBJECT_ETAG);
	int rc;

	snprintf(out->etag, sizeof(out->etag), "%s", etag ? (const char *)etag : "");
	rc = row_ref(st, OBJECT_PACK_SHA256, OBJECT_PACK_SIZE, OBJECT_PACK_URL,
	             out->pack.pack_sha256, &out->pack.pack_size, &out->pack.url);
	if (rc == 0)
		out->pack.offset = (uint64_t)sqlite3_column_int64(st, OBJECT_PACK_OFFSET);
	if (rc == 0)
		rc = row_to_stored(st, OBJECT_PACK_STORED, out->pack.pack_size, &out->pack.stored);
	if (rc == -ENODATA) { /* not packed: the file is an object of its own */
		const unsigned char *u = sqlite3_column_text(st, OBJECT_URL);
		if (!u)
			return -ENOENT; /* as index_get_url says of a file without one */
		out->url = strdup((const char *)u);
		rc = out->url ? 0 : -ENOMEM;
		if (rc == 0)
			rc = row_to_stored(st, OBJECT_STORED, out->node.size, &out->stored);
	}
	if (rc)
		return rc;
	rc = row_ref(st, OBJECT_CHUNK_SHA256, OBJECT_CHUNK_SIZE, OBJECT_CHUNK_URL,
	             out->chunks.sha256, &out->chunks.chunk_size, &out->chunks.url);
	return rc == -ENODATA ? 0 : rc;
}

int index_get_object(struct index *idx, uint64_t ino, struct index_object_ref *out)
{
	sqlite3_stmt *st = idx->st_get_object;
	int rc;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&idx->lock);
	rc = index_step_ino(st, ino);
	if (rc == 1)
		rc = row_to_node(st, &out->node);
	if (rc == 0 && out->node.kind == INDEX_KIND_FILE)
		rc = row_to_object(st, out);
	rc = index_db_reset_keep(st, rc);
	pthread_mutex_unlock(&idx->lock);
	if (rc)
		index_object_ref_free(out);
	return rc;
}

void index_object_ref_free(struct index_object_ref *ref)
{
	free(ref->url);
	free(ref->pack.url);
	free(ref->chunks.url);
	ref->url = ref->pack.url = ref->chunks.url = NULL;
}

int index_get_stored_frames(struct index *idx, uint64_t ino, unsigned char **le, size_t *le_len)
{
	sqlite3_stmt *st = idx->st_get_frames;
	int rc;

	*le = NULL;
	*le_len = 0;
	pthread_mutex_lock(&idx->lock);
	rc = index_step_ino(st, ino);
	if (rc == 1 && sqlite3_column_type(st, 0) == SQLITE_NULL)
		rc = -ENOENT;
	if (rc == 1) {
		const void *blob = sqlite3_column_blob(st, 0);
		size_t len = (size_t)sqlite3_column_bytes(st, 0);
		*le = malloc(len ? len : 1);
		rc = *le ? 0 : -ENOMEM;
		if (rc == 0 && len)
			memcpy(*le, blob, len);
		if (rc == 0)
			*le_len = len;
	}
	rc = index_db_reset_keep(st, rc);
	pthread_mutex_unlock(&idx->lock);
	if (rc) {
		free(*le);
		*le = NULL;
		*le_len = 0;
	}
	return rc;
}

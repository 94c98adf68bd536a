/*
 * index.c owns the sqlite connections: the schemas, the session's namespace table and the
 * spool records, and every statement that reads them at run time.
 *
 * Lock: idx->lock serialises every statement on the namespace connection, idx->spool_lock
 * every statement on the spool connection; both are opened SQLITE_OPEN_NOMUTEX because
 * those locks already do sqlite's job. They are the innermost locks of the program: nothing
 * here calls out while holding one, except index_readdir's callback, which must not call
 * back in.
 *
 * Namespace (a private temporary database: "" to sqlite, deleted when closed, so two
 * mounts never see each other's and a crash leaves none behind):
 *   node(ino INTEGER PRIMARY KEY, parent, name, is_dir, size, mtime, executable, sha256, url)
 *     Built at every open: a session is a snapshot. Its indexes are built by the loader
 *     once the rows are in (index_namespace_indexes), which is cheaper than updating them
 *     per insert: UNIQUE node_name(parent, name) serves lookup, node_parent(parent), which
 *     carries the rowid, serves readdir in inode order.
 * Spool records (the cache directory's index.db, PRAGMA user_version =
 * INDEX_SCHEMA_VERSION, shared by every mount of that directory):
 *   spool_object(key PRIMARY KEY, complete, size, last_used), spool_range(key, off_start,
 *   off_end), spool_seal(key PRIMARY KEY, seal): kept across sessions so a persistent
 *   cache can resume.
 */
#include "index/index_i.h"
#include "index/ranges.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NODE_COLUMNS "ino, parent, name, is_dir, size, mtime, executable, sha256"

static const char spool_schema_sql[] = "CREATE TABLE IF NOT EXISTS spool_object("

                                       " key TEXT PRIMARY KEY NOT NULL,"
                                       " complete INTEGER NOT NULL DEFAULT 0,"
                                       " size INTEGER NOT NULL DEFAULT 0,"
                                       " last_used INTEGER NOT NULL DEFAULT 0);"
                                       "CREATE TABLE IF NOT EXISTS spool_range("
                                       " key TEXT NOT NULL,"
                                       " off_start INTEGER NOT NULL,"
                                       " off_end INTEGER NOT NULL,"
                                       " PRIMARY KEY(key, off_start)) WITHOUT ROWID;"
                                       /* Who the spool file was when recorded complete:
                                        * a separate table, so a cache stays readable by
                                        * the spoolfs before it (which ignores it). A
                                        * forgotten or reset object loses its seal. */
                                       "CREATE TABLE IF NOT EXISTS spool_seal("
                                       " key TEXT PRIMARY KEY NOT NULL,"
                                       " seal TEXT NOT NULL) WITHOUT ROWID;"
                                       "CREATE TRIGGER IF NOT EXISTS spool_seal_forget"
                                       " AFTER DELETE ON spool_object BEGIN"
                                       " DELETE FROM spool_seal WHERE key = old.key; END;"
                                       "CREATE TRIGGER IF NOT EXISTS spool_seal_reset"
                                       " AFTER UPDATE OF complete ON spool_object"
                                       " WHEN new.complete = 0 BEGIN"
                                       " DELETE FROM spool_seal WHERE key = old.key; END;";

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
    " listed INTEGER NOT NULL DEFAULT 1);"
    "INSERT INTO node(ino, parent, name, is_dir) VALUES(1, 1, '', 1);";

int index_namespace_indexes(struct index *idx)
{
	return index_sqlite_errno(
	    sqlite3_exec(idx->db,
	                 "CREATE UNIQUE INDEX IF NOT EXISTS node_name ON node(parent, name);"
	                 "CREATE INDEX IF NOT EXISTS node_parent ON node(parent);",
	                 NULL, NULL, NULL));
}

int index_sqlite_errno(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_OK:
	case SQLITE_ROW:
	case SQLITE_DONE:
		return 0;
	case SQLITE_NOMEM:
		return -ENOMEM;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return -EBUSY;
	case SQLITE_FULL:
		return -ENOSPC;
	case SQLITE_PERM:
	case SQLITE_AUTH:
		return -EACCES;
	case SQLITE_READONLY:
		return -EROFS;
	case SQLITE_CANTOPEN:
		return -ENOENT;
	case SQLITE_TOOBIG:
		return -E2BIG;
	case SQLITE_CONSTRAINT:
		return -EEXIST;
	case SQLITE_MISUSE:
	case SQLITE_RANGE:
		return -EINVAL;
	default:
		return -EIO;
	}
}

int index_step_errno(int rc)
{
	int e = index_sqlite_errno(rc);

	/* A step that neither gave a row nor finished, or a reset that reported an error, failed
	 * whatever the code says. */
	return e < 0 ? e : -EIO;
}

static int param_index(sqlite3_stmt *st, const char *name)
{
	int i = sqlite3_bind_parameter_index(st, name);

	return i > 0 ? i : -EINVAL;
}

int index_bind_int64(sqlite3_stmt *st, const char *name, int64_t v)
{
	int i = param_index(st, name);

	if (i < 0)
		return i;
	return index_sqlite_errno(sqlite3_bind_int64(st, i, v));
}

int index_bind_text(sqlite3_stmt *st, const char *name, const char *s, int len)
{
	int i = param_index(st, name);

	if (i < 0)
		return i;
	/* Callers keep s alive until the statement is reset, so sqlite need not copy it. */
	return index_sqlite_errno(sqlite3_bind_text(st, i, s, len, SQLITE_STATIC));
}

int index_bind_null(sqlite3_stmt *st, const char *name)
{
	int i = param_index(st, name);

	if (i < 0)
		return i;
	return index_sqlite_errno(sqlite3_bind_null(st, i));
}

int index_step_done(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);
	int ret = rc == SQLITE_DONE ? 0 : rc == SQLITE_ROW ? -EIO : index_step_errno(rc);
	int rrc = sqlite3_reset(st);

	if (ret == 0 && rrc != SQLITE_OK)
		ret = index_step_errno(rrc);
	return ret;
}

int index_begin(struct index *idx)
{
	return index_step_done(idx->st_begin);
}

int index_set_default_mtime(struct index *idx, int64_t mtime)
{
	sqlite3_stmt *st = NULL;
	int rc;

	pthread_mutex_lock(&idx->lock);
	idx->default_mtime = mtime;
	/* The root is made with the namespace, before anyone knew the time to give it. Once, at
	 * start-up: not worth a statement kept for the session. */
	rc = index_sqlite_errno(sqlite3_prepare_v2(
	    idx->db, "UPDATE node SET mtime = :mtime WHERE ino = 1", -1, &st, NULL));
	if (rc == 0)
		rc = index_bind_int64(st, ":mtime", mtime);
	if (rc == 0)
		rc = index_step_done(st);
	sqlite3_finalize(st);
	pthread_mutex_unlock(&idx->lock);
	return rc;
}

int index_commit(struct index *idx)
{
	return index_step_done(idx->st_commit);
}

void index_rollback(struct index *idx)
{
	/* A failed statement may already have rolled the transaction back; that is fine. */
	if (!sqlite3_get_autocommit(idx->db))
		(void)index_step_done(idx->st_rollback);
}

static int prepare(sqlite3 *db, const char *sql, sqlite3_stmt **st)
{
	return index_sqlite_errno(
	    sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL));
}

struct stmt_def {
	sqlite3_stmt **st;
	const char *sql;
};

static int prepare_defs(sqlite3 *db, const struct stmt_def *defs, size_t n)
{
	int rc = 0;

	for (size_t i = 0; i < n && rc == 0; i++)
		rc = prepare(db, defs[i].sql, defs[i].st);
	return rc;
}

static int prepare_namespace(struct index *idx)
{
	const struct stmt_def defs[] = {
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
	    {&idx->st_mark_listed, "UPDATE node SET listed = 1 WHERE ino = :ino"},
	    {&idx->st_insert_entry,
	     /* OR IGNORE: the first entry of a name wins (node_name is UNIQUE). */
	     "INSERT OR IGNORE INTO node(parent, name, is_dir, size, mtime, sha256, url, etag,"
	     " listed) VALUES(:parent, :name, :is_dir, :size, :mtime, :sha256, :url, :etag,"
	     " :listed)"},
	};

	return prepare_defs(idx->db, defs, sizeof(defs) / sizeof(defs[0]));
}

static int prepare_spool(struct index *idx)
{
	const struct stmt_def defs[] = {
	    {&idx->st_spool_begin, "BEGIN IMMEDIATE"},
	    {&idx->st_spool_commit, "COMMIT"},
	    {&idx->st_spool_rollback, "ROLLBACK"},
	    {&idx->st_obj_touch, "INSERT INTO spool_object(key, complete) VALUES(:key, 0)"
	                         " ON CONFLICT(key) DO NOTHING"},
	    {&idx->st_obj_complete, "INSERT INTO spool_object(key, complete) VALUES(:key, 1)"
	                            " ON CONFLICT(key) DO UPDATE SET complete = 1"},
	    {&idx->st_obj_forget, "DELETE FROM spool_object WHERE key = :key"},
	    {&idx->st_obj_reset, "UPDATE spool_object SET complete = 0 WHERE key = :key"},
	    {&idx->st_seal_set, "INSERT INTO spool_seal(key, seal) VALUES(:key, :seal)"
	                        " ON CONFLICT(key) DO UPDATE SET seal = excluded.seal"},
	    {&idx->st_range_clear, "DELETE FROM spool_range WHERE key = :key"},
	    {&idx->st_range_insert, "INSERT INTO spool_range(key, off_start, off_end)"
	                            " VALUES(:key, :start, :end)"},
	};

	return prepare_defs(idx->spool_db, defs, sizeof(defs) / sizeof(defs[0]));
}

static void finalize_all(struct index *idx)
{
	sqlite3_stmt **all[] = {
	    &idx->st_lookup,       &idx->st_get,
	    &idx->st_get_url,      &idx->st_readdir,
	    &idx->st_begin,        &idx->st_commit,
	    &idx->st_rollback,     &idx->st_listed,
	    &idx->st_get_etag,     &idx->st_mark_listed,
	    &idx->st_insert_entry, &idx->st_spool_begin,
	    &idx->st_spool_commit, &idx->st_spool_rollback,
	    &idx->st_obj_touch,    &idx->st_obj_complete,
	    &idx->st_obj_forget,   &idx->st_obj_reset,
	    &idx->st_range_clear,  &idx->st_range_insert,
	    &idx->st_seal_set,
	};

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		sqlite3_finalize(*all[i]);
		*all[i] = NULL;
	}
}

/* Runs a one-row pragma and stores its integer result (when out is not NULL). */
static int pragma_int(sqlite3 *db, const char *sql, int64_t *out)
{
	sqlite3_stmt *st = NULL;
	int rc = prepare(db, sql, &st);

	if (rc < 0)
		goto out;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		if (out)
			*out = sqlite3_column_int64(st, 0);
		rc = 0;
	} else {
		rc = rc == SQLITE_DONE ? 0 : index_step_errno(rc);
	}
out:
	sqlite3_finalize(st);
	return rc;
}

static int run_pragmas(sqlite3 *db, const char *const *pragmas, size_t n)
{
	int rc = 0;

	for (size_t i = 0; i < n && rc == 0; i++)
		rc = pragma_int(db, pragmas[i], NULL);
	return rc;
}

#define BUSY_TIMEOUT_MS 5000

/*
 * run_pragmas for pragmas that may be repeated, retried while another connection holds
 * the lock. Switching journal_mode answers SQLITE_BUSY at once, without calling the busy
 * handler, while another process switches the same fresh file to WAL: two mounts started
 * together on a new cache directory failed about one start in ten.
 */
static int run_pragmas_patiently(sqlite3 *db, const char *const *pragmas, size_t n)
{
	int rc = -EBUSY;

	for (int waited_ms = 0; rc == -EBUSY && waited_ms <= BUSY_TIMEOUT_MS; waited_ms += 2) {
		rc = run_pragmas(db, pragmas, n);
		if (rc == -EBUSY)
			sqlite3_sleep(2);
	}
	return rc;
}

/* Creates missing spool tables, upgrading an older cache's. */
static int setup_spool_schema(sqlite3 *db)
{
	int64_t version = 0;
	int rc = index_sqlite_errno(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL));

	if (rc < 0)
		return rc;
	/* Read inside the transaction: another mount may be upgrading the same file. */
	rc = pragma_int(db, "PRAGMA user_version", &version);
	/* A newer spoolfs wrote this cache; its spool records may mean something else. */
	if (rc == 0 && version > INDEX_SCHEMA_VERSION)
		rc = -EPROTO;
	if (rc == 0)
		rc = index_sqlite_errno(sqlite3_exec(db, spool_schema_sql, NULL, NULL, NULL));
	/* Version 2 added the sizes and use times that --cache-max-size evicts by. */
	if (rc == 0 && version == 1)
		rc = index_sqlite_errno(sqlite3_exec(
		    db,
		    "ALTER TABLE spool_object ADD COLUMN size INTEGER NOT NULL DEFAULT 0;"
		    "ALTER TABLE spool_object ADD COLUMN last_used INTEGER NOT NULL DEFAULT 0;",
		    NULL, NULL, NULL));
	if (rc == 0)
		rc = pragma_int(db, "PRAGMA user_version = 2", NULL);
	if (rc == 0)
		rc = index_sqlite_errno(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL));
	if (rc < 0 && !sqlite3_get_autocommit(db))
		sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
	return rc;
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
 * The spool connection, shared with other mounts of the same cache directory through
 * sqlite's own file locking.
 * - journal_mode WAL: readers of one mount never wait for another's writer. It answers with
 *   the mode it got; a filesystem without WAL support keeps the rollback journal, slower
 *   but still correct.
 * - synchronous NORMAL: in WAL mode it loses at most the last transactions on power loss,
 *   never consistency; spool ranges are recorded only after their data is durable.
 */
static const char *const spool_pragmas[] = {
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = NORMAL",
};

/*
 * The spool records hold object keys, which hold URLs, which may hold credentials (a
 * presigned query, user:password@): the database is the owner's alone, as the spool files
 * are. sqlite gives its -wal and -shm files the database's mode. 0 or -errno.
 */
static int make_private(const char *path)
{
	static const char *const sidecars[] = {"-wal", "-shm", "-journal"};
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	char sidecar[4096];
	int rc = 0;

	if (fd < 0)
		return -errno;
	if (fchmod(fd, 0600) != 0)
		rc = -errno;
	close(fd);
	/* Left by an older build or a crash with the old mode; sqlite reuses them as they are. */
	for (size_t i = 0; rc == 0 && i < sizeof(sidecars) / sizeof(sidecars[0]); i++) {
		snprintf(sidecar, sizeof(sidecar), "%s%s", path, sidecars[i]);
		fd = open(sidecar, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd >= 0 && fchmod(fd, 0600) != 0)
			rc = -errno;
		if (fd >= 0)
			close(fd);
	}
	return rc;
}

static int open_connection(const char *path, int flags, sqlite3 **db)
{
	/* "" and ":memory:" are sqlite's own, with no file (a file named ":memory:" was made). */
	int rc = path[0] && strcmp(path, ":memory:") != 0 ? make_private(path) : 0;

	if (rc)
		return rc;
	rc = sqlite3_open_v2(
	    path, db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | flags,
	    NULL);

	if (rc != SQLITE_OK)
		return *db ? index_sqlite_errno(rc) : -ENOMEM;
	/* index.db outlives the session: what a schema found there says is not trusted to run
	 * functions with side effects, nor may SQL corrupt the file's structure. */
	rc = sqlite3_db_config(*db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_db_config(*db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
	if (rc != SQLITE_OK)
		return index_sqlite_errno(rc);
	/* Another mount's writer holds the spool records only for one short transaction. */
	return index_sqlite_errno(sqlite3_busy_timeout(*db, BUSY_TIMEOUT_MS));
}

static int open_index(const char *db_path, int db_flags, struct index **out)
{
	struct index *idx = calloc(1, sizeof(*idx));
	int rc;

	*out = NULL;
	if (!idx)
		return -ENOMEM;
	rc = -pthread_mutex_init(&idx->lock, NULL);
	if (rc < 0)
		goto err_free;
	rc = -pthread_mutex_init(&idx->spool_lock, NULL);
	if (rc < 0)
		goto err_lock;
	rc = open_connection("", 0, &idx->db);
	if (rc == 0)
		rc = run_pragmas(idx->db, namespace_pragmas,
		                 sizeof(namespace_pragmas) / sizeof(namespace_pragmas[0]));
	if (rc == 0)
		rc = index_sqlite_errno(
		    sqlite3_exec(idx->db, namespace_schema_sql, NULL, NULL, NULL));
	if (rc == 0)
		rc = open_connection(db_path, db_flags, &idx->spool_db);
	if (rc == 0)
		rc = run_pragmas_patiently(idx->spool_db, spool_pragmas,
		                           sizeof(spool_pragmas) / sizeof(spool_pragmas[0]));
	if (rc == 0)
		rc = setup_spool_schema(idx->spool_db);
	if (rc == 0)
		rc = prepare_namespace(idx);
	if (rc == 0)
		rc = prepare_spool(idx);
	if (rc < 0)
		goto err_close;
	*out = idx;
	return 0;

err_close:
	finalize_all(idx);
	sqlite3_close(idx->spool_db);
	sqlite3_close(idx->db);
	pthread_mutex_destroy(&idx->spool_lock);
err_lock:
	pthread_mutex_destroy(&idx->lock);
err_free:
	free(idx);
	return rc;
}

int index_open(const char *db_path, struct index **out)
{
	return open_index(db_path, 0, out);
}

const char *index_entry_unsafe(const struct stat *st, mode_t type)
{
	if (S_ISLNK(st->st_mode))
		return "is a symbolic link";
	if ((st->st_mode & S_IFMT) != type)
		return type == S_IFDIR ? "is not a directory" : "is not a regular file";
	if (st->st_uid != geteuid())
		return "is owned by another user";
	if (st->st_mode & (S_IWGRP | S_IWOTH))
		return "is writable by group or others";
	/* Another name for the same file may be anywhere on the filesystem (/etc/...). */
	if (type == S_IFREG && st->st_nlink > 1)
		return "has another name (a hard link, as cp -al makes: copy with cp -a)";
	return NULL;
}

const char *index_entry_at_unsafe(int dirfd, const char *name, mode_t type)
{
	struct stat st;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
		return errno == ENOENT ? NULL : "cannot be examined";
	return index_entry_unsafe(&st, type);
}

/*
 * The records live in a directory only we can write in (fs/ checked it), so what is found
 * there now stays what it is. A planted entry (from when the directory was open to others,
 * or a restored archive) is refused, not removed: index.db may hold what an earlier session
 * kept, and the operator decides what to delete.
 */
int index_open_at(int dirfd, const char *dir_path, struct index **out, char *err, size_t err_len)
{
	static const char *const names[] = {"index.db", "index.db-wal", "index.db-shm",
	                                    "index.db-journal"};
	struct stat held, named;
	char *path = NULL;
	int rc;

	*out = NULL;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		const char *why = index_entry_at_unsafe(dirfd, names[i], S_IFREG);
		if (why) {
			snprintf(err, err_len, "%s/%s %s: refused (remove it)", dir_path, names[i],
			         why);
			return -EPERM;
		}
	}
	/* sqlite takes a name: it must still lead to the directory checked above. */
	if (fstat(dirfd, &held) != 0 || stat(dir_path, &named) != 0 ||
	    held.st_dev != named.st_dev || held.st_ino != named.st_ino) {
		snprintf(err, err_len, "%s was moved or replaced while mounting", dir_path);
		return -ESTALE;
	}
	if (asprintf(&path, "%s/index.db", dir_path) < 0)
		return -ENOMEM;
	rc = open_index(path, SQLITE_OPEN_NOFOLLOW, out);
	if (rc)
		snprintf(err, err_len, "cannot open the index %s: %s%s", path, strerror(-rc),
		         rc == -EIO ? " (damaged, or a schema spoolfs did not make: move it away)"
		                    : "");
	free(path);
	return rc;
}

void index_close(struct index *idx)
{
	if (!idx)
		return;
	finalize_all(idx);
	sqlite3_close(idx->spool_db);
	sqlite3_close(idx->db);
	pthread_mutex_destroy(&idx->spool_lock);
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
	if (sha)
		memcpy(out->sha256, sha, INDEX_SHA256_HEX);
	return 0;
}

/* Steps a NODE_COLUMNS statement expected to give at most one row, then resets it. */
static int step_one_node(sqlite3_stmt *st, struct index_node *out)
{
	int rc = sqlite3_step(st);
	int ret;

	if (rc == SQLITE_ROW)
		ret = row_to_node(st, out);
	else if (rc == SQLITE_DONE)
		ret = -ENOENT;
	else
		ret = index_step_errno(rc);
	rc = sqlite3_reset(st);
	if ((ret == 0 || ret == -ENOENT) && rc != SQLITE_OK)
		ret = index_step_errno(rc);
	return ret;
}

static int get_locked(struct index *idx, uint64_t ino, struct index_node *out)
{
	if (ino > INT64_MAX)
		return -ENOENT;
	int rc = index_bind_int64(idx->st_get, ":ino", (int64_t)ino);

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
	rc = index_bind_int64(idx->st_lookup, ":parent", (int64_t)parent);
	if (rc < 0)
		goto out;
	rc = index_bind_text(idx->st_lookup, ":name", name, -1);
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

int index_get_url(struct index *idx, uint64_t ino, char **url)
{
	sqlite3_stmt *st = idx->st_get_url;
	int rc, rrc;

	*url = NULL;
	pthread_mutex_lock(&idx->lock);
	if (ino > INT64_MAX) {
		rc = -ENOENT;
		goto out;
	}
	rc = index_bind_int64(st, ":ino", (int64_t)ino);
	if (rc < 0)
		goto out;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		const unsigned char *u = sqlite3_column_text(st, 1);
		if (sqlite3_column_int(st, 0))
			rc = -EISDIR;
		else if (!u)
			rc = -ENOENT;
		else if (!(*url = strdup((const char *)u)))
			rc = -ENOMEM;
		else
			rc = 0;
	} else {
		rc = rc == SQLITE_DONE ? -ENOENT : index_step_errno(rc);
	}
	rrc = sqlite3_reset(st);
	if (rc == 0 && rrc != SQLITE_OK) {
		rc = index_step_errno(rrc);
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
	int rc, rrc;

	pthread_mutex_lock(&idx->lock);
	rc = check_dir_locked(idx, dir);
	if (rc < 0)
		goto out;
	/* The root is its own parent; starting above its inode keeps it out of its listing. */
	if (cookie < INDEX_ROOT_INO)
		cookie = INDEX_ROOT_INO;
	if (cookie > INT64_MAX)
		goto out;
	rc = index_bind_int64(st, ":dir", (int64_t)dir);
	if (rc == 0)
		rc = index_bind_int64(st, ":cookie", (int64_t)cookie);
	if (rc < 0)
		goto out;
	for (;;) {
		int step = sqlite3_step(st);
		if (step == SQLITE_DONE)
			break;
		if (step != SQLITE_ROW) {
			rc = index_step_errno(step);
			break;
		}
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
	rrc = sqlite3_reset(st);
	if (rc == 0 && rrc != SQLITE_OK)
		rc = index_step_errno(rrc);
out:
	pthread_mutex_unlock(&idx->lock);
	return rc;
}

static int compute_totals_locked(struct index *idx)
{
	sqlite3_stmt *st = NULL;
	int rc = prepare(idx->db,
	                 "SELECT count(*) - coalesce(sum(is_dir), 0), coalesce(sum(is_dir), 0),"
	                 " coalesce(sum(size), 0) FROM node",
	                 &st);

	if (rc < 0)
		goto out;
	rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		rc = rc == SQLITE_DONE ? -EIO : index_step_errno(rc);
		goto out;
	}
	idx->total_files = (uint64_t)sqlite3_column_int64(st, 0);
	idx->total_dirs = (uint64_t)sqlite3_column_int64(st, 1);
	idx->total_bytes = (uint64_t)sqlite3_column_int64(st, 2);
	idx->totals_valid = true;
	rc = 0;
out:
	sqlite3_finalize(st);
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

/* Transactions on the spool connection; the caller holds idx->spool_lock. */
static int spool_begin(struct index *idx)
{
	return index_step_done(idx->st_spool_begin);
}

static int spool_commit(struct index *idx)
{
	return index_step_done(idx->st_spool_commit);
}

static void spool_rollback(struct index *idx)
{
	if (!sqlite3_get_autocommit(idx->spool_db))
		(void)index_step_done(idx->st_spool_rollback);
}

int index_record_ranges(struct index *idx, const char *key, const struct index_ranges *ranges)
{
	bool began = false;
	int rc;

	pthread_mutex_lock(&idx->spool_lock);
	rc = spool_begin(idx);
	if (rc < 0)
		goto out;
	began = true;
	rc = index_bind_text(idx->st_obj_touch, ":key", key, -1);
	if (rc == 0)
		rc = index_step_done(idx->st_obj_touch);
	if (rc == 0)
		rc = index_bind_text(idx->st_range_clear, ":key", key, -1);
	if (rc == 0)
		rc = index_step_done(idx->st_range_clear);
	if (rc == 0)
		rc = index_bind_text(idx->st_range_insert, ":key", key, -1);
	for (size_t i = 0; rc == 0 && i < ranges->n; i++) {
		const struct index_range *r = &ranges->v[i];
		if (r->end > INT64_MAX) {
			rc = -EFBIG;
			break;
		}
		rc = index_bind_int64(idx->st_range_insert, ":start", (int64_t)r->start);
		if (rc == 0)
			rc = index_bind_int64(idx->st_range_insert, ":end", (int64_t)r->end);
		if (rc == 0)
			rc = index_step_done(idx->st_range_insert);
	}
	if (rc == 0)
		rc = spool_commit(idx);
out:
	if (rc < 0 && began)
		spool_rollback(idx);
	pthread_mutex_unlock(&idx->spool_lock);
	return rc;
}

int index_spool_change(struct index *idx, sqlite3_stmt *obj, const char *key, bool clear_ranges)
{
	return index_spool_change_sealed(idx, obj, key, clear_ranges, NULL);
}

int index_spool_change_sealed(struct index *idx, sqlite3_stmt *obj, const char *key,
                              bool clear_ranges, const char *seal)
{
	bool began = false;
	int rc;

	pthread_mutex_lock(&idx->spool_lock);
	rc = spool_begin(idx);
	if (rc < 0)
		goto out;
	began = true;
	rc = index_bind_text(obj, ":key", key, -1);
	if (rc == 0)
		rc = index_step_done(obj);
	if (rc == 0 && clear_ranges)
		rc = index_bind_text(idx->st_range_clear, ":key", key, -1);
	if (rc == 0 && clear_ranges)
		rc = index_step_done(idx->st_range_clear);
	if (rc == 0 && seal)
		rc = index_bind_text(idx->st_seal_set, ":key", key, -1);
	if (rc == 0 && seal)
		rc = index_bind_text(idx->st_seal_set, ":seal", seal, -1);
	if (rc == 0 && seal)
		rc = index_step_done(idx->st_seal_set);
	if (rc == 0)
		rc = spool_commit(idx);
out:
	if (rc < 0 && began)
		spool_rollback(idx);
	pthread_mutex_unlock(&idx->spool_lock);
	return rc;
}

int index_record_forget(struct index *idx, const char *key)
{
	return index_spool_change(idx, idx->st_obj_forget, key, true);
}

int index_record_sealed(struct index *idx, const char *key, const char *seal)
{
	return index_spool_change_sealed(idx, idx->st_obj_complete, key, false, seal);
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

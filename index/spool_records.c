/*
 * spool_records.c owns struct index_records (records.h): the connection to a cache
 * directory's index.db, its schema and upgrades, and every statement on it, prepared at
 * open and finalized at close (through db_i.h). Ranges are recorded only after their bytes
 * were made durable, so what index_records_lookup returns may be served without a request.
 *
 * Schema (PRAGMA user_version = INDEX_RECORDS_VERSION, shared by every mount of the
 * directory):
 *   spool_object(key PRIMARY KEY, complete, size, last_used), spool_range(key, off_start,
 *   off_end), spool_seal(key PRIMARY KEY, seal): kept across sessions so a persistent
 *   cache can resume.
 *
 * Lock: rec->lock serialises every use of rec->db and its statements; the connection is
 * opened SQLITE_OPEN_NOMUTEX because that lock already does sqlite's job. It is an
 * innermost lock: nothing here calls out while holding it. Other mounts sharing the
 * directory are kept apart by sqlite's file locks (WAL, busy_timeout, BEGIN IMMEDIATE).
 */
#include "index/records.h"
#include "index/db_i.h"
#include "util/ranges.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define INDEX_RECORDS_VERSION 2

enum records_stmt {
	RS_BEGIN,
	RS_COMMIT,
	RS_ROLLBACK,
	RS_OBJ_TOUCH,
	RS_OBJ_COMPLETE,
	RS_OBJ_FORGET,
	RS_OBJ_RESET,
	RS_OBJ_USE,
	RS_OBJ_GET,
	RS_OBJ_KEYS,
	RS_OBJ_BYTES,
	RS_OBJ_LRU,
	RS_SEAL_SET,
	RS_SEAL_GET,
	RS_RANGE_CLEAR,
	RS_RANGE_INSERT,
	RS_RANGE_GET,
	RS_COUNT
};

static const char *const records_sql[RS_COUNT] = {
    [RS_BEGIN] = "BEGIN IMMEDIATE",
    [RS_COMMIT] = "COMMIT",
    [RS_ROLLBACK] = "ROLLBACK",
    [RS_OBJ_TOUCH] = "INSERT INTO spool_object(key, complete) VALUES(:key, 0)"
                     " ON CONFLICT(key) DO NOTHING",
    [RS_OBJ_COMPLETE] = "INSERT INTO spool_object(key, complete) VALUES(:key, 1)"
                        " ON CONFLICT(key) DO UPDATE SET complete = 1",
    [RS_OBJ_FORGET] = "DELETE FROM spool_object WHERE key = :key",
    [RS_OBJ_RESET] = "UPDATE spool_object SET complete = 0 WHERE key = :key",
    [RS_OBJ_USE] =
        "INSERT INTO spool_object(key, complete, size, last_used) VALUES(:key, 0, :size, :now)"
        " ON CONFLICT(key) DO UPDATE SET size = :size, last_used = :now",
    [RS_OBJ_GET] = "SELECT complete FROM spool_object WHERE key = :key",
    [RS_OBJ_KEYS] = "SELECT key FROM spool_object",
    [RS_OBJ_BYTES] = "SELECT coalesce(sum(size), 0) FROM spool_object",
    [RS_OBJ_LRU] = "SELECT key, size FROM spool_object ORDER BY last_used, key LIMIT :max",
    [RS_SEAL_SET] = "INSERT INTO spool_seal(key, seal) VALUES(:key, :seal)"
                    " ON CONFLICT(key) DO UPDATE SET seal = excluded.seal",
    [RS_SEAL_GET] = "SELECT seal FROM spool_seal WHERE key = :key",
    [RS_RANGE_CLEAR] = "DELETE FROM spool_range WHERE key = :key",
    [RS_RANGE_INSERT] = "INSERT INTO spool_range(key, off_start, off_end)"
                        " VALUES(:key, :start, :end)",
    [RS_RANGE_GET] = "SELECT off_start, off_end FROM spool_range WHERE key = :key"
                     " ORDER BY off_start",
};

struct index_records {
	pthread_mutex_t lock;
	/* Guarded by lock: the connection and every statement on it (prepared at open). */
	sqlite3 *db;
	sqlite3_stmt *st[RS_COUNT];
};

static const char schema_sql[] = "CREATE TABLE IF NOT EXISTS spool_object("
                                 " key TEXT PRIMARY KEY NOT NULL,"
                                 " complete INTEGER NOT NULL DEFAULT 0,"
                                 " size INTEGER NOT NULL DEFAULT 0,"
                                 " last_used INTEGER NOT NULL DEFAULT 0);"
                                 "CREATE TABLE IF NOT EXISTS spool_range("
                                 " key TEXT NOT NULL,"
                                 " off_start INTEGER NOT NULL,"
                                 " off_end INTEGER NOT NULL,"
                                 " PRIMARY KEY(key, off_start)) WITHOUT ROWID;"
                                 /* Who the spool file was when recorded complete: a
                                  * separate table, so a cache stays readable by the
                                  * spoolfs before it (which ignores it). A forgotten or
                                  * reset object loses its seal. */
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

/*
 * The connection is shared with other mounts of the same cache directory through sqlite's
 * own file locking.
 * - journal_mode WAL: readers of one mount never wait for another's writer. It answers with
 *   the mode it got; a filesystem without WAL support keeps the rollback journal, slower
 *   but still correct.
 * - synchronous NORMAL: in WAL mode it loses at most the last transactions on power loss,
 *   never consistency; spool ranges are recorded only after their data is durable.
 */
static const char *const records_pragmas[] = {
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = NORMAL",
};

/*
 * index_db_pragmas for pragmas that may be repeated, retried while another connection holds
 * the lock. Switching journal_mode answers SQLITE_BUSY at once, without calling the busy
 * handler, while another process switches the same fresh file to WAL: two mounts started
 * together on a new cache directory failed about one start in ten.
 */
static int run_pragmas_patiently(sqlite3 *db, const char *const *pragmas, size_t n)
{
	int rc = -EBUSY;

	for (int waited_ms = 0; rc == -EBUSY && waited_ms <= INDEX_DB_BUSY_TIMEOUT_MS;
	     waited_ms += 2) {
		rc = index_db_pragmas(db, pragmas, n);
		if (rc == -EBUSY)
			sqlite3_sleep(2);
	}
	return rc;
}

/* Creates missing tables, upgrading an older cache's. Once per open: not worth statements
 * kept for the connection's life. */
static int setup_schema(sqlite3 *db)
{
	int64_t version = 0;
	int rc = index_db_exec_sql(db, "BEGIN IMMEDIATE");

	if (rc < 0)
		return rc;
	/* Read inside the transaction: another mount may be upgrading the same file. */
	rc = index_db_pragma_int(db, "PRAGMA user_version", &version);
	/* A newer spoolfs wrote this cache; its spool records may mean something else. */
	if (rc == 0 && version > INDEX_RECORDS_VERSION)
		rc = -EPROTO;
	if (rc == 0)
		rc = index_db_exec_sql(db, schema_sql);
	/* Version 2 added the sizes and use times that --cache-max-size evicts by. */
	if (rc == 0 && version == 1)
		rc = index_db_exec_sql(
		    db,
		    "ALTER TABLE spool_object ADD COLUMN size INTEGER NOT NULL DEFAULT 0;"
		    "ALTER TABLE spool_object ADD COLUMN last_used INTEGER NOT NULL DEFAULT 0;");
	if (rc == 0)
		rc = index_db_pragma_int(db, "PRAGMA user_version = 2", NULL);
	if (rc == 0)
		rc = index_db_exec_sql(db, "COMMIT");
	if (rc < 0 && !sqlite3_get_autocommit(db))
		(void)index_db_exec_sql(db, "ROLLBACK"); /* the error to report is rc */
	return rc;
}

/* rec's statements as index/db.c's tables take them. */
static void records_stmts(struct index_records *rec, struct index_db_stmt defs[RS_COUNT])
{
	for (size_t i = 0; i < RS_COUNT; i++)
		defs[i] = (struct index_db_stmt){.st = &rec->st[i], .sql = records_sql[i]};
}

static void finalize_all(struct index_records *rec)
{
	struct index_db_stmt defs[RS_COUNT];

	records_stmts(rec, defs);
	index_db_finalize_all(defs, RS_COUNT);
}

static int open_records(const char *db_path, int db_flags, struct index_records **out)
{
	struct index_records *rec = calloc(1, sizeof(*rec));
	int rc;

	*out = NULL;
	if (!rec)
		return -ENOMEM;
	rc = -pthread_mutex_init(&rec->lock, NULL);
	if (rc < 0)
		goto err_free;
	rc = index_db_open(db_path, db_flags, &rec->db);
	if (rc == 0)
		rc = run_pragmas_patiently(rec->db, records_pragmas,
		                           sizeof(records_pragmas) / sizeof(records_pragmas[0]));
	if (rc == 0)
		rc = setup_schema(rec->db);
	if (rc == 0) {
		struct index_db_stmt defs[RS_COUNT];
		records_stmts(rec, defs);
		rc = index_db_prepare_all(rec->db, defs, RS_COUNT);
	}
	if (rc < 0)
		goto err_close;
	*out = rec;
	return 0;

err_close:
	finalize_all(rec);
	sqlite3_close(rec->db);
	pthread_mutex_destroy(&rec->lock);
err_free:
	free(rec);
	return rc;
}

int index_records_open(const char *db_path, struct index_records **out)
{
	return open_records(db_path, 0, out);
}

const char *index_records_file_unsafe(const struct stat *st, mode_t type)
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

const char *index_records_file_unsafe_at(int dirfd, const char *name, mode_t type)
{
	struct stat st;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
		return errno == ENOENT ? NULL : "cannot be examined";
	return index_records_file_unsafe(&st, type);
}

/*
 * The records live in a directory only we can write in (fetch/cache/cache_dir.c checked it), so
 * what is found there now stays what it is. A planted entry (from when the directory was open to
 * others, or a restored archive) is refused, not removed: index.db may hold what an earlier session
 * kept, and the operator decides what to delete.
 */
int index_records_open_at(int dirfd, const char *dir_path, struct index_records **out, char *err,
                          size_t err_len)
{
	static const char *const names[] = {"index.db", "index.db-wal", "index.db-shm",
	                                    "index.db-journal"};
	struct stat held, named;
	char *path = NULL;
	int rc;

	*out = NULL;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		const char *why = index_records_file_unsafe_at(dirfd, names[i], S_IFREG);
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
	rc = open_records(path, SQLITE_OPEN_NOFOLLOW, out);
	if (rc)
		snprintf(err, err_len, "cannot open the index %s: %s%s", path, strerror(-rc),
		         rc == -EIO ? " (damaged, or a schema spoolfs did not make: move it away)"
		                    : "");
	free(path);
	return rc;
}

int index_records_reopen_at(struct index_records *rec, int dirfd, const char *dir_path, char *err,
                            size_t err_len)
{
	struct index_records *fresh = NULL;
	int rc = index_records_open_at(dirfd, dir_path, &fresh, err, err_len);

	if (rc)
		return rc;
	pthread_mutex_lock(&rec->lock);
	finalize_all(rec);
	sqlite3_close(rec->db);
	rec->db = fresh->db;
	memcpy(rec->st, fresh->st, sizeof(rec->st));
	pthread_mutex_unlock(&rec->lock);
	pthread_mutex_destroy(&fresh->lock);
	free(fresh);
	return 0;
}

void index_records_close(struct index_records *rec)
{
	if (!rec)
		return;
	finalize_all(rec);
	sqlite3_close(rec->db);
	pthread_mutex_destroy(&rec->lock);
	free(rec);
}

/* ---- writes: one BEGIN IMMEDIATE transaction each; each takes rec->lock ------------------ */

static int begin(struct index_records *rec)
{
	return index_db_exec(rec->st[RS_BEGIN]);
}

/* Commits after rc == 0, else rolls back what began; returns rc or the commit's error. */
static int finish(struct index_records *rec, int rc)
{
	if (rc == 0)
		rc = index_db_exec(rec->st[RS_COMMIT]);
	/* A failed statement may already have rolled the transaction back; that is fine. A
	 * failed rollback leaves nothing to do but report rc, the error that caused it. */
	if (rc < 0 && !sqlite3_get_autocommit(rec->db))
		(void)index_db_exec(rec->st[RS_ROLLBACK]);
	return rc;
}

/* Runs statement `which` of key in the caller's transaction. */
static int exec_key(struct index_records *rec, enum records_stmt which, const char *key)
{
	int rc = index_db_bind_text(rec->st[which], ":key", key, -1);

	return rc ? rc : index_db_exec(rec->st[which]);
}

int index_records_set_ranges(struct index_records *rec, const char *key,
                             const struct util_ranges *ranges)
{
	sqlite3_stmt *ins = rec->st[RS_RANGE_INSERT];
	int rc;

	pthread_mutex_lock(&rec->lock);
	rc = begin(rec);
	if (rc < 0)
		goto out;
	rc = exec_key(rec, RS_OBJ_TOUCH, key);
	if (rc == 0)
		rc = exec_key(rec, RS_RANGE_CLEAR, key);
	if (rc == 0)
		rc = index_db_bind_text(ins, ":key", key, -1);
	for (size_t i = 0; rc == 0 && i < ranges->n; i++) {
		const struct util_range *r = &ranges->v[i];
		if (r->end > INT64_MAX) {
			rc = -EFBIG;
			break;
		}
		rc = index_db_bind_int64(ins, ":start", (int64_t)r->start);
		if (rc == 0)
			rc = index_db_bind_int64(ins, ":end", (int64_t)r->end);
		if (rc == 0)
			rc = index_db_exec(ins);
	}
	rc = finish(rec, rc);
out:
	pthread_mutex_unlock(&rec->lock);
	return rc;
}

/*
 * Runs obj (a spool_object statement with :key) and, with clear_ranges, forgets key's
 * recorded ranges, and records seal as key's (when not NULL), in one transaction.
 */
static int change(struct index_records *rec, enum records_stmt obj, const char *key,
                  bool clear_ranges, const char *seal)
{
	sqlite3_stmt *set = rec->st[RS_SEAL_SET];
	int rc;

	pthread_mutex_lock(&rec->lock);
	rc = begin(rec);
	if (rc < 0)
		goto out;
	rc = exec_key(rec, obj, key);
	if (rc == 0 && clear_ranges)
		rc = exec_key(rec, RS_RANGE_CLEAR, key);
	if (rc == 0 && seal)
		rc = index_db_bind_text(set, ":seal", seal, -1);
	if (rc == 0 && seal)
		rc = exec_key(rec, RS_SEAL_SET, key);
	rc = finish(rec, rc);
out:
	pthread_mutex_unlock(&rec->lock);
	return rc;
}

int index_records_forget(struct index_records *rec, const char *key)
{
	return change(rec, RS_OBJ_FORGET, key, true, NULL);
}

int index_records_mark_sealed(struct index_records *rec, const char *key, const char *seal)
{
	return change(rec, RS_OBJ_COMPLETE, key, false, seal);
}

int index_records_reset(struct index_records *rec, const char *key)
{
	return change(rec, RS_OBJ_RESET, key, true, NULL);
}

int index_records_mark_incomplete(struct index_records *rec, const char *key)
{
	return change(rec, RS_OBJ_RESET, key, false, NULL);
}

int index_records_touch(struct index_records *rec, const char *key, uint64_t size, int64_t now)
{
	sqlite3_stmt *st = rec->st[RS_OBJ_USE];
	int rc;

	pthread_mutex_lock(&rec->lock);
	rc = index_db_bind_text(st, ":key", key, -1);
	if (rc == 0)
		rc = index_db_bind_int64(st, ":size", (int64_t)size);
	if (rc == 0)
		rc = index_db_bind_int64(st, ":now", now);
	if (rc == 0)
		rc = index_db_exec(st);
	pthread_mutex_unlock(&rec->lock);
	return rc;
}

/* ---- reads: each takes rec->lock ------------------------------------------------------- */

int index_records_lookup(struct index_records *rec, const char *key, bool *complete,
                         struct util_ranges *ranges)
{
	sqlite3_stmt *obj = rec->st[RS_OBJ_GET], *rng = rec->st[RS_RANGE_GET];
	int rc;

	util_ranges_clear(ranges);
	pthread_mutex_lock(&rec->lock);
	rc = index_db_bind_text(obj, ":key", key, -1);
	if (rc == 0)
		rc = index_db_bind_text(rng, ":key", key, -1);
	if (rc == 0)
		rc = index_db_step(obj);
	if (rc == 0)
		rc = -ENOENT;
	if (rc < 0)
		goto out;
	*complete = sqlite3_column_int(obj, 0) != 0;
	/* obj stays un-reset meanwhile: its read transaction keeps the ranges read below in the
	 * same snapshot as the completeness read above, whatever another mount commits. */
	while ((rc = index_db_step(rng)) == 1) {
		int64_t start = sqlite3_column_int64(rng, 0), end = sqlite3_column_int64(rng, 1);
		rc = start >= 0 && end >= start
		         ? util_ranges_add(ranges, (uint64_t)start, (uint64_t)end)
		         : -EINVAL;
		if (rc < 0)
			break;
	}
out:
	rc = index_db_reset_keep(rng, rc);
	rc = index_db_reset_keep(obj, rc);
	pthread_mutex_unlock(&rec->lock);
	return rc;
}

int index_records_usage(struct index_records *rec, uint64_t *bytes, struct index_records_entry *lru,
                        size_t max, size_t *n)
{
	sqlite3_stmt *sum = rec->st[RS_OBJ_BYTES], *old = rec->st[RS_OBJ_LRU];
	int rc;

	*bytes = 0;
	*n = 0;
	pthread_mutex_lock(&rec->lock);
	rc = index_db_bind_int64(old, ":max", (int64_t)max);
	if (rc == 0)
		rc = index_db_step(sum);
	if (rc == 0)
		rc = -EIO; /* an aggregate always gives its row */
	if (rc < 0)
		goto out;
	*bytes = (uint64_t)sqlite3_column_int64(sum, 0);
	/* sum stays un-reset meanwhile, so the candidates come from the same snapshot. */
	while (*n < max && (rc = index_db_step(old)) == 1) {
		const unsigned char *key = sqlite3_column_text(old, 0);
		lru[*n].key = strdup(key ? (const char *)key : "");
		lru[*n].size = (uint64_t)sqlite3_column_int64(old, 1);
		if (!lru[*n].key) {
			rc = -ENOMEM;
			break;
		}
		(*n)++;
	}
	if (rc > 0)
		rc = 0;
out:
	rc = index_db_reset_keep(old, rc);
	rc = index_db_reset_keep(sum, rc);
	pthread_mutex_unlock(&rec->lock);
	/* A failure returns nothing, so a caller that gives up on it leaks nothing. */
	while (rc < 0 && *n)
		free(lru[--*n].key);
	return rc;
}

int index_records_keys(struct index_records *rec, char ***keys, size_t *n)
{
	sqlite3_stmt *st = rec->st[RS_OBJ_KEYS];
	char **v = NULL;
	size_t cap = 0;
	int rc;

	*keys = NULL;
	*n = 0;
	pthread_mutex_lock(&rec->lock);
	while ((rc = index_db_step(st)) == 1) {
		const unsigned char *key = sqlite3_column_text(st, 0);
		if (*n == cap) {
			cap = cap ? cap * 2 : 64;
			char **grown = realloc(v, cap * sizeof(*v));
			if (!grown) {
				rc = -ENOMEM;
				break;
			}
			v = grown;
		}
		v[*n] = strdup(key ? (const char *)key : "");
		if (!v[*n]) {
			rc = -ENOMEM;
			break;
		}
		(*n)++;
	}
	rc = index_db_reset_keep(st, rc);
	pthread_mutex_unlock(&rec->lock);
	if (rc) {
		while (*n)
			free(v[--*n]);
		free(v);
		v = NULL;
	}
	*keys = v;
	return rc;
}

int index_records_seal(struct index_records *rec, const char *key, char *seal, size_t len)
{
	sqlite3_stmt *st = rec->st[RS_SEAL_GET];
	int rc;

	seal[0] = '\0';
	pthread_mutex_lock(&rec->lock);
	rc = index_db_bind_text(st, ":key", key, -1);
	if (rc == 0)
		rc = index_db_step(st);
	if (rc == 1) {
		const unsigned char *text = sqlite3_column_text(st, 0);
		snprintf(seal, len, "%s", text ? (const char *)text : "");
		rc = 0;
	} else if (rc == 0) {
		rc = -ENOENT;
	}
	rc = index_db_reset_keep(st, rc);
	pthread_mutex_unlock(&rec->lock);
	return rc;
}

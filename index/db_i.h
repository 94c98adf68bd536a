/*
 * Private to index/: the one way index/ talks to sqlite, after fossil's src/db.c. Every
 * statement is prepared once, when its connection opens, and finalized when it closes; it
 * is bound by parameter name; a step says 1 (a row), 0 (done) or -errno, never an SQLITE_*
 * code, so a result is never both; a statement is reset after every use and the reset is
 * checked, so no read transaction stays open (in WAL mode that would pin a stale snapshot
 * of the shared spool records and hold back checkpoints).
 *
 * Nothing here locks: each caller holds the lock of the connection the statement belongs
 * to (index_i.h; spool_records.c). Nothing here logs: callers get -errno and decide.
 */
#ifndef SPOOLFS_INDEX_DB_I_H
#define SPOOLFS_INDEX_DB_I_H

#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

/* How long a connection waits for another mount's writer (busy_timeout). */
#define INDEX_DB_BUSY_TIMEOUT_MS 5000

/*
 * An sqlite result code as 0 (SQLITE_OK, ROW, DONE) or a negative errno: BUSY and LOCKED
 * -EBUSY, NOMEM and IOERR_NOMEM -ENOMEM, FULL -ENOSPC, PERM and AUTH -EACCES, READONLY
 * -EROFS, CANTOPEN -ENOENT, TOOBIG -E2BIG, CONSTRAINT -EEXIST, MISUSE and RANGE -EINVAL,
 * anything else -EIO.
 */
int index_db_errno(int sqlite_rc);

/* The negative errno of a failed step or reset: never 0, whatever code sqlite returned. */
int index_db_step_errno(int sqlite_rc);

/*
 * Opens (creating) the database at path, for one lock of ours to serialise (NOMUTEX), with
 * busy_timeout set. A file path is made the owner's alone first (with its -wal, -shm and
 * -journal), as it may hold credentials in keys; "" (a private temporary database) and
 * ":memory:" have no file. flags are added to READWRITE | CREATE | NOMUTEX. On failure
 * *db may be set and the caller closes it. 0 or -errno.
 */
int index_db_open(const char *path, int flags, sqlite3 **db);
/* index_db_open for reading an existing file only, never through a symbolic link: nothing
 * is made or changed (a kept namespace, index/copy.c). 0 or -errno. */
int index_db_open_readonly(const char *path, sqlite3 **db);

/* Runs sql (one or more statements, no rows wanted) once: for schemas and one-off changes. */
int index_db_exec_sql(sqlite3 *db, const char *sql);

/* Prepares sql on db for the life of the connection (SQLITE_PREPARE_PERSISTENT). */
int index_db_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **st);

/* A statement of a connection and its text: tables of these are prepared at open and
 * finalized at close. */
struct index_db_stmt {
	sqlite3_stmt **st;
	const char *sql;
};
/* Prepares defs[0..n) in order; on failure the ones made stay for index_db_finalize_all. */
int index_db_prepare_all(sqlite3 *db, const struct index_db_stmt *defs, size_t n);
/* Finalizes and clears every statement of defs (NULL ones too). */
void index_db_finalize_all(const struct index_db_stmt *defs, size_t n);

/* Bind by parameter name; a name the statement lacks is a programming error (-EINVAL).
 * Text is bound SQLITE_STATIC: the caller keeps s alive until the statement is reset. */
int index_db_bind_int64(sqlite3_stmt *st, const char *name, int64_t v);
int index_db_bind_text(sqlite3_stmt *st, const char *name, const char *s, int len);
int index_db_bind_null(sqlite3_stmt *st, const char *name);

/* One step: 1 with a row ready, 0 when done, or -errno. */
int index_db_step(sqlite3_stmt *st);

/* Resets st (and clears nothing bound: every use binds all it names). 0 or -errno: the
 * error of the last step if it failed. */
int index_db_reset(sqlite3_stmt *st);

/* index_db_reset keeping the first error: returns rc when rc < 0, else the reset's result.
 * rc may be a count or a row flag (>= 0), which a clean reset leaves as it is. */
int index_db_reset_keep(sqlite3_stmt *st, int rc);

/* Steps a statement that gives no row, then resets it. 0 or -errno (a row is -EIO). */
int index_db_exec(sqlite3_stmt *st);

/* Runs a one-row pragma once (prepared and finalized here), storing its integer result when
 * out is not NULL. 0 or -errno. */
int index_db_pragma_int(sqlite3 *db, const char *sql, int64_t *out);
/* index_db_pragma_int for each of pragmas[0..n), results dropped, stopping at a failure. */
int index_db_pragmas(sqlite3 *db, const char *const *pragmas, size_t n);

#endif

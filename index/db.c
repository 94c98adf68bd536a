/*
 * db.c owns index/'s use of the sqlite API: opening a connection, preparing, binding,
 * stepping and resetting statements, and turning sqlite's result codes into -errno (see
 * db_i.h). It holds no state and no lock: the caller holds its connection's lock.
 */
#include "index/db_i.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int index_db_errno(int sqlite_rc)
{
	/* An I/O path that ran out of memory (the unix VFS's shared-memory map) is a shortage,
	 * not a failing disk. */
	if (sqlite_rc == SQLITE_IOERR_NOMEM)
		return -ENOMEM;
	switch (sqlite_rc & 0xff) {
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

int index_db_step_errno(int sqlite_rc)
{
	int e = index_db_errno(sqlite_rc);

	/* A step that neither gave a row nor finished, or a reset that reported an error, failed
	 * whatever the code says. */
	return e < 0 ? e : -EIO;
}

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

/* sqlite3_open_v2 with open_flags, then the settings every connection of ours has. */
static int open_configured(const char *path, int open_flags, sqlite3 **db)
{
	int rc = sqlite3_open_v2(path, db, SQLITE_OPEN_NOMUTEX | open_flags, NULL);

	if (rc != SQLITE_OK)
		return *db ? index_db_errno(rc) : -ENOMEM;
	/* index.db outlives the session: what a schema found there says is not trusted to run
	 * functions with side effects, nor may SQL corrupt the file's structure. */
	rc = sqlite3_db_config(*db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_db_config(*db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
	if (rc != SQLITE_OK)
		return index_db_errno(rc);
	/* Another mount's writer holds the spool records only for one short transaction. */
	return index_db_errno(sqlite3_busy_timeout(*db, INDEX_DB_BUSY_TIMEOUT_MS));
}

int index_db_open(const char *path, int flags, sqlite3 **db)
{
	/* "" and ":memory:" are sqlite's own, with no file (a file named ":memory:" was made). */
	int rc = path[0] && strcmp(path, ":memory:") != 0 ? make_private(path) : 0;

	*db = NULL;
	if (rc)
		return rc;
	return open_configured(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | flags, db);
}

int index_db_open_readonly(const char *path, sqlite3 **db)
{
	*db = NULL;
	return open_configured(path, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOFOLLOW, db);
}

int index_db_exec_sql(sqlite3 *db, const char *sql)
{
	return index_db_errno(sqlite3_exec(db, sql, NULL, NULL, NULL));
}

int index_db_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **st)
{
	return index_db_errno(sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL));
}

int index_db_prepare_all(sqlite3 *db, const struct index_db_stmt *defs, size_t n)
{
	int rc = 0;

	for (size_t i = 0; i < n && rc == 0; i++)
		rc = index_db_prepare(db, defs[i].sql, defs[i].st);
	return rc;
}

void index_db_finalize_all(const struct index_db_stmt *defs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		sqlite3_finalize(*defs[i].st);
		*defs[i].st = NULL;
	}
}

static int param_index(sqlite3_stmt *st, const char *name)
{
	int i = sqlite3_bind_parameter_index(st, name);

	return i > 0 ? i : -EINVAL;
}

int index_db_bind_int64(sqlite3_stmt *st, const char *name, int64_t v)
{
	int i = param_index(st, name);

	if (i < 0)
		return i;
	return index_db_errno(sqlite3_bind_int64(st, i, v));
}

int index_db_bind_text(sqlite3_stmt *st, const char *name, const char *s, int len)
{
	int i = param_index(st, name);

	if (i < 0)
		return i;
	return index_db_errno(sqlite3_bind_text(st, i, s, len, SQLITE_STATIC));
}

int index_db_bind_null(sqlite3_stmt *st, const char *name)
{
	int i = param_index(st, name);

	if (i < 0)
		return i;
	return index_db_errno(sqlite3_bind_null(st, i));
}

int index_db_step(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	if (rc == SQLITE_ROW)
		return 1;
	return rc == SQLITE_DONE ? 0 : index_db_step_errno(rc);
}

int index_db_reset(sqlite3_stmt *st)
{
	int rc = sqlite3_reset(st);

	return rc == SQLITE_OK ? 0 : index_db_step_errno(rc);
}

int index_db_reset_keep(sqlite3_stmt *st, int rc)
{
	int rrc = index_db_reset(st);

	return rc < 0 || rrc == 0 ? rc : rrc;
}

int index_db_exec(sqlite3_stmt *st)
{
	int rc = index_db_step(st);

	return index_db_reset_keep(st, rc == 1 ? -EIO : rc);
}

int index_db_pragma_int(sqlite3 *db, const char *sql, int64_t *out)
{
	sqlite3_stmt *st = NULL;
	int rc = index_db_errno(sqlite3_prepare_v2(db, sql, -1, &st, NULL));

	if (rc < 0)
		goto out;
	rc = index_db_step(st);
	if (rc == 1 && out)
		*out = sqlite3_column_int64(st, 0);
	rc = index_db_reset_keep(st, rc < 0 ? rc : 0);
out:
	sqlite3_finalize(st);
	return rc;
}

int index_db_pragmas(sqlite3 *db, const char *const *pragmas, size_t n)
{
	int rc = 0;

	for (size_t i = 0; i < n && rc == 0; i++)
		rc = index_db_pragma_int(db, pragmas[i], NULL);
	return rc;
}

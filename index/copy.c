/*
 * index/copy.c: a loaded namespace copied out to a file and read back (copy.h), with
 * sqlite's backup API: a page copy, so the copy carries the namespace's lookup and readdir
 * indexes as they are, and reading one back costs a fraction of the load that made it.
 */
#include "index/copy.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "index/index_i.h"
#include "util/log.h"

/*
 * The copy is written once, by this connection alone, and renamed into place by the caller
 * only when whole: a journal would protect nothing. secure_delete: the session's meta rows
 * are deleted from the copy, and their bytes (a manifest URL's query) must not stay behind
 * in the page's free space.
 */
static const char *const copy_pragmas[] = {
    "PRAGMA journal_mode = OFF",
    "PRAGMA synchronous = OFF",
    "PRAGMA secure_delete = ON",
};

/* What belongs to the session, not to the manifest's namespace (copy.h). */
static const char session_meta_sql[] = "DELETE FROM meta WHERE key IN ('manifest_url', 'release')";

/* Every URL the namespace holds, in one pass over each table. */
static const char urls_sql[] = "SELECT url, chunk_url, nested_url FROM node"
                               " UNION ALL SELECT url, NULL, NULL FROM pack";

/* Every page of src's main database into dst's, in one step (sqlite3_backup): dst's old
 * content goes, all at once (the backup is one write transaction on dst). 0 or -errno. */
static int backup_all(sqlite3 *dst, sqlite3 *src)
{
	sqlite3_backup *b = sqlite3_backup_init(dst, "main", src, "main");
	int rc, finished;

	if (!b)
		return index_db_step_errno(sqlite3_errcode(dst));
	rc = sqlite3_backup_step(b, -1);
	finished = sqlite3_backup_finish(b);
	if (rc != SQLITE_DONE)
		return index_db_step_errno(rc);
	return index_db_errno(finished);
}

/* -EACCES when a URL of the namespace in db holds a secret, else 0 or -errno. */
static int check_no_secret(sqlite3 *db)
{
	sqlite3_stmt *st = NULL;
	int rc = index_db_errno(sqlite3_prepare_v2(db, urls_sql, -1, &st, NULL));

	while (rc == 0 && (rc = index_db_step(st)) == 1) {
		rc = 0;
		for (int col = 0; col < 3 && rc == 0; col++) {
			const unsigned char *url = sqlite3_column_text(st, col);
			if (url && util_url_has_secret((const char *)url))
				rc = -EACCES;
		}
	}
	sqlite3_finalize(st);
	return rc;
}

int index_copy_save(struct index *idx, const char *path)
{
	sqlite3 *dst = NULL;
	int rc;

	/*
	 * idx->lock is held across the copy's writes: the copy is made before the mount answers
	 * (daemon/kept.h), when no other thread uses the index. The namespace is checked first,
	 * so a copy that would hold a secret is never written at all.
	 */
	pthread_mutex_lock(&idx->lock);
	rc = check_no_secret(idx->db);
	if (rc == 0)
		rc = index_db_open(path, SQLITE_OPEN_NOFOLLOW, &dst);
	if (rc == 0)
		rc = index_db_pragmas(dst, copy_pragmas,
		                      sizeof(copy_pragmas) / sizeof(copy_pragmas[0]));
	if (rc == 0)
		rc = backup_all(dst, idx->db);
	pthread_mutex_unlock(&idx->lock);
	if (rc == 0)
		rc = index_db_exec_sql(dst, session_meta_sql);
	sqlite3_close(dst);
	return rc;
}

/* PRAGMA quick_check on db: 0 when it says "ok", else -EIO with its first complaint in why
 * (or the error of reading the file). */
static int quick_check(sqlite3 *db, char *why, size_t why_len)
{
	sqlite3_stmt *st = NULL;
	int rc = index_db_errno(sqlite3_prepare_v2(db, "PRAGMA quick_check", -1, &st, NULL));

	if (rc == 0)
		rc = index_db_step(st);
	if (rc == 1) {
		const unsigned char *said = sqlite3_column_text(st, 0);
		rc = said && strcmp((const char *)said, "ok") == 0 ? 0 : -EIO;
		if (rc)
			snprintf(why, why_len, "quick_check: %s", said ? (const char *)said : "?");
	} else if (rc == 0) {
		rc = -EIO; /* the pragma always gives a row */
	}
	if (rc < 0 && !why[0])
		snprintf(why, why_len, "%s", sqlite3_errmsg(db));
	sqlite3_finalize(st);
	return rc;
}

/* The checks of copy.h on the copy opened as src: 0, -EPROTO, -EIO or -errno, why said. */
static int check_copy(sqlite3 *src, char *why, size_t why_len)
{
	int64_t version = -1;
	int rc = index_db_pragma_int(src, "PRAGMA user_version", &version);

	if (rc < 0) {
		snprintf(why, why_len, "%s", sqlite3_errmsg(src));
		return rc;
	}
	if (version != index_namespace_version()) {
		snprintf(why, why_len, "schema version %lld, not %d", (long long)version,
		         index_namespace_version());
		return -EPROTO;
	}
	return quick_check(src, why, why_len);
}

int index_copy_restore(struct index *idx, const char *path, char *why, size_t why_len)
{
	sqlite3 *src = NULL;
	int rc;

	why[0] = '\0';
	rc = index_db_open_readonly(path, &src);
	if (rc < 0)
		snprintf(why, why_len, "cannot be opened: %s", strerror(-rc));
	if (rc == 0)
		rc = check_copy(src, why, why_len);
	if (rc == 0) {
		/* Held across the read of the copy: before the mount answers, nothing waits. */
		pthread_mutex_lock(&idx->lock);
		rc = backup_all(idx->db, src);
		/* Computed from the rows that were there before. */
		idx->totals_valid = false;
		pthread_mutex_unlock(&idx->lock);
		if (rc < 0)
			snprintf(why, why_len, "cannot be read back: %s", strerror(-rc));
	}
	/* The namespace is filled now: a failure from here on cannot fall back to a load on top
	 * of it. */
	if (rc == 0 && index_load_default_mtime(idx) != 0) {
		snprintf(why, why_len, "its default mtime cannot be read back");
		rc = -ENOTRECOVERABLE;
	}
	sqlite3_close(src);
	return rc;
}

/*
 * Lazy namespaces: a source that cannot list everything up front (an S3 bucket) fills each
 * directory the first time it is looked up or listed. Directories start unlisted; a
 * listing adds a directory's children and marks it listed in one transaction, so readers
 * see all of a directory or none of it. What is listed stays for the session: a snapshot.
 *
 * Lock: idx->lock, as for every namespace statement (see index_i.h).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "index/index_i.h"

int index_begin_lazy(struct index *idx)
{
	int rc;

	pthread_mutex_lock(&idx->lock);
	rc = index_namespace_indexes(idx);
	if (rc == 0)
		rc = index_db_exec_sql(idx->db, "UPDATE node SET listed = 0 WHERE ino = 1");
	idx->totals_valid = false;
	pthread_mutex_unlock(&idx->lock);
	return rc;
}

int index_dir_listed(struct index *idx, uint64_t dir, bool *listed)
{
	sqlite3_stmt *st = idx->st_listed;
	int rc;

	pthread_mutex_lock(&idx->lock);
	rc = index_step_ino(st, dir);
	if (rc == 1) {
		rc = sqlite3_column_int(st, 0) ? 0 : -ENOTDIR;
		*listed = sqlite3_column_int(st, 1) != 0;
	}
	rc = index_db_reset_keep(st, rc);
	pthread_mutex_unlock(&idx->lock);
	return rc;
}

int index_next_nested_sibling(struct index *idx, uint64_t dir, uint64_t *next, bool *after_listed)
{
	/* Siblings in readdir order (ino): both look-ups are range scans of node_nested, which
	 * holds only nested directories, so a parent's plain children are never scanned. Once
	 * per nested listing: not kept. */
	static const char sql[] =
	    "SELECT (SELECT listed FROM node WHERE parent = d.parent AND ino < d.ino"
	    "        AND nested_sha256 IS NOT NULL ORDER BY ino DESC LIMIT 1),"
	    "       (SELECT ino FROM node WHERE parent = d.parent AND ino > d.ino"
	    "        AND nested_sha256 IS NOT NULL AND listed = 0 ORDER BY ino LIMIT 1)"
	    " FROM node AS d WHERE d.ino = :ino AND d.ino != 1";
	sqlite3_stmt *st = NULL;
	int rc;

	*next = 0;
	*after_listed = false;
	pthread_mutex_lock(&idx->lock);
	rc = index_db_errno(sqlite3_prepare_v2(idx->db, sql, -1, &st, NULL));
	if (rc == 0)
		rc = index_step_ino(st, dir);
	if (rc == 1) {
		*after_listed = sqlite3_column_int(st, 0) != 0;
		*next = (uint64_t)sqlite3_column_int64(st, 1);
		rc = 0;
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&idx->lock);
	return rc;
}

static int bind_text_or_null(sqlite3_stmt *st, const char *name, const char *value)
{
	return value && *value ? index_db_bind_text(st, name, value, -1)
	                       : index_db_bind_null(st, name);
}

static int insert_entry(struct index *idx, uint64_t dir, const struct index_entry *e)
{
	sqlite3_stmt *st = idx->st_insert_entry;
	int rc = index_db_bind_int64(st, ":parent", (int64_t)dir);

	if (rc == 0)
		rc = index_db_bind_text(st, ":name", e->name, -1);
	if (rc == 0)
		rc = index_db_bind_int64(st, ":is_dir", e->is_dir);
	if (rc == 0)
		rc = index_db_bind_int64(st, ":size", e->is_dir ? 0 : (int64_t)e->size);
	if (rc == 0)
		rc = index_db_bind_int64(st, ":mtime", e->mtime ? e->mtime : idx->default_mtime);
	if (rc == 0)
		rc = bind_text_or_null(st, ":sha256", e->sha256);
	if (rc == 0)
		rc = bind_text_or_null(st, ":url", e->is_dir ? NULL : e->url);
	if (rc == 0)
		rc = bind_text_or_null(st, ":etag", e->is_dir ? NULL : e->etag);
	if (rc == 0)
		rc = index_db_bind_int64(st, ":listed", e->is_dir ? 0 : 1);
	if (rc == 0)
		rc = index_db_exec(st);
	return rc;
}

int index_add_listing(struct index *idx, uint64_t dir, const struct index_entry *entries, size_t n)
{
	sqlite3_stmt *mark = idx->st_mark_listed;
	int rc;

	for (size_t i = 0; i < n; i++)
		if (index_check_segment(entries[i].name, strlen(entries[i].name)))
			return -EINVAL; /* the source must have dropped it */
	pthread_mutex_lock(&idx->lock);
	rc = index_begin(idx);
	if (rc)
		goto out;
	for (size_t i = 0; i < n && rc == 0; i++)
		rc = insert_entry(idx, dir, &entries[i]);
	if (rc == 0)
		rc = index_db_bind_int64(mark, ":ino", (int64_t)dir);
	if (rc == 0)
		rc = index_db_exec(mark);
	if (rc == 0)
		rc = index_commit(idx);
	if (rc)
		index_rollback(idx);
	idx->totals_valid = false;
out:
	pthread_mutex_unlock(&idx->lock);
	return rc;
}

int index_get_etag(struct index *idx, uint64_t ino, char *etag, size_t len)
{
	sqlite3_stmt *st = idx->st_get_etag;
	int rc;

	pthread_mutex_lock(&idx->lock);
	rc = index_step_ino(st, ino);
	if (rc == 1) {
		const unsigned char *value = sqlite3_column_text(st, 1);
		rc = sqlite3_column_int(st, 0) ? -EISDIR : 0;
		snprintf(etag, len, "%s", value ? (const char *)value : "");
	}
	rc = index_db_reset_keep(st, rc);
	pthread_mutex_unlock(&idx->lock);
	return rc;
}

/*
 * Private to index/: the layout of struct index and the statement helpers that index.c
 * and manifest.c share. Nothing outside index/ includes this.
 *
 * Two connections, each with its own lock:
 * - idx->lock serialises every use of idx->db (the namespace: a private temporary
 *   database, this session's alone) and of every statement prepared on it;
 * - idx->spool_lock serialises idx->spool_db (the spool records in the cache directory's
 *   index.db, which other mounts sharing the directory read and write too).
 * A thread never holds both. The helpers below expect the caller to hold the lock of the
 * connection the statement belongs to.
 */
#ifndef SPOOLFS_INDEX_INDEX_I_H
#define SPOOLFS_INDEX_INDEX_I_H

#include "index/index.h"

#include <pthread.h>
#include <sqlite3.h>

#define INDEX_SCHEMA_VERSION 2

struct index {
	pthread_mutex_t spool_lock;
	/* Guarded by spool_lock: the shared spool records and their statements. */
	sqlite3 *spool_db;
	sqlite3_stmt *st_spool_begin;
	sqlite3_stmt *st_spool_commit;
	sqlite3_stmt *st_spool_rollback;
	sqlite3_stmt *st_obj_touch;
	sqlite3_stmt *st_obj_complete;
	sqlite3_stmt *st_obj_forget;
	sqlite3_stmt *st_obj_reset;
	sqlite3_stmt *st_range_clear;
	sqlite3_stmt *st_range_insert;
	sqlite3_stmt *st_seal_set;

	pthread_mutex_t lock;
	/* Everything below is guarded by lock. */
	sqlite3 *db;
	/* Hot statements, prepared once at open and finalized at close. */
	sqlite3_stmt *st_lookup;
	sqlite3_stmt *st_get;
	sqlite3_stmt *st_get_url;
	sqlite3_stmt *st_readdir;
	sqlite3_stmt *st_begin;
	sqlite3_stmt *st_commit;
	sqlite3_stmt *st_rollback;
	sqlite3_stmt *st_listed;
	sqlite3_stmt *st_get_etag;
	sqlite3_stmt *st_mark_listed;
	sqlite3_stmt *st_insert_entry;
	int64_t default_mtime; /* see index_set_default_mtime */
	/* The namespace is a snapshot, so its totals are computed once and kept. */
	bool totals_valid;
	uint64_t total_files;
	uint64_t total_dirs;
	uint64_t total_bytes;
};

/* Maps an sqlite result code to a negative errno. */
int index_sqlite_errno(int rc);

/* The negative errno for a failed step or reset: never 0, whatever code sqlite returned. */
int index_step_errno(int rc);

/* Bind by parameter name; a name the statement lacks is a programming error (-EINVAL). */
int index_bind_int64(sqlite3_stmt *st, const char *name, int64_t v);
int index_bind_text(sqlite3_stmt *st, const char *name, const char *s, int len);
int index_bind_null(sqlite3_stmt *st, const char *name);

/* Steps a statement that returns no row, then resets it. 0 or -errno. */
int index_step_done(sqlite3_stmt *st);

/* Builds the namespace's lookup and readdir indexes; a loader calls it once, after its rows
 * are in and before its commit. Statements prepared earlier re-prepare to use them. */
int index_namespace_indexes(struct index *idx);

/*
 * Runs obj (a spool_object statement with :key) and, with clear_ranges, forgets key's
 * recorded ranges, in one transaction. Takes idx->spool_lock itself. 0 or -errno.
 */
int index_spool_change(struct index *idx, sqlite3_stmt *obj, const char *key, bool clear_ranges);
/* index_spool_change, recording seal as key's too (when not NULL), in the same transaction. */
int index_spool_change_sealed(struct index *idx, sqlite3_stmt *obj, const char *key,
                              bool clear_ranges, const char *seal);

/* BEGIN IMMEDIATE / COMMIT / ROLLBACK on the namespace connection (idx->db). */
int index_begin(struct index *idx);
int index_commit(struct index *idx);
void index_rollback(struct index *idx);

#endif

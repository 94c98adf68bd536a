/*
 * Private to index/: the layout of struct index (the session's namespace) and the helpers
 * that index.c, listing.c and build.c share. Nothing outside index/ includes this.
 *
 * Lock: idx->lock serialises every use of idx->db (a private temporary database, this
 * session's alone) and of every statement prepared on it; the helpers below expect the
 * caller to hold it. The spool records are another type with their own lock
 * (records.h); no thread holds both locks.
 */
#ifndef SPOOLFS_INDEX_INDEX_I_H
#define SPOOLFS_INDEX_INDEX_I_H

#include "index/db_i.h"
#include "index/index.h"

#include <pthread.h>
#include <sqlite3.h>

struct index {
	/*
	 * One build at a time (build.c): held from index_build_begin* to its commit or abort by
	 * the thread that began it, taken before lock. A build is one transaction on db, and a
	 * connection has one at a time: two first lookups of directories with nested manifests
	 * at once made one listing and failed the other with EIO ("cannot start a transaction
	 * within a transaction"); the second now waits for the first.
	 */
	pthread_mutex_t build_lock;
	pthread_mutex_t lock;
	/* Everything below is guarded by lock. */
	sqlite3 *db;
	/* Prepared once at open (namespace_stmts) and finalized at close. */
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
	sqlite3_stmt *st_totals;
	sqlite3_stmt *st_readlink;
	sqlite3_stmt *st_get_nested;
	sqlite3_stmt *st_get_object;
	sqlite3_stmt *st_get_frames;
	int64_t default_mtime; /* see index_set_default_mtime */
	/* The namespace is a snapshot, so its totals are computed once and kept. */
	bool totals_valid;
	uint64_t total_files;
	uint64_t total_dirs;
	uint64_t total_bytes;
};

/* Builds the namespace's lookup and readdir indexes (none if they exist): a build calls it
 * as it begins, before its rows, a lazy namespace before its first listing. Statements
 * prepared earlier re-prepare to use them. */
int index_namespace_indexes(struct index *idx);

/* Steps st (":ino" bound to ino) to its one row: 1 with the row ready, -ENOENT when there
 * is none, or -errno. The caller holds the index lock and resets st. */
int index_step_ino(sqlite3_stmt *st, uint64_t ino);

/* A namespace's default mtime as index_set_default_mtime kept it in its meta table, into
 * idx->default_mtime (reopened, or filled from a copy): 0 (none kept: 0) or -errno. Takes the
 * lock. */
int index_load_default_mtime(struct index *idx);

/* BEGIN IMMEDIATE / COMMIT / ROLLBACK on the namespace connection (idx->db). */
int index_begin(struct index *idx);
int index_commit(struct index *idx);
void index_rollback(struct index *idx);

#endif

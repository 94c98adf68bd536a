/*
 * index/records: the spool records of a cache directory, in its index.db, which every mount
 * sharing that directory reads and writes (sqlite's file locking keeps them apart): for each
 * kept object (`key` is a flight's identity) whether it is complete, the byte ranges durably
 * written, the seal of its spool file, its size and when it was last used. They let a
 * persistent cache resume and --cache-max-size evict. Knows nothing of the namespace
 * (index.h), nor of URLs: a key is an opaque string.
 *
 * Lock: struct index_records has one mutex serialising its connection and statements; any
 * thread may call in. Callers hold no lock of theirs while calling in (it is the innermost
 * lock: it never calls out). Schema: PRAGMA user_version = 2; WAL; busy_timeout; writes in
 * BEGIN IMMEDIATE transactions.
 *
 * All functions that can fail return 0 (or a count) on success and -errno on failure.
 */
#ifndef SPOOLFS_INDEX_RECORDS_H
#define SPOOLFS_INDEX_RECORDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

struct util_ranges;
struct index_records;

/*
 * Opens (creating when missing) the spool records at db_path, shared with any other mount
 * of the same cache directory. *out is owned by the caller (index_records_close). -EPROTO
 * when a newer spoolfs wrote them.
 */
int index_records_open(const char *db_path, struct index_records **out);

/*
 * index_records_open for "index.db" in the directory held open as dirfd, whose path is
 * dir_path (sqlite opens by name). The database and its sidecars (-wal, -shm, -journal)
 * must be absent or regular files of ours: a symbolic link or another user's file there is
 * refused with -EPERM and a line naming it in err, and nothing is opened; sqlite is told not
 * to follow links either. -ESTALE when dir_path no longer names dirfd's directory.
 */
int index_records_open_at(int dirfd, const char *dir_path, struct index_records **out, char *err,
                          size_t err_len);

/*
 * After a fork, in the child that goes on using rec: the connection is replaced by one of
 * the child's own, opened as index_records_open_at opens it. sqlite's locks are POSIX locks,
 * which a fork does not pass on: the inherited connection believes it holds locks that are
 * the parent's, and once the parent exits another process sharing the cache directory
 * would find the database unused and reset or checkpoint it under this one. Call before
 * any other thread uses rec. 0, or -errno with a line in err (rec unchanged).
 */
int index_records_reopen_at(struct index_records *rec, int dirfd, const char *dir_path, char *err,
                            size_t err_len);

/* Finalizes every statement and closes the connection. NULL is fine. */
void index_records_close(struct index_records *rec);

/*
 * Why an entry of a cache directory is not one we may use, or NULL when it is: it must be
 * of `type` (S_IFREG, S_IFDIR), owned by the effective user, not writable by group or others,
 * and a file must have no other name.
 */
const char *index_records_file_unsafe(const struct stat *st, mode_t type);
/* The same for name in dirfd, not following a link; NULL also when it does not exist. */
const char *index_records_file_unsafe_at(int dirfd, const char *name, mode_t type);

/*
 * index_records_set_ranges replaces the recorded published ranges of key (called after the data
 * is durably written). index_records_forget forgets key, its ranges and its seal.
 */
int index_records_set_ranges(struct index_records *rec, const char *key,
                             const struct util_ranges *ranges);
int index_records_forget(struct index_records *rec, const char *key);
/*
 * Marks key complete, with the seal of its spool file (fetch/engine/flight.h's flight_spool_seal):
 * a file that no longer shows that seal has been touched since. 0 or -errno.
 */
int index_records_mark_sealed(struct index_records *rec, const char *key, const char *seal);
/* Marks key not complete, keeping its ranges (and dropping its seal). 0 or -errno. */
int index_records_mark_incomplete(struct index_records *rec, const char *key);
/* The seal recorded with key's completion: 0, -ENOENT when there is none, or -errno. */
int index_records_seal(struct index_records *rec, const char *key, char *seal, size_t len);

/*
 * What a previous session recorded for key: *complete, and the ranges durably written.
 * 0, -ENOENT when there is no record, or -errno.
 */
int index_records_lookup(struct index_records *rec, const char *key, bool *complete,
                         struct util_ranges *ranges);

/* Forgets key's recorded ranges and completeness, keeping its size and use time. */
int index_records_reset(struct index_records *rec, const char *key);

/* Every key with a spool record, in a malloc'd array of malloc'd strings (*n of them; the
 * caller frees all). 0 or -errno. */
int index_records_keys(struct index_records *rec, char ***keys, size_t *n);

/* Records that key's spool (size bytes) is in use now (`now` orders uses; larger = later). */
int index_records_touch(struct index_records *rec, const char *key, uint64_t size, int64_t now);

struct index_records_entry {
	char *key; /* malloc'd: the caller frees */
	uint64_t size;
};

/*
 * The bytes all recorded spools take, and up to max of them, least recently used first
 * (eviction candidates, complete or not: a partial spool takes the object's whole size)
 * in lru[0..*n). 0 or -errno (then *n is 0 and nothing is left to free).
 */
int index_records_usage(struct index_records *rec, uint64_t *bytes, struct index_records_entry *lru,
                        size_t max, size_t *n);

#endif

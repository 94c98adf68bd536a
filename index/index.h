/*
 * index: the session's namespace (inodes, names, sizes, hashes, URLs), in a private
 * temporary sqlite database, and the record of spooled objects, in the cache directory's
 * index.db, which every mount sharing that directory uses.
 *
 * Lock: struct index has one mutex per connection, each serialising its statements.
 * Callers hold no lock of theirs while calling in (the index is the innermost lock: never
 * call out of it). Inode numbers are sqlite rowids; the root directory is inode 1, which is
 * FUSE's root id. The namespace never changes after loading: the session is a snapshot.
 *
 * All functions that can fail return 0 (or a count) on success and -errno on failure.
 */
#ifndef SPOOLFS_INDEX_INDEX_H
#define SPOOLFS_INDEX_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct stat;

#define INDEX_ROOT_INO 1
#define INDEX_NAME_MAX 255
#define INDEX_SHA256_HEX 64
#define INDEX_ETAG_MAX 250 /* longest version tag a manifest may pin */

struct index;

struct index_node {
	uint64_t ino;
	uint64_t parent;
	bool is_dir;
	bool executable;
	uint64_t size; /* 0 for directories */
	int64_t mtime; /* seconds since the epoch (see index_set_default_mtime) */
	char sha256[INDEX_SHA256_HEX + 1]; /* lower-case hex, "" when unknown */
	char name[INDEX_NAME_MAX + 1];     /* "" for the root */
};

/*
 * Opens (creating when missing) the spool records at db_path, shared with any other mount of
 * the same cache directory, and a fresh private namespace. *out is owned by the caller.
 */
int index_open(const char *db_path, struct index **out);

/*
 * index_open for the spool records "index.db" in the directory held open as dirfd, whose
 * path is dir_path (sqlite opens by name). The database and its sidecars (-wal, -shm,
 * -journal) must be absent or regular files of ours: a symbolic link or another user's file
 * there is refused with -EPERM and a line naming it in err, and nothing is opened; sqlite is
 * told not to follow links either. -ESTALE when dir_path no longer names dirfd's directory.
 */
int index_open_at(int dirfd, const char *dir_path, struct index **out, char *err, size_t err_len);

/*
 * Why an entry of a cache directory is not one we may use, or NULL when it is: it must be
 * of `type` (S_IFREG, S_IFDIR), owned by the effective user, not writable by group or others,
 * and a file must have no other name.
 */
const char *index_entry_unsafe(const struct stat *st, mode_t type);
/* The same for name in dirfd, not following a link; NULL also when it does not exist. */
const char *index_entry_at_unsafe(int dirfd, const char *name, mode_t type);
void index_close(struct index *idx);

/*
 * Loads a manifest (JSON text, see README) into an empty namespace, in one transaction.
 * base_url is the manifest's own URL (http(s):// or file://); relative object URLs and
 * entries without "url" resolve against it. On a bad manifest returns -EINVAL and writes a
 * one-line message naming the entry (e.g. `files[3] "a/../b": path has a ".." segment`)
 * into err; nothing is loaded then.
 */
int index_load_manifest(struct index *idx, const char *json, size_t json_len, const char *base_url,
                        char *err, size_t err_len);
/* The same for a text the caller has NUL-terminated (text[len] == '\0'): read in place, no
 * copy (7.6 MB less at the peak of a 100,000-entry load). */
int index_load_manifest_text(struct index *idx, const char *text, size_t len, const char *base_url,
                             char *err, size_t err_len);

/*
 * The mtime of what its source gives none: a manifest entry without "mtime", a listed
 * object without LastModified, a listed directory, and the root until something below it
 * is newer. Call before loading the namespace; until then such entries read 0 (1970).
 * Returns 0 or -errno.
 */
int index_set_default_mtime(struct index *idx, int64_t mtime);

/* The child `name` of directory `parent`. -ENOENT when absent, -ENOTDIR when parent is a file. */
int index_lookup(struct index *idx, uint64_t parent, const char *name, struct index_node *out);

/* The node with inode `ino`, or -ENOENT. */
int index_get(struct index *idx, uint64_t ino, struct index_node *out);

/* The object URL of file `ino` in *url (malloc'd, caller frees). -ENOENT, -EISDIR, -ENOMEM. */
int index_get_url(struct index *idx, uint64_t ino, char **url);

/*
 * Calls fn for the children of directory `dir` in a stable order, starting after `cookie`
 * (0 = from the first child). Each call passes the cookie that resumes after that child.
 * fn returns 0 to go on or 1 to stop (a full reply buffer). The index lock is held during fn:
 * fn must not call back into the index. Returns 0, -ENOENT or -ENOTDIR.
 */
typedef int (*index_dir_fn)(void *ctx, const struct index_node *child, uint64_t next_cookie);
int index_readdir(struct index *idx, uint64_t dir, uint64_t cookie, index_dir_fn fn, void *ctx);

/* Totals over the namespace, for statfs. */
int index_totals(struct index *idx, uint64_t *files, uint64_t *dirs, uint64_t *bytes);

/*
 * Lazy namespaces (sources that list directories on demand, like S3). After
 * index_begin_lazy (on a fresh namespace) the root is unlisted; index_add_listing adds a
 * directory's children and marks it listed, atomically. Child directories start unlisted.
 * When two entries share a name the first wins: pass directories first, so a key that is
 * both an object and a prefix ("a" and "a/b") shows as the directory.
 */
struct index_entry {
	const char *name; /* one segment that passes index_check_segment */
	bool is_dir;
	uint64_t size; /* files */
	int64_t mtime;
	const char *etag;   /* files: the version to pin, or NULL */
	const char *url;    /* files */
	const char *sha256; /* lower-case hex or NULL */
};
int index_begin_lazy(struct index *idx);
/* *listed for directory `dir`. 0, -ENOENT or -ENOTDIR. */
int index_dir_listed(struct index *idx, uint64_t dir, bool *listed);
/* 0, -EINVAL for a bad name (nothing added), or -errno. */
int index_add_listing(struct index *idx, uint64_t dir, const struct index_entry *entries, size_t n);
/* The ETag a file's version is pinned to ("" when none). 0, -ENOENT, -EISDIR. */
int index_get_etag(struct index *idx, uint64_t ino, char *etag, size_t len);

/*
 * Spool records, so a persistent cache can resume: `key` is a flight's identity.
 * index_record_ranges replaces the recorded published ranges of key (called after the data
 * is durably written). index_record_forget forgets key, its ranges and its seal.
 */
struct index_ranges;
int index_record_ranges(struct index *idx, const char *key, const struct index_ranges *ranges);
int index_record_forget(struct index *idx, const char *key);
/*
 * Marks key complete, with the seal of its spool file (fetch/flight.h's flight_spool_seal):
 * a file that no longer shows that seal has been touched since. 0 or -errno.
 */
int index_record_sealed(struct index *idx, const char *key, const char *seal);
/* Marks key not complete, keeping its ranges (and dropping its seal). 0 or -errno. */
int index_record_incomplete(struct index *idx, const char *key);
/* The seal recorded with key's completion: 0, -ENOENT when there is none, or -errno. */
int index_spool_seal(struct index *idx, const char *key, char *seal, size_t len);

/*
 * What a previous session recorded for key: *complete, and the ranges durably written.
 * 0, -ENOENT when there is no record, or -errno.
 */
int index_spool_lookup(struct index *idx, const char *key, bool *complete,
                       struct index_ranges *ranges);

/* Forgets key's recorded ranges and completeness, keeping its size and use time. */
int index_spool_reset(struct index *idx, const char *key);

/* Every key with a spool record, in a malloc'd array of malloc'd strings (*n of them; the
 * caller frees all). 0 or -errno. */
int index_spool_keys(struct index *idx, char ***keys, size_t *n);

/* Records that key's spool (size bytes) is in use now (`now` orders uses; larger = later). */
int index_spool_touch(struct index *idx, const char *key, uint64_t size, int64_t now);

struct index_spool_entry {
	char *key; /* malloc'd: the caller frees */
	uint64_t size;
};

/*
 * The bytes all recorded spools take, and up to max of them, least recently used first
 * (eviction candidates, complete or not: a partial spool takes the object's whole size)
 * in lru[0..*n). 0 or -errno.
 */
int index_spool_usage(struct index *idx, uint64_t *bytes, struct index_spool_entry *lru, size_t max,
                      size_t *n);

/*
 * Checks one path segment (a file or directory name) for a namespace: non-empty, not "." or
 * "..", no '/', no NUL within len, at most INDEX_NAME_MAX bytes. Returns NULL when fine, else
 * a static description of what is wrong ("empty segment", "\"..\" segment", ...).
 */
const char *index_check_segment(const char *name, size_t len);

/*
 * The mount's own status directory, at its root (fs/virtual.c). The store cannot have an
 * entry there: the kernel would cache the store's, and hide the daemon's.
 */
#define INDEX_RESERVED_ROOT_NAME ".spoolfs"

/* index_check_segment for a name at the root: also refuses INDEX_RESERVED_ROOT_NAME. */
const char *index_check_root_segment(const char *name, size_t len);

#endif

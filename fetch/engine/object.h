/*
 * Objects: which object a file's bytes are and the flight that fetches it, decided in one
 * place for every caller (an open, the opener that waits for a hash list, prefetch).
 *
 * A file is an object of its own (its URL, pinned version, maybe chunk hashes), or a member
 * of a pack: a range of the pack's object, whose flight it shares with every other member
 * (one download per pack), and whose bytes are served only once they match the member's
 * own sha256 (fetch_member_verify, member.c). An object is found by its key (flight_key.h):
 * one index query per open gives everything (index_get_object); an open of a running
 * flight joins it without building anything more; only a new flight gets its name (the
 * file's path, for log lines), its --mirror URLs and its frame table (read then only).
 *
 * Lock: struct fetch_objects' own verified_lock guards the set of verified members
 * (member.c), and is innermost: nothing is called while it is held. Everything else in it
 * is fixed at create. Callers hold no lock; the index, flight table and engine take theirs.
 * No FUSE here: fs/ and the unit tests call it alike.
 */
#ifndef SPOOLFS_FETCH_OBJECT_H
#define SPOOLFS_FETCH_OBJECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fetch/engine/flight.h"
#include "index/index.h"

struct engine;
struct index_records;

/* What resolving needs of the session; copied at create, pointers kept (they outlive it). */
struct fetch_objects_config {
	struct index *idx;
	/* The cache directory's spool records, asked whether an object is complete there
	 * already (speculative opens); NULL when no directory outlives the session. */
	struct index_records *records;
	struct flight_table *flights;
	struct engine *engine; /* new flights are kicked; NULL: not (unit tests) */
	/* --mirror: the manifest's URL up to its last '/' (what a mirror's base replaces),
	 * the bases in order, and per base a file: mirror's directory fd or -1. */
	const char *manifest_dir;
	char *const *mirrors;
	unsigned n_mirrors;
	const int *mirror_dir_fds;
};

struct fetch_objects;

/* 0 or -ENOMEM; *out is the caller's (fetch_objects_destroy). */
int fetch_objects_create(const struct fetch_objects_config *cfg, struct fetch_objects **out);
void fetch_objects_destroy(struct fetch_objects *o);

/* A pack member as its readers see it: [base, base + size) of its pack's flight, served only
 * once those bytes match sha256. */
struct fetch_member {
	uint64_t base;
	uint64_t size;
	char sha256[INDEX_SHA256_HEX + 1];
};

/*
 * A chunked object's hash list, read and checked (fetch_hash_list_take): its chunks'
 * digests (flight_spec.chunk_digests) and, for an object stored compressed, its frames'
 * stored lengths (flight_spec.frame_stored; NULL when it is stored as it is).
 */
struct fetch_hash_list {
	unsigned char *digests;
	uint32_t *frame_stored;
};
void fetch_hash_list_clear(struct fetch_hash_list *hl);

/* What to open. */
struct fetch_object_req {
	uint64_t ino;
	/* The object's hash list instead (its chunks' digests, an object of its own), joined
	 * and downloading whole: the first open of a chunked object reads it first. */
	bool hash_list;
	/* Started by prefetch: -EEXIST when the cache directory holds the object complete
	 * already (nothing to fetch), and the flight waits for a speculative slot. */
	bool speculative;
	/* The hash list once read (fetch_hash_list_take); NULL before. */
	const struct fetch_hash_list *list;
};

/* What was opened. */
struct fetch_object {
	struct flight *flight; /* a new reference for the caller */
	bool created;          /* this call started it (and kicked the engine) */
	bool is_member;        /* member is set: the file is a range of flight */
	struct fetch_member member;
	uint64_t parent; /* the file's directory */
	char *url;       /* with req.hash_list: the hash list's URL, malloc'd; else NULL */
};

/* fetch_object_open's answer for a chunked object with no flight yet and no hash list. */
#define FETCH_OBJECT_HASH_LIST 1

/*
 * Joins (or starts) the flight of file req->ino's object into *out: a new flight's spec
 * says how the object is stored (its frame table, from the index or from req->list). A
 * running flight whose chunks failed for good gets one more try (flight_retry_bad_chunks).
 * 0; FETCH_OBJECT_HASH_LIST when the object has chunk hashes, no flight of it runs and
 * req->list is NULL (open its hash list, then call again with it); -EEXIST
 * (speculative only); -EISDIR, -ELOOP (not a file), -ENOENT, -ENOMEM, -EIO. On anything but
 * 0, *out holds nothing (out->url freed). fetch_object_clear frees out->url.
 */
int fetch_object_open(struct fetch_objects *o, const struct fetch_object_req *req,
                      struct fetch_object *out);
void fetch_object_clear(struct fetch_object *out);

/*
 * A flight whose spool could not be held (-ENOENT, -ESTALE from flight_hold_spool): when it
 * is complete, its spool file was removed or replaced behind the daemon's back (a tmp
 * cleaner, another mount's eviction), and it leaves the table, logged, so that the next
 * fetch_object_open starts it afresh; a failed one has left already. Returns whether such
 * a retry is worth it (rc was one of those two); the caller still holds its reference.
 */
bool fetch_object_spool_gone(struct flight *f, int rc);

/* fetch_object_open_ahead's answer while a chunked object's hash list still downloads. */
#define FETCH_OBJECT_PENDING 2

/*
 * Prefetch's open of file ino (speculative, as fetch_object_open's req.speculative), which
 * also goes ahead for a chunked object: its hash list is joined or started (speculative
 * too) and, once verified, read, and the object opened with its digests. While the hash
 * list downloads: FETCH_OBJECT_PENDING with the hash list's flight in out->flight (call
 * again once it is done; nothing here waits on the network). Else as fetch_object_open
 * (-EEXIST: the object is complete in the cache directory); -EIO when the hash list failed.
 */
int fetch_object_open_ahead(struct fetch_objects *o, uint64_t ino, struct fetch_object *out);

/*
 * The bytes of a hash list's flight (fetch_object_req.hash_list) once it is complete and
 * verified: flight_size(list) bytes, malloc'd into *out (the caller frees them). 0 or
 * -errno (the spool cannot be held or read).
 */
int fetch_hash_list_read(struct flight *list, unsigned char **out);

/*
 * File ino's hash list from its complete, verified flight list (fetch_hash_list_read), split
 * into *out: 32 bytes of digest per chunk, or for an object stored compressed 36, the digest
 * then the chunk's frame's stored length (u32, little-endian). list_err: what the wait on
 * list said (0: it is complete and verified). 0 (fetch_hash_list_clear). Every failure is
 * logged here, with the file and url (the hash list's, as fetch_object_open gave it), and
 * the caller only replies: list_err itself; -EIO for frame lengths that are 0, over zstd's
 * bound for their chunk, or do not add up to the object's stored size (nothing of the
 * object may be fetched by such a table); the spool's -errno; -ENOMEM. Only -ENOENT or
 * -ESTALE (the spool is gone: fetch_object_spool_gone may tell to join it afresh) when not
 * retried yet is returned unlogged, the caller's to retry once.
 */
int fetch_hash_list_take(struct fetch_objects *o, uint64_t ino, struct flight *list, int list_err,
                         bool retried, const char *url, struct fetch_hash_list *out);

/*
 * What the extended attributes show of node ino: the node; for a file, url, its object's
 * (a member's is its pack's; malloc'd), and with want_cached the bytes of it readable now
 * (a member: all of it once its pack is complete, else 0). 0, -ENOENT, -ENOMEM, -EIO; free
 * with fetch_object_view_clear, even after a failure.
 */
struct fetch_object_view {
	struct index_node node;
	char *url;
	uint64_t cached;
};
int fetch_object_view(struct fetch_objects *o, uint64_t ino, bool want_cached,
                      struct fetch_object_view *out);
void fetch_object_view_clear(struct fetch_object_view *v);

/*
 * Checks member m's bytes in pack flight f's spool (the caller holds the spool and saw
 * [m->base, m->base + m->size) ready) against m->sha256, once per flight: later calls for
 * the same flight and member only look the answer up. 0 when they match; -EBADMSG when
 * they do not, after failing f (every reader of it gets -EIO, and the next open fetches the
 * pack again with a new flight, whose members are checked afresh); -EIO when they cannot
 * be read back.
 */
int fetch_member_verify(struct fetch_objects *o, struct flight *f, const struct fetch_member *m);

/* Whether m was verified in flight f already (fetch_member_verify said 0). */
bool fetch_member_verified(struct fetch_objects *o, const struct flight *f,
                           const struct fetch_member *m);

/*
 * Provided by flight_table.c (added at its end for this module): joins the flight of key
 * when one runs (not failed), noting ino on it as flight_table_join does; a new reference
 * in *out. 0 or -ENOENT (nothing created: join with a spec).
 */
int flight_table_join_existing(struct flight_table *table, const char *key, uint64_t ino,
                               struct flight **out);

#endif

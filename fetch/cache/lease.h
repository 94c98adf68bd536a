/*
 * Cross-mount coordination for a cache directory that several spoolfs mounts share.
 *
 * Lease: which mount downloads an object. Every mount that wants the object opens the
 * directory's lease file (one open file description per mount: the lease set) and tries an OFD
 * write lock on a byte picked by a hash of the object's key. The holder downloads and records its
 * progress in the shared index; the others watch those records and read the spool file as
 * it grows. The kernel drops the lock when its holder closes the fd or dies, so a killed
 * mount hands the download over instead of stranding it. Two keys that share a byte only
 * wait for each other; they never share data.
 *
 * In use: every spool fd a flight holds carries an OFD read lock on the spool's first
 * byte, so eviction in one mount can tell that another mount still reads the file.
 *
 * Lease set: one mount's leases and watches on a single open file description of the
 * lease file, instead of one per flight: a flight whose completion record waits in the
 * recorder's queue then holds no descriptor for its lease. Flights of one mount still
 * exclude each other (the set remembers which bytes it holds: a second flight of a held
 * byte is told another holds it, as a second mount would be).
 *
 * The lease_* functions on an fd are safe from any thread and keep no state of their own;
 * a lease set's functions are safe from any thread (its mutex guards it).
 */
#ifndef SPOOLFS_FETCH_LEASE_H
#define SPOOLFS_FETCH_LEASE_H

#include <stdbool.h>

struct lease_set;

/*
 * Opens the lease file "leases" in the cache directory dirfd (creating it).
 * The fd, or -errno: -ELOOP for a symbolic link, -EPERM for a file not ours to use.
 */
int lease_open(int dirfd);

/*
 * Tries to take key's lease on fd without waiting: 1 when this fd holds it now (also when it
 * already did), 0 when another open file description holds it, or -errno.
 */
int lease_try(int fd, const char *key);

/*
 * Watching: a mount that waits on another's download says so with a read lock on a second
 * byte of the key, held on its lease fd, so the holder knows someone reads through it:
 * it then downloads the object whole and records its progress often. 0 or -errno.
 */
int lease_watch(int fd, const char *key);

/* True when some other open file description watches key (see lease_watch). */
bool lease_watched(int fd, const char *key);

/* A lease set on the lease file "leases" in the cache directory dirfd, opened now (see
 * lease_open). 0 or -errno. */
int lease_set_create(int dirfd, struct lease_set **out);

/* Releases what the set still holds (closing its fd) and frees it. NULL is fine. */
void lease_set_destroy(struct lease_set *s);

/* lease_try for this mount: 1 when it took key's lease now, 0 when another mount or
 * another flight of this one holds it, or -errno. */
int lease_set_try(struct lease_set *s, const char *key);

/* Lets key's lease go (it was taken with lease_set_try). */
void lease_set_release(struct lease_set *s, const char *key);

/* lease_watch for one flight of this mount; pair a success with lease_set_unwatch. */
int lease_set_watch(struct lease_set *s, const char *key);
void lease_set_unwatch(struct lease_set *s, const char *key);

/* True when another mount watches key. */
bool lease_set_watched(struct lease_set *s, const char *key);

/* Marks a spool fd as in use by this mount. 0, or -errno (the mark is advisory). */
int lease_mark_in_use(int spool_fd);

/* True when some other open file description (any mount, this one included) marked the
 * spool named name in dirfd in use. A missing file, or a symbolic link, is not in use. */
bool lease_in_use_elsewhere(int dirfd, const char *name);

#endif

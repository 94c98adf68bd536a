/*
 * The cache directory's life cycle: opening and checking it, the lock its mounts share,
 * its "spool" directory, and the clean-up at unmount.
 *
 * The daemon often runs as root, and anyone who could plant a name in its cache directory
 * (a symbolic link as "lock", another user's "index.db") would choose which files root
 * creates, opens or deletes. So the directory is opened once, never through a symbolic
 * link, and must be the effective user's own and writable by nobody else; everything in
 * it is then reached by name through that fd, never followed through a link, and an
 * entry that is a link, another user's file or a second name of a file is refused.
 *
 * Every mount of a directory holds a shared flock on DIR/lock while it runs (flock, so a
 * daemonised child keeps it); the first takes it exclusive until cache_dir_share, and the
 * last one out takes it exclusive again to clean up. A struct cache_dir belongs to one
 * thread (the daemon's main thread): nothing here locks memory.
 */
#ifndef SPOOLFS_FETCH_CACHE_DIR_H
#define SPOOLFS_FETCH_CACHE_DIR_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

struct cache_dir;

/*
 * Opens the cache directory and takes its lock, creates and opens its "spool" directory,
 * and checks every name it holds for us (lock, spool, leases, index.db and its sidecars,
 * namespaces).
 *
 * named_by_user: path is the directory the user named (--cache-dir); one that does not
 * exist is made 0700 (the path above it is its user's own business). Otherwise a fresh
 * directory spoolfs-XXXXXX is made in path (the session's own, removed whole at close).
 *
 * Returns 0 and *out (the caller's, for cache_dir_close), or -errno with a one-line
 * message in err that starts with the path it concerns (the caller puts the option's name
 * in front): -EPERM (not ours to use), -ELOOP or -ENOTDIR (a link, not a directory),
 * -ENOMEM, or the error of the system call. A refused open deletes only what it made.
 *
 * When no other open of the directory holds its lock, the lock is held exclusive
 * (cache_dir_alone) and other opens, in this process or another, wait in this function
 * until cache_dir_share or cache_dir_close.
 */
int cache_dir_open(const char *path, bool named_by_user, struct cache_dir **out, char *err,
                   size_t err_len);

/* The directory, opened O_RDONLY|O_DIRECTORY; valid until cache_dir_close. */
int cache_dir_fd(const struct cache_dir *cd);
/* Its "spool" directory, likewise. */
int cache_dir_spool_fd(const struct cache_dir *cd);
/*
 * Its "namespaces" directory, where kept namespaces are (fetch/cache/kept.h): opened at the
 * first call and held until cache_dir_close, made 0700 when make and missing. The fd, or
 * -ENOENT (not there, and not make) or -errno with a line in err, as cache_dir_open's.
 */
int cache_dir_kept_fd(struct cache_dir *cd, bool make, char *err, size_t err_len);
/* Its canonical path (sqlite opens by name); owned by cd. */
const char *cache_dir_path(const struct cache_dir *cd);
/* Whether cache_dir_open made the directory (a named one that did not exist). */
bool cache_dir_made(const struct cache_dir *cd);
/* Whether this open holds the lock exclusive: no other mount uses the directory. */
bool cache_dir_alone(const struct cache_dir *cd);

/*
 * Lets other opens in: takes the lock shared. Linux lets go of an exclusive flock before
 * it grants the shared one, so a last mount out may have cleaned the directory up in
 * between: then -ESTALE (the caller may start again). 0 or -errno, with err as above.
 */
int cache_dir_share(struct cache_dir *cd, char *err, size_t err_len);

/*
 * Closes cd and frees it (NULL does nothing). Unless keep, the last open of the directory
 * (the one that gets the lock exclusive) deletes our own files in it by name: index.db and
 * its sidecars, leases, what the spool directory holds (a link goes itself, never what it
 * points to; a directory there stays), spool, the kept namespaces and their directory, and
 * lock. The directory goes too when
 * cache_dir_open made it and it is empty then. A session directory (not named_by_user)
 * always goes whole; keep is for a named one (--keep-cache, or a session that never came
 * up and may not delete what an earlier one kept).
 */
void cache_dir_close(struct cache_dir *cd, bool keep);

/*
 * The bound a named cache directory gets without --cache-max-size: what it may grow to
 * while leaving CACHE_DIR_RESERVE_SHARE of its filesystem free (at least
 * CACHE_DIR_RESERVE_MIN), given the filesystem's size, its free bytes and what the cache
 * holds now (free to reuse). A disk with less room than that gets half of what there is,
 * up to CACHE_DIR_BOUND_MIN: a small cache that evicts, not none. A tenth keeps the runner's builds
 * room to write, as ext4 keeps 5% for root; 1 GiB covers small disks.
 */
#define CACHE_DIR_RESERVE_SHARE 10 /* percent of the filesystem left free */
#define CACHE_DIR_RESERVE_MIN ((uint64_t)1 << 30)
#define CACHE_DIR_BOUND_MIN ((uint64_t)256 << 20)
uint64_t cache_dir_default_bound(uint64_t fs_bytes, uint64_t free_bytes, uint64_t cache_bytes);
/* The same for the filesystem under cd (statvfs). 0 or -errno. */
int cache_dir_default_bound_of(const struct cache_dir *cd, uint64_t cache_bytes, uint64_t *bound);

#endif

/*
 * The one way spoolfs opens a file or a directory whose path a user gave (--log-file,
 * --metrics-file, --record-reads, --prefetch-list, --netrc-file, --ca-file, AWS profile
 * files, --cache-dir, TMPDIR for the run directory; publish's SRC and OUT).
 *
 * The daemon often runs as root, so a path is trusted only when no one but root or this
 * process's effective uid can change what it names (sshd's StrictModes rule):
 *  - every directory on the way, "/" included, is owned by root or the euid and is not
 *    writable by group or others unless sticky (others cannot rename our entries in a
 *    1777 /tmp); a symbolic link met on the way is owned by root or the euid (so /var/run
 *    or a merged /usr still work, a link another user planted does not);
 *  - the last component is opened with O_NOFOLLOW, and must be a regular file;
 *  - a file that already exists there is owned by root or the euid (in a sticky /tmp,
 *    anyone may have made it first); one read is writable by no group or others, whoever
 *    the euid (as ssh: a credential_process or a CA another user could add); one written
 *    has a single link (no hard link to another file of root's).
 * A directory is resolved once and held as a descriptor: a file written later goes through
 * it (openat, renameat), so a directory renamed or replaced after start changes nothing.
 *
 * Objects of a file: mirror (fetch/http/beneath.h) are a different case: the manifest's
 * author, not a local user, names them, so no symlink at all is followed there and nothing
 * may leave the mirror's directory; the directory itself is opened here.
 *
 * Every function returns -errno on failure and, when why_len > 0, one sentence in why
 * naming the path and its fault (never the file's content). Nothing is logged here.
 */
#ifndef SPOOLFS_UTIL_TRUSTED_PATH_H
#define SPOOLFS_UTIL_TRUSTED_PATH_H

#include <stddef.h>
#include <sys/types.h>

/* util_path_trusted's flags. */
enum {
	/* The path must be canonical (realpath's): a symbolic link on it is refused. */
	UTIL_TRUST_NO_SYMLINKS = 1,
};

/*
 * Whether the directory path (absolute) and every directory on the way to it satisfy the
 * rule above. 0; -EACCES for an untrusted directory or link; -EINVAL for a relative path;
 * -ENOTDIR, -ENOENT, -ELOOP or another -errno when a component cannot be examined.
 */
int util_path_trusted(const char *path, int flags, char *why, size_t why_len);

/*
 * Opens the directory path (relative to the working directory, or absolute) under the
 * rule: an O_PATH | O_DIRECTORY | O_CLOEXEC descriptor, or -errno. When canonical is not
 * NULL, *canonical is the directory's canonical path (malloc'd; the caller frees it).
 */
int util_trusted_dir(const char *path, char **canonical, char *why, size_t why_len);

/*
 * The directory of a file path held as util_trusted_dir's descriptor (*dir_fd), and the
 * file's last component (*name, malloc'd). "x" is in ".", "/x" in "/"; a path that ends in
 * '/', ".", ".." or names no file is refused with -EINVAL. When full is not NULL, *full is
 * the canonical directory joined with the name (malloc'd), for messages.
 */
int util_trusted_parent(const char *path, int *dir_fd, char **name, char **full, char *why,
                        size_t why_len);

enum util_trusted_how {
	UTIL_TRUSTED_READ,   /* O_RDONLY */
	UTIL_TRUSTED_APPEND, /* O_WRONLY | O_APPEND | O_CREAT, made 0600 */
	/* O_RDONLY, and by util_trusted_open only: a last component that is a symlink owned
	 * by root or the euid (it sits in a checked directory) is followed, its target checked
	 * the same way. For secrets that tools rotate by a link (a Kubernetes secret volume's
	 * "token -> ..data/token"); never for a file that is written. */
	UTIL_TRUSTED_READ_FOLLOW,
};

/*
 * Opens name (one component) in dir_fd, a directory util_trusted_dir or
 * util_trusted_parent gave: O_NOFOLLOW and O_CLOEXEC, never blocking on a FIFO, a regular
 * file only, its owner and mode checked as above. The fd (blocking) or -errno: -ELOOP for a
 * symlink, -EINVAL for a file that is not regular or a bad name, -EACCES for an owner or a
 * mode refused. Async-signal-safe when why_len is 0 (the log's SIGUSR1 reopen).
 */
int util_trusted_openat(int dir_fd, const char *name, enum util_trusted_how how, char *why,
                        size_t why_len);

/* util_trusted_parent then util_trusted_openat (see UTIL_TRUSTED_READ_FOLLOW): the file's
 * fd or -errno, why naming the whole path. */
int util_trusted_open(const char *path, enum util_trusted_how how, char *why, size_t why_len);

/*
 * Replaces name in dir_fd by a new file: fill writes it through fd (0 or -errno), it is
 * given mode (past the umask) and renamed over name, so a reader sees the old file or the
 * whole new one, made durable (fsync) before the rename. The temporary's name starts with "."
 * and ends in ".tmp" (no collector of "*.prom" reads it), random between (no one can make it
 * first). 0 or -errno; no temporary is left over.
 */
int util_trusted_replace(int dir_fd, const char *name, mode_t mode, int (*fill)(int fd, void *ctx),
                         void *ctx);

#endif

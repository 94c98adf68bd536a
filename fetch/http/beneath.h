/*
 * Objects of a file: mirror, kept beneath the mirror's directory.
 *
 * A mirror's URL for an object is its base plus the part of the object's URL after the
 * manifest's directory, which the manifest's author writes. fetch_mirror_path decides
 * whether that part names a file beneath the base at all (no "..", ".", empty segment,
 * nor an encoded separator, however it is spelled); fetch_open_beneath opens such a file
 * with no symlink followed and no step out of the directory, so that neither a clever
 * URL nor a symlink inside the mirror makes the mount serve another file of this machine.
 *
 * Paths a local user gives (options, profile files) go through util/trusted_path.h, which
 * shares this file's last step (O_NOFOLLOW, a regular file only) but not its walk: there a
 * link owned by root or the daemon's user is followed anywhere (/var/run), since only they
 * could have made it; here the manifest's author names the path, so no link is followed at
 * all and nothing may leave the directory, whoever made it.
 */
#ifndef SPOOLFS_FETCH_BENEATH_H
#define SPOOLFS_FETCH_BENEATH_H

#include <stddef.h>

/*
 * The path (no query or fragment) of an object's URL after the manifest's directory,
 * `rel` (len bytes), decoded: segment by segment, each %XX decoded once. A segment that
 * is empty, "." or "..", or holds '/', '\\', NUL or '%' once decoded, is refused: a '%'
 * left after one decoding (double encoding, "%252e%252e") would become a separator or a
 * dot segment to a server or a tool that decodes once more, so no decoding count makes
 * it safe. 0 with *out malloc'd ("a/b"), -EINVAL when refused (*out NULL), -ENOMEM.
 */
int fetch_mirror_path(const char *rel, size_t len, char **out);

/*
 * Opens `path` (as fetch_mirror_path gives it) read-only beneath dir_fd, following no
 * symlink anywhere on the way and never leaving the directory: openat2 with
 * RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, or, where the kernel has no openat2 (before
 * 5.6), a walk that opens each directory with O_NOFOLLOW | O_DIRECTORY and the file with
 * O_NOFOLLOW. Everything is opened O_PATH, so a FIFO or a device node is refused by fstat
 * without ever being opened for reading (no side effect of its open happens). Returns an
 * O_PATH fd of a regular file (O_CLOEXEC, the caller closes it; read it by reopening
 * /proc/self/fd/N) or -errno: -ELOOP or -EXDEV for a symlink or an
 * escape, -ENOENT when the mirror lacks it, -EINVAL for a path fetch_mirror_path refuses
 * or a file that is not regular.
 *
 * SPOOLFS_TEST_NO_OPENAT2=1 in the environment forces the walk, so that a test on a new
 * kernel shows the fallback refuses what openat2 refuses.
 */
int fetch_open_beneath(int dir_fd, const char *path);

#endif

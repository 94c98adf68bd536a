/*
 * The virtual files under /.spoolfs at the mount root, for operators:
 *   stats    metrics in the Prometheus text format
 *   flights  one JSON object per line for each flight (what `spoolfs status` reads)
 * The directory is not listed in the root but is reachable by path; it shadows a manifest
 * entry of the same name. Each open takes a snapshot that its reads serve (direct_io), so
 * a reader always sees one consistent state; nothing else builds one (stat shows size 0).
 * Their mode is --stats-mode's (default 0444).
 */
#ifndef SPOOLFS_FS_VIRTUAL_H
#define SPOOLFS_FS_VIRTUAL_H

#include <stdbool.h>
#include <stddef.h>

#include "fs/handles.h"
#include "fs/session.h"

#define FS_VIRTUAL_DIR_NAME INDEX_RESERVED_ROOT_NAME
/* Far above any sqlite rowid the index will hand out. */
#define FS_INO_VIRTUAL_DIR (UINT64_C(1) << 62)
#define FS_INO_STATS (FS_INO_VIRTUAL_DIR + 1)
#define FS_INO_FLIGHTS (FS_INO_VIRTUAL_DIR + 2)

bool fs_virtual_ino(fuse_ino_t ino);

/*
 * Resolves `name` in `parent` if it is virtual: returns 1 with *st filled, 0 when the name
 * is not virtual (ask the index), or -ENOENT inside the virtual directory.
 */
int fs_virtual_lookup(struct fs_session *s, fuse_ino_t parent, const char *name, struct stat *st);

/*
 * Attributes of a virtual inode, without building its content: size 0, or the size of h's
 * snapshot when the kernel names an open handle h of it (else NULL). 0 or -ENOENT.
 */
int fs_virtual_getattr(struct fs_session *s, fuse_ino_t ino, const struct fs_handle *h,
                       struct stat *st);

/* A fresh snapshot of a virtual file's content (malloc'd). 0, -ENOENT, -EISDIR or -ENOMEM. */
int fs_virtual_read_all(struct fs_session *s, fuse_ino_t ino, char **text, size_t *len);

#endif

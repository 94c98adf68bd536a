/*
 * The kernel's readahead for the mount (readahead.c).
 */
#ifndef SPOOLFS_FS_READAHEAD_H
#define SPOOLFS_FS_READAHEAD_H

#include <fuse_lowlevel.h>

struct fs_session;

/*
 * Raises the kernel's readahead for the FUSE mount at mountpoint (an absolute, canonical
 * path, mounted by this process; dev its "major:minor", which names its backing device
 * info) to the largest read request libfuse can still splice. 0, or -errno (it needs root; the
 * default then stays).
 */
int fs_raise_readahead(const char *mountpoint, const char *dev);

/* fs_raise_readahead for the session's mount, the first time it is called. */
void fs_tune_readahead_once(struct fs_session *s);

#endif

/*
 * Prefetch at mount (prefetch.c) and the manifest's read order (read_order.c).
 */
#ifndef SPOOLFS_FS_PREFETCH_H
#define SPOOLFS_FS_PREFETCH_H

#include <fuse_lowlevel.h>

struct fs_session;

/*
 * Prefetch (prefetch.c). fs_prefetch_open, before daemonising: checks the options, opens
 * the list (--prefetch-list, else a record kept in the cache directory). fs_prefetch_start,
 * once the engine runs: starts the thread. fs_prefetch_stop, after the loop and before the
 * engine stops: stops it and writes the records of what was opened. 0 or -errno (said).
 */
int fs_prefetch_open(struct fs_session *s);
int fs_prefetch_start(struct fs_session *s);
void fs_prefetch_stop(struct fs_session *s);
void fs_prefetch_free(struct fs_session *s);
/*
 * The manifest's read order (read_order.c). fs_read_order_keep, after the root manifest is
 * loaded: logs why none was taken, and keeps the one taken (load_opts->read_order, freed)
 * in the index for every serving process. fs_read_order_open: the kept order as a
 * prefetch list, *fd (-1: none), its name in s->read_order_name and _label. 0 or -errno.
 */
struct manifest_load_options;
int fs_read_order_keep(struct fs_session *s, struct manifest_load_options *load_opts);
int fs_read_order_open(struct fs_session *s, int *fd);
/* An open of file ino in directory parent (not a virtual file). */
void fs_prefetch_note_open(struct fs_session *s, fuse_ino_t ino, uint64_t parent);

#endif

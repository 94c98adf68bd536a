/*
 * Ending the mount's connection after the loop (abort.c).
 */
#ifndef SPOOLFS_DAEMON_ABORT_H
#define SPOOLFS_DAEMON_ABORT_H

#include <stdbool.h>

struct fs_session;

/* Whether the topmost mount at the mountpoint is still this session's (daemon/abort.c). */
bool daemon_mount_still_ours(const struct fs_session *s);

/* Whether the kernel has ended the connection (unmounted, or aborted). */
bool daemon_connection_gone(const struct fs_session *s);

/* Once the FUSE loop has ended: fails every request still pending in the kernel and
 * detaches the mount (daemon/abort.c). Needs root; 0 without doing anything when it cannot
 * apply (not root, unmounted already, another mount on top), or -errno. */
int daemon_abort_connection(struct fs_session *s);

#endif

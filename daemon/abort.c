/*
 * Ends the kernel's side of the session when the FUSE loop has ended.
 *
 * Requests the kernel queued and the daemon never read stay pending, and so do requests
 * libfuse read and threw away because the session was exiting. A page cache read among
 * them keeps its pages locked, and an invalidation of those pages (page_drop.c, or the
 * one after a failed flight) waits on that lock in the kernel, where no signal reaches
 * it: joining that thread would hang the shut-down. Unmounting would not end it either,
 * as the waiting thread holds the device open, and only its last close aborts the
 * connection. So the connection is aborted right away, as `umount -f` does: every pending
 * request ends with an error, the pages unlock, and the mount is detached at the same
 * time (libfuse's own unmount then sees the connection gone and does nothing).
 *
 * It needs CAP_SYS_ADMIN. Without it (a mount through fusermount3) the page drops cannot
 * wait there (they need passthrough, which needs root), but the invalidation after a
 * failed flight still can: it is skipped once the loop has ended (reply.c), which
 * leaves only one that had already started. Aborting through fusectl's
 * connections/N/abort would close that too; fusectl is not mounted on the machines this
 * was built on, so it is left out untested.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "daemon/abort.h"
#include "util/log.h"
#include "daemon/mountinfo.h"
#include "fs/session.h"

bool daemon_mount_still_ours(const struct fs_session *s)
{
	char dev[sizeof(s->mount_dev)];

	return s->mount_path && s->mount_dev[0] &&
	       daemon_mount_device(s->mount_path, dev, sizeof(dev)) == 0 &&
	       strcmp(dev, s->mount_dev) == 0;
}

bool daemon_connection_gone(const struct fs_session *s)
{
	struct pollfd device = {.fd = fuse_session_fd(s->se)};

	return poll(&device, 1, 0) == 1 && (device.revents & POLLERR);
}

int daemon_abort_connection(struct fs_session *s)
{
	if (geteuid() != 0)
		return 0;
	/* Unmounted already (fusermount3 -u ended the loop): nothing is pending. */
	if (daemon_connection_gone(s))
		return 0;
	/* Someone mounted over this mount: the path no longer names it, and forcing that
	 * other mount is not ours to do. The device's last close still ends ours. */
	if (!daemon_mount_still_ours(s))
		return 0;
	return umount2(s->mount_path, MNT_FORCE | MNT_DETACH) == 0 ? 0 : -errno;
}

/*
 * Readiness for a service manager (systemd's Type=notify, through libsystemd's sd_notify):
 * STATUS= lines while the mount starts, READY=1 once the kernel's INIT has been answered
 * (from then on the mount serves requests), STOPPING=1 when the loop ends. Without
 * $NOTIFY_SOCKET each call is a no-op.
 */
#ifndef SPOOLFS_FS_NOTIFY_H
#define SPOOLFS_FS_NOTIFY_H

#include <stdint.h>

void fs_notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fs_notify_ready(uint64_t files, uint64_t dirs, uint64_t bytes);
void fs_notify_stopping(void);

#endif

/*
 * notify.c: sd_notify messages (see notify.h). sd_notify keeps $NOTIFY_SOCKET in the
 * environment (unset_environment = 0): libfuse's daemonize forks, and the loop's threads
 * may report again.
 */
#include "fs/notify.h"

#include <stdarg.h>
#include <stdio.h>

#include <systemd/sd-daemon.h>

void fs_notify_status(const char *fmt, ...)
{
	char status[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(status, sizeof(status), fmt, ap);
	va_end(ap);
	sd_notifyf(0, "STATUS=%s", status);
}

void fs_notify_ready(uint64_t files, uint64_t dirs, uint64_t bytes)
{
	sd_notifyf(0, "READY=1\nSTATUS=ready: %llu files, %llu directories, %llu bytes",
	           (unsigned long long)files, (unsigned long long)dirs, (unsigned long long)bytes);
}

void fs_notify_stopping(void)
{
	sd_notify(0, "STOPPING=1\nSTATUS=unmounting");
}

/* File descriptors left under the limit (see fd_room.h). */
#include "util/fd_room.h"

#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/resource.h>

static atomic_uint shorts;

int util_fd_room(void)
{
	struct rlimit rl;
	struct dirent *d;
	long open = 0;
	DIR *dir;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
	    rl.rlim_cur >= UTIL_FD_ROOM_PLENTY)
		return UTIL_FD_ROOM_PLENTY;
	dir = opendir("/proc/self/fd");
	if (!dir)
		return errno == EMFILE || errno == ENFILE ? 0 : UTIL_FD_ROOM_PLENTY;
	while ((d = readdir(dir)) != NULL)
		if (d->d_name[0] != '.')
			open++;
	closedir(dir);
	open--; /* the directory's own fd, closed again */
	return (long)rl.rlim_cur > open ? (int)((long)rl.rlim_cur - open) : 0;
}

void util_fd_note_short(int err)
{
	if (err == -EMFILE || err == -ENFILE)
		atomic_fetch_add_explicit(&shorts, 1, memory_order_relaxed);
}

unsigned util_fd_shorts(void)
{
	return atomic_load_explicit(&shorts, memory_order_relaxed);
}

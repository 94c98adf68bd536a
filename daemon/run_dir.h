/*
 * The mount's private run directory (run_dir.c, doc/survive.md).
 */
#ifndef SPOOLFS_DAEMON_RUN_DIR_H
#define SPOOLFS_DAEMON_RUN_DIR_H

struct fs_session;

/* Makes the mount's run directory (s->run_dir, run_dir_fd, run_lock_fd), first removing
 * those that mounts killed whole left behind; 0 or -errno, said on stderr. */
int daemon_run_dir_make(struct fs_session *s);
/* A serving process's run directory lock, passed on fd; ignored when fd is not one. */
void daemon_run_dir_adopt_lock(struct fs_session *s, int fd);
/* Lets go of the run directory, removing it first when no supervisor took it over (the
 * mount failed, or ran without one). */
void daemon_run_dir_close(struct fs_session *s);

#endif

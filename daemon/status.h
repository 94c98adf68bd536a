/*
 * `spoolfs status` (status.c): a client of a mount's /.spoolfs files.
 */
#ifndef SPOOLFS_DAEMON_STATUS_H
#define SPOOLFS_DAEMON_STATUS_H

/* `spoolfs status MOUNTPOINT [--watch]`; returns the exit status. */
int daemon_status_main(int argc, char **argv);

#endif

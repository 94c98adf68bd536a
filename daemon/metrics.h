/*
 * Metrics in the Prometheus text format: the counters /.spoolfs/stats shows, and, with
 * --metrics-file PATH, a file outside the mount for node_exporter's textfile collector
 * (or anything that reads a file), rewritten every --metrics-interval seconds by a thread
 * of its own and once more at unmount. The file also has latency histograms and a mount
 * label on every sample, so several mounts on one machine each write a file of their own
 * and can be told apart.
 *
 * Each write builds the whole text in memory (the flight table's lock is taken only while
 * counting flights, as /.spoolfs/stats does), writes it to a new file in PATH's directory
 * and renames that over PATH: a reader sees the old file or the new one, never a half.
 */
#ifndef SPOOLFS_DAEMON_METRICS_H
#define SPOOLFS_DAEMON_METRICS_H

#include <stdio.h>

#include "fs/session.h"

/*
 * Writes the counters and gauges of /.spoolfs/stats to out. labels: the text between
 * braces on every sample (`mount="/mnt"`), or NULL for none, as /.spoolfs/stats has.
 */
void daemon_metrics_write_stats(struct fs_session *s, FILE *out, const char *labels);

/* The prefetch part of the stats (speculation and the prefetch list). */
void daemon_metrics_write_prefetch(struct fs_session *s, FILE *out, const char *labels,
                                   uint64_t spec_unread);

/* Writes the file once and starts the writer thread (after daemonising); a no-op without
 * --metrics-file. 0 or -errno. */
int daemon_metrics_start(struct fs_session *s);

/* Stops and joins the writer, then writes the file a last time, with spoolfs_mounted 0.
 * Call once nothing changes the counters any more. A no-op when it did not start. */
void daemon_metrics_stop(struct fs_session *s);

#endif

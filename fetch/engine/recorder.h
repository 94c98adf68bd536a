/*
 * The recorder: a thread that makes a persistent cache's progress durable, so the
 * transfer thread never waits for the disk. Each record fdatasyncs the spool first, then
 * writes the ranges to the index: the index never claims bytes that a crash could lose.
 * Jobs run in the order they were queued, so an object's records stay in order, and a
 * lease handed over after them is let go only once the next holder can read them.
 *
 * Jobs are taken in batches (all queued since the last pass), so a burst of completion
 * records shares its disk syncs instead of waiting in line, each holding its descriptors.
 *
 * Lock: its own mutex guards the pending jobs; the worker (worker.h) runs the batches.
 */
#ifndef SPOOLFS_FETCH_RECORDER_H
#define SPOOLFS_FETCH_RECORDER_H

#include <stdbool.h>

#include "fetch/engine/flight.h"
#include "util/ranges.h"

struct index_records;
struct lease_set;
struct recorder;

/* Starts the recorder thread. 0 or -errno. */
int recorder_start(struct index_records *records, struct recorder **out);

/* Runs every queued job, then stops the thread. */
void recorder_stop(struct recorder *r);

/*
 * Records `written` (taken over: the caller's set is left empty) as f's durable ranges,
 * and f as complete when `complete` (then f->durable becomes true). Holds a reference to
 * f until done. Without memory for the job it runs here and now.
 */
void recorder_ranges(struct recorder *r, struct flight *f, struct util_ranges *written,
                     bool complete);

/* Forgets f's records (its download failed). */
void recorder_failed(struct recorder *r, struct flight *f);

/* Lets key's lease in `leases` go once everything queued before is recorded. */
void recorder_release(struct recorder *r, struct lease_set *leases, const char *key);

#endif

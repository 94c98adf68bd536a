/*
 * A manifest's entries built on a thread of their own (load_pipe.c): the loader's thread
 * reads the JSON and checks each entry, this one adds the checked entries to the namespace,
 * in their order, so the two halves of a large load run at once (on two cores, a
 * 1,000,000-entry load took 9.4 s in one thread). Knows nothing of JSON nor of the
 * namespace's rules: it copies entries and calls the loader's add function.
 */
#ifndef SPOOLFS_FETCH_SOURCE_LOAD_PIPE_H
#define SPOOLFS_FETCH_SOURCE_LOAD_PIPE_H

#include <stddef.h>
#include <stdint.h>

#include "index/index.h"

struct load_pipe;

/* Adds entry i (its number in the manifest) on the builder thread: 0, or -errno with the
 * message (naming the entry) in err. The first failure ends the adding. */
typedef int (*load_pipe_add_fn)(void *ctx, int64_t i, const struct index_build_entry *be, char *err,
                                size_t err_len);

/* Starts the builder thread, which calls add(ctx, ...) for each entry put. 0 or -errno
 * (nothing started). */
int load_pipe_start(struct load_pipe **out, load_pipe_add_fn add, void *ctx);

/*
 * Queues a copy of be (its strings too: the caller's may change once this returns),
 * waiting while the builder is a few thousand entries behind. 0; -ECANCELED when an
 * earlier entry failed (stop reading: load_pipe_finish says why); -ENOMEM.
 */
int load_pipe_put(struct load_pipe *p, int64_t i, const struct index_build_entry *be);

/*
 * Waits until the builder has added every entry put (or failed), joins it and frees p.
 * Returns the builder's result: 0, or its -errno with its message in err (an entry before
 * any the reader refused, so the message to give). p may be NULL (0).
 */
int load_pipe_finish(struct load_pipe *p, char *err, size_t err_len);

#endif

/*
 * Nested manifests: a directory whose entries are in a manifest of its own (named by its
 * sha256 from its parent's manifest, so the session stays one exact snapshot) is listed at
 * its first lookup, like a bucket's directory, through the listing single-flight
 * (listing_flight.h). A large published tree mounts with its top manifest alone.
 */
#ifndef SPOOLFS_FETCH_SOURCE_NESTED_H
#define SPOOLFS_FETCH_SOURCE_NESTED_H

#include <stddef.h>
#include <stdint.h>

#include "fetch/source/manifest_load.h"
#include "fetch/source/source.h"

/*
 * Lists directory dir of idx from its own manifest: fetches it with src (a blocking
 * request: metadata, in the caller's thread), checks its size and sha256 against its
 * parent's entry, and loads it (source_manifest_load_subtree, with base_url the root
 * manifest's and opts' rules). 0 (also when another thread listed dir meanwhile),
 * -ENODATA when dir has no manifest of its own, or -errno with a one-line message in err.
 */
int source_nested_list(struct index *idx, uint64_t dir, const struct source_options *src,
                       const char *base_url, struct manifest_load_options *opts, char *err,
                       size_t err_len);

#endif

/*
 * Flight internals shared by flight.c and hasher.c; nothing outside fetch/ includes this.
 */
#ifndef SPOOLFS_FETCH_FLIGHT_I_H
#define SPOOLFS_FETCH_FLIGHT_I_H

#include "fetch/flight.h"

/*
 * Hashes what became contiguous since the last call and, once the whole object is hashed,
 * verifies it and publishes the withheld bytes. Called by the flight's hashing owner only.
 * Returns 0, or -EIO on a mismatch (the caller fails the flight), or -errno.
 */
int flight_hash_progress(struct flight *f);

struct flight_hasher;

/* Starts the thread; *out is NULL on failure. 0 or -errno. */
int flight_hasher_start(struct flight_hasher **out);
/* Stops and joins it, dropping what is still queued. NULL is fine. */
void flight_hasher_stop(struct flight_hasher *h);
/* Queues f (once) for flight_hash_progress, taking a reference. Any thread. */
void flight_hasher_kick(struct flight_hasher *h, struct flight *f);

#endif

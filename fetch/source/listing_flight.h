/*
 * Single-flight for lazy directory listings (S3 sources list a directory on first use):
 * one listing of a directory at a time, joined by every concurrent caller for it instead
 * of sending their own.
 *
 * The index is the truth of what is listed: a directory is done when index_dir_listed says
 * so (the listing marks it, atomically with its children). A failed listing leaves it
 * unlisted, so the next caller, a waiter too, lists it again.
 *
 * Thread-safety: every function but create and destroy may be called from any thread.
 * Lock order: the table's lock, then the index's lock (inside index calls); the table's
 * lock is never held across a listing.
 */
#ifndef SPOOLFS_FETCH_LISTING_FLIGHT_H
#define SPOOLFS_FETCH_LISTING_FLIGHT_H

#include <stdint.h>

struct index;
struct listing_flights;

/* Lists directory dir into the index (index_add_listing marks it listed). 0 or -errno. */
typedef int (*listing_flight_list_fn)(void *ctx, uint64_t dir);

/* 0 and *out, or -ENOMEM. */
int listing_flights_create(struct listing_flights **out);
/* After every caller of listing_flight_ensure has returned. NULL does nothing. */
void listing_flights_destroy(struct listing_flights *lf);

/*
 * Makes sure directory dir of idx is listed: returns 0 at once when it is; else calls
 * list(ctx, dir) in this thread, unless another caller is listing dir already, whose
 * listing this one waits for. Returns 0, list's error (as list returned it), or an
 * index_dir_listed error (-ENOENT, -ENOTDIR), or -ENOMEM.
 */
int listing_flight_ensure(struct listing_flights *lf, struct index *idx, uint64_t dir,
                          listing_flight_list_fn list, void *ctx);

/* How many callers have waited for another's listing: for stats and tests. */
uint64_t listing_flights_joined(struct listing_flights *lf);

#endif

/*
 * Private to object.c and member.c: the layout of struct fetch_objects.
 */
#ifndef SPOOLFS_FETCH_OBJECT_I_H
#define SPOOLFS_FETCH_OBJECT_I_H

#include <pthread.h>

#include "fetch/engine/object.h"

/* A member whose bytes matched, in one pack flight. */
struct verified_member {
	uint64_t flight_id;
	/* The whole member, not only its offset: two entries may name the same bytes of a
	 * pack with another size or sha256, and each is served only once its own matched. */
	struct fetch_member member;
	struct verified_member *next; /* in its bucket */
};

struct fetch_objects {
	struct fetch_objects_config cfg; /* fixed at create */
	/*
	 * The members verified so far, by (flight_id(pack's flight), member): a member is hashed
	 * once per flight, not at every open (a warm walk over a packed tree opened thousands).
	 * A failed pack's next flight has another id, so its members are checked again. Dead
	 * flights' entries stay (a few bytes per member and refetch) until destroy.
	 */
	pthread_mutex_t verified_lock;
	struct verified_member **verified; /* guarded by verified_lock: n_buckets chains */
	size_t n_buckets;                  /* guarded by verified_lock; 0 before the first */
	size_t n_verified;                 /* guarded by verified_lock */
};

/* Frees the set of verified members (destroy). */
void fetch_member_forget_all(struct fetch_objects *o);

#endif

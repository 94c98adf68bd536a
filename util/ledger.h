/*
 * The passthrough ledger: what the kernel holds open, per inode, in shared memory that
 * outlives the processes writing it (a memfd the first serving process makes and the
 * supervisor hands on; each maps it MAP_SHARED). fs/passthrough.c keeps in it every open
 * file of an object the kernel holds: per inode, the I/O mode the kernel pinned (a
 * passthrough backing id, or 0 for the page cache), which serving process made the entry,
 * and how many files are open; and per open, its fh. A serving process that replaces a dead
 * one then opens each inode the way the kernel requires (doc/survive.md).
 *
 * Opens are keyed by the fh the kernel holds, so that recording an open twice, or a release
 * twice (a request resent after a kill that landed after the ledger's update but before the
 * reply), changes nothing the second time.
 *
 * Lock: a process-shared robust mutex in the mapping guards every slot; a process that
 * died holding it leaves it to the next locker, which takes the tables as they are. Each
 * update writes in the order that leaves a count too high, never too low, when it stops
 * half way (see ledger.c): an inode then stays in its mode longer, which the kernel allows.
 */
#ifndef SPOOLFS_UTIL_LEDGER_H
#define SPOOLFS_UTIL_LEDGER_H

#include <stdbool.h>
#include <stdint.h>

struct util_ledger;

/* Inodes with open files, and open files, a ledger holds: more are refused (-ENOSPC), and
 * the ledger is marked overflowed for good. */
#define UTIL_LEDGER_SLOTS 8192
#define UTIL_LEDGER_OPENS 65536

/* Makes a ledger in a new memfd: *fd (close-on-exec; the caller passes it on) and *out. */
int util_ledger_create(int *fd, struct util_ledger **out);
/* Maps the ledger in fd (made by util_ledger_create, maybe in another process): -EPROTO
 * when another spoolfs build laid it out otherwise. */
int util_ledger_map(int fd, struct util_ledger **out);
void util_ledger_unmap(struct util_ledger *l);

/*
 * Records open `open` (non-zero) of `key` (non-zero): key's count goes up by one, a new
 * entry taking value and owner. Returns key's value (the one its entry had, which may differ
 * from value), or -ENOSPC (nothing recorded; the ledger is overflowed), -EINVAL. An open
 * already recorded is not counted again: its key's value is returned.
 */
int64_t util_ledger_open(struct util_ledger *l, uint64_t open, uint64_t key, int64_t value,
                         uint64_t owner);
/*
 * Records open `open` of key only when key has an entry with a value > 0 that another owner
 * than not_owner made: returns that value (> 0), else 0 (nothing recorded). With no room
 * to record the open, the value is still returned (the kernel holds the inode on it) and
 * the ledger is marked overflowed.
 */
int64_t util_ledger_join(struct util_ledger *l, uint64_t open, uint64_t key, uint64_t not_owner);
/*
 * Forgets open `open`: its key's count goes down by one. Returns the count left (0: the
 * entry went), its value in *value and, when value_last is not NULL, whether the entry
 * went and no other entry has its value (several keys may share one); -ENOENT when `open`
 * is not recorded (never, or forgotten already).
 */
int64_t util_ledger_close(struct util_ledger *l, uint64_t open, int64_t *value, bool *value_last);
/* key's count (0 when none), value and owner (owner may be NULL). */
int64_t util_ledger_get(struct util_ledger *l, uint64_t key, int64_t *value, uint64_t *owner);
/* Whether an open was ever refused for want of room: the ledger is then incomplete. */
bool util_ledger_overflowed(struct util_ledger *l);

#endif

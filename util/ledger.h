/*
 * A small table of counted entries in shared memory, which outlives the processes that
 * write it: a memfd the first one makes and hands on, each mapping it MAP_SHARED. An entry
 * is a key (non-zero), a value fixed while the entry lives, and a count; it goes when its
 * count reaches 0. fs/ keeps in it, per inode, the passthrough backing id the kernel holds
 * and how many passthrough files of it are open, so that a serving process that replaces a
 * dead one knows them (doc/survive.md).
 *
 * Lock: a process-shared robust mutex in the mapping guards every slot; a process that
 * died holding it leaves it to the next locker, which takes the table as it is (each
 * change is one slot's count or a slot filled whole before its key is set).
 */
#ifndef SPOOLFS_UTIL_LEDGER_H
#define SPOOLFS_UTIL_LEDGER_H

#include <stdbool.h>
#include <stdint.h>

struct util_ledger;

/* Slots in a ledger: more entries than this are refused (-ENOSPC). */
#define UTIL_LEDGER_SLOTS 8192

/* Makes a ledger in a new memfd: *fd (close-on-exec; the caller passes it on) and *out. */
int util_ledger_create(int *fd, struct util_ledger **out);
/* Maps the ledger in fd (made by util_ledger_create, maybe in another process). */
int util_ledger_map(int fd, struct util_ledger **out);
void util_ledger_unmap(struct util_ledger *l);

/*
 * Adds one to key's count; a new entry takes value. Returns the entry's value (the one it
 * had, which may differ from value), or -ENOSPC, -EINVAL (key 0).
 */
int64_t util_ledger_add(struct util_ledger *l, uint64_t key, int64_t value);
/* Takes one from key's count. Returns the count left (0: the entry is gone) and its value
 * in *value, or -ENOENT when key has no entry. value_last (may be NULL): the entry went and
 * no other entry has its value (several keys may share one). */
int64_t util_ledger_sub(struct util_ledger *l, uint64_t key, int64_t *value, bool *value_last);
/* key's count (0 when none) and value. */
int64_t util_ledger_get(struct util_ledger *l, uint64_t key, int64_t *value);

#endif

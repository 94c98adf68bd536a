/*
 * The files a prefetch list (or read order) named: a bit per inode (inodes are dense: sqlite
 * rowids). A walk beside a list asks it, so that it spends no speculative slots on what the
 * list fetches already and is not set off by opens the list foresaw.
 *
 * No lock: it belongs to the prefetch thread.
 */
#ifndef SPOOLFS_FETCH_PREFETCH_FORESEEN_H
#define SPOOLFS_FETCH_PREFETCH_FORESEEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Inodes past this are never marked (a bitmap of 128 MiB): a walk then treats them as
 * unforeseen, as it would without a list. */
#define FORESEEN_MAX_INO (1ull << 30)

struct foreseen {
	uint8_t *bits;
	size_t bytes;
};

/* Marks ino. Out of memory, or past FORESEEN_MAX_INO: not marked (a walk may fetch it). */
void foreseen_add(struct foreseen *f, uint64_t ino);
bool foreseen_has(const struct foreseen *f, uint64_t ino);
void foreseen_free(struct foreseen *f);

#endif

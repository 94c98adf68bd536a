/*
 * Every path a namespace build names, while it runs (see path_table.c): finds parents,
 * duplicates and file/directory clashes without a query per path segment. One loader owns
 * a table: no lock.
 */
#ifndef SPOOLFS_INDEX_PATH_TABLE_H
#define SPOOLFS_INDEX_PATH_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/hash.h"

/* A path seen while loading: a file or an implied directory. */
struct path_node {
	char *path; /* owned copy, not NUL-terminated in meaning: len counts */
	size_t len;
	uint64_t hash;
	int64_t ino;
	int64_t mtime;   /* for directories: max over descendants */
	uint32_t parent; /* index into path_table.v; the root is its own parent */
	bool is_dir;
	/* Set by the builder (build.c) after path_table_add. */
	uint8_t kind;       /* enum index_kind */
	bool listed_itself; /* directories: an entry named it, besides implying it */
	bool has_own_mtime; /* directories: keeps its entry's mtime, not the newest below */
	bool has_mode;
	uint32_t mode;
	bool nested; /* directories: its entries are in a manifest of its own */
};

/* Open-addressing hash of paths; slots hold index + 1 into v, 0 when empty. */
struct path_table {
	struct path_node *v;
	size_t n, cap;
	uint32_t *slots;
	size_t nslots;            /* a power of two, kept at least twice n */
	struct util_hash_key key; /* the table's own: a manifest cannot aim at its slots */
};

/* An empty table with a fresh key. 0, or -errno from util_hash_key_new. */
int path_table_init(struct path_table *t);

/* The hash path_table_find and path_table_add take for path (len bytes) in t. */
static inline uint64_t path_table_hash(const struct path_table *t, const char *path, size_t len)
{
	return util_hash_bytes(&t->key, path, len);
}

/* The index of path (len bytes, hashed to hash) in t->v, or -1. */
long path_table_find(const struct path_table *t, const char *path, size_t len, uint64_t hash);
/* Adds a copy of path and returns its index in t->v, or -ENOMEM / -E2BIG. */
long path_table_add(struct path_table *t, const char *path, size_t len, uint64_t hash, int64_t ino,
                    bool is_dir, uint32_t parent);
void path_table_free(struct path_table *t);

#endif

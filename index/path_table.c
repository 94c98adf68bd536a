/*
 * An open-addressing hash table of paths over a growing array: the array keeps the order
 * paths were added in (parents before children), which the loader walks at the end.
 */
#include "index/path_table.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int path_table_init(struct path_table *t)
{
	memset(t, 0, sizeof(*t));
	return util_hash_key_new(&t->key);
}

long path_table_find(const struct path_table *t, const char *path, size_t len, uint64_t hash)
{
	size_t mask = t->nslots - 1;

	for (size_t s = hash & mask;; s = (s + 1) & mask) {
		uint32_t slot = t->slots[s];
		if (slot == 0)
			return -1;
		const struct path_node *p = &t->v[slot - 1];
		if (p->hash == hash && p->len == len && memcmp(p->path, path, len) == 0)
			return (long)(slot - 1);
	}
}

static void place(struct path_table *t, uint32_t i)
{
	size_t mask = t->nslots - 1;
	size_t s = t->v[i].hash & mask;

	while (t->slots[s] != 0)
		s = (s + 1) & mask;
	t->slots[s] = i + 1;
}

static int grow(struct path_table *t)
{
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 1024;
		if (cap > UINT32_MAX - 1)
			return -E2BIG;
		struct path_node *v = realloc(t->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		t->v = v;
		t->cap = cap;
	}
	if ((t->n + 1) * 2 > t->nslots) {
		size_t nslots = t->nslots ? t->nslots * 2 : 2048;
		uint32_t *slots = calloc(nslots, sizeof(*slots));
		if (!slots)
			return -ENOMEM;
		free(t->slots);
		t->slots = slots;
		t->nslots = nslots;
		for (size_t i = 0; i < t->n; i++)
			place(t, (uint32_t)i);
	}
	return 0;
}

long path_table_add(struct path_table *t, const char *path, size_t len, uint64_t hash, int64_t ino,
                    bool is_dir, uint32_t parent)
{
	int rc = grow(t);

	if (rc < 0)
		return rc;
	char *copy = malloc(len + 1);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, path, len);
	copy[len] = '\0';
	struct path_node *p = &t->v[t->n];
	*p = (struct path_node){
	    .path = copy, .len = len, .hash = hash, .ino = ino, .is_dir = is_dir, .parent = parent};
	place(t, (uint32_t)t->n);
	return (long)t->n++;
}

void path_table_free(struct path_table *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->v[i].path);
	free(t->v);
	free(t->slots);
	memset(t, 0, sizeof(*t));
}

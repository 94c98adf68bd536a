/*
 * Nested manifests for large trees: a directory with more than nest_over entries below it
 * gets a manifest of its own, which the mount loads at the directory's first lookup, so a
 * tree of a million files mounts with its top manifest alone. Each nested manifest is an
 * object (named by its sha256, which its parent's entry carries: the snapshot stays
 * exact), written before its parent's.
 *
 * The choice runs from the deepest directories up: a directory's count is its own
 * entries plus its subdirectories' counts, except that a subdirectory that got its own
 * manifest counts as one entry. So every manifest, the top one too, holds at most about
 * nest_over entries plus one directory's own.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "publish/publish_i.h"

struct dir_info {
	struct pub_entry *e;
	size_t depth;
	uint64_t count; /* entries below, a nested subdirectory counting as one */
};

static int cmp_path(const void *a, const void *b)
{
	return strcmp((*(struct dir_info *const *)a)->e->path,
	              (*(struct dir_info *const *)b)->e->path);
}

static int cmp_depth_desc(const void *a, const void *b)
{
	const struct dir_info *x = *(struct dir_info *const *)a, *y = *(struct dir_info *const *)b;

	return x->depth != y->depth ? (x->depth < y->depth ? 1 : -1)
	                            : strcmp(x->e->path, y->e->path);
}

/* The directory that holds path (NULL: the top), found in dirs sorted by path. */
static struct dir_info *parent_of(const char *path, struct dir_info **by_path, size_t n)
{
	const char *slash = strrchr(path, '/');
	size_t lo = 0, hi = n;

	if (!slash)
		return NULL;
	size_t len = (size_t)(slash - path);
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strncmp(by_path[mid]->e->path, path, len);
		if (c == 0)
			c = by_path[mid]->e->path[len] == '\0' ? 0 : 1;
		if (c == 0)
			return by_path[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL; /* the walk records every directory: not reached */
}

/* The nearest nested directory above entry e (NULL: the top manifest holds it). */
static struct pub_entry *owner_of(const struct pub_entry *e, struct dir_info **by_path, size_t n)
{
	for (struct dir_info *p = parent_of(e->path, by_path, n); p;
	     p = parent_of(p->e->path, by_path, n))
		if (p->e->nested)
			return p->e;
	return NULL;
}

int pub_nest(struct pub_tree *tree, uint64_t nest_over, struct pub_store *st)
{
	struct dir_info *dirs = NULL, **by_path = NULL, **by_depth = NULL;
	size_t n = 0;
	int rc = 0;

	if (!nest_over)
		return 0;
	dirs = calloc(tree->n_entries + 1, sizeof(*dirs));
	by_path = calloc(tree->n_entries + 1, sizeof(*by_path));
	by_depth = calloc(tree->n_entries + 1, sizeof(*by_depth));
	if (!dirs || !by_path || !by_depth) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < tree->n_entries; i++) {
		struct pub_entry *e = tree->entries[i];
		if (e->kind != PUB_DIR)
			continue;
		dirs[n].e = e;
		for (const char *p = e->path; *p; p++)
			dirs[n].depth += *p == '/';
		by_path[n] = by_depth[n] = &dirs[n];
		n++;
	}
	qsort(by_path, n, sizeof(*by_path), cmp_path);
	qsort(by_depth, n, sizeof(*by_depth), cmp_depth_desc);
	/* Each entry counts in its directory; then directories, deepest first, decide and
	 * hand their count (or 1 once nested) up. */
	for (size_t i = 0; i < tree->n_entries; i++) {
		struct dir_info *p = parent_of(tree->entries[i]->path, by_path, n);
		if (p)
			p->count++;
	}
	for (size_t i = 0; i < n; i++) {
		struct dir_info *d = by_depth[i], *p = parent_of(d->e->path, by_path, n);
		d->e->nested = d->count > nest_over;
		/* Its own entry counted in p already; a nested one adds nothing more. */
		if (p && !d->e->nested)
			p->count += d->count;
	}
	for (size_t i = 0; i < tree->n_entries; i++)
		tree->entries[i]->owner = owner_of(tree->entries[i], by_path, n);
	/* Deepest first: a parent's manifest names its nested children's digests. */
	for (size_t i = 0; i < n && rc == 0; i++)
		if (by_depth[i]->e->nested)
			rc = pub_manifest_write_nested(tree, by_depth[i]->e, st);
out:
	if (rc == -ENOMEM)
		pub_say("", st->out, "", strerror(ENOMEM), false);
	free(dirs);
	free(by_path);
	free(by_depth);
	return rc;
}

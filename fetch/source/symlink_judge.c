/*
 * symlink_judge.c: the loader's side of judging symlinks (symlink_judge.h). It gives the
 * resolver (symlink_resolve.h) one view of the snapshot as it will be once the load
 * commits: paths below the directory loaded are this load's (the builder's table of paths,
 * then the links kept aside, then the directories those links imply), the directory loaded
 * is a directory, and every other path is the namespace's as it stands (the directories
 * above a nested manifest, and the nested directories beside it, unlisted until loaded).
 *
 * A link that stays never walks through one that does not: a walk through a link is that
 * link's own walk from there on. So every link is judged against the whole set first, and
 * leaving some out afterwards changes the answer for none of the others.
 */
#include "fetch/source/symlink_judge.h"
#include "util/log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Lines logged for hidden links per load; the rest are counted in one more line. */
#define LOG_HIDDEN_MAX 20

struct pending {
	int64_t i;
	char *path; /* owned: path_len bytes, then target_len bytes of target */
	size_t path_len;
	const char *target; /* in path's allocation */
	size_t target_len;
	bool has_mtime;
	int64_t mtime;
	enum symlink_end end;
};

struct symlink_judge {
	struct index *idx;
	struct index_builder *b;
	uint64_t dir;
	struct pending *v; /* in the manifest's order */
	size_t n, cap;
	struct pending **sorted; /* by path, for the lookups */
	/* The directory loaded, from the mount's root ("" for the root), made at the run. */
	char *prefix;
	size_t prefix_len;
	char target[INDEX_SYMLINK_MAX + 1]; /* a committed link's, for the resolver */
	/* Lookups left for this load's walks: each walk is bounded (40 links of at most 4,095
	 * bytes), but a manifest of many long chains is not, and it is judged inside a mount or
	 * a FUSE lookup. Spent: the load fails, naming why (JUDGE_BUDGET_*). */
	uint64_t lookups_left;
};

/* About 0.1 s of lookups for any load, and 200 more per link: a real tree's links cost a
 * few each; a chain of 40 links of 800 segments costs 32,000. */
#define JUDGE_BUDGET_BASE 1000000u
#define JUDGE_BUDGET_PER_LINK 200u
/* A segment looked up in the index (a path outside the directory loaded) costs about ten
 * times a lookup of the load's own sorted names. */
#define JUDGE_COMMITTED_COST 10u

int symlink_judge_new(struct index *idx, struct index_builder *b, uint64_t dir,
                      struct symlink_judge **out)
{
	struct symlink_judge *j = calloc(1, sizeof(*j));

	*out = j;
	if (!j)
		return -ENOMEM;
	j->idx = idx;
	j->b = b;
	j->dir = dir;
	return 0;
}

void symlink_judge_free(struct symlink_judge *j)
{
	if (!j)
		return;
	for (size_t k = 0; k < j->n; k++)
		free(j->v[k].path);
	free(j->v);
	free(j->sorted);
	free(j->prefix);
	free(j);
}

int symlink_judge_defer(struct symlink_judge *j, int64_t i, const struct index_build_entry *be)
{
	struct pending *p;

	if (j->n == j->cap) {
		size_t cap = j->cap ? j->cap * 2 : 16;
		p = realloc(j->v, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		j->v = p;
		j->cap = cap;
	}
	p = &j->v[j->n];
	*p = (struct pending){.i = i,
	                      .path_len = be->path_len,
	                      .target_len = be->target_len,
	                      .has_mtime = be->has_mtime,
	                      .mtime = be->mtime};
	p->path = malloc(be->path_len + be->target_len + 1);
	if (!p->path)
		return -ENOMEM;
	memcpy(p->path, be->path, be->path_len);
	memcpy(p->path + be->path_len, be->target, be->target_len);
	p->path[be->path_len + be->target_len] = '\0';
	p->target = p->path + be->path_len;
	j->n++;
	return 0;
}

static int cmp_bytes(const char *a, size_t an, const char *b, size_t bn)
{
	int c = memcmp(a, b, an < bn ? an : bn);

	return c ? c : (an > bn) - (an < bn);
}

static int cmp_pending(const void *a, const void *b)
{
	const struct pending *x = *(struct pending *const *)a, *y = *(struct pending *const *)b;

	return cmp_bytes(x->path, x->path_len, y->path, y->path_len);
}

/* Whether link p sorts before path (len bytes), followed by '/' when `dir`. */
static bool sorts_before(const struct pending *p, const char *path, size_t len, bool dir)
{
	size_t n = p->path_len < len ? p->path_len : len;
	int c = memcmp(p->path, path, n);

	if (c)
		return c < 0;
	if (p->path_len <= len)
		return p->path_len < len || dir;
	return dir && (unsigned char)p->path[len] < '/';
}

/* The first link kept aside (by path) not before path, or "path/" when `dir`; j->n if none. */
static size_t lower_bound(const struct symlink_judge *j, const char *path, size_t len, bool dir)
{
	size_t lo = 0, hi = j->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (sorts_before(j->sorted[mid], path, len, dir))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* A path below the directory loaded (rel, len bytes from it). */
static int lookup_here(struct symlink_judge *j, const char *rel, size_t len,
                       struct symlink_node *out)
{
	enum index_kind kind;
	bool nested;
	int rc = index_build_find(j->b, rel, len, &kind, &nested);

	if (rc == 0) {
		/* This load's links are all kept aside: none is in the builder's table. */
		if (kind == INDEX_KIND_SYMLINK)
			return -EIO;
		out->kind = kind == INDEX_KIND_FILE ? SYMLINK_NODE_FILE
		            : nested                ? SYMLINK_NODE_UNLISTED
		                                    : SYMLINK_NODE_DIR;
		return 0;
	}
	size_t k = lower_bound(j, rel, len, false);
	if (k < j->n && j->sorted[k]->path_len == len &&
	    memcmp(j->sorted[k]->path, rel, len) == 0) {
		out->kind = SYMLINK_NODE_LINK;
		out->target = j->sorted[k]->target;
		out->target_len = j->sorted[k]->target_len;
		return 0;
	}
	/* A directory only a link's path implies: the first link from "rel/" on starts so. */
	k = lower_bound(j, rel, len, true);
	if (k < j->n && j->sorted[k]->path_len > len && j->sorted[k]->path[len] == '/' &&
	    memcmp(j->sorted[k]->path, rel, len) == 0) {
		out->kind = SYMLINK_NODE_DIR;
		return 0;
	}
	return -ENOENT;
}

/* Whether path (len bytes) is a directory above the one loaded. */
static bool is_ancestor(const struct symlink_judge *j, const char *path, size_t len)
{
	return len < j->prefix_len && j->prefix[len] == '/' && memcmp(j->prefix, path, len) == 0;
}

/*
 * A path outside the directory loaded: the namespace as it stands, segment by segment. A
 * directory with a manifest of its own that is not above this one is opaque, loaded or
 * not: what a link may reach must not depend on which directories a reader happened to
 * list first (the session is one snapshot).
 */
static int lookup_committed(struct symlink_judge *j, const char *path, size_t len,
                            struct symlink_node *out)
{
	struct index_node n = {.ino = INDEX_ROOT_INO, .kind = INDEX_KIND_DIR};
	char name[INDEX_NAME_MAX + 1];
	int rc = 0;

	for (size_t start = 0; start < len;) {
		const char *slash = memchr(path + start, '/', len - start);
		size_t end = slash ? (size_t)(slash - path) : len;
		if (end - start > INDEX_NAME_MAX)
			return -ENOENT;
		memcpy(name, path + start, end - start);
		name[end - start] = '\0';
		/* Each segment is a query of the index, walked again from the root for every
		 * lookup of the walk (quadratic in a path's depth): each is charged, at the
		 * price of several lookups of this load's own names. */
		if (j->lookups_left < JUDGE_COMMITTED_COST)
			return -E2BIG;
		j->lookups_left -= JUDGE_COMMITTED_COST;
		rc = index_lookup(j->idx, n.ino, name, &n);
		if (rc == -ENOTDIR)
			rc = -ENOENT; /* the resolver walks through directories only */
		if (rc < 0)
			return rc;
		start = end + 1;
	}
	if (n.kind == INDEX_KIND_FILE) {
		out->kind = SYMLINK_NODE_FILE;
	} else if (n.kind == INDEX_KIND_DIR) {
		out->kind = SYMLINK_NODE_DIR;
		if (!is_ancestor(j, path, len)) {
			struct index_nested_ref ref;
			rc = index_get_nested(j->idx, n.ino, &ref);
			if (rc == 0) {
				free(ref.url);
				out->kind = SYMLINK_NODE_UNLISTED;
			} else if (rc == -ENODATA) {
				rc = 0;
			}
		}
	} else {
		rc = index_readlink(j->idx, n.ino, j->target, sizeof(j->target));
		if (rc >= 0) {
			out->kind = SYMLINK_NODE_LINK;
			out->target = j->target;
			out->target_len = (size_t)rc;
			rc = 0;
		}
	}
	return rc;
}

/* symlink_lookup_fn over the snapshot as it will be (see the top of the file). */
static int lookup(void *ctx, const char *path, size_t len, struct symlink_node *out)
{
	struct symlink_judge *j = ctx;
	size_t pl = j->prefix_len;

	if (j->lookups_left == 0)
		return -E2BIG;
	j->lookups_left--;
	if (pl == 0)
		return lookup_here(j, path, len, out);
	if (len > pl && path[pl] == '/' && memcmp(path, j->prefix, pl) == 0)
		return lookup_here(j, path + pl + 1, len - pl - 1, out);
	if (len == pl && memcmp(path, j->prefix, pl) == 0) {
		out->kind = SYMLINK_NODE_DIR;
		return 0;
	}
	return lookup_committed(j, path, len, out);
}

/* j->prefix: the path of the directory loaded, from the mount's root, made from its
 * ancestors' names. */
static int make_prefix(struct symlink_judge *j)
{
	struct index_node n;
	size_t cap = 256;
	uint64_t ino = j->dir;
	int rc = 0;

	j->prefix = malloc(cap);
	if (!j->prefix)
		return -ENOMEM;
	j->prefix_len = 0;
	while (ino != INDEX_ROOT_INO) {
		rc = index_get(j->idx, ino, &n);
		if (rc < 0)
			return rc;
		size_t nl = strlen(n.name), add = nl + (j->prefix_len ? 1 : 0);
		if (j->prefix_len + add + 1 > cap) {
			cap = (j->prefix_len + add + 1) * 2;
			char *p = realloc(j->prefix, cap);
			if (!p)
				return -ENOMEM;
			j->prefix = p;
		}
		/* Prepend "name/" to what is there. */
		memmove(j->prefix + add, j->prefix, j->prefix_len);
		memcpy(j->prefix, n.name, nl);
		if (j->prefix_len)
			j->prefix[nl] = '/';
		j->prefix_len += add;
		ino = n.parent;
	}
	return 0;
}

/* Walks link p, with its path from the mount's root (the prefix, then its own). */
static int judge_one(struct symlink_judge *j, struct pending *p, struct symlink_result *res)
{
	size_t pl = j->prefix_len, len = pl + (pl ? 1 : 0) + p->path_len;
	char *full = malloc(len + 1);
	int rc;

	if (!full)
		return -ENOMEM;
	memcpy(full, j->prefix, pl);
	if (pl)
		full[pl] = '/';
	memcpy(full + len - p->path_len, p->path, p->path_len);
	full[len] = '\0';
	rc = symlink_resolve(lookup, j, full, len, res);
	free(full);
	if (rc == 0)
		p->end = res->end;
	return rc;
}

int symlink_judge_run(struct symlink_judge *j, enum manifest_outside_symlinks mode,
                      symlink_judge_add_fn add, void *ctx, unsigned *hidden,
                      struct symlink_verdict *bad)
{
	struct symlink_result res;
	unsigned logged = 0, left_out = 0;
	int rc = 0;

	if (j->n == 0)
		return 0;
	j->sorted = malloc(j->n * sizeof(*j->sorted));
	if (!j->sorted)
		return -ENOMEM;
	for (size_t k = 0; k < j->n; k++)
		j->sorted[k] = &j->v[k];
	qsort(j->sorted, j->n, sizeof(*j->sorted), cmp_pending);
	j->lookups_left = JUDGE_BUDGET_BASE + (uint64_t)JUDGE_BUDGET_PER_LINK * j->n;
	rc = make_prefix(j);
	/* Every link against the whole set first: none is added before all are judged. */
	for (size_t k = 0; rc == 0 && k < j->n; k++) {
		struct pending *p = &j->v[k];
		rc = judge_one(j, p, &res);
		if (rc < 0 || !symlink_end_leaves(res.end))
			continue;
		if (mode == MANIFEST_OUTSIDE_REFUSE) {
			*bad = (struct symlink_verdict){.i = p->i,
			                                .path = p->path,
			                                .path_len = p->path_len,
			                                .target = p->target,
			                                .target_len = p->target_len,
			                                .res = res};
			return -EINVAL;
		}
		left_out++;
		if (logged++ < LOG_HIDDEN_MAX)
			util_log(UTIL_LOG_WARN,
			         "symlink left out (--outside-symlinks=hide): it %s: %s",
			         symlink_end_text(res.end), res.chain);
	}
	if (rc == 0 && logged > LOG_HIDDEN_MAX)
		util_log(UTIL_LOG_WARN, "%u more symlinks left out (--outside-symlinks=hide)",
		         logged - LOG_HIDDEN_MAX);
	for (size_t k = 0; rc == 0 && k < j->n; k++) {
		const struct pending *p = &j->v[k];
		if (symlink_end_leaves(p->end))
			continue;
		struct index_build_entry be = {.path = p->path,
		                               .path_len = p->path_len,
		                               .kind = INDEX_KIND_SYMLINK,
		                               .has_mtime = p->has_mtime,
		                               .mtime = p->mtime,
		                               .target = p->target,
		                               .target_len = p->target_len};
		rc = add(ctx, p->i, &be);
	}
	if (rc == 0)
		*hidden += left_out;
	return rc;
}

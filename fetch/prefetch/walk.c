/* Walk detection and its plan (see walk.h). */
#include "fetch/prefetch/walk.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "index/index.h"

/* Children read from the index per call: the index's lock is held while they are. */
#define BATCH 64

void walk_init(struct walk *w, struct index *idx, const struct walk_config *cfg)
{
	memset(w, 0, sizeof(*w));
	w->idx = idx;
	w->cfg = *cfg;
}

void walk_free(struct walk *w)
{
	free(w->ahead);
	w->ahead = NULL;
	w->n_ahead = w->cap_ahead = 0;
}

static void stop(struct walk *w)
{
	w->active = false;
	w->n_ahead = 0;
	w->ahead_bytes = 0;
	w->n_pending = 0;
	w->depth = 0;
	w->ascend = 0;
}

/* Starts a walk seen in dir: its plan begins with dir's files. */
static void start(struct walk *w, uint64_t dir)
{
	stop(w);
	w->active = true;
	w->dir = dir;
	w->misses = 0;
	w->target = WALK_START_FILES < w->cfg.ahead_files ? WALK_START_FILES : w->cfg.ahead_files;
	w->exhausted = false;
	w->stack[0] = (struct walk_frame){.dir = dir};
	w->depth = 1;
	w->ascend = dir;
	w->walks_seen++;
}

static bool take_ahead(struct walk *w, uint64_t ino)
{
	for (unsigned i = 0; i < w->n_ahead; i++) {
		if (w->ahead[i].ino == ino) {
			w->ahead_bytes -= w->ahead[i].size;
			w->ahead[i] = w->ahead[--w->n_ahead];
			return true;
		}
	}
	return false;
}

int walk_note_open(struct walk *w, uint64_t ino, uint64_t dir)
{
	bool same_dir = dir == w->last_dir;

	if (ino == w->last_ino)
		return w->active; /* the same file again (another handle): no news */
	w->run = same_dir ? w->run + 1 : 1;
	w->run_hits = same_dir ? w->run_hits : 0;
	w->last_dir = dir;
	w->last_ino = ino;
	w->recent[w->n_recent++ % WALK_RECENT] = ino;
	if (w->active && take_ahead(w, ino)) {
		/* Predicted: the window grows, as readahead's does. */
		w->hits++;
		w->run_hits++;
		w->misses = 0;
		w->target = w->target * 2 < w->cfg.ahead_files ? w->target * 2 : w->cfg.ahead_files;
		return 1;
	}
	if (w->run >= WALK_MIN_OPENS && (!w->active || (dir != w->dir && w->run_hits == 0))) {
		/* A walk here, and the current one (if any) did not foresee this directory. */
		start(w, dir);
		return 1;
	}
	if (!w->active)
		return 0;
	if (same_dir) {
		/* Files of the walk's own directory beyond its window: the walk goes on. */
		w->misses = 0;
		return 1;
	}
	if (++w->misses >= WALK_MAX_MISSES) {
		stop(w);
		return 0;
	}
	return 1;
}

struct batch {
	struct walk_item files[BATCH];
	uint64_t dirs[BATCH];
	uint64_t cookies_files[BATCH]; /* the cookie after each file */
	uint64_t cookies_dirs[BATCH];
	unsigned n_files, n_dirs;
	bool want_dirs;
	uint64_t last_cookie;
	unsigned seen;
	uint64_t find; /* with find: only looks for this child's cookie */
	bool found;
};

static int collect(void *ctx, const struct index_node *child, uint64_t next_cookie)
{
	struct batch *b = ctx;

	b->last_cookie = next_cookie;
	b->seen++;
	if (b->find) {
		if (child->ino == b->find) {
			b->found = true;
			return 1;
		}
		return 0;
	}
	if (b->want_dirs && child->is_dir) {
		b->cookies_dirs[b->n_dirs] = next_cookie;
		b->dirs[b->n_dirs++] = child->ino;
		return 1; /* one at a time: the walk descends into it */
	}
	if (!b->want_dirs && child->kind == INDEX_KIND_FILE) {
		b->cookies_files[b->n_files] = next_cookie;
		b->files[b->n_files++] = (struct walk_item){.ino = child->ino, .size = child->size};
	}
	return b->n_files == BATCH || b->seen >= BATCH * 4 ? 1 : 0;
}

static bool listed(struct walk *w, uint64_t dir)
{
	bool is_listed = false;

	if (index_dir_listed(w->idx, dir, &is_listed) == 0 && is_listed)
		return true;
	/* A lazy source lists a directory on first use: the walk's own thread may wait. */
	return w->cfg.ensure_listed && w->cfg.ensure_listed(w->cfg.ctx, dir) == 0;
}

/* Once the stack is empty: continue with the directories after `ascend` in its parent.
 * False at the root. */
static bool climb(struct walk *w)
{
	struct index_node n;
	struct batch b;
	uint64_t cookie = 0;

	if (!w->ascend || w->ascend == INDEX_ROOT_INO || index_get(w->idx, w->ascend, &n) != 0)
		return false;
	/* Where ascend is in its parent's listing: its cookie resumes after it. */
	do {
		memset(&b, 0, sizeof(b));
		b.find = w->ascend;
		if (index_readdir(w->idx, n.parent, cookie, collect, &b) != 0)
			return false;
		cookie = b.last_cookie;
	} while (!b.found && b.seen > 0);
	if (!b.found)
		return false;
	w->stack[0] = (struct walk_frame){.dir = n.parent, .cookie = cookie, .dirs_pass = true};
	w->depth = 1;
	w->ascend = n.parent;
	return true;
}

/*
 * Appends the plan's next files to out (at most max), scanning at most budget children.
 * Returns how many, or -errno.
 */
static bool opened_lately(const struct walk *w, uint64_t ino)
{
	unsigned n = w->n_recent < WALK_RECENT ? w->n_recent : WALK_RECENT;

	for (unsigned i = 0; i < n; i++)
		if (w->recent[i] == ino)
			return true;
	return false;
}

static int next_files(struct walk *w, struct walk_item *out, unsigned max, unsigned *budget)
{
	unsigned n = 0;
	struct batch b;

	while (n < max && w->n_pending > 0)
		out[n++] = w->pending[--w->n_pending];
	while (n<max && * budget> 0) {
		if (w->depth == 0 && !climb(w)) {
			w->exhausted = true;
			break;
		}
		struct walk_frame *fr = &w->stack[w->depth - 1];
		memset(&b, 0, sizeof(b));
		b.want_dirs = fr->dirs_pass;
		int rc = index_readdir(w->idx, fr->dir, fr->cookie, collect, &b);
		if (rc == -ENOENT || rc == -ENOTDIR) {
			w->depth--;
			continue;
		}
		if (rc)
			return rc;
		*budget = *budget > b.seen ? *budget - b.seen : 0;
		if (!fr->dirs_pass) {
			unsigned i;
			for (i = 0; i < b.n_files && n < max; i++)
				if (b.files[i].size <= w->cfg.max_object &&
				    !opened_lately(w, b.files[i].ino))
					out[n++] = b.files[i];
			/* Resume after the last file taken, or after all that were seen. */
			fr->cookie = i < b.n_files ? b.cookies_files[i - 1] : b.last_cookie;
			if (b.seen == 0 ||
			    (i == b.n_files && b.n_files < BATCH && b.seen < BATCH * 4)) {
				fr->dirs_pass = true;
				fr->cookie = 0;
			}
			continue;
		}
		if (b.n_dirs == 0 && b.seen >= BATCH * 4) {
			fr->cookie = b.last_cookie; /* many files and no directory yet */
			continue;
		}
		if (b.n_dirs == 0) {
			w->depth--; /* every subdirectory done */
			continue;
		}
		fr->cookie = b.cookies_dirs[0];
		if (w->depth < WALK_MAX_DEPTH && listed(w, b.dirs[0]))
			w->stack[w->depth++] = (struct walk_frame){.dir = b.dirs[0]};
	}
	return (int)n;
}

/* Sizes within a factor of 16 of each other are one class: a walker reads in listing
 * order, so among files of about one size the listing's order is kept. */
static unsigned size_class(uint64_t size)
{
	unsigned bits = 0;

	while (size >>= 1)
		bits++;
	return bits / 4;
}

/* Small files first (more of them ready sooner); within a class, the plan's order. */
static int by_size(const void *a, const void *b)
{
	const struct walk_item *x = a, *y = b;
	unsigned cx = size_class(x->size), cy = size_class(y->size);

	if (cx != cy)
		return cx < cy ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

static int add_ahead(struct walk *w, const struct walk_item *it)
{
	if (w->n_ahead == w->cap_ahead) {
		unsigned cap = w->cap_ahead ? w->cap_ahead * 2 : 64;
		struct walk_item *v = realloc(w->ahead, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		w->ahead = v;
		w->cap_ahead = cap;
	}
	w->ahead[w->n_ahead++] = *it;
	w->ahead_bytes += it->size;
	return 0;
}

int walk_fill(struct walk *w, struct walk_item *out, unsigned max)
{
	uint64_t bytes_cap = (uint64_t)w->target * WALK_BYTES_PER_FILE;
	unsigned budget = max * 4 + BATCH, n = 0, room;
	int got, rc = 0;

	if (max > WALK_FILL_MAX)
		max = WALK_FILL_MAX;
	if (!w->active || (w->exhausted && w->n_pending == 0) || w->n_ahead >= w->target)
		return 0;
	if (bytes_cap > w->cfg.window_bytes)
		bytes_cap = w->cfg.window_bytes;
	room = w->target - w->n_ahead < max ? w->target - w->n_ahead : max;
	got = next_files(w, out, room, &budget);
	if (got < 0)
		return got;
	for (int i = 0; i < got; i++)
		out[i].order = (unsigned)i;
	/* Within a batch, small files first: more of them are ready sooner. */
	qsort(out, (size_t)got, sizeof(*out), by_size);
	for (int i = 0; i < got; i++) {
		/* The window is full: the rest waits in pending for room. */
		if (rc == 0 && w->ahead_bytes + out[i].size <= bytes_cap)
			rc = add_ahead(w, &out[i]);
		else
			rc = rc ? rc : 1;
		if (rc == 0)
			out[n++] = out[i];
		else if (w->n_pending < WALK_FILL_MAX)
			w->pending[w->n_pending++] = out[i];
	}
	return rc < 0 ? rc : (int)n;
}

void walk_unfill(struct walk *w, uint64_t ino)
{
	(void)take_ahead(w, ino);
}

/*
 * symlink_resolve.c walks a path over a snapshot's names (symlink_resolve.h) the way the
 * kernel's path walk does under openat2(RESOLVE_BENEATH), so that what it says of a link
 * is what opening the link would do: each segment is looked up in the directory reached
 * so far, "." stays, ".." goes back up the directories actually walked (not the text: a
 * symlink to "." does not make ".." stay), a symlink's target is walked from the directory
 * the link is in, and its rest is walked after it. The order of the checks is the kernel's
 * (the link count before the target, a file walked through before anything below it), so
 * that the first reason a walk stops is the same in both: the fuzz target
 * (tests/fuzz/fuzz_symlinks.c) holds the two side by side.
 *
 * A walk holds the texts it is in the middle of (the path, then each target followed: at
 * most SYMLINK_RESOLVE_MAX_LINKS + 1) and the directories walked, as one path string with
 * the offset of each segment. Everything it allocates is freed before it returns.
 */
#include "fetch/source/symlink_resolve.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Distinct links a chain's text names; the rest are counted. */
#define CHAIN_ITEMS 8
/* Longer names exist in no snapshot (index_check_segment); the kernel says ENAMETOOLONG. */
#define NAME_MAX_LEN 255

/* A text being walked: the path, or a target (a copy: lookup's pointer does not last). */
struct frame {
	char *text; /* owned */
	size_t len, pos;
	/* The link whose target this is was followed by '/': the target's last segment must
	 * be a directory too. */
	bool need_dir;
};

struct walk {
	symlink_lookup_fn lookup;
	void *ctx;
	struct frame frames[SYMLINK_RESOLVE_MAX_LINKS + 1];
	unsigned nframes;
	/* The directories walked, from the root: "a/b/c" (len bytes, no NUL kept) and where
	 * each segment starts, for "..". */
	char *cur;
	size_t len, cap;
	size_t *starts;
	size_t depth, starts_cap;
	bool cur_unlisted; /* the last directory walked is SYMLINK_NODE_UNLISTED */
	/* The links followed, each once in the order first met, with how often (a link to "."
	 * walked eight times is one item), and how the walk ended: written into
	 * out->chain at the end. */
	struct symlink_result *out;
	struct seen {
		char *path, *target; /* owned copies */
		size_t path_len, target_len;
		unsigned count;
	} seen[CHAIN_ITEMS];
	unsigned nseen, unseen; /* unseen: links met past the first CHAIN_ITEMS distinct ones */
	const char *how;        /* ", then ..." or NULL */
	size_t chain_len;
	bool cut;
};

/* Appends n bytes of s to the chain, escaped when `quoted` (a manifest's text may hold
 * quotes and control bytes: the chain goes into log lines); cut with "..." when full. */
static void chain_put(struct walk *w, const char *s, size_t n, bool quoted)
{
	char *chain = w->out->chain;

	for (size_t k = 0; k < n && !w->cut; k++) {
		unsigned char c = (unsigned char)s[k];
		char esc[8];
		size_t m = 1;
		esc[0] = (char)c;
		if (quoted && (c == '"' || c == '\\')) {
			esc[0] = '\\';
			esc[1] = (char)c;
			m = 2;
		} else if (quoted && (c < 0x20 || c == 0x7f)) {
			m = (size_t)snprintf(esc, sizeof(esc), "\\x%02x", c);
		}
		/* Room for this, "..." and the NUL. */
		if (w->chain_len + m + 4 > SYMLINK_CHAIN_MAX) {
			memcpy(chain + w->chain_len, "...", 3);
			w->chain_len += 3;
			w->cut = true;
			break;
		}
		memcpy(chain + w->chain_len, esc, m);
		w->chain_len += m;
	}
	chain[w->chain_len] = '\0';
}

static void chain_word(struct walk *w, const char *s)
{
	chain_put(w, s, strlen(s), false);
}

/* Notes link path (plen bytes) -> target for the chain. -ENOMEM or 0. */
static int chain_link(struct walk *w, const char *path, size_t plen, const char *target,
                      size_t tlen)
{
	struct seen *e;

	for (unsigned k = 0; k < w->nseen; k++) {
		e = &w->seen[k];
		if (e->path_len == plen && memcmp(e->path, path, plen) == 0) {
			e->count++;
			return 0;
		}
	}
	if (w->nseen == CHAIN_ITEMS) {
		w->unseen++;
		return 0;
	}
	e = &w->seen[w->nseen];
	e->path = malloc(plen + 1);
	e->target = malloc(tlen + 1);
	if (!e->path || !e->target) {
		free(e->path);
		free(e->target);
		return -ENOMEM;
	}
	memcpy(e->path, path, plen);
	memcpy(e->target, target, tlen);
	e->path_len = plen;
	e->target_len = tlen;
	e->count = 1;
	w->nseen++;
	return 0;
}

/* Writes the chain's text into out->chain. */
static void chain_render(struct walk *w)
{
	char n[48];

	w->out->chain[0] = '\0';
	for (unsigned k = 0; k < w->nseen; k++) {
		const struct seen *e = &w->seen[k];
		if (k)
			chain_word(w, ", ");
		chain_put(w, e->path, e->path_len, true);
		chain_word(w, " -> \"");
		chain_put(w, e->target, e->target_len, true);
		chain_word(w, "\"");
		if (e->count > 1) {
			snprintf(n, sizeof(n), " (x%u)", e->count);
			chain_word(w, n);
		}
	}
	if (w->unseen) {
		snprintf(n, sizeof(n), ", and %u more", w->unseen);
		chain_word(w, n);
	}
	if (w->how)
		chain_word(w, w->how);
}

static void chain_end(struct walk *w, const char *how)
{
	w->how = how;
}

/* Appends segment name (n bytes) to the directories walked: cur becomes cur/name. */
static int cur_push(struct walk *w, const char *name, size_t n)
{
	size_t need = w->len + 1 + n;

	if (need > w->cap) {
		size_t cap = w->cap ? w->cap : 256;
		while (cap < need)
			cap *= 2;
		char *p = realloc(w->cur, cap);
		if (!p)
			return -ENOMEM;
		w->cur = p;
		w->cap = cap;
	}
	if (w->depth == w->starts_cap) {
		size_t cap = w->starts_cap ? w->starts_cap * 2 : 32;
		size_t *p = realloc(w->starts, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		w->starts = p;
		w->starts_cap = cap;
	}
	w->starts[w->depth++] = w->len;
	if (w->len)
		w->cur[w->len++] = '/';
	memcpy(w->cur + w->len, name, n);
	w->len += n;
	return 0;
}

static void cur_pop(struct walk *w)
{
	w->len = w->starts[--w->depth];
}

/* Looks up name (n bytes) in the directory walked to; the path stays as it was. */
static int lookup_child(struct walk *w, const char *name, size_t n, struct symlink_node *node)
{
	size_t keep_len = w->len, keep_depth = w->depth;
	int rc = cur_push(w, name, n);

	if (rc == 0)
		rc = w->lookup(w->ctx, w->cur, w->len, node);
	w->len = keep_len;
	w->depth = keep_depth;
	return rc;
}

static int push_frame(struct walk *w, const char *text, size_t len, bool need_dir)
{
	struct frame *f = &w->frames[w->nframes];

	f->text = malloc(len ? len : 1);
	if (!f->text)
		return -ENOMEM;
	memcpy(f->text, text, len);
	f->len = len;
	f->pos = 0;
	f->need_dir = need_dir;
	w->nframes++;
	return 0;
}

/*
 * The next segment of the walk in *seg, *n, and whether a '/' follows it (*slash): in its
 * own text, or after the link whose target that text is. false when every text is done.
 */
static bool next_segment(struct walk *w, const char **seg, size_t *n, bool *slash)
{
	while (w->nframes) {
		struct frame *f = &w->frames[w->nframes - 1];
		while (f->pos < f->len && f->text[f->pos] == '/')
			f->pos++;
		if (f->pos == f->len) {
			free(f->text);
			f->text = NULL;
			w->nframes--;
			continue;
		}
		const char *s = f->text + f->pos;
		const char *e = memchr(s, '/', f->len - f->pos);
		*seg = s;
		*n = e ? (size_t)(e - s) : f->len - f->pos;
		f->pos += *n;
		*slash = e != NULL || f->need_dir;
		return true;
	}
	return false;
}

/* One step of the walk: segment seg (n bytes). 1 to go on, 0 when the walk ended (end set),
 * or -errno. */
static int step(struct walk *w, const char *seg, size_t n, bool slash, enum symlink_end *end)
{
	struct symlink_node node;
	int rc;

	if (n == 1 && seg[0] == '.')
		return 1;
	if (n == 2 && seg[0] == '.' && seg[1] == '.') {
		if (w->depth == 0) {
			chain_end(w, ", then \"..\" above the mount's root");
			*end = SYMLINK_ESCAPES;
			return 0;
		}
		cur_pop(w);
		/* Its parent was listed: it was looked up there. */
		w->cur_unlisted = false;
		return 1;
	}
	if (w->cur_unlisted) {
		chain_end(w, ", then into another directory with a manifest of its own");
		*end = SYMLINK_UNKNOWN;
		return 0;
	}
	if (n > NAME_MAX_LEN) {
		*end = SYMLINK_DANGLING;
		return 0;
	}
	rc = lookup_child(w, seg, n, &node);
	if (rc == -ENOENT) {
		*end = SYMLINK_DANGLING;
		return 0;
	}
	if (rc < 0)
		return rc;
	switch (node.kind) {
	case SYMLINK_NODE_DIR:
	case SYMLINK_NODE_UNLISTED:
		rc = cur_push(w, seg, n);
		w->cur_unlisted = node.kind == SYMLINK_NODE_UNLISTED;
		return rc < 0 ? rc : 1;
	case SYMLINK_NODE_FILE:
		/* A file that more segments follow: the kernel stops with ENOTDIR. Otherwise it
		 * ends the walk. */
		*end = slash ? SYMLINK_NOTDIR : SYMLINK_INSIDE;
		return 0;
	case SYMLINK_NODE_LINK:
		break;
	}
	/* The link's own path, for the chain: cur/seg. */
	size_t keep_len = w->len, keep_depth = w->depth;
	rc = cur_push(w, seg, n);
	if (rc < 0)
		return rc;
	if (++w->out->links > SYMLINK_RESOLVE_MAX_LINKS) {
		w->len = keep_len;
		w->depth = keep_depth;
		chain_end(w, ", then more links than the kernel follows (40)");
		*end = SYMLINK_LOOP;
		return 0;
	}
	rc = chain_link(w, w->cur, w->len, node.target, node.target_len);
	w->len = keep_len;
	w->depth = keep_depth;
	if (rc < 0)
		return rc;
	if (node.target_len == 0) { /* the kernel's ENOENT; no snapshot has one */
		*end = SYMLINK_DANGLING;
		return 0;
	}
	if (node.target[0] == '/') {
		chain_end(w, " (absolute)");
		*end = SYMLINK_ESCAPES;
		return 0;
	}
	rc = push_frame(w, node.target, node.target_len, slash);
	return rc < 0 ? rc : 1;
}

int symlink_resolve(symlink_lookup_fn lookup, void *ctx, const char *path, size_t len,
                    struct symlink_result *out)
{
	struct walk w = {.lookup = lookup, .ctx = ctx, .out = out};
	enum symlink_end end = SYMLINK_INSIDE;
	const char *seg;
	const char *slash = memrchr(path, '/', len);
	size_t n;
	bool more;
	int rc = 0;

	out->end = SYMLINK_INSIDE;
	out->links = 0;
	out->chain[0] = '\0';
	/* The link's parents are directories of the snapshot by construction: walked as
	 * text, so that a name clashing with a link elsewhere is not followed. */
	for (size_t start = 0, stop = slash ? (size_t)(slash - path) : 0; start < stop;) {
		const char *e = memchr(path + start, '/', stop - start);
		size_t end_at = e ? (size_t)(e - path) : stop;
		if (end_at > start)
			rc = cur_push(&w, path + start, end_at - start);
		if (rc < 0)
			goto out;
		start = end_at + 1;
	}
	n = slash ? len - (size_t)(slash - path) - 1 : len;
	rc = push_frame(&w, slash ? slash + 1 : path, n, false);
	while (rc == 0 && next_segment(&w, &seg, &n, &more)) {
		rc = step(&w, seg, n, more, &end);
		if (rc == 0)
			goto done;
		if (rc == 1)
			rc = 0;
	}
	if (rc < 0)
		goto out;
done:
	out->end = end;
	chain_render(&w);
out:
	for (unsigned k = 0; k < w.nseen; k++) {
		free(w.seen[k].path);
		free(w.seen[k].target);
	}
	while (w.nframes)
		free(w.frames[--w.nframes].text);
	free(w.cur);
	free(w.starts);
	return rc;
}

bool symlink_end_leaves(enum symlink_end end)
{
	return end == SYMLINK_ESCAPES || end == SYMLINK_UNKNOWN || end == SYMLINK_LOOP;
}

const char *symlink_end_text(enum symlink_end end)
{
	switch (end) {
	case SYMLINK_INSIDE:
		return "stays inside the mount";
	case SYMLINK_DANGLING:
		return "dangles";
	case SYMLINK_NOTDIR:
		return "walks through a file";
	case SYMLINK_LOOP:
		return "follows more than 40 links";
	case SYMLINK_ESCAPES:
		return "leads out of the mount";
	case SYMLINK_UNKNOWN:
		return "passes into another directory with a manifest of its own";
	}
	return "?";
}

/*
 * libFuzzer target: the symlink resolver (fetch/source/symlink_resolve.h) and the loader's
 * judgement with it (symlink_judge.h, through source_manifest_load), against an oracle
 * that is not the resolver: the kernel.
 *
 * Each input is decoded into a small tree (names a, b, c, d; up to three deep): files,
 * directories, directories with a manifest of their own ("nested"), and symlinks whose
 * targets mix names, ".", "..", empty segments, a leading '/' (absolute) and a trailing
 * '/'. The tree is made for real in a temporary directory (mkdir, a file, symlink) and
 * each link's path is opened there with openat2(O_PATH, RESOLVE_BENEATH), which follows
 * links as any open does, at most 40, and fails with EXDEV where the walk would leave the
 * directory. Then:
 *
 * 1. The resolver over the whole tree must end as openat2 does, exactly:
 *      SYMLINK_INSIDE   <-> success
 *      SYMLINK_DANGLING <-> ENOENT   (a missing name; nothing is reached)
 *      SYMLINK_NOTDIR   <-> ENOTDIR  (a file walked through, or named with a '/' after it)
 *      SYMLINK_LOOP     <-> ELOOP    (more than 40 links)
 *      SYMLINK_ESCAPES  <-> EXDEV    (an absolute target, or ".." at the top)
 *    The first reason a walk stops is the same in both: the resolver checks in the
 *    kernel's order. (openat2's EAGAIN, a rename elsewhere on the machine racing a "..",
 *    is retried.) (No name is longer than 255 bytes here, so ENAMETOOLONG never comes.)
 * 2. The resolver over a partial tree (some nested directories not loaded: opaque) must
 *    end as in 1, or with SYMLINK_UNKNOWN: it may not know, but never says otherwise.
 * 3. The loader, with --outside-symlinks hide, loads the tree as a root manifest and one
 *    manifest per nested directory (parents first). Without nested directories (one load,
 *    judged against the whole tree) it must hide exactly the links that openat2 finds
 *    EXDEV or ELOOP. With them, a link may be hidden for passing into another nested
 *    directory, and a link that walked through a hidden one dangles instead; so the hidden
 *    links are then removed from the real tree too, and no link kept may give EXDEV or
 *    ELOOP there: the tree as the mount shows it has no way out.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fetch/source/manifest_load.h"
#include "fetch/source/symlink_resolve.h"
#include "index/index.h"
#include "util/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define MAX_NODES 48
#define PATH_CAP 64
#define TARGET_CAP 96

enum kind { K_FILE, K_DIR, K_NESTED, K_LINK };

struct node {
	char path[PATH_CAP];
	enum kind kind;
	char target[TARGET_CAP];
	bool unloaded; /* K_NESTED: opaque in the partial view */
};

struct tree {
	struct node v[MAX_NODES];
	size_t n;
};

struct input {
	const uint8_t *p;
	size_t left;
};

static unsigned take(struct input *in, unsigned mod)
{
	if (!in->left)
		return 0;
	in->left--;
	return *in->p++ % mod;
}

static struct node *find(struct tree *t, const char *path)
{
	for (size_t k = 0; k < t->n; k++)
		if (strcmp(t->v[k].path, path) == 0)
			return &t->v[k];
	return NULL;
}

/* Adds path with its parents (directories); false when it clashes with what is there. */
static bool add(struct tree *t, const char *path, enum kind kind, const char *target)
{
	char prefix[PATH_CAP];

	if (find(t, path))
		return false;
	for (const char *s = strchr(path, '/'); s; s = strchr(s + 1, '/')) {
		snprintf(prefix, sizeof(prefix), "%.*s", (int)(s - path), path);
		struct node *p = find(t, prefix);
		if (p && p->kind != K_DIR && p->kind != K_NESTED)
			return false;
	}
	if (t->n + 4 > MAX_NODES)
		return false;
	for (const char *s = strchr(path, '/'); s; s = strchr(s + 1, '/')) {
		snprintf(prefix, sizeof(prefix), "%.*s", (int)(s - path), path);
		if (!find(t, prefix)) {
			struct node *p = &t->v[t->n++];
			memset(p, 0, sizeof(*p));
			snprintf(p->path, sizeof(p->path), "%s", prefix);
			p->kind = K_DIR;
		}
	}
	struct node *e = &t->v[t->n++];
	memset(e, 0, sizeof(*e));
	snprintf(e->path, sizeof(e->path), "%s", path);
	e->kind = kind;
	if (target)
		snprintf(e->target, sizeof(e->target), "%s", target);
	return true;
}

static void decode(struct input *in, struct tree *t)
{
	static const char *const names[] = {"a", "b", "c", "d"};
	static const char *const toks[] = {"a", "b", "c", "d", ".", "..", "..", ""};
	unsigned entries = 1 + take(in, 16);

	t->n = 0;
	for (unsigned e = 0; e < entries && in->left; e++) {
		char path[PATH_CAP] = "", target[TARGET_CAP] = "";
		unsigned depth = 1 + take(in, 3);
		for (unsigned d = 0; d < depth; d++)
			snprintf(path + strlen(path), sizeof(path) - strlen(path), "%s%s",
			         d ? "/" : "", names[take(in, 4)]);
		unsigned k = take(in, 6);
		enum kind kind = k == 0 ? K_FILE : k == 1 ? K_DIR : k == 2 ? K_NESTED : K_LINK;
		if (kind == K_LINK) {
			unsigned ntok = 1 + take(in, 8);
			if (take(in, 8) == 0)
				strcat(target, "/");
			for (unsigned j = 0; j < ntok; j++)
				snprintf(target + strlen(target), sizeof(target) - strlen(target),
				         "%s%s", j ? "/" : "", toks[take(in, 8)]);
			if (take(in, 6) == 0)
				strcat(target, "/");
			if (!target[0])
				strcpy(target, ".");
		}
		add(t, path, kind, kind == K_LINK ? target : NULL);
	}
	for (size_t k = 0; k < t->n; k++)
		if (t->v[k].kind == K_NESTED)
			t->v[k].unloaded = take(in, 2);
}

/* ---- the oracle ---- */

static char base[64];

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

/* Makes the tree under a fresh directory; its fd, or -1. */
static int materialise(const struct tree *t, char *dir, size_t cap)
{
	int fd;

	snprintf(dir, cap, "%s/t.XXXXXX", base);
	if (!mkdtemp(dir))
		return -1;
	fd = open(dir, O_PATH | O_DIRECTORY);
	if (fd < 0)
		return -1;
	/* Parents before children: add() put each node after its parents. */
	for (size_t k = 0; k < t->n; k++) {
		const struct node *e = &t->v[k];
		int rc = 0;
		if (e->kind == K_DIR || e->kind == K_NESTED) {
			rc = mkdirat(fd, e->path, 0755);
		} else if (e->kind == K_FILE) {
			int f = openat(fd, e->path, O_CREAT | O_WRONLY | O_EXCL, 0644);
			rc = f < 0 ? -1 : close(f);
		} else {
			rc = symlinkat(e->target, fd, e->path);
		}
		if (rc != 0) {
			fprintf(stderr, "cannot make %s: %s\n", e->path, strerror(errno));
			abort();
		}
	}
	return fd;
}

/* openat2's verdict on path beneath fd: 0 or an errno. */
static int oracle(int fd, const char *path)
{
	struct open_how how = {.flags = O_PATH, .resolve = RESOLVE_BENEATH};
	long r;

	/* EAGAIN: a rename or mount anywhere on the machine during a walk with ".." (the
	 * kernel cannot tell it did not escape); the man page's advice is to retry. */
	for (int tries = 0; (r = syscall(SYS_openat2, fd, path, &how, sizeof(how))) < 0 &&
	                    errno == EAGAIN && tries < 1000;
	     tries++)
		;
	if (r < 0)
		return errno;
	close((int)r);
	return 0;
}

static int expected_errno(enum symlink_end end)
{
	switch (end) {
	case SYMLINK_INSIDE:
		return 0;
	case SYMLINK_DANGLING:
		return ENOENT;
	case SYMLINK_NOTDIR:
		return ENOTDIR;
	case SYMLINK_LOOP:
		return ELOOP;
	case SYMLINK_ESCAPES:
		return EXDEV;
	case SYMLINK_UNKNOWN:
		break;
	}
	return -1;
}

/* ---- the resolver over the tree ---- */

struct view {
	struct tree *t;
	bool partial; /* unloaded nested directories are opaque */
};

static int view_lookup(void *ctx, const char *path, size_t len, struct symlink_node *out)
{
	struct view *v = ctx;
	char p[PATH_CAP * 4];

	if (len >= sizeof(p))
		return -ENOENT;
	memcpy(p, path, len);
	p[len] = '\0';
	struct node *e = find(v->t, p);
	if (!e)
		return -ENOENT;
	switch (e->kind) {
	case K_FILE:
		out->kind = SYMLINK_NODE_FILE;
		break;
	case K_DIR:
		out->kind = SYMLINK_NODE_DIR;
		break;
	case K_NESTED:
		out->kind = v->partial && e->unloaded ? SYMLINK_NODE_UNLISTED : SYMLINK_NODE_DIR;
		break;
	case K_LINK:
		out->kind = SYMLINK_NODE_LINK;
		out->target = e->target;
		out->target_len = strlen(e->target);
		break;
	}
	return 0;
}

/* Whether path lies below an unloaded nested directory (not in the partial view). */
static bool hidden_in_partial(struct tree *t, const char *path)
{
	char prefix[PATH_CAP];

	for (const char *s = strchr(path, '/'); s; s = strchr(s + 1, '/')) {
		snprintf(prefix, sizeof(prefix), "%.*s", (int)(s - path), path);
		struct node *p = find(t, prefix);
		if (p && p->kind == K_NESTED && p->unloaded)
			return true;
	}
	return false;
}

static void check_resolver(struct tree *t, int fd)
{
	struct symlink_result r;

	for (size_t k = 0; k < t->n; k++) {
		const struct node *e = &t->v[k];
		if (e->kind != K_LINK)
			continue;
		int want = oracle(fd, e->path);
		struct view full = {t, false}, part = {t, true};
		if (symlink_resolve(view_lookup, &full, e->path, strlen(e->path), &r) != 0)
			abort();
		if (expected_errno(r.end) != want) {
			fprintf(stderr, "%s -> %s: resolver %s (%s), openat2 %s\n", e->path,
			        e->target, symlink_end_text(r.end), r.chain,
			        want ? strerror(want) : "ok");
			abort();
		}
		if (hidden_in_partial(t, e->path))
			continue;
		if (symlink_resolve(view_lookup, &part, e->path, strlen(e->path), &r) != 0)
			abort();
		if (r.end != SYMLINK_UNKNOWN && expected_errno(r.end) != want) {
			fprintf(stderr, "%s -> %s (partial): resolver %s (%s), openat2 %s\n",
			        e->path, e->target, symlink_end_text(r.end), r.chain,
			        want ? strerror(want) : "ok");
			abort();
		}
	}
}

/* ---- the loader ---- */

#define SHA_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

/* The innermost nested directory above path ("" for the root's manifest). */
static const char *owner(struct tree *t, const char *path, char *buf, size_t cap)
{
	buf[0] = '\0';
	for (const char *s = strchr(path, '/'); s; s = strchr(s + 1, '/')) {
		char prefix[PATH_CAP];
		snprintf(prefix, sizeof(prefix), "%.*s", (int)(s - path), path);
		struct node *p = find(t, prefix);
		if (p && p->kind == K_NESTED)
			snprintf(buf, cap, "%s", prefix);
	}
	return buf;
}

/* The manifest of directory dir ("" for the root): the nodes it owns. malloc'd. */
static char *manifest_of(struct tree *t, const char *dir)
{
	size_t cap = 256 + t->n * 256, o = 0, dl = strlen(dir);
	char *json = malloc(cap), own[PATH_CAP];
	bool first = true;

	if (!json)
		abort();
	o += (size_t)snprintf(json + o, cap - o, "{\"version\":2,\"entries\":[");
	for (size_t k = 0; k < t->n; k++) {
		const struct node *e = &t->v[k];
		if (strcmp(owner(t, e->path, own, sizeof(own)), dir) != 0)
			continue;
		const char *rel = dl ? e->path + dl + 1 : e->path;
		o += (size_t)snprintf(json + o, cap - o, "%s{\"path\":\"%s\"", first ? "" : ",",
		                      rel);
		first = false;
		if (e->kind == K_FILE)
			o += (size_t)snprintf(json + o, cap - o, ",\"size\":0,\"url\":\"o\"}");
		else if (e->kind == K_DIR)
			o += (size_t)snprintf(json + o, cap - o, ",\"type\":\"directory\"}");
		else if (e->kind == K_NESTED)
			o += (size_t)snprintf(
			    json + o, cap - o,
			    ",\"type\":\"directory\",\"manifest\":{\"sha256\":\"" SHA_A
			    "\",\"size\":1,\"url\":\"m\"}}");
		else
			o +=
			    (size_t)snprintf(json + o, cap - o,
			                     ",\"type\":\"symlink\",\"target\":\"%s\"}", e->target);
	}
	snprintf(json + o, cap - o, "]}");
	return json;
}

static uint64_t ino_at(struct index *idx, const char *path)
{
	struct index_node n = {.ino = INDEX_ROOT_INO};
	char copy[PATH_CAP], *save = NULL;

	snprintf(copy, sizeof(copy), "%s", path);
	for (char *seg = strtok_r(copy, "/", &save); seg; seg = strtok_r(NULL, "/", &save))
		if (index_lookup(idx, n.ino, seg, &n) != 0)
			return 0;
	return n.ino;
}

static void check_loader(struct tree *t, int fd)
{
	struct manifest_load_options opts = {.outside_symlinks = MANIFEST_OUTSIDE_HIDE};
	struct index *idx;
	char err[512];
	bool nested = false, kept[MAX_NODES] = {false};
	char *json = manifest_of(t, "");
	int rc;

	if (index_open(&idx) != 0)
		abort();
	rc = source_manifest_load(idx, json, strlen(json), "http://127.0.0.1/m.json", &opts, err,
	                          sizeof(err));
	free(json);
	if (rc != 0) {
		fprintf(stderr, "root manifest refused: %s\n", err);
		abort();
	}
	/* Nested directories in the tree's order: parents come before children. */
	for (size_t k = 0; k < t->n; k++) {
		if (t->v[k].kind != K_NESTED)
			continue;
		nested = true;
		json = manifest_of(t, t->v[k].path);
		rc = source_manifest_load_subtree(idx, ino_at(idx, t->v[k].path), json,
		                                  strlen(json), "http://127.0.0.1/m.json", &opts,
		                                  err, sizeof(err));
		free(json);
		if (rc != 0) {
			fprintf(stderr, "manifest of %s refused: %s\n", t->v[k].path, err);
			abort();
		}
	}
	/* Without nested directories, one load judged every link against the whole tree. */
	for (size_t k = 0; k < t->n; k++) {
		const struct node *e = &t->v[k];
		if (e->kind != K_LINK)
			continue;
		int want = oracle(fd, e->path);
		bool leaves = want == EXDEV || want == ELOOP;
		kept[k] = ino_at(idx, e->path) != 0;
		if (!nested && kept[k] == leaves) {
			fprintf(stderr, "%s -> %s: %s by the loader, openat2 %s\n", e->path,
			        e->target, kept[k] ? "kept" : "hidden",
			        want ? strerror(want) : "ok");
			abort();
		}
	}
	/* The tree as the mount shows it: no link kept there leads out of it. */
	for (size_t k = 0; k < t->n; k++)
		if (t->v[k].kind == K_LINK && !kept[k] && unlinkat(fd, t->v[k].path, 0) != 0)
			abort();
	for (size_t k = 0; k < t->n; k++) {
		const struct node *e = &t->v[k];
		if (e->kind != K_LINK || !kept[k])
			continue;
		int want = oracle(fd, e->path);
		if (want == EXDEV || want == ELOOP) {
			fprintf(stderr,
			        "%s -> %s: kept by the loader, openat2 %s where it is shown\n",
			        e->path, e->target, strerror(want));
			abort();
		}
	}
	index_close(idx);
}

static void remove_base(void)
{
	nftw(base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	util_log_set_level(UTIL_LOG_ERROR); /* each hidden link is a warning */
	snprintf(base, sizeof(base), "/tmp/fuzz_symlinks.XXXXXX");
	if (!mkdtemp(base))
		abort();
	atexit(remove_base);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct input in = {data, size};
	static struct tree t;
	char dir[128];
	int fd;

	decode(&in, &t);
	/* NOLINTNEXTLINE(concurrency-mt-unsafe): nothing sets the environment at run time */
	if (getenv("FUZZ_SYMLINKS_SHOW")) /* replaying an input: what it decodes to */
		for (size_t k = 0; k < t.n; k++)
			fprintf(stderr, "%s %s%s%s\n", t.v[k].path,
			        (const char *[]){"file", "dir", "nested", "->"}[t.v[k].kind],
			        t.v[k].target, t.v[k].unloaded ? " (not loaded)" : "");
	fd = materialise(&t, dir, sizeof(dir));
	if (fd < 0)
		abort();
	check_resolver(&t, fd);
	check_loader(&t, fd);
	close(fd);
	nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	return 0;
}

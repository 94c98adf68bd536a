/*
 * The symlink resolver (fetch/source/symlink_resolve.h) over a table of names, and the
 * loader's judgement of a manifest's symlinks with it (symlink_judge.h): chains, loops,
 * "..", files walked through, names that come later in the manifest, nested manifests.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fetch/source/manifest_load.h"
#include "fetch/source/symlink_resolve.h"
#include "index/index.h"
#include "helpers.h"

/* ---- the resolver over a table ---- */

struct name {
	const char *path;
	enum symlink_node_kind kind;
	const char *target;
};

struct table {
	const struct name *v;
	size_t n;
	const char *fail; /* a path whose lookup fails with -EIO */
};

static int table_lookup(void *ctx, const char *path, size_t len, struct symlink_node *out)
{
	const struct table *t = ctx;

	if (t->fail && strlen(t->fail) == len && memcmp(t->fail, path, len) == 0)
		return -EIO;
	for (size_t k = 0; k < t->n; k++) {
		if (strlen(t->v[k].path) != len || memcmp(t->v[k].path, path, len) != 0)
			continue;
		out->kind = t->v[k].kind;
		out->target = t->v[k].target;
		out->target_len = t->v[k].target ? strlen(t->v[k].target) : 0;
		return 0;
	}
	return -ENOENT;
}

#define DIR(p)                                                                                     \
	{                                                                                          \
		p, SYMLINK_NODE_DIR, NULL                                                          \
	}
#define FILE_(p)                                                                                   \
	{                                                                                          \
		p, SYMLINK_NODE_FILE, NULL                                                         \
	}
#define LINK(p, t)                                                                                 \
	{                                                                                          \
		p, SYMLINK_NODE_LINK, t                                                            \
	}
#define UNLISTED(p)                                                                                \
	{                                                                                          \
		p, SYMLINK_NODE_UNLISTED, NULL                                                     \
	}

static const struct name names[] = {
    DIR("d"),
    DIR("d/sub"),
    DIR("e"),
    FILE_("f"),
    FILE_("d/sub/g"),
    UNLISTED("n"),
    LINK("dot", "."),
    LINK("x", "dot/dot/dot/dot/dot/dot/dot/dot/../../../../../../../../etc"),
    LINK("up", ".."),
    LINK("z", "up/x/.."),
    LINK("dl", "d/sub"),
    LINK("dl_up3", "dl/../../.."),
    LINK("dl_up1", "dl/.."),
    LINK("abs", "/etc/passwd"),
    LINK("d/a", ".."),
    LINK("d/a2", "../.."),
    LINK("d/a3", "../missing/../.."),
    LINK("d/a4", "../e/../.."),
    LINK("d/sub/in", "../../f"),
    LINK("loop1", "loop2"),
    LINK("loop2", "loop1"),
    LINK("self", "self"),
    LINK("thru_file", "f/.."),
    LINK("file_slash", "f/"),
    LINK("file", "f"),
    LINK("m", "f"),
    LINK("via_m", "m/x"),
    LINK("into_n", "n/x"),
    LINK("to_n", "n"),
    LINK("n_up", "n/.."),
    LINK("n_dot_up", "n/./../.."),
    LINK("dangling", "nowhere/../../.."),
    LINK("dir_slash", "d//sub///g"),
    LINK("empty", ""),
    LINK("weird\"name", "/x\n"),
};

static struct symlink_result resolve(const char *path)
{
	struct table t = {names, sizeof(names) / sizeof(names[0]), NULL};
	struct symlink_result r;

	if (symlink_resolve(table_lookup, &t, path, strlen(path), &r) != 0)
		fail_msg("resolving %s failed", path);
	return r;
}

static void test_ends(void **state)
{
	static const struct {
		const char *path;
		enum symlink_end end;
		unsigned links;
	} cases[] = {
	    /* The proof of concept: "dot" walks as a directory, not one level down. */
	    {"x", SYMLINK_ESCAPES, 9},
	    /* ".." at the root through a link named like a directory. */
	    {"z", SYMLINK_ESCAPES, 2},
	    /* ".." goes back up the directories walked: dl is d/sub. */
	    {"dl_up3", SYMLINK_ESCAPES, 2},
	    {"dl_up1", SYMLINK_INSIDE, 2},
	    {"abs", SYMLINK_ESCAPES, 1},
	    {"up", SYMLINK_ESCAPES, 1},
	    {"d/a", SYMLINK_INSIDE, 1},
	    {"d/a2", SYMLINK_ESCAPES, 1},
	    {"d/a3", SYMLINK_DANGLING, 1},
	    {"d/a4", SYMLINK_ESCAPES, 1},
	    {"d/sub/in", SYMLINK_INSIDE, 1},
	    {"loop1", SYMLINK_LOOP, 41},
	    {"self", SYMLINK_LOOP, 41},
	    {"thru_file", SYMLINK_NOTDIR, 1},
	    {"file_slash", SYMLINK_NOTDIR, 1},
	    {"file", SYMLINK_INSIDE, 1},
	    /* m's target must be a directory: "/x" follows m. */
	    {"via_m", SYMLINK_NOTDIR, 2},
	    {"into_n", SYMLINK_UNKNOWN, 1},
	    {"to_n", SYMLINK_INSIDE, 1},
	    {"n_up", SYMLINK_INSIDE, 1},
	    {"n_dot_up", SYMLINK_ESCAPES, 1},
	    {"dangling", SYMLINK_DANGLING, 1},
	    {"dir_slash", SYMLINK_INSIDE, 1},
	    {"empty", SYMLINK_DANGLING, 1},
	    {"d", SYMLINK_INSIDE, 0},
	    {"nothing", SYMLINK_DANGLING, 0},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct symlink_result r = resolve(cases[i].path);
		if (r.end != cases[i].end || r.links != cases[i].links)
			fail_msg("%s: end %d (%s), %u links; expected %d, %u", cases[i].path, r.end,
			         r.chain, r.links, cases[i].end, cases[i].links);
	}
	assert_true(symlink_end_leaves(SYMLINK_ESCAPES));
	assert_true(symlink_end_leaves(SYMLINK_LOOP));
	assert_true(symlink_end_leaves(SYMLINK_UNKNOWN));
	assert_false(symlink_end_leaves(SYMLINK_DANGLING));
	assert_false(symlink_end_leaves(SYMLINK_NOTDIR));
	assert_false(symlink_end_leaves(SYMLINK_INSIDE));
}

static void test_chain_text(void **state)
{
	struct symlink_result r = resolve("x");

	(void)state;
	assert_string_equal(r.chain,
	                    "x -> \"dot/dot/dot/dot/dot/dot/dot/dot/../../../../../../../../etc\", "
	                    "dot -> \".\" (x8), then \"..\" above the mount's root");
	r = resolve("abs");
	assert_string_equal(r.chain, "abs -> \"/etc/passwd\" (absolute)");
	r = resolve("loop1");
	assert_string_equal(r.chain,
	                    "loop1 -> \"loop2\" (x20), loop2 -> \"loop1\" (x20), then more "
	                    "links than the kernel follows (40)");
	assert_true(strlen(r.chain) < SYMLINK_CHAIN_MAX);
	/* A manifest's quotes and control bytes are escaped: the chain goes into logs. */
	r = resolve("weird\"name");
	assert_string_equal(r.chain, "weird\\\"name -> \"/x\\x0a\" (absolute)");
	r = resolve("d/sub/in");
	assert_string_equal(r.chain, "d/sub/in -> \"../../f\"");
}

/* A chain of links l0 -> l1 -> ... : the kernel follows 40, not 41. */
static void test_forty_links(void **state)
{
	struct name v[42];
	char paths[42][8], targets[42][8];
	struct symlink_result r;

	(void)state;
	for (int k = 0; k < 41; k++) {
		snprintf(paths[k], sizeof(paths[k]), "l%d", k);
		snprintf(targets[k], sizeof(targets[k]), "l%d", k + 1);
		v[k] = (struct name){paths[k], SYMLINK_NODE_LINK, targets[k]};
	}
	v[41] = (struct name){"l41", SYMLINK_NODE_FILE, NULL};
	struct table t = {v, 42, NULL};
	assert_int_equal(symlink_resolve(table_lookup, &t, "l1", 2, &r), 0);
	assert_int_equal(r.end, SYMLINK_INSIDE);
	assert_int_equal(r.links, 40);
	assert_int_equal(symlink_resolve(table_lookup, &t, "l0", 2, &r), 0);
	assert_int_equal(r.end, SYMLINK_LOOP);
	/* A long chain names its first links and counts the others. */
	assert_non_null(strstr(r.chain, "l7 -> \"l8\", and 32 more, then more links"));
	t.fail = "l20";
	assert_int_equal(symlink_resolve(table_lookup, &t, "l0", 2, &r), -EIO);
}

/* ---- the loader's judgement ---- */

#define BASE "http://store.example/rel/manifest.json"
#define SHA_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define V2(entries) "{\"version\":2,\"entries\":[" entries "]}"
#define L(p, t) "{\"path\":\"" p "\",\"type\":\"symlink\",\"target\":\"" t "\"}"
#define F(p) "{\"path\":\"" p "\",\"size\":1}"
#define NESTED_DIR(p)                                                                              \
	"{\"path\":\"" p "\",\"type\":\"directory\",\"manifest\":{\"sha256\":\"" SHA_A             \
	"\",\"size\":10,\"url\":\"m/a\"}}"
#define POC L("d", ".") "," L("x", "d/d/d/d/d/d/d/d/../../../../../../../../etc")

struct fixture {
	struct index *idx;
	char err[512];
};

static struct fixture fixture;

static int setup(void **state)
{
	*state = &fixture;
	return index_open(&fixture.idx) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	index_close(fixture.idx);
	return 0;
}

/* Loads json into dir (INDEX_ROOT_INO: the whole namespace) under mode; *hidden counted. */
static int load_at(struct fixture *f, uint64_t dir, const char *json,
                   enum manifest_outside_symlinks mode, unsigned *hidden)
{
	struct manifest_load_options opts = {.outside_symlinks = mode};
	int rc = dir == INDEX_ROOT_INO
	             ? source_manifest_load(f->idx, json, strlen(json), BASE, &opts, f->err,
	                                    sizeof(f->err))
	             : source_manifest_load_subtree(f->idx, dir, json, strlen(json), BASE, &opts,
	                                            f->err, sizeof(f->err));

	if (hidden)
		*hidden = opts.hidden_symlinks;
	return rc;
}

#define load(f, json, mode, hidden) load_at(f, INDEX_ROOT_INO, json, mode, hidden)
#define load_below load_at
#define ino_at(f, path) test_index_ino((f)->idx, path)

/* Whether each of the space-separated paths is in the namespace (there) or not. */
static void expect(struct fixture *f, bool there, const char *paths)
{
	char copy[256], *save = NULL;

	snprintf(copy, sizeof(copy), "%s", paths);
	for (char *p = strtok_r(copy, " ", &save); p; p = strtok_r(NULL, " ", &save))
		if ((ino_at(f, p) != 0) != there)
			fail_msg("%s is %sin the namespace", p, there ? "not " : "");
}

static void reopen(struct fixture *f)
{
	index_close(f->idx);
	assert_int_equal(index_open(&f->idx), 0);
}

static void test_chain_refused_and_hidden(void **state)
{
	struct fixture *f = *state;
	unsigned hidden = 0;

	assert_int_equal(load(f, V2(POC), MANIFEST_OUTSIDE_REFUSE, NULL), -EINVAL);
	assert_non_null(strstr(f->err, "entries[1] \"x\": target \"d/d/d/d/d/d/d/d/../../../../../"
	                               "../../../etc\" leads out of the mount"));
	assert_non_null(strstr(f->err, "d -> \".\" (x8), then \"..\" above the mount's root"));
	reopen(f);
	assert_int_equal(load(f, V2(POC), MANIFEST_OUTSIDE_HIDE, &hidden), 0);
	assert_int_equal(hidden, 1);
	expect(f, false, "x");
	expect(f, true, "d");
	/* Shown as given when asked. */
	reopen(f);
	assert_int_equal(load(f, V2(POC), MANIFEST_OUTSIDE_SHOW, NULL), 0);
	expect(f, true, "x");
}

static void test_later_names_and_links(void **state)
{
	struct fixture *f = *state;
	unsigned hidden = 0;
	/* a goes through b, which comes later and leads out; c through e, which stays; g
	 * through a file; h dangles; i and j loop; the rest stay. */
	/* clang-format off */
	const char *json = V2(L("a", "b/x") "," L("c", "e/f") "," L("g", "f/..") ","
	                      L("h", "nowhere/../..") "," L("i", "j") "," L("j", "i") ","
	                      L("b", "..") "," L("e", "dir") "," F("f") "," F("dir/f") ","
	                      L("dir/k", "../../dir"));
	/* clang-format on */

	assert_int_equal(load(f, json, MANIFEST_OUTSIDE_HIDE, &hidden), 0);
	assert_int_equal(hidden, 5); /* a, i, j, b, dir/k */
	expect(f, false, "a b i j dir/k");
	expect(f, true, "c e g h f dir/f");
	reopen(f);
	/* Refused: the first in the manifest's order is named. */
	assert_int_equal(load(f, json, MANIFEST_OUTSIDE_REFUSE, NULL), -EINVAL);
	assert_non_null(strstr(f->err, "entries[0] \"a\": target \"b/x\" leads out of the mount"));
	assert_non_null(strstr(f->err, "a -> \"b/x\", b -> \"..\""));
	reopen(f);
	assert_int_equal(load(f, V2(L("i", "j") "," L("j", "i")), MANIFEST_OUTSIDE_REFUSE, NULL),
	                 -EINVAL);
	assert_non_null(
	    strstr(f->err, "entries[0] \"i\": target \"j\" follows more than 40 links"));
	/* A link's own path implies its directory: another link may walk through it. */
	reopen(f);
	assert_int_equal(
	    load(f, V2(L("p", "q/r/..") "," L("q/r", ".")), MANIFEST_OUTSIDE_REFUSE, NULL), 0);
	/* A clash is still named, link or not. */
	reopen(f);
	assert_int_equal(load(f, V2(L("s", "f") "," F("s")), MANIFEST_OUTSIDE_REFUSE, NULL),
	                 -EINVAL);
	assert_non_null(strstr(f->err, "entries[0] \"s\""));
}

static void test_nested(void **state)
{
	struct fixture *f = *state;
	unsigned hidden = 0;
	uint64_t sub, other;
	/* Its own ".." links are judged from the mount's root, not from sub: up1 and up2 stay
	 * (they were hidden when counted from sub), out and the chain leave, and into passes
	 * into "other", whose manifest is not loaded: it cannot be judged, so it leaves. */
	const char *below = V2(L("d/up1", "../../f") "," L("up2", "../f") "," L(
	    "d/out",
	    "../../../"
	    "etc") "," L("dot",
	                 ".") "," L("x",
	                            "dot/dot/dot/../../../etc") "," L("into",
	                                                              "../other/x") "," L("to_"
	                                                                                  "other",
	                                                                                  "../"
	                                                                                  "other") "," F("d/"
	                                                                                                 "g"));

	assert_int_equal(load(f, V2(F("f") "," NESTED_DIR("sub") "," NESTED_DIR("other")),
	                      MANIFEST_OUTSIDE_HIDE, NULL),
	                 0);
	sub = ino_at(f, "sub");
	other = ino_at(f, "other");
	assert_int_equal(load_below(f, sub, below, MANIFEST_OUTSIDE_REFUSE, NULL), -EINVAL);
	assert_non_null(strstr(f->err, "entries[2] \"d/out\": target \"../../../etc\" leads out"));
	assert_non_null(strstr(f->err, "sub/d/out -> \"../../../etc\""));
	assert_int_equal(load_below(f, sub, below, MANIFEST_OUTSIDE_HIDE, &hidden), 0);
	assert_int_equal(hidden, 3);
	expect(f, true, "sub/d/up1 sub/up2 sub/dot sub/to_other sub/d/g");
	expect(f, false, "sub/d/out sub/x sub/into");
	/* other's links may walk up through the root, but not into sub, loaded or not: what a
	 * link reaches must not depend on which directory was listed first. A directory nested
	 * in sub walks through sub, which is above it. */
	assert_int_equal(
	    load_below(f, other,
	               V2(L("y", "../sub/d/up1") "," L("z", "../f") "," NESTED_DIR("inner")),
	               MANIFEST_OUTSIDE_HIDE, &hidden),
	    0);
	assert_int_equal(hidden, 1);
	expect(f, true, "other/z");
	expect(f, false, "other/y");
	assert_int_equal(load_below(f, ino_at(f, "other/inner"),
	                            V2(L("w", "../z") "," L("v", "../../sub/d/g")),
	                            MANIFEST_OUTSIDE_REFUSE, NULL),
	                 -EINVAL);
	assert_non_null(strstr(f->err, "entries[1] \"v\": target \"../../sub/d/g\" passes into"));
	assert_int_equal(load_below(f, ino_at(f, "other/inner"), V2(L("w", "../z")),
	                            MANIFEST_OUTSIDE_REFUSE, NULL),
	                 0);
	expect(f, true, "other/inner/w");
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_ends),        cmocka_unit_test(test_chain_text),
	    cmocka_unit_test(test_forty_links), T(test_chain_refused_and_hidden),
	    T(test_later_names_and_links),      T(test_nested),
	};
#undef T
	return cmocka_run_group_tests(tests, NULL, NULL);
}

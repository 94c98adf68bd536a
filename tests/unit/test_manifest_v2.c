/*
 * Unit tests for manifest version 2 (fetch/source/manifest_load.c into index/build.c):
 * directories of their own (empty ones, modes, mtimes), symlinks, modes, packs and their
 * members, the reserved chunk fields, and one test per refusal, each checking that the
 * message names the entry and the reason and that nothing was loaded.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fetch/source/manifest_load.h"
#include "index/index.h"

#define BASE "http://store.example/rel/manifest.json"
#define SHA_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define SHA_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define SHA_C "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
#define SHA_P "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
#define PACKS "\"packs\":[{\"sha256\":\"" SHA_P "\",\"size\":100,\"url\":\"objects/dd/p\"}]"

struct fixture {
	struct index *idx;
	char err[512];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f || index_open(&f->idx) != 0)
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	index_close(f->idx);
	free(f);
	return 0;
}

static int load(struct fixture *f, const char *json)
{
	return source_manifest_load(f->idx, json, strlen(json), BASE, NULL, f->err, sizeof(f->err));
}

static struct index_node lookup_path(struct fixture *f, const char *path)
{
	struct index_node n = {.ino = INDEX_ROOT_INO};
	char buf[256], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *seg = strtok_r(buf, "/", &save); seg; seg = strtok_r(NULL, "/", &save))
		if (index_lookup(f->idx, n.ino, seg, &n) != 0)
			fail_msg("no %s in the namespace", path);
	return n;
}

static void expect_refusal(struct fixture *f, const char *json, const char *want)
{
	uint64_t files = 9, dirs = 9, bytes = 9;
	int rc = load(f, json);

	if (rc != -EINVAL)
		fail_msg("load gave %d, message \"%s\"", rc, f->err);
	if (!strstr(f->err, want))
		fail_msg("message \"%s\" lacks \"%s\"", f->err, want);
	assert_int_equal(index_totals(f->idx, &files, &dirs, &bytes), 0);
	assert_int_equal(files, 0);
	assert_int_equal(dirs, 1);
}

static void test_directories_symlinks_and_modes(void **state)
{
	struct fixture *f = *state;
	char target[64];
	uint64_t files, dirs, bytes;
	struct index_node n;

	assert_int_equal(
	    load(f, "{\"version\":2,\"entries\":["
	            "{\"path\":\"refs/heads\",\"type\":\"directory\",\"mode\":\"0755\","
	            "\"mtime\":100},"
	            "{\"path\":\"bin\",\"type\":\"directory\",\"mode\":\"0700\",\"mtime\":50},"
	            "{\"path\":\"bin/gcc\",\"size\":3,\"mode\":\"0755\",\"mtime\":900},"
	            "{\"path\":\"bin/cc\",\"type\":\"symlink\",\"target\":\"gcc\",\"mtime\":70},"
	            "{\"path\":\"lib/a.txt\",\"size\":1,\"mode\":\"644\",\"mtime\":300},"
	            "{\"path\":\"lib\",\"type\":\"directory\",\"mtime\":20},"
	            "{\"path\":\"abs\",\"type\":\"symlink\",\"target\":\"/etc/os-release\"}"
	            "]}"),
	    0);
	n = lookup_path(f, "refs/heads");
	assert_int_equal(n.kind, INDEX_KIND_DIR);
	assert_int_equal(n.mode, 0555);
	assert_int_equal(n.mtime, 100);
	/* Its implied parent takes the newest mtime beneath it. */
	n = lookup_path(f, "refs");
	assert_int_equal(n.mtime, 100);
	assert_int_equal(n.mode, 0555);
	/* A directory with its own mtime keeps it, however new its children are. */
	n = lookup_path(f, "bin");
	assert_int_equal(n.mode, 0500);
	assert_int_equal(n.mtime, 50);
	n = lookup_path(f, "bin/gcc");
	assert_int_equal(n.kind, INDEX_KIND_FILE);
	assert_int_equal(n.mode, 0555);
	assert_true(n.executable);
	n = lookup_path(f, "lib/a.txt");
	assert_int_equal(n.mode, 0444);
	assert_false(n.executable);
	/* Named after its child implied it: its own mtime, not the child's. */
	n = lookup_path(f, "lib");
	assert_int_equal(n.mtime, 20);
	n = lookup_path(f, "bin/cc");
	assert_int_equal(n.kind, INDEX_KIND_SYMLINK);
	assert_int_equal(n.size, 3);
	assert_int_equal(n.mtime, 70);
	assert_int_equal(index_readlink(f->idx, n.ino, target, sizeof(target)), 3);
	assert_string_equal(target, "gcc");
	assert_int_equal(index_readlink(f->idx, n.ino, target, 3), -ERANGE);
	n = lookup_path(f, "abs");
	assert_int_equal(index_readlink(f->idx, n.ino, target, sizeof(target)), 15);
	assert_string_equal(target, "/etc/os-release");
	n = lookup_path(f, "bin/gcc");
	assert_int_equal(index_readlink(f->idx, n.ino, target, sizeof(target)), -EINVAL);
	assert_int_equal(index_totals(f->idx, &files, &dirs, &bytes), 0);
	assert_int_equal(files, 4); /* two files and two symlinks */
	assert_int_equal(dirs, 5);  /* the root, refs, refs/heads, bin, lib */
	assert_int_equal(bytes, 4);
}

static void test_pack_members(void **state)
{
	struct fixture *f = *state;
	struct index_object_ref ref;
	struct index_node n;

	assert_int_equal(load(f, "{\"version\":2," PACKS ",\"entries\":["
	                         "{\"path\":\"d/a\",\"size\":40,\"sha256\":\"" SHA_A "\","
	                         "\"pack\":\"" SHA_P "\",\"offset\":0},"
	                         "{\"path\":\"d/b\",\"size\":60,\"sha256\":\"" SHA_B "\","
	                         "\"pack\":\"" SHA_P "\",\"offset\":40},"
	                         "{\"path\":\"d/c\",\"size\":5,\"sha256\":\"" SHA_C "\","
	                         "\"url\":\"objects/cc\"}]}"),
	                 0);
	/* One query gives a member its node and its pack, and no URL of its own. */
	n = lookup_path(f, "d/b");
	assert_int_equal(index_get_object(f->idx, n.ino, &ref), 0);
	assert_int_equal(ref.node.ino, n.ino);
	assert_int_equal(ref.node.size, 60);
	assert_string_equal(ref.node.sha256, SHA_B);
	assert_string_equal(ref.pack.pack_sha256, SHA_P);
	assert_int_equal(ref.pack.pack_size, 100);
	assert_int_equal(ref.pack.offset, 40);
	assert_string_equal(ref.pack.url, "http://store.example/rel/objects/dd/p");
	assert_null(ref.url);
	assert_int_equal(ref.chunks.chunk_size, 0);
	index_object_ref_free(&ref);
	n = lookup_path(f, "d/c");
	assert_int_equal(index_get_object(f->idx, n.ino, &ref), 0);
	assert_null(ref.pack.url);
	assert_string_equal(ref.url, "http://store.example/rel/objects/cc");
	assert_string_equal(ref.etag, "");
	index_object_ref_free(&ref);
	n = lookup_path(f, "d");
	assert_int_equal(index_get_object(f->idx, n.ino, &ref), 0);
	assert_int_equal(ref.node.kind, INDEX_KIND_DIR);
	assert_null(ref.url);
	assert_null(ref.pack.url);
	index_object_ref_free(&ref);
	assert_int_equal(index_get_object(f->idx, 999999, &ref), -ENOENT);
	index_object_ref_free(&ref);
}

static void test_chunks_are_accepted(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(load(f, "{\"version\":2,\"entries\":[{\"path\":\"big\",\"size\":1048576,"
	                         "\"sha256\":\"" SHA_A "\",\"chunks\":{\"size\":262144,"
	                         "\"sha256\":\"" SHA_B "\",\"url\":\"objects/bb\"}}]}"),
	                 0);
	struct index_node n = lookup_path(f, "big");
	struct index_object_ref ref;
	assert_int_equal(index_get_object(f->idx, n.ino, &ref), 0);
	assert_int_equal(ref.chunks.chunk_size, 262144);
	assert_string_equal(ref.chunks.sha256, SHA_B);
	assert_string_equal(ref.chunks.url, "http://store.example/rel/objects/bb");
	assert_non_null(ref.url);
	index_object_ref_free(&ref);
}

/* Version 1 reads none of version 2's fields: a "type" there is an unknown key. */
static void test_version_1_ignores_version_2_fields(void **state)
{
	struct fixture *f = *state;
	struct index_node n;

	assert_int_equal(load(f, "{\"version\":1,\"files\":[{\"path\":\"x\",\"size\":1,"
	                         "\"type\":\"symlink\",\"mode\":\"0755\"}]}"),
	                 0);
	n = lookup_path(f, "x");
	assert_int_equal(n.kind, INDEX_KIND_FILE);
	assert_int_equal(n.mode, 0444);
}

#define V2(entries) "{\"version\":2,\"entries\":[" entries "]}"
#define V2P(entries) "{\"version\":2," PACKS ",\"entries\":[" entries "]}"

static void test_refusals(void **state)
{
	static char long_target[8192];
	struct fixture *f = *state;
	static const struct {
		const char *json, *want;
	} cases[] = {
	    {V2("{\"path\":\"a\",\"type\":\"fifo\"}"),
	     "entries[0] \"a\": type \"fifo\" is unknown"},
	    {V2("{\"path\":\"a\",\"type\":\"symlink\"}"), "entries[0] \"a\": target is missing"},
	    {V2("{\"path\":\"a\",\"type\":\"symlink\",\"target\":\"x\\u0000y\"}"),
	     "target contains a NUL byte"},
	    {V2("{\"path\":\"a\",\"type\":\"symlink\",\"target\":\"\"}"), "target is empty"},
	    {V2("{\"path\":\"a\",\"type\":\"symlink\",\"target\":7}"), "target is not a string"},
	    {V2("{\"path\":\"a\",\"type\":\"symlink\",\"target\":\"b\",\"size\":1}"),
	     "size is not allowed for a symlink"},
	    {V2("{\"path\":\"a\",\"type\":\"directory\",\"url\":\"x\"}"),
	     "url is not allowed for a directory"},
	    {V2("{\"path\":\"a\",\"size\":1,\"target\":\"b\"}"), "target is only for a symlink"},
	    {V2("{\"path\":\"a\",\"type\":\"directory\"},{\"path\":\"a\",\"size\":1}"),
	     "entries[1] \"a\": path is both a file and a directory"},
	    {V2("{\"path\":\"a\",\"size\":1},{\"path\":\"a\",\"type\":\"directory\"}"),
	     "entries[1] \"a\": path is both a directory and a file"},
	    {V2("{\"path\":\"a\",\"type\":\"directory\"},{\"path\":\"a\",\"type\":\"directory\"}"),
	     "entries[1] \"a\": duplicate path"},
	    {V2("{\"path\":\"a\",\"type\":\"symlink\",\"target\":\"b\"},"
	        "{\"path\":\"a\",\"type\":\"directory\"}"),
	     "path is both a directory and a symlink"},
	    {V2("{\"path\":\"a\",\"type\":\"symlink\",\"target\":\"b\"},{\"path\":\"a/"
	        "f\",\"size\":1}"),
	     "\"a\" is both a symlink and a directory"},
	    {V2("{\"path\":\"a\",\"size\":1,\"mode\":\"0999\"}"),
	     "mode is not 3 or 4 octal digits"},
	    {V2("{\"path\":\"a\",\"size\":1,\"mode\":493}"), "mode is not 3 or 4 octal digits"},
	    {V2("{\"path\":\"a\",\"type\":\"symlink\",\"target\":\"b\",\"mode\":\"0755\"}"),
	     "mode is not allowed for a symlink"},
	    {V2P("{\"path\":\"a\",\"size\":61,\"sha256\":\"" SHA_A "\",\"pack\":\"" SHA_P
	         "\",\"offset\":40}"),
	     "offset 40 + size 61 lies beyond its pack's size 100"},
	    {V2P("{\"path\":\"a\",\"size\":1,\"sha256\":\"" SHA_A "\",\"pack\":\"" SHA_C
	         "\",\"offset\":0}"),
	     "is not in \"packs\""},
	    {V2P("{\"path\":\"a\",\"size\":1,\"pack\":\"" SHA_P "\",\"offset\":0}"),
	     "a pack member needs its own sha256"},
	    {V2P("{\"path\":\"a\",\"size\":1,\"sha256\":\"" SHA_A "\",\"pack\":\"" SHA_P
	         "\",\"offset\":0,\"url\":\"x\"}"),
	     "a pack member has no url"},
	    {V2P("{\"path\":\"a\",\"size\":1,\"sha256\":\"" SHA_A "\",\"pack\":\"" SHA_P "\"}"),
	     "offset is missing"},
	    {V2P("{\"path\":\"a\",\"size\":1,\"sha256\":\"" SHA_A "\",\"pack\":\"" SHA_P
	         "\",\"offset\":-1}"),
	     "offset is not a non-negative integer"},
	    {V2("{\"path\":\"a\",\"size\":1,\"offset\":0}"), "offset without pack"},
	    {"{\"version\":2,\"packs\":[{\"sha256\":\"" SHA_P "\",\"size\":100,\"url\":\"p\"},"
	     "{\"sha256\":\"" SHA_P "\",\"size\":101,\"url\":\"p\"}],\"entries\":[]}",
	     "packs[1]: pack dddddddddddddddd... has two sizes, 100 and 101"},
	    {"{\"version\":2,\"packs\":[{\"sha256\":\"x\",\"size\":1,\"url\":\"p\"}],\"entries\":[]"
	     "}",
	     "packs[0]: sha256 is not 64 hex digits"},
	    {"{\"version\":2,\"packs\":[{\"sha256\":\"" SHA_P "\",\"size\":1}],\"entries\":[]}",
	     "packs[0]: url is not a non-empty string"},
	    {"{\"version\":2,\"packs\":{},\"entries\":[]}", "\"packs\" is not an array"},
	    {"{\"version\":2,\"files\":[]}", "manifest has no \"entries\""},
	    {V2("{\"path\":\"a\",\"size\":1,\"chunks\":{\"size\":1000,\"sha256\":\"" SHA_A
	        "\",\"url\":\"c\"}}"),
	     "chunks.size is not a power of two"},
	    {V2("{\"path\":\"a\",\"size\":1,\"chunks\":{\"size\":4096,\"url\":\"c\"}}"),
	     "chunks.sha256 is not 64 hex digits"},
	    {V2("{\"path\":\"a\",\"size\":1,\"chunks\":[]}"), "chunks is not an object"},
	    /* Refused before its URL is made from it: escaping an absolute path of bytes that
	     * each escape to three once wrote past its buffer (ASan, the fuzzer). */
	    {"{\"version\":1,\"files\":[{\"path\":\"/e\x8c\x9c\x8c\x9c/passwd\",\"size\":1}]}",
	     "/passwd\": path is absolute"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		index_close(f->idx);
		assert_int_equal(index_open(&f->idx), 0);
		expect_refusal(f, cases[i].json, cases[i].want);
	}
	/* A target of 4,096 bytes is one too many. */
	char *json = malloc(sizeof(long_target) + 128);
	assert_non_null(json);
	memset(long_target, 'x', 4096);
	long_target[4096] = '\0';
	index_close(f->idx);
	assert_int_equal(index_open(&f->idx), 0);
	snprintf(json, sizeof(long_target) + 128,
	         V2("{\"path\":\"a\",\"type\":\"symlink\",\"target\":\"%s\"}"), long_target);
	expect_refusal(f, json, "target is longer than 4095 bytes");
	long_target[4095] = '\0';
	index_close(f->idx);
	assert_int_equal(index_open(&f->idx), 0);
	snprintf(json, sizeof(long_target) + 128,
	         V2("{\"path\":\"a\",\"type\":\"symlink\",\"target\":\"%s\"}"), long_target);
	assert_int_equal(load(f, json), 0);
	free(json);
}

static void test_symlinks_that_leave_the_mount(void **state)
{
	struct fixture *f = *state;
	struct manifest_load_options opts = {.outside_symlinks = MANIFEST_OUTSIDE_HIDE};
	const char *json = V2("{\"path\":\"up\",\"type\":\"symlink\",\"target\":\"../x\"},"
	                      "{\"path\":\"in\",\"type\":\"symlink\",\"target\":\"x/y\"},"
	                      "{\"path\":\"d/abs\",\"type\":\"symlink\",\"target\":\"/x\"},"
	                      "{\"path\":\"d\",\"type\":\"directory\"}");
	struct index_node n;

	/* Hidden: left out and counted; the directory it was in is still there. */
	assert_int_equal(
	    source_manifest_load(f->idx, json, strlen(json), BASE, &opts, f->err, sizeof(f->err)),
	    0);
	assert_int_equal(opts.hidden_symlinks, 2);
	assert_int_equal(index_lookup(f->idx, INDEX_ROOT_INO, "up", &n), -ENOENT);
	assert_int_equal(index_lookup(f->idx, INDEX_ROOT_INO, "in", &n), 0);
	assert_int_equal(index_lookup(f->idx, INDEX_ROOT_INO, "d", &n), 0);
	/* Refused: the entry is named. */
	index_close(f->idx);
	assert_int_equal(index_open(&f->idx), 0);
	opts = (struct manifest_load_options){.outside_symlinks = MANIFEST_OUTSIDE_REFUSE};
	assert_int_equal(
	    source_manifest_load(f->idx, json, strlen(json), BASE, &opts, f->err, sizeof(f->err)),
	    -EINVAL);
	assert_non_null(
	    strstr(f->err, "entries[0] \"up\": target \"../x\" leads out of the mount"));
}

#define NESTED "\"manifest\":{\"sha256\":\"" SHA_A "\",\"size\":10,\"url\":\"m/a\"}"

static void test_nested_manifests(void **state)
{
	struct fixture *f = *state;
	const char *top = V2("{\"path\":\"sub\",\"type\":\"directory\",\"mtime\":5," NESTED "}");
	const char *below = V2("{\"path\":\".spoolfs\",\"size\":1},{\"path\":\"d/x\",\"size\":2}");
	struct index_nested_ref ref;
	struct index_node n;
	bool listed = true;

	assert_int_equal(load(f, top), 0);
	n = lookup_path(f, "sub");
	assert_int_equal(index_dir_listed(f->idx, n.ino, &listed), 0);
	assert_false(listed);
	assert_int_equal(index_get_nested(f->idx, n.ino, &ref), 0);
	assert_string_equal(ref.sha256, SHA_A);
	assert_int_equal(ref.size, 10);
	assert_string_equal(ref.url, "http://store.example/rel/m/a");
	free(ref.url);
	/* Below the root, ".spoolfs" is a name like any other. */
	assert_int_equal(source_manifest_load_subtree(f->idx, n.ino, below, strlen(below), BASE,
	                                              NULL, f->err, sizeof(f->err)),
	                 0);
	assert_int_equal(index_dir_listed(f->idx, n.ino, &listed), 0);
	assert_true(listed);
	assert_int_equal(lookup_path(f, "sub/d/x").size, 2);
	assert_int_equal(lookup_path(f, "sub").mtime, 5); /* its own, not its children's */
	/* Listed once: a second load is refused, and the root has no manifest of its own. */
	assert_int_equal(source_manifest_load_subtree(f->idx, n.ino, below, strlen(below), BASE,
	                                              NULL, f->err, sizeof(f->err)),
	                 -EBUSY);
	assert_int_equal(index_get_nested(f->idx, INDEX_ROOT_INO, &ref), -ENODATA);

	static const struct {
		const char *json, *want;
	} refused[] = {
	    {V2("{\"path\":\"sub\",\"type\":\"directory\"," NESTED
	        "},{\"path\":\"sub/a\",\"size\":1}"),
	     "entries[1] \"sub/a\": \"sub\" has a manifest of its own"},
	    {V2("{\"path\":\"sub/a\",\"size\":1},{\"path\":\"sub\",\"type\":\"directory\"," NESTED
	        "}"),
	     "entries[1] \"sub\": path has a manifest of its own, but entries here too"},
	    {V2("{\"path\":\"f\",\"size\":1," NESTED "}"), "manifest is only for a directory"},
	    {V2("{\"path\":\"d\",\"type\":\"directory\",\"manifest\":{\"size\":1}}"),
	     "manifest.sha256 is not 64 hex digits"},
	};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		index_close(f->idx);
		assert_int_equal(index_open(&f->idx), 0);
		expect_refusal(f, refused[i].json, refused[i].want);
	}
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
	const struct CMUnitTest tests[] = {
	    T(test_directories_symlinks_and_modes),
	    T(test_pack_members),
	    T(test_chunks_are_accepted),
	    T(test_version_1_ignores_version_2_fields),
	    T(test_refusals),
	    T(test_symlinks_that_leave_the_mount),
	    T(test_nested_manifests),
	};
#undef T
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * Unit tests for manifest version 3 (doc/manifest.md, "Version 3: compressed objects"):
 * `stored` on a file, a pack and a chunked file loaded into the index and read back by
 * index_get_object (the frame table a flight is given), nested manifests of version 2 or 3
 * under either, and one case per refusal the format lists, each checking that the message
 * names the entry and the reason and that nothing was loaded.
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

#include "fetch/source/frame_table.h"
#include "fetch/source/manifest_load.h"
#include "index/index.h"

#define BASE "http://store.example/rel/manifest.json"
#define SHA_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define SHA_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define SHA_C "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
#define SHA_P "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
#define SHA_S "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee"
#define V3(entries) "{\"version\":3,\"entries\":[" entries "]}"
#define V3P(packs, entries) "{\"version\":3,\"packs\":[" packs "],\"entries\":[" entries "]}"
/* 10,000 bytes in frames of 4096: 3 frames (4096, 4096, 1808 bytes), stored in 600. */
#define STORED(fields) "\"stored\":{\"encoding\":\"zstd\"," fields "}"
#define GOOD_STORED                                                                                \
	STORED("\"size\":600,\"sha256\":\"" SHA_S "\",\"frame\":4096,\"frames\":[100,200,300]")
#define FILE10K(stored) "{\"path\":\"f\",\"size\":10000,\"sha256\":\"" SHA_A "\"," stored "}"
#define CHUNKS "\"chunks\":{\"size\":4096,\"sha256\":\"" SHA_C "\",\"url\":\"objects/c\"}"
#define PACK(stored) "{\"sha256\":\"" SHA_P "\",\"size\":10000,\"url\":\"objects/p\"" stored "}"
#define MEMBER                                                                                     \
	"{\"path\":\"m\",\"size\":10,\"sha256\":\"" SHA_B "\",\"pack\":\"" SHA_P                   \
	"\",\"offset\":5000}"

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

static uint64_t ino_of(struct fixture *f, const char *path)
{
	struct index_node n = {.ino = INDEX_ROOT_INO};
	char buf[256], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *seg = strtok_r(buf, "/", &save); seg; seg = strtok_r(NULL, "/", &save))
		if (index_lookup(f->idx, n.ino, seg, &n) != 0)
			fail_msg("no %s in the namespace", path);
	return n.ino;
}

static void expect_refusal(struct fixture *f, const char *json, const char *want)
{
	uint64_t files = 9, dirs = 9, bytes = 9;
	int rc;

	index_close(f->idx);
	assert_int_equal(index_open(&f->idx), 0);
	rc = load(f, json);
	if (rc != -EINVAL)
		fail_msg("load of %s gave %d, message \"%s\"", json, rc, f->err);
	if (!strstr(f->err, want))
		fail_msg("message \"%s\" lacks \"%s\"", f->err, want);
	assert_int_equal(index_totals(f->idx, &files, &dirs, &bytes), 0);
	assert_int_equal(files, 0);
	assert_int_equal(dirs, 1);
}

/* s, and the table index_get_stored_frames gives for ino (its pack's for a member). */
static void assert_good_table(struct fixture *f, uint64_t ino, const struct index_stored *s)
{
	unsigned char *le = NULL;
	size_t len = 0;
	uint32_t lens[3];

	assert_int_equal(s->size, 600);
	assert_int_equal(s->frame, 4096);
	assert_int_equal(s->n_frames, 3);
	assert_true(s->in_index);
	assert_int_equal(index_get_stored_frames(f->idx, ino, &le, &len), 0);
	assert_int_equal(len, 3 * FRAME_TABLE_LE_BYTES);
	frame_table_decode_le(le, 3, lens);
	free(le);
	assert_int_equal(lens[0], 100);
	assert_int_equal(lens[1], 200);
	assert_int_equal(lens[2], 300);
}

static void test_file_pack_and_chunked(void **state)
{
	struct fixture *f = *state;
	struct index_object_ref ref;
	uint64_t files, dirs, bytes;

	assert_int_equal(
	    load(f, V3P(PACK("," GOOD_STORED),
	                FILE10K(GOOD_STORED) "," MEMBER ","
	                                     "{\"path\":\"raw\",\"size\":5},"
	                                     "{\"path\":\"c\",\"size\":10000,\"sha256\":\"" SHA_C
	                                     "\"," CHUNKS
	                                     "," STORED("\"size\":5000,\"frame\":4096") "}")),
	    0);
	/* ls -l shows the files' own sizes, never the stored ones. */
	assert_int_equal(index_totals(f->idx, &files, &dirs, &bytes), 0);
	assert_int_equal(bytes, 10000 + 10 + 5 + 10000);

	assert_int_equal(index_get_object(f->idx, ino_of(f, "f"), &ref), 0);
	assert_int_equal(ref.node.size, 10000);
	assert_good_table(f, ino_of(f, "f"), &ref.stored);
	assert_null(ref.pack.url);
	index_object_ref_free(&ref);

	/* A member: its pack's table, none of its own. */
	assert_int_equal(index_get_object(f->idx, ino_of(f, "m"), &ref), 0);
	assert_non_null(ref.pack.url);
	assert_good_table(f, ino_of(f, "m"), &ref.pack.stored);
	assert_int_equal(ref.stored.frame, 0);
	index_object_ref_free(&ref);

	/* Stored as it is. */
	assert_int_equal(index_get_object(f->idx, ino_of(f, "raw"), &ref), 0);
	assert_int_equal(ref.stored.frame, 0);
	assert_int_equal(ref.stored.size, 0);
	assert_false(ref.stored.in_index);
	index_object_ref_free(&ref);

	/* Chunked: the frames are in its hash list, not in the index. */
	assert_int_equal(index_get_object(f->idx, ino_of(f, "c"), &ref), 0);
	assert_int_equal(ref.chunks.chunk_size, 4096);
	assert_int_equal(ref.stored.frame, 4096);
	assert_int_equal(ref.stored.size, 5000);
	assert_int_equal(ref.stored.n_frames, 3);
	assert_false(ref.stored.in_index);
	unsigned char *le = NULL;
	size_t len = 0;
	assert_int_equal(index_get_stored_frames(f->idx, ino_of(f, "c"), &le, &len), -ENOENT);
	index_object_ref_free(&ref);
}

/* A pack listed without stored in a version 3 manifest, and the same sha256 stored both
 * ways in two files: each keeps its own form. */
static void test_raw_pack_and_version_2_unchanged(void **state)
{
	struct fixture *f = *state;
	struct index_object_ref ref;

	assert_int_equal(load(f, V3P(PACK(""), MEMBER)), 0);
	assert_int_equal(index_get_object(f->idx, ino_of(f, "m"), &ref), 0);
	assert_int_equal(ref.pack.stored.frame, 0);
	index_object_ref_free(&ref);

	index_close(f->idx);
	assert_int_equal(index_open(&f->idx), 0);
	assert_int_equal(load(f, "{\"version\":2,\"entries\":[{\"path\":\"a\",\"size\":1}]}"), 0);
	assert_int_equal(index_get_object(f->idx, ino_of(f, "a"), &ref), 0);
	assert_int_equal(ref.stored.frame, 0);
	index_object_ref_free(&ref);
}

#define NESTED(v)                                                                                  \
	"{\"path\":\"sub\",\"type\":\"directory\",\"manifest\":{\"size\":10,\"sha256\":\"" SHA_A   \
	"\",\"url\":\"m/a\"}}"

/* A nested manifest may be version 2 or 3 under either. */
static void test_nested_v2_and_v3_under_either(void **state)
{
	struct fixture *f = *state;
	static const char *const tops[] = {
	    "{\"version\":2,\"entries\":[" NESTED(2) "]}",
	    "{\"version\":3,\"entries\":[" NESTED(3) "]}",
	};
	static const char *const belows[] = {
	    "{\"version\":2,\"entries\":[{\"path\":\"x\",\"size\":2}]}",
	    V3(FILE10K(GOOD_STORED)),
	};

	for (size_t t = 0; t < 2; t++) {
		for (size_t b = 0; b < 2; b++) {
			struct index_object_ref ref;
			index_close(f->idx);
			assert_int_equal(index_open(&f->idx), 0);
			assert_int_equal(load(f, tops[t]), 0);
			uint64_t dir = ino_of(f, "sub");
			int rc =
			    source_manifest_load_subtree(f->idx, dir, belows[b], strlen(belows[b]),
			                                 BASE, NULL, f->err, sizeof(f->err));
			if (rc)
				fail_msg("top v%zu, nested v%zu: %s", t + 2, b + 2, f->err);
			if (b == 0)
				continue;
			assert_int_equal(index_get_object(f->idx, ino_of(f, "sub/f"), &ref), 0);
			assert_good_table(f, ino_of(f, "sub/f"), &ref.stored);
			index_object_ref_free(&ref);
		}
	}
	/* ... and a nested one is refused as a top one is: stored in version 2. */
	index_close(f->idx);
	assert_int_equal(index_open(&f->idx), 0);
	assert_int_equal(load(f, tops[1]), 0);
	const char *bad = "{\"version\":2,\"entries\":[" FILE10K(GOOD_STORED) "]}";
	assert_int_equal(source_manifest_load_subtree(f->idx, ino_of(f, "sub"), bad, strlen(bad),
	                                              BASE, NULL, f->err, sizeof(f->err)),
	                 -EINVAL);
	assert_non_null(strstr(f->err, "entries[0] \"f\": stored needs manifest version 3"));
}

static void test_refusals(void **state)
{
	struct fixture *f = *state;
	static const struct {
		const char *json, *want;
	} cases[] = {
	    /* Not in version 1 or 2. */
	    {"{\"version\":1,\"files\":[" FILE10K(GOOD_STORED) "]}",
	     "files[0] \"f\": stored needs manifest version 3 (this one is version 1)"},
	    {"{\"version\":2,\"entries\":[" FILE10K(GOOD_STORED) "]}",
	     "entries[0] \"f\": stored needs manifest version 3 (this one is version 2)"},
	    {"{\"version\":2,\"packs\":[" PACK("," GOOD_STORED) "],\"entries\":[" MEMBER "]}",
	     "packs[0]: stored needs manifest version 3"},
	    /* Not on a member, an empty file, a directory or a symlink. */
	    {V3P(PACK(""), "{\"path\":\"m\",\"size\":10,\"sha256\":\"" SHA_B "\",\"pack\":\"" SHA_P
	                   "\",\"offset\":0," GOOD_STORED "}"),
	     "entries[0] \"m\": stored is not allowed for a pack member"},
	    {V3("{\"path\":\"e\",\"size\":0," GOOD_STORED "}"),
	     "entries[0] \"e\": stored is not allowed for an empty file"},
	    {V3("{\"path\":\"d\",\"type\":\"directory\"," GOOD_STORED "}"),
	     "entries[0] \"d\": stored is not allowed for a directory"},
	    {V3("{\"path\":\"l\",\"type\":\"symlink\",\"target\":\"x\"," GOOD_STORED "}"),
	     "entries[0] \"l\": stored is not allowed for a symlink"},
	    {V3(FILE10K("\"stored\":[1]")), "entries[0] \"f\": stored is not an object"},
	    /* Encoding. */
	    {V3(FILE10K("\"stored\":{\"size\":600,\"frame\":4096,\"frames\":[100,200,300]}")),
	     "stored.encoding is missing"},
	    {V3(FILE10K("\"stored\":{\"encoding\":\"gzip\",\"size\":600,\"frame\":4096,"
	                "\"frames\":[100,200,300]}")),
	     "entries[0] \"f\": stored.encoding is not \"zstd\""},
	    {V3(FILE10K(STORED("\"size\":600,\"sha256\":\"xyz\",\"frame\":4096,"
	                       "\"frames\":[100,200,300]"))),
	     "stored.sha256 is not 64 hex digits"},
	    /* stored.size and frame missing or out of range. */
	    {V3(FILE10K(STORED("\"frame\":4096,\"frames\":[100,200,300]"))),
	     "entries[0] \"f\": stored.size is missing"},
	    {V3(FILE10K(STORED("\"size\":-1,\"frame\":4096,\"frames\":[100,200,300]"))),
	     "stored.size is not an integer from 3 to"},
	    {V3(FILE10K(STORED("\"size\":2,\"frame\":4096,\"frames\":[1,1,0]"))),
	     "stored.size is not an integer from 3 to"},
	    {V3(FILE10K(STORED("\"size\":99999,\"frame\":4096,\"frames\":[100,200,300]"))),
	     "stored.size is not an integer from 3 to 10226"},
	    {V3(FILE10K(STORED("\"size\":600.5,\"frame\":4096,\"frames\":[100,200,300]"))),
	     "stored.size is not an integer"},
	    {V3(FILE10K(STORED("\"size\":600,\"frames\":[100,200,300]"))),
	     "entries[0] \"f\": stored.frame is missing"},
	    {V3(FILE10K(STORED("\"size\":600,\"frame\":5000,\"frames\":[100,200]"))),
	     "stored.frame is not a power of two from 4096 to 67108864"},
	    {V3(FILE10K(STORED("\"size\":600,\"frame\":2048,\"frames\":[100,200,300]"))),
	     "stored.frame is not a power of two"},
	    {V3(FILE10K(STORED("\"size\":600,\"frame\":134217728,\"frames\":[600]"))),
	     "stored.frame is not a power of two"},
	    /* The table. */
	    {V3(FILE10K(STORED("\"size\":600,\"frame\":4096"))), "stored.frames is missing"},
	    {V3(FILE10K(STORED("\"size\":600,\"frame\":4096,\"frames\":600"))),
	     "stored.frames is not an array"},
	    {V3(FILE10K(STORED("\"size\":600,\"frame\":4096,\"frames\":[300,300]"))),
	     "stored.frames has 2 lengths, not the 3 frames of 4096 bytes that 10000 bytes make"},
	    {V3(FILE10K(STORED("\"size\":600,\"frame\":4096,\"frames\":[100,200,150,150]"))),
	     "stored.frames has 4 lengths"},
	    {V3(FILE10K(STORED("\"size\":600,\"frame\":4096,\"frames\":[0,300,300]"))),
	     "entries[0] \"f\": stored.frames[0] is not a length from 1 to 4174"},
	    {V3(FILE10K(STORED("\"size\":6000,\"frame\":4096,\"frames\":[100,100,5800]"))),
	     "stored.frames[2] is not a length from 1 to 1878 (zstd's bound for its 1808 bytes)"},
	    {V3(FILE10K(STORED("\"size\":600,\"frame\":4096,\"frames\":[100,200,\"300\"]"))),
	     "stored.frames[2] is not a length"},
	    {V3(FILE10K(STORED("\"size\":601,\"frame\":4096,\"frames\":[100,200,300]"))),
	     "entries[0] \"f\": stored.frames add up to 600, not stored.size 601"},
	    /* With chunks. */
	    {V3("{\"path\":\"c\",\"size\":10000," CHUNKS
	        "," STORED("\"size\":600,\"frame\":8192") "}"),
	     "entries[0] \"c\": stored.frame 8192 is not chunks.size 4096"},
	    {V3("{\"path\":\"c\",\"size\":10000," CHUNKS "," GOOD_STORED "}"),
	     "stored.frames is not allowed with chunks"},
	    {V3(FILE10K(STORED("\"size\":600,\"frame\":4096,\"frames\":[100,[200],300]"))),
	     "stored.frames[1] is not a length"},
	    {V3(FILE10K(STORED("\"size\":600,\"frame\":4096,\"frames\":[100,{\"a\":[1,2]},300]"))),
	     "stored.frames[1] is not a length"},
	    {V3(FILE10K(STORED("\"size\":600,\"frame\":4096,\"frames\":[100,200,4294967596]"))),
	     "stored.frames[2] is not a length"},
	    /* A pack's, named as a pack. */
	    {V3P(PACK(",\"stored\":7"), MEMBER), "packs[0]: stored is not an object"},
	    {V3P(PACK("," STORED("\"size\":601,\"frame\":4096,\"frames\":[100,200,300]")), MEMBER),
	     "packs[0]: stored.frames add up to 600, not stored.size 601"},
	    {V3P(PACK("," STORED("\"size\":600,\"frame\":4096")), MEMBER),
	     "packs[0]: stored.frames is missing"},
	    /* A later entry's refusal names it, not the first. */
	    {V3("{\"path\":\"ok\",\"size\":1},{\"path\":\"g\",\"size\":10000," STORED(
	         "\"size\":600,\"frame\":4096,\"frames\":[100,200]") "}"),
	     "entries[1] \"g\": stored.frames has 2 lengths"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_refusal(f, cases[i].json, cases[i].want);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
	const struct CMUnitTest tests[] = {
	    T(test_file_pack_and_chunked),
	    T(test_raw_pack_and_version_2_unchanged),
	    T(test_nested_v2_and_v3_under_either),
	    T(test_refusals),
	};
#undef T
	if (index_init_process() != 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}

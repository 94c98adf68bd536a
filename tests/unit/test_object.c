/*
 * Unit tests for resolving an inode to its object (fetch/engine/object.h), without FUSE,
 * curl or an engine: a namespace built in a private index (a plain file, a chunked one, a
 * directory, and members of one pack), a flight table on a temporary spool directory, and
 * the test playing the transfer thread with flight_open_spool and flight_deliver.
 *
 * What they guard: a pack is one flight whatever members open it (also at once, from many
 * threads); a member's bytes are checked against its own sha256 once per pack flight, and a
 * mismatch fails the pack so that the next open starts a new flight that is checked again.
 * An object stored compressed (doc/manifest.md, version 3) gets its frame table in its
 * flight's spec: a file's and a pack's from the index, a chunked file's from its hash list
 * of 36-byte records, whose lengths must add up or the open fails. The specs are seen by
 * wrapping flight_table_join (-Wl,--wrap, tests/CMakeLists.txt).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fetch/engine/flight.h"
#include "fetch/engine/flight_i.h" /* white-box: flight_deliver, flight_progress */
#include "fetch/engine/object.h"
#include "helpers.h"
#include "index/index.h"
#include "util/hex.h"
#include "util/log.h"

#define PACK_URL "http://store.example/objects/pack"
#define MEMBERS 8
#define MEMBER_SIZE 1000u
#define BAD_MEMBER 5 /* in the "corrupt" namespace, this member's sha256 names other bytes */
/* Compressed objects: 3 frames of 4096 bytes and one of 1, these stored lengths. */
#define Z_SIZE (3 * 4096 + 1)
#define Z_FRAME 4096u
static const uint32_t z_frames[4] = {100, 2000, 300, 9};
#define Z_STORED (100 + 2000 + 300 + 9)
#define ZPACK_URL "http://store.example/objects/zpack"
#define ZBIG_LIST_URL "http://store.example/objects/zbig.list"
#define Z_RECORD (FLIGHT_DIGEST_BYTES + 4)
/* The lengths of zbig<i>'s hash list: z_frames for zbig0, then lengths that do not add up
 * to Z_STORED, or one out of range. */
static const uint32_t zbig_lengths[][4] = {
    {100, 2000, 300, 9},    /* right */
    {100, 2000, 300, 10},   /* one byte too many */
    {100, 2000, 300, 8},    /* one too few */
    {0, 2100, 300, 9},      /* an empty frame */
    {2400, 0, 0, 9},        /* two, adding up all the same */
    {100, 1000, 1209, 100}, /* adds up; the last frame's 1 byte cannot take 100 */
    {4200, 4200, 4200, 9}}; /* beyond the bound of 4096 bytes (and the sum) */
#define ZBIGS (sizeof(zbig_lengths) / sizeof(zbig_lengths[0]))

/* The last spec object.c handed to flight_table_join, copied (its frame table too). */
static struct {
	bool seen;
	struct flight_spec spec;
	uint32_t frames[8];
	char url[128];
} joined;

int __real_flight_table_join(struct flight_table *table, const struct flight_spec *spec,
                             struct flight **out, bool *created);
int __wrap_flight_table_join(struct flight_table *table, const struct flight_spec *spec,
                             struct flight **out, bool *created);
int __wrap_flight_table_join(struct flight_table *table, const struct flight_spec *spec,
                             struct flight **out, bool *created)
{
	uint64_t n = spec->frame_size ? flight_chunk_count(spec->size, spec->frame_size) : 0;

	joined.seen = true;
	joined.spec = *spec;
	memset(joined.frames, 0, sizeof(joined.frames));
	if (spec->frame_stored && n <= 8)
		memcpy(joined.frames, spec->frame_stored, n * sizeof(uint32_t));
	joined.spec.frame_stored = spec->frame_stored ? joined.frames : NULL;
	snprintf(joined.url, sizeof(joined.url), "%s", spec->url);
	joined.spec.url = joined.url;
	joined.spec.chunk_digests = NULL; /* the caller's, gone after the call */
	return __real_flight_table_join(table, spec, out, created);
}

/* How often object.c read a frame table from the index: only a new flight does. */
static unsigned frame_reads;

int __real_index_get_stored_frames(struct index *idx, uint64_t ino, unsigned char **le,
                                   size_t *le_len);
int __wrap_index_get_stored_frames(struct index *idx, uint64_t ino, unsigned char **le,
                                   size_t *le_len);
int __wrap_index_get_stored_frames(struct index *idx, uint64_t ino, unsigned char **le,
                                   size_t *le_len)
{
	frame_reads++;
	return __real_index_get_stored_frames(idx, ino, le, le_len);
}

struct fixture {
	char dir[64];
	int dirfd;
	struct index *idx;
	struct flight_table *table;
	struct fetch_objects *objects;
	uint8_t pack[MEMBERS * MEMBER_SIZE];
	char pack_sha256[UTIL_SHA256_HEX_LEN];
	uint64_t member_ino[MEMBERS];
	uint64_t plain_ino, chunked_ino, dir_ino;
	uint64_t z_ino, zmember_ino, zbig_ino[ZBIGS];
};

static uint64_t ino_of(struct index *idx, const char *path)
{
	struct index_node n;
	uint64_t parent = INDEX_ROOT_INO;
	char buf[256], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *seg = strtok_r(buf, "/", &save); seg; seg = strtok_r(NULL, "/", &save)) {
		assert_int_equal(index_lookup(idx, parent, seg, &n), 0);
		parent = n.ino;
	}
	return parent;
}

/* The hash list of "big": 4 chunks of 4096 bytes (its content is never checked here). */
static void fill_digests(unsigned char digests[4 * FLIGHT_DIGEST_BYTES])
{
	for (size_t i = 0; i < 4 * FLIGHT_DIGEST_BYTES; i++)
		digests[i] = (unsigned char)(i * 13);
}

static void add(struct index_builder *b, const struct index_build_entry *e)
{
	char why[256] = "";
	int rc = index_build_add(b, e, why, sizeof(why));

	if (rc)
		fprintf(stderr, "%.*s: %s\n", (int)e->path_len, e->path, why);
	assert_int_equal(rc, 0);
}

/* zbig's hash list: 36-byte records, the digest then the frame's length (lengths). */
static void zbig_list(unsigned char list[4 * Z_RECORD], const uint32_t lengths[4])
{
	for (unsigned k = 0; k < 4; k++) {
		memset(list + k * Z_RECORD, (int)(k + 1), FLIGHT_DIGEST_BYTES);
		for (unsigned b = 0; b < 4; b++)
			list[k * Z_RECORD + FLIGHT_DIGEST_BYTES + b] =
			    (unsigned char)(lengths[k] >> (8 * b));
	}
}

/* z_frames as the index takes them: little-endian u32s. */
static void frames_le(unsigned char out[16])
{
	for (unsigned k = 0; k < 4; k++)
		for (unsigned b = 0; b < 4; b++)
			out[k * 4 + b] = (unsigned char)(z_frames[k] >> (8 * b));
}

/* The compressed objects: a file, a pack's member and a chunked file. */
static void build_compressed(struct fixture *fx, struct index_builder *b)
{
	char why[256] = "", z_sha[UTIL_SHA256_HEX_LEN], zp_sha[UTIL_SHA256_HEX_LEN],
	     zm_sha[UTIL_SHA256_HEX_LEN];
	unsigned char le[16];

	(void)fx;
	frames_le(le);
	assert_int_equal(util_sha256_hex("z", 1, z_sha), 0);
	assert_int_equal(util_sha256_hex("zpack", 5, zp_sha), 0);
	assert_int_equal(util_sha256_hex("zmember", 7, zm_sha), 0);
	const struct index_stored_view z = {
	    .size = Z_STORED, .frame = Z_FRAME, .le = le, .le_len = sizeof(le)};
	assert_int_equal(index_build_add_pack(b, zp_sha, Z_SIZE, ZPACK_URL, &z, why, sizeof(why)),
	                 0);
	add(b, &(struct index_build_entry){.path = "z",
	                                   .path_len = 1,
	                                   .kind = INDEX_KIND_FILE,
	                                   .size = Z_SIZE,
	                                   .sha256 = z_sha,
	                                   .url = "http://store.example/objects/z",
	                                   .stored = z});
	add(b, &(struct index_build_entry){.path = "zd/m",
	                                   .path_len = 4,
	                                   .kind = INDEX_KIND_FILE,
	                                   .size = 10,
	                                   .sha256 = zm_sha,
	                                   .pack_sha256 = zp_sha,
	                                   .offset = 4096});
	for (unsigned i = 0; i < ZBIGS; i++) {
		unsigned char list[4 * Z_RECORD];
		char path[16], sha[UTIL_SHA256_HEX_LEN], own[UTIL_SHA256_HEX_LEN];
		snprintf(path, sizeof(path), "zbig%u", i);
		zbig_list(list, zbig_lengths[i]);
		assert_int_equal(util_sha256_hex(list, sizeof(list), sha), 0);
		assert_int_equal(util_sha256_hex(path, strlen(path), own), 0);
		add(b, &(struct index_build_entry){.path = path,
		                                   .path_len = strlen(path),
		                                   .kind = INDEX_KIND_FILE,
		                                   .size = Z_SIZE,
		                                   .sha256 = own, /* never checked here */
		                                   .url = "http://store.example/objects/zbig",
		                                   .chunk_size = Z_FRAME,
		                                   .chunk_sha256 = sha,
		                                   .chunk_url = ZBIG_LIST_URL,
		                                   .stored = {.size = Z_STORED, .frame = Z_FRAME}});
	}
}

/* The namespace; with corrupt, member BAD_MEMBER's sha256 is of other bytes. */
static int build(struct fixture *fx, bool corrupt)
{
	static const char other[] = "not the member";
	char sha[MEMBERS][UTIL_SHA256_HEX_LEN], why[256] = "", path[32];
	char plain_sha[UTIL_SHA256_HEX_LEN], big_sha[UTIL_SHA256_HEX_LEN],
	    list_sha[UTIL_SHA256_HEX_LEN];
	unsigned char digests[4 * FLIGHT_DIGEST_BYTES];
	struct index_builder *b;

	for (size_t i = 0; i < sizeof(fx->pack); i++)
		fx->pack[i] = (uint8_t)(i * 7 + i / 251);
	fill_digests(digests);
	if (util_sha256_hex(fx->pack, sizeof(fx->pack), fx->pack_sha256) != 0)
		return -1;
	for (unsigned i = 0; i < MEMBERS; i++)
		if (util_sha256_hex(fx->pack + i * MEMBER_SIZE, MEMBER_SIZE, sha[i]) != 0)
			return -1;
	if ((corrupt && util_sha256_hex(other, sizeof(other), sha[BAD_MEMBER]) != 0) ||
	    util_sha256_hex("plain", 5, plain_sha) != 0 ||
	    util_sha256_hex("big", 3, big_sha) != 0 ||
	    util_sha256_hex(digests, sizeof(digests), list_sha) != 0)
		return -1;
	if (index_open(&fx->idx) != 0 || index_build_begin(fx->idx, &b) != 0)
		return -1;
	assert_int_equal(index_build_add_pack(b, fx->pack_sha256, sizeof(fx->pack), PACK_URL, NULL,
	                                      why, sizeof(why)),
	                 0);
	for (unsigned i = 0; i < MEMBERS; i++) {
		snprintf(path, sizeof(path), "d/m%u", i);
		add(b, &(struct index_build_entry){.path = path,
		                                   .path_len = strlen(path),
		                                   .kind = INDEX_KIND_FILE,
		                                   .size = MEMBER_SIZE,
		                                   .sha256 = sha[i],
		                                   .pack_sha256 = fx->pack_sha256,
		                                   .offset = (uint64_t)i * MEMBER_SIZE});
	}
	add(b, &(struct index_build_entry){.path = "plain",
	                                   .path_len = 5,
	                                   .kind = INDEX_KIND_FILE,
	                                   .size = 10,
	                                   .sha256 = plain_sha,
	                                   .url = "http://store.example/objects/plain",
	                                   .etag = "\"v1\""});
	add(b, &(struct index_build_entry){.path = "big",
	                                   .path_len = 3,
	                                   .kind = INDEX_KIND_FILE,
	                                   .size = 3 * 4096 + 1,
	                                   .sha256 = big_sha,
	                                   .url = "http://store.example/objects/big",
	                                   .chunk_size = 4096,
	                                   .chunk_sha256 = list_sha,
	                                   .chunk_url = "http://store.example/objects/big.list"});
	build_compressed(fx, b);
	if (index_build_commit(b) != 0)
		return -1;
	fx->z_ino = ino_of(fx->idx, "z");
	fx->zmember_ino = ino_of(fx->idx, "zd/m");
	for (unsigned i = 0; i < ZBIGS; i++) {
		snprintf(path, sizeof(path), "zbig%u", i);
		fx->zbig_ino[i] = ino_of(fx->idx, path);
	}
	for (unsigned i = 0; i < MEMBERS; i++) {
		snprintf(path, sizeof(path), "d/m%u", i);
		fx->member_ino[i] = ino_of(fx->idx, path);
	}
	fx->plain_ino = ino_of(fx->idx, "plain");
	fx->chunked_ino = ino_of(fx->idx, "big");
	fx->dir_ino = ino_of(fx->idx, "d");
	return 0;
}

static int setup_with(void **state, bool corrupt)
{
	struct fixture *fx = calloc(1, sizeof(*fx));

	if (!fx)
		return -1;
	fx->dirfd = test_dir_make("object", fx->dir, sizeof(fx->dir));
	if (fx->dirfd < 0 || build(fx, corrupt) != 0 ||
	    flight_table_create(fx->dirfd, &fx->table) != 0 ||
	    fetch_objects_create(
	        &(struct fetch_objects_config){.idx = fx->idx, .flights = fx->table},
	        &fx->objects) != 0)
		return -1;
	*state = fx;
	return 0;
}

static int setup(void **state)
{
	return setup_with(state, false);
}

static int setup_corrupt(void **state)
{
	return setup_with(state, true);
}

static int teardown(void **state)
{
	struct fixture *fx = *state;

	fetch_objects_destroy(fx->objects);
	flight_table_destroy(fx->table);
	index_close(fx->idx);
	test_dir_remove(fx->dir, fx->dirfd);
	free(fx);
	return 0;
}

static struct fetch_object open_ok(struct fixture *fx, uint64_t ino)
{
	struct fetch_object obj;

	assert_int_equal(
	    fetch_object_open(fx->objects, &(struct fetch_object_req){.ino = ino}, &obj), 0);
	assert_non_null(obj.flight);
	return obj;
}

/* Plays the transfer thread: the whole pack into f's spool. */
static void deliver_pack(struct fixture *fx, struct flight *f)
{
	assert_int_equal(flight_open_spool(f), 0);
	assert_int_equal(flight_deliver(f, 0, fx->pack, sizeof(fx->pack)), 0);
	assert_int_equal(flight_ready(f, 0, sizeof(fx->pack)), 1);
}

/* ---- which object ----------------------------------------------------------------- */

static void test_members_share_their_pack_flight(void **state)
{
	struct fixture *fx = *state;
	struct fetch_object a = open_ok(fx, fx->member_ino[0]);
	struct fetch_object b = open_ok(fx, fx->member_ino[3]);

	assert_true(a.created);
	assert_false(b.created);
	assert_ptr_equal(a.flight, b.flight);
	assert_int_equal(flight_size(a.flight), sizeof(fx->pack));
	assert_true(a.is_member && b.is_member);
	assert_int_equal(b.member.base, 3 * MEMBER_SIZE);
	assert_int_equal(b.member.size, MEMBER_SIZE);
	assert_int_equal(b.parent, fx->dir_ino);
	/* The pack's name is the path of the member that started it. */
	assert_non_null(strstr(flight_name(a.flight), "d/m0 (pack "));
	flight_unref(a.flight);
	flight_unref(b.flight);
}

struct opener {
	struct fixture *fx;
	uint64_t ino;
	int rc;
	bool created;
	struct flight *flight;
};

static void *open_member(void *arg)
{
	struct opener *op = arg;
	struct fetch_object obj;

	op->rc =
	    fetch_object_open(op->fx->objects, &(struct fetch_object_req){.ino = op->ino}, &obj);
	op->created = obj.created;
	op->flight = obj.flight;
	return NULL;
}

static void test_pack_single_flight_concurrent(void **state)
{
	struct fixture *fx = *state;
	struct opener ops[MEMBERS * 4];
	unsigned created = 0;

	for (unsigned i = 0; i < MEMBERS * 4; i++)
		ops[i] = (struct opener){.fx = fx, .ino = fx->member_ino[i % MEMBERS]};
	test_threads_run(MEMBERS * 4, open_member, ops, sizeof(ops[0]));
	for (unsigned i = 0; i < MEMBERS * 4; i++) {
		assert_int_equal(ops[i].rc, 0);
		assert_ptr_equal(ops[i].flight, ops[0].flight);
		created += ops[i].created;
	}
	assert_int_equal(created, 1);
	for (unsigned i = 0; i < MEMBERS * 4; i++)
		flight_unref(ops[i].flight);
}

static void test_plain_dir_and_chunked(void **state)
{
	struct fixture *fx = *state;
	struct fetch_object obj = open_ok(fx, fx->plain_ino);

	assert_true(obj.created);
	assert_false(obj.is_member);
	assert_int_equal(flight_size(obj.flight), 10);
	assert_string_equal(flight_name(obj.flight), "plain");
	flight_unref(obj.flight);

	assert_int_equal(
	    fetch_object_open(fx->objects, &(struct fetch_object_req){.ino = fx->dir_ino}, &obj),
	    -EISDIR);
	assert_null(obj.flight);
	assert_int_equal(
	    fetch_object_open(fx->objects, &(struct fetch_object_req){.ino = 999999}, &obj),
	    -ENOENT);
	/* A chunked object's first open reads its hash list first. */
	assert_int_equal(fetch_object_open(
	                     fx->objects, &(struct fetch_object_req){.ino = fx->chunked_ino}, &obj),
	                 FETCH_OBJECT_HASH_LIST);
	assert_null(obj.flight);
	assert_int_equal(
	    fetch_object_open(fx->objects,
	                      &(struct fetch_object_req){.ino = fx->chunked_ino, .hash_list = true},
	                      &obj),
	    0);
	assert_true(obj.created);
	assert_int_equal(flight_size(obj.flight), 4 * FLIGHT_DIGEST_BYTES);
	assert_string_equal(obj.url, "http://store.example/objects/big.list");
	assert_true(flight_is_whole(obj.flight));
	assert_non_null(strstr(flight_name(obj.flight), "big (hash list)"));
	/* Its bytes, as the opener reads them once the list is verified. */
	unsigned char digests[4 * FLIGHT_DIGEST_BYTES], *got = NULL;
	fill_digests(digests);
	assert_int_equal(flight_open_spool(obj.flight), 0);
	assert_int_equal(flight_deliver(obj.flight, 0, digests, sizeof(digests)), 0);
	assert_int_equal(fetch_hash_list_read(obj.flight, &got), 0);
	assert_memory_equal(got, digests, sizeof(digests));
	free(got);
	struct fetch_hash_list hl;
	assert_int_equal(
	    fetch_hash_list_take(fx->objects, fx->chunked_ino, obj.flight, 0, false, obj.url, &hl),
	    0);
	assert_memory_equal(hl.digests, digests, sizeof(digests));
	assert_null(hl.frame_stored); /* stored as it is */
	flight_unref(obj.flight);
	fetch_object_clear(&obj);
	/* With its digests, the object's own flight. */
	assert_int_equal(
	    fetch_object_open(
	        fx->objects, &(struct fetch_object_req){.ino = fx->chunked_ino, .list = &hl}, &obj),
	    0);
	assert_true(obj.created);
	assert_true(flight_has_chunks(obj.flight));
	assert_int_equal(joined.spec.frame_size, 0);
	assert_null(joined.spec.frame_stored);
	flight_unref(obj.flight);
	fetch_hash_list_clear(&hl);
}

/* ---- stored compressed ------------------------------------------------------------ */

static void assert_z_table(void)
{
	assert_true(joined.seen);
	assert_int_equal(joined.spec.frame_size, Z_FRAME);
	assert_int_equal(joined.spec.stored_size, Z_STORED);
	assert_non_null(joined.spec.frame_stored);
	assert_memory_equal(joined.spec.frame_stored, z_frames, sizeof(z_frames));
}

static void test_spec_frame_table_file_and_member(void **state)
{
	struct fixture *fx = *state;
	struct fetch_object obj;

	joined.seen = false;
	obj = open_ok(fx, fx->plain_ino); /* stored as it is */
	assert_true(joined.seen);
	assert_int_equal(joined.spec.frame_size, 0);
	assert_null(joined.spec.frame_stored);
	assert_int_equal(joined.spec.stored_size, 0);
	flight_unref(obj.flight);

	joined.seen = false;
	frame_reads = 0;
	obj = open_ok(fx, fx->z_ino);
	assert_z_table();
	assert_int_equal(joined.spec.size, Z_SIZE); /* what the spool holds: decompressed */
	assert_int_equal(frame_reads, 1);
	/* A join of the running flight, and what getxattr asks, read no table. */
	joined.seen = false;
	struct fetch_object again = open_ok(fx, fx->z_ino);
	assert_false(again.created);
	assert_false(joined.seen);
	struct fetch_object_view view;
	assert_int_equal(fetch_object_view(fx->objects, fx->z_ino, true, &view), 0);
	fetch_object_view_clear(&view);
	assert_int_equal(frame_reads, 1);
	flight_unref(again.flight);
	flight_unref(obj.flight);

	/* A member's flight is its pack's, stored as the pack is. */
	joined.seen = false;
	obj = open_ok(fx, fx->zmember_ino);
	assert_true(obj.is_member);
	assert_z_table();
	assert_string_equal(joined.spec.url, ZPACK_URL);
	assert_int_equal(joined.spec.size, Z_SIZE);
	flight_unref(obj.flight);
}

/* Opens zbig<i>'s hash list's flight and delivers its list into it. */
static struct fetch_object open_zbig_list(struct fixture *fx, unsigned i)
{
	unsigned char list[4 * Z_RECORD];
	struct fetch_object obj;

	zbig_list(list, zbig_lengths[i]);
	assert_int_equal(
	    fetch_object_open(fx->objects,
	                      &(struct fetch_object_req){.ino = fx->zbig_ino[i], .hash_list = true},
	                      &obj),
	    0);
	/* 36 bytes a chunk: what the hash list's flight expects. */
	assert_int_equal(flight_size(obj.flight), 4 * Z_RECORD);
	assert_string_equal(obj.url, ZBIG_LIST_URL);
	assert_int_equal(joined.spec.frame_size, 0); /* the hash list is stored as it is */
	assert_int_equal(flight_open_spool(obj.flight), 0);
	assert_int_equal(flight_deliver(obj.flight, 0, list, sizeof(list)), 0);
	assert_int_equal(flight_ready(obj.flight, 0, sizeof(list)), 1); /* verified */
	return obj;
}

static void test_spec_frame_table_chunked(void **state)
{
	struct fixture *fx = *state;
	unsigned char list[4 * Z_RECORD];
	struct fetch_hash_list hl;
	struct fetch_object obj;

	assert_int_equal(fetch_object_open(
	                     fx->objects, &(struct fetch_object_req){.ino = fx->zbig_ino[0]}, &obj),
	                 FETCH_OBJECT_HASH_LIST);
	zbig_list(list, z_frames);
	obj = open_zbig_list(fx, 0);
	assert_int_equal(
	    fetch_hash_list_take(fx->objects, fx->zbig_ino[0], obj.flight, 0, false, obj.url, &hl),
	    0);
	for (unsigned k = 0; k < 4; k++)
		assert_memory_equal(hl.digests + k * FLIGHT_DIGEST_BYTES, list + k * Z_RECORD,
		                    FLIGHT_DIGEST_BYTES);
	assert_memory_equal(hl.frame_stored, z_frames, sizeof(z_frames));
	flight_unref(obj.flight);
	fetch_object_clear(&obj);

	joined.seen = false;
	assert_int_equal(
	    fetch_object_open(
	        fx->objects, &(struct fetch_object_req){.ino = fx->zbig_ino[0], .list = &hl}, &obj),
	    0);
	assert_z_table();
	assert_int_equal(joined.spec.chunk_size, Z_FRAME);
	flight_unref(obj.flight);
	fetch_hash_list_clear(&hl);
}

/* Prefetch's open of a compressed chunked file: its hash list first (pending while it
 * downloads), then the object with the table from it; one that does not add up, -EIO. */
static void test_open_ahead_takes_the_table(void **state)
{
	struct fixture *fx = *state;
	struct fetch_object obj, list;

	assert_int_equal(fetch_object_open_ahead(fx->objects, fx->zbig_ino[0], &obj),
	                 FETCH_OBJECT_PENDING);
	assert_int_equal(flight_size(obj.flight), 4 * Z_RECORD); /* the hash list's flight */
	flight_unref(obj.flight);
	list = open_zbig_list(fx, 0); /* joins it and delivers the list */
	joined.seen = false;
	assert_int_equal(fetch_object_open_ahead(fx->objects, fx->zbig_ino[0], &obj), 0);
	assert_z_table();
	assert_true(joined.spec.speculative);
	flight_unref(obj.flight);
	flight_unref(list.flight);
	fetch_object_clear(&list);

	assert_int_equal(fetch_object_open_ahead(fx->objects, fx->zbig_ino[1], &obj),
	                 FETCH_OBJECT_PENDING);
	flight_unref(obj.flight);
	list = open_zbig_list(fx, 1);
	joined.seen = false;
	assert_int_equal(fetch_object_open_ahead(fx->objects, fx->zbig_ino[1], &obj), -EIO);
	assert_false(joined.seen);
	flight_unref(list.flight);
	fetch_object_clear(&list);
}

/* Lengths that do not add up to stored.size, or one out of range: the open fails with EIO
 * and nothing of the object is joined. */
static void test_hash_list_lengths_wrong(void **state)
{
	struct fixture *fx = *state;

	for (unsigned i = 1; i < ZBIGS; i++) {
		struct fetch_hash_list hl = {0};
		struct fetch_object obj = open_zbig_list(fx, i);
		joined.seen = false;
		assert_int_equal(fetch_hash_list_take(fx->objects, fx->zbig_ino[i], obj.flight, 0,
		                                      false, obj.url, &hl),
		                 -EIO);
		assert_null(hl.digests);
		assert_null(hl.frame_stored);
		assert_false(joined.seen); /* nothing of the object was joined */
		flight_unref(obj.flight);
		fetch_object_clear(&obj);
	}
}

/* The log file's text so far (the suite's lines go there from this test on). */
static void log_text(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(buf, 1, cap - 1, f) : 0;

	buf[n] = '\0';
	if (f)
		fclose(f);
}

/* Every failure of a hash list that fetch_hash_list_take decides is logged there (fs/ only
 * replies): a list that failed, and a spool gone after its one retry; a spool gone the
 * first time is the caller's to retry, and says nothing. */
static void test_hash_list_failures_logged(void **state)
{
	struct fixture *fx = *state;
	struct fetch_hash_list hl = {0};
	struct fetch_object obj;
	char path[128], why[256], text[4096];

	snprintf(path, sizeof(path), "%s/log", fx->dir);
	assert_int_equal(util_log_use_file(path, why, sizeof(why)), 0);
	assert_int_equal(
	    fetch_object_open(fx->objects,
	                      &(struct fetch_object_req){.ino = fx->chunked_ino, .hash_list = true},
	                      &obj),
	    0);
	assert_int_equal(fetch_hash_list_take(fx->objects, fx->chunked_ino, obj.flight, -ENOENT,
	                                      false, obj.url, &hl),
	                 -ENOENT);
	log_text(path, text, sizeof(text));
	assert_string_equal(text, "");
	assert_int_equal(fetch_hash_list_take(fx->objects, fx->chunked_ino, obj.flight, -EIO, false,
	                                      obj.url, &hl),
	                 -EIO);
	assert_null(hl.digests);
	log_text(path, text, sizeof(text));
	assert_non_null(strstr(text,
	                       "big: its hash list from http://store.example/objects/big.list "
	                       "could not be fetched or does not match its sha256"));
	assert_int_equal(fetch_hash_list_take(fx->objects, fx->chunked_ino, obj.flight, -ENOENT,
	                                      true, obj.url, &hl),
	                 -ENOENT);
	log_text(path, text, sizeof(text));
	assert_non_null(strstr(strstr(text, "\n") + 1, "big: its hash list from"));
	flight_unref(obj.flight);
	fetch_object_clear(&obj);
}

/* ---- members verified ------------------------------------------------------------- */

static void test_member_verified_once_per_flight(void **state)
{
	struct fixture *fx = *state;
	struct fetch_object obj = open_ok(fx, fx->member_ino[2]);
	static const uint8_t junk[MEMBER_SIZE];

	deliver_pack(fx, obj.flight);
	assert_false(fetch_member_verified(fx->objects, obj.flight, &obj.member));
	assert_int_equal(fetch_member_verify(fx->objects, obj.flight, &obj.member), 0);
	assert_true(fetch_member_verified(fx->objects, obj.flight, &obj.member));
	/* Another member of the same pack is checked on its own. */
	struct fetch_object other = open_ok(fx, fx->member_ino[3]);
	assert_false(fetch_member_verified(fx->objects, other.flight, &other.member));
	/* Once verified, the member's bytes are not read back again: what the spool holds now
	 * would not match (nothing but this test writes there). */
	assert_int_equal(
	    pwrite(flight_spool_fd(obj.flight), junk, sizeof(junk), (off_t)obj.member.base),
	    (ssize_t)sizeof(junk));
	assert_int_equal(fetch_member_verify(fx->objects, obj.flight, &obj.member), 0);
	/* ... while an unverified one is: the pack fails for it. */
	assert_int_equal(
	    pwrite(flight_spool_fd(other.flight), junk, sizeof(junk), (off_t)other.member.base),
	    (ssize_t)sizeof(junk));
	assert_int_equal(fetch_member_verify(fx->objects, other.flight, &other.member), -EBADMSG);
	flight_unref(obj.flight);
	flight_unref(other.flight);
}

/* Two entries may name the same bytes of a pack with another size or sha256 (a hand-made
 * manifest): the first one's match must not serve the second unchecked. */
static void test_member_match_is_its_own(void **state)
{
	struct fixture *fx = *state;
	struct fetch_object obj = open_ok(fx, fx->member_ino[2]);
	struct fetch_member longer = obj.member, renamed = obj.member;

	deliver_pack(fx, obj.flight);
	assert_int_equal(fetch_member_verify(fx->objects, obj.flight, &obj.member), 0);
	longer.size += 1;
	renamed.sha256[0] = renamed.sha256[0] == '0' ? '1' : '0';
	assert_false(fetch_member_verified(fx->objects, obj.flight, &longer));
	assert_false(fetch_member_verified(fx->objects, obj.flight, &renamed));
	assert_int_equal(fetch_member_verify(fx->objects, obj.flight, &renamed), -EBADMSG);
	flight_unref(obj.flight);
}

static void test_member_mismatch_refetches(void **state)
{
	struct fixture *fx = *state;
	struct fetch_object bad = open_ok(fx, fx->member_ino[BAD_MEMBER]);
	struct fetch_object good = open_ok(fx, fx->member_ino[0]);
	uint64_t first_id = flight_id(bad.flight);

	deliver_pack(fx, bad.flight);
	assert_int_equal(fetch_member_verify(fx->objects, good.flight, &good.member), 0);
	assert_int_equal(fetch_member_verify(fx->objects, bad.flight, &bad.member), -EBADMSG);
	assert_false(fetch_member_verified(fx->objects, bad.flight, &bad.member));
	/* Every reader of the pack gets EIO now, also the good member's. */
	assert_int_equal(flight_ready(bad.flight, bad.member.base, bad.member.size), -EIO);
	assert_int_equal(flight_ready(good.flight, good.member.base, good.member.size), -EIO);
	/* The next open fetches the pack again, with a flight whose members are checked
	 * afresh: the good member's match was the failed flight's. */
	struct fetch_object again = open_ok(fx, fx->member_ino[0]);
	assert_true(again.created);
	assert_int_not_equal(flight_id(again.flight), first_id);
	assert_false(fetch_member_verified(fx->objects, again.flight, &again.member));
	deliver_pack(fx, again.flight);
	assert_int_equal(fetch_member_verify(fx->objects, again.flight, &again.member), 0);
	flight_unref(bad.flight);
	flight_unref(good.flight);
	flight_unref(again.flight);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_members_share_their_pack_flight, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pack_single_flight_concurrent, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_plain_dir_and_chunked, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_spec_frame_table_file_and_member, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_spec_frame_table_chunked, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_hash_list_lengths_wrong, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_open_ahead_takes_the_table, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_member_verified_once_per_flight, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_member_match_is_its_own, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_member_mismatch_refetches, setup_corrupt,
	                                    teardown),
	    /* Last: its lines go to a file from then on. */
	    cmocka_unit_test_setup_teardown(test_hash_list_failures_logged, setup, teardown),
	};

	if (index_init_process() != 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * The keyed hash of the hash tables (util/hash.c) and the two manifest tables that use it
 * (index/path_table.c, index/digest_sizes.c): the hash is SipHash-2-4 as OpenSSL computes
 * it, each table draws its own key, and the tables stay right when every key collides.
 * How fast a crafted manifest mounts is a benchmark (tests/bench/hash_flood.sh), not this.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "index/digest_sizes.h"
#include "util/hash.h"
#include "util/hex.h"
#include "index/path_table.h"

/* OpenSSL's SipHash of data under key, 8 bytes out, read little-endian. */
static uint64_t openssl_siphash(const struct util_hash_key *key, const void *data, size_t len)
{
	unsigned char k[16], out[8];
	size_t out_size = 8, out_len = 0;
	OSSL_PARAM params[] = {OSSL_PARAM_construct_size_t(OSSL_MAC_PARAM_SIZE, &out_size),
	                       OSSL_PARAM_END};
	EVP_MAC *mac = EVP_MAC_fetch(NULL, "SIPHASH", NULL);
	EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
	uint64_t v = 0;

	assert_non_null(ctx);
	for (int i = 0; i < 8; i++) {
		k[i] = (unsigned char)(key->k0 >> (8 * i));
		k[8 + i] = (unsigned char)(key->k1 >> (8 * i));
	}
	assert_int_equal(EVP_MAC_init(ctx, k, sizeof(k), params), 1);
	assert_int_equal(EVP_MAC_update(ctx, data, len), 1);
	assert_int_equal(EVP_MAC_final(ctx, out, &out_len, sizeof(out)), 1);
	assert_int_equal(out_len, 8);
	for (int i = 7; i >= 0; i--)
		v = v << 8 | out[i];
	EVP_MAC_CTX_free(ctx);
	EVP_MAC_free(mac);
	return v;
}

static void test_the_hash_is_siphash(void **state)
{
	unsigned char data[80];

	(void)state;
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (unsigned char)(i * 37 + 11);
	for (int round = 0; round < 4; round++) {
		struct util_hash_key key;
		assert_int_equal(util_hash_key_new(&key), 0);
		/* Every tail length, and more than one 8-byte block. */
		for (size_t len = 0; len <= sizeof(data); len++)
			assert_true(util_hash_bytes(&key, data, len) ==
			            openssl_siphash(&key, data, len));
	}
}

static void test_two_tables_get_two_keys(void **state)
{
	struct path_table a, b;
	struct digest_sizes c, d;

	(void)state;
	assert_int_equal(path_table_init(&a), 0);
	assert_int_equal(path_table_init(&b), 0);
	assert_int_equal(digest_sizes_init(&c), 0);
	assert_int_equal(digest_sizes_init(&d), 0);
	/* 128 random bits each: equal keys would mean no randomness at all. */
	assert_memory_not_equal(&a.key, &b.key, sizeof(a.key));
	assert_memory_not_equal(&c.key, &d.key, sizeof(c.key));
	assert_memory_not_equal(&a.key, &c.key, sizeof(a.key));
	assert_true(path_table_hash(&a, "dir/file", 8) != path_table_hash(&b, "dir/file", 8));
	path_table_free(&a);
	path_table_free(&b);
	digest_sizes_free(&c);
	digest_sizes_free(&d);
}

#define N_PATHS 2000

/* Each key in the same probe chain: the table must still find each and tell them apart. */
static void test_the_path_table_works_when_every_key_collides(void **state)
{
	struct path_table t;
	char path[32];

	(void)state;
	assert_int_equal(path_table_init(&t), 0);
	for (int i = 0; i < N_PATHS; i++) {
		int len = snprintf(path, sizeof(path), "d/f%d", i);
		/* One hash for all: the worst any key could do. */
		assert_int_equal(path_table_add(&t, path, (size_t)len, 42, 100 + i, i % 2, 0), i);
	}
	for (int i = 0; i < N_PATHS; i++) {
		int len = snprintf(path, sizeof(path), "d/f%d", i);
		long found = path_table_find(&t, path, (size_t)len, 42);
		assert_int_equal(found, i);
		assert_int_equal(t.v[found].ino, 100 + i);
		assert_int_equal(t.v[found].is_dir, i % 2);
	}
	assert_int_equal(path_table_find(&t, "d/f", 3, 42), -1);
	assert_int_equal(path_table_find(&t, "d/f1", 4, 43), -1);
	path_table_free(&t);
}

/* FNV-1a, the old unkeyed hash: paths sharing its low 12 bits were one chain. */
static uint64_t fnv1a(const char *p, size_t len)
{
	uint64_t h = 1469598103934665603ULL;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
	return h;
}

static void test_old_collisions_spread_over_the_table(void **state)
{
	struct path_table t;
	char path[32];
	int n = 0, len;
	size_t used_slots = 0;

	(void)state;
	assert_int_equal(path_table_init(&t), 0);
	for (unsigned i = 0; n < 500; i++) {
		len = snprintf(path, sizeof(path), "p%u", i);
		if ((fnv1a(path, (size_t)len) & 0xfff) != 0x234)
			continue;
		assert_true(path_table_add(&t, path, (size_t)len,
		                           path_table_hash(&t, path, (size_t)len), i, false,
		                           0) >= 0);
		n++;
	}
	for (size_t s = 0; s < t.nslots; s++)
		used_slots += t.slots[s] != 0;
	assert_int_equal(used_slots, 500);
	/* 500 keys in 2048 slots under a random key: a run of 50 would be a one-in-10^30. */
	size_t run = 0, longest = 0;
	for (size_t s = 0; s < t.nslots; s++) {
		run = t.slots[s] ? run + 1 : 0;
		longest = run > longest ? run : longest;
	}
	assert_true(longest < 50);
	for (unsigned i = 0, k = 0; k < 500; i++) {
		len = snprintf(path, sizeof(path), "p%u", i);
		if ((fnv1a(path, (size_t)len) & 0xfff) != 0x234)
			continue;
		assert_true(path_table_find(&t, path, (size_t)len,
		                            path_table_hash(&t, path, (size_t)len)) >= 0);
		k++;
	}
	path_table_free(&t);
}

/* Made-up digests that share their low 64 bits' low bits: each keeps its own size. */
static void test_digest_sizes_with_made_up_digests(void **state)
{
	struct digest_sizes t;
	char hex[65];

	(void)state;
	assert_int_equal(digest_sizes_init(&t), 0);
	for (int i = 0; i < 3000; i++) {
		snprintf(hex, sizeof(hex), "%08x00000000%048d", i + 1, 0);
		assert_int_equal(digest_sizes_note(&t, hex, i), 0);
	}
	for (int i = 0; i < 3000; i++) {
		snprintf(hex, sizeof(hex), "%08x00000000%048d", i + 1, 0);
		assert_int_equal(digest_sizes_note(&t, hex, i), 0);
		/* Another size for the same 64 bits is for the caller to confirm. */
		if (i % 100 == 0)
			assert_int_equal(digest_sizes_note(&t, hex, i + 1), 1);
	}
	assert_int_equal(t.n, 3000);
	digest_sizes_free(&t);
}

/* The one hex writer every digest goes through: lower case, NUL-ended, FIPS 180-2's "abc". */
static void test_sha256_hex_is_lower_case_and_ended(void **state)
{
	char hex[UTIL_SHA256_HEX_LEN];
	const unsigned char bytes[] = {0x00, 0x0f, 0xa5, 0xff};
	char short_hex[2 * sizeof(bytes) + 1];

	(void)state;
	memset(hex, 'x', sizeof(hex));
	assert_int_equal(util_sha256_hex("abc", 3, hex), 0);
	assert_string_equal(hex,
	                    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	util_hex_encode(bytes, sizeof(bytes), short_hex);
	assert_string_equal(short_hex, "000fa5ff");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_the_hash_is_siphash),
	    cmocka_unit_test(test_sha256_hex_is_lower_case_and_ended),
	    cmocka_unit_test(test_two_tables_get_two_keys),
	    cmocka_unit_test(test_the_path_table_works_when_every_key_collides),
	    cmocka_unit_test(test_old_collisions_spread_over_the_table),
	    cmocka_unit_test(test_digest_sizes_with_made_up_digests),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

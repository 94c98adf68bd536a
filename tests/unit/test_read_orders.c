/*
 * Unit tests for read orders: a manifest's "read_orders" as the load takes it out
 * (fetch/source/read_orders.c through manifest_load.c: the chosen order, every bound and
 * refusal, the tree loaded either way), and publish's merge of several runs' records into
 * one order (publish/read_order.c: by rank, each path once, paths not in the tree dropped).
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
#include <unistd.h>

#include "fetch/source/manifest_load.h"
#include "fetch/source/read_orders.h"
#include "index/index.h"
#include "publish/publish_i.h"

#define BASE "http://store.example/manifest.json"
#define ENTRIES                                                                                    \
	"\"entries\":[{\"path\":\"a/x.py\",\"size\":1},{\"path\":\"a/y.py\",\"size\":2},"          \
	"{\"path\":\"b.bin\",\"size\":3}]"

/* Loads {"version":2, ENTRIES, tail} into a fresh index asking for order `want`: the
 * load's result; the tree must be in either way. */
static int load(const char *tail, const char *want, struct manifest_load_options *opts)
{
	char *json = NULL, err[256];
	struct index *idx = NULL;
	uint64_t files = 0, dirs = 0, bytes = 0;
	int rc;

	assert_true(asprintf(&json, "{\"version\":2,%s%s}", ENTRIES, tail) > 0);
	assert_int_equal(index_open(&idx), 0);
	memset(opts, 0, sizeof(*opts));
	opts->read_order_name = want;
	rc = source_manifest_load(idx, json, strlen(json), BASE, opts, err, sizeof(err));
	if (rc != 0)
		fail_msg("load: %d %s", rc, err);
	assert_int_equal(index_totals(idx, &files, &dirs, &bytes), 0);
	assert_int_equal(files, 3);
	index_close(idx);
	free(json);
	return rc;
}

static void test_the_named_order_is_taken(void **state)
{
	struct manifest_load_options o;
	(void)state;

	load(",\"read_orders\":{\"default\":[\"b.bin\",\"a/x.py\"],\"job-2\":[\"a/y.py\"]}",
	     "default", &o);
	assert_string_equal(o.read_order, "b.bin\na/x.py\n");
	assert_int_equal(o.read_order_paths, 2);
	assert_string_equal(o.read_order_why, "");
	free(o.read_order);
	load(",\"read_orders\":{\"default\":[\"b.bin\"],\"job-2\":[\"a/y.py\"]}", "job-2", &o);
	assert_string_equal(o.read_order, "a/y.py\n");
	free(o.read_order);
	/* Paths are not resolved here: one not in the tree is the list machinery's to skip. */
	load(",\"read_orders\":{\"default\":[\"no/such\"]}", "default", &o);
	assert_string_equal(o.read_order, "no/such\n");
	free(o.read_order);
}

static void test_no_order_of_that_name_or_none_asked(void **state)
{
	struct manifest_load_options o;
	(void)state;

	load(",\"read_orders\":{\"job\":[\"b.bin\"]}", "default", &o);
	assert_null(o.read_order);
	assert_string_equal(o.read_order_why, "the manifest has no read order named \"default\"");
	load("", "default", &o);
	assert_null(o.read_order);
	assert_string_equal(o.read_order_why, "the manifest has no read orders");
	load(",\"read_orders\":{\"default\":[\"b.bin\"]}", NULL, &o);
	assert_null(o.read_order);
	assert_string_equal(o.read_order_why, "");
}

/* A bad field: nothing taken, the reason given, the tree loaded all the same. */
static void expect_bad(const char *orders, const char *want)
{
	struct manifest_load_options o;
	char *tail = NULL;

	assert_true(asprintf(&tail, ",\"read_orders\":%s", orders) > 0);
	load(tail, "default", &o);
	free(tail);
	if (o.read_order)
		fail_msg("took an order from %.80s", orders);
	if (!strstr(o.read_order_why, want))
		fail_msg("\"%s\" lacks \"%s\"", o.read_order_why, want);
}

static void test_a_bad_field_is_refused_with_its_reason(void **state)
{
	char *many = NULL, *p;
	size_t cap = 65 * 16 + 8;
	(void)state;

	expect_bad("[\"b.bin\"]", "read_orders: not an object");
	expect_bad("\"b.bin\"", "read_orders: not an object");
	expect_bad("{\"bad name\":[]}", "read_orders[\"bad name\"]: not an order's name");
	expect_bad("{\"\":[]}", "not an order's name");
	expect_bad("{\"default\":\"b.bin\"}", "read_orders[\"default\"]: not an array of paths");
	expect_bad("{\"default\":[\"b.bin\",1]}", "read_orders[\"default\"][1]: not a string");
	expect_bad("{\"default\":[null]}", "read_orders[\"default\"][0]: not a string");
	expect_bad("{\"default\":[[\"b.bin\"]]}", "not a string");
	expect_bad("{\"default\":[\"a/../b.bin\"]}", "read_orders[\"default\"][0]: path has a");
	expect_bad("{\"default\":[\"/b.bin\"]}", "read_orders[\"default\"][0]:");
	expect_bad("{\"default\":[\"a\\nb\"]}", "path holds a line break");
	expect_bad("{\"default\":[\"a\\u0000b\"]}", "a path holds a NUL byte");
	expect_bad("{\"default\":[\"b.bin\"],\"default\":[\"a/x.py\"]}", "named twice");
	/* Another order's bad path spoils the field too: the rule is the field's. */
	expect_bad("{\"default\":[\"b.bin\"],\"j\":[\"../x\"]}", "read_orders[\"j\"][0]");
	many = malloc(cap);
	assert_non_null(many);
	p = many + sprintf(many, "{");
	for (int i = 0; i < READ_ORDERS_MAX + 1; i++)
		p += sprintf(p, "%s\"o%d\":[]", i ? "," : "", i);
	sprintf(p, "}");
	expect_bad(many, "read_orders: more than 64 orders");
	free(many);
}

static void test_an_order_over_its_bound_is_refused(void **state)
{
	size_t n = READ_ORDER_PATHS_MAX + 1, cap = n * 6 + 32;
	char *orders = malloc(cap), *p;
	(void)state;

	assert_non_null(orders);
	p = orders + sprintf(orders, "{\"default\":[");
	for (size_t i = 0; i < n; i++) {
		memcpy(p, i ? ",\"b\"" : "\"b\"", i ? 4 : 3);
		p += i ? 4 : 3;
	}
	sprintf(p, "]}");
	expect_bad(orders, "read_orders[\"default\"]: more than 1000000 paths");
	free(orders);
}

static void test_names(void **state)
{
	(void)state;
	assert_true(source_read_order_name_ok("default", 7));
	assert_true(source_read_order_name_ok("a.B_c-9", 7));
	assert_false(source_read_order_name_ok("", 0));
	assert_false(source_read_order_name_ok("a b", 3));
	assert_false(source_read_order_name_ok("a/b", 3));
	assert_true(source_read_order_name_ok(
	    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", 64));
	assert_false(source_read_order_name_ok(
	    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", 65));
}

/* A tree of the given file paths (sorted), as pub_walk leaves it. */
static void make_tree(struct pub_tree *t, const char *const *paths, size_t n)
{
	memset(t, 0, sizeof(*t));
	t->entries = calloc(n, sizeof(*t->entries));
	assert_non_null(t->entries);
	for (size_t i = 0; i < n; i++) {
		t->entries[i] = calloc(1, sizeof(**t->entries));
		assert_non_null(t->entries[i]);
		t->entries[i]->path = strdup(paths[i]);
		t->entries[i]->kind = strchr(paths[i], '.') ? PUB_FILE : PUB_DIR;
	}
	t->n_entries = n;
}

static char *record(const char *text)
{
	char *path = strdup("/tmp/spoolfs-read-order-XXXXXX");
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

static void test_publish_merges_runs_by_rank(void **state)
{
	static const char *const paths[] = {"a", "a/1.c", "a/2.c", "a/3.c", "a/4.c", "b.h"};
	char *r1 = record("a/3.c\na/1.c\n/a/2.c\nnot/here.c\na\n");
	char *r2 = record("a/1.c\na/4.c\na/3.c\n");
	char *r3 = record("./b.h\n");
	struct publish_read_order given[] = {{"default", r1}, {"job", r3}, {"default", r2}};
	struct publish_options o = {.read_orders = given, .n_read_orders = 3};
	struct pub_tree t;
	(void)state;

	make_tree(&t, paths, 6);
	assert_int_equal(pub_read_orders(&o, &t), 0);
	assert_int_equal(t.n_orders, 2);
	assert_string_equal(t.orders[0].name, "default");
	/* r1: 3 1 2 (not/here and the directory dropped); r2: 1 4 3. By rank: 3 1 | (1) 4 | 2. */
	assert_int_equal(t.orders[0].n, 4);
	assert_string_equal(t.orders[0].paths[0]->path, "a/3.c");
	assert_string_equal(t.orders[0].paths[1]->path, "a/1.c");
	assert_string_equal(t.orders[0].paths[2]->path, "a/4.c");
	assert_string_equal(t.orders[0].paths[3]->path, "a/2.c");
	assert_string_equal(t.orders[1].name, "job");
	assert_int_equal(t.orders[1].n, 1);
	assert_string_equal(t.orders[1].paths[0]->path, "b.h");
	for (size_t i = 0; i < t.n_entries; i++)
		assert_false(t.entries[i]->in_order);
	pub_tree_free(&t);
	/* A record that cannot be read fails the publish. */
	given[0].file = "/nonexistent/record";
	make_tree(&t, paths, 6);
	assert_int_equal(pub_read_orders(&o, &t), -ENOENT);
	pub_tree_free(&t);
	unlink(r1);
	unlink(r2);
	unlink(r3);
	free(r1);
	free(r2);
	free(r3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_the_named_order_is_taken),
	    cmocka_unit_test(test_no_order_of_that_name_or_none_asked),
	    cmocka_unit_test(test_a_bad_field_is_refused_with_its_reason),
	    cmocka_unit_test(test_an_order_over_its_bound_is_refused),
	    cmocka_unit_test(test_names),
	    cmocka_unit_test(test_publish_merges_runs_by_rank),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

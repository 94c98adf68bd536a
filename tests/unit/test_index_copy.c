/*
 * Unit tests for kept namespaces' copies (index/copy.c): a loaded namespace saved and read
 * back into a fresh one is the same (rows, default mtime, totals) without the session's meta;
 * the session's manifest URL leaves no byte in the file; a namespace whose URLs hold a
 * secret is refused; a copy that is empty, garbage, truncated or missing is refused with a
 * reason and leaves the fresh namespace empty.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fetch/source/kept_key.h"
#include "fetch/source/manifest_load.h"
#include "util/build_id.h"
#include "index/copy.h"
#include "index/index.h"
#include "tests/unit/helpers.h"

#define BASE "https://example.com/m/manifest.json?token=SECRETTOKEN"
#define MANIFEST                                                                                   \
	"{\"version\":1,\"files\":["                                                               \
	"{\"path\":\"top.txt\",\"size\":5,\"mtime\":100},"                                         \
	"{\"path\":\"dir/sub/a.bin\",\"size\":10,\"executable\":true},"                            \
	"{\"path\":\"dir/rel.bin\",\"size\":7,\"url\":\"objects/rel.bin\"}]}"

struct fixture {
	char dir[128];
	char ns[192];   /* the session's namespace */
	char copy[192]; /* the copy */
	char ns2[192];  /* the next session's */
	int fd;
};

static int setup(void **state)
{
	static struct fixture f;

	f.fd = test_dir_make("copy", f.dir, sizeof(f.dir));
	if (f.fd < 0)
		return -1;
	snprintf(f.ns, sizeof(f.ns), "%s/namespace.db", f.dir);
	snprintf(f.copy, sizeof(f.copy), "%s/copy.db", f.dir);
	snprintf(f.ns2, sizeof(f.ns2), "%s/namespace2.db", f.dir);
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	return test_dir_remove(f->dir, f->fd);
}

/* A namespace file loaded from json, with the session's meta as load_manifest puts it. */
static struct index *loaded(const struct fixture *f, const char *json)
{
	struct index *idx = NULL;
	char err[256] = "";

	assert_int_equal(index_open_file(f->ns, true, &idx), 0);
	assert_int_equal(index_set_default_mtime(idx, 12345), 0);
	assert_int_equal(
	    source_manifest_load(idx, json, strlen(json), BASE, NULL, err, sizeof(err)), 0);
	assert_int_equal(index_meta_put(idx, "read_order", "top.txt\n"), 0);
	assert_int_equal(index_meta_put(idx, "manifest_url", BASE), 0);
	assert_int_equal(index_meta_put(idx, "release", "r1.json sha256 00 tag latest"), 0);
	return idx;
}

static bool file_holds(const char *path, const char *needle)
{
	FILE *fp = fopen(path, "rb");
	static char buf[1 << 20];
	size_t n;

	assert_non_null(fp);
	n = fread(buf, 1, sizeof(buf), fp);
	fclose(fp);
	return memmem(buf, n, needle, strlen(needle)) != NULL;
}

static void test_saved_and_restored(void **state)
{
	struct fixture *f = *state;
	struct index *idx = loaded(f, MANIFEST), *back = NULL;
	uint64_t files, dirs, bytes, files2, dirs2, bytes2;
	struct index_node a, b, root, root2;
	char why[128], *value = NULL;
	struct stat st;

	assert_int_equal(index_copy_save(idx, f->copy), 0);
	assert_int_equal(stat(f->copy, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_false(file_holds(f->copy, "SECRETTOKEN"));
	assert_false(file_holds(f->copy, "tag latest"));

	assert_int_equal(index_open_file(f->ns2, true, &back), 0);
	assert_int_equal(index_copy_restore(back, f->copy, why, sizeof(why)), 0);
	assert_int_equal(index_lookup(idx, INDEX_ROOT_INO, "dir", &a), 0);
	assert_int_equal(index_lookup(back, INDEX_ROOT_INO, "dir", &b), 0);
	assert_memory_equal(&a, &b, sizeof(a));
	assert_int_equal(index_get(idx, INDEX_ROOT_INO, &root), 0);
	assert_int_equal(index_get(back, INDEX_ROOT_INO, &root2), 0);
	assert_int_equal(root2.mtime, root.mtime);
	assert_int_equal(index_totals(idx, &files, &dirs, &bytes), 0);
	assert_int_equal(index_totals(back, &files2, &dirs2, &bytes2), 0);
	assert_int_equal(files2, files);
	assert_int_equal(dirs2, dirs);
	assert_int_equal(bytes2, bytes);
	assert_int_equal(index_meta_get(back, "read_order", &value), 0);
	assert_string_equal(value, "top.txt\n");
	free(value);
	assert_int_equal(index_meta_get(back, "manifest_url", &value), -ENOENT);
	assert_int_equal(index_meta_get(back, "release", &value), -ENOENT);
	assert_int_equal(index_meta_get(back, "default_mtime", &value), 0);
	assert_string_equal(value, "12345");
	free(value);
	index_close(back);
	/* Reopened by a later serving process, as any namespace file. */
	assert_int_equal(index_open_file(f->ns2, false, &back), 0);
	assert_int_equal(index_lookup(back, INDEX_ROOT_INO, "top.txt", &b), 0);
	assert_int_equal(b.size, 5);
	index_close(back);
	index_close(idx);
}

static void test_secret_urls_are_not_copied(void **state)
{
	struct fixture *f = *state;
	struct index *idx = loaded(f, "{\"version\":1,\"files\":[{\"path\":\"a\",\"size\":1,"
	                              "\"url\":\"https://cdn.example/a?X-Amz-Signature=abc\"}]}");

	assert_int_equal(index_copy_save(idx, f->copy), -EACCES);
	index_close(idx);
}

/* A fresh namespace refuses the copy at f->copy with rc, and stays empty. */
static void refused(const struct fixture *f, int want, const char *why_has)
{
	struct index *back = NULL;
	struct index_node n;
	char why[128];

	assert_int_equal(index_open_file(f->ns2, true, &back), 0);
	assert_int_equal(index_copy_restore(back, f->copy, why, sizeof(why)), want);
	if (!strstr(why, why_has))
		fail_msg("why \"%s\" lacks \"%s\"", why, why_has);
	assert_int_equal(index_lookup(back, INDEX_ROOT_INO, "top.txt", &n), -ENOENT);
	index_close(back);
}

static void write_file(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	close(fd);
}

static void test_damaged_copies_are_refused(void **state)
{
	struct fixture *f = *state;
	struct index *idx = loaded(f, MANIFEST);
	char garbage[8192];
	struct stat st;

	refused(f, -ENOENT, "cannot be opened");
	write_file(f->copy, "", 0);
	refused(f, -EPROTO, "schema version 0");
	memset(garbage, 'x', sizeof(garbage));
	write_file(f->copy, garbage, sizeof(garbage));
	refused(f, -EIO, "not a database");
	unlink(f->copy);
	assert_int_equal(index_copy_save(idx, f->copy), 0);
	assert_int_equal(stat(f->copy, &st), 0);
	assert_int_equal(truncate(f->copy, st.st_size / 2), 0);
	refused(f, -EIO, "");
	index_close(idx);
}

/* The copy's name: this build's ID in it, a manifest URL's token not, every option. */
static void test_the_key_names_the_build_and_the_options(void **state)
{
	struct manifest_load_options opts = {0};
	struct source_kept_inputs in = {
	    .text = "{}", .len = 2, .base_url = BASE, .mtime = 7, .opts = &opts};
	char sha[UTIL_SHA256_HEX_LEN], key[UTIL_SHA256_HEX_LEN], other[UTIL_SHA256_HEX_LEN];
	char build[129], small[8];

	(void)state;
	assert_int_equal(util_build_id_hex(build, sizeof(build)), 0);
	assert_true(strlen(build) >= 16 && strspn(build, "0123456789abcdef") == strlen(build));
	assert_int_equal(util_build_id_hex(small, sizeof(small)), -ENOSPC);
	assert_int_equal(source_kept_key(&in, sha, key), 0);
	in.base_url = "https://example.com/m/manifest.json?token=OTHER#x";
	assert_int_equal(source_kept_key(&in, sha, other), 0);
	assert_string_equal(key, other);
	opts.outside_symlinks = 1;
	assert_int_equal(source_kept_key(&in, sha, other), 0);
	assert_string_not_equal(key, other);
	opts.outside_symlinks = 0;
	in.mtime = 8;
	assert_int_equal(source_kept_key(&in, sha, other), 0);
	assert_string_not_equal(key, other);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
	const struct CMUnitTest tests[] = {
	    T(test_saved_and_restored),
	    T(test_secret_urls_are_not_copied),
	    T(test_damaged_copies_are_refused),
	    cmocka_unit_test(test_the_key_names_the_build_and_the_options),
	};
#undef T
	if (index_init_process() != 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}

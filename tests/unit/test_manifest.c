/*
 * Unit tests for fetch/source/manifest_load.c (version 1), index/build.c and index/index.c: a valid
 * manifest and what the index answers about it, one test per refusal (each checks the message names
 * the entry and the reason, and that nothing was loaded), readdir cookies, fresh namespaces across
 * opens, and the spool records. Each test gets its own database in a fresh temporary directory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <curl/curl.h>
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fetch/source/manifest_load.h"
#include "index/index.h"
#include "index/records.h"
#include "util/ranges.h"
#include "helpers.h"

#define BASE "https://example.com/m/manifest.json"
#define SHA_UPPER "ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789"
#define SHA_LOWER "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789"
/* A valid first entry in every refused manifest, to show a refusal loads nothing. */
#define OK_ENTRY "{\"path\":\"ok.bin\",\"size\":1}"

struct fixture {
	char dir[64];
	char db[96];
	struct index *idx;
	struct index_records *rec; /* the spool records in db */
	char err[512];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	snprintf(f->dir, sizeof(f->dir), "/tmp/spoolfs-test-XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->db, sizeof(f->db), "%s/index.db", f->dir);
	if (index_open(&f->idx) != 0 || index_records_open(f->db, &f->rec) != 0)
		return -1;
	*state = f;
	return 0;
}

static void remove_db_files(const struct fixture *f)
{
	static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
	char path[128];

	for (size_t i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
		snprintf(path, sizeof(path), "%s%s", f->db, suffix[i]);
		unlink(path);
	}
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	index_close(f->idx);
	index_records_close(f->rec);
	remove_db_files(f);
	rmdir(f->dir);
	free(f);
	return 0;
}

static int load(struct fixture *f, const char *json)
{
	return source_manifest_load(f->idx, json, strlen(json), BASE, NULL, f->err, sizeof(f->err));
}

static uint64_t lookup_ino(struct fixture *f, uint64_t parent, const char *name)
{
	struct index_node n;

	assert_int_equal(index_lookup(f->idx, parent, name, &n), 0);
	return n.ino;
}

static char *url_of(struct fixture *f, uint64_t ino)
{
	char *url = NULL;

	assert_int_equal(index_get_url(f->idx, ino, &url), 0);
	assert_non_null(url);
	return url;
}

static void assert_url(struct fixture *f, uint64_t ino, const char *want)
{
	char *url = url_of(f, ino);

	assert_string_equal(url, want);
	free(url);
}

static void assert_namespace_empty(struct fixture *f)
{
	uint64_t files = 99, dirs = 99, bytes = 99;
	struct index_node n;

	assert_int_equal(index_totals(f->idx, &files, &dirs, &bytes), 0);
	assert_int_equal(files, 0);
	assert_int_equal(dirs, 1);
	assert_int_equal(bytes, 0);
	assert_int_equal(index_lookup(f->idx, INDEX_ROOT_INO, "ok.bin", &n), -ENOENT);
}

/* Loads json, expects -EINVAL, a message containing each of `want` (NULL-terminated), and
 * an untouched namespace. */
static void expect_refusal_v(struct fixture *f, const char *json, const char *const *want)
{
	int rc = load(f, json);

	if (rc != -EINVAL)
		fail_msg("load gave %d, message \"%s\"", rc, f->err);
	assert_null(strchr(f->err, '\n'));
	for (; *want; want++)
		if (!strstr(f->err, *want))
			fail_msg("message \"%s\" lacks \"%s\"", f->err, *want);
	assert_namespace_empty(f);
}

#define expect_refusal(f, json, ...)                                                               \
	do {                                                                                       \
		const char *const want_[] = {__VA_ARGS__, NULL};                                   \
		expect_refusal_v((f), (json), want_);                                              \
	} while (0)

/* An entry after OK_ENTRY, at files[1]. */
#define BAD(entry) "{\"version\":1,\"files\":[" OK_ENTRY "," entry "]}"

/* ---- a valid manifest ---------------------------------------------------------------- */

static const char valid_manifest[] =
    "{\"version\":1,\"comment\":\"unknown top-level keys are ignored\",\"files\":["
    "{\"path\":\"top.txt\",\"size\":5,\"mtime\":100},"
    "{\"path\":\"dir/sub/a b.bin\",\"size\":10,\"sha256\":\"" SHA_UPPER "\","
    "\"mtime\":300,\"executable\":true},"
    "{\"path\":\"dir/rel.bin\",\"size\":0,\"url\":\"objects/rel.bin\",\"executable\":false},"
    "{\"path\":\"dir/abs.bin\",\"size\":7,\"url\":\"https://cdn.example.net/x/abs.bin?sig=1\","
    "\"mtime\":200,\"extra\":{\"nested\":[1,2,{\"url\":5}]}},"
    "{\"path\":\"dir/file.bin\",\"size\":1,\"url\":\"http://other.example/srv/file.bin\"},"
    "{\"path\":\"dir/up.bin\",\"size\":2,\"url\":\"../up/up.bin\"},"
    "{\"path\":\"odd/100%:x?#.bin\",\"size\":0}"
    "]}";

static void test_valid_manifest(void **state)
{
	struct fixture *f = *state;
	struct index_node n, root;
	uint64_t dir, sub, files, dirs, bytes;

	assert_int_equal(load(f, valid_manifest), 0);
	assert_string_equal(f->err, "");

	assert_int_equal(index_get(f->idx, INDEX_ROOT_INO, &root), 0);
	assert_true(root.is_dir);
	assert_string_equal(root.name, "");
	assert_int_equal(root.parent, INDEX_ROOT_INO);
	assert_int_equal(root.mtime, 300); /* newest file anywhere below */

	assert_int_equal(index_lookup(f->idx, INDEX_ROOT_INO, "top.txt", &n), 0);
	assert_false(n.is_dir);
	assert_int_equal(n.size, 5);
	assert_int_equal(n.mtime, 100);
	assert_false(n.executable);
	assert_string_equal(n.sha256, "");
	assert_int_equal(n.parent, INDEX_ROOT_INO);
	assert_url(f, n.ino, "https://example.com/m/top.txt");

	dir = lookup_ino(f, INDEX_ROOT_INO, "dir");
	assert_int_equal(index_get(f->idx, dir, &n), 0);
	assert_true(n.is_dir);
	assert_string_equal(n.name, "dir");
	assert_int_equal(n.size, 0);
	assert_int_equal(n.mtime, 300);

	sub = lookup_ino(f, dir, "sub");
	assert_int_equal(index_get(f->idx, sub, &n), 0);
	assert_int_equal(n.mtime, 300);
	assert_int_equal(n.parent, dir);

	assert_int_equal(index_lookup(f->idx, sub, "a b.bin", &n), 0);
	assert_int_equal(n.size, 10);
	assert_int_equal(n.mtime, 300);
	assert_true(n.executable);
	assert_string_equal(n.sha256, SHA_LOWER);
	assert_url(f, n.ino, "https://example.com/m/dir/sub/a%20b.bin");

	assert_int_equal(index_lookup(f->idx, dir, "rel.bin", &n), 0);
	assert_int_equal(n.size, 0);
	assert_int_equal(n.mtime, 0);
	assert_false(n.executable);
	assert_url(f, n.ino, "https://example.com/m/objects/rel.bin");

	assert_url(f, lookup_ino(f, dir, "abs.bin"), "https://cdn.example.net/x/abs.bin?sig=1");
	assert_url(f, lookup_ino(f, dir, "file.bin"), "http://other.example/srv/file.bin");
	assert_url(f, lookup_ino(f, dir, "up.bin"), "https://example.com/up/up.bin");
	/* Characters with a meaning in URLs are escaped, so the path stays a path. */
	assert_url(f, lookup_ino(f, lookup_ino(f, INDEX_ROOT_INO, "odd"), "100%:x?#.bin"),
	           "https://example.com/m/odd/100%25%3Ax%3F%23.bin");

	assert_int_equal(index_totals(f->idx, &files, &dirs, &bytes), 0);
	assert_int_equal(files, 7);
	assert_int_equal(dirs, 4); /* root, dir, dir/sub, odd */
	assert_int_equal(bytes, 25);
}

static void test_lookup_errors(void **state)
{
	struct fixture *f = *state;
	struct index_node n;
	uint64_t top;
	char *url = NULL;

	assert_int_equal(load(f, valid_manifest), 0);
	top = lookup_ino(f, INDEX_ROOT_INO, "top.txt");
	assert_int_equal(index_lookup(f->idx, INDEX_ROOT_INO, "missing", &n), -ENOENT);
	assert_int_equal(index_lookup(f->idx, INDEX_ROOT_INO, "", &n), -ENOENT); /* not the root */
	assert_int_equal(index_lookup(f->idx, top, "x", &n), -ENOTDIR);
	assert_int_equal(index_lookup(f->idx, 999999, "x", &n), -ENOENT);
	assert_int_equal(index_get(f->idx, 999999, &n), -ENOENT);
	assert_int_equal(index_get(f->idx, UINT64_MAX, &n), -ENOENT);
	assert_int_equal(index_get_url(f->idx, INDEX_ROOT_INO, &url), -EISDIR);
	assert_null(url);
	assert_int_equal(index_get_url(f->idx, 999999, &url), -ENOENT);
	assert_null(url);
}

struct listing {
	int n;
	int stop_after; /* return 1 once this many are taken; 0 = never */
	uint64_t ino[16];
	char name[16][INDEX_NAME_MAX + 1];
	uint64_t cookie[16];
};

static int collect(void *ctx, const struct index_node *child, uint64_t next_cookie)
{
	struct listing *l = ctx;

	assert_true(l->n < 16);
	l->ino[l->n] = child->ino;
	snprintf(l->name[l->n], sizeof(l->name[0]), "%s", child->name);
	l->cookie[l->n] = next_cookie;
	l->n++;
	return l->stop_after && l->n >= l->stop_after ? 1 : 0;
}

static void test_readdir(void **state)
{
	struct fixture *f = *state;
	struct listing l = {0};
	uint64_t dir;

	assert_int_equal(load(f, valid_manifest), 0);
	/* Root: its children in inode order (manifest order here), never the root itself. */
	assert_int_equal(index_readdir(f->idx, INDEX_ROOT_INO, 0, collect, &l), 0);
	assert_int_equal(l.n, 3);
	assert_string_equal(l.name[0], "top.txt");
	assert_string_equal(l.name[1], "dir");
	assert_string_equal(l.name[2], "odd");
	for (int i = 1; i < l.n; i++)
		assert_true(l.ino[i - 1] < l.ino[i]);

	dir = lookup_ino(f, INDEX_ROOT_INO, "dir");
	memset(&l, 0, sizeof(l));
	assert_int_equal(index_readdir(f->idx, dir, 0, collect, &l), 0);
	assert_int_equal(l.n, 5);
	assert_string_equal(l.name[0], "sub");
	assert_string_equal(l.name[4], "up.bin");

	memset(&l, 0, sizeof(l));
	assert_int_equal(
	    index_readdir(f->idx, lookup_ino(f, INDEX_ROOT_INO, "top.txt"), 0, collect, &l),
	    -ENOTDIR);
	assert_int_equal(index_readdir(f->idx, 999999, 0, collect, &l), -ENOENT);
	assert_int_equal(l.n, 0);
}

static void test_readdir_cookie_resumes(void **state)
{
	struct fixture *f = *state;
	struct listing all = {0}, part = {0};
	uint64_t dir, cookie = 0;
	char json[1024];
	int o, rounds = 0;

	o = snprintf(json, sizeof(json), "{\"version\":1,\"files\":[");
	for (int i = 0; i < 7; i++)
		o += snprintf(json + o, sizeof(json) - (size_t)o,
		              "%s{\"path\":\"d/f%d\",\"size\":%d}", i ? "," : "", i, i);
	snprintf(json + o, sizeof(json) - (size_t)o, "]}");
	assert_int_equal(load(f, json), 0);
	dir = lookup_ino(f, INDEX_ROOT_INO, "d");
	assert_int_equal(index_readdir(f->idx, dir, 0, collect, &all), 0);
	assert_int_equal(all.n, 7);

	/* A reply buffer that holds two entries: resume from the last cookie each time. */
	for (;;) {
		struct listing chunk = {.stop_after = 2};
		assert_int_equal(index_readdir(f->idx, dir, cookie, collect, &chunk), 0);
		if (chunk.n == 0)
			break;
		for (int i = 0; i < chunk.n; i++) {
			part.ino[part.n] = chunk.ino[i];
			memcpy(part.name[part.n], chunk.name[i], sizeof(part.name[0]));
			part.n++;
		}
		cookie = chunk.cookie[chunk.n - 1];
		assert_true(++rounds <= 4);
	}
	assert_int_equal(rounds, 4);
	assert_int_equal(part.n, all.n);
	for (int i = 0; i < all.n; i++) {
		assert_int_equal(part.ino[i], all.ino[i]);
		assert_string_equal(part.name[i], all.name[i]);
		assert_int_equal(all.cookie[i], all.ino[i]);
	}
	/* Resuming after the last child gives nothing. */
	memset(&part, 0, sizeof(part));
	assert_int_equal(index_readdir(f->idx, dir, all.cookie[6], collect, &part), 0);
	assert_int_equal(part.n, 0);
}

static void test_second_open_starts_fresh(void **state)
{
	struct fixture *f = *state;
	struct util_ranges r;
	sqlite3 *db;
	sqlite3_stmt *st;

	assert_int_equal(load(f, valid_manifest), 0);
	util_ranges_init(&r);
	assert_int_equal(util_ranges_add(&r, 0, 4096), 0);
	assert_int_equal(util_ranges_add(&r, 8192, 9000), 0);
	assert_int_equal(index_records_set_ranges(f->rec, "sha256:" SHA_LOWER, &r), 0);
	assert_int_equal(index_records_mark_sealed(f->rec, "url:https://x/y", "seal"), 0);
	util_ranges_free(&r);
	index_close(f->idx);
	f->idx = NULL;
	index_records_close(f->rec);
	f->rec = NULL;

	assert_int_equal(index_open(&f->idx), 0);
	assert_int_equal(index_records_open(f->db, &f->rec), 0);
	struct index_node n;
	uint64_t files, dirs, bytes;
	assert_int_equal(index_lookup(f->idx, INDEX_ROOT_INO, "top.txt", &n), -ENOENT);
	assert_int_equal(index_totals(f->idx, &files, &dirs, &bytes), 0);
	assert_int_equal(files, 0);
	assert_int_equal(dirs, 1);
	assert_int_equal(index_get(f->idx, INDEX_ROOT_INO, &n), 0);
	assert_int_equal(n.mtime, 0);
	/* And a new manifest loads into it. */
	assert_int_equal(load(f, "{\"version\":1,\"files\":[{\"path\":\"new\",\"size\":3}]}"), 0);
	assert_int_equal(index_lookup(f->idx, INDEX_ROOT_INO, "new", &n), 0);
	index_close(f->idx);
	f->idx = NULL;
	index_records_close(f->rec);
	f->rec = NULL;

	/* The spool records survived both opens. */
	assert_int_equal(sqlite3_open(f->db, &db), SQLITE_OK);
	assert_int_equal(
	    sqlite3_prepare_v2(db,
	                       "SELECT (SELECT count(*) FROM spool_range),"
	                       " (SELECT sum(off_end - off_start) FROM spool_range),"
	                       " (SELECT complete FROM spool_object WHERE key LIKE 'url:%'),"
	                       " (SELECT complete FROM spool_object WHERE key LIKE 'sha%')",
	                       -1, &st, NULL),
	    SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_int_equal(sqlite3_column_int(st, 0), 2);
	assert_int_equal(sqlite3_column_int(st, 1), 4096 + 808);
	assert_int_equal(sqlite3_column_int(st, 2), 1);
	assert_int_equal(sqlite3_column_int(st, 3), 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	assert_int_equal(index_open(&f->idx), 0); /* for teardown */
	assert_int_equal(index_records_open(f->db, &f->rec), 0);
}

static void test_record_ranges_and_complete(void **state)
{
	struct fixture *f = *state;
	struct util_ranges r;

	util_ranges_init(&r);
	assert_int_equal(util_ranges_add(&r, 0, 10), 0);
	assert_int_equal(index_records_set_ranges(f->rec, "k", &r), 0);
	assert_int_equal(util_ranges_add(&r, 20, 30), 0);
	assert_int_equal(index_records_set_ranges(f->rec, "k", &r), 0); /* replaces */
	assert_int_equal(index_records_mark_sealed(f->rec, "k", "seal"), 0);
	assert_int_equal(index_records_mark_sealed(f->rec, "k", "seal"), 0); /* idempotent */
	assert_int_equal(index_records_forget(f->rec, "k"), 0);
	assert_int_equal(index_records_forget(f->rec, "never-seen"), 0);
	util_ranges_clear(&r);
	assert_int_equal(index_records_set_ranges(f->rec, "empty", &r), 0);
	util_ranges_free(&r);
	index_records_close(f->rec);
	f->rec = NULL;

	sqlite3 *db;
	sqlite3_stmt *st;
	assert_int_equal(sqlite3_open(f->db, &db), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db,
	                                    "SELECT (SELECT count(*) FROM spool_range),"
	                                    " (SELECT group_concat(key) FROM spool_object)",
	                                    -1, &st, NULL),
	                 SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_int_equal(sqlite3_column_int(st, 0), 0);
	assert_string_equal((const char *)sqlite3_column_text(st, 1), "empty");
	sqlite3_finalize(st);
	sqlite3_close(db);
	assert_int_equal(index_records_open(f->db, &f->rec), 0);
}

/*
 * Mounts started together on a new cache directory each open its index: two processes
 * released at once by closing a pipe, many times over. Before retrying the WAL switch,
 * about one round in ten failed with EBUSY.
 */
static void test_fresh_index_opened_by_two_processes_at_once(void **state)
{
	static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
	struct fixture *f = *state;
	int failures = 0;

	for (int round = 0; round < 40; round++) {
		char db[128], path[160];
		int gate[2];
		pid_t kids[2];

		snprintf(db, sizeof(db), "%s/shared-%d.db", f->dir, round);
		assert_int_equal(pipe(gate), 0);
		for (int k = 0; k < 2; k++) {
			kids[k] = fork();
			assert_true(kids[k] >= 0);
			if (kids[k] == 0) {
				struct index_records *rec = NULL;
				char c;

				close(gate[1]);
				(void)!read(gate[0], &c, 1); /* EOF: the parent let go */
				int rc = index_records_open(db, &rec);
				index_records_close(rec);
				_exit(rc == 0 ? 0 : 1);
			}
		}
		close(gate[0]);
		close(gate[1]);
		for (int k = 0; k < 2; k++) {
			int status = 0;
			assert_int_equal(waitpid(kids[k], &status, 0), kids[k]);
			failures += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
		}
		for (size_t i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
			snprintf(path, sizeof(path), "%s%s", db, suffix[i]);
			unlink(path);
		}
	}
	assert_int_equal(failures, 0);
}

struct reader {
	struct index *idx;
	uint64_t dir;
	int failures; /* collected here, asserted in the main thread after join */
};

static int count_child(void *ctx, const struct index_node *child, uint64_t next_cookie)
{
	(void)child;
	(void)next_cookie;
	(*(int *)ctx)++;
	return 0;
}

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	struct index_node n;
	char *url;

	for (int i = 0; i < 500; i++) {
		int children = 0;
		if (index_lookup(r->idx, r->dir, "up.bin", &n) != 0 || n.size != 2)
			r->failures++;
		if (index_get(r->idx, n.ino, &n) != 0 || strcmp(n.name, "up.bin") != 0)
			r->failures++;
		if (index_get_url(r->idx, n.ino, &url) != 0)
			r->failures++;
		else
			free(url);
		if (index_readdir(r->idx, r->dir, 0, count_child, &children) != 0 || children != 5)
			r->failures++;
	}
	return NULL;
}

static void test_concurrent_readers(void **state)
{
	struct fixture *f = *state;
	struct reader readers[4];

	assert_int_equal(load(f, valid_manifest), 0);
	for (int i = 0; i < 4; i++)
		readers[i] = (struct reader){.idx = f->idx, .dir = lookup_ino(f, 1, "dir")};
	test_threads_run(4, reader_main, readers, sizeof(readers[0]));
	for (int i = 0; i < 4; i++)
		assert_int_equal(readers[i].failures, 0);
}

static void test_second_load_refused(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(load(f, valid_manifest), 0);
	assert_int_equal(load(f, valid_manifest), -EBUSY);
	assert_non_null(strstr(f->err, "already loaded"));
}

static void test_empty_files_array(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(load(f, "{\"version\":1,\"files\":[]}"), 0);
	assert_int_equal(load(f, "{\"version\":1,\"files\":[]}"), 0); /* still empty */
	f->err[0] = '\0';
	assert_namespace_empty(f);
}

/* A manifest from a server must not make the mount serve the machine's own files. */
static void test_file_urls_only_in_a_local_manifest(void **state)
{
	struct fixture *f = *state;
	static const char json[] = "{\"version\":1,\"files\":[{\"path\":\"innocent.txt\","
	                           "\"size\":655,\"url\":\"file:///etc/shadow\"}]}";
	assert_int_equal(load(f, json), -EINVAL);
	assert_non_null(strstr(f->err, "files[0] \"innocent.txt\": a file: url is allowed only "
	                               "in a local manifest"));
	assert_int_equal(source_manifest_load(f->idx, json, strlen(json), "file:///srv/m.json",
	                                      NULL, f->err, sizeof(f->err)),
	                 0);
	assert_url(f, lookup_ino(f, INDEX_ROOT_INO, "innocent.txt"), "file:///etc/shadow");
}

static void test_no_base_url(void **state)
{
	struct fixture *f = *state;
	const char *json = "{\"version\":1,\"files\":[{\"path\":\"a\",\"size\":1,"
	                   "\"url\":\"https://h/a\"},{\"path\":\"b\",\"size\":1}]}";

	/* Absolute URLs need no base; a path alone does. */
	assert_int_equal(
	    source_manifest_load(f->idx, json, strlen(json), NULL, NULL, f->err, sizeof(f->err)),
	    -EINVAL);
	assert_non_null(strstr(f->err, "files[1] \"b\": "));
	assert_non_null(strstr(f->err, "no base URL"));
	assert_namespace_empty(f);
}

static void test_json_length_is_honoured(void **state)
{
	struct fixture *f = *state;
	const char json[] = "{\"version\":1,\"files\":[]}GARBAGE";

	/* Only the first len bytes are the manifest. */
	assert_int_equal(source_manifest_load(f->idx, json, strlen(json) - 7, BASE, NULL, f->err,
	                                      sizeof(f->err)),
	                 0);
	/* A NUL inside the given length is not JSON. */
	assert_int_equal(
	    source_manifest_load(f->idx, "{}\0{}", 5, BASE, NULL, f->err, sizeof(f->err)), -EINVAL);
	assert_non_null(strstr(f->err, "not valid JSON"));
}

/* The daemon's path: its download buffer is read in place, so a NUL inside it must still
 * be caught (sqlite would stop reading there), and a good text must load. */
static void test_terminated_text_is_read_in_place(void **state)
{
	struct fixture *f = *state;
	const char good[] = "{\"version\":1,\"files\":[{\"path\":\"a\",\"size\":1}]}";
	const char cut[] = "{\"version\":1,\"files\":[]}\0{\"x\":1}";
	struct index_node n;

	assert_int_equal(source_manifest_load_text(f->idx, cut, sizeof(cut) - 1, BASE, NULL, f->err,
	                                           sizeof(f->err)),
	                 -EINVAL);
	assert_non_null(strstr(f->err, "not valid JSON"));
	assert_int_equal(source_manifest_load_text(f->idx, good, strlen(good), BASE, NULL, f->err,
	                                           sizeof(f->err)),
	                 0);
	assert_int_equal(index_lookup(f->idx, INDEX_ROOT_INO, "a", &n), 0);
	assert_url(f, n.ino, "https://example.com/m/a");
}

static void test_escaped_backslash_is_not_nul(void **state)
{
	struct fixture *f = *state;
	struct index_node n;

	/* JSON "a\\u0000b" is a backslash followed by "u0000b": a legal (odd) name. */
	assert_int_equal(
	    load(f, "{\"version\":1,\"files\":[{\"path\":\"a\\\\u0000b\",\"size\":1},"
	            "{\"path\":\"x\",\"size\":1,\"note\":\"\\u0000 in an unknown key\"}]}"),
	    0);
	assert_int_equal(index_lookup(f->idx, INDEX_ROOT_INO, "a\\u0000b", &n), 0);
	assert_int_equal(index_lookup(f->idx, INDEX_ROOT_INO, "x", &n), 0);
}

static void test_check_segment(void **state)
{
	char name[300];

	(void)state;
	assert_null(index_check_segment("a", 1));
	assert_null(index_check_segment("...", 3));
	assert_null(index_check_segment(".hidden", 7));
	assert_non_null(index_check_segment("", 0));
	assert_non_null(index_check_segment(".", 1));
	assert_non_null(index_check_segment("..", 2));
	assert_non_null(index_check_segment("a/b", 3));
	assert_non_null(index_check_segment("a\0b", 3));
	memset(name, 'x', sizeof(name));
	assert_null(index_check_segment(name, INDEX_NAME_MAX));
	assert_non_null(index_check_segment(name, INDEX_NAME_MAX + 1));
}

/* ---- refusals: one test per rule ----------------------------------------------------- */

static void test_refuse_malformed_json(void **state)
{
	expect_refusal(*state, "{\"version\":1,\"files\":[", "manifest is not valid JSON");
}

static void test_refuse_not_an_object(void **state)
{
	expect_refusal(*state, "[1,2]", "manifest is not a JSON object");
}

static void test_refuse_missing_version(void **state)
{
	expect_refusal(*state, "{\"files\":[" OK_ENTRY "]}", "unsupported manifest version");
}

static void test_refuse_unknown_version(void **state)
{
	expect_refusal(*state, "{\"version\":4,\"files\":[" OK_ENTRY "]}",
	               "unsupported manifest version 4 (expected 1, 2 or 3)");
}

static void test_refuse_version_not_integer(void **state)
{
	expect_refusal(*state, "{\"version\":\"1\",\"files\":[" OK_ENTRY "]}",
	               "unsupported manifest version \"1\"");
}

static void test_refuse_files_missing(void **state)
{
	expect_refusal(*state, "{\"version\":1}", "no \"files\"");
}

static void test_refuse_files_not_array(void **state)
{
	expect_refusal(*state, "{\"version\":1,\"files\":{\"path\":\"a\",\"size\":1}}",
	               "\"files\" is not an array");
}

static void test_refuse_entry_not_object(void **state)
{
	expect_refusal(*state, BAD("\"a.bin\""), "files[1]: entry is not an object");
}

static void test_refuse_path_missing(void **state)
{
	expect_refusal(*state, BAD("{\"size\":1}"), "files[1]: path is missing");
}

static void test_refuse_path_not_string(void **state)
{
	expect_refusal(*state, BAD("{\"path\":7,\"size\":1}"), "files[1]: path is not a string");
}

static void test_refuse_size_missing(void **state)
{
	expect_refusal(*state, BAD("{\"path\":\"b.bin\"}"), "files[1] \"b.bin\": size is missing");
}

static void test_refuse_size_negative(void **state)
{
	expect_refusal(*state, BAD("{\"path\":\"b.bin\",\"size\":-1}"),
	               "files[1] \"b.bin\": size is negative");
}

static void test_refuse_size_fraction(void **state)
{
	expect_refusal(*state, BAD("{\"path\":\"b.bin\",\"size\":1.5}"),
	               "files[1] \"b.bin\": size is not an integer");
}

static void test_refuse_size_string(void **state)
{
	expect_refusal(*state, BAD("{\"path\":\"b.bin\",\"size\":\"12\"}"),
	               "files[1] \"b.bin\": size is not an integer");
}

static void test_refuse_size_too_large(void **state)
{
	expect_refusal(*state, BAD("{\"path\":\"b.bin\",\"size\":99999999999999999999}"),
	               "files[1] \"b.bin\": size is not an integer");
}

static void test_refuse_sha256_short(void **state)
{
	expect_refusal(*state,
	               BAD("{\"path\":\"b.bin\",\"size\":1,\"sha256\":\"0123456789abcdef0123456789"
	                   "abcdef0123456789abcdef0123456789abcde\"}"),
	               "files[1] \"b.bin\": sha256 is not 64 hex digits");
}

static void test_refuse_sha256_long(void **state)
{
	expect_refusal(*state, BAD("{\"path\":\"b.bin\",\"size\":1,\"sha256\":\"" SHA_LOWER "0\"}"),
	               "files[1] \"b.bin\": sha256 is not 64 hex digits");
}

static void test_refuse_sha256_not_hex(void **state)
{
	expect_refusal(*state,
	               BAD("{\"path\":\"b.bin\",\"size\":1,\"sha256\":\"g123456789abcdef0123456789"
	                   "abcdef0123456789abcdef0123456789abcdef\"}"),
	               "files[1] \"b.bin\": sha256 is not 64 hex digits");
}

static void test_refuse_sha256_not_string(void **state)
{
	expect_refusal(*state, BAD("{\"path\":\"b.bin\",\"size\":1,\"sha256\":12}"),
	               "files[1] \"b.bin\": sha256 is not 64 hex digits");
}

static void test_refuse_sha256_nul(void **state)
{
	expect_refusal(*state,
	               BAD("{\"path\":\"b.bin\",\"size\":1,\"sha256\":\"" SHA_LOWER "\\u0000\"}"),
	               "files[1] \"b.bin\": sha256 is not 64 hex digits");
}

static void test_refuse_empty_object_with_another_sha256(void **state)
{
	expect_refusal(*state, BAD("{\"path\":\"b.bin\",\"size\":0,\"sha256\":\"" SHA_LOWER "\"}"),
	               "files[1] \"b.bin\": size is 0 but sha256 is not that of empty content");
}

static void test_an_empty_object_with_its_sha256_is_fine(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(
	    load(f, BAD("{\"path\":\"b.bin\",\"size\":0,\"sha256\":"
	                "\"E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855\"}")),
	    0);
}

static void test_refuse_one_sha256_with_two_sizes(void **state)
{
	expect_refusal(*state,
	               "{\"version\":1,\"files\":["
	               "{\"path\":\"a\",\"size\":1,\"sha256\":\"" SHA_LOWER "\"},"
	               "{\"path\":\"b\",\"size\":3},"
	               "{\"path\":\"c\",\"size\":2,\"sha256\":\"" SHA_UPPER "\"}]}",
	               "files[2] \"c\": another entry has the same sha256 and size 1");
}

/* Two digests alike in the first 64 bits (what the loader's table keeps) are two digests. */
static void test_digests_alike_in_their_first_bits_are_told_apart(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(
	    load(f, "{\"version\":1,\"files\":["
	            "{\"path\":\"a\",\"size\":1,\"sha256\":\"" SHA_LOWER "\"},"
	            "{\"path\":\"c\",\"size\":2,\"sha256\":"
	            "\"abcdef0123456789000000000000000000000000000000000000000000000000\"}]}"),
	    0);
}

/* Three entries under one 64-bit prefix: d1 (size 1), d2 (size 2), d2 again (size 1). */
static void test_a_second_collision_under_one_prefix_is_caught(void **state)
{
	expect_refusal(*state,
	               "{\"version\":1,\"files\":["
	               "{\"path\":\"a\",\"size\":1,\"sha256\":\"" SHA_LOWER "\"},"
	               "{\"path\":\"c\",\"size\":2,\"sha256\":"
	               "\"abcdef0123456789000000000000000000000000000000000000000000000000\"},"
	               "{\"path\":\"d\",\"size\":1,\"sha256\":"
	               "\"abcdef0123456789000000000000000000000000000000000000000000000000\"}]}",
	               "files[2] \"d\": another entry has the same sha256 and size 2");
}

static void test_refuse_url_not_string(void **state)
{
	expect_refusal(*state, BAD("{\"path\":\"b.bin\",\"size\":1,\"url\":[\"x\"]}"),
	               "files[1] \"b.bin\": url is not a string");
}

static void test_refuse_url_unresolvable(void **state)
{
	expect_refusal(*state, BAD("{\"path\":\"b.bin\",\"size\":1,\"url\":\"http://[::1/x\"}"),
	               "files[1] \"b.bin\": url cannot be resolved");
}

static void test_refuse_url_scheme(void **state)
{
	expect_refusal(*state, BAD("{\"path\":\"b.bin\",\"size\":1,\"url\":\"ftp://h/b.bin\"}"),
	               "files[1] \"b.bin\": url scheme \"ftp\" is not allowed");
}

static void test_refuse_url_empty(void **state)
{
	expect_refusal(*state, BAD("{\"path\":\"b.bin\",\"size\":1,\"url\":\"\"}"),
	               "files[1] \"b.bin\": url is empty");
}

static void test_refuse_url_nul(void **state)
{
	expect_refusal(*state,
	               BAD("{\"path\":\"b.bin\",\"size\":1,\"url\":\"https://h/a\\u0000b\"}"),
	               "files[1] \"b.bin\": url contains a NUL byte");
}

static void test_refuse_mtime_not_integer(void **state)
{
	expect_refusal(*state, BAD("{\"path\":\"b.bin\",\"size\":1,\"mtime\":\"2020\"}"),
	               "files[1] \"b.bin\": mtime is not an integer");
	expect_refusal(*state, BAD("{\"path\":\"b.bin\",\"size\":1,\"mtime\":1.5}"),
	               "files[1] \"b.bin\": mtime is not an integer");
}

static void test_refuse_executable_not_boolean(void **state)
{
	expect_refusal(*state, BAD("{\"path\":\"b.bin\",\"size\":1,\"executable\":1}"),
	               "files[1] \"b.bin\": executable is not a boolean");
}

static void test_etag_is_kept(void **state)
{
	struct fixture *f = *state;
	char etag[256];

	assert_int_equal(load(f, "{\"version\":1,\"files\":["
	                         "{\"path\":\"v.bin\",\"size\":1,\"etag\":\"\\\"v1\\\"\"},"
	                         "{\"path\":\"w.bin\",\"size\":1}]}"),
	                 0);
	assert_int_equal(
	    index_get_etag(f->idx, lookup_ino(f, INDEX_ROOT_INO, "v.bin"), etag, sizeof(etag)), 0);
	assert_string_equal(etag, "\"v1\"");
	assert_int_equal(
	    index_get_etag(f->idx, lookup_ino(f, INDEX_ROOT_INO, "w.bin"), etag, sizeof(etag)), 0);
	assert_string_equal(etag, "");
}

static void test_refuse_bad_etag(void **state)
{
	expect_refusal(*state, BAD("{\"path\":\"b.bin\",\"size\":1,\"etag\":7}"),
	               "files[1] \"b.bin\": etag is not a string");
	expect_refusal(*state, BAD("{\"path\":\"b.bin\",\"size\":1,\"etag\":\"\"}"),
	               "files[1] \"b.bin\": etag must be 1 to 250 characters");
	/* A line break would end the If-Match header and start one of the manifest's choosing. */
	expect_refusal(*state, BAD("{\"path\":\"b.bin\",\"size\":1,\"etag\":\"v\\r\\nX-A: 1\"}"),
	               "files[1] \"b.bin\": etag has a character that is not visible ASCII");
	expect_refusal(*state, BAD("{\"path\":\"b.bin\",\"size\":1,\"etag\":\"v\\u0000\"}"),
	               "files[1] \"b.bin\": etag contains a NUL byte");
}

static void test_refuse_duplicate_path(void **state)
{
	expect_refusal(*state,
	               BAD("{\"path\":\"d/b.bin\",\"size\":1},{\"path\":\"d/b.bin\",\"size\":2}"),
	               "files[2] \"d/b.bin\": duplicate path");
}

static void test_refuse_file_then_dir(void **state)
{
	expect_refusal(*state, BAD("{\"path\":\"a\",\"size\":1},{\"path\":\"a/b\",\"size\":2}"),
	               "files[2] \"a/b\": ", "both a file and a directory");
}

static void test_refuse_dir_then_file(void **state)
{
	expect_refusal(*state, BAD("{\"path\":\"a/b\",\"size\":1},{\"path\":\"a\",\"size\":2}"),
	               "files[2] \"a\": ", "both a file and a directory");
}

static void test_refuse_absolute_path(void **state)
{
	expect_refusal(*state, BAD("{\"path\":\"/etc/passwd\",\"size\":1}"),
	               "files[1] \"/etc/passwd\": path is absolute");
}

static void test_refuse_empty_segment(void **state)
{
	expect_refusal(*state, BAD("{\"path\":\"a//b\",\"size\":1}"),
	               "files[1] \"a//b\": path has an empty segment");
}

static void test_refuse_trailing_slash(void **state)
{
	expect_refusal(*state, BAD("{\"path\":\"a/b/\",\"size\":1}"),
	               "files[1] \"a/b/\": path has an empty segment");
}

static void test_refuse_dot_segment(void **state)
{
	expect_refusal(*state, BAD("{\"path\":\"a/./b\",\"size\":1}"),
	               "files[1] \"a/./b\": path has a \".\" segment");
}

static void test_refuse_dotdot_segment(void **state)
{
	expect_refusal(*state, BAD("{\"path\":\"a/../b\",\"size\":1}"),
	               "files[1] \"a/../b\": path has a \"..\" segment");
}

static void test_refuse_nul_in_path(void **state)
{
	expect_refusal(*state, BAD("{\"path\":\"a\\u0000b\",\"size\":1}"), "files[1] \"a",
	               "path contains a NUL byte");
}

static void test_refuse_long_segment(void **state)
{
	char json[1024], seg[INDEX_NAME_MAX + 2];

	memset(seg, 'x', INDEX_NAME_MAX + 1);
	seg[INDEX_NAME_MAX + 1] = '\0';
	snprintf(json, sizeof(json), BAD("{\"path\":\"d/%s\",\"size\":1}"), seg);
	expect_refusal(*state, json, "files[1] \"d/xxxx", "path has a segment longer than 255");
	/* 255 bytes is fine. */
	seg[INDEX_NAME_MAX] = '\0';
	snprintf(json, sizeof(json), BAD("{\"path\":\"d/%s\",\"size\":1}"), seg);
	assert_int_equal(load(*state, json), 0);
}

static void test_refuse_empty_path(void **state)
{
	expect_refusal(*state, BAD("{\"path\":\"\",\"size\":1}"), "files[1] \"\": path is empty");
}

/* What curl makes of ref against base: the manifest loader's answer, shortcut or not. */
static char *curl_resolve(const char *base, const char *ref)
{
	CURLU *h = curl_url();
	char *got = NULL, *out;

	assert_non_null(h);
	assert_int_equal(curl_url_set(h, CURLUPART_URL, base, 0), CURLUE_OK);
	assert_int_equal(curl_url_set(h, CURLUPART_URL, ref, 0), CURLUE_OK);
	assert_int_equal(curl_url_get(h, CURLUPART_URL, &got, 0), CURLUE_OK);
	out = strdup(got);
	curl_free(got);
	curl_url_cleanup(h);
	return out;
}

/* The URL stored for the root entry `name` is what curl makes of ref against base. */
static void assert_url_as_curl(struct fixture *f, const char *name, const char *base,
                               const char *ref)
{
	char *got = NULL, *want = curl_resolve(base, ref);
	struct index_node node;

	assert_int_equal(index_lookup(f->idx, INDEX_ROOT_INO, name, &node), 0);
	assert_int_equal(index_get_url(f->idx, node.ino, &got), 0);
	if (strcmp(got, want) != 0)
		fail_msg("base %s, ref %s: got %s, curl %s", base, ref, got, want);
	free(got);
	free(want);
}

/*
 * The loader appends plain relative references to the base's directory itself instead of
 * asking curl per entry; every base and reference here, plain or not, must come out as
 * curl would resolve it.
 */
static void test_urls_resolve_as_curl_would(void **state)
{
	static const char *const bases[] = {
	    "https://example.com/m/manifest.json",
	    "https://example.com/m/manifest.json?sig=a/b&x=1#frag",
	    "http://127.0.0.1:8080",
	    "http://127.0.0.1:8080/",
	    "HTTP://Example.COM/a/./b/../c/m.json",
	    "https://example.com/m/",
	    "file:///srv/data/m.json",
	    "https://example.com/m/manifest.json#frag/with/slash",
	    "http://user:pw@[::1]:8080/a%20b/m.json",
	};
	/* Entries without "url": their path, escaped, is the reference. */
	static const char *const bare_paths[][2] = {{"plain-name.bin", "plain-name.bin"},
	                                            {"sp ace.bin", "sp%20ace.bin"}};
	static const char *const refs[] = {
	    "a.bin",    "dir/sub/a.bin", "...",    ".hidden/x", "a~b_c-d.e",  "./a.bin",
	    "../a.bin", "a/./b",         "a/../b", "a//b",      "/abs/a.bin", "a%20b",
	    "a?q=1",    "a#f",           ".",      "..",        "a/",
	};
	struct fixture *f = *state;

	for (size_t b = 0; b < sizeof(bases) / sizeof(bases[0]); b++) {
		char json[8192], name[16];
		size_t n = 0;

		n += (size_t)snprintf(json + n, sizeof(json) - n, "{\"version\":1,\"files\":[");
		for (size_t r = 0; r < sizeof(refs) / sizeof(refs[0]); r++)
			n += (size_t)snprintf(json + n, sizeof(json) - n,
			                      "%s{\"path\":\"f%zu\",\"size\":1,\"url\":\"%s\"}",
			                      r ? "," : "", r, refs[r]);
		for (size_t p = 0; p < 2; p++)
			n += (size_t)snprintf(json + n, sizeof(json) - n,
			                      ",{\"path\":\"%s\",\"size\":1}", bare_paths[p][0]);
		snprintf(json + n, sizeof(json) - n, "]}");
		/* A second open of the same database starts with an empty namespace. */
		if (b > 0) {
			index_close(f->idx);
			assert_int_equal(index_open(&f->idx), 0);
		}
		int rc = source_manifest_load(f->idx, json, strlen(json), bases[b], NULL, f->err,
		                              sizeof(f->err));
		if (rc != 0)
			fail_msg("base %s: %d %s", bases[b], rc, f->err);
		for (size_t r = 0; r < sizeof(refs) / sizeof(refs[0]); r++) {
			snprintf(name, sizeof(name), "f%zu", r);
			assert_url_as_curl(f, name, bases[b], refs[r]);
		}
		for (size_t p = 0; p < 2; p++)
			assert_url_as_curl(f, bare_paths[p][0], bases[b], bare_paths[p][1]);
	}
}

/*
 * A version 1 manifest of n files "d/fNNNNNNN-xxx..." of 1 byte, over 1 MiB, so that its
 * entries are added on the builder thread (fetch/source/load_pipe.h). Entry dup_at (if < n)
 * repeats entry 0's path (refused by index/), entry neg_at (if < n) has size -1 (refused
 * by the reader). The caller frees it.
 */
/* What makes each path of big_manifest long. */
static const char big_pad[] =
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
    "xxxxxxxxxxxxxxxxxxxxxxxxxx";

static char *big_manifest(size_t n, size_t dup_at, size_t neg_at)
{
	size_t cap = 64 + n * (sizeof(big_pad) + 48), len = 0;
	char *json = malloc(cap);

	assert_non_null(json);
	len += (size_t)snprintf(json + len, cap - len, "{\"version\":1,\"files\":[");
	for (size_t i = 0; i < n; i++)
		len += (size_t)snprintf(json + len, cap - len,
		                        "%s{\"path\":\"d/f%07zu-%s\",\"size\":%d}", i ? "," : "",
		                        i == dup_at ? 0 : i, big_pad, i == neg_at ? -1 : 1);
	snprintf(json + len, cap - len, "]}");
	assert_true(strlen(json) > (1u << 20));
	return json;
}

/* The builder thread adds entries in the manifest's order: inodes as one thread gives them
 * (the implied "d" is 2, entry i is 3 + i), so a manifest gets the same ones every time. */
static void test_large_manifest_keeps_its_order(void **state)
{
	struct fixture *f = *state;
	char *json = big_manifest(9000, SIZE_MAX, SIZE_MAX), name[160];
	uint64_t files = 0, dirs = 0, bytes = 0;
	struct index_node n;

	if (load(f, json) != 0)
		fail_msg("load: %s", f->err);
	assert_int_equal(index_totals(f->idx, &files, &dirs, &bytes), 0);
	assert_int_equal(files, 9000);
	assert_int_equal(dirs, 2);
	uint64_t d = lookup_ino(f, INDEX_ROOT_INO, "d");
	assert_int_equal(d, 2);
	for (size_t i = 0; i < 9000; i += 1237) {
		snprintf(name, sizeof(name), "f%07zu-%s", i, big_pad);
		assert_int_equal(index_lookup(f->idx, d, name, &n), 0);
		assert_int_equal(n.ino, 3 + i);
	}
	free(json);
}

/* Whichever thread refuses, the message names the first bad entry, as one thread would,
 * and nothing is loaded: a clash the builder finds before an entry the reader refuses, the
 * other way round, and a clash in the last, partly filled batch. */
static void test_large_manifest_names_its_first_bad_entry(void **state)
{
	struct fixture *f = *state;
	static const struct {
		size_t dup_at, neg_at;
		const char *want, *why;
	} cases[] = {
	    {5000, 7000, "files[5000] \"d/f0000000-", "duplicate path"},
	    {6000, 3000, "files[3000] \"d/f0003000-", "size is negative"},
	    {8999, SIZE_MAX, "files[8999] \"d/f0000000-", "duplicate path"},
	    {SIZE_MAX, 8999, "files[8999] \"d/f0008999-", "size is negative"},
	};

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		char *json = big_manifest(9000, cases[c].dup_at, cases[c].neg_at);
		int rc = load(f, json);

		if (rc != -EINVAL || !strstr(f->err, cases[c].want) ||
		    !strstr(f->err, cases[c].why))
			fail_msg("case %zu: %d \"%s\"", c, rc, f->err);
		assert_namespace_empty(f);
		free(json);
	}
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
	const struct CMUnitTest tests[] = {
	    T(test_valid_manifest),
	    T(test_lookup_errors),
	    T(test_readdir),
	    T(test_readdir_cookie_resumes),
	    T(test_second_open_starts_fresh),
	    T(test_record_ranges_and_complete),
	    T(test_concurrent_readers),
	    T(test_fresh_index_opened_by_two_processes_at_once),
	    T(test_second_load_refused),
	    T(test_empty_files_array),
	    T(test_file_urls_only_in_a_local_manifest),
	    T(test_refuse_empty_object_with_another_sha256),
	    T(test_an_empty_object_with_its_sha256_is_fine),
	    T(test_refuse_one_sha256_with_two_sizes),
	    T(test_digests_alike_in_their_first_bits_are_told_apart),
	    T(test_a_second_collision_under_one_prefix_is_caught),
	    T(test_no_base_url),
	    T(test_urls_resolve_as_curl_would),
	    T(test_json_length_is_honoured),
	    T(test_terminated_text_is_read_in_place),
	    T(test_escaped_backslash_is_not_nul),
	    T(test_large_manifest_keeps_its_order),
	    T(test_large_manifest_names_its_first_bad_entry),
	    cmocka_unit_test(test_check_segment),
	    T(test_refuse_malformed_json),
	    T(test_refuse_not_an_object),
	    T(test_refuse_missing_version),
	    T(test_refuse_unknown_version),
	    T(test_refuse_version_not_integer),
	    T(test_refuse_files_missing),
	    T(test_refuse_files_not_array),
	    T(test_refuse_entry_not_object),
	    T(test_refuse_path_missing),
	    T(test_refuse_path_not_string),
	    T(test_refuse_size_missing),
	    T(test_refuse_size_negative),
	    T(test_refuse_size_fraction),
	    T(test_refuse_size_string),
	    T(test_refuse_size_too_large),
	    T(test_refuse_sha256_short),
	    T(test_refuse_sha256_long),
	    T(test_refuse_sha256_not_hex),
	    T(test_refuse_sha256_not_string),
	    T(test_refuse_sha256_nul),
	    T(test_refuse_url_not_string),
	    T(test_refuse_url_unresolvable),
	    T(test_refuse_url_scheme),
	    T(test_refuse_url_empty),
	    T(test_refuse_url_nul),
	    T(test_refuse_mtime_not_integer),
	    T(test_refuse_executable_not_boolean),
	    T(test_etag_is_kept),
	    T(test_refuse_bad_etag),
	    T(test_refuse_duplicate_path),
	    T(test_refuse_file_then_dir),
	    T(test_refuse_dir_then_file),
	    T(test_refuse_absolute_path),
	    T(test_refuse_empty_segment),
	    T(test_refuse_trailing_slash),
	    T(test_refuse_dot_segment),
	    T(test_refuse_dotdot_segment),
	    T(test_refuse_nul_in_path),
	    T(test_refuse_long_segment),
	    T(test_refuse_empty_path),
	};
#undef T

	return cmocka_run_group_tests_name("manifest", tests, NULL, NULL);
}

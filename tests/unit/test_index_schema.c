/*
 * Unit tests for the namespace file's schema version (index/index.c, PRAGMA user_version):
 * a file an older serving process made (version 0, with or without the stored_* columns)
 * is upgraded on reopen; one a newer spoolfs made is refused with -EPROTO; a migration
 * step that fails for another reason than a column that is there already fails the open.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <unistd.h>

#include "index/index.h"
#include "tests/unit/helpers.h"

struct fixture {
	char dir[128];
	char path[192];
	int fd;
};

static int setup(void **state)
{
	static struct fixture f;

	f.fd = test_dir_make("schema", f.dir, sizeof(f.dir));
	if (f.fd < 0)
		return -1;
	snprintf(f.path, sizeof(f.path), "%s/namespace.db", f.dir);
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	return test_dir_remove(f->dir, f->fd);
}

/* A namespace file made by this build, then changed by sql (as an older or newer one). */
static void make_file(const struct fixture *f, const char *sql)
{
	struct index *idx = NULL;
	sqlite3 *db = NULL;

	assert_int_equal(index_open_file(f->path, true, &idx), 0);
	index_close(idx);
	assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
}

static int64_t version_of(const struct fixture *f)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	int64_t v;

	assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return v;
}

/* A reopen of the file: rc, and on 0 the root answers (the statements that read stored_*
 * were prepared). */
static int reopen(const struct fixture *f)
{
	struct index *idx = NULL;
	struct index_object_ref ref;
	int rc = index_open_file(f->path, false, &idx);

	if (rc == 0) {
		assert_int_equal(index_get_object(idx, INDEX_ROOT_INO, &ref), 0);
		index_object_ref_free(&ref);
		index_close(idx);
	}
	return rc;
}

static void test_fresh_is_current(void **state)
{
	struct fixture *f = *state;

	make_file(f, "SELECT 1");
	assert_int_equal(version_of(f), 1);
	assert_int_equal(reopen(f), 0);
	assert_int_equal(version_of(f), 1);
}

/* Before manifest version 3: no stored_* columns, user_version 0. */
static void test_version_0_without_columns_upgraded(void **state)
{
	struct fixture *f = *state;

	make_file(f, "ALTER TABLE node DROP COLUMN stored_size;"
	             "ALTER TABLE node DROP COLUMN stored_frame;"
	             "ALTER TABLE node DROP COLUMN stored_frames;"
	             "ALTER TABLE pack DROP COLUMN stored_size;"
	             "ALTER TABLE pack DROP COLUMN stored_frame;"
	             "ALTER TABLE pack DROP COLUMN stored_frames;"
	             "PRAGMA user_version = 0;");
	assert_int_equal(reopen(f), 0);
	assert_int_equal(version_of(f), 1);
}

/* The builds that added the columns without a version. */
static void test_version_0_with_columns_upgraded(void **state)
{
	struct fixture *f = *state;

	make_file(f, "PRAGMA user_version = 0;");
	assert_int_equal(reopen(f), 0);
	assert_int_equal(version_of(f), 1);
}

static void test_newer_refused(void **state)
{
	struct fixture *f = *state;

	make_file(f, "PRAGMA user_version = 2;");
	assert_int_equal(reopen(f), -EPROTO);
	assert_int_equal(version_of(f), 2); /* left as it was */
}

/* An ALTER refused for another reason (here a table that is not there) is not let pass,
 * and nothing of the upgrade stays. */
static void test_failed_step_fails_the_open(void **state)
{
	struct fixture *f = *state;

	make_file(f, "ALTER TABLE node DROP COLUMN stored_frames;"
	             "ALTER TABLE pack RENAME TO pack_gone;"
	             "PRAGMA user_version = 0;");
	assert_int_equal(reopen(f), -EIO);
	assert_int_equal(version_of(f), 0);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
	const struct CMUnitTest tests[] = {
	    T(test_fresh_is_current),
	    T(test_version_0_without_columns_upgraded),
	    T(test_version_0_with_columns_upgraded),
	    T(test_newer_refused),
	    T(test_failed_step_fails_the_open),
	};
#undef T
	if (index_init_process() != 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * fetch/prefetch and the speculative bound: the backoff of spec_limit.h, walk detection and
 * its plan over a real (in-memory) namespace, the record of opens, and reading a prefetch
 * list line by line (bad lines reported, none of the good ones lost).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "fetch/engine/spec_limit.h"
#include "fetch/prefetch/reads.h"
#include "fetch/prefetch/walk.h"
#include "index/index.h"

static void limit_halves_once_per_burst_and_grows_back_slowly(void **state)
{
	struct spec_limit l;

	spec_limit_init(&l, 32);
	assert_int_equal(l.cur, 32);
	spec_limit_throttled(&l, 1000);
	assert_int_equal(l.cur, 16);
	/* The rest of the same burst: one signal. */
	for (int i = 0; i < 31; i++)
		spec_limit_throttled(&l, 1000 + SPEC_LIMIT_BURST_MS - 1);
	assert_int_equal(l.cur, 16);
	spec_limit_throttled(&l, 1000 + SPEC_LIMIT_BURST_MS);
	assert_int_equal(l.cur, 8);
	/* A bound's worth of successes raises it by one. */
	for (int i = 0; i < 7; i++)
		spec_limit_success(&l);
	assert_int_equal(l.cur, 8);
	spec_limit_success(&l);
	assert_int_equal(l.cur, 9);
	for (int i = 0; i < 10000; i++)
		spec_limit_success(&l);
	assert_int_equal(l.cur, 32); /* never past its maximum */
	for (uint64_t t = 1; t < 20; t++)
		spec_limit_throttled(&l, 10000 * t);
	assert_int_equal(l.cur, 1); /* never below one */
	spec_limit_init(&l, 0);
	spec_limit_throttled(&l, 5);
	assert_int_equal(l.cur, 0);
}

/* A namespace: a/ with files f00..f19 (f05 of 1 MiB, the others i KiB), a/s1/ (g0, g1),
 * a/s2/ (h0), b/ (k0), and a/big (20 MiB). */
static struct index *tree(void)
{
	struct index *idx;
	struct index_builder *b;
	char why[128], path[64];

	assert_int_equal(index_open(&idx), 0);
	assert_int_equal(index_build_begin(idx, &b), 0);
	for (int i = 0; i < 20; i++) {
		snprintf(path, sizeof(path), "a/f%02d", i);
		struct index_build_entry e = {.path = path,
		                              .path_len = strlen(path),
		                              .kind = INDEX_KIND_FILE,
		                              .size = i == 5 ? 1u << 20 : (uint64_t)(i + 1) << 10,
		                              .url = "http://x/y"};
		assert_int_equal(index_build_add(b, &e, why, sizeof(why)), 0);
	}
	const char *more[] = {"a/s1/g0", "a/s1/g1", "a/s2/h0", "b/k0", "a/big"};
	for (size_t i = 0; i < sizeof(more) / sizeof(more[0]); i++) {
		struct index_build_entry e = {.path = more[i],
		                              .path_len = strlen(more[i]),
		                              .kind = INDEX_KIND_FILE,
		                              .size = strcmp(more[i], "a/big") ? 100 : 20u << 20,
		                              .url = "http://x/y"};
		assert_int_equal(index_build_add(b, &e, why, sizeof(why)), 0);
	}
	assert_int_equal(index_build_commit(b), 0);
	return idx;
}

static uint64_t ino_of(struct index *idx, const char *path)
{
	struct index_node n = {.ino = INDEX_ROOT_INO};
	char copy[64], *save = NULL;

	snprintf(copy, sizeof(copy), "%s", path);
	for (char *seg = strtok_r(copy, "/", &save); seg; seg = strtok_r(NULL, "/", &save))
		assert_int_equal(index_lookup(idx, n.ino, seg, &n), 0);
	return n.ino;
}

static uint64_t dir_of(struct index *idx, uint64_t ino)
{
	struct index_node n;

	assert_int_equal(index_get(idx, ino, &n), 0);
	return n.parent;
}

static void open_file(struct walk *w, struct index *idx, const char *path, int want)
{
	uint64_t ino = ino_of(idx, path);

	assert_int_equal(walk_note_open(w, ino, dir_of(idx, ino)), want);
}

static bool planned(const struct walk_item *items, int n, uint64_t ino)
{
	for (int i = 0; i < n; i++)
		if (items[i].ino == ino)
			return true;
	return false;
}

static void walk_seen_after_three_opens_plans_the_rest_small_first(void **state)
{
	struct index *idx = tree();
	struct walk w;
	struct walk_item items[WALK_FILL_MAX];
	struct walk_config cfg = {
	    .ahead_files = 64, .window_bytes = 64u << 20, .max_object = 8u << 20};

	walk_init(&w, idx, &cfg);
	open_file(&w, idx, "a/f10", 0);
	open_file(&w, idx, "a/f03", 0); /* not in listing order: still a walk */
	assert_int_equal(walk_fill(&w, items, WALK_FILL_MAX), 0);
	open_file(&w, idx, "a/f17", 1);
	int n = walk_fill(&w, items, WALK_FILL_MAX);
	assert_int_equal(n, WALK_START_FILES);
	for (int i = 1; i < n; i++)
		assert_true(items[i - 1].size <= items[i].size); /* small first */
	assert_true(planned(items, n, ino_of(idx, "a/f00")));
	assert_int_equal(items[n - 1].ino, ino_of(idx, "a/f05")); /* the 1 MiB one last */
	assert_int_equal(walk_fill(&w, items, WALK_FILL_MAX), 0); /* the window is full */
	/* An open the window foresaw doubles it. */
	open_file(&w, idx, "a/f00", 1);
	int more = walk_fill(&w, items, WALK_FILL_MAX);
	assert_int_equal(more, 2 * WALK_START_FILES - (WALK_START_FILES - 1));
	/* The rest of a/, then a/s1, a/s2, then b/ after a/; a/big (20 MiB) never. */
	int total = n + more;
	bool saw_sub = false;
	for (int k = 0; k < 10; k++) {
		open_file(&w, idx, "a/f01", 1); /* an old one again: no news, still a walk */
		int got = walk_fill(&w, items, WALK_FILL_MAX);
		assert_false(planned(items, got, ino_of(idx, "a/big")));
		total += got;
		saw_sub |= planned(items, got, ino_of(idx, "a/s1/g0"));
		if (planned(items, got, ino_of(idx, "b/k0")))
			break;
		/* Take every item as opened so the window moves on. */
		for (int i = 0; i < got; i++)
			walk_note_open(&w, items[i].ino, dir_of(idx, items[i].ino));
	}
	/* a/'s 20 files but the 3 opened, 3 below it, b/k0. */
	assert_true(total <= 17 + 3 + 1);
	assert_true(saw_sub); /* its subdirectories before the directory after it */
	walk_free(&w);
	index_close(idx);
}

/* A walk over tree(), with a window of window_bytes, seen at three opens of files in a/. */
static struct index *walk_after(struct walk *w, uint64_t window_bytes, const char *f1,
                                const char *f2, const char *f3)
{
	struct index *idx = tree();
	struct walk_config cfg = {
	    .ahead_files = 64, .window_bytes = window_bytes, .max_object = 8u << 20};

	walk_init(w, idx, &cfg);
	open_file(w, idx, f1, 0);
	open_file(w, idx, f2, 0);
	open_file(w, idx, f3, 1);
	return idx;
}

static void walk_ends_after_opens_it_did_not_foresee(void **state)
{
	struct walk w;
	struct walk_item items[WALK_FILL_MAX];
	struct index *idx = walk_after(&w, 64u << 20, "a/f00", "a/f01", "a/f02");

	assert_true(walk_fill(&w, items, WALK_FILL_MAX) > 0);
	open_file(&w, idx, "b/k0", 1);
	open_file(&w, idx, "a/s2/h0", 1);
	open_file(&w, idx, "a/s1/g1", 0); /* third miss in a row: the pattern stopped */
	assert_false(w.active);
	assert_int_equal(walk_fill(&w, items, WALK_FILL_MAX), 0);
	/* Random opens across directories never start one. */
	open_file(&w, idx, "a/f09", 0);
	open_file(&w, idx, "b/k0", 0);
	open_file(&w, idx, "a/f11", 0);
	open_file(&w, idx, "a/f12", 0);
	assert_false(w.active);
	walk_free(&w);
	index_close(idx);
}

static void walk_window_is_bounded_in_bytes(void **state)
{
	struct walk w;
	struct walk_item items[WALK_FILL_MAX];
	struct index *idx = walk_after(&w, 20u << 10, "a/f17", "a/f18", "a/f19");
	uint64_t sum = 0;
	int n = walk_fill(&w, items, WALK_FILL_MAX);
	assert_true(n > 0);
	for (int i = 0; i < n; i++)
		sum += items[i].size;
	assert_true(sum <= 20u << 10);
	/* What did not fit comes later, once the reader opened what is ahead. */
	walk_unfill(&w, items[0].ino);
	assert_true(walk_fill(&w, items, WALK_FILL_MAX) >= 0);
	walk_free(&w);
	index_close(idx);
}

static char paths[8][32];

static void path_of(void *ctx, uint64_t ino, char *buf, size_t len)
{
	snprintf(buf, len, "%s", ino < 8 ? paths[ino] : "");
}

static void record_keeps_first_opens_in_order(void **state)
{
	struct prefetch_record *r;
	char text[256] = "";
	size_t left_out = 99;
	FILE *tmp = tmpfile();

	for (int i = 0; i < 8; i++)
		snprintf(paths[i], sizeof(paths[i]), "dir/f%d", i);
	snprintf(paths[6], sizeof(paths[6]), "bad\nname");
	assert_int_equal(prefetch_record_create(&r), 0);
	uint64_t opens[] = {5, 2, 5, 7, 6, 2, 3, 100000};
	for (size_t i = 0; i < sizeof(opens) / sizeof(opens[0]); i++)
		prefetch_record_note(r, opens[i]);
	assert_int_equal(prefetch_record_count(r), 6);
	assert_int_equal(prefetch_record_write(r, fileno(tmp), path_of, NULL, &left_out), 0);
	assert_int_equal(left_out, 2); /* the newline, and an inode with no path */
	rewind(tmp);
	assert_true(fread(text, 1, sizeof(text) - 1, tmp) > 0);
	assert_string_equal(text, "dir/f5\ndir/f2\ndir/f7\ndir/f3\n");
	fclose(tmp);
	prefetch_record_free(r);
}

static void list_reader_skips_bad_lines_and_keeps_the_rest(void **state)
{
	FILE *tmp = tmpfile();
	struct prefetch_list_reader *r = malloc(sizeof(*r));
	const char *path, *why;
	char *huge = malloc(20000);

	memset(huge, 'x', 20000);
	fputs("a/b\n\n   \n/abs/x\r\n./rel\n", tmp);
	fwrite(huge, 1, 20000, tmp);
	fputs("\nok/1\nx/../y\nnul", tmp);
	fputc('\0', tmp);
	fputs("z\na//b\nlast", tmp); /* no newline at the end */
	rewind(tmp);
	prefetch_list_reader_init(r, fileno(tmp));
	const char *want[] = {"a/b", "abs/x", "rel", NULL, "ok/1", NULL, NULL, NULL, "last"};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		assert_int_equal(prefetch_list_next(r, &path, &why), 1);
		if (want[i]) {
			assert_non_null(path);
			assert_string_equal(path, want[i]);
		} else {
			assert_null(path);
			assert_non_null(why);
		}
	}
	assert_int_equal(prefetch_list_next(r, &path, &why), 0);
	assert_int_equal(r->line_no, 11);
	free(huge);
	free(r);
	fclose(tmp);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(limit_halves_once_per_burst_and_grows_back_slowly),
	    cmocka_unit_test(walk_seen_after_three_opens_plans_the_rest_small_first),
	    cmocka_unit_test(walk_ends_after_opens_it_did_not_foresee),
	    cmocka_unit_test(walk_window_is_bounded_in_bytes),
	    cmocka_unit_test(record_keeps_first_opens_in_order),
	    cmocka_unit_test(list_reader_skips_bad_lines_and_keeps_the_rest),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * fetch_path_trusted (fetch/cache/path_trust.c): the StrictModes rule for the path sqlite opens
 * index.db by. Directories are made under a fresh one in /tmp (sticky, so it passes).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "fetch/cache/path_trust.h"

#define NOBODY 65534

static char root[64];

/* root/NAME made with mode (chmod, past the umask), owned by uid; its full path in out. */
static void make_dir(const char *name, mode_t mode, uid_t uid, char *out, size_t out_len)
{
	snprintf(out, out_len, "%s/%s", root, name);
	assert_int_equal(mkdir(out, 0700), 0);
	assert_int_equal(chmod(out, mode), 0);
	if (uid != geteuid())
		assert_int_equal(chown(out, uid, (gid_t)-1), 0);
}

static void trusted(const char *path)
{
	char why[PATH_MAX + 128];
	int rc = fetch_path_trusted(path, why, sizeof(why));

	if (rc != 0)
		fail_msg("%s refused (%s): %s", path, strerror(-rc), why);
}

static void refused(const char *path, int err, const char *dir, const char *fault)
{
	char why[PATH_MAX + 256], want[PATH_MAX + 128];
	int rc = fetch_path_trusted(path, why, sizeof(why));

	if (rc != err)
		fail_msg("%s: %d (%s), not %d", path, rc, why, err);
	snprintf(want, sizeof(want), "%s %s", dir, fault);
	if (strncmp(why, want, strlen(want)) != 0)
		fail_msg("%s: \"%s\" does not start with \"%s\"", path, why, want);
}

static void test_own_and_sticky_paths_are_trusted(void **state)
{
	char dir[PATH_MAX], sub[PATH_MAX + 32];

	(void)state;
	trusted("/");
	trusted(root); /* under /tmp, 1777 and root's */
	make_dir("own", 0755, geteuid(), dir, sizeof(dir));
	snprintf(sub, sizeof(sub), "%s/cache", dir);
	assert_int_equal(mkdir(sub, 0700), 0);
	trusted(sub);
	/* a shared /tmp-like directory: others cannot rename what we made in it */
	make_dir("sticky", 01777, geteuid(), dir, sizeof(dir));
	snprintf(sub, sizeof(sub), "%s/cache", dir);
	assert_int_equal(mkdir(sub, 0700), 0);
	trusted(sub);
}

static void test_others_directories_above_are_refused(void **state)
{
	char dir[PATH_MAX], sub[PATH_MAX + 32];

	(void)state;
	if (geteuid() != 0)
		skip(); /* chown to another user needs root */
	make_dir("nobodys", 0755, NOBODY, dir, sizeof(dir));
	snprintf(sub, sizeof(sub), "%s/cache", dir);
	assert_int_equal(mkdir(sub, 0700), 0);
	refused(sub, -EACCES, dir, "is owned by uid 65534, not root or uid 0");
	/* the path itself counts too: its owner could rename what is in it */
	refused(dir, -EACCES, dir, "is owned by uid 65534");
}

static void test_writable_directories_above_are_refused(void **state)
{
	char dir[PATH_MAX], sub[PATH_MAX + 32];
	static const mode_t modes[] = {0777, 0775, 0757, 0770};

	(void)state;
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		char name[16];
		snprintf(name, sizeof(name), "w%o", (unsigned)modes[i]);
		make_dir(name, modes[i], geteuid(), dir, sizeof(dir));
		snprintf(sub, sizeof(sub), "%s/deeper", dir);
		assert_int_equal(mkdir(sub, 0700), 0);
		snprintf(sub, sizeof(sub), "%s/deeper/cache", dir);
		assert_int_equal(mkdir(sub, 0700), 0);
		refused(sub, -EACCES, dir, "is writable by group or others without the sticky bit");
	}
}

static void test_odd_paths_are_refused(void **state)
{
	char dir[PATH_MAX], link[PATH_MAX], via[PATH_MAX + 32];
	char why[256];

	(void)state;
	assert_int_equal(fetch_path_trusted("relative/cache", why, sizeof(why)), -EINVAL);
	snprintf(via, sizeof(via), "%s/missing/cache", root);
	snprintf(dir, sizeof(dir), "%s/missing", root);
	refused(via, -ENOENT, via, "cannot be examined");
	/* realpath leaves none; one found means the path was not canonical */
	make_dir("real", 0700, geteuid(), dir, sizeof(dir));
	snprintf(link, sizeof(link), "%s/link", root);
	assert_int_equal(symlink(dir, link), 0);
	snprintf(via, sizeof(via), "%s/cache", link);
	refused(via, -ENOENT, via, "cannot be examined");
	refused(link, -EACCES, link, "is a symbolic link");
	/* a short buffer still ends in a terminated string */
	make_dir("wide", 0777, geteuid(), dir, sizeof(dir));
	assert_int_equal(fetch_path_trusted(dir, why, 8), -EACCES);
	assert_int_equal(strlen(why), 7);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

static int setup(void **state)
{
	(void)state;
	snprintf(root, sizeof(root), "/tmp/spoolfs-trust-XXXXXX");
	return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_own_and_sticky_paths_are_trusted, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_others_directories_above_are_refused, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_writable_directories_above_are_refused, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_odd_paths_are_refused, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

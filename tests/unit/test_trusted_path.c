/*
 * util/trusted_path.c: the StrictModes rule for every user-given path, through
 * util_path_trusted (a canonical path, as sqlite's index.db) and the open helpers, from
 * the side of another user (nobody) who owns a directory, plants links and files first.
 * Directories are made under a fresh one in /tmp (sticky, so it passes).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/trusted_path.h"

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
	int rc = util_path_trusted(path, UTIL_TRUST_NO_SYMLINKS, why, sizeof(why));

	if (rc != 0)
		fail_msg("%s refused (%s): %s", path, strerror(-rc), why);
}

static void refused(const char *path, int err, const char *dir, const char *fault)
{
	char why[PATH_MAX + 256], want[PATH_MAX + 128];
	int rc = util_path_trusted(path, UTIL_TRUST_NO_SYMLINKS, why, sizeof(why));

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
	assert_int_equal(
	    util_path_trusted("relative/cache", UTIL_TRUST_NO_SYMLINKS, why, sizeof(why)), -EINVAL);
	snprintf(via, sizeof(via), "%s/missing/cache", root);
	snprintf(dir, sizeof(dir), "%s/missing", root);
	refused(via, -ENOENT, dir, "cannot be examined");
	/* realpath leaves none; one found means the path was not canonical */
	make_dir("real", 0700, geteuid(), dir, sizeof(dir));
	snprintf(link, sizeof(link), "%s/link", root);
	assert_int_equal(symlink(dir, link), 0);
	snprintf(via, sizeof(via), "%s/cache", link);
	refused(via, -EACCES, link, "is a symbolic link");
	refused(link, -EACCES, link, "is a symbolic link");
	/* a short buffer still ends in a terminated string */
	make_dir("wide", 0777, geteuid(), dir, sizeof(dir));
	assert_int_equal(util_path_trusted(dir, UTIL_TRUST_NO_SYMLINKS, why, 8), -EACCES);
	assert_int_equal(strlen(why), 7);
}

/* A file root/NAME with text, mode and owner; its path in out. */
static void make_file(const char *name, mode_t mode, uid_t uid, char *out, size_t out_len)
{
	snprintf(out, out_len, "%s/%s", root, name);
	int fd = open(out, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "x\n", 2), 2);
	close(fd);
	assert_int_equal(chmod(out, mode), 0);
	if (uid != geteuid())
		assert_int_equal(chown(out, uid, (gid_t)-1), 0);
}

static void open_refused(const char *path, enum util_trusted_how how, int err, const char *part)
{
	char why[PATH_MAX + 256];
	int fd = util_trusted_open(path, how, why, sizeof(why));

	if (fd >= 0) {
		close(fd);
		fail_msg("%s opened", path);
	}
	if (fd != err)
		fail_msg("%s: %d (%s), not %d", path, fd, why, err);
	if (!strstr(why, part))
		fail_msg("%s: \"%s\" does not say \"%s\"", path, why, part);
}

static void test_links_on_the_way_are_followed_when_trusted(void **state)
{
	char dir[PATH_MAX], link[PATH_MAX], via[PATH_MAX + 32], file[PATH_MAX + 32],
	    why[PATH_MAX + 128];
	char *canonical = NULL;

	(void)state;
	make_dir("real", 0700, geteuid(), dir, sizeof(dir));
	snprintf(link, sizeof(link), "%s/link", root);
	assert_int_equal(symlink("real", link), 0); /* as /var/run -> ../run */
	int fd = util_trusted_dir(link, &canonical, why, sizeof(why));
	if (fd < 0)
		fail_msg("%s refused: %s", link, why);
	close(fd);
	assert_string_equal(canonical, dir);
	free(canonical);
	snprintf(via, sizeof(via), "%s/log", link);
	fd = util_trusted_open(via, UTIL_TRUSTED_APPEND, why, sizeof(why));
	if (fd < 0)
		fail_msg("%s refused: %s", via, why);
	close(fd);
	snprintf(file, sizeof(file), "%s/log", dir);
	struct stat st;
	assert_int_equal(stat(file, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
}

static void test_others_links_and_files_are_refused(void **state)
{
	char dir[PATH_MAX], link[PATH_MAX], via[PATH_MAX + 32], file[PATH_MAX];

	(void)state;
	if (geteuid() != 0)
		skip(); /* lchown to another user needs root */
	/* nobody's link in a sticky directory, to a directory of root's */
	make_dir("real", 0700, geteuid(), dir, sizeof(dir));
	snprintf(link, sizeof(link), "%s/planted", root);
	assert_int_equal(symlink(dir, link), 0);
	assert_int_equal(lchown(link, NOBODY, (gid_t)-1), 0);
	snprintf(via, sizeof(via), "%s/log", link);
	open_refused(via, UTIL_TRUSTED_APPEND, -EACCES, "is a symbolic link owned by uid 65534");
	snprintf(via, sizeof(via), "%s/log", dir);
	assert_int_equal(access(via, F_OK), -1); /* nothing made behind it */
	/* a file nobody made first, where root would write or read */
	make_file("first", 0600, NOBODY, file, sizeof(file));
	open_refused(file, UTIL_TRUSTED_APPEND, -EACCES, "is owned by another user");
	open_refused(file, UTIL_TRUSTED_READ, -EACCES, "is owned by another user");
	/* root's file, but writable by others: refused for reading as root */
	make_file("shared", 0664, geteuid(), file, sizeof(file));
	open_refused(file, UTIL_TRUSTED_READ, -EACCES, "is writable by group or others");
	/* a directory of nobody's on the way */
	make_dir("nobodys", 0755, NOBODY, dir, sizeof(dir));
	snprintf(via, sizeof(via), "%s/metrics.prom", dir);
	open_refused(via, UTIL_TRUSTED_APPEND, -EACCES, "is owned by uid 65534");
}

static void test_last_component_is_a_regular_file_never_followed(void **state)
{
	char file[PATH_MAX], lnk[PATH_MAX], fifo[PATH_MAX], hard[PATH_MAX];

	(void)state;
	make_file("target", 0600, geteuid(), file, sizeof(file));
	snprintf(lnk, sizeof(lnk), "%s/lnk", root);
	assert_int_equal(symlink(file, lnk), 0);
	open_refused(lnk, UTIL_TRUSTED_APPEND, -ELOOP, "is a symbolic link");
	open_refused(lnk, UTIL_TRUSTED_READ, -ELOOP, "is a symbolic link");
	snprintf(lnk, sizeof(lnk), "%s/dangling", root);
	assert_int_equal(symlink("/nonexistent-spoolfs-target", lnk), 0);
	open_refused(lnk, UTIL_TRUSTED_APPEND, -ELOOP, "is a symbolic link");
	assert_int_equal(access("/nonexistent-spoolfs-target", F_OK), -1);
	/* a FIFO would block an open for reading until a writer came */
	snprintf(fifo, sizeof(fifo), "%s/fifo", root);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	open_refused(fifo, UTIL_TRUSTED_READ, -EINVAL, "is not a regular file");
	open_refused(root, UTIL_TRUSTED_READ, -EINVAL, "is not a regular file");
	/* refused before any open: opening a FIFO for writing with no reader fails (ENXIO),
	 * with one wakes it; a device's open runs its driver */
	open_refused(fifo, UTIL_TRUSTED_APPEND, -EINVAL, "is not a regular file");
	open_refused("/dev/null", UTIL_TRUSTED_APPEND, -EINVAL, "is not a regular file");
	/* a second name of another file: appending would write there */
	snprintf(hard, sizeof(hard), "%s/hard", root);
	assert_int_equal(link(file, hard), 0);
	open_refused(hard, UTIL_TRUSTED_APPEND, -EACCES, "more than one hard link");
}

static int fill_hello(int fd, void *ctx)
{
	(void)ctx;
	return write(fd, "hello\n", 6) == 6 ? 0 : -EIO;
}

static void test_replace_goes_through_the_held_directory(void **state)
{
	char dir[PATH_MAX], moved[PATH_MAX], path[PATH_MAX + 32], why[256], *name = NULL;
	struct stat st;
	int dir_fd;

	(void)state;
	make_dir("out", 0755, geteuid(), dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/metrics.prom", dir);
	assert_int_equal(util_trusted_parent(path, &dir_fd, &name, NULL, why, sizeof(why)), 0);
	assert_string_equal(name, "metrics.prom");
	/* the directory is moved and another put at its name: writes follow the first */
	snprintf(moved, sizeof(moved), "%s/moved", root);
	assert_int_equal(rename(dir, moved), 0);
	assert_int_equal(mkdir(dir, 0755), 0);
	assert_int_equal(util_trusted_replace(dir_fd, name, 0644, fill_hello, NULL), 0);
	assert_int_equal(access(path, F_OK), -1);
	snprintf(path, sizeof(path), "%s/metrics.prom", moved);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, 6);
	assert_int_equal(st.st_mode & 0777, 0644);
	close(dir_fd);
	free(name);
}

/* As nobody (a CI runner's user), in its own directory: a file of its own that group or
 * others may write is refused all the same (another user could add a credential_process
 * or a CA to it), and the message names the file and its mode. */
static void test_writable_files_are_refused_for_every_user(void **state)
{
	char dir[PATH_MAX], file[PATH_MAX + 16];
	int status;
	pid_t pid;

	(void)state;
	if (geteuid() != 0)
		skip(); /* becoming nobody needs root */
	assert_int_equal(chmod(root, 0755), 0);
	make_dir("nobodys", 0755, NOBODY, dir, sizeof(dir));
	snprintf(file, sizeof(file), "%s/config", dir);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char why[PATH_MAX + 256];
		int fd;
		if (setresgid(NOBODY, NOBODY, NOBODY) != 0 ||
		    setresuid(NOBODY, NOBODY, NOBODY) != 0)
			_exit(10);
		umask(0);
		fd = open(file, O_WRONLY | O_CREAT | O_EXCL, 0666);
		if (fd < 0 || close(fd) != 0)
			_exit(11);
		fd = util_trusted_open(file, UTIL_TRUSTED_READ_FOLLOW, why, sizeof(why));
		if (fd >= 0) {
			fprintf(stderr, "%s (0666, nobody's own) opened as nobody\n", file);
			_exit(1);
		}
		if (fd != -EACCES || !strstr(why, file) || !strstr(why, "mode 0666") ||
		    !strstr(why, "writable by group or others")) {
			fprintf(stderr, "%s: %d: %s\n", file, fd, why);
			_exit(2);
		}
		/* its own 0600 file is fine */
		if (chmod(file, 0600) != 0)
			_exit(12);
		fd = util_trusted_open(file, UTIL_TRUSTED_READ, why, sizeof(why));
		if (fd < 0) {
			fprintf(stderr, "%s (0600) refused as nobody: %s\n", file, why);
			_exit(3);
		}
		close(fd);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* A temporary name another user made first (here a directory, which no unlink removes)
 * does not stop the replacement. */
static void test_replace_is_not_stopped_by_a_premade_temporary(void **state)
{
	char dir[PATH_MAX], path[PATH_MAX + 64], why[256], *name = NULL;
	int dir_fd;

	(void)state;
	make_dir("out", 01777, geteuid(), dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/.metrics.prom.%d.tmp", dir, (int)getpid());
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/metrics.prom", dir);
	assert_int_equal(util_trusted_parent(path, &dir_fd, &name, NULL, why, sizeof(why)), 0);
	assert_int_equal(util_trusted_replace(dir_fd, name, 0644, fill_hello, NULL), 0);
	assert_int_equal(access(path, F_OK), 0);
	close(dir_fd);
	free(name);
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
	umask(022);
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
	    cmocka_unit_test_setup_teardown(test_links_on_the_way_are_followed_when_trusted, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_others_links_and_files_are_refused, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_last_component_is_a_regular_file_never_followed,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_writable_files_are_refused_for_every_user, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_replace_is_not_stopped_by_a_premade_temporary,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_replace_goes_through_the_held_directory, setup,
	                                    teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

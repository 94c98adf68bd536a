/*
 * A file: mirror's objects stay beneath its directory (fetch/http/beneath.c): the path check of
 * a mirror-relative URL, and the open with openat2 and with the walk that replaces it on
 * kernels without openat2 (forced with SPOOLFS_TEST_NO_OPENAT2=1).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdbool.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cmocka.h>

#include "fetch/http/beneath.h"

static void accepts(const char *rel, const char *want)
{
	char *got = NULL;

	assert_int_equal(fetch_mirror_path(rel, strlen(rel), &got), 0);
	assert_string_equal(got, want);
	free(got);
}

static void refuses(const char *rel)
{
	char *got = (char *)"unset";

	if (fetch_mirror_path(rel, strlen(rel), &got) != -EINVAL)
		fail_msg("\"%s\" was not refused", rel);
	assert_null(got);
}

static void test_mirror_path(void **state)
{
	(void)state;
	accepts("a.bin", "a.bin");
	accepts("dir/sub/a.bin", "dir/sub/a.bin");
	accepts("sp%20ace", "sp ace");
	accepts("..x/x..", "..x/x..");
	accepts("...", "...");
	accepts(".hidden", ".hidden");
	/* only len bytes count: the query after them is not part of the path */
	char *got = NULL;
	assert_int_equal(fetch_mirror_path("a.bin?x=/../..", 5, &got), 0);
	assert_string_equal(got, "a.bin");
	free(got);

	const char *bad[] = {"..",
	                     "../x",
	                     "a/../x",
	                     ".",
	                     "./x",
	                     "a/./x",
	                     "",
	                     "/x",
	                     "a//x",
	                     "a/",
	                     "%2e%2e/x",
	                     "%2E%2e/x",
	                     "%2e%2E/x",
	                     "%2E%2E/x",
	                     ".%2e/x",
	                     "%2e./x",
	                     "%2e/x",
	                     "..%2fx",
	                     "..%2Fx",
	                     "a%2f..%2f..%2fx",
	                     "%2fetc%2fpasswd",
	                     "..%5cx",
	                     "..%5Cx",
	                     "a\\b",
	                     "%252e%252e/x",
	                     "..%252fx",
	                     "%25252e%25252e/x",
	                     "a%00b",
	                     "100%",
	                     "a%zz",
	                     "%2"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		refuses(bad[i]);
}

struct fixture {
	char root[64];
	int dir_fd;
	bool has_device; /* mknod may be refused (a container without CAP_MKNOD) */
};

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));
	char path[128];

	snprintf(fx->root, sizeof(fx->root), "/tmp/spoolfs-beneath-XXXXXX");
	if (!fx || !mkdtemp(fx->root))
		return -1;
	/* root/secret, root/outside/secret; the mirror is root/m with good files and links */
	const char *dirs[] = {"outside", "m", "m/d", "m/fifo-dir"};
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", fx->root, dirs[i]);
		if (mkdir(path, 0755) != 0)
			return -1;
	}
	const char *files[] = {"secret", "outside/secret", "m/good", "m/d/good"};
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", fx->root, files[i]);
		FILE *f = fopen(path, "w");
		if (!f)
			return -1;
		fputs(files[i], f);
		fclose(f);
	}
	struct {
		const char *target, *name;
	} links[] = {{"../secret", "m/link"},
	             {"/etc/hostname", "m/abslink"},
	             {"../outside", "m/dlink"},
	             {"../../outside", "m/d/uplink"},
	             {"good", "m/innerlink"}};
	for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", fx->root, links[i].name);
		if (symlink(links[i].target, path) != 0)
			return -1;
	}
	snprintf(path, sizeof(path), "%s/m/fifo-dir/fifo", fx->root);
	if (mkfifo(path, 0644) != 0)
		return -1;
	/* a copy of /dev/null: opening a device node has effects (a tape rewinds) */
	struct stat null_st;
	snprintf(path, sizeof(path), "%s/m/null", fx->root);
	fx->has_device = stat("/dev/null", &null_st) == 0 && S_ISCHR(null_st.st_mode) &&
	                 mknod(path, S_IFCHR | 0644, null_st.st_rdev) == 0;
	snprintf(path, sizeof(path), "%s/m", fx->root);
	fx->dir_fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	*state = fx;
	return fx->dir_fd >= 0 ? 0 : -1;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

static int teardown(void **state)
{
	struct fixture *fx = *state;

	close(fx->dir_fd);
	nftw(fx->root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(fx);
	unsetenv("SPOOLFS_TEST_NO_OPENAT2");
	return 0;
}

static void opens(int dir_fd, const char *path, const char *content)
{
	char buf[64] = "", proc[64];
	int fd = fetch_open_beneath(dir_fd, path);

	if (fd < 0)
		fail_msg("%s: %s", path, strerror(-fd));
	/* an O_PATH fd: read as curl does, through /proc/self/fd */
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	int rd = open(proc, O_RDONLY | O_CLOEXEC);
	assert_true(rd >= 0);
	assert_true(read(rd, buf, sizeof(buf) - 1) > 0);
	assert_string_equal(buf, content);
	close(rd);
	close(fd);
}

static void refused_open(int dir_fd, const char *path, int err)
{
	int fd = fetch_open_beneath(dir_fd, path);

	if (fd >= 0) {
		close(fd);
		fail_msg("%s was opened", path);
	}
	if (fd != err)
		fail_msg("%s: %s, not %s", path, strerror(-fd), strerror(-err));
}

static void check_opens(const struct fixture *fx)
{
	opens(fx->dir_fd, "good", "m/good");
	opens(fx->dir_fd, "d/good", "m/d/good");
	refused_open(fx->dir_fd, "link", -ELOOP);
	refused_open(fx->dir_fd, "abslink", -ELOOP);
	refused_open(fx->dir_fd, "dlink/secret", -ELOOP);
	refused_open(fx->dir_fd, "d/uplink/secret", -ELOOP);
	/* even a symlink that stays inside: none is followed */
	refused_open(fx->dir_fd, "innerlink", -ELOOP);
	refused_open(fx->dir_fd, "missing", -ENOENT);
	refused_open(fx->dir_fd, "d", -EINVAL);
	refused_open(fx->dir_fd, "fifo-dir/fifo", -EINVAL);
	if (fx->has_device)
		refused_open(fx->dir_fd, "null", -EINVAL);
	refused_open(fx->dir_fd, "good/x", -ENOTDIR);
}

static void test_open_with_openat2(void **state)
{
	unsetenv("SPOOLFS_TEST_NO_OPENAT2");
	check_opens(*state);
	/* openat2 itself keeps ".." beneath, should a path get past fetch_mirror_path */
	int fd = fetch_open_beneath(((struct fixture *)*state)->dir_fd, "../secret");
	if (fd >= 0)
		close(fd);
	assert_true(fd == -EXDEV || fd == -EINVAL || fd == -ENOSYS || fd == -EPERM);
}

static void test_open_walking(void **state)
{
	setenv("SPOOLFS_TEST_NO_OPENAT2", "1", 1);
	check_opens(*state);
	refused_open(((struct fixture *)*state)->dir_fd, "../secret", -EINVAL);
	refused_open(((struct fixture *)*state)->dir_fd, "d/../../secret", -EINVAL);
	unsetenv("SPOOLFS_TEST_NO_OPENAT2");
}

/* Names in the inotify events waiting on in_fd that an open (not an O_PATH one) made. */
static bool opened_since(int in_fd, const char *name)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	bool seen = false;
	ssize_t len;

	while ((len = read(in_fd, buf, sizeof(buf))) > 0)
		for (char *p = buf; p < buf + len;) {
			struct inotify_event *ev = (struct inotify_event *)p;
			if (ev->len && strcmp(ev->name, name) == 0)
				seen = true;
			p += sizeof(*ev) + ev->len;
		}
	return seen;
}

/*
 * A FIFO or a device node is refused without being opened for reading: its open has
 * effects (a writer waiting on the FIFO goes on, a tape rewinds). inotify reports every
 * open but an O_PATH one (since Linux 6.5; on older kernels it reports those too, and
 * only the refusal is checked). Opening the FIFO blocking would hang: finishing shows it
 * was not.
 */
static void test_special_files_are_not_opened(void **state)
{
	const struct fixture *fx = *state;
	char path[PATH_MAX];
	int in_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);

	assert_true(in_fd >= 0);
	snprintf(path, sizeof(path), "%s/m", fx->root);
	assert_true(inotify_add_watch(in_fd, path, IN_OPEN) >= 0);
	snprintf(path, sizeof(path), "%s/m/fifo-dir", fx->root);
	assert_true(inotify_add_watch(in_fd, path, IN_OPEN) >= 0);
	int probe = openat(fx->dir_fd, "good", O_PATH | O_CLOEXEC);
	assert_true(probe >= 0);
	close(probe);
	bool o_path_reported = opened_since(in_fd, "good");
	for (int walk = 0; walk < 2; walk++) {
		if (walk)
			setenv("SPOOLFS_TEST_NO_OPENAT2", "1", 1);
		refused_open(fx->dir_fd, "fifo-dir/fifo", -EINVAL);
		if (fx->has_device)
			refused_open(fx->dir_fd, "null", -EINVAL);
		if (o_path_reported) {
			opened_since(in_fd, "");
			continue;
		}
		if (opened_since(in_fd, "fifo"))
			fail_msg("the FIFO was opened (walk %d)", walk);
		if (fx->has_device && opened_since(in_fd, "null"))
			fail_msg("the device node was opened (walk %d)", walk);
	}
	unsetenv("SPOOLFS_TEST_NO_OPENAT2");
	close(in_fd);
	if (!fx->has_device)
		skip();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_mirror_path),
	    cmocka_unit_test_setup_teardown(test_open_with_openat2, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_open_walking, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_special_files_are_not_opened, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

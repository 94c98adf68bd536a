/*
 * The suites' shared helpers (helpers.h): the recording waiter, the thread harness and
 * fresh directories.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"

static void test_waiter_done(struct flight_waiter *w, int err)
{
	struct test_waiter *t = (struct test_waiter *)((char *)w - offsetof(struct test_waiter, w));

	pthread_mutex_lock(&t->lock);
	t->err = err;
	t->calls++;
	if (t->order)
		t->rank = atomic_fetch_add(t->order, 1);
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
}

void test_waiter_init(struct test_waiter *t, uint64_t off, uint64_t len)
{
	*t = (struct test_waiter){
	    .w = {.off = off, .len = len, .done = test_waiter_done},
	    .lock = PTHREAD_MUTEX_INITIALIZER,
	    .cond = PTHREAD_COND_INITIALIZER,
	    .err = 1,
	};
}

int test_waiter_wait(struct test_waiter *t)
{
	int err;

	pthread_mutex_lock(&t->lock);
	while (t->calls == 0)
		pthread_cond_wait(&t->cond, &t->lock);
	err = t->err;
	pthread_mutex_unlock(&t->lock);
	return err;
}

int test_waiter_calls(struct test_waiter *t)
{
	int calls;

	pthread_mutex_lock(&t->lock);
	calls = t->calls;
	pthread_mutex_unlock(&t->lock);
	return calls;
}

void test_threads_run(unsigned n, void *(*fn)(void *arg), void *args, size_t stride)
{
	pthread_t threads[64];

	assert_true(n <= sizeof(threads) / sizeof(threads[0]));
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(pthread_create(&threads[i], NULL, fn, (char *)args + i * stride),
		                 0);
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(pthread_join(threads[i], NULL), 0);
}

int test_dir_make(const char *name, char *path, size_t cap)
{
	snprintf(path, cap, "/tmp/spoolfs-%s.XXXXXX", name);
	if (!mkdtemp(path))
		return -1;
	return open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

int test_dir_remove(const char *path, int fd)
{
	char cmd[128];

	if (fd >= 0)
		close(fd);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", path);
	return system(cmd) == 0 ? 0 : -1;
}

uint64_t test_index_ino(struct index *idx, const char *path)
{
	struct index_node n = {.ino = INDEX_ROOT_INO};
	char copy[1024], *save = NULL;

	snprintf(copy, sizeof(copy), "%s", path);
	for (char *seg = strtok_r(copy, "/", &save); seg; seg = strtok_r(NULL, "/", &save))
		if (index_lookup(idx, n.ino, seg, &n) != 0)
			return 0;
	return n.ino;
}

void test_log_begin(const char *path, int *saved)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	assert_true(fd >= 0);
	fflush(stderr);
	*saved = dup(STDERR_FILENO);
	assert_true(*saved >= 0);
	assert_int_equal(dup2(fd, STDERR_FILENO), STDERR_FILENO);
	close(fd);
}

char *test_log_end(const char *path, int *saved)
{
	static char text[64 * 1024];
	ssize_t n;
	int fd;

	if (*saved >= 0) {
		fflush(stderr);
		dup2(*saved, STDERR_FILENO);
		close(*saved);
		*saved = -1;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	n = read(fd, text, sizeof(text) - 1);
	close(fd);
	text[n > 0 ? n : 0] = '\0';
	return text;
}

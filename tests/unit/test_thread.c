/*
 * Starting threads (util/thread.c) and the worker built on it (util/worker.c): the new
 * thread carries its name and has the termination signals blocked from its first
 * instruction, and its starter's own mask is left as it was. Each thread records what it
 * sees; the main thread asserts after joining it.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/thread.h"
#include "util/worker.h"

static const int termination[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE};

struct seen {
	char comm[32]; /* /proc/self/task/TID/comm, newline cut */
	sigset_t mask;
	bool read_comm;
	bool read_mask;
};

/* What the calling thread is, as the kernel and pthreads see it. */
static void look(struct seen *seen)
{
	char path[64];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%ld/comm", (long)syscall(SYS_gettid));
	f = fopen(path, "r");
	if (f) {
		seen->read_comm = fgets(seen->comm, sizeof(seen->comm), f) != NULL;
		seen->comm[strcspn(seen->comm, "\n")] = '\0';
		fclose(f);
	}
	seen->read_mask = pthread_sigmask(SIG_BLOCK, NULL, &seen->mask) == 0;
}

static void *look_main(void *arg)
{
	look(arg);
	return NULL;
}

static void assert_blocks_termination(const struct seen *seen)
{
	assert_true(seen->read_mask);
	for (size_t i = 0; i < sizeof(termination) / sizeof(termination[0]); i++)
		assert_int_equal(sigismember(&seen->mask, termination[i]), 1);
}

/* What a thread started as `name` saw of itself. */
static struct seen seen_by(const char *name)
{
	struct seen seen = {0};
	pthread_t t;

	assert_int_equal(util_thread_start(&t, name, look_main, &seen), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_true(seen.read_comm);
	return seen;
}

static void test_named_and_blocked_from_the_start(void **state)
{
	struct seen seen = seen_by("spoolfs-test");

	(void)state;
	assert_string_equal(seen.comm, "spoolfs-test");
	assert_blocks_termination(&seen);
}

static void test_a_long_name_is_cut(void **state)
{
	struct seen seen = seen_by("spoolfs-a-name-too-long");

	(void)state;
	assert_int_equal(strlen(seen.comm), UTIL_THREAD_NAME_MAX);
	assert_string_equal(seen.comm, "spoolfs-a-name-");
}

static void test_the_callers_mask_is_kept(void **state)
{
	struct seen seen = {0};
	sigset_t mine, before, after;
	pthread_t t;

	(void)state;
	sigemptyset(&mine);
	sigaddset(&mine, SIGUSR2);
	assert_int_equal(pthread_sigmask(SIG_SETMASK, &mine, &before), 0);
	assert_int_equal(util_thread_start(&t, "spoolfs-test", look_main, &seen), 0);
	assert_int_equal(pthread_sigmask(SIG_SETMASK, &before, &after), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(sigismember(&after, SIGUSR2), 1);
	assert_int_equal(sigismember(&after, SIGTERM), 0);
	assert_int_equal(sigismember(&after, SIGPIPE), 0);
	assert_blocks_termination(&seen);
}

struct look_job {
	struct util_worker_job link; /* first: the worker hands this pointer back */
	struct seen seen;
};

static void look_run(void *ctx, struct util_worker_job *job)
{
	(void)ctx;
	look(&((struct look_job *)job)->seen);
}

static void test_a_worker_runs_jobs_on_its_named_blocked_thread(void **state)
{
	struct look_job job = {0};
	struct util_worker *w;

	(void)state;
	assert_int_equal(util_worker_start("spoolfs-wtest", look_run, NULL, &w), 0);
	assert_true(util_worker_queue(w, &job.link));
	util_worker_stop(w); /* runs the job before it joins */
	assert_true(job.seen.read_comm);
	assert_string_equal(job.seen.comm, "spoolfs-wtest");
	assert_blocks_termination(&job.seen);
}

/* Three jobs that can only finish together: the pool runs them on three threads at once. */
static pthread_barrier_t together;

static void together_run(void *ctx, struct util_worker_job *job)
{
	(void)ctx;
	pthread_barrier_wait(&together);
	look(&((struct look_job *)job)->seen);
}

static void test_a_pool_runs_jobs_at_once_on_numbered_threads(void **state)
{
	struct look_job jobs[3];
	struct util_worker *w;
	bool names[3] = {false, false, false};

	memset(jobs, 0, sizeof(jobs));

	(void)state;
	assert_int_equal(util_worker_start_pool("spoolfs-ptest", 0, together_run, NULL, &w),
	                 -EINVAL);
	pthread_barrier_init(&together, NULL, 3);
	assert_int_equal(util_worker_start_pool("spoolfs-ptest", 3, together_run, NULL, &w), 0);
	for (int i = 0; i < 3; i++)
		assert_true(util_worker_queue(w, &jobs[i].link));
	util_worker_stop(w); /* runs them before it joins: they meet at the barrier */
	pthread_barrier_destroy(&together);
	for (int i = 0; i < 3; i++) {
		unsigned n = 9;
		assert_true(jobs[i].seen.read_comm);
		assert_int_equal(sscanf(jobs[i].seen.comm, "spoolfs-ptest%u", &n), 1);
		assert_true(n < 3 && !names[n]);
		names[n] = true;
		assert_blocks_termination(&jobs[i].seen);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_a_pool_runs_jobs_at_once_on_numbered_threads),
	    cmocka_unit_test(test_named_and_blocked_from_the_start),
	    cmocka_unit_test(test_a_long_name_is_cut),
	    cmocka_unit_test(test_the_callers_mask_is_kept),
	    cmocka_unit_test(test_a_worker_runs_jobs_on_its_named_blocked_thread),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * util/pid_signal.c: a signal reaches the process the checks examined, never one that took
 * its PID after: a child that dies while it is being checked (a zombie, which kill() would
 * still "signal" successfully) is not signalled, and the call says so.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/pid_signal.h"

/* A child that waits for a signal. */
static pid_t sleeper(void)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		for (;;)
			pause();
	}
	return pid;
}

static int checks;

static bool yes(pid_t pid, void *ctx)
{
	(void)pid, (void)ctx;
	checks++;
	return true;
}

static bool no(pid_t pid, void *ctx)
{
	(void)pid, (void)ctx;
	checks++;
	return false;
}

/* The process exits while it is examined: it is a zombie (its PID not yet free) when the
 * check returns yes. */
static bool dies_during_check(pid_t pid, void *ctx)
{
	siginfo_t info = {0};

	(void)ctx;
	checks++;
	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitid(P_PID, (id_t)pid, &info, WEXITED | WNOWAIT), 0);
	return true;
}

static void test_the_checked_process_is_signalled(void **state)
{
	pid_t pid = sleeper();
	int status;

	(void)state;
	checks = 0;
	assert_int_equal(util_pid_signal_checked(pid, SIGTERM, yes, NULL), 0);
	assert_int_equal(checks, 1);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
}

static void test_a_refused_process_is_not_signalled(void **state)
{
	pid_t pid = sleeper();
	int status;

	(void)state;
	checks = 0;
	assert_int_equal(util_pid_signal_checked(pid, SIGTERM, no, NULL), -EACCES);
	assert_int_equal(checks, 1);
	assert_int_equal(waitpid(pid, &status, WNOHANG), 0); /* still waiting */
	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

static void test_a_process_gone_during_the_checks_is_not_signalled(void **state)
{
	pid_t pid = sleeper();
	int status;

	(void)state;
	checks = 0;
	assert_int_equal(util_pid_signal_checked(pid, SIGTERM, dies_during_check, NULL), -ESRCH);
	assert_int_equal(checks, 1);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_the_checked_process_is_signalled),
	    cmocka_unit_test(test_a_refused_process_is_not_signalled),
	    cmocka_unit_test(test_a_process_gone_during_the_checks_is_not_signalled),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Starting a thread of ours: blocked signals and a name (see thread.h). */
#include "util/thread.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

struct thread_start {
	void *(*fn)(void *arg);
	void *arg;
	char name[UTIL_THREAD_NAME_MAX + 1];
};

/*
 * Named by the thread itself, before fn runs: named by its starter after pthread_create,
 * fn could already look at its name (or a debugger see it) without one.
 */
static void *thread_main(void *p)
{
	struct thread_start start = *(struct thread_start *)p;

	free(p);
	pthread_setname_np(pthread_self(), start.name);
	return start.fn(start.arg);
}

int util_thread_start(pthread_t *out, const char *name, void *(*fn)(void *arg), void *arg)
{
	struct thread_start *start = malloc(sizeof(*start));
	sigset_t all, old;
	pthread_t thread;
	int rc;

	if (!start)
		return -ENOMEM;
	start->fn = fn;
	start->arg = arg;
	snprintf(start->name, sizeof(start->name), "%s", name);
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	rc = -pthread_create(&thread, NULL, thread_main, start);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		free(start);
		return rc;
	}
	*out = thread;
	return 0;
}

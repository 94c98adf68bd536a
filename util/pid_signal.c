/*
 * Signals a process only while it is the one examined (see pid_signal.h). glibc before
 * 2.36 has no wrappers for the pidfd calls: they are made through syscall().
 */
#include "util/pid_signal.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

static int pidfd_open_any(pid_t pid)
{
#ifdef SYS_pidfd_open
	return (int)syscall(SYS_pidfd_open, pid, 0);
#else
	(void)pid;
	errno = ENOSYS;
	return -1;
#endif
}

static int pidfd_signal(int pidfd, int sig)
{
#ifdef SYS_pidfd_send_signal
	return syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0) == 0 ? 0 : -errno;
#else
	(void)pidfd, (void)sig;
	return -ENOSYS;
#endif
}

int util_pid_signal_checked(pid_t pid, int sig, bool (*check)(pid_t pid, void *ctx), void *ctx)
{
	struct pollfd exited;
	int pidfd, rc;

	if (pid <= 0)
		return -ESRCH;
	pidfd = pidfd_open_any(pid);
	if (pidfd < 0) {
		/* A kernel before 5.3 (ENOSYS), or a seccomp filter that answers EPERM for calls
		 * it does not know: the checks then kill(), as before pidfds. */
		if (errno != ENOSYS && errno != EPERM)
			return -errno;
		if (!check(pid, ctx))
			return -EACCES;
		return kill(pid, sig) == 0 ? 0 : -errno;
	}
	if (!check(pid, ctx)) {
		rc = -EACCES;
		goto out;
	}
	/* The pidfd's process held pid from the open on; while it has not exited, pid was its
	 * own all through the checks, so they examined it. Readable means it has exited. */
	exited = (struct pollfd){.fd = pidfd, .events = POLLIN};
	rc = poll(&exited, 1, 0);
	if (rc != 0) {
		rc = rc > 0 ? -ESRCH : -errno;
		goto out;
	}
	rc = pidfd_signal(pidfd, sig);
out:
	close(pidfd);
	return rc;
}

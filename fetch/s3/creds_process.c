/* See creds_process.h. */
#include "fetch/s3/creds_process.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <wordexp.h>

#include <openssl/crypto.h>

#include "fetch/s3/creds_doc.h"

extern char **environ;

static long long mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Reads fd to its end into buf (CREDS_DOC_MAX + 1 bytes) until the deadline. */
static int read_output(int fd, char *buf, size_t *len, long long deadline)
{
	*len = 0;
	for (;;) {
		long long left = deadline - mono_ms();
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		if (left <= 0)
			return -ETIMEDOUT;
		int n = poll(&pfd, 1, (int)left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ETIMEDOUT;
		ssize_t r = read(fd, buf + *len, CREDS_DOC_MAX + 1 - *len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return 0;
		*len += (size_t)r;
		if (*len > CREDS_DOC_MAX)
			return -EFBIG;
	}
}

int creds_process_run(const char *command, struct s3_creds *out, char *err, size_t err_len)
{
	posix_spawn_file_actions_t actions;
	wordexp_t words = {0};
	char *buf = NULL;
	int pipefd[2] = {-1, -1}, status = 0, rc;
	size_t len = 0;
	pid_t pid = -1;
	bool actions_made = false, expanded = false;

	memset(out, 0, sizeof(*out));
	rc = wordexp(command, &words, WRDE_NOCMD);
	if (rc != 0 || words.we_wordc == 0) {
		snprintf(err, err_len,
		         "credential_process cannot be split into words%s (no shell runs it: "
		         "quote as in a shell, without $(...) or pipes)",
		         rc == WRDE_CMDSUB ? ": it has a command substitution" : "");
		if (rc == 0 || rc == WRDE_NOSPACE)
			expanded = true;
		rc = rc == WRDE_NOSPACE ? -ENOMEM : -EINVAL;
		goto out;
	}
	expanded = true;
	const char *prog = words.we_wordv[0];
	buf = malloc(CREDS_DOC_MAX + 1);
	if (!buf || pipe2(pipefd, O_CLOEXEC) != 0) {
		rc = buf ? -errno : -ENOMEM;
		snprintf(err, err_len, "credential_process %s: cannot start: %s", prog,
		         strerror(-rc));
		goto out;
	}
	if (posix_spawn_file_actions_init(&actions) != 0) {
		rc = -ENOMEM;
		goto out;
	}
	actions_made = true;
	if (posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0) != 0 ||
	    posix_spawn_file_actions_adddup2(&actions, pipefd[1], 1) != 0 ||
	    posix_spawn_file_actions_addclosefrom_np(&actions, 3) != 0) {
		rc = -ENOMEM;
		goto out;
	}
	rc = posix_spawnp(&pid, prog, &actions, NULL, words.we_wordv, environ);
	if (rc != 0) {
		pid = -1;
		snprintf(err, err_len, "credential_process %s: cannot run it: %s", prog,
		         strerror(rc));
		rc = rc == ENOENT ? -ENOENT : -EIO;
		goto out;
	}
	close(pipefd[1]);
	pipefd[1] = -1;
	rc = read_output(pipefd[0], buf, &len, mono_ms() + CREDS_PROCESS_TIMEOUT_S * 1000LL);
	if (rc) {
		kill(pid, SIGKILL);
		snprintf(err, err_len, "credential_process %s: %s", prog,
		         rc == -ETIMEDOUT ? "no answer in time: killed"
		         : rc == -EFBIG   ? "printed too much: killed"
		                          : strerror(-rc));
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	pid = -1;
	if (rc)
		goto out;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		if (WIFEXITED(status))
			snprintf(err, err_len, "credential_process %s exited with status %d", prog,
			         WEXITSTATUS(status));
		else
			snprintf(err, err_len, "credential_process %s was ended by signal %d", prog,
			         WTERMSIG(status));
		rc = -EIO;
		goto out;
	}
	char why[200] = "";
	rc = creds_doc_json(buf, len, 1, out, why, sizeof(why));
	if (rc)
		snprintf(err, err_len, "credential_process %s: %s", prog, why);
out:
	if (pid > 0) {
		kill(pid, SIGKILL);
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
	}
	if (pipefd[0] >= 0)
		close(pipefd[0]);
	if (pipefd[1] >= 0)
		close(pipefd[1]);
	if (actions_made)
		posix_spawn_file_actions_destroy(&actions);
	if (buf) {
		OPENSSL_cleanse(buf, CREDS_DOC_MAX + 1);
		free(buf);
	}
	if (expanded)
		wordfree(&words);
	return rc;
}

/*
 * The supervisor (doc/survive.md): the process `spoolfs` becomes once the mount is up. It
 * holds the FUSE device's descriptor and nothing big: it reads no request, fetches nothing
 * and keeps no namespace. It runs one serving process at a time on that descriptor, and
 * when one dies (any signal, any non-zero exit) it starts another, so the kernel never
 * sees the connection close. A reload (`spoolfs reload MOUNTPOINT`, or SIGUSR2) replaces the
 * serving process with one of the binary now on disk, and rolls back to the binary that
 * was running when the new one dies before it serves.
 *
 * What a serving process is told: fd 3 the device, fd 4 a sealed list of strings (the run
 * directory, the mountpoint, its mount's device numbers, the start-up directory and the
 * command line, secrets included, which never go into argv), fd 5 a pipe on which it says
 * it serves ('R': the kernel can resend requests; 'N': it cannot).
 *
 * Single-threaded: everything here runs in the main thread, woken by a signalfd and the
 * pipe. Restarts are bounded (util/supervise.h); the end of the line is a clean unmount
 * with one line in the log.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon/mountinfo.h"
#include "daemon/overlay.h"
#include "daemon/options.h"
#include "fs/session.h"
#include "daemon/supervisor.h"
#include "util/log.h"
#include "util/supervise.h"

/* Bounds (util/supervise.h): three failed starts in a row, 30 restarts a minute. */
#define MAX_FAILED_STARTS 3
#define MAX_RESTARTS 30
#define RESTART_WINDOW_S 60

struct supervisor {
	int dev_fd;
	int args_fd;
	char **strings; /* DAEMON_RUN_* then the command line */
	size_t n_strings;
	int running_exe; /* the binary the serving process runs (fexecve), O_RDONLY */
	int tried_exe;   /* a reload's new binary until it serves, else -1 */
	pid_t child;
	int ctl_fd;           /* read end of the current child's pipe; -1 when none */
	bool ready;           /* the child said it serves */
	bool killed_at_start; /* the child was killed for not serving in time */
	bool resend;          /* the last child that served said the kernel can resend */
	uint64_t generation;
	uint64_t reloads;
	uint64_t reloads_failed; /* what `spoolfs reload` waits on when no reload happens */
	bool stopping;
	bool reload_asked;
	struct util_restarts restarts;
	uint64_t started_ns;
	/* --start-timeout: a child that has not said it serves by then is killed, a failed
	 * start (or, a reload's, rolled back). */
	uint64_t start_timeout_ns;
	char **shown; /* the supervisor's own argv: [0..2] replaced for each child */
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* The supervisor's own record for `spoolfs status` (the serving process shows it too). */
static void write_state(struct supervisor *sv)
{
	char path[4200], tmp[4200];
	FILE *f;

	snprintf(path, sizeof(path), "%s/supervisor", sv->strings[DAEMON_RUN_DIR]);
	snprintf(tmp, sizeof(tmp), "%s/supervisor.tmp", sv->strings[DAEMON_RUN_DIR]);
	f = fopen(tmp, "we");
	if (!f)
		return;
	fprintf(f,
	        "{\"supervisor_pid\":%ld,\"serving_pid\":%ld,\"restarts\":%" PRIu64
	        ",\"reloads\":%" PRIu64 ",\"generation\":%" PRIu64 ",\"reloads_failed\":%" PRIu64
	        "}\n",
	        (long)getpid(), (long)sv->child, sv->restarts.total, sv->reloads, sv->generation,
	        sv->reloads_failed);
	if (fclose(f) == 0)
		rename(tmp, path);
}

/* Starts a serving process of binary exe (an fd), generation sv->generation. 0, or -errno
 * said in one line. */
static int start_child(struct supervisor *sv, int exe)
{
	int ctl[2], rc;
	pid_t pid;

	if (pipe2(ctl, O_CLOEXEC) != 0) {
		rc = -errno;
		goto fail;
	}
	pid = fork();
	if (pid < 0) {
		rc = -errno;
		close(ctl[0]);
		close(ctl[1]);
		goto fail;
	}
	if (pid == 0) {
		char gen[32], arg0[] = "spoolfs", arg1[] = "__serve";
		char **argv = sv->shown;
		int fds[] = {
		    sv->dev_fd,         sv->args_fd,           ctl[1], exe, DAEMON_RUN_FD_LEDGER,
		    DAEMON_RUN_FD_LOCK, DAEMON_RUN_FD_COUNTERS};
		_Static_assert(sizeof(fds) / sizeof(fds[0]) == DAEMON_RUN_FD_COUNT, "one per fd");
		const char *what = "placing its descriptors";
		sigset_t none;

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		snprintf(gen, sizeof(gen), "%" PRIu64, sv->generation);
		/* As ps shows the supervisor: the scrubbed command line after the generation. */
		argv[0] = arg0;
		argv[1] = arg1;
		argv[2] = gen;
		rc = util_fds_place(fds, DAEMON_RUN_FD_COUNT, DAEMON_RUN_FD_DEV);
		if (rc == 0) {
			/* fd 6 is the binary itself: fexecve through it, then closed (CLOEXEC). */
			fcntl(6, F_SETFD, FD_CLOEXEC);
			fexecve(6, argv, environ);
			rc = -errno;
			what = "exec";
		}
		/* The child's one line (this process is single-threaded: the log is safe to use
		 * after fork); its exit 127 is then a failed start like any other. */
		util_log(UTIL_LOG_ERROR, "serving process %ld: %s failed: %s", (long)getpid(), what,
		         strerror(-rc));
		_exit(127);
	}
	close(ctl[1]);
	sv->child = pid;
	sv->ctl_fd = ctl[0];
	sv->ready = false;
	sv->killed_at_start = false;
	sv->started_ns = now_ns();
	util_log(UTIL_LOG_INFO, "serving process %ld started (generation %" PRIu64 ")", (long)pid,
	         sv->generation);
	write_state(sv);
	return 0;
fail:
	util_log(UTIL_LOG_ERROR, "cannot start a serving process (generation %" PRIu64 "): %s",
	         sv->generation, strerror(-rc));
	return rc;
}

static bool connection_gone(const struct supervisor *sv)
{
	struct pollfd device = {.fd = sv->dev_fd};

	return poll(&device, 1, 0) == 1 && (device.revents & POLLERR);
}

/* The end: --writable's overlay goes, then the mount (if it is still there and ours), then
 * the device. */
static void unmount(struct supervisor *sv)
{
	const char *path = sv->strings[DAEMON_RUN_MOUNT_PATH];
	char dev[32];
	int run_dir_fd =
	    open(sv->strings[DAEMON_RUN_DIR], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	/* A serving process that stopped the mount took it down already: this is for a
	 * supervisor that ends the mount itself (a crash loop, a bound). */
	daemon_overlay_unmount_recorded(run_dir_fd);
	if (run_dir_fd >= 0)
		close(run_dir_fd);

	if (!connection_gone(sv) && daemon_mount_device(path, dev, sizeof(dev)) == 0 &&
	    strcmp(dev, sv->strings[DAEMON_RUN_MOUNT_DEV]) == 0) {
		if (geteuid() == 0) {
			if (umount2(path, MNT_FORCE | MNT_DETACH) != 0)
				util_log(UTIL_LOG_WARN, "cannot unmount %s: %s", path,
				         strerror(errno));
		} else {
			pid_t pid = fork();
			if (pid == 0) {
				execlp("fusermount3", "fusermount3", "-u", "-z", path,
				       (char *)NULL);
				_exit(127);
			}
			if (pid > 0)
				waitpid(pid, NULL, 0);
		}
	}
	close(sv->dev_fd);
	sv->dev_fd = -1;
}

/* The session's own spool directories in the run directory (spoolfs-XXXXXX), when no
 * serving process runs: a new one makes its own. */
static void remove_spool_dirs(struct supervisor *sv)
{
	DIR *d = opendir(sv->strings[DAEMON_RUN_DIR]);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d)) != NULL)
		if (strncmp(e->d_name, "spoolfs-", 8) == 0)
			util_remove_tree(dirfd(d), e->d_name);
	closedir(d);
}

/* Logs where the mount's command line said: its --log-file (relative to where the mount
 * was started, not to this process's "/"), else stderr in the foreground, else syslog. And
 * takes its --start-timeout. */
static void options_setup(struct supervisor *sv)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct daemon_options opts;
	char why[PATH_MAX + 256];

	memset(&opts, 0, sizeof(opts));
	for (size_t i = DAEMON_RUN_ARGV; i < sv->n_strings; i++)
		if (fuse_opt_add_arg(&args, sv->strings[i]) != 0)
			goto out;
	if (daemon_options_parse(&args, &opts) != 0 ||
	    daemon_options_resolve(&opts, sv->strings[DAEMON_RUN_CWD]) != 0)
		goto out;
	sv->start_timeout_ns = (uint64_t)opts.start_timeout_s * 1000000000ULL;
	daemon_set_log_level(opts.log.log_level, opts.log.debug);
	if (opts.log.log_file && util_log_use_file(opts.log.log_file, why, sizeof(why)) != 0)
		fprintf(stderr, "spoolfs: supervisor: --log-file: %s\n", why);
	else if (!opts.log.foreground)
		util_log_use_syslog();
out:
	daemon_options_free(&opts);
	fuse_opt_free_args(&args);
}

static int reopen_exe(const char *path)
{
	return open(path, O_RDONLY | O_CLOEXEC);
}

/* The child is gone: start the next, roll back, or end. Returns 0 to go on, 1 to end the
 * loop (a stop, an unmount), 2 to end it for a failure (said). */
static int child_ended(struct supervisor *sv, int status)
{
	char how[128], why[160];
	pid_t pid = sv->child;
	bool was_ready = sv->ready;

	sv->child = 0;
	if (sv->ctl_fd >= 0)
		close(sv->ctl_fd);
	sv->ctl_fd = -1;
	util_describe_exit(status, how, sizeof(how));
	if (sv->stopping || connection_gone(sv) ||
	    (WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
		util_log(UTIL_LOG_DEBUG, "serving process %ld %s: the mount ends", (long)pid, how);
		return 1;
	}
	if (sv->tried_exe >= 0 && !was_ready) {
		/* A reload's binary that never served: back to the one that did. */
		util_log(UTIL_LOG_ERROR,
		         "the new binary's serving process %ld %s before it served: rolled back",
		         (long)pid, how);
		close(sv->tried_exe);
		sv->tried_exe = -1;
		sv->reload_asked = false;
		sv->reloads_failed++;
		sv->generation++;
		return start_child(sv, sv->running_exe) == 0 ? 0 : 2;
	}
	if (sv->reload_asked) {
		/* The old one, killed for the reload: the new binary starts. */
		sv->reload_asked = false;
		sv->generation++;
		remove_spool_dirs(sv);
		return start_child(sv, sv->tried_exe) == 0 ? 0 : 2;
	}
	if (!sv->resend && was_ready) {
		util_log(
		    UTIL_LOG_ERROR,
		    "serving process %ld %s; this kernel cannot resend the requests it had taken"
		    " (FUSE_NOTIFY_RESEND needs Linux 6.9): unmounting %s",
		    (long)pid, how, sv->strings[DAEMON_RUN_MOUNT_PATH]);
		return 2;
	}
	if (util_restarts_note(&sv->restarts, now_ns(), was_ready, why, sizeof(why)) != 0) {
		util_log(UTIL_LOG_ERROR, "serving process %ld %s; %s: unmounting %s", (long)pid,
		         how, why, sv->strings[DAEMON_RUN_MOUNT_PATH]);
		return 2;
	}
	util_log(UTIL_LOG_WARN, "serving process %ld %s: starting another (restart %" PRIu64 ")",
	         (long)pid, how, sv->restarts.total);
	sv->generation++;
	remove_spool_dirs(sv);
	return start_child(sv, sv->running_exe) == 0 ? 0 : 2;
}

static void start_reload(struct supervisor *sv)
{
	char self[4200];
	ssize_t n;
	int exe;

	if (sv->tried_exe >= 0 || sv->reload_asked || !sv->child || !sv->ready) {
		util_log(UTIL_LOG_WARN,
		         "reload asked while a serving process is starting: ignored");
		goto refused;
	}
	/* The old process is killed with requests it has read: only a kernel that resends
	 * them lets the next one answer. Elsewhere a reload would leave its readers hung. */
	if (!sv->resend) {
		util_log(
		    UTIL_LOG_ERROR,
		    "reload refused: this kernel cannot resend the requests the serving process"
		    " has taken (FUSE_NOTIFY_RESEND needs Linux 6.9); remount to upgrade");
		goto refused;
	}
	/* The path the running binary had: after an upgrade, the new file there. */
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0) {
		util_log(UTIL_LOG_ERROR, "reload: cannot find the binary: %s", strerror(errno));
		goto refused;
	}
	self[n] = '\0';
	if (n > 10 && strcmp(self + n - 10, " (deleted)") == 0)
		self[n - 10] = '\0';
	exe = reopen_exe(self);
	if (exe < 0) {
		util_log(UTIL_LOG_ERROR, "reload: cannot open %s: %s", self, strerror(errno));
		goto refused;
	}
	util_log(UTIL_LOG_INFO, "reload: replacing serving process %ld with %s", (long)sv->child,
	         self);
	sv->tried_exe = exe;
	sv->reload_asked = true;
	kill(sv->child, SIGKILL); /* its requests in flight are resent to the next */
	return;
refused:
	sv->reloads_failed++;
	write_state(sv);
}

static void read_ctl(struct supervisor *sv)
{
	char c;
	ssize_t n = read(sv->ctl_fd, &c, 1);

	if (n == 1) {
		sv->ready = true;
		sv->resend = c == 'R';
		if (sv->tried_exe >= 0) {
			/* The new binary serves: it is the running one from now on. */
			close(sv->running_exe);
			sv->running_exe = sv->tried_exe;
			sv->tried_exe = -1;
			sv->reloads++;
			util_log(UTIL_LOG_INFO, "reload: serving process %ld serves",
			         (long)sv->child);
		}
		write_state(sv);
	} else {
		/* Closed: the child is dying; SIGCHLD follows. */
		close(sv->ctl_fd);
		sv->ctl_fd = -1;
	}
}

static int loop(struct supervisor *sv, int sig_fd)
{
	for (;;) {
		struct pollfd fds[2] = {{.fd = sig_fd, .events = POLLIN},
		                        {.fd = sv->ctl_fd, .events = POLLIN}};
		int timeout = -1;

		/* Until the child says it serves, its start is bounded (--start-timeout). */
		if (sv->child && !sv->ready && !sv->killed_at_start) {
			uint64_t now = now_ns(), end = sv->started_ns + sv->start_timeout_ns;
			timeout = now >= end ? 0 : (int)((end - now + 999999) / 1000000);
		}
		if (poll(fds, sv->ctl_fd >= 0 ? 2 : 1, timeout) < 0 && errno != EINTR)
			return -errno;
		if (sv->ctl_fd >= 0 && (fds[1].revents & (POLLIN | POLLHUP)))
			read_ctl(sv);
		if (sv->child && !sv->ready && !sv->killed_at_start &&
		    now_ns() - sv->started_ns >= sv->start_timeout_ns) {
			/* Its death (SIGCHLD) is then a failed start: counted toward the bound, or
			 * a reload's rolled back. */
			util_log(UTIL_LOG_ERROR,
			         "%sserving process %ld did not serve within %" PRIu64 " s: killed",
			         sv->tried_exe >= 0 ? "reload: the new " : "", (long)sv->child,
			         (uint64_t)(sv->start_timeout_ns / 1000000000ULL));
			sv->killed_at_start = true;
			kill(sv->child, SIGKILL);
		}
		if (!(fds[0].revents & POLLIN))
			continue;
		struct signalfd_siginfo info;
		if (read(sig_fd, &info, sizeof(info)) != sizeof(info))
			continue;
		if (info.ssi_signo == SIGCHLD) {
			int status;
			pid_t pid;
			while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
				int end = pid == sv->child ? child_ended(sv, status) : 0;
				if (end)
					return end == 1 ? 0 : -EIO;
			}
			write_state(sv);
		} else if (info.ssi_signo == SIGUSR2) {
			start_reload(sv);
		} else if (info.ssi_signo == SIGUSR1) {
			util_log_reopen();
			/* Before it says it serves, its handler may not be there yet: the default
			 * action would kill it. */
			if (sv->child && sv->ready)
				kill(sv->child, SIGUSR1);
		} else {
			/* SIGTERM, SIGINT, SIGHUP: a stop; the serving process unmounts. */
			sv->stopping = true;
			if (!sv->child)
				return 0;
			kill(sv->child, SIGTERM);
		}
	}
}

void daemon_supervisor_signals(sigset_t *set)
{
	static const int taken[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2};

	sigemptyset(set);
	for (size_t i = 0; i < sizeof(taken) / sizeof(taken[0]); i++)
		sigaddset(set, taken[i]);
}

void daemon_supervision_read(const struct fs_session *s, struct daemon_supervision *out)
{
	long sup = 0, serving = 0;
	unsigned long long restarts = 0, reloads = 0, generation = 0, failed = 0;
	int fd = s->daemon.run_dir_fd >= 0
	             ? openat(s->daemon.run_dir_fd, "supervisor", O_RDONLY | O_CLOEXEC)
	             : -1;
	FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;

	memset(out, 0, sizeof(*out));
	if (f && fscanf(f,
	                "{\"supervisor_pid\":%ld,\"serving_pid\":%ld,\"restarts\":%llu,"
	                "\"reloads\":%llu,\"generation\":%llu,\"reloads_failed\":%llu}",
	                &sup, &serving, &restarts, &reloads, &generation, &failed) == 6) {
		out->restarts = restarts;
		out->reloads = reloads;
		out->reloads_failed = failed;
	}
	if (f)
		fclose(f);
	else if (fd >= 0)
		close(fd);
	/* Its parent, whether or not it has written its file yet (a moment after the mount);
	 * once the supervisor died, the parent is init or a subreaper, never named as it. */
	if (s->daemon.ctl_fd >= 0 && (sup <= 0 || getppid() == (pid_t)sup))
		out->supervisor_pid = (uint64_t)getppid();
}

int daemon_supervisor_main(int argc, char **argv)
{
	struct supervisor sv = {.dev_fd = 3, .args_fd = 4, .ctl_fd = 5, .tried_exe = -1};
	sigset_t sigs;
	int sig_fd, rc;

	if (argc < 3)
		return 2;
	sv.child = (pid_t)strtol(argv[2], NULL, 10);
	sv.shown = argv; /* a child's copy of it is changed, never ours */
	sv.running_exe = 6;
	fcntl(3, F_SETFD, FD_CLOEXEC);
	fcntl(4, F_SETFD, FD_CLOEXEC);
	fcntl(5, F_SETFD, FD_CLOEXEC);
	fcntl(6, F_SETFD, FD_CLOEXEC);
	fcntl(DAEMON_RUN_FD_LEDGER, F_SETFD, FD_CLOEXEC);
	fcntl(DAEMON_RUN_FD_LOCK, F_SETFD, FD_CLOEXEC);     /* held, never used: run_dir.c */
	fcntl(DAEMON_RUN_FD_COUNTERS, F_SETFD, FD_CLOEXEC); /* held, for the serving processes */
	if (util_strings_read(sv.args_fd, &sv.strings, &sv.n_strings) != 0 ||
	    sv.n_strings < DAEMON_RUN_ARGV)
		return 2;
	sv.start_timeout_ns = 30 * 1000000000ULL; /* unless the command line says */
	options_setup(&sv);
	sv.started_ns = now_ns(); /* the first child's start: bounded from here */
	util_restarts_init(&sv.restarts, MAX_FAILED_STARTS, MAX_RESTARTS, RESTART_WINDOW_S);
	daemon_supervisor_signals(&sigs);
	sigprocmask(SIG_BLOCK, &sigs, NULL);
	sig_fd = signalfd(-1, &sigs, SFD_CLOEXEC);
	if (sig_fd < 0)
		return 1;
	write_state(&sv);
	/* The first child may have ended before the mask was set: look once, after reading
	 * whether it said it serves (else a death of a child that served, before this
	 * process got here, counted as a failed start). */
	struct pollfd said = {.fd = sv.ctl_fd, .events = POLLIN};
	if (poll(&said, 1, 0) == 1 && (said.revents & (POLLIN | POLLHUP)))
		read_ctl(&sv);
	int status, end = 0;
	if (waitpid(sv.child, &status, WNOHANG) == sv.child)
		end = child_ended(&sv, status);
	rc = end == 1 ? 0 : end == 2 ? -EIO : loop(&sv, sig_fd);
	if (sv.child) {
		/* Out of the loop with a child: an error here; it must not outlive us. */
		kill(sv.child, SIGKILL);
		waitpid(sv.child, NULL, 0);
	}
	unmount(&sv);
	util_remove_tree(AT_FDCWD, sv.strings[DAEMON_RUN_DIR]);
	util_strings_free(sv.strings, sv.n_strings);
	close(sig_fd);
	return rc == 0 ? 0 : 1;
}

/*
 * The session's device I/O, through libfuse's custom-io hooks, and what lets a serving
 * process take over a connection another one started (doc/survive.md).
 *
 * The kernel answers INIT once per connection; libfuse 3.14 serves nothing before it has
 * seen one (every request gets EIO). So the first serving process records the INIT
 * request and the reply that went out (run directory, file "init"), and each later one
 * replays it: its first read returns the recorded request, and libfuse's reply to it is
 * dropped, never written. Other reads wait until then, or a request read meanwhile would
 * meet libfuse before its INIT. If the kernel resends a real INIT (its first process died
 * after recording and before replying), the recorded reply answers it.
 *
 * Requests the dead process had read and not answered stay in the kernel's processing
 * list; FUSE_NOTIFY_RESEND (Linux 6.9, offered in INIT as FUSE_HAS_RESEND) moves them back
 * to the pending list, and the new process sends it before it reads anything.
 *
 * INIT's passthrough amendment stays in passthrough.c (fs_passthrough_note_init, ...).
 *
 * Lock: handover.lock guards the replay's state and its wait; the recorded bytes are
 * written once before the loop starts (later processes) or by the one thread that replies
 * to INIT (the first), before any other request is read.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fs/passthrough.h"
#include "fs/session.h"
#include "util/log.h"

/* From the kernel's FUSE protocol 7.40; Debian 12's headers stop at 7.38. */
#ifndef FUSE_HAS_RESEND
#define FUSE_HAS_RESEND (1ULL << 39)
#define FUSE_NOTIFY_RESEND 7
#endif
#define RESEND_FLAG2 ((uint32_t)(FUSE_HAS_RESEND >> 32))

#define INIT_FILE "init"
#define INIT_MAX 4096

enum replay { REPLAY_NONE, REPLAY_PENDING, REPLAY_RUNNING, REPLAY_DONE };

/* Whether the INIT request offers resend, as this kernel sent it. */
static bool offers_resend(const void *req, size_t len)
{
	const struct fuse_in_header *in = req;
	const struct fuse_init_in *init = (const void *)(in + 1);

	if (getenv("SPOOLFS_TEST_NO_RESEND")) /* tests: the path of kernels before 6.9 */
		return false;
	return len >= sizeof(*in) + sizeof(*init) && init->major == 7 &&
	       (init->flags & FUSE_INIT_EXT) && (init->flags2 & RESEND_FLAG2);
}

/* Tells the supervisor this process serves: 'R' when the kernel can resend, else 'N'. */
static void say_ready(struct fs_session *s)
{
	char c = s->handover.init_resend ? 'R' : 'N';

	if (s->daemon.ctl_fd >= 0 && write(s->daemon.ctl_fd, &c, 1) != 1)
		util_log(UTIL_LOG_WARN, "cannot tell the supervisor this process serves: %s",
		         strerror(errno));
}

/* Writes the INIT exchange beside the namespace: tmp then rename, whole or not at all. */
static void record_init(struct fs_session *s, const struct iovec *iov, int count)
{
	uint32_t req_len = (uint32_t)s->handover.init_req_len, reply_len = 0;
	char tmp[] = INIT_FILE ".tmp";
	int fd;

	for (int i = 0; i < count; i++)
		reply_len += (uint32_t)iov[i].iov_len;
	if (s->daemon.run_dir_fd < 0 || reply_len > INIT_MAX)
		return;
	fd = openat(s->daemon.run_dir_fd, tmp,
	            O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		goto fail;
	struct iovec parts[3 + 8] = {{&req_len, sizeof(req_len)},
	                             {s->handover.init_req, s->handover.init_req_len},
	                             {&reply_len, sizeof(reply_len)}};
	ssize_t want = (ssize_t)(sizeof(req_len) + req_len + sizeof(reply_len) + reply_len);
	for (int i = 0; i < count && i < 8; i++)
		parts[3 + i] = iov[i];
	if (count > 8 || writev(fd, parts, 3 + count) != want) {
		close(fd);
		goto fail;
	}
	close(fd);
	if (renameat(s->daemon.run_dir_fd, tmp, s->daemon.run_dir_fd, INIT_FILE) == 0)
		return;
fail:
	util_log(UTIL_LOG_WARN, "cannot record INIT for a restart: %s", strerror(errno));
}

int fs_handover_load(struct fs_session *s)
{
	unsigned char buf[2 * INIT_MAX + 8];
	uint32_t req_len, reply_len;
	ssize_t n;
	int fd = openat(s->daemon.run_dir_fd, INIT_FILE, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0)
		return -errno; /* the first process died before INIT: the kernel resends it */
	n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n < 8)
		return -EINVAL;
	memcpy(&req_len, buf, 4);
	if (req_len < sizeof(struct fuse_in_header) || req_len > INIT_MAX ||
	    (size_t)n < 8 + req_len)
		return -EINVAL;
	memcpy(&reply_len, buf + 4 + req_len, 4);
	if (reply_len < sizeof(struct fuse_out_header) || reply_len > INIT_MAX ||
	    (size_t)n != 8 + req_len + reply_len)
		return -EINVAL;
	s->handover.init_req = malloc(req_len);
	s->handover.init_reply = malloc(reply_len);
	if (!s->handover.init_req || !s->handover.init_reply)
		return -ENOMEM;
	memcpy(s->handover.init_req, buf + 4, req_len);
	memcpy(s->handover.init_reply, buf + 8 + req_len, reply_len);
	s->handover.init_req_len = req_len;
	s->handover.init_reply_len = reply_len;
	s->handover.init_unique = ((const struct fuse_in_header *)s->handover.init_req)->unique;
	s->handover.init_resend = offers_resend(s->handover.init_req, req_len);
	atomic_store(&s->handover.replay, REPLAY_PENDING);
	return 0;
}

int fs_handover_resend(struct fs_session *s)
{
	struct fuse_out_header out = {.len = sizeof(out), .error = FUSE_NOTIFY_RESEND};

	if (!s->handover.init_resend)
		return 0;
	return write(fuse_session_fd(s->se), &out, sizeof(out)) == (ssize_t)sizeof(out) ? 0
	                                                                                : -errno;
}

/* Answers a real INIT the kernel resent, with the reply the kernel got nothing of. */
static void answer_resent_init(struct fs_session *s, int fd, uint64_t unique)
{
	struct fuse_out_header *out = (struct fuse_out_header *)s->handover.init_reply;

	out->unique = unique;
	if (write(fd, s->handover.init_reply, s->handover.init_reply_len) !=
	    (ssize_t)s->handover.init_reply_len)
		util_log(UTIL_LOG_WARN, "cannot answer the resent INIT: %s", strerror(errno));
}

static void unlock_handover(void *lock)
{
	pthread_mutex_unlock(lock);
}

/*
 * Until the replayed INIT went through libfuse, other readers wait. This runs in libfuse's
 * read, where its workers can be cancelled (a stop cancels every worker at the end of the
 * loop), and pthread_cond_wait is a cancellation point that returns to the handler with
 * the mutex held: without the handler, a stop during the replay left handover.lock locked
 * by a dead thread, and the replaying worker hung on it in device_writev, the stop with it.
 */
static void wait_replayed(struct fs_session *s)
{
	pthread_mutex_lock(&s->handover.lock);
	pthread_cleanup_push(unlock_handover, &s->handover.lock);
	while (atomic_load(&s->handover.replay) != REPLAY_DONE)
		pthread_cond_wait(&s->handover.cond, &s->handover.lock);
	pthread_cleanup_pop(1);
}

/* Tests: the replay's reply waits here until the FIFO named by SPOOLFS_TEST_REPLAY_GATE is
 * opened for writing and closed again (a gate the test holds). */
static void test_replay_gate(void)
{
	const char *path = getenv("SPOOLFS_TEST_REPLAY_GATE");
	char c;
	ssize_t n;
	int fd;

	if (!path)
		return;
	do
		fd = open(path, O_RDONLY | O_CLOEXEC);
	while (fd < 0 && errno == EINTR);
	if (fd < 0)
		return;
	do
		n = read(fd, &c, 1);
	while (n > 0 || (n < 0 && errno == EINTR));
	close(fd);
}

static ssize_t device_read(int fd, void *buf, size_t len, void *userdata)
{
	struct fs_session *s = userdata;
	int expected = REPLAY_PENDING;

	if (atomic_load(&s->handover.replay) != REPLAY_NONE &&
	    atomic_load(&s->handover.replay) != REPLAY_DONE) {
		if (atomic_compare_exchange_strong(&s->handover.replay, &expected,
		                                   REPLAY_RUNNING) &&
		    len >= s->handover.init_req_len) {
			memcpy(buf, s->handover.init_req, s->handover.init_req_len);
			return (ssize_t)s->handover.init_req_len;
		}
		wait_replayed(s);
	}
	for (;;) {
		ssize_t n = read(fd, buf, len);
		const struct fuse_in_header *in = buf;

		if (n < (ssize_t)sizeof(*in) || in->opcode != FUSE_INIT)
			return n;
		if (atomic_load(&s->handover.replay) == REPLAY_DONE) {
			answer_resent_init(s, fd, in->unique);
			continue;
		}
		/* The first process: this is the connection's INIT. */
		free(s->handover.init_req);
		s->handover.init_req = malloc((size_t)n);
		s->handover.init_req_len = s->handover.init_req ? (size_t)n : 0;
		if (s->handover.init_req)
			memcpy(s->handover.init_req, buf, (size_t)n);
		s->handover.init_unique = in->unique;
		s->handover.init_resend = offers_resend(buf, (size_t)n);
		fs_passthrough_note_init(s, buf, (size_t)n);
		atomic_store(&s->handover.init_seen, true);
		return n;
	}
}

static ssize_t device_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	struct fs_session *s = userdata;
	const struct fuse_out_header *out = count ? iov[0].iov_base : NULL;
	ssize_t total = 0, n;

	/* The atomics first: they order init_unique's write (the reading thread) before us. */
	if ((!atomic_load(&s->handover.init_seen) &&
	     atomic_load(&s->handover.replay) != REPLAY_RUNNING) ||
	    !out || iov[0].iov_len < sizeof(*out) || out->unique != s->handover.init_unique)
		return writev(fd, iov, count);
	if (atomic_load(&s->handover.replay) == REPLAY_RUNNING) {
		/* The kernel had its reply from the first process: this one is dropped. */
		for (int i = 0; i < count; i++)
			total += (ssize_t)iov[i].iov_len;
		test_replay_gate();
		pthread_mutex_lock(&s->handover.lock);
		atomic_store(&s->handover.replay, REPLAY_DONE);
		pthread_cond_broadcast(&s->handover.cond);
		pthread_mutex_unlock(&s->handover.lock);
		say_ready(s);
		return total;
	}
	atomic_store(&s->handover.init_seen, false); /* one INIT per connection */
	fs_passthrough_amend_init(s, iov, count);
	if (s->handover.init_req && out->error == 0)
		record_init(s, iov, count);
	n = writev(fd, iov, count);
	if (n >= 0)
		say_ready(s);
	return n;
}

static ssize_t device_splice(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
                             unsigned int flags, void *userdata)
{
	(void)userdata;
	return splice(fdin, offin, fdout, offout, len, flags);
}

int fs_handover_install(struct fs_session *s)
{
	/* No splice_receive: requests are read, as without custom io (no write_buf op). */
	static const struct fuse_custom_io io = {
	    .read = device_read,
	    .writev = device_writev,
	    .splice_send = device_splice,
	};

	return fuse_session_custom_io(s->se, &io, fuse_session_fd(s->se));
}

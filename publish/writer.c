/*
 * A large object's writes, on a thread of their own: the job's thread reads the source
 * into one of WRITER_BUFS buffers and hands it over, and hashes it while the writer thread
 * writes the same bytes (both only read the buffer; the job's thread fills a buffer again
 * only WRITER_BUFS - 1 buffers later, once the writer gave it back). The write into the
 * page cache (0.4 s of system time per GiB on the benchmark VM) then overlaps the hash
 * (0.6 s per GiB) instead of adding to it.
 *
 * Lock: pub_writer.lock guards the queue (head, queued, len), done and error. The sink
 * belongs to the writer thread from pub_writer_start to pub_writer_stop.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "publish/publish_i.h"
#include "util/thread.h"

#define WRITER_BUFS 4

struct pub_writer {
	pthread_t thread;
	struct pub_sink *sink;
	unsigned char *bufs[WRITER_BUFS]; /* PUB_COPY_BUF bytes each */
	pthread_mutex_t lock;
	pthread_cond_t changed;
	/* Guarded by lock. */
	size_t len[WRITER_BUFS];
	unsigned head, queued; /* the next buffer to write; how many wait */
	bool done;             /* nothing more will be queued */
	int error;             /* the first failed write; later buffers are dropped */
};

static int write_all(int fd, const unsigned char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int pub_sink_write(struct pub_sink *s, const unsigned char *p, size_t n)
{
	int rc = write_all(s->fd, p, n);

	if (rc)
		return rc;
	s->written += n;
	if (s->written - s->written_back < PUB_WRITEBACK)
		return 0;
	/* Starts the disk on what was gathered since; waits for the stretch before, written by
	 * now, and drops it from the page cache (see PUB_WRITEBACK). */
	sync_file_range(s->fd, (off_t)s->written_back, (off_t)(s->written - s->written_back),
	                SYNC_FILE_RANGE_WRITE);
	if (s->written_back >= PUB_WRITEBACK) {
		off_t prev = (off_t)(s->written_back - PUB_WRITEBACK);
		sync_file_range(s->fd, prev, PUB_WRITEBACK,
		                SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
		                    SYNC_FILE_RANGE_WAIT_AFTER);
		posix_fadvise(s->fd, prev, PUB_WRITEBACK, POSIX_FADV_DONTNEED);
	}
	s->written_back = s->written;
	return 0;
}

static void *writer_main(void *arg)
{
	struct pub_writer *w = arg;

	pthread_mutex_lock(&w->lock);
	for (;;) {
		while (!w->queued && !w->done)
			pthread_cond_wait(&w->changed, &w->lock);
		if (!w->queued)
			break;
		unsigned i = w->head;
		size_t n = w->len[i];
		int rc = 0;
		if (!w->error) {
			pthread_mutex_unlock(&w->lock);
			rc = pub_sink_write(w->sink, w->bufs[i], n);
			pthread_mutex_lock(&w->lock);
		}
		if (rc && !w->error)
			w->error = rc;
		w->head = (i + 1) % WRITER_BUFS;
		w->queued--;
		pthread_cond_broadcast(&w->changed);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

int pub_writer_start(struct pub_sink *sink, struct pub_writer **out)
{
	struct pub_writer *w = calloc(1, sizeof(*w));
	int rc = -ENOMEM;

	*out = NULL;
	if (!w)
		return -ENOMEM;
	w->sink = sink;
	for (unsigned i = 0; i < WRITER_BUFS; i++)
		if (!(w->bufs[i] = malloc(PUB_COPY_BUF)))
			goto fail;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->changed, NULL);
	rc = util_thread_start(&w->thread, "publish-write", writer_main, w);
	if (rc) {
		pthread_cond_destroy(&w->changed);
		pthread_mutex_destroy(&w->lock);
		goto fail;
	}
	*out = w;
	return 0;
fail:
	for (unsigned i = 0; i < WRITER_BUFS; i++)
		free(w->bufs[i]);
	free(w);
	return rc;
}

unsigned char *pub_writer_buffer(struct pub_writer *w, int *error)
{
	unsigned char *buf = NULL;

	pthread_mutex_lock(&w->lock);
	while (w->queued == WRITER_BUFS && !w->error)
		pthread_cond_wait(&w->changed, &w->lock);
	*error = w->error;
	if (!w->error)
		buf = w->bufs[(w->head + w->queued) % WRITER_BUFS];
	pthread_mutex_unlock(&w->lock);
	return buf;
}

void pub_writer_queue(struct pub_writer *w, size_t n)
{
	pthread_mutex_lock(&w->lock);
	w->len[(w->head + w->queued) % WRITER_BUFS] = n;
	w->queued++;
	pthread_cond_broadcast(&w->changed);
	pthread_mutex_unlock(&w->lock);
}

int pub_writer_stop(struct pub_writer *w)
{
	int rc;

	if (!w)
		return 0;
	pthread_mutex_lock(&w->lock);
	w->done = true;
	pthread_cond_broadcast(&w->changed);
	pthread_mutex_unlock(&w->lock);
	pthread_join(w->thread, NULL);
	rc = w->error;
	pthread_cond_destroy(&w->changed);
	pthread_mutex_destroy(&w->lock);
	for (unsigned i = 0; i < WRITER_BUFS; i++)
		free(w->bufs[i]);
	free(w);
	return rc;
}

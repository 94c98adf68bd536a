/*
 * The engine suites' HTTP server (srv.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "srv.h"

#define KIB (1024u)

struct conn {
	struct srv *s;
	int fd;
};

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int send_all(int fd, const void *p, size_t len)
{
	const char *c = p;

	while (len > 0) {
		ssize_t n = send(fd, c, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		c += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Parses "bytes=A-B" or "bytes=A-" from the request head into [start, end). */
static void parse_range(const char *head, uint64_t size, uint64_t *start, uint64_t *end,
                        bool *ranged)
{
	const char *p = head;

	*start = 0;
	*end = size;
	*ranged = false;
	while ((p = strchr(p, '\n')) != NULL) {
		p++;
		if (strncasecmp(p, "Range: bytes=", 13) == 0) {
			char *rest;
			*start = strtoull(p + 13, &rest, 10);
			if (*rest == '-' && rest[1] >= '0' && rest[1] <= '9')
				*end = strtoull(rest + 1, NULL, 10) + 1;
			if (*end > size)
				*end = size;
			*ranged = true;
			return;
		}
	}
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* With a rate, waits for n bytes' slot of it: all responses share the rate. */
static void pace(struct srv *s, uint64_t n)
{
	uint64_t now = mono_ns(), at;

	pthread_mutex_lock(&s->lock);
	if (!s->rate) {
		pthread_mutex_unlock(&s->lock);
		return;
	}
	at = s->next_ns > now ? s->next_ns : now;
	s->next_ns = at + n * 1000000000u / s->rate;
	pthread_mutex_unlock(&s->lock);
	if (at > now) {
		struct timespec ts = {.tv_sec = (time_t)((at - now) / 1000000000u),
		                      .tv_nsec = (long)((at - now) % 1000000000u)};
		nanosleep(&ts, NULL);
	}
}

/* Sends body[from, to), pausing at hold_at when this response is the one to hold. */
static int send_body(struct srv *s, int fd, uint64_t from, uint64_t to)
{
	uint64_t pos = from;

	while (pos < to) {
		uint64_t stop = to;
		pthread_mutex_lock(&s->lock);
		bool hold = s->hold_at > pos && s->hold_at < to && !s->held;
		bool cut = s->cut_at > pos && s->cut_at < to && !s->cut;
		if (hold)
			stop = s->hold_at;
		if (cut && s->cut_at < stop)
			stop = s->cut_at;
		else
			cut = false;
		pthread_mutex_unlock(&s->lock);
		uint64_t n = stop - pos < 64 * KIB ? stop - pos : 64 * KIB;
		pace(s, n);
		if (send_all(fd, s->body + pos, n) != 0)
			return -1;
		pos += n;
		pthread_mutex_lock(&s->lock);
		s->bytes_sent += n;
		if (cut && pos == stop) {
			s->cut = true; /* the connection closes short of its Content-Length */
			pthread_cond_broadcast(&s->cond);
			pthread_mutex_unlock(&s->lock);
			return -1;
		}
		if (hold && pos == stop) {
			s->held = true;
			pthread_cond_broadcast(&s->cond);
			while (!s->released && !s->stopping)
				pthread_cond_wait(&s->cond, &s->lock);
		}
		pthread_mutex_unlock(&s->lock);
	}
	return 0;
}

static void *conn_main(void *arg)
{
	struct conn *c = arg;
	struct srv *s = c->s;
	char head[8192], out[512], header[sizeof(s->header)];
	size_t got = 0;
	uint64_t start, end;
	bool ranged;
	int status;

	while (got < sizeof(head) - 1) {
		ssize_t n = recv(c->fd, head + got, sizeof(head) - 1 - got, 0);
		if (n <= 0)
			goto out;
		got += (size_t)n;
		head[got] = '\0';
		if (strstr(head, "\r\n\r\n"))
			break;
	}
	parse_range(head, s->size, &start, &end, &ranged);
	pthread_mutex_lock(&s->lock);
	status = s->fail_count ? s->fail_status : ranged && !s->ignore_range ? 206 : 200;
	if (status == 206 && s->cap_range && end - start > s->cap_range)
		end = start + s->cap_range;
	if (s->fail_count)
		s->fail_count--;
	if (s->n_requests < SRV_MAX_REQUESTS)
		s->requests[s->n_requests] = (struct srv_request){
		    .start = start, .end = end, .status = status, .at_ms = mono_ms()};
	s->n_requests++;
	memcpy(header, s->header, sizeof(header));
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);

	if (status >= 400) {
		snprintf(out, sizeof(out),
		         "HTTP/1.1 %d Failed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
		         status);
		send_all(c->fd, out, strlen(out));
	} else if (status == 206) {
		snprintf(out, sizeof(out),
		         "HTTP/1.1 206 Partial Content\r\nContent-Length: %llu\r\n"
		         "Content-Range: bytes %llu-%llu/%llu\r\nETag: \"v1\"\r\n"
		         "%sConnection: close\r\n\r\n",
		         (unsigned long long)(end - start), (unsigned long long)start,
		         (unsigned long long)end - 1, (unsigned long long)s->size, header);
		if (send_all(c->fd, out, strlen(out)) == 0)
			send_body(s, c->fd, start, end);
	} else {
		snprintf(out, sizeof(out),
		         "HTTP/1.1 200 OK\r\nContent-Length: %llu\r\nETag: \"v1\"\r\n"
		         "%sConnection: close\r\n\r\n",
		         (unsigned long long)s->size, header);
		if (send_all(c->fd, out, strlen(out)) == 0)
			send_body(s, c->fd, 0, s->size);
	}
out:
	close(c->fd);
	free(c);
	return NULL;
}

static void *acceptor_main(void *arg)
{
	struct srv *s = arg;

	for (;;) {
		int fd = accept(s->listen_fd, NULL, NULL);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return NULL; /* shut down */
		}
		struct conn *c = malloc(sizeof(*c));
		pthread_mutex_lock(&s->lock);
		bool room = c && s->n_conns < SRV_MAX_CONNS && !s->stopping;
		if (room) {
			*c = (struct conn){.s = s, .fd = fd};
			room = pthread_create(&s->conns[s->n_conns], NULL, conn_main, c) == 0;
			if (room)
				s->n_conns++;
		}
		pthread_mutex_unlock(&s->lock);
		if (!room) {
			free(c);
			close(fd);
		}
	}
}

void srv_start(struct srv *s, const uint8_t *body, uint64_t size)
{
	struct sockaddr_in addr = {.sin_family = AF_INET,
	                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof(addr);

	memset(s, 0, sizeof(*s));
	s->body = body;
	s->size = size;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	s->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(s->listen_fd >= 0);
	assert_int_equal(bind(s->listen_fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	assert_int_equal(listen(s->listen_fd, 64), 0);
	assert_int_equal(getsockname(s->listen_fd, (struct sockaddr *)&addr, &alen), 0);
	s->port = ntohs(addr.sin_port);
	assert_int_equal(pthread_create(&s->acceptor, NULL, acceptor_main, s), 0);
}

void srv_stop(struct srv *s)
{
	pthread_mutex_lock(&s->lock);
	s->stopping = true;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	shutdown(s->listen_fd, SHUT_RDWR); /* wakes accept */
	pthread_join(s->acceptor, NULL);
	close(s->listen_fd);
	/* No new connection now: the list is the acceptor's last word. */
	for (unsigned i = 0; i < s->n_conns; i++)
		pthread_join(s->conns[i], NULL);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
}

void srv_fail_next(struct srv *s, unsigned count, int status)
{
	pthread_mutex_lock(&s->lock);
	s->fail_count = count;
	s->fail_status = status;
	pthread_mutex_unlock(&s->lock);
}

void srv_hold_at(struct srv *s, uint64_t at)
{
	pthread_mutex_lock(&s->lock);
	s->hold_at = at;
	pthread_mutex_unlock(&s->lock);
}

void srv_wait_held(struct srv *s)
{
	pthread_mutex_lock(&s->lock);
	while (!s->held)
		pthread_cond_wait(&s->cond, &s->lock);
	pthread_mutex_unlock(&s->lock);
}

void srv_release(struct srv *s)
{
	pthread_mutex_lock(&s->lock);
	s->released = true;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

/* A copy of what the server saw, taken under its lock. */
unsigned srv_requests(struct srv *s, struct srv_request *out)
{
	unsigned n;

	pthread_mutex_lock(&s->lock);
	n = s->n_requests < SRV_MAX_REQUESTS ? s->n_requests : SRV_MAX_REQUESTS;
	memcpy(out, s->requests, n * sizeof(*out));
	n = s->n_requests;
	pthread_mutex_unlock(&s->lock);
	return n;
}

uint64_t srv_bytes_sent(struct srv *s)
{
	uint64_t n;

	pthread_mutex_lock(&s->lock);
	n = s->bytes_sent;
	pthread_mutex_unlock(&s->lock);
	return n;
}

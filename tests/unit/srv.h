/*
 * A small HTTP/1.1 server for the engine suites (test_engine.c, test_compressed.c), on
 * 127.0.0.1 in a thread of its own: one thread per connection, one request per connection,
 * Range support. It answers in microseconds, needs no Python process per case, and lets a
 * case hold a response at a byte offset, fail the next N requests, ignore Range, or cut one
 * response after some body bytes, under the test's own lock, so events are ordered with its
 * condition variable instead of polling another process's stats.
 */
#ifndef SPOOLFS_TESTS_SRV_H
#define SPOOLFS_TESTS_SRV_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define SRV_MAX_REQUESTS 64
#define SRV_MAX_CONNS 1024

struct srv_request {
	uint64_t start, end; /* the asked range, end exclusive */
	int status;
	uint64_t at_ms; /* CLOCK_MONOTONIC when it arrived */
};

struct srv {
	int listen_fd;
	uint16_t port;
	pthread_t acceptor;
	const uint8_t *body;
	uint64_t size;

	pthread_mutex_t lock;
	pthread_cond_t cond;
	/* Guarded by lock. */
	bool stopping;
	unsigned fail_count; /* the next fail_count requests get fail_status */
	int fail_status;
	uint64_t hold_at; /* 0 = none; else the first body to reach it pauses until released */
	bool held;        /* a response is paused at hold_at */
	bool released;
	bool ignore_range;  /* answer every request 200 with the whole body */
	char header[128];   /* "" = none; else one more header line, "\r\n" included */
	uint64_t cap_range; /* 0 = none; else a 206 carries at most this many bytes */
	uint64_t cut_at;    /* 0 = none; else the first body to reach it is cut there (once) */
	bool cut;
	uint64_t rate;    /* 0 = none; else body bytes per second, over all responses */
	uint64_t next_ns; /* when the next body bytes may go, with a rate */
	unsigned n_requests;
	struct srv_request requests[SRV_MAX_REQUESTS];
	uint64_t bytes_sent;
	pthread_t conns[SRV_MAX_CONNS];
	unsigned n_conns;
};

/* Serves body (size bytes, kept by the caller) on a port of its own (s->port). */
void srv_start(struct srv *s, const uint8_t *body, uint64_t size);
void srv_stop(struct srv *s);
void srv_fail_next(struct srv *s, unsigned count, int status);
void srv_hold_at(struct srv *s, uint64_t at);
void srv_wait_held(struct srv *s);
void srv_release(struct srv *s);
/* A copy of what the server saw (up to SRV_MAX_REQUESTS), taken under its lock; returns
 * how many requests came. */
unsigned srv_requests(struct srv *s, struct srv_request *out);
/* Body bytes sent so far. */
uint64_t srv_bytes_sent(struct srv *s);

#endif

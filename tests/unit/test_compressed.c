/*
 * Unit tests for compressed objects in the transfer engine (fetch/engine/unframe.c,
 * frames.c, and the frame units of stream.c and schedule.c), against the suites' HTTP
 * server (srv.h) serving the stored bytes: zstd frames made here with libzstd, one per
 * FRAME bytes of the object, as doc/manifest.md's version 3 says. Each case joins a flight
 * with the frame table, parks readers as fs/ does and checks the spool, the waiters'
 * answers, the requests the server saw (in stored bytes) and the counters.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "fetch/engine/engine.h"
#include "fetch/engine/flight.h"
#include "fetch/engine/zframe.h"
#include "fetch/engine/flight_i.h" /* white-box: wire_bytes */
#include "helpers.h"
#include "srv.h"

#define KIB (1024u)
#define MIB (1024u * 1024u)
#define FRAME (64 * KIB)

/* What a bad frame is made of (make_store). */
enum bad_kind {
	BAD_NONE,
	BAD_SHORT,       /* a valid frame of one byte less than its share */
	BAD_LONG,        /* a valid frame of one byte more */
	BAD_BOMB,        /* 1 GiB of zeros, no size declared, a 64 KiB window */
	BAD_GARBAGE,     /* not zstd */
	BAD_TRUNCATED,   /* the frame's last bytes cut: the table says it ends earlier */
	GOOD_UNDECLARED, /* a right frame that declares no size (streamed), with a checksum */
};

struct fixture {
	char dir[64];
	int dirfd;
	struct flight_table *table;
	struct engine *engine;
	struct engine_config cfg;
	struct srv srv;
	uint8_t *raw; /* the object */
	uint64_t size;
	uint8_t *stored; /* what the server serves */
	uint64_t stored_size;
	uint32_t *frame_stored;
	uint64_t n_frames;
	uint64_t frame; /* the frame size: FRAME unless a case sets another before make_store */
	char url[128];
	char log_path[96];
	int saved_stderr;
	struct test_waiter w[4];
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned completed; /* flights completed (on_complete); guarded by lock */
};

/* A chunked flight completes on a pool thread after its last reader was answered. */
static void count_complete(void *ctx, struct flight *f)
{
	struct fixture *fx = ctx;

	(void)f;
	pthread_mutex_lock(&fx->lock);
	fx->completed++;
	pthread_cond_broadcast(&fx->cond);
	pthread_mutex_unlock(&fx->lock);
}

static void wait_complete(struct fixture *fx)
{
	pthread_mutex_lock(&fx->lock);
	while (fx->completed == 0)
		pthread_cond_wait(&fx->cond, &fx->lock);
	pthread_mutex_unlock(&fx->lock);
}

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));

	if (!fx)
		return -1;
	fx->saved_stderr = -1;
	pthread_mutex_init(&fx->lock, NULL);
	pthread_cond_init(&fx->cond, NULL);
	fx->dirfd = test_dir_make("compressed", fx->dir, sizeof(fx->dir));
	if (fx->dirfd < 0 || flight_table_create(fx->dirfd, &fx->table) != 0 ||
	    flight_table_start_hasher(fx->table) != 0)
		return -1;
	flight_table_on_complete(fx->table, count_complete, fx);
	engine_config_defaults(&fx->cfg);
	fx->cfg.parallel_parts = 1; /* one request per object unless a reader asks elsewhere */
	fx->cfg.backoff_base_ms = 10;
	fx->cfg.backoff_cap_ms = 50;
	fx->frame = FRAME;
	/* The same cases with every frame decompressed on the transfer thread (ctest's
	 * unit_compressed_inline), which a pool of two threads does otherwise. */
	fx->cfg.unframe_threads = getenv("SPOOLFS_TEST_UNFRAME_INLINE") ? 0 : 2;
	*state = fx;
	return 0;
}

/* The engine's log, captured for the case to check (helpers.h: test_log_begin). */
static void capture_log(struct fixture *fx)
{
	snprintf(fx->log_path, sizeof(fx->log_path), "%s.log", fx->dir);
	test_log_begin(fx->log_path, &fx->saved_stderr);
}

/* What the engine logged since capture_log; stderr is stderr again. */
static char *read_log(struct fixture *fx)
{
	return test_log_end(fx->log_path, &fx->saved_stderr);
}

static int teardown(void **state)
{
	struct fixture *fx = *state;

	if (fx->engine)
		engine_destroy(fx->engine);
	if (fx->table)
		flight_table_destroy(fx->table);
	if (fx->stored)
		srv_stop(&fx->srv);
	if (fx->saved_stderr >= 0)
		fputs(read_log(fx), stderr);
	if (fx->log_path[0])
		unlink(fx->log_path);
	free(fx->raw);
	free(fx->stored);
	free(fx->frame_stored);
	test_dir_remove(fx->dir, fx->dirfd);
	pthread_cond_destroy(&fx->cond);
	pthread_mutex_destroy(&fx->lock);
	free(fx);
	return 0;
}

/* Compressible bytes, not all alike: text-like runs that repeat with changes. */
static uint8_t *make_object(uint64_t size)
{
	uint8_t *data = malloc(size);

	assert_non_null(data);
	for (uint64_t i = 0; i < size; i++)
		data[i] = (uint8_t)('a' + (i % 61) % 26) ^ (uint8_t)((i >> 12) & 7);
	return data;
}

/* 1 GiB of zeros as one frame without a declared size, in a window of the frame's size. */
static size_t make_bomb(uint8_t *out, size_t cap)
{
	ZSTD_CCtx *cctx = ZSTD_createCCtx();
	static const uint8_t zeros[1 << 20];
	ZSTD_outBuffer o = {out, cap, 0};

	assert_non_null(cctx);
	assert_false(ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_windowLog, 16)));
	assert_false(ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 0)));
	for (unsigned i = 0; i < 1024; i++) {
		ZSTD_inBuffer in = {zeros, sizeof(zeros), 0};
		while (in.pos < in.size) {
			assert_true(o.pos < o.size); /* room left, or this would spin */
			assert_false(
			    ZSTD_isError(ZSTD_compressStream2(cctx, &o, &in, ZSTD_e_continue)));
		}
	}
	ZSTD_inBuffer none = {NULL, 0, 0};
	size_t left;
	do {
		left = ZSTD_compressStream2(cctx, &o, &none, ZSTD_e_end);
		assert_false(ZSTD_isError(left));
	} while (left);
	ZSTD_freeCCtx(cctx);
	return o.pos;
}

/* One frame of [src, src + len) at out, or a bad one of the kind; its stored length. */
static size_t make_frame(uint8_t *out, size_t cap, const uint8_t *src, size_t len,
                         enum bad_kind kind)
{
	size_t n;

	switch (kind) {
	case BAD_SHORT:
		n = ZSTD_compress(out, cap, src, len - 1, 3);
		break;
	case BAD_LONG: {
		uint8_t *more = malloc(len + 1);
		assert_non_null(more);
		memcpy(more, src, len);
		more[len] = 'x';
		n = ZSTD_compress(out, cap, more, len + 1, 3);
		free(more);
		break;
	}
	case BAD_BOMB:
		return make_bomb(out, cap);
	case GOOD_UNDECLARED: {
		ZSTD_CCtx *cctx = ZSTD_createCCtx();
		ZSTD_outBuffer o = {out, cap, 0};
		ZSTD_inBuffer in = {src, len, 0};
		assert_non_null(cctx);
		assert_false(ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 0)));
		assert_false(ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1)));
		assert_false(ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_windowLog, 16)));
		assert_false(ZSTD_isError(ZSTD_compressStream2(cctx, &o, &in, ZSTD_e_continue)));
		ZSTD_inBuffer none = {NULL, 0, 0};
		while ((n = ZSTD_compressStream2(cctx, &o, &none, ZSTD_e_end)) != 0)
			assert_false(ZSTD_isError(n));
		ZSTD_freeCCtx(cctx);
		return o.pos;
	}
	case BAD_GARBAGE:
		for (n = 0; n < 1000; n++)
			out[n] = (uint8_t)(n * 37 + 11);
		return n;
	case BAD_TRUNCATED:
		n = ZSTD_compress(out, cap, src, len, 3);
		assert_false(ZSTD_isError(n));
		return n - 7;
	default:
		n = ZSTD_compress(out, cap, src, len, 3);
	}
	assert_false(ZSTD_isError(n));
	return n;
}

/* The object (size bytes), stored as frames with frame `bad` (if not BAD_NONE) spoiled,
 * served; the log captured. */
static void make_store(struct fixture *fx, uint64_t size, uint64_t bad, enum bad_kind kind)
{
	fx->size = size;
	fx->raw = make_object(size);
	fx->n_frames = flight_chunk_count(size, fx->frame);
	fx->frame_stored = calloc(fx->n_frames, sizeof(uint32_t));
	size_t cap = (size_t)fx->n_frames * ZSTD_compressBound(fx->frame) + 1 * MIB;
	fx->stored = malloc(cap);
	assert_non_null(fx->frame_stored);
	assert_non_null(fx->stored);
	for (uint64_t i = 0; i < fx->n_frames; i++) {
		uint64_t lo = i * fx->frame, len = size - lo < fx->frame ? size - lo : fx->frame;
		size_t n = make_frame(fx->stored + fx->stored_size, cap - fx->stored_size,
		                      fx->raw + lo, (size_t)len, i == bad ? kind : BAD_NONE);
		fx->frame_stored[i] = (uint32_t)n;
		fx->stored_size += n;
	}
	srv_start(&fx->srv, fx->stored, fx->stored_size);
	snprintf(fx->url, sizeof(fx->url), "http://127.0.0.1:%u/object.zst", fx->srv.port);
	capture_log(fx);
}

static uint64_t stored_off(const struct fixture *fx, uint64_t frame)
{
	uint64_t off = 0;

	for (uint64_t i = 0; i < frame; i++)
		off += fx->frame_stored[i];
	return off;
}

static void start_engine(struct fixture *fx)
{
	assert_int_equal(engine_create(&fx->cfg, &fx->engine), 0);
	assert_int_equal(engine_start(fx->engine), 0);
}

/* Joins the object's flight; with chunk hashes (frame == chunk) when `chunked`. */
static struct flight *join(struct fixture *fx, bool chunked)
{
	unsigned char *digests = NULL;
	struct flight *f;
	bool created;

	if (chunked) {
		digests = malloc(fx->n_frames * FLIGHT_DIGEST_BYTES);
		assert_non_null(digests);
		for (uint64_t i = 0; i < fx->n_frames; i++) {
			uint64_t lo = i * fx->frame,
			         len = fx->size - lo < fx->frame ? fx->size - lo : fx->frame;
			unsigned int n = 0;
			assert_int_equal(EVP_Digest(fx->raw + lo, len,
			                            digests + i * FLIGHT_DIGEST_BYTES, &n,
			                            EVP_sha256(), NULL),
			                 1);
		}
	}
	struct flight_spec spec = {
	    .key = "url:compressed",
	    .url = fx->url,
	    .sha256 = "",
	    .name = "/object",
	    .size = fx->size,
	    .ino = 2,
	    .chunk_size = chunked ? fx->frame : 0,
	    .chunk_digests = digests,
	    .frame_size = fx->frame,
	    .frame_stored = fx->frame_stored,
	    .stored_size = fx->stored_size,
	};
	assert_int_equal(flight_table_join(fx->table, &spec, &f, &created), 0);
	assert_true(created);
	free(digests);
	return f;
}

/* A read as fs/ops.c does one: notes it, parks w, kicks. Returns flight_park's answer. */
static int read_at(struct fixture *fx, struct flight *f, struct test_waiter *w)
{
	if (flight_note_read(f, w->w.off, w->w.len))
		engine_kick(fx->engine, f);
	int rc = flight_park(f, &w->w);
	engine_kick(fx->engine, f);
	return rc;
}

/* Reads [off, off + len) with waiter w: 0 once readable, else its error. */
static int read_wait(struct fixture *fx, struct flight *f, struct test_waiter *w, uint64_t off,
                     uint64_t len)
{
	test_waiter_init(w, off, len);
	int rc = read_at(fx, f, w);
	if (rc == 0)
		return test_waiter_wait(w);
	return rc == 1 ? 0 : rc;
}

static void check_spool(struct fixture *fx, struct flight *f, uint64_t off, uint64_t len)
{
	uint8_t *buf = malloc(len);

	assert_non_null(buf);
	assert_int_equal(pread(flight_spool_fd(f), buf, len, (off_t)off), (ssize_t)len);
	assert_memory_equal(buf, fx->raw + off, len);
	free(buf);
}

static enum flight_state state_of(struct flight *f)
{
	enum flight_state st;

	flight_progress(f, NULL, NULL, &st);
	return st;
}

/* Starts the engine, reads the whole object through a new flight, and checks it landed. */
static struct flight *read_whole(struct fixture *fx, bool chunked)
{
	start_engine(fx);
	struct flight *f = join(fx, chunked);
	assert_int_equal(read_wait(fx, f, &fx->w[0], 0, fx->size), 0);
	wait_complete(fx);
	engine_stop(fx->engine);
	assert_int_equal(state_of(f), FLIGHT_COMPLETE);
	check_spool(fx, f, 0, fx->size);
	return f;
}

/* ---- a cold sequential read: one request for the stored bytes, the object in the spool -- */

static void test_cold_read_whole(void **state)
{
	struct fixture *fx = *state;
	struct srv_request req[SRV_MAX_REQUESTS];

	make_store(fx, 1 * MIB + 1000, UINT64_MAX, BAD_NONE);
	struct flight *f = read_whole(fx, false);
	assert_int_equal(srv_requests(&fx->srv, req), 1);
	assert_int_equal(req[0].start, 0);
	assert_int_equal(req[0].end, fx->stored_size);
	/* Wire against delivered: the stored bytes came, the object's went to the spool. */
	const struct engine_stats *stats = engine_stats(fx->engine);
	assert_true(fx->stored_size < fx->size / 4);
	assert_int_equal(atomic_load(&stats->bytes), fx->stored_size);
	assert_int_equal(atomic_load(&stats->delivered_bytes), fx->size);
	assert_int_equal(atomic_load(&f->wire_bytes), fx->stored_size);
	read_log(fx);
	flight_unref(f);
}

/* ---- a store's sha256 header is its stored bytes', never the object's ----------------- */

static void test_store_sha256_is_not_the_objects(void **state)
{
	struct fixture *fx = *state;
	unsigned char digest[32];
	unsigned int n = 0;
	int len;

	make_store(fx, 1 * MIB + 1000, UINT64_MAX, BAD_NONE);
	/* What S3 keeps for the object it stores: the hash of the zstd frames. */
	assert_int_equal(EVP_Digest(fx->stored, fx->stored_size, digest, &n, EVP_sha256(), NULL),
	                 1);
	len = snprintf(fx->srv.header, sizeof(fx->srv.header), "x-amz-meta-sha256: ");
	for (unsigned i = 0; i < 32; i++)
		len += snprintf(fx->srv.header + len, sizeof(fx->srv.header) - (size_t)len, "%02x",
		                digest[i]);
	snprintf(fx->srv.header + len, sizeof(fx->srv.header) - (size_t)len, "\r\n");
	struct flight *f = read_whole(fx, false);
	flight_unref(f);
}

/* ---- a frame table that does not add up is EIO with a log line, not ENOMEM ------------ */

static void test_bad_frame_table_is_eio(void **state)
{
	struct fixture *fx = *state;
	struct flight_spec spec = {
	    .key = "url:compressed", .url = fx->url, .sha256 = "", .name = "/object", .ino = 2};
	struct flight *f = NULL;
	bool created;

	make_store(fx, 1 * MIB, UINT64_MAX, BAD_NONE);
	spec.size = fx->size;
	spec.frame_size = fx->frame;
	spec.frame_stored = fx->frame_stored;
	spec.stored_size = fx->stored_size + 1; /* one byte the frames do not hold */
	capture_log(fx);
	assert_int_equal(flight_table_join(fx->table, &spec, &f, &created), -EIO);
	assert_null(f);
	assert_non_null(strstr(read_log(fx), "/object: its chunk or frame table does not match"));
}

/* ---- decoding buffers: bounded and given back ------------------------------------------ */

/* Set by a case: ZSTD_DCtx_setParameter fails (tests/CMakeLists.txt wraps it here). */
static atomic_bool fail_set_parameter;

size_t __real_ZSTD_DCtx_setParameter(ZSTD_DCtx *dctx, ZSTD_dParameter param, int value);
size_t __wrap_ZSTD_DCtx_setParameter(ZSTD_DCtx *dctx, ZSTD_dParameter param, int value);
size_t __wrap_ZSTD_DCtx_setParameter(ZSTD_DCtx *dctx, ZSTD_dParameter param, int value)
{
	if (atomic_load(&fail_set_parameter))
		return (size_t)-ZSTD_error_parameter_unsupported;
	return __real_ZSTD_DCtx_setParameter(dctx, param, value);
}

/* Without its window bound a frame could have zstd allocate any window: refused. */
static void test_unbounded_window_is_refused(void **state)
{
	struct fixture *fx = *state;
	ZSTD_DCtx *dctx = ZSTD_createDCtx();
	uint8_t *out = malloc(FRAME);
	char why[160];

	make_store(fx, FRAME, UINT64_MAX, BAD_NONE);
	assert_non_null(dctx);
	assert_non_null(out);
	assert_int_equal(
	    zframe_decode(dctx, FRAME, fx->stored, fx->stored_size, out, FRAME, why, sizeof(why)),
	    0);
	atomic_store(&fail_set_parameter, true);
	assert_int_equal(
	    zframe_decode(dctx, FRAME, fx->stored, fx->stored_size, out, FRAME, why, sizeof(why)),
	    -EIO);
	atomic_store(&fail_set_parameter, false);
	assert_non_null(strstr(why, "bounded window"));
	ZSTD_freeDCtx(dctx);
	free(out);
}

/* 8 MiB frames decoded on the transfer thread: its buffer is not kept for the session. */
static void test_big_frames_leave_no_buffer(void **state)
{
	struct fixture *fx = *state;

	fx->frame = 8 * MIB;
	fx->cfg.unframe_threads = 0;
	make_store(fx, 16 * MIB + 100, UINT64_MAX, BAD_NONE);
	struct flight *f = read_whole(fx, false);
	assert_int_equal(atomic_load(&engine_stats(fx->engine)->frame_bytes), 0);
	flight_unref(f);
}

/* ---- a server that caps ranges below one frame ------------------------------------------ */

/* Each answer carries less than one frame: said so in the log, and EIO after max_tries. */
static void test_ranges_capped_below_a_frame(void **state)
{
	struct fixture *fx = *state;
	struct srv_request req[SRV_MAX_REQUESTS];

	fx->cfg.max_tries = 3;
	make_store(fx, 16 * MIB, UINT64_MAX, BAD_NONE); /* sparse: a ranged request */
	fx->srv.cap_range = 100;
	start_engine(fx);
	struct flight *f = join(fx, false);
	assert_int_equal(read_wait(fx, f, &fx->w[0], 10 * MIB + 100, 4 * KIB), -EIO);
	engine_stop(fx->engine);
	assert_int_equal(state_of(f), FLIGHT_FAILED);
	assert_true(srv_requests(&fx->srv, req) <= 2 * fx->cfg.max_tries);
	assert_non_null(strstr(read_log(fx), "the server caps ranges below one frame (100 stored"));
	flight_unref(f);
}

/* ---- the pool's failures ------------------------------------------------------------------ */

/* Set by a case: how many ZSTD_createDCtx calls from the pool's threads fail. */
static atomic_uint fail_pool_dctx;

/* A gate the pool's threads wait at in ZSTD_createDCtx (a job's first step), while
 * `closed`; `waiting` counts them. Guarded by gate_lock. */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static bool gate_closed;
static unsigned gate_waiting;

ZSTD_DCtx *__real_ZSTD_createDCtx(void);
ZSTD_DCtx *__wrap_ZSTD_createDCtx(void);
ZSTD_DCtx *__wrap_ZSTD_createDCtx(void)
{
	char name[16] = "";
	unsigned n = atomic_load(&fail_pool_dctx);

	prctl(PR_GET_NAME, name);
	if (strncmp(name, "spoolfs-unzstd", 14) != 0)
		return __real_ZSTD_createDCtx();
	pthread_mutex_lock(&gate_lock);
	gate_waiting++;
	pthread_cond_broadcast(&gate_cond);
	while (gate_closed)
		pthread_cond_wait(&gate_cond, &gate_lock);
	gate_waiting--;
	pthread_mutex_unlock(&gate_lock);
	if (n > 0 && atomic_compare_exchange_strong(&fail_pool_dctx, &n, n - 1))
		return NULL;
	return __real_ZSTD_createDCtx();
}

/* A flight that fails while the pool holds its frames: nothing of them is delivered, and
 * every job is freed (ASan) once the pool lets go, the engine's stop included. */
static void test_flight_fails_while_jobs_hold_it(void **state)
{
	struct fixture *fx = *state;
	const struct engine_stats *stats;

	if (fx->cfg.unframe_threads == 0)
		skip(); /* no pool (unit_compressed_inline) */
	make_store(fx, 1 * MIB + 1000, UINT64_MAX, BAD_NONE);
	pthread_mutex_lock(&gate_lock);
	gate_closed = true;
	pthread_mutex_unlock(&gate_lock);
	start_engine(fx);
	stats = engine_stats(fx->engine);
	struct flight *f = join(fx, false);
	test_waiter_init(&fx->w[0], 0, fx->size);
	assert_int_equal(read_at(fx, f, &fx->w[0]), 0);
	pthread_mutex_lock(&gate_lock);
	while (gate_waiting < fx->cfg.unframe_threads)
		pthread_cond_wait(&gate_cond, &gate_lock);
	pthread_mutex_unlock(&gate_lock);
	flight_fail(f, -EIO);
	assert_int_equal(test_waiter_wait(&fx->w[0]), -EIO);
	pthread_mutex_lock(&gate_lock);
	gate_closed = false;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
	engine_stop(fx->engine);
	assert_int_equal(state_of(f), FLIGHT_FAILED);
	assert_int_equal(flight_written(f), 0);
	assert_int_equal(f->xfer.decoding_jobs, 0);
	assert_int_equal(atomic_load(&stats->frame_budget_used), 0);
	flight_unref(f);
}

/* A job that gets no memory to decode its frame does not fail the flight: the frame is
 * fetched again (and decoded inline), and the read gets its bytes. */
static void test_job_without_memory_fetches_again(void **state)
{
	struct fixture *fx = *state;
	struct srv_request req[SRV_MAX_REQUESTS];

	if (fx->cfg.unframe_threads == 0)
		skip(); /* no pool (unit_compressed_inline) */
	make_store(fx, 1 * MIB + 1000, UINT64_MAX, BAD_NONE);
	atomic_store(&fail_pool_dctx, 1);
	struct flight *f = read_whole(fx, false);
	assert_int_equal(atomic_load(&fail_pool_dctx), 0);
	assert_true(srv_requests(&fx->srv, req) >= 2);
	assert_non_null(strstr(read_log(fx), "fetching it again"));
	flight_unref(f);
}

/* ---- one budget for frame buffers over all requests ------------------------------------ */

/* Four readers of 1 MiB frames at four places, with room for one request's frame buffer:
 * while the first request is held mid-frame the others wait for budget instead of starting,
 * and all are answered once it ends. */
static void test_readers_keep_the_frame_budget(void **state)
{
	struct fixture *fx = *state;
	const struct engine_stats *stats;
	uint64_t max_stored = 0;
	struct srv_request req[SRV_MAX_REQUESTS];

	fx->frame = 1 * MIB;
	make_store(fx, 16 * MIB, UINT64_MAX, BAD_NONE);
	for (uint64_t i = 0; i < fx->n_frames; i++)
		max_stored = fx->frame_stored[i] > max_stored ? fx->frame_stored[i] : max_stored;
	fx->cfg.frame_budget = max_stored + max_stored / 2;
	srv_hold_at(&fx->srv, stored_off(fx, 1) + fx->frame_stored[1] / 2);
	start_engine(fx);
	stats = engine_stats(fx->engine);
	struct flight *f = join(fx, false);
	test_waiter_init(&fx->w[0], 1 * MIB + 10, 4 * KIB);
	assert_int_equal(read_at(fx, f, &fx->w[0]), 0);
	srv_wait_held(&fx->srv);
	for (unsigned i = 1; i < 4; i++) {
		test_waiter_init(&fx->w[i], (1 + 4 * i) * MIB + 10, 4 * KIB);
		assert_int_equal(read_at(fx, f, &fx->w[i]), 0);
	}
	/* Either another request went out (the budget not kept) or one waited for budget. */
	while (srv_requests(&fx->srv, req) < 2 && atomic_load(&stats->frame_budget_waits) == 0)
		usleep(1000);
	assert_int_equal(srv_requests(&fx->srv, req), 1);
	srv_release(&fx->srv);
	for (unsigned i = 0; i < 4; i++) {
		assert_int_equal(test_waiter_wait(&fx->w[i]), 0);
		check_spool(fx, f, fx->w[i].w.off, 4 * KIB);
	}
	assert_true(atomic_load(&stats->frame_budget_peak) <= fx->cfg.frame_budget);
	engine_stop(fx->engine);
	assert_int_equal(atomic_load(&stats->frame_budget_used), 0);
	/* what is left is the transfer thread's decoding buffer: one frame at most */
	assert_true(atomic_load(&stats->frame_bytes) <= fx->frame);
	flight_unref(f);
}

/* ---- a sparse read fetches only the frames that hold its range ---------------------- */

static void test_sparse_read_fetches_its_frames(void **state)
{
	struct fixture *fx = *state;
	struct srv_request req[SRV_MAX_REQUESTS];
	const uint64_t off = 10 * MIB + 100; /* FLIGHT_DEMAND_BYTES around it: frames 160-163 */

	make_store(fx, 16 * MIB, UINT64_MAX, BAD_NONE);
	start_engine(fx);
	struct flight *f = join(fx, false);
	uint64_t first = (off - off % FLIGHT_DEMAND_BYTES) / FRAME;
	uint64_t last = first + FLIGHT_DEMAND_BYTES / FRAME;
	assert_int_equal(read_wait(fx, f, &fx->w[0], off, 4 * KIB), 0);
	check_spool(fx, f, off, 4 * KIB);
	/* The request's other frames, decoded meanwhile, arrive without another request. */
	assert_int_equal(read_wait(fx, f, &fx->w[1], first * FRAME, FLIGHT_DEMAND_BYTES), 0);
	engine_stop(fx->engine);
	assert_int_equal(srv_requests(&fx->srv, req), 1);
	assert_int_equal(req[0].start, stored_off(fx, first));
	assert_int_equal(req[0].end, stored_off(fx, last));
	assert_int_equal(atomic_load(&engine_stats(fx->engine)->bytes),
	                 stored_off(fx, last) - stored_off(fx, first));
	assert_int_equal(flight_written(f), FLIGHT_DEMAND_BYTES);
	read_log(fx);
	flight_unref(f);
}

/* ---- chunk hashes: each frame is a chunk, checked after decompression ------------------ */

static void test_chunked_read(void **state)
{
	struct fixture *fx = *state;

	make_store(fx, 2 * MIB + 5, UINT64_MAX, BAD_NONE);
	struct flight *f = read_whole(fx, true);
	read_log(fx);
	flight_unref(f);
}

/* A frame that declares no size (a streaming compressor's) is read to its end, not taken
 * for a bomb when it fills its share. */
static void test_frame_without_declared_size(void **state)
{
	struct fixture *fx = *state;

	make_store(fx, 1 * MIB, 3, GOOD_UNDECLARED);
	start_engine(fx);
	struct flight *f = join(fx, true);
	assert_int_equal(read_wait(fx, f, &fx->w[0], 0, fx->size), 0);
	wait_complete(fx);
	engine_stop(fx->engine);
	check_spool(fx, f, 0, fx->size);
	read_log(fx);
	flight_unref(f);
}

/* ---- bad frames: EIO and a log line, never wrong bytes ------------------------------- */

/* Without chunk hashes the download fails; nothing of the bad frame is served. */
static void bad_frame_fails_flight(void **state, enum bad_kind kind, const char *why)
{
	struct fixture *fx = *state;
	const uint64_t bad = 3;

	make_store(fx, 1 * MIB, bad, kind);
	start_engine(fx);
	struct flight *f = join(fx, false);
	assert_int_equal(read_wait(fx, f, &fx->w[0], bad * FRAME, 4 * KIB), -EIO);
	engine_stop(fx->engine);
	assert_int_equal(state_of(f), FLIGHT_FAILED);
	assert_int_equal(flight_ready(f, bad * FRAME, 1), -EIO);
	const char *log = read_log(fx);
	assert_non_null(strstr(log, "frame 3 (bytes 196608-262144"));
	assert_non_null(strstr(log, why));
	assert_non_null(strstr(log, "/object.zst"));
	flight_unref(f);
}

static void test_frame_short(void **state)
{
	bad_frame_fails_flight(state, BAD_SHORT, "declares 65535 bytes, not its 65536");
}

static void test_frame_long(void **state)
{
	bad_frame_fails_flight(state, BAD_LONG, "declares 65537 bytes, not its 65536");
}

static void test_frame_garbage(void **state)
{
	bad_frame_fails_flight(state, BAD_GARBAGE, "is not one zstd frame");
}

static void test_frame_truncated(void **state)
{
	bad_frame_fails_flight(state, BAD_TRUNCATED, "is not one zstd frame");
}

/* A bomb is never decompressed past its share: the process's peak memory stays small. */
static void test_frame_bomb(void **state)
{
	struct rusage before, after;

	getrusage(RUSAGE_SELF, &before);
	bad_frame_fails_flight(state, BAD_BOMB, "decompresses past its 65536 bytes");
	getrusage(RUSAGE_SELF, &after);
	assert_true(after.ru_maxrss - before.ru_maxrss < 64 * 1024); /* KiB: under 64 MiB */
}

/* With chunk hashes a bad frame is fetched once more, then fails only its own reads. */
static void test_chunked_bad_frame_fails_its_reads_only(void **state)
{
	struct fixture *fx = *state;
	struct srv_request req[SRV_MAX_REQUESTS];
	const uint64_t bad = 5;

	make_store(fx, 1 * MIB, bad, BAD_GARBAGE);
	start_engine(fx);
	struct flight *f = join(fx, true);
	assert_int_equal(read_wait(fx, f, &fx->w[0], bad * FRAME + 10, 100), -EIO);
	assert_int_equal(read_wait(fx, f, &fx->w[1], 0, bad * FRAME), 0);
	assert_int_equal(
	    read_wait(fx, f, &fx->w[2], (bad + 1) * FRAME, fx->size - (bad + 1) * FRAME), 0);
	engine_stop(fx->engine);
	check_spool(fx, f, 0, bad * FRAME);
	check_spool(fx, f, (bad + 1) * FRAME, fx->size - (bad + 1) * FRAME);
	assert_int_equal(flight_ready(f, bad * FRAME, 1), -EIO);
	/* The whole object, then the bad frame onwards once more (from its frame boundary). */
	unsigned n = srv_requests(&fx->srv, req);
	assert_true(n >= 2);
	assert_int_equal(req[1].start, stored_off(fx, bad));
	const char *log = read_log(fx);
	assert_non_null(strstr(log, "frame 5 (bytes 327680-393216"));
	assert_non_null(strstr(log, "fetching it again"));
	assert_non_null(strstr(log, "reads of it get EIO"));
	flight_unref(f);
}

/* ---- a server that answers a Range with 200: the stored bytes before the frame skipped -- */

static void test_server_ignores_range(void **state)
{
	struct fixture *fx = *state;
	struct srv_request req[SRV_MAX_REQUESTS];
	const uint64_t off = 12 * MIB + 5;

	make_store(fx, 16 * MIB, UINT64_MAX, BAD_NONE);
	fx->srv.ignore_range = true; /* no request yet: no lock needed */
	start_engine(fx);
	struct flight *f = join(fx, true);
	assert_int_equal(read_wait(fx, f, &fx->w[0], off, 8 * KIB), 0);
	check_spool(fx, f, off, 8 * KIB);
	/* It sends the rest of the object anyway: kept, to the end. */
	assert_int_equal(read_wait(fx, f, &fx->w[1], 15 * MIB, 1 * MIB), 0);
	check_spool(fx, f, 15 * MIB, 1 * MIB);
	engine_stop(fx->engine);
	assert_int_equal(srv_requests(&fx->srv, req), 1);
	assert_int_equal(req[0].status, 200);
	read_log(fx);
	flight_unref(f);
}

/* ---- a connection cut inside a frame resumes at that frame's start --------------------- */

static void test_cut_mid_frame_resumes_at_frame(void **state)
{
	struct fixture *fx = *state;
	struct srv_request req[SRV_MAX_REQUESTS];

	make_store(fx, 1 * MIB, UINT64_MAX, BAD_NONE);
	fx->srv.cut_at = stored_off(fx, 5) + 100; /* no request yet: no lock needed */
	struct flight *f = read_whole(fx, true);
	assert_int_equal(srv_requests(&fx->srv, req), 2);
	assert_int_equal(req[1].start, stored_off(fx, 5));
	assert_int_equal(req[1].end, fx->stored_size);
	/* On the wire: the first answer up to the cut, then the rest from frame 5. */
	assert_int_equal(atomic_load(&f->wire_bytes),
	                 stored_off(fx, 5) + 100 + fx->stored_size - stored_off(fx, 5));
	assert_int_equal(atomic_load(&engine_stats(fx->engine)->delivered_bytes), fx->size);
	read_log(fx);
	flight_unref(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_cold_read_whole, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_store_sha256_is_not_the_objects, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_frame_table_is_eio, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_unbounded_window_is_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_big_frames_leave_no_buffer, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_ranges_capped_below_a_frame, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_job_without_memory_fetches_again, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_flight_fails_while_jobs_hold_it, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_readers_keep_the_frame_budget, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_sparse_read_fetches_its_frames, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_chunked_read, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_frame_without_declared_size, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_frame_short, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_frame_long, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_frame_garbage, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_frame_truncated, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_frame_bomb, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_chunked_bad_frame_fails_its_reads_only, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_server_ignores_range, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cut_mid_frame_resumes_at_frame, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * The transfer engine's cold read of a compressed object against the same object stored
 * raw, without FUSE or a manifest loader (issue 37's speed targets, measured on the engine
 * alone until a mount loads version 3: tests/bench/compress_speed.py does it through one).
 *
 *   build/tests/bench_unframe [SIZE_MIB [RUNS [RATE_MIB_S]]]    (default 1024 3 0)
 *
 * One object of text-like lines (slices of an 8 MiB pool of them) with chunk hashes of
 * 256 KiB, served by the suites' HTTP server (tests/unit/srv.c) on 127.0.0.1 once as it is
 * and once as zstd -3 frames of 256 KiB (frame == chunk, as publish writes it). Each run
 * downloads each into a fresh flight table with the hasher and chunk pool running (as a
 * mount does) and times it from the kick until the flight completes. RATE_MIB_S > 0 paces
 * the server (a capped upstream). Prints wall seconds per run, the medians and the ratio.
 * UNFRAME_THREADS=N sets engine_config.unframe_threads (0: on the transfer thread).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zstd.h>

#include "fetch/engine/engine.h"
#include "fetch/engine/flight.h"
#include "../unit/helpers.h"
#include "../unit/srv.h"

#define FRAME (256u << 10)

struct done {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool complete;
};

static void on_complete(void *ctx, struct flight *f)
{
	struct done *d = ctx;

	(void)f;
	pthread_mutex_lock(&d->lock);
	d->complete = true;
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint8_t *make_text(uint64_t size)
{
	static const char hex[] = "0123456789abcdef";
	uint64_t pool_size = 8u << 20, x = 37;
	uint8_t *pool = malloc(pool_size), *out = malloc(size);

	if (!pool || !out)
		abort();
	for (uint64_t i = 0; i < pool_size; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		/* words of a few hundred kinds, spaces and line breaks */
		unsigned r = (unsigned)(x >> 33) % 64;
		pool[i] = r < 6 ? ' ' : r == 6 ? '\n' : (uint8_t)hex[(x >> 40) % 16];
	}
	for (uint64_t off = 0; off < size; off += 1u << 20) {
		uint64_t n = size - off < (1u << 20) ? size - off : (1u << 20);
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		memcpy(out + off, pool + (x >> 33) % (pool_size - n), n);
	}
	free(pool);
	return out;
}

/* One cold download of the object through a fresh table and engine: wall seconds. */
static double run(const char *url, uint64_t size, const unsigned char *digests,
                  const uint32_t *frames, uint64_t stored_size)
{
	char dir[64];
	int dirfd = test_dir_make("bench-unframe", dir, sizeof(dir));
	struct done d = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
	struct flight_table *table;
	struct engine_config cfg;
	struct engine *e;
	struct flight *f;
	bool created;

	if (dirfd < 0 || flight_table_create(dirfd, &table) || flight_table_start_hasher(table))
		abort();
	flight_table_on_complete(table, on_complete, &d);
	engine_config_defaults(&cfg);
	if (getenv("UNFRAME_THREADS")) /* 0: decompress on the transfer thread */
		cfg.unframe_threads = (unsigned)atoi(getenv("UNFRAME_THREADS"));
	if (engine_create(&cfg, &e) || engine_start(e))
		abort();
	struct flight_spec spec = {.key = "url:bench",
	                           .url = url,
	                           .sha256 = "",
	                           .name = "/bench",
	                           .size = size,
	                           .ino = 2,
	                           .chunk_size = FRAME,
	                           .chunk_digests = digests,
	                           .frame_size = frames ? FRAME : 0,
	                           .frame_stored = frames,
	                           .stored_size = stored_size};
	if (flight_table_join(table, &spec, &f, &created))
		abort();
	flight_fetch_whole(f);
	double t = now_s();
	engine_kick(e, f);
	pthread_mutex_lock(&d.lock);
	while (!d.complete)
		pthread_cond_wait(&d.cond, &d.lock);
	pthread_mutex_unlock(&d.lock);
	t = now_s() - t;
	engine_destroy(e);
	flight_unref(f);
	flight_table_destroy(table);
	test_dir_remove(dir, dirfd);
	return t;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	uint64_t size = (argc > 1 ? strtoull(argv[1], NULL, 10) : 1024) << 20;
	unsigned runs = argc > 2 ? (unsigned)atoi(argv[2]) : 3;
	uint64_t n = flight_chunk_count(size, FRAME), stored_size = 0;
	uint8_t *raw = make_text(size), *stored = malloc(n * ZSTD_compressBound(FRAME));
	unsigned char *digests = malloc(n * 32);
	uint32_t *frames = malloc(n * sizeof(uint32_t));
	double t_raw[16], t_zst[16];
	struct srv s_raw, s_zst;
	char u_raw[128], u_zst[128];

	if (!stored || !digests || !frames || runs < 1 || runs > 16)
		return 2;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t lo = i * FRAME, len = size - lo < FRAME ? size - lo : FRAME;
		unsigned int dl = 0;
		size_t c = ZSTD_compress(stored + stored_size, ZSTD_compressBound(FRAME), raw + lo,
		                         len, 3);
		if (ZSTD_isError(c) ||
		    !EVP_Digest(raw + lo, len, digests + i * 32, &dl, EVP_sha256(), NULL))
			return 2;
		frames[i] = (uint32_t)c;
		stored_size += c;
	}
	srv_start(&s_raw, raw, size);
	srv_start(&s_zst, stored, stored_size);
	/* No request yet: no lock needed. */
	s_raw.rate = s_zst.rate = (argc > 3 ? strtoull(argv[3], NULL, 10) : 0) << 20;
	snprintf(u_raw, sizeof(u_raw), "http://127.0.0.1:%u/raw", s_raw.port);
	snprintf(u_zst, sizeof(u_zst), "http://127.0.0.1:%u/zst", s_zst.port);
	printf("object %llu MiB, stored %.1f MiB (%.2fx), frames and chunks of %u KiB\n",
	       (unsigned long long)(size >> 20), stored_size / 1048576.0,
	       (double)stored_size / (double)size, FRAME >> 10);
	for (unsigned r = 0; r < runs; r++) {
		t_raw[r] = run(u_raw, size, digests, NULL, 0);
		t_zst[r] = run(u_zst, size, digests, frames, stored_size);
		printf("run %u: raw %.3f s, compressed %.3f s\n", r, t_raw[r], t_zst[r]);
		fflush(stdout);
	}
	qsort(t_raw, runs, sizeof(double), cmp);
	qsort(t_zst, runs, sizeof(double), cmp);
	printf("median: raw %.3f s, compressed %.3f s: compressed/raw %.2f\n", t_raw[runs / 2],
	       t_zst[runs / 2], t_zst[runs / 2] / t_raw[runs / 2]);
	srv_stop(&s_raw);
	srv_stop(&s_zst);
	free(raw);
	free(stored);
	free(digests);
	free(frames);
	return 0;
}

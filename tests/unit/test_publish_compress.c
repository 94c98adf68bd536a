/* publish/compress.c (an object's zstd frames) and publish/twins.c (one content made once). */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zstd.h>

#include "publish/publish_i.h"

/* What emit was handed: the stored bytes, in order. */
struct got {
	unsigned char *p;
	size_t n, cap;
};

static int keep(void *ctx, const unsigned char *p, size_t n)
{
	struct got *g = ctx;

	if (g->n + n > g->cap)
		return -ENOSPC;
	memcpy(g->p + g->n, p, n);
	g->n += n;
	return 0;
}

/* Text that compresses, as a tree's sources do. */
static unsigned char *text(size_t n)
{
	unsigned char *v = malloc(n);

	assert_non_null(v);
	for (size_t i = 0; i < n; i++)
		v[i] = (unsigned char)("abcdefgh line\n"[i % 14] + (i / 4096) % 7);
	return v;
}

static void frames_are_independent_and_exact(void **state)
{
	const size_t frame = 256 << 10, size = 4 * frame + 1000;
	unsigned char *src = text(size), *out = malloc(frame);
	struct pub_compressor z = {0};
	struct got g = {.cap = size + 4096};
	size_t at = 0, off = 0;

	(void)state;
	g.p = malloc(g.cap);
	assert_non_null(out);
	assert_non_null(g.p);
	assert_int_equal(pub_compressor_start(&z, 6, frame, size, 10), 0);
	/* Fed in odd pieces: frames are cut by the content's offsets, not by the reads. */
	for (size_t step = 1; at < size; step = step * 3 + 7) {
		size_t n = step < size - at ? step : size - at;
		assert_int_equal(pub_compressor_feed(&z, src + at, n, keep, &g), 0);
		at += n;
	}
	assert_int_equal(pub_compressor_end(&z, keep, &g), 0);
	assert_int_equal(z.n, 5);
	assert_int_equal(z.stored, g.n);
	assert_true(pub_compressor_worth(&z, size, 10));
	for (size_t k = 0; k < z.n; k++) {
		size_t want = k < 4 ? frame : 1000;
		assert_true(z.lens[k] > 0);
		assert_int_equal(ZSTD_decompress(out, frame, g.p + off, z.lens[k]), want);
		assert_memory_equal(out, src + k * frame, want);
		off += z.lens[k];
	}
	assert_int_equal(off, g.n);
	pub_compressor_free(&z);
	free(src);
	free(out);
	free(g.p);
}

static void a_short_object_and_a_poor_saving(void **state)
{
	unsigned char *src = text(10000);
	struct pub_compressor z = {0};
	struct got g = {.cap = 1 << 16};

	(void)state;
	g.p = malloc(g.cap);
	assert_non_null(g.p);
	/* Fewer bytes than the size the walk saw: the frame table would not match it. */
	assert_int_equal(pub_compressor_start(&z, 3, 4096, 20000, 10), 0);
	assert_int_equal(pub_compressor_feed(&z, src, 10000, keep, &g), 0);
	assert_int_equal(pub_compressor_end(&z, keep, &g), -ESTALE);
	/* The saving asked for is a bound: bytes half of which are noise shrink by less than
	 * 60 %, and by more than 10 %. */
	for (uint32_t i = 0, x = 1; i < 10000; i++) {
		x = x * 1103515245u + 12345u;
		src[i] = i % 2 ? 0 : (unsigned char)(x >> 24);
	}
	assert_int_equal(pub_compressor_start(&z, 3, 4096, 10000, 10), 0);
	g.n = 0;
	assert_int_equal(pub_compressor_feed(&z, src, 10000, keep, &g), 0);
	assert_int_equal(pub_compressor_end(&z, keep, &g), 0);
	assert_true(pub_compressor_worth(&z, 10000, 10));
	assert_false(pub_compressor_worth(&z, 10000, 60));
	pub_compressor_free(&z);
	free(src);
	free(g.p);
}

/* Noise: what zstd cannot shrink. */
static void noise(unsigned char *v, size_t n)
{
	for (uint32_t i = 0, x = 7; i < n; i++) {
		x = x * 1103515245u + 12345u;
		v[i] = (unsigned char)(x >> 23);
	}
}

static void an_incompressible_prefix_stops_the_attempt(void **state)
{
	const size_t frame = 256 << 10, size = PUB_JUDGE_BYTES + 4 * frame;
	unsigned char *src = malloc(size);
	struct pub_compressor z = {0};
	struct got g = {.cap = 2 * size};
	int rc = 0;

	(void)state;
	g.p = malloc(g.cap);
	assert_non_null(src);
	assert_non_null(g.p);
	noise(src, size);
	/* Judged once PUB_JUDGE_BYTES are compressed, not before, and the rest not tried. */
	assert_int_equal(pub_compressor_start(&z, 3, frame, size, 10), 0);
	for (size_t at = 0; at < size && rc == 0; at += frame) {
		rc = pub_compressor_feed(&z, src + at, frame, keep, &g);
		assert_true(rc == 0 || at + frame == PUB_JUDGE_BYTES);
	}
	assert_int_equal(rc, -EDOM);
	assert_int_equal(z.n * frame, PUB_JUDGE_BYTES);
	/* Half noise shrinks by more than the 2 % that a saving of 10 % asks of the prefix. */
	for (size_t i = 1; i < size; i += 2)
		src[i] = 0;
	g.n = 0;
	assert_int_equal(pub_compressor_start(&z, 3, frame, size, 10), 0);
	assert_int_equal(pub_compressor_feed(&z, src, size, keep, &g), 0);
	assert_int_equal(pub_compressor_end(&z, keep, &g), 0);
	pub_compressor_free(&z);
	free(src);
	free(g.p);
}

struct waiter {
	struct pub_twins *t;
	unsigned char sha256[PUB_SHA256_LEN];
	struct pub_stored zs;
	int rc;
};

static void *wait_twin(void *arg)
{
	struct waiter *w = arg;

	w->rc = pub_twins_claim(w->t, w->sha256, 1000, 4096, &w->zs);
	return NULL;
}

static void twins_wait_for_their_maker(void **state)
{
	struct pub_twins t;
	uint32_t frames[2] = {300, 200};
	struct pub_stored made = {.on = true, .size = 500, .frame = 4096, .frames = frames, .n = 2};
	struct waiter w = {.t = &t};
	struct pub_stored none = {0};
	pthread_t th;

	(void)state;
	memset(w.sha256, 0xab, sizeof(w.sha256));
	assert_int_equal(pub_twins_init(&t, 4), 0);
	assert_int_equal(pub_twins_claim(&t, w.sha256, 1000, 4096, &none), 1);
	/* Another size or frame is another content. */
	assert_int_equal(pub_twins_claim(&t, w.sha256, 1000, 8192, &none), 1);
	pub_twins_done(&t, w.sha256, 1000, 8192, NULL, 0);
	/* The waiter blocks until the maker is done, then takes a copy of its stored form. */
	assert_int_equal(pthread_create(&th, NULL, wait_twin, &w), 0);
	pub_twins_done(&t, w.sha256, 1000, 4096, &made, 0);
	pthread_join(th, NULL);
	assert_int_equal(w.rc, 0);
	assert_true(w.zs.on);
	assert_int_equal(w.zs.n, 2);
	assert_ptr_not_equal(w.zs.frames, frames);
	assert_memory_equal(w.zs.frames, frames, sizeof(frames));
	pub_stored_free(&w.zs);
	/* A maker that failed fails its twins: they give up, as the pool does. */
	w.sha256[0] = 1;
	assert_int_equal(pub_twins_claim(&t, w.sha256, 1000, 4096, &none), 1);
	pub_twins_done(&t, w.sha256, 1000, 4096, NULL, -EIO);
	assert_int_equal(pub_twins_claim(&t, w.sha256, 1000, 4096, &w.zs), -ECANCELED);
	pub_twins_free(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(frames_are_independent_and_exact),
	    cmocka_unit_test(a_short_object_and_a_poor_saving),
	    cmocka_unit_test(an_incompressible_prefix_stops_the_attempt),
	    cmocka_unit_test(twins_wait_for_their_maker),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * The same content twice (copies, hard links, a vendored tree twice) is one object, and is
 * compressed once. Only objects whose size another object of the tree shares can be twins:
 * run.c hashes those first (a read without a write), and the first job to claim a content
 * compresses and stores it while the others with that content wait for its stored form.
 * A table of open addressing, sized for every such object at once: it never grows.
 *
 * Lock: pub_twins.lock guards every slot; pub_twins.done is signalled when a slot's
 * object is made or failed. No I/O under it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "publish/publish_i.h"

int pub_twins_init(struct pub_twins *t, size_t n)
{
	memset(t, 0, sizeof(*t));
	t->cap = 2 * n + 1;
	t->v = calloc(t->cap, sizeof(*t->v));
	if (!t->v)
		return -ENOMEM;
	pthread_mutex_init(&t->lock, NULL);
	pthread_cond_init(&t->done, NULL);
	return 0;
}

void pub_twins_free(struct pub_twins *t)
{
	if (!t->v)
		return;
	for (size_t i = 0; i < t->cap; i++)
		pub_stored_free(&t->v[i].stored);
	free(t->v);
	pthread_cond_destroy(&t->done);
	pthread_mutex_destroy(&t->lock);
	memset(t, 0, sizeof(*t));
}

/* The slot of this content, or the free one where it goes. Called with lock held. */
static struct pub_twin *find(struct pub_twins *t, const unsigned char sha256[PUB_SHA256_LEN],
                             uint64_t size, uint64_t frame)
{
	uint64_t h;
	size_t i;

	memcpy(&h, sha256, sizeof(h));
	for (i = (size_t)(h % t->cap);; i = (i + 1) % t->cap) {
		struct pub_twin *s = &t->v[i];
		if (!s->used || (s->size == size && s->frame == frame &&
		                 memcmp(s->sha256, sha256, PUB_SHA256_LEN) == 0))
			return s;
	}
}

static int copy_stored(struct pub_stored *to, const struct pub_stored *from)
{
	pub_stored_free(to);
	if (!from->on)
		return 0;
	*to = *from;
	to->frames = malloc(from->n * sizeof(*from->frames) + 1);
	if (!to->frames) {
		memset(to, 0, sizeof(*to));
		return -ENOMEM;
	}
	memcpy(to->frames, from->frames, from->n * sizeof(*from->frames));
	return 0;
}

int pub_twins_claim(struct pub_twins *t, const unsigned char sha256[PUB_SHA256_LEN], uint64_t size,
                    uint64_t frame, struct pub_stored *zs)
{
	struct pub_twin *s;
	int rc;

	pthread_mutex_lock(&t->lock);
	s = find(t, sha256, size, frame);
	if (!s->used) {
		/* At most as many claims as jobs the table was sized for: a free slot stays. */
		*s = (struct pub_twin){.used = true, .size = size, .frame = frame};
		memcpy(s->sha256, sha256, PUB_SHA256_LEN);
		pthread_mutex_unlock(&t->lock);
		return 1;
	}
	/* Its maker runs (a claim is made by a running job only): it ends, then signals. */
	while (s->state == 0)
		pthread_cond_wait(&t->done, &t->lock);
	rc = s->state < 0 ? -ECANCELED : copy_stored(zs, &s->stored);
	pthread_mutex_unlock(&t->lock);
	return rc;
}

void pub_twins_done(struct pub_twins *t, const unsigned char sha256[PUB_SHA256_LEN], uint64_t size,
                    uint64_t frame, const struct pub_stored *zs, int rc)
{
	struct pub_twin *s;

	pthread_mutex_lock(&t->lock);
	s = find(t, sha256, size, frame);
	if (rc == 0 && zs && copy_stored(&s->stored, zs) != 0)
		rc = -ENOMEM;
	s->state = rc ? -1 : 1;
	pthread_cond_broadcast(&t->done);
	pthread_mutex_unlock(&t->lock);
}

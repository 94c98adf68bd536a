/*
 * nested_cache.c: nested manifests' texts by digest (nested_cache.h). A few slots, each
 * empty, being fetched by one caller (others wait on `changed`), or holding a text.
 */
#include "fetch/source/nested_cache.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct slot {
	char sha256[65]; /* "" when empty */
	bool fetching;   /* a caller fetches it: no text yet */
	char *text;      /* owned, NUL-terminated; NULL while fetching */
	size_t len;
	uint64_t used; /* the clock at its last use, for eviction */
};

/* Everything below is guarded by lock. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static struct slot slots[NESTED_CACHE_ENTRIES];
static size_t bytes;
static uint64_t clock_now;

static struct slot *find(const char *sha256)
{
	for (size_t k = 0; k < NESTED_CACHE_ENTRIES; k++)
		if (slots[k].sha256[0] && strcmp(slots[k].sha256, sha256) == 0)
			return &slots[k];
	return NULL;
}

static void empty(struct slot *s)
{
	bytes -= s->text ? s->len : 0;
	free(s->text);
	memset(s, 0, sizeof(*s));
}

/* An empty slot, emptying the least recently used text if need be; NULL when every slot
 * is being fetched. */
static struct slot *claim(void)
{
	struct slot *old = NULL;

	for (size_t k = 0; k < NESTED_CACHE_ENTRIES; k++) {
		struct slot *s = &slots[k];
		if (!s->sha256[0])
			return s;
		if (!s->fetching && (!old || s->used < old->used))
			old = s;
	}
	if (old)
		empty(old);
	return old;
}

int nested_cache_get(const char *sha256, char **text, size_t *len)
{
	struct slot *s;
	int rc = 0;

	*text = NULL;
	*len = 0;
	if (strlen(sha256) != 64)
		return 0;
	pthread_mutex_lock(&lock);
	while ((s = find(sha256)) && s->fetching)
		pthread_cond_wait(&changed, &lock);
	if (s) {
		*text = malloc(s->len + 1);
		if (*text) {
			memcpy(*text, s->text, s->len + 1);
			*len = s->len;
			s->used = ++clock_now;
			rc = 1;
		} else {
			rc = -ENOMEM;
		}
	} else if ((s = claim())) {
		memcpy(s->sha256, sha256, 65);
		s->fetching = true;
	}
	pthread_mutex_unlock(&lock);
	return rc;
}

void nested_cache_put(const char *sha256, const char *text, size_t len)
{
	struct slot *s;

	pthread_mutex_lock(&lock);
	s = find(sha256);
	if (s && s->fetching) {
		s->fetching = false;
		/* Room made from the least recently used texts; a text over half the bound is
		 * not kept (it would empty the rest). */
		for (struct slot *o;
		     len <= NESTED_CACHE_BYTES / 2 && bytes + len > NESTED_CACHE_BYTES;) {
			o = NULL;
			for (size_t k = 0; k < NESTED_CACHE_ENTRIES; k++)
				if (slots[k].text && (!o || slots[k].used < o->used))
					o = &slots[k];
			if (!o)
				break;
			empty(o);
		}
		s->text = len <= NESTED_CACHE_BYTES / 2 && bytes + len <= NESTED_CACHE_BYTES
		              ? malloc(len + 1)
		              : NULL;
		if (s->text) {
			memcpy(s->text, text, len);
			s->text[len] = '\0';
			s->len = len;
			s->used = ++clock_now;
			bytes += len;
		} else {
			empty(s);
		}
		pthread_cond_broadcast(&changed);
	}
	pthread_mutex_unlock(&lock);
}

void nested_cache_abandon(const char *sha256)
{
	struct slot *s;

	pthread_mutex_lock(&lock);
	s = find(sha256);
	if (s && s->fetching) {
		empty(s);
		pthread_cond_broadcast(&changed);
	}
	pthread_mutex_unlock(&lock);
}

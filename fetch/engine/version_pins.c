/*
 * A session is a snapshot (promise 5): an object whose source names no version is pinned to
 * the ETag of its first response, and every later request sends If-Match. That pin lives
 * in the flight; a flight that fails leaves the table, so that the next open starts a new
 * one, and without this set the new one would pin whatever the server has by then. The
 * object could then read as one version before the failure and another after it, or,
 * read sparsely, as a mix of both. Here the failed flight's version outlives it; the next
 * flight of the key starts pinned to it, and the object reads as that version or fails.
 *
 * Eviction from a cache with --cache-max-size drops a complete flight too: its version is
 * kept the same way. Only those flights' versions are kept (any other stays in the table
 * with its own), so the set stays small; a bound keeps a store whose every object fails
 * from growing it without end.
 */
#include "fetch/engine/version_pins.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/hash.h"

#define PIN_BUCKETS 256
#define PINS_MAX 65536

struct version_pin {
	char *key;
	char *url;
	char *etag;
	struct version_pin *next;
};

struct version_pins {
	struct util_hash_key key; /* the keys are objects' keys, from a manifest or listing */
	struct version_pin *buckets[PIN_BUCKETS];
	unsigned count;
};

static unsigned bucket_of(const struct version_pins *pins, const char *key)
{
	return (unsigned)(util_hash_str(&pins->key, key) % PIN_BUCKETS);
}

struct version_pins *version_pins_new(void)
{
	struct version_pins *pins = calloc(1, sizeof(struct version_pins));
	int rc;

	if (!pins)
		return NULL;
	rc = util_hash_key_new(&pins->key);
	if (rc < 0) {
		free(pins);
		errno = -rc;
		return NULL;
	}
	return pins;
}

static void pin_free(struct version_pin *pin)
{
	free(pin->key);
	free(pin->url);
	free(pin->etag);
	free(pin);
}

void version_pins_free(struct version_pins *pins)
{
	if (!pins)
		return;
	for (unsigned i = 0; i < PIN_BUCKETS; i++) {
		while (pins->buckets[i]) {
			struct version_pin *next = pins->buckets[i]->next;
			pin_free(pins->buckets[i]);
			pins->buckets[i] = next;
		}
	}
	free(pins);
}

static struct version_pin *find(const struct version_pins *pins, const char *key, const char *url)
{
	for (struct version_pin *p = pins->buckets[bucket_of(pins, key)]; p; p = p->next)
		if (strcmp(p->key, key) == 0 && strcmp(p->url, url) == 0)
			return p;
	return NULL;
}

int version_pins_put(struct version_pins *pins, const char *key, const char *url, const char *etag)
{
	struct version_pin *pin;
	unsigned b = bucket_of(pins, key);

	if (find(pins, key, url))
		return 0;
	if (pins->count >= PINS_MAX)
		return -ENOSPC;
	pin = calloc(1, sizeof(*pin));
	if (!pin)
		return -ENOMEM;
	pin->key = strdup(key);
	pin->url = strdup(url);
	pin->etag = strdup(etag);
	if (!pin->key || !pin->url || !pin->etag) {
		pin_free(pin);
		return -ENOMEM;
	}
	pin->next = pins->buckets[b];
	pins->buckets[b] = pin;
	pins->count++;
	return 0;
}

const char *version_pins_get(const struct version_pins *pins, const char *key, const char *url)
{
	const struct version_pin *pin = find(pins, key, url);

	return pin ? pin->etag : NULL;
}

/*
 * The versions a session has seen, for objects whose flight failed or was evicted (see
 * version_pins.c).
 * Not thread-safe: the flight table's lock guards its set.
 */
#ifndef SPOOLFS_FETCH_VERSION_PINS_H
#define SPOOLFS_FETCH_VERSION_PINS_H

struct version_pins;

/* A pin of an object whose server sends no ETag: this prefix, then its Last-Modified. No
 * ETag looks like it (an ETag starts with a quote or W/). */
#define VERSION_PIN_LAST_MODIFIED "Last-Modified: "

/* An empty set with a fresh hash key, or NULL with errno set (ENOMEM, or getrandom's). */
struct version_pins *version_pins_new(void);
void version_pins_free(struct version_pins *pins);

/*
 * Remembers that key, fetched from url, was version etag. A key already pinned keeps its
 * first version. 0, -ENOMEM, or -ENOSPC once the set is full (the caller says so).
 */
int version_pins_put(struct version_pins *pins, const char *key, const char *url, const char *etag);

/* The version pinned for key fetched from url, or NULL. Valid until the set is freed. */
const char *version_pins_get(const struct version_pins *pins, const char *key, const char *url);

#endif

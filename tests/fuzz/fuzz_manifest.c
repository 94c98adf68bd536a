/*
 * libFuzzer target: manifest parsing and validation (source_manifest_load).
 *
 * Each input is a manifest's JSON text, loaded into a fresh in-memory index. The first byte
 * picks the base URL the entries resolve against (http, https, file or none), so relative
 * URL resolution is fuzzed too; the rest is the JSON. Invariants checked: a refused manifest
 * returns -EINVAL (or -ENOMEM) with a one-line, NUL-terminated message; an accepted one
 * leaves a namespace whose every name passes index_check_segment and whose lookups agree
 * with readdir.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fetch/source/manifest_load.h"
#include "index/index.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const bases[] = {
    "http://127.0.0.1:8080/store/manifest.json",
    "https://user:pw@example.com/a/b/manifest.json?sig=1",
    "file:///srv/store/manifest.json",
    NULL,
};

struct walk {
	struct index *idx;
	uint64_t dir;
	unsigned seen;
};

static int check_child(void *ctx, const struct index_node *child, uint64_t next_cookie)
{
	struct walk *w = ctx;
	if (index_check_segment(child->name, strlen(child->name)) != NULL)
		abort(); /* an accepted manifest produced a name that is not a legal segment */
	if (child->parent != w->dir)
		abort();
	(void)next_cookie;
	w->seen++;
	return w->seen > 100000; /* bounded */
}

/* Walks the namespace breadth-first from the root (inodes are dense rowids). */
static void check_namespace(struct index *idx)
{
	uint64_t files = 0, dirs = 0, bytes = 0;
	struct index_node n;

	if (index_totals(idx, &files, &dirs, &bytes) != 0)
		abort();
	for (uint64_t ino = 1; ino <= files + dirs; ino++) {
		if (index_get(idx, ino, &n) != 0)
			abort(); /* totals and rows disagree */
		if (n.is_dir) {
			struct walk w = {.idx = idx, .dir = ino};
			if (index_readdir(idx, ino, 0, check_child, &w) != 0)
				abort();
		} else {
			char *url = NULL;
			if (index_get_url(idx, ino, &url) != 0 || !url)
				abort();
			if (strncmp(url, "http://", 7) && strncmp(url, "https://", 8) &&
			    strncmp(url, "file://", 7))
				abort(); /* a scheme the loader promised to refuse */
			free(url);
			if (ino != INDEX_ROOT_INO) {
				struct index_node found;
				if (index_lookup(idx, n.parent, n.name, &found) != 0 ||
				    found.ino != ino)
					abort();
			}
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct index *idx = NULL;
	char err[512];
	const char *base;
	int rc;

	if (size < 1)
		return 0;
	base = bases[data[0] % (sizeof(bases) / sizeof(bases[0]))];
	if (index_open(&idx) != 0)
		return 0;
	memset(err, 'x', sizeof(err));
	rc = source_manifest_load(idx, (const char *)data + 1, size - 1, base, NULL, err,
	                          sizeof(err));
	if (rc == 0) {
		check_namespace(idx);
	} else {
		if (rc != -EINVAL && rc != -ENOMEM && rc != -E2BIG)
			abort();
		if (memchr(err, '\0', sizeof(err)) == NULL || err[0] == '\0')
			abort(); /* a refusal always says why */
		if (strchr(err, '\n'))
			abort(); /* one line */
	}
	index_close(idx);
	return 0;
}

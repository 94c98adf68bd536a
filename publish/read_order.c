/*
 * --read-order [NAME=]FILE: the read orders a publish writes into the top manifest
 * (doc/publish.md, doc/manifest.md "read_orders"). Each FILE is a --record-reads record,
 * read by the mount's own list reader (fetch/prefetch/reads.h); each path is checked
 * against the walk (a file of the tree, at any depth, nested manifests included) and one
 * that is not is dropped with a warning. Several files for one name are merged by rank:
 * the first path of each file (in the order given), then the second of each, and so on,
 * each path at its earliest place, so two runs' orders mix fairly and what both read
 * first comes first. Packs stay as they are (laid out by directory): see doc/publish.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fetch/prefetch/reads.h"
#include "fetch/source/read_orders.h"
#include "publish/publish_i.h"
#include "util/trusted_path.h"

/* Dropped paths named one by one on stderr, per file; the rest are counted. */
#define DROPPED_SAID_MAX 10

/* One FILE's paths, as entries of the tree. */
struct ranked {
	struct pub_entry **at;
	size_t n, cap;
};

static int cmp_path(const void *key, const void *elem)
{
	return strcmp(key, (*(struct pub_entry *const *)elem)->path);
}

/* The file entry of the tree at path, or NULL. */
static struct pub_entry *find_file(const struct pub_tree *t, const char *path)
{
	struct pub_entry **e =
	    t->n_entries ? bsearch(path, t->entries, t->n_entries, sizeof(*t->entries), cmp_path)
	                 : NULL;

	return e && (*e)->kind == PUB_FILE ? *e : NULL;
}

/* Appends e once: a path a file names again adds nothing (e->in_order marks it while
 * its file is read), so a file of one line repeated costs one entry. */
static int push(struct ranked *r, struct pub_entry *e)
{
	if (e->in_order)
		return 0;
	if (r->n == r->cap) {
		size_t cap = r->cap ? 2 * r->cap : 64;
		struct pub_entry **at = realloc(r->at, cap * sizeof(*at));
		if (!at)
			return -ENOMEM;
		r->at = at;
		r->cap = cap;
	}
	e->in_order = true;
	r->at[r->n++] = e;
	return 0;
}

/*
 * Reads FILE into r: its paths that are files of the tree, in its order. Opened by the
 * trusted-path rule (util/trusted_path.h), as the mount's --prefetch-list is: a publish
 * often runs as root on a tree someone else owns. A line is named by its number and the
 * reason only, never its text: the file may be anything a link pointed at. 0 or -errno,
 * said.
 */
static int read_file(const struct pub_tree *t, const char *file, struct ranked *r)
{
	struct prefetch_list_reader *rd = malloc(sizeof(*rd));
	const char *path, *why;
	size_t dropped = 0;
	char refused[PATH_MAX + 256];
	int fd = util_trusted_open(file, UTIL_TRUSTED_READ, refused, sizeof(refused)), rc = 0;

	if (fd < 0 || !rd) {
		rc = fd < 0 ? fd : -ENOMEM;
		fprintf(stderr, "spoolfs publish: --read-order: refused: %s\n",
		        fd < 0 ? refused : strerror(-rc));
		goto out;
	}
	prefetch_list_reader_init(rd, fd);
	while ((rc = prefetch_list_next(rd, &path, &why)) == 1) {
		struct pub_entry *e = path ? find_file(t, path) : NULL;
		if (e) {
			rc = push(r, e);
			if (rc)
				goto out;
			continue;
		}
		if (dropped++ < DROPPED_SAID_MAX)
			fprintf(stderr, "spoolfs publish: warning: --read-order %s: line %u: %s\n",
			        file, rd->line_no, path ? "not a file of the tree: dropped" : why);
	}
	if (rc < 0)
		fprintf(stderr, "spoolfs publish: --read-order %s: %s\n", file, strerror(-rc));
	if (dropped > DROPPED_SAID_MAX)
		fprintf(stderr, "spoolfs publish: warning: %s: %zu lines dropped in all\n", file,
		        dropped);
out:
	for (size_t i = 0; i < r->n; i++)
		r->at[i]->in_order = false; /* merge's mark from here on */
	if (fd >= 0)
		close(fd);
	free(rd);
	return rc;
}

/* Interleaves the files' paths by rank into order, each path once, at most
 * READ_ORDER_PATHS_MAX (the mount's bound). Uses e->in_order as the seen mark. */
static int merge(struct pub_order *order, struct ranked *files, size_t n_files)
{
	size_t longest = 0, total = 0;
	int rc = 0;

	for (size_t f = 0; f < n_files; f++) {
		longest = files[f].n > longest ? files[f].n : longest;
		total += files[f].n;
	}
	order->paths = calloc(total ? total : 1, sizeof(*order->paths));
	if (!order->paths)
		return -ENOMEM;
	for (size_t rank = 0; rank < longest; rank++)
		for (size_t f = 0; f < n_files; f++) {
			struct pub_entry *e = rank < files[f].n ? files[f].at[rank] : NULL;
			if (!e || e->in_order)
				continue;
			if (order->n == READ_ORDER_PATHS_MAX) {
				fprintf(stderr,
				        "spoolfs publish: warning: read order \"%s\": more than %d"
				        " paths, the rest left out\n",
				        order->name, READ_ORDER_PATHS_MAX);
				goto out;
			}
			e->in_order = true;
			order->paths[order->n++] = e;
		}
out:
	for (size_t i = 0; i < order->n; i++)
		order->paths[i]->in_order = false;
	return rc;
}

int pub_read_orders(const struct publish_options *o, struct pub_tree *t)
{
	struct ranked *files = calloc(o->n_read_orders ? o->n_read_orders : 1, sizeof(*files));
	int rc = files ? 0 : -ENOMEM;

	for (size_t i = 0; i < o->n_read_orders && rc == 0; i++)
		rc = read_file(t, o->read_orders[i].file, &files[i]);
	/* One order per name, in the order names were first given. */
	for (size_t i = 0; i < o->n_read_orders && rc == 0; i++) {
		const char *name = o->read_orders[i].name;
		struct ranked *same = NULL;
		size_t n_same = 0;
		bool done = false;
		for (size_t k = 0; k < t->n_orders; k++)
			done |= strcmp(t->orders[k].name, name) == 0;
		if (done)
			continue;
		same = calloc(o->n_read_orders, sizeof(*same));
		struct pub_order *grown =
		    realloc(t->orders, (t->n_orders + 1) * sizeof(*t->orders));
		if (!same || !grown) {
			free(same);
			rc = -ENOMEM;
			break;
		}
		t->orders = grown;
		for (size_t k = i; k < o->n_read_orders; k++)
			if (strcmp(o->read_orders[k].name, name) == 0)
				same[n_same++] = files[k];
		struct pub_order *order = &t->orders[t->n_orders++];
		*order = (struct pub_order){.name = name};
		rc = merge(order, same, n_same);
		free(same);
		if (rc == 0 && order->n == 0)
			fprintf(stderr,
			        "spoolfs publish: warning: read order \"%s\": no file of the tree"
			        " in it\n",
			        name);
	}
	for (size_t i = 0; files && i < o->n_read_orders; i++)
		free(files[i].at);
	free(files);
	return rc;
}

void pub_read_orders_free(struct pub_tree *t)
{
	for (size_t i = 0; i < t->n_orders; i++)
		free(t->orders[i].paths);
	free(t->orders);
	t->orders = NULL;
	t->n_orders = 0;
}

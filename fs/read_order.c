/*
 * The manifest's read order at the mount (doc/prefetch.md, "Read orders"): the order a
 * root manifest's "read_orders" gave (fetch/source/read_orders.h) is kept in the index's
 * meta table, so every serving process of the mount finds it, and handed to the prefetch
 * thread as a list it reads before the job's own --prefetch-list: the same machinery, the
 * same slots, budget, cache skip and cancellation.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fetch/source/manifest_load.h"
#include "fs/prefetch.h"
#include "fs/session.h"
#include "util/log.h"

#define META_NAME "read_order_name"
#define META_PATHS "read_order"

int fs_read_order_keep(struct fs_session *s, struct manifest_load_options *load_opts)
{
	const char *paths = load_opts->read_order ? load_opts->read_order : "";
	const char *name = load_opts->read_order ? load_opts->read_order_name : "";
	int rc;

	/* A bad field is news; no order of the default name is not, unless one was asked for. */
	if (load_opts->read_order_why[0] &&
	    (s->opts.read_order_name || strncmp(load_opts->read_order_why, "read_orders", 11) == 0))
		util_log(UTIL_LOG_WARN, "manifest: no read order fetched ahead: %s",
		         load_opts->read_order_why);
	else if (load_opts->read_order)
		util_log(UTIL_LOG_INFO, "manifest: read order \"%s\": %zu paths", name,
		         load_opts->read_order_paths);
	rc = index_meta_put(s->idx, META_NAME, name);
	if (rc == 0)
		rc = index_meta_put(s->idx, META_PATHS, paths);
	free(load_opts->read_order);
	load_opts->read_order = NULL;
	return rc;
}

int fs_read_order_open(struct fs_session *s, int *fd)
{
	char *name = NULL, *paths = NULL;
	size_t len, done = 0;
	int rc;

	*fd = -1;
	if (s->opts.no_read_order)
		return 0;
	rc = index_meta_get(s->idx, META_NAME, &name);
	if (rc == 0)
		rc = index_meta_get(s->idx, META_PATHS, &paths);
	if (rc == -ENOENT || (rc == 0 && !name[0])) {
		rc = 0; /* an S3 listing, or a manifest without the order */
		goto out;
	}
	if (rc)
		goto out;
	/* The list reader reads an fd; the order is at most what the manifest held. */
	*fd = memfd_create("spoolfs-read-order", MFD_CLOEXEC);
	if (*fd < 0) {
		rc = -errno;
		goto out;
	}
	len = strlen(paths);
	while (done < len) {
		ssize_t n = write(*fd, paths + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			goto out;
		}
		done += (size_t)n;
	}
	if (lseek(*fd, 0, SEEK_SET) != 0) {
		rc = -errno;
		goto out;
	}
	snprintf(s->read_order_name, sizeof(s->read_order_name), "%s", name);
	snprintf(s->read_order_label, sizeof(s->read_order_label), "read order \"%s\"", name);
out:
	if (rc && *fd >= 0) {
		close(*fd);
		*fd = -1;
	}
	free(name);
	free(paths);
	return rc;
}

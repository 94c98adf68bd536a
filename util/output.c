/*
 * Files the daemon writes later by a path a user gave (output.h).
 */
#include "util/output.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/trusted_path.h"

int util_output_open(const char *option, char **path, struct util_output *out)
{
	char why[PATH_MAX + 256], *full = NULL;
	int rc;

	rc = util_trusted_parent(*path, &out->dir_fd, &out->name, &full, why, sizeof(why));
	if (rc) {
		fprintf(stderr, "spoolfs: %s %s: refused: %s\n", option, *path, why);
		return rc == -ENOMEM ? rc : -EINVAL;
	}
	/* Said now rather than at the first write, an interval (or a whole mount) later. */
	char *slash = strrchr(full, '/');
	*slash = '\0';
	rc = access(full[0] ? full : "/", W_OK) != 0 ? -errno : 0;
	if (rc)
		fprintf(stderr, "spoolfs: %s %s: its directory %s: %s\n", option, *path,
		        full[0] ? full : "/", strerror(-rc));
	*slash = '/';
	if (rc) {
		free(full);
		util_output_close(out);
		return -EINVAL;
	}
	free(*path);
	*path = full;
	return 0;
}

void util_output_close(struct util_output *out)
{
	if (out->dir_fd >= 0)
		close(out->dir_fd);
	free(out->name);
	out->dir_fd = -1;
	out->name = NULL;
}

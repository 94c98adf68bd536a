/*
 * Files the daemon writes later by a path a user gave (--metrics-file, --record-reads).
 */
#ifndef SPOOLFS_UTIL_OUTPUT_H
#define SPOOLFS_UTIL_OUTPUT_H

/* A file the daemon writes later by a path a user gave: its directory, held as a descriptor
 * (util/trusted_path.h), and its name in it; dir_fd -1 and name NULL when there is none. */
struct util_output {
	int dir_fd;
	char *name;
};

/*
 * A file the daemon writes later (--metrics-file, --record-reads, named by option): its
 * directory is resolved now under util/trusted_path.h's rule (no directory another user
 * controls) and held in *out, so that every later write lands where the path led now; it
 * must be writable. *path becomes the canonical path, for messages. 0, or -EINVAL (-ENOMEM)
 * after saying why on stderr. util_output_close releases *out.
 */
int util_output_open(const char *option, char **path, struct util_output *out);
void util_output_close(struct util_output *out);

#endif

/*
 * What a supervising process needs and knows nothing of FUSE (daemon/supervisor.c uses it):
 * a bound on restarts, a line saying how a child ended, a list of strings passed to a
 * child through a file descriptor (never its argv, which every local user can read),
 * placing inherited descriptors, and removing a private directory tree.
 *
 * No locks: each function works on what the caller owns.
 */
#ifndef SPOOLFS_UTIL_SUPERVISE_H
#define SPOOLFS_UTIL_SUPERVISE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Restarts are bounded two ways: a child that dies before it was ready, max_failed_starts
 * times in a row, is a crash loop; and at most max_in_window restarts within window_s
 * seconds, however ready each child got.
 */
#define UTIL_RESTART_WINDOW_MAX 64
struct util_restarts {
	unsigned max_failed_starts;
	unsigned max_in_window; /* at most UTIL_RESTART_WINDOW_MAX */
	unsigned window_s;
	unsigned failed_in_row;
	uint64_t recent_ns[UTIL_RESTART_WINDOW_MAX]; /* ring of the latest restarts' times */
	unsigned n_recent;
	unsigned next;
	uint64_t total;
};

void util_restarts_init(struct util_restarts *r, unsigned max_failed_starts, unsigned max_in_window,
                        unsigned window_s);
/*
 * A child died at now_ns (a monotonic clock); was_ready: it had said it was serving. 0
 * when another may start (counted in total), or -1 with why (one line, no newline) when
 * the bound is reached.
 */
int util_restarts_note(struct util_restarts *r, uint64_t now_ns, bool was_ready, char *why,
                       size_t why_len);

/* "killed by signal 9 (Killed)", "exited with status 1" for a waitpid status. */
void util_describe_exit(int status, char *buf, size_t len);

/* Writes n strings (NUL-terminated each) to fd from its start, replacing what it held.
 * 0 or -errno. */
int util_strings_write(int fd, const char *const *v, size_t n);
/* Reads what util_strings_write wrote: *out is a malloc'd array of *n malloc'd strings
 * with a NULL after them (util_strings_free). 0, -EINVAL when it is not such a list, or
 * -errno. */
int util_strings_read(int fd, char ***out, size_t *n);
void util_strings_free(char **v, size_t n);

/*
 * Moves fds[0..n) to first, first+1, ... (for a child about to exec), whatever numbers
 * they had, and clears their close-on-exec flag. 0 or -errno.
 */
int util_fds_place(const int *fds, size_t n, int first);

/* Removes name (a directory, or any other entry) beneath dirfd with everything in it,
 * following no symbolic link. 0 or -errno (the first error; it goes on past it). */
int util_remove_tree(int dirfd, const char *name);

#endif

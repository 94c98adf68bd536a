/*
 * What a session read, and the list a later session prefetches from.
 *
 * The record (--record-reads) keeps each file's inode once, in the order files were first
 * opened, and writes their paths at unmount, one a line. The list reader reads such a file
 * back (--prefetch-list, or the record kept in a cache directory) a bounded line at a time:
 * a line longer than PREFETCH_LINE_MAX, with a NUL byte, or that is no relative path of a
 * namespace, is reported and skipped, and the lines around it still count.
 *
 * Lock: a record's mutex guards its array and set (any FUSE thread notes opens). A list
 * reader belongs to one thread.
 */
#ifndef SPOOLFS_FETCH_PREFETCH_READS_H
#define SPOOLFS_FETCH_PREFETCH_READS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PREFETCH_LINE_MAX 4096

struct prefetch_record;

int prefetch_record_create(struct prefetch_record **out);
void prefetch_record_free(struct prefetch_record *r);
/* Notes an open of file ino; only its first counts. Out of memory: that open is not noted. */
void prefetch_record_note(struct prefetch_record *r, uint64_t ino);
/* How many files were noted. */
size_t prefetch_record_count(struct prefetch_record *r);
/*
 * Writes the noted files' paths (path_of fills one, "" when it has none), one a line, to fd.
 * A path that holds a newline cannot be a line: left out and counted in *left_out. 0 or
 * -errno (a write failed).
 */
int prefetch_record_write(struct prefetch_record *r, int fd,
                          void (*path_of)(void *ctx, uint64_t ino, char *buf, size_t len),
                          void *ctx, size_t *left_out);

/* Reads lines from an fd, each at most PREFETCH_LINE_MAX bytes kept. */
struct prefetch_list_reader {
	int fd;
	char buf[PREFETCH_LINE_MAX + 2];
	size_t len;     /* bytes of the line so far */
	bool too_long;  /* this line is past PREFETCH_LINE_MAX: skipped to its end */
	char in[16384]; /* what read() gave, not yet taken */
	size_t in_pos, in_len;
	bool eof;
	unsigned line_no; /* the line last returned, from 1 */
	char why[160];    /* a reason built for the line last returned */
};

void prefetch_list_reader_init(struct prefetch_list_reader *r, int fd);

/*
 * The next line's path: 1 with *path (NUL-terminated, in r's buffer, valid until the next
 * call) or with *why set when the line is to be skipped (its reason); 0 at the end; -errno
 * when the file cannot be read. Empty lines are passed over silently.
 */
int prefetch_list_next(struct prefetch_list_reader *r, const char **path, const char **why);

/*
 * Checks and normalises one line in place (len bytes, NUL-terminated at len): drops a
 * trailing '\r', a leading "./" or "/", and checks the rest is a relative path of a
 * namespace. NULL when fine (*len updated, the path starts at *start), else why not (a
 * static string, or why_buf); true in *empty for a blank line.
 */
const char *prefetch_list_check(char *line, size_t *len, size_t *start, bool *empty, char *why_buf,
                                size_t why_len);

#endif

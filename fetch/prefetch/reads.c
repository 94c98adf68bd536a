/* What a session read, and reading a prefetch list back (see reads.h). */
#include "fetch/prefetch/reads.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "index/index.h"

struct prefetch_record {
	pthread_mutex_t lock;
	/* Guarded by lock. */
	uint64_t *order; /* inodes, first opened first */
	size_t n, cap;
	uint8_t *seen; /* a bit per inode (inodes are dense: sqlite rowids) */
	size_t seen_bytes;
};

int prefetch_record_create(struct prefetch_record **out)
{
	struct prefetch_record *r = calloc(1, sizeof(*r));

	if (!r)
		return -ENOMEM;
	pthread_mutex_init(&r->lock, NULL);
	*out = r;
	return 0;
}

void prefetch_record_free(struct prefetch_record *r)
{
	if (!r)
		return;
	pthread_mutex_destroy(&r->lock);
	free(r->order);
	free(r->seen);
	free(r);
}

/* Makes room for bit ino and one more inode in order. Caller holds r->lock. */
static int grow_locked(struct prefetch_record *r, uint64_t ino)
{
	if (ino / 8 >= r->seen_bytes) {
		size_t want = (size_t)(ino / 8 + 1), bytes = r->seen_bytes ? r->seen_bytes : 1024;
		while (bytes < want)
			bytes *= 2;
		uint8_t *v = realloc(r->seen, bytes);
		if (!v)
			return -ENOMEM;
		memset(v + r->seen_bytes, 0, bytes - r->seen_bytes);
		r->seen = v;
		r->seen_bytes = bytes;
	}
	if (r->n == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 1024;
		uint64_t *v = realloc(r->order, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		r->order = v;
		r->cap = cap;
	}
	return 0;
}

void prefetch_record_note(struct prefetch_record *r, uint64_t ino)
{
	if (ino > (uint64_t)SIZE_MAX / 2)
		return;
	pthread_mutex_lock(&r->lock);
	bool seen = ino / 8 < r->seen_bytes && (r->seen[ino / 8] >> (ino % 8) & 1u);
	if (!seen && grow_locked(r, ino) == 0) {
		r->seen[ino / 8] |= (uint8_t)(1u << (ino % 8));
		r->order[r->n++] = ino;
	}
	pthread_mutex_unlock(&r->lock);
}

size_t prefetch_record_count(struct prefetch_record *r)
{
	pthread_mutex_lock(&r->lock);
	size_t n = r->n;
	pthread_mutex_unlock(&r->lock);
	return n;
}

static int write_all(int fd, const char *p, size_t len)
{
	while (len > 0) {
		ssize_t w = write(fd, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

int prefetch_record_write(struct prefetch_record *r, int fd,
                          void (*path_of)(void *ctx, uint64_t ino, char *buf, size_t len),
                          void *ctx, size_t *left_out)
{
	char path[PREFETCH_LINE_MAX + 2];
	uint64_t *order;
	size_t n;
	int rc = 0;

	*left_out = 0;
	/* A copy: the paths are looked up without the record's lock (the index has its own). */
	pthread_mutex_lock(&r->lock);
	n = r->n;
	order = n ? malloc(n * sizeof(*order)) : NULL;
	if (order)
		memcpy(order, r->order, n * sizeof(*order));
	pthread_mutex_unlock(&r->lock);
	if (n && !order)
		return -ENOMEM;
	for (size_t i = 0; i < n && rc == 0; i++) {
		path_of(ctx, order[i], path, PREFETCH_LINE_MAX + 1);
		size_t len = strlen(path);
		if (len == 0 || len > PREFETCH_LINE_MAX || memchr(path, '\n', len)) {
			(*left_out)++;
			continue;
		}
		path[len] = '\n';
		rc = write_all(fd, path, len + 1);
	}
	free(order);
	return rc;
}

void prefetch_list_reader_init(struct prefetch_list_reader *r, int fd)
{
	memset(r, 0, sizeof(*r));
	r->fd = fd;
}

const char *prefetch_list_check(char *line, size_t *len, size_t *start, bool *empty, char *why,
                                size_t why_len)
{
	size_t n = *len, s = 0;
	const char *bad;

	*empty = false;
	*start = 0;
	if (n && line[n - 1] == '\r')
		line[--n] = '\0';
	if (memchr(line, '\0', n))
		return "holds a NUL byte";
	if (strspn(line, " \t") == n) {
		*empty = true;
		return NULL;
	}
	while (n - s >= 2 && line[s] == '.' && line[s + 1] == '/')
		s += 2;
	while (s < n && line[s] == '/')
		s++;
	bad = index_check_path(line + s, n - s, true, why, why_len);
	if (bad)
		return bad;
	*start = s;
	*len = n - s;
	return NULL;
}

/* Fills r->in; false at the end (or an error, in *rc). */
static bool refill(struct prefetch_list_reader *r, int *rc)
{
	ssize_t got;

	if (r->eof)
		return false;
	do
		got = read(r->fd, r->in, sizeof(r->in));
	while (got < 0 && errno == EINTR);
	if (got < 0)
		*rc = -errno;
	if (got <= 0) {
		r->eof = true;
		return false;
	}
	r->in_pos = 0;
	r->in_len = (size_t)got;
	return true;
}

int prefetch_list_next(struct prefetch_list_reader *r, const char **path, const char **why)
{
	int rc = 0;

	for (;;) {
		bool ended = false;
		r->len = 0;
		r->too_long = false;
		/* One line: up to its newline or the end of the file. */
		while (!ended) {
			if (r->in_pos == r->in_len && !refill(r, &rc)) {
				if (rc)
					return rc;
				if (r->len == 0 && !r->too_long)
					return 0;
				break;
			}
			char *nl = memchr(r->in + r->in_pos, '\n', r->in_len - r->in_pos);
			size_t take =
			    nl ? (size_t)(nl - (r->in + r->in_pos)) : r->in_len - r->in_pos;
			if (!r->too_long && r->len + take <= PREFETCH_LINE_MAX) {
				memcpy(r->buf + r->len, r->in + r->in_pos, take);
				r->len += take;
			} else {
				r->too_long = true; /* the rest of it is read and dropped */
			}
			r->in_pos += take + (nl ? 1 : 0);
			ended = nl != NULL;
		}
		r->line_no++;
		if (r->too_long) {
			*path = NULL;
			*why = "longer than 4096 bytes";
			return 1;
		}
		r->buf[r->len] = '\0';
		size_t len = r->len, start;
		bool empty;
		*why = prefetch_list_check(r->buf, &len, &start, &empty, r->why, sizeof(r->why));
		if (empty)
			continue;
		*path = *why ? NULL : r->buf + start;
		return 1;
	}
}

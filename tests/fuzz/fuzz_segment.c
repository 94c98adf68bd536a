/*
 * libFuzzer target: path segment sanitisation (index_check_segment).
 *
 * An exact oracle: a segment is accepted if and only if it is 1..255 bytes, holds no '/'
 * and no NUL, and is neither "." nor "..". Anything else must be refused with a reason.
 * Also, every '/'-separated piece of the input is checked the way the manifest loader
 * splits paths.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "index/index.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const char *name, size_t len)
{
	bool legal = len >= 1 && len <= INDEX_NAME_MAX && !memchr(name, '/', len) &&
	             !memchr(name, '\0', len) && !(len == 1 && name[0] == '.') &&
	             !(len == 2 && name[0] == '.' && name[1] == '.');
	const char *why = index_check_segment(name, len);

	if (legal != (why == NULL))
		abort();
	if (why && why[0] == '\0')
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *copy = malloc(size ? size : 1); /* exact size: ASan sees any over-read */

	if (!copy)
		return 0;
	memcpy(copy, data, size);
	check(copy, size);
	for (size_t start = 0; start <= size;) {
		const char *slash = start < size ? memchr(copy + start, '/', size - start) : NULL;
		size_t end = slash ? (size_t)(slash - copy) : size;
		check(copy + start, end - start);
		start = end + 1;
	}
	free(copy);
	return 0;
}

/* Command-line sizes (see size.h). */
#include "util/size.h"

#include <errno.h>
#include <stdlib.h>

int util_parse_size(const char *text, uint64_t *out)
{
	char *end = NULL;
	unsigned long long n;
	int shift = 0;

	/* strtoull would take "-5" as a huge size. */
	if (text[0] < '0' || text[0] > '9')
		return -EINVAL;
	errno = 0;
	n = strtoull(text, &end, 10);
	if (errno || end == text)
		return -EINVAL;
	switch (*end) {
	case 'T':
	case 't':
		shift += 10; /* fall through */
	case 'G':
	case 'g':
		shift += 10; /* fall through */
	case 'M':
	case 'm':
		shift += 10; /* fall through */
	case 'K':
	case 'k':
		shift += 10;
		end++;
		break;
	case '\0':
		break;
	default:
		return -EINVAL;
	}
	if ((*end == 'i' || *end == 'I') && shift)
		end++;
	if ((*end == 'B' || *end == 'b'))
		end++;
	if (*end || (shift && n > (UINT64_MAX >> shift)))
		return -EINVAL;
	*out = (uint64_t)n << shift;
	return 0;
}

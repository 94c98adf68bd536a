/* util_say (say.h). */
#include "util/say.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

int util_say(char *why, size_t why_len, const char *fmt, ...)
{
	va_list ap;

	if (why && why_len) {
		va_start(ap, fmt);
		vsnprintf(why, why_len, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

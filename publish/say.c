/* Messages of `spoolfs publish`: one line each on stderr, the path named and made printable. */
#include <stdio.h>
#include <string.h>

#include "publish/publish_i.h"

const char *pub_quote(const char *s, bool high, char *buf, size_t cap)
{
	size_t n = 0;

	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (n + 8 >= cap) {
			memcpy(buf + n, "...", 3);
			n += 3;
			break;
		}
		if (c < 0x20 || c == 0x7f || (high && c >= 0x80))
			n += (size_t)snprintf(buf + n, cap - n, "\\x%02x", c);
		else
			buf[n++] = (char)c;
	}
	buf[n] = '\0';
	return buf;
}

/* One line on stderr: "spoolfs publish: [warning: ]SRC/REL: why". */
void pub_say(const char *level, const char *src, const char *rel, const char *why, bool high)
{
	char a[2048], b[8192];

	fprintf(stderr, "spoolfs publish: %s%s%s%s: %s\n", level,
	        pub_quote(src, high, a, sizeof(a)), *rel ? "/" : "",
	        pub_quote(rel, high, b, sizeof(b)), why);
}

const char *pub_human(uint64_t n, char *buf, size_t cap)
{
	static const char units[] = "BKMGT";
	double v = (double)n;
	int u = 0;

	while (v >= 1024 && u < 4)
		v /= 1024, u++;
	snprintf(buf, cap, u ? "%.1f %ciB" : "%.0f %c", v, units[u]);
	return buf;
}

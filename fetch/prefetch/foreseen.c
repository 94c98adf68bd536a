/* The files a prefetch list named (see foreseen.h). */
#include "fetch/prefetch/foreseen.h"

#include <stdlib.h>
#include <string.h>

void foreseen_add(struct foreseen *f, uint64_t ino)
{
	if (ino >= FORESEEN_MAX_INO)
		return;
	if (ino / 8 >= f->bytes) {
		size_t want = (size_t)(ino / 8 + 1), bytes = f->bytes ? f->bytes : 1024;
		while (bytes < want)
			bytes *= 2;
		uint8_t *v = realloc(f->bits, bytes);
		if (!v)
			return;
		memset(v + f->bytes, 0, bytes - f->bytes);
		f->bits = v;
		f->bytes = bytes;
	}
	f->bits[ino / 8] |= (uint8_t)(1u << (ino % 8));
}

bool foreseen_has(const struct foreseen *f, uint64_t ino)
{
	return ino / 8 < f->bytes && (f->bits[ino / 8] >> (ino % 8) & 1u);
}

void foreseen_free(struct foreseen *f)
{
	free(f->bits);
	f->bits = NULL;
	f->bytes = 0;
}

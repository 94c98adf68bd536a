#include "util/hex.h"

#include <errno.h>
#include <openssl/evp.h>

void util_hex_encode(const unsigned char *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

int util_sha256_hex(const void *data, size_t len, char hex[UTIL_SHA256_HEX_LEN])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int md_len = 0;

	/* EVP_Digest fails only when it cannot allocate its context. */
	if (EVP_Digest(data, len, md, &md_len, EVP_sha256(), NULL) != 1 || md_len != 32)
		return -ENOMEM;
	util_hex_encode(md, 32, hex);
	return 0;
}

/*
 * Bytes as lower-case hex, and the sha256 of bytes in that form: how the manifest, the
 * flight keys, SigV4 and the spool names all write a digest, written once.
 */
#ifndef SPOOLFS_UTIL_HEX_H
#define SPOOLFS_UTIL_HEX_H

#include <stddef.h>

/* The sha256 of 32 bytes as 64 hex digits and a NUL. */
#define UTIL_SHA256_HEX_LEN 65

/* n bytes at in as 2n lower-case hex digits and a NUL at out (2n + 1 bytes). */
void util_hex_encode(const unsigned char *in, size_t n, char *out);

/* The sha256 of len bytes at data, in hex. 0, or -ENOMEM (OpenSSL could not digest). */
int util_sha256_hex(const void *data, size_t len, char hex[UTIL_SHA256_HEX_LEN]);

#endif

/*
 * Sources: where a session's namespace comes from. For now, a JSON manifest named by an
 * http(s) URL or a local path. Runs once at start-up, before the mount exists, so a bad
 * source fails the mount with a message instead of leaving a half-working filesystem.
 */
#ifndef SPOOLFS_FETCH_SOURCE_H
#define SPOOLFS_FETCH_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "fetch/http/net.h"

/*
 * The largest manifest accepted by default (--max-manifest-size): a manifest is metadata,
 * held whole in memory while it is read, and this bounds what a server that never stops
 * sending can make the mount hold. 256 MiB is about four million entries (a million-entry
 * manifest is 66 MB), four times the largest we have measured, and still small beside a CI
 * machine's memory.
 */
#define SOURCE_MANIFEST_DEFAULT_MAX ((size_t)256 << 20)

struct source_options {
	struct fetch_net net; /* with stall_timeout_s and max_tries: the fetch blocks */
	size_t max_bytes;     /* the manifest's bound; 0: SOURCE_MANIFEST_DEFAULT_MAX */
	/* A manifest in a private bucket: adds the signature headers before each try (the
	 * engine's sign, e.g. s3_source_sign); redirects are then not followed, since curl
	 * would carry those headers to wherever they lead. NULL: none. */
	int (*sign)(void *ctx, const char *url, struct curl_slist **headers, uint64_t *gen);
	void *sign_ctx;
};

/*
 * Reads the manifest named by `source` (http://, https://, file:// or a path). On success
 * *text (NUL-terminated, *len bytes) and *base_url (the URL relative entries resolve
 * against) are malloc'd for the caller, and *mtime is the manifest's own time (the HTTP
 * answer's Last-Modified, a local file's mtime; 0 when unknown). On failure returns -errno
 * and writes a one-line reason into err.
 */
int source_manifest_read(const char *source, const struct source_options *opts, char **text,
                         size_t *len, char **base_url, int64_t *mtime, char *err, size_t err_len);

#endif

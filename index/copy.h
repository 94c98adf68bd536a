/*
 * index/copy: copies of a loaded namespace, kept in a cache directory so that a later mount
 * of the same manifest starts from one instead of loading the manifest again
 * (doc/cache-dir.md, "Kept namespaces"). Made and read back with sqlite's backup API, page
 * by page, never as a file copy of a database in use. Which copy belongs to which manifest
 * (its name), and where the files are, is the callers' business (fetch/source/kept_key.h,
 * fetch/cache/kept.h): here only what a copy holds.
 *
 * A copy is the namespace as the load left it, without what belongs to one session: the
 * manifest's URL (meta manifest_url: its query may hold a signature) and the release a tag
 * led to (meta release). A namespace any of whose URLs holds a secret (userinfo, a query:
 * util_url_has_secret) is never copied: a kept cache directory holds no credential.
 *
 * Lock: each call takes idx->lock (index_i.h) while it reads or replaces the namespace;
 * the copy's own connection is the call's alone. 0 or -errno, as everywhere in index/.
 */
#ifndef SPOOLFS_INDEX_COPY_H
#define SPOOLFS_INDEX_COPY_H

#include <stddef.h>

#include "index/index.h"

/* The namespace's schema version (PRAGMA user_version): part of a copy's name, as a copy of
 * another schema cannot serve this build. */
int index_namespace_version(void);

/*
 * Writes a copy of idx, a loaded namespace, into the file at path (empty, or absent: it is
 * made the owner's alone, 0600; sqlite opens it by name, never through a symbolic link).
 * -EACCES when a URL in the namespace holds a secret (checked first: nothing is written);
 * else 0 or -errno (the caller removes a file a failure left).
 */
int index_copy_save(struct index *idx, const char *path);

/*
 * Fills idx, a fresh namespace (index_open, index_open_file with fresh: nothing loaded),
 * from the copy at path, once the copy has passed its checks: it opens read-only, has this
 * build's schema version (else -EPROTO) and passes PRAGMA quick_check (else -EIO, or the
 * error of reading it: a file that is no database is -EIO too). Afterwards idx is as the
 * load that made the copy left it (its default mtime included), without manifest_url and
 * release, which the caller puts. When the copy fails its checks or cannot be read back, idx
 * is as it was (the backup is one transaction), and why (why_len bytes) says what was wrong
 * in a few words; -ENOTRECOVERABLE when idx was filled but its default mtime could not be
 * read back (no load may follow then).
 */
int index_copy_restore(struct index *idx, const char *path, char *why, size_t why_len);

#endif

/*
 * Whether a directory's path name can be trusted to keep naming it (sshd's StrictModes
 * rule). sqlite opens index.db by its path text, after fetch/cache/cache_dir.c checked the
 * directory through an fd; anyone who may rename a directory on that path could swap in one of
 * theirs in between, and the daemon (often root) would then parse their database.
 */
#ifndef SPOOLFS_FETCH_PATH_TRUST_H
#define SPOOLFS_FETCH_PATH_TRUST_H

#include <stddef.h>

/*
 * `path` is absolute and canonical (realpath's). It and every directory above it up to
 * "/" must be owned by root or the effective uid and not writable by group or others,
 * unless sticky (others cannot rename our entries in a 1777 /tmp). 0 when trusted;
 * otherwise -EACCES (or -errno when a component cannot be examined, -EINVAL for a path
 * that is not absolute) with one sentence in why naming the directory and its fault.
 */
int fetch_path_trusted(const char *path, char *why, size_t why_len);

#endif

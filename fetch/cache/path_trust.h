/*
 * Whether a directory's path name can be trusted to keep naming it: kept for callers of the
 * older name. The rule and its walk are util/trusted_path.h's, for every user-given path.
 */
#ifndef SPOOLFS_FETCH_PATH_TRUST_H
#define SPOOLFS_FETCH_PATH_TRUST_H

#include <stddef.h>

#include "util/trusted_path.h"

/*
 * `path` is absolute and canonical (realpath's): util_path_trusted with no symlink allowed
 * on it. 0 when trusted; otherwise -EACCES (or -errno when a component cannot be examined,
 * -EINVAL for a path that is not absolute) with one sentence in why naming the directory
 * and its fault.
 */
static inline int fetch_path_trusted(const char *path, char *why, size_t why_len)
{
	return util_path_trusted(path, UTIL_TRUST_NO_SYMLINKS, why, why_len);
}

#endif

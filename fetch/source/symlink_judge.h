/*
 * The symlinks of one manifest load, judged once the rest of the snapshot is known
 * (symlink_judge.c): under --outside-symlinks hide or refuse, the loader keeps each link
 * aside instead of adding it, adds everything else, then asks where each link leads
 * (symlink_resolve.h) over the names of this load, the links kept aside, and what the
 * namespace held before it (the directories above a nested manifest; every other directory
 * with a manifest of its own is opaque, loaded yet or not, so that the verdict does not
 * depend on the order directories were listed in). A link may point at a
 * name that comes later in the manifest, or through another link: judged as text, a chain
 * got out. Links that stay are then added, in their order; the others are left out and
 * logged with their chain, or refuse the manifest.
 *
 * Cost: nothing for a load without symlinks; a copy and a walk per link otherwise. One
 * loader thread owns a judge: no lock.
 */
#ifndef SPOOLFS_FETCH_SOURCE_SYMLINK_JUDGE_H
#define SPOOLFS_FETCH_SOURCE_SYMLINK_JUDGE_H

#include <stddef.h>
#include <stdint.h>

#include "fetch/source/manifest_load.h"
#include "fetch/source/symlink_resolve.h"
#include "index/index.h"

struct symlink_judge;

/* A judge for build b, which loads directory dir of idx (INDEX_ROOT_INO: the whole
 * namespace). 0 or -ENOMEM; *out is the caller's (symlink_judge_free). */
int symlink_judge_new(struct index *idx, struct index_builder *b, uint64_t dir,
                      struct symlink_judge **out);

/* Keeps a copy of symlink entry i (be's path, target and mtime) for symlink_judge_run.
 * 0 or -ENOMEM. */
int symlink_judge_defer(struct symlink_judge *j, int64_t i, const struct index_build_entry *be);

/* Adds a link that stays: the loader's, naming entry i in its message when the namespace
 * refuses it. 0 or -errno. */
typedef int (*symlink_judge_add_fn)(void *ctx, int64_t i, const struct index_build_entry *be);

/* A link that does not stay, for the caller's message (refuse). */
struct symlink_verdict {
	int64_t i;
	const char *path, *target; /* the entry's, valid until symlink_judge_free */
	size_t path_len, target_len;
	struct symlink_result res;
};

/*
 * Once every other entry of the load is added (and before the commit): judges each link kept
 * aside against the whole snapshot, then, under MANIFEST_OUTSIDE_HIDE, adds those that stay
 * (add) and counts and logs the others (*hidden); under MANIFEST_OUTSIDE_REFUSE, returns
 * -EINVAL with the first that does not stay (in the manifest's order) in *bad, adding
 * nothing. -E2BIG when the walks took more lookups than the load's budget (a manifest of
 * many long chains: judging it would hold the mount for minutes). 0, -EINVAL, -E2BIG, or
 * -errno (from add too).
 */
int symlink_judge_run(struct symlink_judge *j, enum manifest_outside_symlinks mode,
                      symlink_judge_add_fn add, void *ctx, unsigned *hidden,
                      struct symlink_verdict *bad);

void symlink_judge_free(struct symlink_judge *j);

#endif

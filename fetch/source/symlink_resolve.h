/*
 * Where a symlink of a snapshot leads (symlink_resolve.c): its path is walked from the
 * mount's root the way the kernel walks it under openat2(RESOLVE_BENEATH), over the
 * snapshot's own names (a lookup function the caller gives), following symlinks with the
 * kernel's bound of 40. Knows nothing of the index, of manifests nor of FUSE: the loader
 * (symlink_judge.h) gives it the index's names, the unit suite and the fuzz target their
 * own.
 */
#ifndef SPOOLFS_FETCH_SOURCE_SYMLINK_RESOLVE_H
#define SPOOLFS_FETCH_SOURCE_SYMLINK_RESOLVE_H

#include <stdbool.h>
#include <stddef.h>

/* Symlinks one walk may follow: the kernel's MAXSYMLINKS, the link itself included. */
#define SYMLINK_RESOLVE_MAX_LINKS 40
/* The room for a chain's description (struct symlink_result.chain). */
#define SYMLINK_CHAIN_MAX 512

/* What a path names in the snapshot. */
enum symlink_node_kind {
	SYMLINK_NODE_FILE,
	SYMLINK_NODE_DIR,
	SYMLINK_NODE_LINK,
	/* A directory whose entries are in a manifest of its own that the walk may not enter
	 * (not loaded yet, or not above the manifest being judged): what is below is unknown. */
	SYMLINK_NODE_UNLISTED,
};

struct symlink_node {
	enum symlink_node_kind kind;
	const char *target; /* SYMLINK_NODE_LINK: target_len bytes, valid until the next call */
	size_t target_len;
};

/*
 * Looks up path (len > 0 bytes, relative to the mount's root, segments joined by single
 * '/', none "." or "..") in the snapshot. 0 and *out filled, -ENOENT when there is no such
 * name, or another -errno (the walk ends with it).
 */
typedef int (*symlink_lookup_fn)(void *ctx, const char *path, size_t len, struct symlink_node *out);

/* How a walk ended. */
enum symlink_end {
	SYMLINK_INSIDE,   /* at a name of the snapshot */
	SYMLINK_DANGLING, /* a name is missing (ENOENT): nothing is reached */
	SYMLINK_NOTDIR,   /* a file is walked through (ENOTDIR): nothing is reached */
	SYMLINK_LOOP,     /* more than SYMLINK_RESOLVE_MAX_LINKS links (ELOOP) */
	SYMLINK_ESCAPES,  /* an absolute target, or ".." at the mount's root (EXDEV) */
	SYMLINK_UNKNOWN,  /* a name below a SYMLINK_NODE_UNLISTED directory is needed */
};

struct symlink_result {
	enum symlink_end end;
	unsigned links; /* symlinks followed */
	/* The links followed, in order (`x -> "d/../etc", d -> "." (x8)`), and how the walk
	 * ended: for a log line or a message. Cut with "..." when long. */
	char chain[SYMLINK_CHAIN_MAX];
};

/*
 * Walks path (len bytes, relative to the mount's root: a link's own path, whose parents
 * are directories) and follows the symlinks met, the last one included, as open() would.
 * A segment followed by '/' (in its text, or because the link it ended was) must be a
 * directory. 0 and *out filled, or -errno from lookup / -ENOMEM.
 */
int symlink_resolve(symlink_lookup_fn lookup, void *ctx, const char *path, size_t len,
                    struct symlink_result *out);

/*
 * Whether a link that ends so must be kept out of a snapshot that promises none leads out:
 * SYMLINK_ESCAPES; SYMLINK_UNKNOWN (it cannot be judged without another manifest: loading
 * one to judge, or hiding the link later, would change the snapshot); SYMLINK_LOOP (no walk gets
 * through it, but a resolver with a larger bound than the kernel's, or a reader that counts in user
 * space, might, and a loop is nothing a tree needs). A dangling link, or one that walks
 * through a file, reaches nothing and stays.
 */
bool symlink_end_leaves(enum symlink_end end);

/* A few words for end ("leads above the mount's root", ...), for messages. */
const char *symlink_end_text(enum symlink_end end);

#endif

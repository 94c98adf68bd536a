/*
 * index: the session's namespace (inodes, names, sizes, hashes, URLs), in a private
 * temporary sqlite database. The spool records of a cache directory are another type,
 * struct index_records (index/records.h), opened and closed on their own.
 *
 * Lock: struct index has one mutex serialising its connection and statements. Callers hold
 * no lock of theirs while calling in (the index is the innermost lock: never call out of
 * it). Inode numbers are sqlite rowids; the root directory is inode 1, which is FUSE's root
 * id. The namespace never changes after loading: the session is a snapshot.
 *
 * All functions that can fail return 0 (or a count) on success and -errno on failure.
 */
#ifndef SPOOLFS_INDEX_INDEX_H
#define SPOOLFS_INDEX_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define INDEX_ROOT_INO 1
#define INDEX_NAME_MAX 255
#define INDEX_SHA256_HEX 64
#define INDEX_ETAG_MAX 250 /* longest version tag a manifest may pin */

struct index;

/* What a node is. A v1 manifest and S3 listings give files and directories only. */
enum index_kind { INDEX_KIND_FILE = 0, INDEX_KIND_DIR = 1, INDEX_KIND_SYMLINK = 2 };

#define INDEX_SYMLINK_MAX 4095 /* longest symlink target a manifest may give (PATH_MAX - 1) */

struct index_node {
	uint64_t ino;
	uint64_t parent;
	enum index_kind kind;
	bool is_dir;     /* kind == INDEX_KIND_DIR */
	bool executable; /* mode has an execute bit (files) */
	/* The permission bits shown (st_mode & 07777): read and execute bits only, never
	 * write, setuid, setgid or sticky. Files default to 0444 (0555 executable),
	 * directories to 0555, symlinks are 0777. */
	uint32_t mode;
	uint64_t size; /* 0 for directories */
	int64_t mtime; /* seconds since the epoch (see index_set_default_mtime) */
	char sha256[INDEX_SHA256_HEX + 1]; /* lower-case hex, "" when unknown */
	char name[INDEX_NAME_MAX + 1];     /* "" for the root */
};

/*
 * Once per process, before any thread or sqlite connection exists: sets sqlite up for how
 * spoolfs uses it. Memory statistics off: with them, every sqlite allocation takes one
 * global mutex, which the loader's two threads (load_pipe.h) fought over for a tenth of a
 * large load. 0 or -errno (sqlite already in use).
 */
int index_init_process(void);

/* Opens a fresh, empty namespace of this session's alone. *out is owned by the caller
 * (index_close). */
int index_open(struct index **out);
/*
 * The namespace in the file at path (0600), for a mount whose serving process may be
 * replaced (doc/survive.md): fresh makes it anew (what was there goes); otherwise it is the
 * one an earlier process of the same session built, reopened as it was (listings and
 * nested manifests loaded since included), never rebuilt. One process at a time. A file of
 * an older schema is upgraded; one a newer spoolfs made is refused with -EPROTO (its
 * columns may mean what this one would misread). Else 0 or -errno.
 */
int index_open_file(const char *path, bool fresh, struct index **out);
void index_close(struct index *idx);

/* Small facts kept with the namespace for the next serving process (the manifest's URL
 * after redirects): put replaces; get gives a malloc'd copy, or -ENOENT. */
int index_meta_put(struct index *idx, const char *key, const char *value);
int index_meta_get(struct index *idx, const char *key, char **value);

/*
 * The mtime of what its source gives none: a manifest entry without "mtime", a listed
 * object without LastModified, a listed directory, and the root until something below it
 * is newer. Call before loading the namespace; until then such entries read 0 (1970).
 * Returns 0 or -errno.
 */
int index_set_default_mtime(struct index *idx, int64_t mtime);

/*
 * Building a whole namespace from entries named by path (what a manifest source gives), in
 * one transaction: index_build_commit makes every entry visible at once, and
 * index_build_abort (or any failed call) leaves the namespace empty. Directories no entry
 * names are implied by the paths below them and take the newest mtime beneath; a directory
 * entry gives one its own mode and mtime, and makes an empty one.
 *
 * Lock: each call takes idx->lock for its statements. The builder belongs to the thread
 * that began it, which ends it (commit or abort); index_build_add may be called from
 * another thread, one call at a time. One build runs at a time in the process: a second
 * index_build_begin* waits until the first ends.
 */
struct index_builder;

/*
 * How an object is stored, as the loader checked it (index_stored once in the index):
 * size bytes at its URL, one zstd frame per `frame` bytes of the object; frame 0: stored
 * as it is. le: each frame's stored length, little-endian u32s (le_len bytes, the
 * caller's, read during the call only); NULL with chunk hashes, whose hash list holds them.
 */
struct index_stored_view {
	uint64_t size;
	uint64_t frame;
	const unsigned char *le;
	size_t le_len;
};

struct index_build_entry {
	const char *path; /* relative, '/'-separated, path_len bytes (no NUL needed) */
	size_t path_len;
	enum index_kind kind;
	bool has_mode;
	uint32_t mode; /* as given; the namespace keeps the read and execute bits (& 0555) */
	bool has_mtime;
	int64_t mtime;      /* else the default (index_set_default_mtime) */
	uint64_t size;      /* files */
	const char *sha256; /* files: lower-case hex, or NULL */
	const char *url;    /* files that are not pack members */
	const char *etag;   /* files: the version to pin, or NULL */
	const char *target; /* symlinks: target_len bytes, no NUL */
	size_t target_len;
	const char *pack_sha256; /* pack members: a pack index_build_add_pack declared */
	uint64_t offset;         /* pack members: where the member starts in its pack */
	/* Directories whose entries are in a manifest of their own (loaded at their first
	 * lookup by index_build_begin_at): its sha256 (lower-case hex), size and URL; NULL
	 * nested_sha256: none. */
	const char *nested_sha256;
	uint64_t nested_size;
	const char *nested_url;
	/* Chunk hashes (index_chunks_ref). chunk_size 0: none. */
	uint64_t chunk_size;
	const char *chunk_sha256;        /* the hash list's sha256, lower-case hex */
	const char *chunk_url;           /* where the hash list is */
	struct index_stored_view stored; /* files: frame 0, stored as it is */
};

/* Starts building the empty namespace idx. 0, -EBUSY when it holds entries already, or
 * -errno. *out is owned by the caller until index_build_commit or index_build_abort. */
int index_build_begin(struct index *idx, struct index_builder **out);

/*
 * Starts building the subtree of directory dir, whose entries are in a manifest of its own
 * (index_build_entry.nested_*): paths are relative to dir, and the commit marks dir listed
 * (index_dir_listed). 0; -EBUSY when dir is listed already (another thread did it);
 * -ENOTDIR, -ENOENT; or -errno.
 */
int index_build_begin_at(struct index *idx, uint64_t dir, struct index_builder **out);

/* Where directory ino's own manifest is. */
struct index_nested_ref {
	char sha256[INDEX_SHA256_HEX + 1];
	uint64_t size;
	char *url; /* malloc'd for the caller */
};
/* 0 and *out filled, -ENODATA when ino has no manifest of its own, -ENOENT, -ENOTDIR. */
int index_get_nested(struct index *idx, uint64_t ino, struct index_nested_ref *out);

/*
 * Declares a pack: an object (named by its sha256, lower-case hex) whose byte ranges are
 * files, its members, stored as `stored` says (NULL or frame 0: as it is). Declaring it
 * again with the same size is fine, and keeps its first form (both name the same
 * uncompressed bytes). 0, -errno, or -EINVAL with a reason in why when that sha256 was
 * declared with another size.
 */
int index_build_add_pack(struct index_builder *b, const char *sha256, uint64_t size,
                         const char *url, const struct index_stored_view *stored, char *why,
                         size_t why_len);

/*
 * Adds one entry. 0, -errno, or -EINVAL with a reason in why (`path has a ".." segment`,
 * `duplicate path`, ...), nothing added then; the caller names the entry around it.
 */
int index_build_add(struct index_builder *b, const struct index_build_entry *e, char *why,
                    size_t why_len);

/* Makes the namespace visible and frees b. On failure the namespace stays empty. */
int index_build_commit(struct index_builder *b);
/* Drops everything added and frees b (NULL is fine). */
void index_build_abort(struct index_builder *b);

/* The child `name` of directory `parent`. -ENOENT when absent, -ENOTDIR when parent is a file. */
int index_lookup(struct index *idx, uint64_t parent, const char *name, struct index_node *out);

/* The node with inode `ino`, or -ENOENT. */
int index_get(struct index *idx, uint64_t ino, struct index_node *out);

/* Node n's path from the root ("a/b/c.bin", "" for the root) in buf (len > 0 bytes), for
 * log lines and listings: what does not fit is left off at the root's end. Walks its
 * parents under one turn of the lock. */
void index_node_path(struct index *idx, const struct index_node *n, char *buf, size_t len);

/*
 * The target of symlink `ino`, NUL-terminated in buf (at most INDEX_SYMLINK_MAX + 1 bytes
 * are needed). Returns the target's length, -ENOENT, -EINVAL when ino is no symlink, or
 * -ERANGE when len is too small.
 */
int index_readlink(struct index *idx, uint64_t ino, char *buf, size_t len);

/*
 * Where a packed file's bytes are: its pack (an object of its own, named by the pack's
 * sha256, fetched whole by one flight) and the member's offset in it. The member's own
 * size and sha256 are the node's.
 */
/*
 * How an object is stored (doc/manifest.md, version 3): independent zstd frames, one per
 * `frame` bytes of the object (the last holds the rest), `size` bytes in all at its URL.
 * frame 0: stored as it is (size 0). n_frames: ceil(object size / frame). in_index: the
 * frames' stored lengths are in the index (index_get_stored_frames gives them, read only
 * for a new flight); false when they are in the object's hash list (a chunked object).
 */
struct index_stored {
	uint64_t size;
	uint64_t frame;
	uint64_t n_frames;
	bool in_index;
};

/* Bytes per frame length in the index's tables (little-endian u32s, the loader's form). */
#define INDEX_FRAME_LE_BYTES 4

struct index_pack_ref {
	char pack_sha256[INDEX_SHA256_HEX + 1]; /* lower-case hex */
	uint64_t pack_size;
	uint64_t offset;            /* offset + node size <= pack_size, checked at load */
	char *url;                  /* the pack's URL, resolved like any object URL; malloc'd */
	struct index_stored stored; /* how the pack is stored */
};

/*
 * A file's chunk hashes: its object is verified chunk by chunk, each chunk_size bytes (the
 * last one shorter) checked against its entry in the hash list, an object of its own of
 * 32 bytes (a sha256) per chunk, named by its sha256 and fetched from url.
 */
struct index_chunks_ref {
	uint64_t chunk_size;               /* a power of two, checked at load */
	char sha256[INDEX_SHA256_HEX + 1]; /* the hash list's, lower-case hex */
	char *url;                         /* the hash list's, malloc'd */
};

/*
 * Everything an open needs of node ino, read in one query (one turn of the index lock): the
 * node, and for a file where its bytes are: its own URL and pinned version, or its pack
 * (pack.url set: a pack member, whose url is NULL), and its chunk hashes (chunks.chunk_size
 * 0: none). A directory or symlink gives the node only. Free with index_object_ref_free.
 */
struct index_object_ref {
	struct index_node node;
	char *url;                      /* the file's own object URL; NULL for a pack member */
	char etag[256];                 /* the version to pin, "" when none (as index_get_etag) */
	struct index_pack_ref pack;     /* pack.url NULL: not packed */
	struct index_chunks_ref chunks; /* chunks.chunk_size 0: none */
	struct index_stored stored;     /* the file's own object's (not a member's) */
};
/* 0 and *out filled, or -ENOENT, -ENOMEM, -EIO with nothing in *out to free. */
int index_get_object(struct index *idx, uint64_t ino, struct index_object_ref *out);
void index_object_ref_free(struct index_object_ref *ref);

/*
 * The frame table of file ino's object (its pack's for a member), as the loader gave it:
 * n_frames little-endian u32s (INDEX_FRAME_LE_BYTES each), malloc'd into *le, *le_len
 * bytes. 0; -ENOENT when the index has none (stored as it is, or in a hash list);
 * -ENOMEM. Nothing to free on failure.
 */
int index_get_stored_frames(struct index *idx, uint64_t ino, unsigned char **le, size_t *le_len);

/* The object URL of file `ino` in *url (malloc'd, caller frees). -ENOENT, -EISDIR, -ENOMEM. */
int index_get_url(struct index *idx, uint64_t ino, char **url);

/*
 * Calls fn for the children of directory `dir` in a stable order, starting after `cookie`
 * (0 = from the first child). Each call passes the cookie that resumes after that child.
 * fn returns 0 to go on or 1 to stop (a full reply buffer). The index lock is held during fn:
 * fn must not call back into the index. Returns 0, -ENOENT or -ENOTDIR.
 */
typedef int (*index_dir_fn)(void *ctx, const struct index_node *child, uint64_t next_cookie);
int index_readdir(struct index *idx, uint64_t dir, uint64_t cookie, index_dir_fn fn, void *ctx);

/* Totals over the namespace, for statfs. */
int index_totals(struct index *idx, uint64_t *files, uint64_t *dirs, uint64_t *bytes);

/*
 * Lazy namespaces (sources that list directories on demand, like S3). After
 * index_begin_lazy (on a fresh namespace) the root is unlisted; index_add_listing adds a
 * directory's children and marks it listed, atomically. Child directories start unlisted.
 * When two entries share a name the first wins: pass directories first, so a key that is
 * both an object and a prefix ("a" and "a/b") shows as the directory.
 */
struct index_entry {
	const char *name; /* one segment that passes index_check_segment */
	bool is_dir;
	uint64_t size; /* files */
	int64_t mtime;
	const char *etag;   /* files: the version to pin, or NULL */
	const char *url;    /* files */
	const char *sha256; /* lower-case hex or NULL */
};
int index_begin_lazy(struct index *idx);
/* *listed for directory `dir`. 0, -ENOENT or -ENOTDIR. */
int index_dir_listed(struct index *idx, uint64_t dir, bool *listed);
/*
 * For a walk across directories that have manifests of their own: the next sibling of dir
 * (in readdir order) that has one and is not listed yet, in *next (0: none), and whether
 * the sibling before dir that has one is listed (*after_listed: a walk came through it).
 * 0, -ENOENT, or -errno.
 */
int index_next_nested_sibling(struct index *idx, uint64_t dir, uint64_t *next, bool *after_listed);
/* 0, -EINVAL for a bad name (nothing added), or -errno. */
int index_add_listing(struct index *idx, uint64_t dir, const struct index_entry *entries, size_t n);
/* The ETag a file's version is pinned to ("" when none). 0, -ENOENT, -EISDIR. */
int index_get_etag(struct index *idx, uint64_t ino, char *etag, size_t len);

/*
 * Checks one path segment (a file or directory name) for a namespace: non-empty, not "." or
 * "..", no '/', no NUL within len, at most INDEX_NAME_MAX bytes. Returns NULL when fine, else
 * a static description of what is wrong ("empty segment", "\"..\" segment", ...).
 */
const char *index_check_segment(const char *name, size_t len);

/*
 * The mount's own status directory, at its root (fs/virtual.c). The store cannot have an
 * entry there: the kernel would cache the store's, and hide the daemon's.
 */
#define INDEX_RESERVED_ROOT_NAME ".spoolfs"

/* index_check_segment for a name at the root: also refuses INDEX_RESERVED_ROOT_NAME. */
const char *index_check_root_segment(const char *name, size_t len);

/*
 * Checks a relative path of a namespace: not empty, not absolute, each segment by
 * index_check_segment, the first by index_check_root_segment too when the path starts at
 * the mount's root (at_root; not in a nested manifest). NULL when fine, else why not
 * ("path has a \"..\" segment"), possibly written into buf (cap bytes).
 */
const char *index_check_path(const char *path, size_t len, bool at_root, char *buf, size_t cap);

/*
 * What build b holds at path (len bytes, relative to the directory built; "" is that
 * directory): 0 with *kind, and *nested when it is a directory with a manifest of its own;
 * -ENOENT. For the loader's thread once no index_build_add runs (the table is the
 * builder's own, unlocked). Added for the symlink judge (fetch/source/symlink_judge.h).
 */
int index_build_find(struct index_builder *b, const char *path, size_t len, enum index_kind *kind,
                     bool *nested);

#endif

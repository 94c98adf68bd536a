/*
 * What the parts of `spoolfs publish` share: the tree as walked (walk.c), the objects
 * store (store.c), the worker pool (pool.c) and the manifest writer (manifest.c).
 *
 * Ownership: the walk builds every entry and pack on the main thread before any worker
 * starts. Each job then fills in only its own entry's or pack's fields (sha256, size,
 * offset), and the main thread reads them after joining the workers, so entries and packs
 * need no lock. Only struct pub_store's counters and dirty set are shared while workers
 * run: they are guarded by pub_store.lock.
 */
#ifndef SPOOLFS_PUBLISH_PUBLISH_I_H
#define SPOOLFS_PUBLISH_PUBLISH_I_H

#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <openssl/evp.h>

#include "publish/publish.h"

#define PUB_SHA256_LEN 32
/* A compressed file's hash list record: a chunk's sha256, then its frame's stored length. */
#define PUB_RECORD_LEN (PUB_SHA256_LEN + 4)
/* The longest symlink target a manifest may hold (and Linux stores). */
#define PUB_TARGET_MAX 4095

enum pub_kind { PUB_DIR, PUB_FILE, PUB_SYMLINK };

struct pub_pack;

/*
 * How an object is stored when it is compressed (doc/manifest.md, version 3): independent
 * zstd frames of `frame` bytes of its content each. on false: stored as it is.
 */
struct pub_stored {
	bool on;
	unsigned char sha256[PUB_SHA256_LEN]; /* of the stored bytes: the object's name */
	uint64_t size;                        /* the stored bytes */
	uint64_t frame;
	uint32_t *frames; /* n stored lengths, in order; owned */
	size_t n;
};

/* One object's compression as it is written (compress.c). */
struct pub_compressor {
	struct ZSTD_CCtx_s *cctx;
	uint64_t frame;
	unsigned char *in;  /* frame bytes: the frame being gathered, fill of them so far */
	unsigned char *out; /* out_cap bytes: one compressed frame */
	size_t fill, out_cap;
	uint32_t *lens; /* cap frames' stored lengths (fixed by the size); n made */
	size_t n, cap;
	uint64_t stored; /* the lengths added up */
	/* The judgement on the first PUB_JUDGE_BYTES (pub_compressor_feed): the saving a
	 * prefix must show, in percent (min_saving / 5), and whether it was made. */
	unsigned judge_saving;
	bool judged;
};

/* A file's chunk hash list as it is copied (chunks.c). */
struct pub_chunker {
	EVP_MD_CTX *md;      /* the chunk being hashed */
	unsigned char *list; /* cap digests of PUB_SHA256_LEN bytes; n filled */
	size_t n, cap;
	uint64_t chunk_size, in_chunk;
};

struct pub_entry {
	char *path;   /* relative to the source, '/'-separated, valid UTF-8; owned */
	char *target; /* PUB_SYMLINK: the link's target; owned */
	enum pub_kind kind;
	mode_t mode;   /* st_mode & 0777 */
	int64_t mtime; /* seconds */
	/* Its identity as the walk saw it: what is opened later must be this very file or
	 * directory, not one put in its place since (beneath.c). */
	dev_t dev;
	ino_t ino;
	/* PUB_FILE: the size lstat gave (it plans packs), then the bytes read and hashed. */
	uint64_t size;
	unsigned char sha256[PUB_SHA256_LEN];
	struct pub_pack *pack; /* NULL: the file is an object of its own */
	uint64_t offset;       /* in pack */
	/* Nesting (nest.c): the nearest directory above with a manifest of its own, whose
	 * manifest holds this entry (NULL: the top manifest); for a directory that has one,
	 * that manifest's digest and size once written. */
	struct pub_entry *owner;
	/* PUB_FILE over --chunk-over: its chunk hash list, and that list's object's digest. */
	struct pub_chunker chunks;
	unsigned char chunk_list_sha256[PUB_SHA256_LEN];
	struct pub_stored stored; /* its own object compressed (not a pack member) */
	bool nested;
	unsigned char nested_sha256[PUB_SHA256_LEN];
	uint64_t nested_size;
	bool in_order; /* read_order.c's mark while it merges one order */
};

/* Small files of one directory, in name order, concatenated into one object. */
struct pub_pack {
	struct pub_entry **members; /* owned array; the entries belong to the tree */
	size_t n_members, cap_members;
	uint64_t planned; /* the members' lstat sizes added up: what closes the pack */
	uint64_t size;    /* bytes written, once its job ran */
	unsigned char sha256[PUB_SHA256_LEN];
	struct pub_stored stored;
};

/* A read order for the top manifest (read_order.c): files of the tree, in order. */
struct pub_order {
	const char *name; /* the option's */
	struct pub_entry **paths;
	size_t n;
};

struct pub_tree {
	struct pub_entry **entries; /* sorted by path once pub_walk returns */
	size_t n_entries, cap_entries;
	struct pub_pack **packs; /* sorted by their first member's path */
	size_t n_packs, cap_packs;
	struct pub_order *orders; /* --read-order's, by name in the order first given */
	size_t n_orders;
	int version; /* of the manifests written: 3 when objects are compressed, else 2 */
};

/*
 * Walks the directory open at src_fd (src: its real path, for messages) with lstat, never
 * following a symlink, each directory opened beneath src_fd (pub_open_beneath) and checked
 * to be the one its parent listed, and plans the packs (o->pack_under, o->pack_max). Warns
 * on stderr about each entry it skips (sockets, FIFOs, devices, `.spoolfs` at the top).
 * Fails, naming the path on stderr, on an unreadable directory, a name or symlink target
 * that is not UTF-8, a directory replaced while it runs. 0, or -errno; the tree is for
 * pub_tree_free either way. Holds one directory fd at a time.
 */
int pub_walk(int src_fd, const char *src, const struct publish_options *o, struct pub_tree *tree);

/*
 * Opens rel ("" for the directory itself) beneath the directory open at dir_fd, through no
 * symlink and no "..": openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS. A directory on
 * rel's path swapped for a symlink to elsewhere then fails (-ELOOP) instead of leading out
 * of SRC_DIR. -ENOSYS on a kernel before 5.6. The fd, or -errno (unsaid).
 */
int pub_open_beneath(int dir_fd, const char *rel, int flags);
/* Why pub_open_beneath failed, for a message: ELOOP and ENOSYS explained, else strerror. */
const char *pub_beneath_why(int rc);
/*
 * Opens file e of the source for reading (beneath src_fd, see pub_open_beneath) and checks
 * that it is still the regular file the walk saw: the same st_dev and st_ino, and e->size
 * bytes. The fd, or -errno said naming src/e->path (-ESTALE: replaced or resized since).
 */
int pub_open_seen(int src_fd, const char *src, const struct pub_entry *e);

/* Checks that OUT_DIR (real, canonical) and OUT_DIR/objects, when it exists, are trusted:
 * neither a symlink, each owned by us (or root) and not writable by others, and the same
 * for every directory above (util_path_trusted). 0, or -errno said naming the path. */
int pub_out_trusted(const char *out_real);
void pub_tree_free(struct pub_tree *tree);

/*
 * Reads o->read_orders' files into tree->orders (after pub_walk): each path checked against
 * the tree, a path that is no file of it dropped with a warning, the files of one name
 * merged by rank. 0, or -errno said (a file that cannot be read).
 */
int pub_read_orders(const struct publish_options *o, struct pub_tree *tree);
void pub_read_orders_free(struct pub_tree *tree);

/* n bytes for a person: "512 B", "1.5 MiB". Returns buf. */
const char *pub_human(uint64_t n, char *buf, size_t cap);

/* Writes s into buf for a message: control bytes (and with high, bytes >= 0x80) as \xNN,
 * cut with "..." when it would not fit. Returns buf. */
const char *pub_quote(const char *s, bool high, char *buf, size_t cap);
/* One line on stderr: "spoolfs publish: LEVELDIR/REL: WHY" (REL may be ""), through
 * pub_quote (high: bytes >= 0x80 too, for a name that is not UTF-8). */
void pub_say(const char *level, const char *dir, const char *rel, const char *why, bool high);

/* OUT_DIR's object store. */
struct pub_store {
	char *out;            /* OUT_DIR as a real path; owned */
	mode_t file_mode;     /* 0666 minus the umask: objects are for a server to read */
	atomic_bool stop;     /* a job failed: the others stop at their next read */
	bool probe_first;     /* objects/ held objects already: hash before copying */
	bool verify_existing; /* --verify-existing: an object there is re-hashed, not sized */
	/* Compression (publish_options'): level 0 stores every object as it is. */
	int level;
	unsigned min_saving;
	/* publish_options.known: set before the workers start, only read after. */
	bool (*known)(void *ctx, const unsigned char sha256[PUB_SHA256_LEN], uint64_t size);
	void *known_ctx;
	pthread_mutex_t lock;
	/* Guarded by lock. */
	bool dirty[256]; /* objects/XX got a new name: fsync'd before the manifest */
	bool dirty_top;  /* objects/ got a new subdirectory */
	uint64_t written, written_bytes, existing;
	/* Every object of the tree, new or there already: content and stored bytes. */
	uint64_t total_raw, total_stored;
};

int pub_store_open(struct pub_store *st, const char *out_real);
/* fsyncs the directory at path (a rename in it is durable then). 0 or -errno, said. */
int pub_sync_dir(const char *path);
/* fsyncs each objects/XX that got a new object, and objects/. 0 or -errno, said. */
int pub_store_sync(struct pub_store *st);
void pub_store_close(struct pub_store *st);

/* One object being written: a temporary file in OUT/objects, its digest running. */
struct pub_object;

/*
 * With probe, the object only hashes what pub_object_copy reads and writes nothing: for a
 * re-publish, whose objects are mostly there already. 0, or -errno said on stderr.
 */
int pub_object_begin(struct pub_store *st, bool probe, struct pub_object **out);
/*
 * Copies size bytes of the file open at fd (dir/rel, for messages) into the object,
 * hashing them on the way into the object's digest and, unless file_sha256 is NULL (an
 * object of one file: the object's digest is the file's), into file_sha256; returns the
 * bytes copied. A file that ends before size bytes fails (-ESTALE: it changed size while
 * it was published). 0 or -errno, said naming the path; -ECANCELED unsaid when st->stop
 * was raised. fd stays the caller's.
 */
int pub_object_copy(struct pub_object *obj, int fd, const char *dir, const char *rel, uint64_t size,
                    unsigned char file_sha256[PUB_SHA256_LEN], uint64_t *copied);
/*
 * Gives the object its content address: kept when that name exists already as a regular
 * file of the object's size (with st->verify_existing: and its bytes hash to its name),
 * else fsync'd and renamed there, over a wrong one (said with a warning line). Frees obj either
 * way. *sha256 is its digest, *size its bytes. *stored is false only for a probe whose name does
 * not exist (or holds wrong bytes): its bytes must be copied then. 0 or -errno, said.
 */
int pub_object_commit(struct pub_object *obj, unsigned char sha256[PUB_SHA256_LEN], uint64_t *size,
                      bool *stored, struct pub_stored *zs);
/*
 * Compresses the object as it is copied, in frames of `frame` content bytes (its content
 * is size bytes, as the walk saw them), with st->level. Call after pub_object_begin. The
 * object is then named by its stored bytes' digest, and pub_object_commit fills zs (its
 * sha256 and size stay the content's). 0 or -errno.
 */
int pub_object_compress(struct pub_object *obj, uint64_t frame, uint64_t size);
/* Once the bytes are copied: whether the compressed object shrank by st->min_saving percent
 * (its last frame is made here). false: the caller stores it as it is instead, aborting obj.
 * 0 or -errno in *rc. */
bool pub_object_shrunk(struct pub_object *obj, int *rc);
/* Hashes the object's bytes into c too, chunk by chunk (a file over --chunk-over). Call
 * after pub_object_begin; c is reset for the file's size. 0 or -errno. */
int pub_object_chunks(struct pub_object *obj, struct pub_chunker *c, uint64_t chunk_size,
                      uint64_t file_size);

/* Stores len bytes (a hash list, a nested manifest) as an object; *sha256 its digest.
 * 0 or -errno, said. */
int pub_store_bytes(struct pub_store *st, const void *data, size_t len,
                    unsigned char sha256[PUB_SHA256_LEN]);

/* A probe's content digest, once its bytes are copied; frees obj. 0 or -EIO. */
int pub_object_digest(struct pub_object *obj, unsigned char sha256[PUB_SHA256_LEN]);
/* Counts an object another job of this publish made (twins.c). */
void pub_store_count_twin(struct pub_store *st, uint64_t raw, uint64_t stored);

/* Removes the temporary file and frees obj. NULL is fine. */
void pub_object_abort(struct pub_object *obj);

/* Read and written at a time: large enough that syscalls cost little beside hashing. */
#define PUB_COPY_BUF (1u << 20)
/*
 * How much of an object is written before the disk is asked to start on it. The stretch
 * before, written by then, leaves the page cache: a 1 GiB object then lives in a few
 * recycled pages instead of 1 GiB of fresh ones (on the benchmark VM, filling fresh page
 * cache cost 0.3 to 3.4 s of system time per GiB, recycled pages 0.4 s), the fsync before
 * the rename waits for the last stretch only, and a publish does not evict the machine's
 * cache with bytes it will not read again.
 */
#define PUB_WRITEBACK (8u << 20)

/* Where an object's bytes go: its temporary file, and how far they are on their way. */
struct pub_sink {
	int fd;
	uint64_t written, written_back;
};

/* Writes n bytes at the sink's end, and starts writeback (PUB_WRITEBACK). 0 or -errno. */
int pub_sink_write(struct pub_sink *s, const unsigned char *p, size_t n);

/* A thread that writes a large object's bytes while its job's thread hashes them. */
struct pub_writer;
/* Starts one; the sink is the writer's until pub_writer_stop. 0 or -errno. */
int pub_writer_start(struct pub_sink *sink, struct pub_writer **out);
/* A buffer of PUB_COPY_BUF bytes to fill next, after waiting for one to be free; NULL with
 * *error set once a write failed. */
unsigned char *pub_writer_buffer(struct pub_writer *w, int *error);
/* Hands over the buffer pub_writer_buffer gave, holding n bytes, to be written. */
void pub_writer_queue(struct pub_writer *w, size_t n);
/* Writes what was handed over, ends the thread, frees w (NULL is fine). 0 or the first
 * write's -errno. */
int pub_writer_stop(struct pub_writer *w);

/* "objects/ab/ab12...": what a manifest's url holds. buf has room for PUB_URL_LEN + 1. */
#define PUB_URL_LEN (8 + 3 + 2 * PUB_SHA256_LEN)
void pub_object_url(const unsigned char sha256[PUB_SHA256_LEN], char *buf);

/*
 * Runs run(ctx, i) for i in [0, n) on `threads` threads (the caller's own when 1), each
 * i once, in order of i as threads come free. After the first failure no new i starts and
 * *stop is raised, so running ones can give up. Returns the first failure, or 0.
 */
int pub_pool_run(size_t n, unsigned threads, int (*run)(void *ctx, size_t i), void *ctx,
                 atomic_bool *stop);

/* The compressor (compress.c): started for an object of size bytes in frames of frame
 * bytes, fed its bytes in order (emit gets each compressed frame), ended at its end
 * (-ESTALE when they were not size bytes). 0 or -errno; the feed's -EDOM (unsaid): the
 * object's first PUB_JUDGE_BYTES shrank by less than a fifth of the saving asked for (and
 * never grew with 0 asked), so it is taken for incompressible and the rest is not tried. */
#define PUB_JUDGE_BYTES (8u << 20)
int pub_compressor_start(struct pub_compressor *z, int level, uint64_t frame, uint64_t size,
                         unsigned min_saving);
int pub_compressor_feed(struct pub_compressor *z, const unsigned char *p, size_t n,
                        int (*emit)(void *ctx, const unsigned char *p, size_t n), void *ctx);
int pub_compressor_end(struct pub_compressor *z,
                       int (*emit)(void *ctx, const unsigned char *p, size_t n), void *ctx);
/* Whether the stored bytes are at most (100 - min_saving) percent of size. */
bool pub_compressor_worth(const struct pub_compressor *z, uint64_t size, unsigned min_saving);
void pub_compressor_free(struct pub_compressor *z);
void pub_stored_free(struct pub_stored *s);
/* Objects of the same content (twins.c): one makes it, the others take its stored form. */
struct pub_twin {
	bool used;
	int state; /* 0: being made; 1: made; -1: its maker failed */
	unsigned char sha256[PUB_SHA256_LEN];
	uint64_t size, frame;
	struct pub_stored stored; /* once made; on false: stored as it is */
};
struct pub_twins {
	pthread_mutex_t lock;
	pthread_cond_t done; /* a slot's state left 0 */
	struct pub_twin *v;  /* cap slots; guarded by lock */
	size_t cap;
};
/* A table for n contents at most. 0 or -ENOMEM. */
int pub_twins_init(struct pub_twins *t, size_t n);
void pub_twins_free(struct pub_twins *t);
/*
 * Claims a content (its sha256, size and frame): 1 when the caller is to make its object and
 * then call pub_twins_done; 0 when another made it, *zs then a copy of its stored form
 * (waits while another makes it); -ECANCELED when that one failed, or -ENOMEM.
 */
int pub_twins_claim(struct pub_twins *t, const unsigned char sha256[PUB_SHA256_LEN], uint64_t size,
                    uint64_t frame, struct pub_stored *zs);
/* The claimed content's object is made (rc 0, zs its stored form) or failed (rc < 0). */
void pub_twins_done(struct pub_twins *t, const unsigned char sha256[PUB_SHA256_LEN], uint64_t size,
                    uint64_t frame, const struct pub_stored *zs, int rc);

/* Packs are fetched whole: their frame is larger than a file's chunk (doc/benchmarks.md). */
#define PUB_PACK_FRAME (1u << 20)

/* The chunker (chunks.c): reset for a file of file_size, fed its bytes in order, done at
 * its end (-EIO when they were not file_size bytes). 0 or -errno. */
int pub_chunker_reset(struct pub_chunker *c, uint64_t chunk_size, uint64_t file_size);
int pub_chunker_feed(struct pub_chunker *c, const unsigned char *p, size_t len);
int pub_chunker_done(struct pub_chunker *c);
void pub_chunker_free(struct pub_chunker *c);
/* Stores each file's chunk hash list as an object. 0 or -errno, said. */
int pub_chunks_store(struct pub_tree *tree, struct pub_store *st);

/* dir/name read whole into *data (malloc'd, *len bytes; NULL on failure). 0 or -errno,
 * said. */
int pub_read_whole(const char *dir, const char *name, char **data, size_t *len);
/* --tag NAME (tag.c): added to o when NAME may be a tag; else said, 2 (bad usage). */
int pub_tag_option(struct publish_options *o, const char *name);
/* With tags, the manifest's name must be one a pointer holds and gc counts: 0, or 2 said. */
int pub_tag_check_manifest(const struct publish_options *o);
/* Writes o's tags into out (a real path) naming o->manifest there, which is written and
 * durable: each by rename, created with mode. 0 or -errno, said. */
int pub_tags_write_local(const struct publish_options *o, const char *out, mode_t mode);

/* Writes the top manifest (the entries no nested directory holds) to a temporary file in
 * out, fsyncs it, renames it to name and fsyncs out. 0 or -errno, said; on failure
 * nothing is left and the old manifest stays. */
int pub_manifest_write(const struct pub_tree *tree, const char *out, const char *name,
                       mode_t file_mode);

/* Writes the manifest of the entries nested directory owner holds (paths relative to it)
 * as an object of st, and records its digest and size in owner. 0 or -errno, said. */
int pub_manifest_write_nested(const struct pub_tree *tree, struct pub_entry *owner,
                              struct pub_store *st);

/*
 * Decides which directories get a manifest of their own (more than nest_over entries
 * below them, not counting their own nested directories' entries; the deepest first) and
 * sets every entry's owner. Then writes each nested manifest, the deepest first, so that a
 * parent names its children's digests. 0 or -errno, said.
 */
int pub_nest(struct pub_tree *tree, uint64_t nest_over, struct pub_store *st);

/* A key the store holds (relative to the prefix), and its size. */
struct pub_s3_have {
	char *key;
	uint64_t size;
	int64_t mtime; /* LastModified, seconds since the epoch (0: not given) */
	/* The manifest names it (pub_s3_known answered for it, from any worker thread: an
	 * atomic, written true only): listed again before the manifest goes up (confirm), and
	 * made young if it is old before then (pub_s3_refresh: gc's race). */
	atomic_bool named;
};
struct pub_s3_list {
	struct pub_s3_have *v; /* sorted by key */
	size_t n, cap;
};

/* The S3 route (s3.c stages, upload_s3.c uploads). */
struct s3_source;
struct up_item;
struct pub_s3 {
	struct s3_source *src;
	char *display;           /* "s3://bucket/prefix", no credentials; owned */
	const char *stage;       /* the staged OUT_DIR, a real path */
	unsigned uploads;        /* PUTs at once */
	unsigned max_tries;      /* of one PUT that fails transiently */
	uint64_t multipart_over; /* objects over this go up in parts of part_size */
	uint64_t part_size;
	bool if_absent, dry_run;
	bool tty;                     /* stderr is a terminal: progress is shown */
	bool curl;                    /* curl_global_init was called: pub_s3_close undoes it */
	struct pub_s3_list have;      /* what the store held before the stage was written */
	struct publish_totals totals; /* the staged publish's: what the store held, the sizes */
	struct up_item *items;        /* the staged objects; owned */
	size_t n_items;
	size_t to_upload, uploaded, skipped;
	uint64_t upload_bytes, sent_bytes;
	double started, shown; /* CLOCK_MONOTONIC seconds */
};

#define PUB_MAX_UPLOADS 64
/* Parts of a multipart upload, and the size over which an object goes up in parts: the
 * AWS CLI's 8 MiB (S3 takes 5 MiB to 5 GiB; a part is sent from its file, never held). */
#define PUB_PART_SIZE (8u << 20)
/* The store's options (--endpoint, --region, --profile, --role-arn, --path-style): one
 * table for `publish` and `verify`, whose own rows pub_s3_longs puts first. */
#define PUB_S3_STORE_OPTIONS 5
/* out (n_own + PUB_S3_STORE_OPTIONS + 1 rows) = own's rows, the store's, the end row. */
void pub_s3_longs(const struct option *own, size_t n_own, struct option *out);
/* Reads one of the S3 options (its getopt code c) into s3. 0, or -EINVAL said. */
int pub_s3_option(struct publish_s3_options *s3, int c, const char *arg);
/* Lists every key under PREFIX/under (no delimiter: the whole subtree) into l, relative to
 * the prefix, sorted. 0 or -errno, said. */
int pub_s3_list(struct pub_s3 *s, const char *under, struct pub_s3_list *l);
/* Appends an entry (keep l sorted: a listing comes sorted). 0 or -ENOMEM. */
int pub_s3_list_add(struct pub_s3_list *l, const char *key, uint64_t size, int64_t mtime);
/* The entry of key, or NULL. */
struct pub_s3_have *pub_s3_list_find(const struct pub_s3_list *l, const char *key);
/* The size the store holds key at, or -1. */
int64_t pub_s3_list_size(const struct pub_s3_list *l, const char *key);
void pub_s3_list_free(struct pub_s3_list *l);
/* GETs key (under the prefix), handing a 2xx answer's body to sink as curl does (a short
 * count ends the transfer). The HTTP status, or 0 with why set (why is set for a status
 * other than 2xx too). */
long pub_s3_get(struct pub_s3 *s, const char *key,
                size_t (*sink)(char *data, size_t size, size_t nmemb, void *ctx), void *ctx,
                char *why, size_t cap);
/* Opens the store o names for s (the mount's client and credentials). 0 or -errno, said. */
int pub_s3_open(const struct publish_s3_options *o, const char *dest, struct pub_s3 *s);
void pub_s3_close(struct pub_s3 *s);

/* Publishes o->src into the store o->out names (s3://...). 0 or -errno, said. */
int pub_s3_publish(const struct publish_options *o);
/* Before staging: --if-absent's probe, and the listing of what the store holds (s->have).
 * 0 or -errno, said. */
int pub_s3_begin(struct pub_s3 *s);
/* For publish_options.known: whether s->have holds this object with this size; if so its
 * entry is marked named (for confirm and pub_s3_refresh). */
bool pub_s3_known(void *s, const unsigned char sha256[PUB_SHA256_LEN], uint64_t size);
/* Uploads s->stage's objects the store lacks, confirms them all there, then the manifest
 * (o->manifest, written last). Prints one summary line. 0 or -errno, said. */
int pub_s3_upload(struct pub_s3 *s, const char *manifest);

/* gc's mark (gc.c) over verify's walk (verify.c): every object reachable from the top
 * manifests names (nested manifests read, each text passed to vet first) goes into db's
 * table obj(url PRIMARY KEY, size, sha256, nested). Local: dir_fd; S3: s3 and its listing
 * have (borrowed). 0, or -errno said: a manifest unread, refused, or naming an object that
 * is missing or wrong (a nested manifest then could not be read). */
typedef struct sqlite3 sqlite3;
struct pub_mark {
	int dir_fd;
	struct pub_s3 *s3;
	const struct pub_s3_list *have;
	const char *where;
	const char *const *names;
	size_t n_names;
	sqlite3 *db;
	int (*vet)(const char *where, const char *name, const char *text, size_t len);
};
int pub_verify_mark(const struct pub_mark *m);
/* A relative URL without "..", "." or empty segments (verify.c): a key under the prefix. */
bool pub_plain_relative(const char *url);
/* Reused objects older than this are refreshed by publish before its manifest is written
 * (gc's race: see doc/publish.md "Garbage collection"); half of gc's default --grace. */
#define PUB_REFRESH_AGE (12 * 3600)
/* S3: copies each item of s->items the store held older than PUB_REFRESH_AGE onto itself
 * (refresh_s3.c). 0 or -errno, said. */
int pub_s3_refresh(struct pub_s3 *s);

#endif

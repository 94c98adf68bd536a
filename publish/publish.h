/*
 * `spoolfs publish SRC_DIR OUT_DIR`: writes a version 2 manifest of a local tree plus every
 * object it names, content-addressed under OUT_DIR/objects, for any HTTP server, CDN or
 * bucket to serve (doc/publish.md). The daemon's main() hands its argv over when the first
 * argument is "publish"; nothing here knows of FUSE or of a mount.
 */
#ifndef SPOOLFS_PUBLISH_PUBLISH_H
#define SPOOLFS_PUBLISH_PUBLISH_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

/* The most --tag a publish takes. */
#define PUB_TAGS_MAX 16

/* --read-order [NAME=]FILE: a record of what a job's run opened (name "default"). */
struct publish_read_order {
	const char *name;
	const char *file;
};

/* OUT_DIR given as s3://BUCKET[/PREFIX]: how to reach the store (doc/publish.md). The
 * store options are the mount's (doc/s3.md); NULL or 0 takes the same defaults. */
struct publish_s3_options {
	const char *endpoint, *region, *profile, *role_arn;
	bool path_style;
	bool if_absent;     /* write the manifest only where its key is absent (probed first) */
	bool dry_run;       /* say what would be uploaded; upload nothing */
	unsigned uploads;   /* PUTs at once */
	uint64_t part_size; /* objects over this go up in parts of this size; 0: 8 MiB */
	bool given;         /* any of these was: refused for a local OUT_DIR */
};

/* How the objects are compressed (--compress-level, --min-saving). */
struct publish_compress {
	int level;           /* zstd, 1 to 19; 0: stored as they are, manifest version 2 */
	unsigned min_saving; /* percent one must shrink by to be stored compressed (0 to 99) */
};

/* --tag NAME: pointers to the manifest, written after it (publish/tag.c). */
struct publish_tags {
	const char *names[PUB_TAGS_MAX];
	size_t n;
};

/* What a publish found and wrote, added up: its outputs beside the summary line. */
struct publish_totals {
	uint64_t existing; /* objects the destination held already, or known() answered for */
	uint64_t raw;      /* the tree's objects' content bytes */
	uint64_t stored;   /* the same objects' bytes as stored */
};

struct publish_options {
	const char *src;      /* the tree to publish */
	const char *out;      /* where objects/ and the manifest go (made when missing) */
	const char *manifest; /* the manifest's file name in out: "manifest.json" */
	uint64_t pack_under;  /* files of 1..pack_under-1 bytes are packed; 0: none are */
	uint64_t pack_max;    /* a pack holds at most this many bytes (>= pack_under) */
	unsigned jobs;        /* worker threads, >= 1 */
	/* A directory with more than this many entries below it (not counting those in its
	 * own nested directories) gets a manifest of its own, loaded at its first lookup;
	 * 0: one manifest for the whole tree. */
	uint64_t nest_over;
	/* Files over chunk_over bytes (not packed) get a chunk hash list of chunk_size pieces
	 * (a power of two, 4 KiB to 64 MiB); chunk_over 0: none do. */
	uint64_t chunk_over;
	uint64_t chunk_size;
	struct publish_compress compress;
	/* An object already in OUT_DIR is re-hashed (not only sized) before it is kept. */
	bool verify_existing;
	/* Read orders written into the top manifest (several files may share a name). */
	const struct publish_read_order *read_orders;
	size_t n_read_orders;
	/* Used when out is s3://...: objects are staged in a private OUT_DIR, then uploaded. */
	struct publish_s3_options s3;
	bool quiet; /* no summary line: the S3 route prints its own */
	struct publish_tags tags;
	/* Objects the destination holds already (the S3 route: its listing): a file whose
	 * object known() answers for is hashed, never copied. Called from the worker threads
	 * at once: it must only read. NULL: none. */
	bool (*known)(void *ctx, const unsigned char sha256[32], uint64_t size);
	void *known_ctx;
	/* When not NULL, filled once the publish succeeded. */
	struct publish_totals *totals;
	/* Set (by a signal handler) when the publish is to stop: no further file is begun,
	 * and publish_run fails with -EINTR. NULL: never. */
	const volatile sig_atomic_t *interrupted;
};

/*
 * Publishes o->src into o->out. Says every failure on stderr, naming the path, and every
 * skipped entry with a warning line; prints one summary line on stdout. On failure the
 * manifest that was there stays as it was and no temporary file is left (objects already
 * renamed into place stay: they are correct under their names). 0, or -errno.
 */
int publish_run(const struct publish_options *o);

/* The subcommand: argv[0] is "publish". Exit status: 0 done, 1 failed, 2 bad usage. */
int publish_main(int argc, char **argv);

/* `spoolfs verify SOURCE` (publish/verify.c): argv[0] is "verify". Exit status: 0 every
 * object is there and right, 1 not (or it could not be checked), 2 bad usage. */
int publish_verify_main(int argc, char **argv);

/* `spoolfs gc OUT_DIR|s3://BUCKET[/PREFIX]` (publish/gc.c): argv[0] is "gc". Exit status:
 * 0 done, 1 failed or refused (nothing deleted after a refusal), 2 bad usage. */
int publish_gc_main(int argc, char **argv);

#endif

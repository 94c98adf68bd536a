/*
 * One publish, in order: check the two directories, walk the source (nothing is written
 * before the whole tree is known to be publishable), write the objects on the worker
 * pool, make their names durable, write the manifest last. A failure at any step leaves
 * the old manifest as it was.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "publish/publish_i.h"

/* One object to write: a file of its own, or a pack. */
struct job {
	struct pub_entry *file;
	struct pub_pack *pack;
	uint64_t planned;
	bool twin; /* another job has its size: the same content maybe (twins.c) */
};

struct run {
	const struct publish_options *o;
	int src_fd;      /* SRC_DIR, opened once: every file is opened beneath it */
	const char *src; /* its real path, for messages */
	struct pub_store store;
	struct job *jobs;
	struct pub_twins twins; /* compressed: the contents of the twin jobs */
};

/* Copies file e into obj, if it is still the file the walk saw (file_sha256: see
 * pub_object_copy). */
static int copy_file(struct run *r, struct pub_object *obj, struct pub_entry *e,
                     unsigned char *file_sha256)
{
	int fd = pub_open_seen(r->src_fd, r->src, e), rc;
	uint64_t copied;

	if (fd < 0)
		return fd;
	/* e->size is the walk's until the copy sets it: the same bytes, or a failure (a copy
	 * cut short, -EDOM of the compressor among them, leaves it for the next attempt). */
	rc = pub_object_copy(obj, fd, r->src, e->path, e->size, file_sha256, &copied);
	if (rc == 0)
		e->size = copied;
	close(fd);
	return rc;
}

/* Hashes (probe) or copies job j into obj; its fields are set by the last pass. */
static int fill(struct run *r, struct job *j, struct pub_object *obj)
{
	uint64_t offset = 0;
	int rc = 0;

	if (j->file)
		return copy_file(r, obj, j->file, NULL);
	/* Each member sits where the bytes before it end: no padding. */
	for (size_t k = 0; k < j->pack->n_members && rc == 0; k++) {
		struct pub_entry *m = j->pack->members[k];
		m->offset = offset;
		rc = copy_file(r, obj, m, m->sha256);
		offset += m->size;
	}
	return rc;
}

/*
 * Into a store that held objects already, a job is hashed first and copied only when its
 * object is missing: an unchanged file is read once and nothing is written. Into an empty
 * store, it is copied while it is hashed, in one pass.
 */
/*
 * Compressed (a level, and bytes to compress), a job is written in frames: a file's of its
 * chunk size, so that any byte range is whole frames (doc/manifest.md); a pack's of
 * PUB_PACK_FRAME, since a pack is fetched whole. An object that did not shrink enough is
 * copied again, as it is: its bytes are read twice, but only incompressible ones are.
 */
/* Begins job j's object (a probe only hashes), its chunk hash list with it. */
static int begin(struct run *r, struct job *j, bool probe, struct pub_object **obj)
{
	int rc = pub_object_begin(&r->store, probe, obj);

	if (rc == 0 && j->file && r->o->chunk_over && j->planned > r->o->chunk_over)
		rc = pub_object_chunks(*obj, &j->file->chunks, r->o->chunk_size, j->planned);
	return rc;
}

/*
 * A twin job (its size is another's) when compressing: hashed first, then either claimed,
 * to be made by this job (1, key its content digest), or made by another (0: this job's
 * fields are set, its stored form copied). The hash also sets the chunk hash list and a
 * pack's members. -errno on failure.
 */
static int take_twin(struct run *r, struct job *j, uint64_t frame, unsigned char *key)
{
	struct pub_object *obj = NULL;
	int rc = begin(r, j, true, &obj);

	if (rc == 0)
		rc = fill(r, j, obj);
	if (rc) {
		pub_object_abort(obj);
		return rc;
	}
	if ((rc = pub_object_digest(obj, key)))
		return rc;
	rc = pub_twins_claim(&r->twins, key, j->planned, frame,
	                     j->file ? &j->file->stored : &j->pack->stored);
	if (rc == 0) {
		const struct pub_stored *zs = j->file ? &j->file->stored : &j->pack->stored;
		memcpy(j->file ? j->file->sha256 : j->pack->sha256, key, PUB_SHA256_LEN);
		if (j->pack)
			j->pack->size = j->planned;
		pub_store_count_twin(&r->store, j->planned, zs->on ? zs->size : j->planned);
	}
	return rc;
}

/*
 * Compressed (a level, and bytes to compress), a job is written in frames: a file's of its
 * chunk size, so that any byte range is whole frames (doc/manifest.md); a pack's of
 * PUB_PACK_FRAME, since a pack is fetched whole. An object that did not shrink enough is
 * copied again, as it is: its bytes are read twice, but only incompressible ones are.
 */
static int run_job(void *ctx, size_t i)
{
	struct run *r = ctx;
	struct job *j = &r->jobs[i];
	bool stored = false, compress = r->store.level > 0 && j->planned > 0, claimed = false;
	uint64_t frame = j->file ? r->o->chunk_size : PUB_PACK_FRAME;
	unsigned char *sha256 = j->file ? j->file->sha256 : j->pack->sha256, key[PUB_SHA256_LEN];
	uint64_t *size = j->file ? &j->file->size : &j->pack->size;
	struct pub_stored *zs = j->file ? &j->file->stored : &j->pack->stored;
	int rc = 0;

	if (r->o->interrupted && *r->o->interrupted)
		return -EINTR; /* the pool stops the others before their next file */
	if (compress && j->twin) {
		rc = take_twin(r, j, frame, key);
		if (rc <= 0)
			return rc;
		claimed = true;
		rc = 0;
	}
	for (bool probe = r->store.probe_first; !stored && rc == 0; probe = false) {
		struct pub_object *obj = NULL;
		rc = begin(r, j, probe, &obj);
		if (rc == 0 && compress)
			rc = pub_object_compress(obj, frame, j->planned);
		if (rc == 0)
			rc = fill(r, j, obj);
		if ((rc == 0 && compress && !pub_object_shrunk(obj, &rc)) || rc == -EDOM) {
			pub_object_abort(obj);
			compress = false; /* stored as it is: the loop copies it again */
			rc = rc == -EDOM ? 0 : rc;
			continue;
		}
		if (rc == 0)
			rc = pub_object_commit(obj, sha256, size, &stored, zs);
		else
			pub_object_abort(obj);
	}
	/* Its twins take what was hashed first: the same bytes, or it changed meanwhile. */
	if (claimed && rc == 0 && memcmp(sha256, key, PUB_SHA256_LEN) != 0) {
		pub_say("", r->src, j->file ? j->file->path : j->pack->members[0]->path,
		        "changed while it was published", false);
		rc = -ESTALE;
	}
	if (claimed)
		pub_twins_done(&r->twins, key, j->planned, frame, zs, rc);
	return rc;
}

/* Largest first: the long hashes start at once, and the short ones fill in around them. */
static int cmp_jobs(const void *a, const void *b)
{
	const struct job *x = a, *y = b;

	return x->planned != y->planned ? (x->planned < y->planned ? 1 : -1) : 0;
}

static int plan_jobs(const struct pub_tree *t, struct job **out, size_t *n)
{
	struct job *jobs = calloc(t->n_entries + t->n_packs + 1, sizeof(*jobs));
	size_t k = 0;

	if (!jobs)
		return -ENOMEM;
	for (size_t i = 0; i < t->n_entries; i++) {
		struct pub_entry *e = t->entries[i];
		if (e->kind == PUB_FILE && !e->pack)
			jobs[k++] = (struct job){.file = e, .planned = e->size};
	}
	for (size_t i = 0; i < t->n_packs; i++)
		jobs[k++] = (struct job){.pack = t->packs[i], .planned = t->packs[i]->planned};
	qsort(jobs, k, sizeof(*jobs), cmp_jobs);
	/* Sorted by size: the jobs that may share a content are neighbours. */
	for (size_t i = 1; i < k; i++)
		if (jobs[i].planned == jobs[i - 1].planned && jobs[i].planned > 0)
			jobs[i].twin = jobs[i - 1].twin = true;
	*out = jobs;
	*n = k;
	return 0;
}

/*
 * OUT_DIR's real path, made if missing (its parent must exist), refused when inside the
 * source (a publish would walk its own objects) or when others could change what its name
 * leads to (pub_out_trusted). *out is malloc'd. 0 or -errno, said.
 */
static int prepare_out(const char *src, const char *out, char **real)
{
	char *copy = NULL, *parent_real = NULL, *made = NULL;
	size_t n = strlen(src);
	bool exists;
	struct stat sb;
	int rc = 0;

	*real = NULL;
	/* Refused, not followed: whoever can plant it there chooses where objects go. */
	if (lstat(out, &sb) == 0 && S_ISLNK(sb.st_mode)) {
		pub_say("", out, "", "OUT_DIR is a symbolic link: refused, give its target", false);
		return -ELOOP;
	}
	exists = stat(out, &sb) == 0;
	if (exists && !S_ISDIR(sb.st_mode)) {
		pub_say("", out, "", "not a directory", false);
		return -ENOTDIR;
	}
	if (exists) {
		made = realpath(out, NULL);
	} else if ((copy = strdup(out))) {
		/* Checked before it is made: a refused OUT_DIR leaves nothing in the source. */
		const char *parent = ".", *base = copy;
		char *slash;
		for (size_t k = strlen(copy); k > 1 && copy[k - 1] == '/'; k--)
			copy[k - 1] = '\0';
		if ((slash = strrchr(copy, '/'))) {
			*slash = '\0';
			parent = slash == copy ? "/" : copy;
			base = slash + 1;
		}
		parent_real = realpath(parent, NULL);
		if (parent_real &&
		    asprintf(&made, "%s/%s", strcmp(parent_real, "/") ? parent_real : "", base) < 0)
			made = NULL;
	}
	if (!made) {
		rc = errno ? -errno : -ENOMEM;
		pub_say("", out, "", strerror(-rc), false);
		goto out;
	}
	if (strcmp(src, "/") == 0 || strcmp(made, src) == 0 ||
	    (strncmp(made, src, n) == 0 && made[n] == '/')) {
		pub_say("", out, "",
		        "OUT_DIR is inside SRC_DIR: the publish would walk its own objects; put it"
		        " elsewhere",
		        false);
		rc = -EINVAL;
		goto out;
	}
	if (!exists && mkdir(made, 0777) != 0) {
		if (errno != EEXIST) {
			rc = -errno;
			pub_say("", out, "", strerror(-rc), false);
			goto out;
		}
		exists = true; /* made since, by another publish: not ours to take back */
	}
	/* Made (or found) first, then checked: util_path_trusted examines what is there. A
	 * refused OUT_DIR that this run made goes again, empty. */
	rc = pub_out_trusted(made);
	if (rc) {
		if (!exists)
			rmdir(made);
		goto out;
	}
	*real = made;
	made = NULL;
out:
	free(made);
	free(copy);
	free(parent_real);
	return rc;
}

static void summary(const struct run *r, const struct pub_tree *t, const char *out)
{
	size_t files = 0, dirs = 0, links = 0;
	char bytes[32], raw[32], stored[32];

	for (size_t i = 0; i < t->n_entries; i++) {
		enum pub_kind k = t->entries[i]->kind;
		files += k == PUB_FILE;
		dirs += k == PUB_DIR;
		links += k == PUB_SYMLINK;
	}
	printf("spoolfs publish: %zu files, %zu directories, %zu symlinks, %zu packs;"
	       " %llu new objects (%s), %llu already there; %s raw, %s stored; wrote %s/%s\n",
	       files, dirs, links, t->n_packs, (unsigned long long)r->store.written,
	       pub_human(r->store.written_bytes, bytes, sizeof(bytes)),
	       (unsigned long long)r->store.existing,
	       pub_human(r->store.total_raw, raw, sizeof(raw)),
	       pub_human(r->store.total_stored, stored, sizeof(stored)), out, r->o->manifest);
}

/*
 * Tests (tests/integration/test_publish_hostile.py): waits after the walk, before any file
 * is opened to be copied, until the FIFO named by SPOOLFS_TEST_PUBLISH_GATE has been opened
 * for writing and closed again, so that a test can change the tree in between at a known
 * moment. Harmless elsewhere: only a publish whose own environment names a FIFO waits.
 */
static void test_gate(void)
{
	const char *path = getenv("SPOOLFS_TEST_PUBLISH_GATE");
	char c;
	int fd;

	if (!path)
		return;
	while ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 && errno == EINTR)
		;
	/* Until end of file: read's 0 leaves a stale EINTR in errno, so test n itself. */
	for (ssize_t n = 1; fd >= 0 && (n > 0 || (n < 0 && errno == EINTR));)
		n = read(fd, &c, 1);
	if (fd >= 0)
		close(fd);
}

int publish_run(const struct publish_options *o)
{
	struct run r = {.o = o, .src_fd = -1};
	struct pub_tree tree = {0};
	char *src = NULL, *out = NULL;
	size_t n_jobs = 0, n_twins = 0;
	bool store_open = false;
	int rc = 0;

	if (strncmp(o->out, "s3://", 5) == 0)
		return pub_s3_publish(o);
	if (o->s3.given) {
		pub_say("", o->out, "",
		        "--endpoint, --region, --profile, --role-arn, --path-style, --if-absent,"
		        " --dry-run, --uploads and --part-size are for an s3:// OUT_DIR",
		        false);
		return -EINVAL;
	}
	src = realpath(o->src, NULL);
	/* Opened once, by the path resolved once: from here on, nothing of SRC_DIR is reached
	 * by a path from "/" (beneath.c). */
	if (src)
		r.src_fd = open(src, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (!src || r.src_fd < 0) {
		rc = -errno;
		pub_say("", o->src, "", strerror(-rc), false);
		goto out;
	}
	r.src = src;
	rc = prepare_out(src, o->out, &out);
	if (rc)
		goto out;
	rc = pub_walk(r.src_fd, src, o, &tree);
	if (rc == 0)
		rc = pub_read_orders(o, &tree);
	if (rc)
		goto out;
	test_gate();
	rc = pub_store_open(&r.store, out);
	store_open = true;
	r.store.verify_existing = o->verify_existing;
	r.store.level = o->compress.level;
	r.store.min_saving = o->compress.min_saving;
	tree.version = o->compress.level > 0 ? 3 : 2;
	r.store.known = o->known;
	r.store.known_ctx = o->known_ctx;
	/* Hashed first, copied only when the destination lacks it: mostly, it has it. */
	r.store.probe_first |= o->known != NULL;
	/* Compressed, an object's name is known only once it is compressed: a probe would
	 * compress it twice, so each is written while it is compressed, and a temporary file
	 * whose name exists goes unsynced. */
	r.store.probe_first &= o->compress.level == 0;
	if (rc == 0)
		rc = plan_jobs(&tree, &r.jobs, &n_jobs);
	for (size_t i = 0; i < n_jobs; i++)
		n_twins += r.jobs[i].twin;
	/* Sized for the twins only: a tree of a million files has few. */
	if (rc == 0 && o->compress.level > 0)
		rc = pub_twins_init(&r.twins, n_twins);
	if (rc == 0)
		rc = pub_pool_run(n_jobs, o->jobs, run_job, &r, &r.store.stop);
	if (rc == 0)
		rc = pub_chunks_store(&tree, &r.store);
	if (rc == 0)
		rc = pub_nest(&tree, o->nest_over, &r.store);
	if (rc == 0)
		rc = pub_store_sync(&r.store);
	if (rc == 0)
		rc = pub_manifest_write(&tree, out, o->manifest, r.store.file_mode);
	if (rc == 0) /* after the manifest is durable: a tag never names a missing one */
		rc = pub_tags_write_local(o, out, r.store.file_mode);
	if (rc == 0 && !o->quiet)
		summary(&r, &tree, out);
	if (rc == 0 && o->totals)
		*o->totals = (struct publish_totals){.existing = r.store.existing,
		                                     .raw = r.store.total_raw,
		                                     .stored = r.store.total_stored};
out:
	if (rc == -ENOMEM)
		fprintf(stderr, "spoolfs publish: %s\n", strerror(ENOMEM));
	if (store_open)
		pub_store_close(&r.store);
	free(r.jobs);
	pub_twins_free(&r.twins);
	pub_tree_free(&tree);
	free(out);
	free(src);
	if (r.src_fd >= 0)
		close(r.src_fd);
	return rc;
}

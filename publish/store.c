/*
 * OUT_DIR's objects: each is written to a temporary file in OUT/objects while its bytes
 * are hashed, then renamed to OUT/objects/XX/<sha256>. What is hashed is exactly what was
 * written, so a source file edited during the publish cannot leave an object whose name
 * does not match its bytes (an HTTP cache would keep such an object forever). An object
 * whose name exists already is not written again: its temporary file goes, unsynced.
 *
 * Lock: pub_store.lock guards the counters and the dirty set only; it is never held across
 * I/O. Each object belongs to the one job that writes it.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/hex.h"
#include "publish/publish_i.h"

/* An object this large gets a writer thread (writer.c); smaller ones are written inline. */
#define WRITER_MIN (16u << 20)

struct pub_object {
	struct pub_store *st;
	struct pub_sink sink; /* sink.fd < 0: a probe, that hashes and writes nothing */
	struct pub_writer *w; /* NULL: written inline, if at all */
	char *tmp;            /* OUT/objects/tmp.XXXXXX */
	EVP_MD_CTX *md;       /* the object's bytes */
	EVP_MD_CTX *file;     /* one copied file's bytes (a pack's member) */
	unsigned char *buf;   /* PUB_COPY_BUF bytes, while there is no writer */
	size_t fill;          /* bytes in buf not written yet */
	uint64_t size;
	struct pub_chunker *chunks; /* NULL: no chunk hash list */
	/* Compressed (pub_object_compress): its frames go to the sink, hashed into stored. */
	bool compress, ended;
	struct pub_compressor z;
	EVP_MD_CTX *stored; /* the stored bytes */
};

void pub_object_url(const unsigned char sha256[PUB_SHA256_LEN], char *buf)
{
	char hex[2 * PUB_SHA256_LEN + 1];

	util_hex_encode(sha256, PUB_SHA256_LEN, hex);
	snprintf(buf, PUB_URL_LEN + 1, "objects/%.2s/%s", hex, hex);
}

/* Whether objects/ has an XX directory: a store that earlier publishes wrote into. */
static bool holds_objects(const char *objects)
{
	DIR *dir = opendir(objects);
	struct dirent *d;
	bool found = false;

	while (dir && !found && (d = readdir(dir)))
		found = strlen(d->d_name) == 2 && isxdigit((unsigned char)d->d_name[0]) &&
		        isxdigit((unsigned char)d->d_name[1]);
	if (dir)
		closedir(dir);
	return found;
}

int pub_store_open(struct pub_store *st, const char *out_real)
{
	char *objects = NULL;
	mode_t mask;
	int rc = 0;

	memset(st, 0, sizeof(*st));
	/* The process's umask, read back at once: nothing else runs yet. */
	mask = umask(022);
	umask(mask);
	st->file_mode = 0666 & ~mask;
	atomic_init(&st->stop, false);
	pthread_mutex_init(&st->lock, NULL);
	st->out = strdup(out_real);
	if (!st->out || asprintf(&objects, "%s/objects", out_real) < 0) {
		objects = NULL;
		rc = -ENOMEM;
		goto out;
	}
	if (mkdir(objects, 0777) == 0)
		goto out;
	if (errno != EEXIST) {
		rc = -errno;
		pub_say("", objects, "", strerror(-rc), false);
		goto out;
	}
	st->probe_first = holds_objects(objects);
out:
	free(objects);
	return rc;
}

void pub_store_close(struct pub_store *st)
{
	pthread_mutex_destroy(&st->lock);
	free(st->out);
	st->out = NULL;
}

int pub_sync_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;

	if (fd < 0 || fsync(fd) != 0) {
		rc = -errno;
		pub_say("", path, "", strerror(-rc), false);
	}
	if (fd >= 0)
		close(fd);
	return rc;
}

int pub_store_sync(struct pub_store *st)
{
	char path[PATH_MAX + 16];
	int rc = 0;

	/* Called once the workers are joined: nothing else touches the set now. */
	for (unsigned i = 0; i < 256 && rc == 0; i++)
		if (st->dirty[i]) {
			snprintf(path, sizeof(path), "%s/objects/%02x", st->out, i);
			rc = pub_sync_dir(path);
		}
	if (rc == 0 && st->dirty_top) {
		snprintf(path, sizeof(path), "%s/objects", st->out);
		rc = pub_sync_dir(path);
	}
	return rc;
}

int pub_object_begin(struct pub_store *st, bool probe, struct pub_object **out)
{
	struct pub_object *obj = calloc(1, sizeof(*obj));
	int rc = -ENOMEM;

	*out = NULL;
	if (!obj)
		return -ENOMEM;
	obj->st = st;
	obj->sink.fd = -1;
	obj->md = EVP_MD_CTX_new();
	obj->file = EVP_MD_CTX_new();
	obj->buf = malloc(PUB_COPY_BUF);
	if (!obj->md || !obj->file || !obj->buf ||
	    asprintf(&obj->tmp, "%s/objects/tmp.XXXXXX", st->out) < 0) {
		obj->tmp = NULL;
		goto fail;
	}
	if (EVP_DigestInit_ex(obj->md, EVP_sha256(), NULL) != 1) {
		rc = -EIO;
		goto fail;
	}
	if (probe) {
		*out = obj;
		return 0;
	}
	obj->sink.fd = mkostemp(obj->tmp, O_CLOEXEC);
	/* mkstemp makes it 0600; the server that serves OUT must be able to read it. */
	if (obj->sink.fd < 0 || fchmod(obj->sink.fd, obj->st->file_mode) != 0) {
		rc = -errno;
		pub_say("", obj->sink.fd < 0 ? st->out : obj->tmp,
		        obj->sink.fd < 0 ? "objects" : "", strerror(-rc), false);
		goto fail;
	}
	*out = obj;
	return 0;
fail:
	pub_object_abort(obj);
	return rc;
}

void pub_object_abort(struct pub_object *obj)
{
	if (!obj)
		return;
	pub_writer_stop(obj->w);
	if (obj->sink.fd >= 0) {
		close(obj->sink.fd);
		unlink(obj->tmp);
	}
	EVP_MD_CTX_free(obj->md);
	EVP_MD_CTX_free(obj->file);
	EVP_MD_CTX_free(obj->stored);
	pub_compressor_free(&obj->z);
	free(obj->buf);
	free(obj->tmp);
	free(obj);
}

/* Writes what the inline buffer gathered (a probe drops it). 0 or -errno, said. */
static int flush(struct pub_object *obj)
{
	int rc = 0;

	if (obj->sink.fd >= 0 && obj->fill)
		rc = pub_sink_write(&obj->sink, obj->buf, obj->fill);
	obj->fill = 0;
	if (rc)
		pub_say("", obj->tmp, "", strerror(-rc), false);
	return rc;
}

/* The compressor's emit: one compressed frame, hashed as the object's bytes and written
 * (a probe only hashes). 0 or -errno, said. */
static int emit_frame(void *ctx, const unsigned char *p, size_t n)
{
	struct pub_object *obj = ctx;
	int rc = 0;

	if (EVP_DigestUpdate(obj->stored, p, n) != 1)
		return -EIO;
	if (obj->sink.fd >= 0 && (rc = pub_sink_write(&obj->sink, p, n)))
		pub_say("", obj->tmp, "", strerror(-rc), false);
	return rc;
}

int pub_object_compress(struct pub_object *obj, uint64_t frame, uint64_t size)
{
	obj->compress = true;
	if (!obj->stored && !(obj->stored = EVP_MD_CTX_new()))
		return -ENOMEM;
	if (EVP_DigestInit_ex(obj->stored, EVP_sha256(), NULL) != 1)
		return -EIO;
	return pub_compressor_start(&obj->z, obj->st->level, frame, size, obj->st->min_saving);
}

bool pub_object_shrunk(struct pub_object *obj, int *rc)
{
	*rc = 0;
	if (!obj->compress)
		return true;
	if (!obj->ended)
		*rc = pub_compressor_end(&obj->z, emit_frame, obj);
	obj->ended = true;
	return *rc == 0 && pub_compressor_worth(&obj->z, obj->size, obj->st->min_saving);
}

int pub_object_copy(struct pub_object *obj, int fd, const char *dir, const char *rel, uint64_t size,
                    unsigned char file_sha256[PUB_SHA256_LEN], uint64_t *copied)
{
	int rc = 0;

	*copied = 0;
	if (file_sha256 && EVP_DigestInit_ex(obj->file, EVP_sha256(), NULL) != 1)
		return -EIO;
	if (size >= PUB_COPY_BUF) /* a syscall that small files can do without */
		posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	/* The size the walk saw, and no more: a small file saves the read that would say end
	 * of file, and one that grows since is published as it was when it was opened. */
	while (*copied < size) {
		/* Inline, the buffer gathers small files (a pack's members) into one write;
		 * compressed, it holds one read, and the compressor gathers a frame. */
		unsigned char *buf = obj->w ? pub_writer_buffer(obj->w, &rc) : obj->buf + obj->fill;
		size_t room = obj->w ? PUB_COPY_BUF : PUB_COPY_BUF - obj->fill;
		if (room > size - *copied)
			room = (size_t)(size - *copied);
		if (!buf) {
			pub_say("", obj->tmp, "", strerror(-rc), false);
			goto out;
		}
		if (atomic_load(&obj->st->stop)) {
			rc = -ECANCELED;
			goto out;
		}
		ssize_t n = read(fd, buf, room);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			pub_say("", dir, rel, strerror(-rc), false);
			goto out;
		}
		if (n == 0)
			break;
		/* Handed to the writer before it is hashed: both only read it. */
		if (obj->w)
			pub_writer_queue(obj->w, (size_t)n);
		if ((file_sha256 && EVP_DigestUpdate(obj->file, buf, (size_t)n) != 1) ||
		    EVP_DigestUpdate(obj->md, buf, (size_t)n) != 1) {
			rc = -EIO;
			goto out;
		}
		if (obj->chunks && (rc = pub_chunker_feed(obj->chunks, buf, (size_t)n)))
			goto out;
		*copied += (uint64_t)n;
		obj->size += (uint64_t)n;
		if (obj->compress) {
			if ((rc = pub_compressor_feed(&obj->z, buf, (size_t)n, emit_frame, obj)))
				goto out;
			continue; /* no writer: the frames are what is written */
		}
		if (!obj->w)
			obj->fill += (size_t)n;
		if (!obj->w && obj->fill == PUB_COPY_BUF && (rc = flush(obj)))
			goto out;
		if (*copied == size)
			break;
		/* Large after all: the rest is written on a thread of its own (if one starts). */
		if (!obj->w && obj->sink.fd >= 0 && obj->size >= WRITER_MIN) {
			if ((rc = flush(obj)))
				goto out;
			pub_writer_start(&obj->sink, &obj->w);
		}
	}
	if (*copied != size) {
		rc = -ESTALE;
		pub_say("", dir, rel, "changed size while it was published (it ended early)",
		        false);
		goto out;
	}
	if (file_sha256 && EVP_DigestFinal_ex(obj->file, file_sha256, NULL) != 1)
		rc = -EIO;
	if (rc == 0 && obj->chunks && pub_chunker_done(obj->chunks) != 0)
		rc = -EIO;
out:
	return rc;
}

int pub_object_chunks(struct pub_object *obj, struct pub_chunker *c, uint64_t chunk_size,
                      uint64_t file_size)
{
	obj->chunks = c;
	return pub_chunker_reset(c, chunk_size, file_size);
}

int pub_store_bytes(struct pub_store *st, const void *data, size_t len,
                    unsigned char sha256[PUB_SHA256_LEN])
{
	struct pub_object *obj = NULL;
	uint64_t size;
	bool stored;
	int rc = pub_object_begin(st, false, &obj);

	if (rc)
		return rc;
	rc = pub_sink_write(&obj->sink, data, len);
	if (rc) {
		pub_say("", obj->tmp, "", strerror(-rc), false);
		pub_object_abort(obj);
		return rc;
	}
	obj->size = len;
	if (EVP_DigestUpdate(obj->md, data, len) != 1) {
		pub_object_abort(obj);
		return -EIO;
	}
	return pub_object_commit(obj, sha256, &size, &stored, NULL);
}

/*
 * Whether the object already at final (sb: its lstat) holds this object's bytes: a regular
 * file of its size and, with --verify-existing, hashing to its name. Only we (or root)
 * write in a trusted objects/ (pub_out_trusted), but a disk that filled, a crash before
 * the fsync of a filesystem that does not order them, or a hand that copied files in can
 * leave a wrong object under a right name, which a cache would then keep forever. 0: it
 * is right; 1: wrong, why says how; -errno when it could not be read (said).
 */
static int check_existing(struct pub_object *obj, const char *final, const struct stat *sb,
                          const unsigned char sha256[PUB_SHA256_LEN], uint64_t size, char *why,
                          size_t why_len)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	uint64_t got = 0;
	int fd, rc = 0;

	if (!S_ISREG(sb->st_mode)) {
		snprintf(why, why_len, "it was not a regular file");
		return 1;
	}
	if ((uint64_t)sb->st_size != size) {
		snprintf(why, why_len, "it held %llu bytes, not %llu",
		         (unsigned long long)sb->st_size, (unsigned long long)size);
		return 1;
	}
	if (!obj->st->verify_existing)
		return 0;
	/* obj->file and obj->buf are free once the bytes are copied: reused here. */
	fd = open(final, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0 || EVP_DigestInit_ex(obj->file, EVP_sha256(), NULL) != 1) {
		rc = fd < 0 ? -errno : -EIO;
		goto out;
	}
	for (;;) {
		ssize_t n = read(fd, obj->buf, PUB_COPY_BUF);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			goto out;
		}
		if (n == 0)
			break;
		got += (uint64_t)n;
		if (EVP_DigestUpdate(obj->file, obj->buf, (size_t)n) != 1) {
			rc = -EIO;
			goto out;
		}
	}
	if (EVP_DigestFinal_ex(obj->file, md, NULL) != 1) {
		rc = -EIO;
		goto out;
	}
	if (got != size || memcmp(md, sha256, PUB_SHA256_LEN) != 0) {
		snprintf(why, why_len, "its bytes did not hash to its name");
		rc = 1;
	}
out:
	if (rc < 0)
		pub_say("", final, "", strerror(-rc), false);
	if (fd >= 0)
		close(fd);
	return rc;
}

/*
 * A reused object older than PUB_REFRESH_AGE gets its mtime set to now before the manifest
 * that names it is written: `spoolfs gc` deletes only unreachable objects older than its
 * grace, so an old object that no manifest named when gc marked, and that this publish
 * names again, is not deleted under it (doc/publish.md "Garbage collection"). 0 or -errno.
 */
static int refresh(const char *final, const struct stat *sb)
{
	if (sb->st_mtime > time(NULL) - PUB_REFRESH_AGE)
		return 0;
	if (utimensat(AT_FDCWD, final, NULL, AT_SYMLINK_NOFOLLOW) == 0)
		return 0;
	pub_say("", final, "", strerror(errno), false);
	return -errno;
}

/* Counts an object: new (written) or there already. */
static void count(struct pub_store *st, const unsigned char *sha256, bool made_dir, bool wrote,
                  uint64_t raw, uint64_t size)
{
	pthread_mutex_lock(&st->lock);
	st->total_raw += raw;
	st->total_stored += size;
	if (wrote) {
		st->written++;
		st->written_bytes += size;
		st->dirty[sha256[0]] = true;
		st->dirty_top |= made_dir;
	} else {
		st->existing++;
	}
	pthread_mutex_unlock(&st->lock);
}

int pub_object_digest(struct pub_object *obj, unsigned char sha256[PUB_SHA256_LEN])
{
	int rc = EVP_DigestFinal_ex(obj->md, sha256, NULL) == 1 ? 0 : -EIO;

	pub_object_abort(obj);
	return rc;
}

void pub_store_count_twin(struct pub_store *st, uint64_t raw, uint64_t stored)
{
	count(st, NULL, false, false, raw, stored);
}

int pub_object_commit(struct pub_object *obj, unsigned char sha256[PUB_SHA256_LEN], uint64_t *size,
                      bool *stored, struct pub_stored *zs)
{
	char url[PUB_URL_LEN + 1], *final = NULL, *dir = NULL, why[96];
	bool made_dir = false, wrote = false, replace = false;
	/* Its name and length: the stored bytes' (compressed), else the content's. */
	unsigned char name[PUB_SHA256_LEN] = {0};
	uint64_t length = obj->size;
	struct stat sb;
	int rc = 0;

	*size = obj->size;
	*stored = true;
	if (obj->compress) {
		pub_object_shrunk(obj, &rc);
		length = obj->z.stored;
	}
	if (rc == 0)
		rc = flush(obj);
	if (rc)
		goto out;
	rc = pub_writer_stop(obj->w);
	obj->w = NULL;
	if (rc) {
		pub_say("", obj->tmp, "", strerror(-rc), false);
		goto out;
	}
	if (EVP_DigestFinal_ex(obj->md, sha256, NULL) != 1 ||
	    (obj->compress && EVP_DigestFinal_ex(obj->stored, name, NULL) != 1)) {
		rc = -EIO;
		goto out;
	}
	if (!obj->compress)
		memcpy(name, sha256, PUB_SHA256_LEN);
	pub_object_url(name, url);
	if (asprintf(&final, "%s/%s", obj->st->out, url) < 0) {
		final = NULL;
		rc = -ENOMEM;
		goto out;
	}
	if (asprintf(&dir, "%s/objects/%.2s", obj->st->out, url + 8) < 0) {
		dir = NULL;
		rc = -ENOMEM;
		goto out;
	}
	/* Held where the publish goes (an S3 store): nothing to keep here. */
	if (obj->st->known && obj->st->known(obj->st->known_ctx, name, length))
		goto out;
	/* Content-addressed: a name that exists holds these bytes already, once it is seen to
	 * be of their size (or hashed, with --verify-existing). */
	if (fstatat(AT_FDCWD, final, &sb, AT_SYMLINK_NOFOLLOW) == 0) {
		rc = check_existing(obj, final, &sb, name, length, why, sizeof(why));
		if (rc == 0)
			rc = refresh(final, &sb);
		if (rc <= 0)
			goto out;
		rc = 0;
		replace = true;
	}
	if (obj->sink.fd < 0) { /* a probe: the bytes must be copied after all */
		*stored = false;
		goto out;
	}
	/* Durable before it has its name: the manifest will name it. */
	if (fsync(obj->sink.fd) != 0) {
		rc = -errno;
		pub_say("", obj->tmp, "", strerror(-rc), false);
		goto out;
	}
	/* Clean now: its pages go back for the next object to reuse (see PUB_WRITEBACK). */
	posix_fadvise(obj->sink.fd, 0, 0, POSIX_FADV_DONTNEED);
	if (mkdir(dir, 0777) == 0)
		made_dir = true;
	else if (errno != EEXIST) {
		rc = -errno;
		pub_say("", dir, "", strerror(-rc), false);
		goto out;
	}
	/* NOREPLACE: another job (a hard link, the same bytes twice) may have won the race;
	 * its object is as good as ours. Filesystems without the flag get a plain rename.
	 * A wrong object is replaced in one rename: a reader sees the old file or ours. */
	if (replace ? rename(obj->tmp, final) == 0
	            : (renameat2(AT_FDCWD, obj->tmp, AT_FDCWD, final, RENAME_NOREPLACE) == 0 ||
	               ((errno == EINVAL || errno == ENOSYS) && rename(obj->tmp, final) == 0))) {
		wrote = true;
		if (replace) {
			char said[160];
			snprintf(said, sizeof(said), "replaced: %s", why);
			pub_say("warning: ", final, "", said, false);
		}
	} else if (errno != EEXIST) {
		rc = -errno;
		pub_say("", final, "", strerror(-rc), false);
	}
out:
	if (rc == 0 && *stored)
		count(obj->st, name, made_dir, wrote, obj->size, length);
	if (rc == 0 && *stored && obj->compress && zs) {
		pub_stored_free(zs);
		*zs = (struct pub_stored){.on = true,
		                          .size = length,
		                          .frame = obj->z.frame,
		                          .frames = obj->z.lens,
		                          .n = obj->z.n};
		memcpy(zs->sha256, name, PUB_SHA256_LEN);
		obj->z.lens = NULL; /* zs's now */
	}
	if (wrote) {
		close(obj->sink.fd);
		obj->sink.fd = -1;
	}
	free(final);
	free(dir);
	pub_object_abort(obj);
	return rc;
}

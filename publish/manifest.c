/*
 * The manifest, written last: a temporary file in OUT_DIR, fsync'd, renamed over the old
 * manifest, and OUT_DIR fsync'd, so a reader sees the old manifest or the new one, and the
 * new one only names objects that are durable under their names.
 *
 * Each entry and pack is one line, made by sqlite's json_object (which quotes names and
 * targets as JSON requires), in the tree's order: sorted by path, so the same tree always
 * gives the same bytes. Only the frame around the lines ({"version":2, ...}) is written
 * here.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/hex.h"
#include "publish/publish_i.h"

enum {
	Q_DIR,
	Q_NESTED,
	Q_SYMLINK,
	Q_FILE,
	Q_CHUNKED,
	Q_MEMBER,
	Q_PACK,
	Q_STRING,
	Q_STORED,
	Q_STORED_CHUNKED,
	Q_COUNT
};

static const char *const queries[Q_COUNT] = {
    [Q_DIR] = "SELECT json_object('path', :path, 'type', 'directory', 'mode', :mode,"
              " 'mtime', :mtime)",
    [Q_NESTED] = "SELECT json_object('path', :path, 'type', 'directory', 'mode', :mode,"
                 " 'mtime', :mtime, 'manifest', json_object('sha256', :sha256, 'size', :size,"
                 " 'url', :url))",
    [Q_SYMLINK] = "SELECT json_object('path', :path, 'type', 'symlink', 'target', :target,"
                  " 'mtime', :mtime)",
    [Q_FILE] = "SELECT json_object('path', :path, 'size', :size, 'sha256', :sha256,"
               " 'url', :url, 'mode', :mode, 'mtime', :mtime)",
    [Q_CHUNKED] = "SELECT json_object('path', :path, 'size', :size, 'sha256', :sha256,"
                  " 'url', :url, 'mode', :mode, 'mtime', :mtime, 'chunks', json_object('size',"
                  " :chunk_size, 'sha256', :chunk_sha256, 'url', :chunk_url))",
    [Q_MEMBER] = "SELECT json_object('path', :path, 'size', :size, 'sha256', :sha256,"
                 " 'pack', :pack, 'offset', :offset, 'mode', :mode, 'mtime', :mtime)",
    [Q_PACK] = "SELECT json_object('sha256', :sha256, 'size', :size, 'url', :url)",
    [Q_STRING] = "SELECT json_quote(:s)",
    /* A compressed object's line: the line made above, with "stored" last. Its frame
     * table is inline, or (chunks) in the hash list's records. */
    [Q_STORED] = "SELECT json_insert(:line, '$.stored', json_object('encoding', 'zstd',"
                 " 'size', :size, 'sha256', :sha256, 'frame', :frame, 'frames', json(:frames)))",
    [Q_STORED_CHUNKED] = "SELECT json_insert(:line, '$.stored', json_object('encoding', 'zstd',"
                         " 'size', :size, 'sha256', :sha256, 'frame', :frame))",
};

struct writer {
	sqlite3 *db;
	sqlite3_stmt *q[Q_COUNT];
	FILE *f;
};

static void bind_text(sqlite3_stmt *st, const char *name, const char *value)
{
	int i = sqlite3_bind_parameter_index(st, name);

	if (i)
		sqlite3_bind_text(st, i, value, -1, SQLITE_TRANSIENT);
}

static void bind_int(sqlite3_stmt *st, const char *name, int64_t value)
{
	int i = sqlite3_bind_parameter_index(st, name);

	if (i)
		sqlite3_bind_int64(st, i, value);
}

/* "[80211,79430,42092]": a frame table as JSON. NULL on -ENOMEM. */
static char *frames_json(const struct pub_stored *zs)
{
	char *v = malloc(zs->n * 11 + 3);
	size_t at = 0;

	if (!v)
		return NULL;
	v[at++] = '[';
	for (size_t k = 0; k < zs->n; k++)
		at += (size_t)sprintf(v + at, k ? ",%" PRIu32 : "%" PRIu32, zs->frames[k]);
	v[at++] = ']';
	v[at] = '\0';
	return v;
}

/*
 * Steps st (bound by the caller) and writes its one JSON text, then sep; with zs (an object
 * stored compressed), the text gets its "stored" first (chunked: the frame table is in the
 * hash list). 0 or -EIO.
 */
static int emit_stored(struct writer *w, sqlite3_stmt *st, const struct pub_stored *zs,
                       bool chunked, const char *sep)
{
	sqlite3_stmt *z = zs && zs->on ? w->q[chunked ? Q_STORED_CHUNKED : Q_STORED] : NULL;
	char hex[2 * PUB_SHA256_LEN + 1], *frames = NULL;
	int rc = sqlite3_step(st) == SQLITE_ROW ? 0 : -EIO;

	if (rc == 0 && z) {
		util_hex_encode(zs->sha256, PUB_SHA256_LEN, hex);
		bind_text(z, ":line", (const char *)sqlite3_column_text(st, 0));
		bind_int(z, ":size", (int64_t)zs->size);
		bind_text(z, ":sha256", hex);
		bind_int(z, ":frame", (int64_t)zs->frame);
		if (!chunked && !(frames = frames_json(zs)))
			rc = -ENOMEM;
		bind_text(z, ":frames", frames);
		if (rc == 0 && sqlite3_step(z) != SQLITE_ROW)
			rc = -EIO;
	}
	if (rc == 0 &&
	    fprintf(w->f, "%s%s", (const char *)sqlite3_column_text(z ? z : st, 0), sep) < 0)
		rc = -EIO;
	free(frames);
	if (z) {
		sqlite3_reset(z);
		sqlite3_clear_bindings(z);
	}
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	return rc;
}

static int emit(struct writer *w, sqlite3_stmt *st, const char *sep)
{
	return emit_stored(w, st, NULL, false, sep);
}

/* The URL of an object: named by its stored bytes when it is compressed. */
static void object_url(const unsigned char sha256[PUB_SHA256_LEN], const struct pub_stored *zs,
                       char *url)
{
	pub_object_url(zs->on ? zs->sha256 : sha256, url);
}

static int emit_pack(struct writer *w, const struct pub_pack *p, const char *sep)
{
	char hex[2 * PUB_SHA256_LEN + 1], url[PUB_URL_LEN + 1];
	sqlite3_stmt *st = w->q[Q_PACK];

	util_hex_encode(p->sha256, PUB_SHA256_LEN, hex);
	object_url(p->sha256, &p->stored, url);
	bind_text(st, ":sha256", hex);
	bind_int(st, ":size", (int64_t)p->size);
	bind_text(st, ":url", url);
	return emit_stored(w, st, &p->stored, false, sep);
}

/* Writes entry e, its path made relative to the manifest's directory (skip bytes cut). */
static int emit_entry(struct writer *w, const struct pub_entry *e, size_t skip, const char *sep)
{
	char hex[2 * PUB_SHA256_LEN + 1], url[PUB_URL_LEN + 1], pack[2 * PUB_SHA256_LEN + 1];
	char mode[8];
	sqlite3_stmt *st = w->q[e->kind == PUB_DIR       ? (e->nested ? Q_NESTED : Q_DIR)
	                        : e->kind == PUB_SYMLINK ? Q_SYMLINK
	                        : e->pack                ? Q_MEMBER
	                        : e->chunks.list         ? Q_CHUNKED
	                                                 : Q_FILE];

	snprintf(mode, sizeof(mode), "%04o", (unsigned)(e->mode & 0777));
	bind_text(st, ":path", e->path + skip);
	if (e->nested) {
		util_hex_encode(e->nested_sha256, PUB_SHA256_LEN, hex);
		pub_object_url(e->nested_sha256, url);
		bind_text(st, ":sha256", hex);
		bind_int(st, ":size", (int64_t)e->nested_size);
		bind_text(st, ":url", url);
	}
	bind_text(st, ":mode", mode);
	bind_int(st, ":mtime", e->mtime);
	bind_text(st, ":target", e->target);
	if (e->kind == PUB_FILE) {
		util_hex_encode(e->sha256, PUB_SHA256_LEN, hex);
		bind_int(st, ":size", (int64_t)e->size);
		bind_text(st, ":sha256", hex);
		if (e->pack) {
			util_hex_encode(e->pack->sha256, PUB_SHA256_LEN, pack);
			bind_text(st, ":pack", pack);
			bind_int(st, ":offset", (int64_t)e->offset);
		} else {
			object_url(e->sha256, &e->stored, url);
			bind_text(st, ":url", url);
		}
		if (e->chunks.list) {
			util_hex_encode(e->chunk_list_sha256, PUB_SHA256_LEN, hex);
			pub_object_url(e->chunk_list_sha256, url);
			bind_text(st, ":chunk_sha256", hex);
			bind_text(st, ":chunk_url", url);
			bind_int(st, ":chunk_size", (int64_t)e->chunks.chunk_size);
		}
	}
	return emit_stored(w, st, e->kind == PUB_FILE ? &e->stored : NULL, e->chunks.list != NULL,
	                   sep);
}

/* "read_orders": {"NAME": ["path", ...], ...}, one order a line. */
static int write_orders(struct writer *w, const struct pub_tree *t)
{
	sqlite3_stmt *st = w->q[Q_STRING];
	int rc = fputs(",\n\"read_orders\":{", w->f) < 0 ? -EIO : 0;

	for (size_t i = 0; i < t->n_orders && rc == 0; i++) {
		const struct pub_order *order = &t->orders[i];
		bind_text(st, ":s", order->name);
		rc = fputs(i ? ",\n" : "\n", w->f) < 0 ? -EIO : emit(w, st, ":[");
		for (size_t k = 0; k < order->n && rc == 0; k++) {
			bind_text(st, ":s", order->paths[k]->path);
			rc = emit(w, st, k + 1 < order->n ? "," : "");
		}
		if (rc == 0 && fputs("]", w->f) < 0)
			rc = -EIO;
	}
	if (rc == 0 && fputs("\n}", w->f) < 0)
		rc = -EIO;
	return rc;
}

/* The manifest of the entries owner holds (NULL: the top one's): its packs (a pack's
 * members are of one directory, so of one manifest) and entries, in the tree's order. */
static int write_json(struct writer *w, const struct pub_tree *t, const struct pub_entry *owner)
{
	size_t skip = owner ? strlen(owner->path) + 1 : 0;
	const char *sep = "";
	int rc = 0;

	if (fprintf(w->f, "{\"version\":%d,\n\"packs\":[", t->version) < 0)
		return -EIO;
	for (size_t i = 0; i < t->n_packs && rc == 0; i++) {
		if (t->packs[i]->members[0]->owner != owner)
			continue;
		rc = fputs(sep, w->f) < 0 ? -EIO : emit_pack(w, t->packs[i], "");
		sep = ",\n";
	}
	if (rc == 0 && fputs("\n],\n\"entries\":[", w->f) < 0)
		rc = -EIO;
	sep = "\n";
	for (size_t i = 0; i < t->n_entries && rc == 0; i++) {
		if (t->entries[i]->owner != owner)
			continue;
		rc = fputs(sep, w->f) < 0 ? -EIO : emit_entry(w, t->entries[i], skip, "");
		sep = ",\n";
	}
	if (rc == 0 && fputs("\n]", w->f) < 0)
		rc = -EIO;
	/* Only the top manifest: its paths start at the mount's root. */
	if (rc == 0 && !owner && t->n_orders)
		rc = write_orders(w, t);
	if (rc == 0 && fputs("}\n", w->f) < 0)
		rc = -EIO;
	return rc;
}

static int open_writer(struct writer *w)
{
	if (sqlite3_open_v2(":memory:", &w->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_MEMORY, NULL) !=
	    SQLITE_OK)
		return -ENOMEM;
	for (int i = 0; i < Q_COUNT; i++)
		if (sqlite3_prepare_v2(w->db, queries[i], -1, &w->q[i], NULL) != SQLITE_OK) {
			fprintf(stderr, "spoolfs publish: sqlite: %s\n", sqlite3_errmsg(w->db));
			return -EIO;
		}
	return 0;
}

static void close_writer(struct writer *w)
{
	for (int i = 0; i < Q_COUNT; i++)
		sqlite3_finalize(w->q[i]);
	sqlite3_close(w->db);
}

/* Prepares w and its stream on a new temporary file from tmpl (made in dir, said there
 * on failure). 0 or -errno; *made tells whether tmpl names a file now, to unlink. */
static int open_temp(struct writer *w, char *tmpl, const char *dir, bool *made)
{
	int fd, rc = open_writer(w);

	*made = false;
	if (rc)
		return rc;
	fd = mkostemp(tmpl, O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		pub_say("", dir, "", strerror(-rc), false);
		return rc;
	}
	*made = true;
	w->f = fdopen(fd, "w");
	if (!w->f) {
		rc = -errno;
		close(fd);
		return rc;
	}
	setvbuf(w->f, NULL, _IOFBF, 1 << 20);
	return 0;
}

int pub_manifest_write(const struct pub_tree *tree, const char *out, const char *name,
                       mode_t file_mode)
{
	struct writer w = {0};
	char *tmp = NULL, *final = NULL;
	bool made = false;
	int rc;

	if (asprintf(&tmp, "%s/.%s.tmp.XXXXXX", out, name) < 0 ||
	    asprintf(&final, "%s/%s", out, name) < 0) {
		rc = -ENOMEM;
		goto out;
	}
	rc = open_temp(&w, tmp, out, &made);
	if (rc)
		goto out_unlink;
	rc = write_json(&w, tree, NULL);
	if (rc == 0 &&
	    (fflush(w.f) != 0 || fchmod(fileno(w.f), file_mode) != 0 || fsync(fileno(w.f)) != 0))
		rc = errno ? -errno : -EIO;
	if (fclose(w.f) != 0 && rc == 0)
		rc = -errno;
	w.f = NULL;
	if (rc == 0 && rename(tmp, final) != 0)
		rc = -errno;
	if (rc) {
		pub_say("", final, "", strerror(-rc), false);
		goto out_unlink;
	}
	/* The rename itself is durable only once the directory is. */
	rc = pub_sync_dir(out);
	goto out;
out_unlink:
	if (w.f)
		fclose(w.f);
	if (made)
		unlink(tmp);
out:
	close_writer(&w);
	free(tmp);
	free(final);
	return rc;
}

int pub_manifest_write_nested(const struct pub_tree *tree, struct pub_entry *owner,
                              struct pub_store *st)
{
	struct writer w = {0};
	struct pub_object *obj = NULL;
	char *dir = NULL, *tmp = NULL;
	bool stored, made = false;
	struct stat sb;
	int fd = -1, rc;

	if (asprintf(&dir, "%s/objects", st->out) < 0 ||
	    asprintf(&tmp, "%s/.nested.tmp.XXXXXX", dir) < 0) {
		rc = -ENOMEM;
		goto out;
	}
	rc = open_temp(&w, tmp, dir, &made);
	if (rc == 0)
		rc = write_json(&w, tree, owner);
	if (w.f && fclose(w.f) != 0 && rc == 0)
		rc = -errno;
	w.f = NULL;
	/* Stored like any object: content-addressed, durable before the top manifest. */
	if (rc == 0)
		rc = pub_object_begin(st, false, &obj);
	/* Our own file in a trusted objects/ (pub_out_trusted): opened by its path. */
	if (rc == 0 &&
	    ((fd = open(tmp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0 || fstat(fd, &sb) != 0)) {
		rc = -errno;
		pub_say("", tmp, "", strerror(-rc), false);
	}
	if (rc == 0)
		rc = pub_object_copy(obj, fd, dir, strrchr(tmp, '/') + 1, (uint64_t)sb.st_size,
		                     NULL, &owner->nested_size);
	if (rc == 0) {
		rc = pub_object_commit(obj, owner->nested_sha256, &owner->nested_size, &stored,
		                       NULL);
		obj = NULL;
	}
out:
	if (fd >= 0)
		close(fd);
	pub_object_abort(obj);
	if (made)
		unlink(tmp);
	close_writer(&w);
	free(dir);
	free(tmp);
	return rc;
}

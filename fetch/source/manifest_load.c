/*
 * manifest_load.c reads a JSON manifest (manifest_load.h) into an empty namespace: it owns
 * the manifest's syntax, versions 1 to 3, and the message a bad one gets, naming the entry.
 *
 * The outer shape (an object, its version, the entries and packs arrays) and the packs are
 * read with sqlite's JSON functions on a private in-memory connection, whose messages
 * name what is wrong; the entries, nearly all of a manifest's text, are read in one
 * streaming pass with yajl (manifest_entries.h). No parser is ours. Each entry goes to the
 * namespace through index_build_add, which applies the namespace's own rules, in one
 * transaction: every entry or nothing. A large manifest's entries are added on a builder
 * thread (load_pipe.h), in their order, while this thread reads and checks the next ones.
 */
#include "fetch/source/manifest_load.h"
#include "fetch/source/load_pipe.h"
#include "fetch/source/manifest_entries.h"
#include "fetch/source/manifest_stored.h"
#include "fetch/source/manifest_url.h"
#include "fetch/source/read_orders.h"
#include "fetch/source/symlink_judge.h"

#include <errno.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MANIFEST_VERSION_MAX 3
/* Longest path shown in an error message before it is cut with "...". */
#define ERR_PATH_MAX 160
/* Chunk sizes a manifest may name: a power of two in this range (doc/manifest.md). */
#define CHUNK_SIZE_MIN 4096
#define CHUNK_SIZE_MAX (64 << 20)
/* From this size of manifest on, its entries are added to the namespace on a thread of
 * their own while this one reads on (load_pipe.h); below, a thread costs more than it saves. */
#define PIPE_OVER (1 << 20)

struct load {
	sqlite3 *db; /* private, in memory: only for sqlite's JSON functions */
	struct index_builder *b;
	sqlite3_stmt *st_keys, *st_top, *st_packs, *st_chunks;
	char *packs;         /* owned: the "packs" array's text, as st_keys gave it; NULL: none */
	bool has_packs;      /* a version 2 manifest with "packs" (an array, check_top says) */
	char *orders;        /* owned: "read_orders"'s text (an object; read_orders.h), or NULL */
	char orders_type[8]; /* its JSON type; "": the manifest has none */
	struct manifest_base base;
	const char *json; /* the manifest, NUL-terminated: the caller's or json_copy */
	char *json_copy;  /* owned; NULL when the caller's text was terminated already */
	int version;
	const char *array; /* "files" (version 1) or "entries" (versions 2 and 3) */
	struct manifest_load_options *opts; /* never NULL here */
	bool at_root; /* the paths start at the mount's root, not in a nested directory */
	/* The builder thread, for a large manifest; NULL: entries are added here. It reads b
	 * and array, which stay as they are while it runs. */
	struct load_pipe *pipe;
	/* The symlinks kept aside until the rest is in (hide, refuse); NULL: none yet. */
	struct symlink_judge *judge;
	struct index *idx;
	uint64_t dir; /* the directory loaded: INDEX_ROOT_INO, or a nested one */
	char *err;
	size_t err_len;
};

/*
 * The top level in one pass, which is one parse of the whole text: each of top_sql's
 * functions and json_each(:json, '$.packs') parsed it again (a sixth of a large load). A
 * manifest this pass does not find well formed goes through top_sql, for its message.
 */
static const char keys_sql[] =
    "SELECT t.key, t.type, t.atom, CASE WHEN t.key = 'packs' AND t.type = 'array'"
    " OR t.key = 'read_orders' AND t.type = 'object' THEN t.value END FROM json_each(:json) AS t";

static const char top_sql[] =
    "SELECT json_valid(:json),"
    " CASE WHEN json_valid(:json) THEN json_type(:json) END,"
    " CASE WHEN json_valid(:json) THEN json_type(:json, '$.version') END,"
    " CASE WHEN json_valid(:json) THEN json_extract(:json, '$.version') END,"
    " CASE WHEN json_valid(:json) THEN :json -> '$.version' END,"
    " CASE WHEN json_valid(:json) THEN json_type(:json, '$.files') END,"
    " CASE WHEN json_valid(:json) THEN json_type(:json, '$.entries') END,"
    " CASE WHEN json_valid(:json) THEN json_type(:json, '$.packs') END";

/* Packs are few (one per directory of small files, about): a json_extract per field. */
#define PACK_OBJECT "CASE WHEN p.type = 'object' THEN p.value ELSE '{}' END"
static const char packs_sql[] =
    "SELECT p.key, p.type,"
    " json_type(" PACK_OBJECT ", '$.sha256'), json_extract(" PACK_OBJECT ", '$.sha256'),"
    " json_type(" PACK_OBJECT ", '$.size'), json_extract(" PACK_OBJECT ", '$.size'),"
    " json_type(" PACK_OBJECT ", '$.url'), json_extract(" PACK_OBJECT ", '$.url'),"
    " " PACK_OBJECT " -> '$.url', " PACK_OBJECT " -> '$.stored'"
    " FROM json_each(coalesce(:packs, :json), CASE WHEN :packs IS NULL THEN '$.packs'"
    " ELSE '$' END) AS p";

static const char chunks_sql[] =
    "SELECT json_type(:c, '$.size'), json_extract(:c, '$.size'),"
    " json_type(:c, '$.sha256'), json_extract(:c, '$.sha256'),"
    " json_type(:c, '$.url'), json_extract(:c, '$.url'), :c -> '$.url'";

/* Copies path for a message: quotes, backslashes and control bytes escaped, long paths cut. */
static void quote_path(char *buf, size_t cap, const char *path, size_t len)
{
	size_t o = 0;

	for (size_t i = 0; i < len && o + 8 < cap; i++) {
		unsigned char c = (unsigned char)path[i];
		if (i >= ERR_PATH_MAX) {
			memcpy(buf + o, "...", 3);
			o += 3;
			break;
		}
		if (c == '"' || c == '\\') {
			buf[o++] = '\\';
			buf[o++] = (char)c;
		} else if (c < 0x20 || c == 0x7f) {
			o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
		} else {
			buf[o++] = (char)c;
		}
	}
	buf[o] = '\0';
}

__attribute__((format(printf, 2, 3))) static int load_error(struct load *ld, const char *fmt, ...)
{
	va_list ap;

	if (ld->err && ld->err_len) {
		va_start(ap, fmt);
		vsnprintf(ld->err, ld->err_len, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/* Writes `files[I] "PATH": reason` (or `files[I]: reason` when there is no path) into
 * err (the builder thread's own, or the loader's). -EINVAL. */
static int name_entry(char *err, size_t err_len, const char *array, int64_t i, const char *path,
                      size_t path_len, const char *reason)
{
	char quoted[ERR_PATH_MAX * 4 + 16];

	if (!err || !err_len)
		return -EINVAL;
	if (!path) {
		snprintf(err, err_len, "%s[%" PRId64 "]: %s", array, i, reason);
		return -EINVAL;
	}
	quote_path(quoted, sizeof(quoted), path, path_len);
	snprintf(err, err_len, "%s[%" PRId64 "] \"%s\": %s", array, i, quoted, reason);
	return -EINVAL;
}

__attribute__((format(printf, 5, 6))) static int
entry_error(struct load *ld, int64_t i, const char *path, size_t path_len, const char *fmt, ...)
{
	char reason[768]; /* a symlink's chain included */
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	return name_entry(ld->err, ld->err_len, ld->array, i, path, path_len, reason);
}

/* Adds a checked entry to the namespace (index/'s rules), naming it in err when they
 * refuse it: on the builder thread, or on the loader's for a small manifest. */
static int add_entry(void *ctx, int64_t i, const struct index_build_entry *be, char *err,
                     size_t err_len)
{
	struct load *ld = ctx;
	char why[320];
	int rc = index_build_add(ld->b, be, why, sizeof(why));

	if (rc == -EINVAL)
		rc = name_entry(err, err_len, ld->array, i, be->path, be->path_len, why);
	return rc;
}

/* Whether a raw JSON string literal (as `->` returns it) holds an escaped NUL. Escapes are
 * skipped pairwise so that "\\u0000" (a backslash, then "u0000") is not mistaken for one. */
static bool raw_has_nul(const unsigned char *raw)
{
	if (!raw)
		return false;
	/* strchr from one backslash to the next: the whole manifest is scanned once. */
	for (const char *p = strchr((const char *)raw, '\\'); p; p = strchr(p, '\\')) {
		if (p[1] == 'u' && strncmp(p + 2, "0000", 4) == 0)
			return true;
		p += p[1] ? 2 : 1;
	}
	return false;
}

static int is_hex(int c)
{
	return (unsigned)(c - '0') < 10 || (unsigned)((c | 0x20) - 'a') < 6;
}

/* Copies a 64-hex-digit text in lower case into out (65 bytes): flights and packs are keyed
 * by the digest, so it has one spelling. false when s is no such text. */
static bool lower_sha256(const char *s, size_t len, char out[65])
{
	if (!s || len != 64)
		return false;
	for (size_t k = 0; k < 64; k++) {
		if (!is_hex((unsigned char)s[k]))
			return false;
		out[k] = (char)(s[k] | 0x20);
	}
	out[64] = '\0';
	return true;
}

static bool is_type(const struct manifest_field *f, enum manifest_json_type type)
{
	return f->seen && f->type == type;
}

static int bind_text(sqlite3_stmt *st, const char *name, const char *s)
{
	int idx = sqlite3_bind_parameter_index(st, name);

	if (idx == 0)
		return -EINVAL;
	return sqlite3_bind_text(st, idx, s, -1, SQLITE_STATIC) == SQLITE_OK ? 0 : -ENOMEM;
}

/* -errno for a failed sqlite step (a JSON error in a query is the manifest's fault). */
static int step_errno(int rc)
{
	return rc == SQLITE_NOMEM ? -ENOMEM : -EIO;
}

/* NULL when url may be fetched for this manifest, else why not (see confine_origin). */
static const char *unconfined(const struct load *ld, const char *url)
{
	const char *origin = ld->opts->confine_origin, *dir = ld->opts->confine_dir;
	size_t n = origin ? strlen(origin) : 0;

	if (!origin || strncmp(url, origin, n) != 0 || (url[n] != '/' && url[n] != '\0'))
		return NULL;
	if (strncmp(url, dir, strlen(dir)) == 0)
		return NULL;
	return "url leads out of the manifest's own prefix in its bucket";
}

/*
 * An object an entry refers to by {"size", "sha256", "url"} (its chunks' hash list, a
 * directory's own manifest): field f, named by its key in messages. The size is handed
 * back unchecked but for its sign. 0, -EINVAL with the message, or -errno.
 */
static int read_ref(struct load *ld, const struct manifest_entry *e, enum field_id f,
                    const char *path, size_t len, int64_t *size, char sha256[65], char **url)
{
	const char *name = manifest_field_names[f];
	sqlite3_stmt *st = ld->st_chunks;
	char why[256];
	int rc;

	if (!is_type(&e->f[f], J_OBJECT))
		return entry_error(ld, e->i, path, len, "%s is not an object", name);
	rc = bind_text(st, ":c", e->f[f].text);
	if (rc < 0)
		goto out;
	rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		rc = step_errno(rc);
		goto out;
	}
	const char *size_type = (const char *)sqlite3_column_text(st, 0);
	*size = sqlite3_column_int64(st, 1);
	if (!size_type || strcmp(size_type, "integer") != 0 ||
	    sqlite3_column_type(st, 1) != SQLITE_INTEGER || *size < 0) {
		rc =
		    entry_error(ld, e->i, path, len, "%s.size is not a non-negative integer", name);
		goto out;
	}
	const char *sha_type = (const char *)sqlite3_column_text(st, 2);
	const char *sha = (const char *)sqlite3_column_text(st, 3);
	if (!sha_type || strcmp(sha_type, "text") != 0 ||
	    !lower_sha256(sha, (size_t)sqlite3_column_bytes(st, 3), sha256)) {
		rc = entry_error(ld, e->i, path, len, "%s.sha256 is not 64 hex digits", name);
		goto out;
	}
	const char *url_type = (const char *)sqlite3_column_text(st, 4);
	const char *rel = (const char *)sqlite3_column_text(st, 5);
	if (!url_type || strcmp(url_type, "text") != 0 || !rel || !*rel ||
	    raw_has_nul(sqlite3_column_text(st, 6))) {
		rc = entry_error(ld, e->i, path, len, "%s.url is not a non-empty string", name);
		goto out;
	}
	rc = manifest_url_resolve(&ld->base, rel, NULL, 0, url, why, sizeof(why));
	if (rc == -EINVAL)
		rc = entry_error(ld, e->i, path, len, "%s.%s", name, why);
	if (rc == 0 && unconfined(ld, *url))
		rc = entry_error(ld, e->i, path, len, "%s.%s", name, unconfined(ld, *url));
out:
	sqlite3_reset(st);
	return rc;
}

/* The chunk hashes an entry names (each chunk verified before it is served): checked here so a
 * manifest that uses them is right before anything relies on them. */
static int read_chunks(struct load *ld, const struct manifest_entry *e, const char *path,
                       size_t len, struct index_build_entry *be, char sha256[65], char **url)
{
	int64_t size;
	int rc = read_ref(ld, e, F_CHUNKS, path, len, &size, sha256, url);

	if (rc == 0 && (size < CHUNK_SIZE_MIN || size > CHUNK_SIZE_MAX || (size & (size - 1))))
		rc = entry_error(ld, e->i, path, len,
		                 "chunks.size is not a power of two from %d to %d", CHUNK_SIZE_MIN,
		                 CHUNK_SIZE_MAX);
	if (rc < 0)
		return rc;
	be->chunk_size = (uint64_t)size;
	be->chunk_sha256 = sha256;
	be->chunk_url = *url;
	return 0;
}

/* How a file's own object is stored (version 3): checked whole here, against its size and
 * chunks, so that every frame table in the index adds up. */
static int read_stored(struct load *ld, const struct manifest_entry *e, const char *path,
                       size_t len, struct index_build_entry *be, struct manifest_stored *st)
{
	const struct manifest_field *f = &e->f[F_STORED];
	char why[256];
	int rc;

	if (ld->version < 3)
		return entry_error(ld, e->i, path, len,
		                   "stored needs manifest version 3 (this one is version %d)",
		                   ld->version);
	if (be->pack_sha256)
		return entry_error(ld, e->i, path, len,
		                   "stored is not allowed for a pack member (its pack's says how "
		                   "its bytes are stored)");
	if (!is_type(f, J_OBJECT))
		return entry_error(ld, e->i, path, len, "stored is not an object");
	rc = manifest_stored_read(f->text, be->size, be->chunk_size, st, why, sizeof(why));
	if (rc == -EINVAL)
		return entry_error(ld, e->i, path, len, "%s", why);
	if (rc)
		return rc;
	be->stored = manifest_stored_view(st);
	return 0;
}

/* A directory whose entries are in a manifest of its own, loaded at its first lookup. */
static int read_nested(struct load *ld, const struct manifest_entry *e, const char *path,
                       size_t len, struct index_build_entry *be, char sha256[65], char **url)
{
	int64_t size;
	int rc = read_ref(ld, e, F_MANIFEST, path, len, &size, sha256, url);

	if (rc < 0)
		return rc;
	be->nested_sha256 = sha256;
	be->nested_size = (uint64_t)size;
	be->nested_url = *url;
	return 0;
}

/* "0755" or "644": 3 or 4 octal digits. -1 when s is neither. */
static int parse_mode(const char *s, size_t len)
{
	int mode = 0;

	if (len < 3 || len > 4)
		return -1;
	for (size_t k = 0; k < len; k++) {
		if (s[k] < '0' || s[k] > '7')
			return -1;
		mode = mode * 8 + (s[k] - '0');
	}
	return mode;
}

/* The fields of a file that an entry of another type must not have. */
static const enum field_id file_only[] = {F_SIZE,   F_SHA256, F_URL,        F_ETAG,  F_PACK,
                                          F_OFFSET, F_CHUNKS, F_EXECUTABLE, F_STORED};

/* Checks what the entry's type allows; fills be's type, mode and mtime. */
static int read_kind(struct load *ld, const struct manifest_entry *e, const char *path, size_t len,
                     struct index_build_entry *be)
{
	const struct manifest_field *ft = &e->f[F_TYPE], *fm = &e->f[F_MODE],
	                            *fx = &e->f[F_EXECUTABLE];
	const struct manifest_field *fmt = &e->f[F_MTIME];

	be->kind = INDEX_KIND_FILE;
	if (ld->version >= 2 && ft->seen) {
		if (!is_type(ft, J_TEXT) || ft->has_nul)
			return entry_error(ld, e->i, path, len, "type is not a string");
		if (strcmp(ft->text, "directory") == 0)
			be->kind = INDEX_KIND_DIR;
		else if (strcmp(ft->text, "symlink") == 0)
			be->kind = INDEX_KIND_SYMLINK;
		else if (strcmp(ft->text, "file") != 0)
			return entry_error(ld, e->i, path, len,
			                   "type \"%.40s\" is unknown (file, directory, symlink)",
			                   ft->text);
	}
	if (fmt->seen && !fmt->is_int64)
		return entry_error(ld, e->i, path, len, "mtime is not an integer");
	be->has_mtime = fmt->seen;
	be->mtime = fmt->i;
	if (fx->seen && !is_type(fx, J_TRUE) && !is_type(fx, J_FALSE))
		return entry_error(ld, e->i, path, len, "executable is not a boolean");
	if (be->kind == INDEX_KIND_FILE) {
		be->has_mode = true;
		be->mode = is_type(fx, J_TRUE) ? 0555 : 0444;
	}
	if (ld->version >= 2 && fm->seen) {
		int mode = is_type(fm, J_TEXT) && !fm->has_nul ? parse_mode(fm->text, fm->len) : -1;
		if (mode < 0)
			return entry_error(
			    ld, e->i, path, len,
			    "mode is not 3 or 4 octal digits in a string (\"0755\")");
		be->has_mode = true;
		be->mode = (uint32_t)mode;
	}
	if (be->kind == INDEX_KIND_FILE) {
		if (ld->version >= 2 && e->f[F_TARGET].seen)
			return entry_error(ld, e->i, path, len, "target is only for a symlink");
		return 0;
	}
	for (size_t k = 0; k < sizeof(file_only) / sizeof(file_only[0]); k++)
		if (e->f[file_only[k]].seen)
			return entry_error(ld, e->i, path, len, "%s is not allowed for a %s",
			                   manifest_field_names[file_only[k]],
			                   be->kind == INDEX_KIND_DIR ? "directory" : "symlink");
	if (be->kind == INDEX_KIND_DIR) {
		if (e->f[F_TARGET].seen)
			return entry_error(ld, e->i, path, len, "target is only for a symlink");
		return 0;
	}
	if (be->has_mode)
		return entry_error(ld, e->i, path, len, "mode is not allowed for a symlink");
	if (!e->f[F_TARGET].seen)
		return entry_error(ld, e->i, path, len, "target is missing");
	if (!is_type(&e->f[F_TARGET], J_TEXT))
		return entry_error(ld, e->i, path, len, "target is not a string");
	if (e->f[F_TARGET].has_nul)
		return entry_error(ld, e->i, path, len, "target contains a NUL byte");
	be->target = e->f[F_TARGET].text;
	be->target_len = e->f[F_TARGET].len;
	return 0;
}

/* A file's own fields: size, digest, version, its pack or its URL. */
static int read_file(struct load *ld, const struct manifest_entry *e, const char *path, size_t len,
                     struct index_build_entry *be, char sha256[65], char pack[65], char **url)
{
	const struct manifest_field *fz = &e->f[F_SIZE], *fs = &e->f[F_SHA256], *fu = &e->f[F_URL];
	const struct manifest_field *fe = &e->f[F_ETAG], *fp = &e->f[F_PACK], *fo = &e->f[F_OFFSET];
	bool v2 = ld->version >= 2;
	char why[256];
	int rc;

	if (!fz->seen)
		return entry_error(ld, e->i, path, len, "size is missing");
	/* json_type says "integer" for digits beyond int64 too; those are not sizes. */
	if (!fz->is_int64)
		return entry_error(ld, e->i, path, len, "size is not an integer");
	if (fz->i < 0)
		return entry_error(ld, e->i, path, len, "size is negative");
	be->size = (uint64_t)fz->i;
	if (fs->seen) {
		if (!is_type(fs, J_TEXT) || fs->has_nul || !lower_sha256(fs->text, fs->len, sha256))
			return entry_error(ld, e->i, path, len, "sha256 is not 64 hex digits");
		be->sha256 = sha256;
	}
	if (fu->seen && !is_type(fu, J_TEXT))
		return entry_error(ld, e->i, path, len, "url is not a string");
	if (fu->seen && fu->has_nul)
		return entry_error(ld, e->i, path, len, "url contains a NUL byte");
	/* "" would resolve to the manifest's own directory: surely a mistake. */
	if (fu->seen && fu->len == 0)
		return entry_error(ld, e->i, path, len, "url is empty");
	if (fe->seen && !is_type(fe, J_TEXT))
		return entry_error(ld, e->i, path, len, "etag is not a string");
	/* It goes into an If-Match header as it is: visible ASCII only, so no header can be
	 * injected, and short enough for the flight's copy. */
	if (fe->seen && fe->has_nul)
		return entry_error(ld, e->i, path, len, "etag contains a NUL byte");
	if (fe->seen && (fe->len == 0 || fe->len > INDEX_ETAG_MAX))
		return entry_error(ld, e->i, path, len, "etag must be 1 to %d characters",
		                   INDEX_ETAG_MAX);
	for (size_t k = 0; fe->seen && k < fe->len; k++)
		if (fe->text[k] < 0x21 || fe->text[k] > 0x7e)
			return entry_error(ld, e->i, path, len,
			                   "etag has a character that is not visible ASCII");
	be->etag = fe->seen ? fe->text : NULL;
	if (v2 && fp->seen) {
		if (!is_type(fp, J_TEXT) || fp->has_nul || !lower_sha256(fp->text, fp->len, pack))
			return entry_error(ld, e->i, path, len,
			                   "pack is not 64 hex digits (a sha256 of \"packs\")");
		if (fu->seen)
			return entry_error(ld, e->i, path, len,
			                   "a pack member has no url: its bytes are in its pack");
		if (!fo->seen)
			return entry_error(ld, e->i, path, len, "offset is missing");
		if (!fo->is_int64 || fo->i < 0)
			return entry_error(ld, e->i, path, len,
			                   "offset is not a non-negative integer");
		be->pack_sha256 = pack;
		be->offset = (uint64_t)fo->i;
		return 0;
	}
	if (v2 && fo->seen)
		return entry_error(ld, e->i, path, len, "offset without pack");
	rc = manifest_url_resolve(&ld->base, fu->seen ? fu->text : NULL, path, len, url, why,
	                          sizeof(why));
	if (rc == -EINVAL)
		return entry_error(ld, e->i, path, len, "%s", why);
	if (rc == 0 && unconfined(ld, *url))
		return entry_error(ld, e->i, path, len, "%s", unconfined(ld, *url));
	be->url = *url;
	return rc;
}

/* manifest_entries_walk's callback (ctx the load): checks an entry and adds it to the
 * namespace. */
static int load_entry(void *ctx, const struct manifest_entry *e)
{
	struct load *ld = ctx;
	const struct manifest_field *fp = &e->f[F_PATH];
	const char *path = fp->text;
	size_t len = fp->len;
	char sha256[65], pack[65], chunk_sha256[65], why[320];
	char *url = NULL, *chunk_url = NULL;
	struct index_build_entry be = {0};
	struct manifest_stored stored = {0};
	int rc;

	if (!e->is_object)
		return entry_error(ld, e->i, NULL, 0, "entry is not an object");
	if (!fp->seen)
		return entry_error(ld, e->i, NULL, 0, "path is missing");
	if (!is_type(fp, J_TEXT))
		return entry_error(ld, e->i, NULL, 0, "path is not a string");
	if (fp->has_nul)
		return entry_error(ld, e->i, path, strlen(path), "path contains a NUL byte");
	/* Before anything else reads the path (its URL is made from it). */
	const char *bad = index_check_path(path, len, ld->at_root, why, sizeof(why));
	if (bad)
		return entry_error(ld, e->i, path, len, "%s", bad);
	be.path = path;
	be.path_len = len;
	rc = read_kind(ld, e, path, len, &be);
	if (rc == 0 && be.kind == INDEX_KIND_FILE)
		rc = read_file(ld, e, path, len, &be, sha256, pack, &url);
	if (rc == 0 && ld->version >= 2 && e->f[F_CHUNKS].seen)
		rc = read_chunks(ld, e, path, len, &be, chunk_sha256, &chunk_url);
	if (rc == 0 && be.kind == INDEX_KIND_FILE && e->f[F_STORED].seen)
		rc = read_stored(ld, e, path, len, &be, &stored);
	if (rc == 0 && ld->version >= 2 && e->f[F_MANIFEST].seen) {
		if (be.kind != INDEX_KIND_DIR)
			rc = entry_error(ld, e->i, path, len, "manifest is only for a directory");
		else
			rc = read_nested(ld, e, path, len, &be, chunk_sha256, &chunk_url);
	}
	/* Judged once the whole snapshot is known: it may point at a later entry. */
	if (rc == 0 && be.kind == INDEX_KIND_SYMLINK &&
	    ld->opts->outside_symlinks != MANIFEST_OUTSIDE_SHOW) {
		if (!ld->judge)
			rc = symlink_judge_new(ld->idx, ld->b, ld->dir, &ld->judge);
		if (rc == 0)
			rc = symlink_judge_defer(ld->judge, e->i, &be);
		goto out;
	}
	if (rc == 0)
		rc = ld->pipe ? load_pipe_put(ld->pipe, e->i, &be)
		              : add_entry(ld, e->i, &be, ld->err, ld->err_len);
out:
	free(url);
	free(chunk_url);
	manifest_stored_free(&stored);
	return rc;
}

/* A pack's "stored" (its JSON text, NULL: none) into st; -EINVAL with why. */
static int read_pack_stored(struct load *ld, const char *text, uint64_t size,
                            struct manifest_stored *st, char *why, size_t why_len)
{
	if (!text)
		return 0;
	if (ld->version < 3) {
		snprintf(why, why_len, "stored needs manifest version 3 (this one is version %d)",
		         ld->version);
		return -EINVAL;
	}
	return manifest_stored_read(text, size, 0, st, why, why_len);
}

/* Declares each pack of a version 2 or 3 manifest, before the entries that name them. */
static int load_packs(struct load *ld)
{
	sqlite3_stmt *st = ld->st_packs;
	char sha256[65], why[256];
	int rc = 0, step;

	while (rc == 0 && (step = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t i = sqlite3_column_int64(st, 0);
		const char *type = (const char *)sqlite3_column_text(st, 1);
		const char *sha_type = (const char *)sqlite3_column_text(st, 2);
		const char *size_type = (const char *)sqlite3_column_text(st, 4);
		const char *url_type = (const char *)sqlite3_column_text(st, 6);
		const char *rel = (const char *)sqlite3_column_text(st, 7);
		int64_t size = sqlite3_column_int64(st, 5);
		struct manifest_stored stored = {0};
		char *url = NULL;

		if (!type || strcmp(type, "object") != 0)
			rc = load_error(ld, "packs[%" PRId64 "]: pack is not an object", i);
		else if (!sha_type || strcmp(sha_type, "text") != 0 ||
		         !lower_sha256((const char *)sqlite3_column_text(st, 3),
		                       (size_t)sqlite3_column_bytes(st, 3), sha256))
			rc = load_error(ld, "packs[%" PRId64 "]: sha256 is not 64 hex digits", i);
		else if (!size_type || strcmp(size_type, "integer") != 0 ||
		         sqlite3_column_type(st, 5) != SQLITE_INTEGER || size < 0)
			rc = load_error(
			    ld, "packs[%" PRId64 "]: size is not a non-negative integer", i);
		else if (!url_type || strcmp(url_type, "text") != 0 || !rel || !*rel ||
		         raw_has_nul(sqlite3_column_text(st, 8)))
			rc = load_error(ld, "packs[%" PRId64 "]: url is not a non-empty string", i);
		if (rc == 0)
			rc = manifest_url_resolve(&ld->base, rel, NULL, 0, &url, why, sizeof(why));
		if (rc == 0 && unconfined(ld, url)) {
			snprintf(why, sizeof(why), "%s", unconfined(ld, url));
			rc = -EINVAL;
		}
		if (rc == 0)
			rc = read_pack_stored(ld, (const char *)sqlite3_column_text(st, 9),
			                      (uint64_t)size, &stored, why, sizeof(why));
		if (rc == 0) {
			struct index_stored_view view = manifest_stored_view(&stored);
			rc = index_build_add_pack(ld->b, sha256, (uint64_t)size, url, &view, why,
			                          sizeof(why));
		}
		if (rc == -EINVAL && !(ld->err && ld->err[0]))
			rc = load_error(ld, "packs[%" PRId64 "]: %s", i, why);
		free(url);
		manifest_stored_free(&stored);
	}
	if (rc == 0 && step != SQLITE_DONE)
		rc = step_errno(step);
	if (sqlite3_reset(st) != SQLITE_OK && rc == 0)
		rc = -EIO;
	return rc;
}

/* The fields of the top level that check_top reads, as keys_sql gave them. */
struct top_keys {
	bool version_int; /* "version" is an integer (version holds it) */
	int64_t version;
	const char *type[3]; /* json_type of "files", "entries", "packs"; NULL: absent */
	bool seen[4];        /* version, files, entries, packs: the first of each counts */
};

/* Keeps "read_orders" (type, and the object's text) for read_orders.c. 0 or -ENOMEM. */
static int take_orders(struct load *ld, const char *type, const unsigned char *text)
{
	snprintf(ld->orders_type, sizeof(ld->orders_type), "%s", type);
	ld->orders = text ? strdup((const char *)text) : NULL;
	return text && !ld->orders ? -ENOMEM : 0;
}

/*
 * check_top in one parse: 1 when the manifest is well formed (ld->version, ld->array and
 * ld->packs set), 0 when check_top must say why not (or the pass could not tell), -ENOMEM.
 */
static int check_top_fast(struct load *ld)
{
	static const char *const names[4] = {"version", "files", "entries", "packs"};
	sqlite3_stmt *st = ld->st_keys;
	struct top_keys k = {0};
	char types[3][8] = {"", "", ""};
	bool object = true, any = false;
	int rc = 0, step;

	while ((step = sqlite3_step(st)) == SQLITE_ROW) {
		any = true;
		/* A scalar gives a NULL key, an array's elements integer ones. */
		if (sqlite3_column_type(st, 0) != SQLITE_TEXT) {
			object = false;
			break;
		}
		const char *key = (const char *)sqlite3_column_text(st, 0);
		const char *type = (const char *)sqlite3_column_text(st, 1);
		if (key && type && strcmp(key, "read_orders") == 0 && !ld->orders_type[0] &&
		    (rc = take_orders(ld, type, sqlite3_column_text(st, 3))) < 0)
			break;
		for (int n = 0; key && type && n < 4; n++) {
			if (k.seen[n] || strcmp(key, names[n]) != 0)
				continue;
			k.seen[n] = true;
			if (n == 0) {
				k.version_int = strcmp(type, "integer") == 0 &&
				                sqlite3_column_type(st, 2) == SQLITE_INTEGER;
				k.version = sqlite3_column_int64(st, 2);
				break;
			}
			snprintf(types[n - 1], sizeof(types[n - 1]), "%s", type);
			k.type[n - 1] = types[n - 1];
			if (n == 3 && sqlite3_column_type(st, 3) == SQLITE_TEXT) {
				free(ld->packs);
				ld->packs = strdup((const char *)sqlite3_column_text(st, 3));
				if (!ld->packs)
					rc = -ENOMEM;
			}
			break;
		}
	}
	if (step == SQLITE_NOMEM)
		rc = -ENOMEM;
	sqlite3_reset(st); /* a JSON error is top_sql's to name */
	if (rc < 0 || !object || !any || (step != SQLITE_DONE && step != SQLITE_ROW))
		return rc;
	if (!k.version_int || k.version < 1 || k.version > MANIFEST_VERSION_MAX)
		return 0;
	const char *atype = k.type[k.version == 1 ? 0 : 1], *ptype = k.type[2];
	if (!atype || strcmp(atype, "array") != 0)
		return 0;
	if (k.version >= 2 && ptype && (strcmp(ptype, "array") != 0 || !ld->packs))
		return 0;
	ld->version = (int)k.version;
	ld->array = k.version == 1 ? "files" : "entries";
	ld->has_packs = k.version >= 2 && ptype;
	return 1;
}

/* Checks the manifest's outer shape: valid JSON, an object, a known version, and its
 * arrays. Sets ld->version and ld->array. */
static int check_top(struct load *ld)
{
	sqlite3_stmt *st = ld->st_top;
	int rc = sqlite3_step(st);

	if (rc != SQLITE_ROW) {
		rc = rc == SQLITE_DONE ? -EIO : step_errno(rc);
		goto out;
	}
	const char *top = (const char *)sqlite3_column_text(st, 1);
	const char *vtype = (const char *)sqlite3_column_text(st, 2);
	const char *vraw = (const char *)sqlite3_column_text(st, 4);
	int64_t version = sqlite3_column_int64(st, 3);
	if (!sqlite3_column_int(st, 0)) {
		rc = load_error(ld, "manifest is not valid JSON");
	} else if (!top || strcmp(top, "object") != 0) {
		rc = load_error(ld, "manifest is not a JSON object");
	} else if (!vtype) {
		rc = load_error(ld, "unsupported manifest version (\"version\" is missing)");
	} else if (strcmp(vtype, "integer") != 0 || sqlite3_column_type(st, 3) != SQLITE_INTEGER ||
	           version < 1 || version > MANIFEST_VERSION_MAX) {
		rc = load_error(ld, "unsupported manifest version %.40s (expected 1, 2 or 3)",
		                vraw ? vraw : "?");
	} else {
		ld->version = (int)version;
		ld->array = version == 1 ? "files" : "entries";
		/* load_packs reads "packs" from the whole text (ld->packs is NULL). */
		free(ld->packs);
		ld->packs = NULL;
		const char *atype = (const char *)sqlite3_column_text(st, version == 1 ? 5 : 6);
		const char *ptype = (const char *)sqlite3_column_text(st, 7);
		if (!atype)
			rc = load_error(ld, "manifest has no \"%s\"", ld->array);
		else if (strcmp(atype, "array") != 0)
			rc = load_error(ld, "manifest \"%s\" is not an array", ld->array);
		else if (version >= 2 && ptype && strcmp(ptype, "array") != 0)
			rc = load_error(ld, "manifest \"packs\" is not an array");
		else
			rc = 0;
		ld->has_packs = version >= 2 && ptype;
	}
out:
	if (sqlite3_reset(st) != SQLITE_OK && rc == 0)
		rc = -EIO;
	return rc;
}

static int prepare_load(struct load *ld)
{
	static const char *const sql[] = {keys_sql, top_sql, packs_sql, chunks_sql};
	sqlite3_stmt **st[] = {&ld->st_keys, &ld->st_top, &ld->st_packs, &ld->st_chunks};
	int rc =
	    sqlite3_open_v2(":memory:", &ld->db,
	                    SQLITE_OPEN_READWRITE | SQLITE_OPEN_MEMORY | SQLITE_OPEN_NOMUTEX, NULL);

	if (rc != SQLITE_OK)
		return -ENOMEM;
	for (size_t k = 0; k < sizeof(sql) / sizeof(sql[0]); k++)
		if (sqlite3_prepare_v2(ld->db, sql[k], -1, st[k], NULL) != SQLITE_OK)
			return sqlite3_errcode(ld->db) == SQLITE_NOMEM ? -ENOMEM : -EIO;
	/* sqlite copies a text value that it does not know to be NUL-terminated each time a
	 * JSON function reads it (15 MB per call for 100,000 entries); a bound C string is read
	 * in place. ld->json outlives the statements. */
	rc = bind_text(ld->st_keys, ":json", ld->json);
	if (rc == 0)
		rc = bind_text(ld->st_top, ":json", ld->json);
	if (rc == 0)
		rc = bind_text(ld->st_packs, ":json", ld->json);
	return rc;
}

/* symlink_judge_add_fn: a link that stays, added on this thread (the builder's is done). */
static int add_link(void *ctx, int64_t i, const struct index_build_entry *be)
{
	struct load *ld = ctx;

	return add_entry(ld, i, be, ld->err, ld->err_len);
}

/* The links kept aside, judged now that everything else is in; refused with their chain. */
static int judge_symlinks(struct load *ld)
{
	struct symlink_verdict bad;
	char target[ERR_PATH_MAX * 4 + 16];
	int rc = symlink_judge_run(ld->judge, ld->opts->outside_symlinks, add_link, ld,
	                           &ld->opts->hidden_symlinks, &bad);

	if (rc == -E2BIG)
		rc = load_error(ld,
		                "its symlinks' chains are too long to judge for "
		                "--outside-symlinks (more lookups than this many links may take)");
	if (rc == -EINVAL && !(ld->err && ld->err[0])) {
		quote_path(target, sizeof(target), bad.target, bad.target_len);
		rc = entry_error(ld, bad.i, bad.path, bad.path_len,
		                 "target \"%.80s\" %s (--outside-symlinks=refuse): %s", target,
		                 symlink_end_text(bad.res.end), bad.res.chain);
	}
	return rc;
}

/* Whether to add entries on a thread of their own. SPOOLFS_TEST_LOAD_PIPE=1 sends the unit
 * suites' small manifests through it too. */
static bool use_pipe(size_t json_len)
{
	/* NOLINTNEXTLINE(concurrency-mt-unsafe): nothing sets the environment at run time */
	const char *test = getenv("SPOOLFS_TEST_LOAD_PIPE");

	return json_len >= PIPE_OVER || (test && strcmp(test, "1") == 0);
}

/* json[json_len] is '\0' when `terminated`; otherwise the text is copied to make it so. */
static int load_manifest(struct index *idx, uint64_t dir, const char *json, size_t json_len,
                         bool terminated, const char *base_url, struct manifest_load_options *opts,
                         char *err, size_t err_len)
{
	struct manifest_load_options defaults = {0};
	struct load ld = {.err = err,
	                  .err_len = err_len,
	                  .array = "files",
	                  .opts = opts ? opts : &defaults,
	                  .at_root = dir == INDEX_ROOT_INO,
	                  .idx = idx,
	                  .dir = dir};
	char why[256] = "";
	int rc;

	if (err && err_len)
		err[0] = '\0';
	if (terminated) {
		ld.json = json;
	} else {
		ld.json_copy = malloc(json_len + 1);
		if (!ld.json_copy) {
			rc = -ENOMEM;
			goto out;
		}
		memcpy(ld.json_copy, json, json_len);
		ld.json_copy[json_len] = '\0';
		ld.json = ld.json_copy;
	}
	rc = manifest_base_init(&ld.base, base_url, why, sizeof(why));
	if (rc == -EINVAL)
		rc = load_error(&ld, "%s", why);
	if (rc < 0)
		goto out;
	rc = dir == INDEX_ROOT_INO ? index_build_begin(idx, &ld.b)
	                           : index_build_begin_at(idx, dir, &ld.b);
	if (rc == -EBUSY)
		load_error(&ld, "the namespace is already loaded");
	if (rc < 0)
		goto out;
	rc = prepare_load(&ld);
	if (rc < 0)
		goto out;
	/* Raw control bytes are invalid in JSON, so a NUL in the text means a bad manifest;
	 * checking here keeps the C string below from hiding a tail after it. */
	if (memchr(json, '\0', json_len)) {
		rc = load_error(&ld, "manifest is not valid JSON");
		goto out;
	}
	rc = check_top_fast(&ld);
	if (rc == 0)
		rc = check_top(&ld);
	else if (rc == 1)
		rc = 0;
	if (rc == 0 && ld.at_root && ld.version >= 2)
		source_read_orders_take(ld.orders_type[0] ? ld.orders_type : NULL, ld.orders,
		                        ld.opts);
	/* Unbound (NULL), :packs makes packs_sql read the whole text (see check_top). */
	if (rc == 0 && ld.has_packs && ld.packs)
		rc = bind_text(ld.st_packs, ":packs", ld.packs);
	if (rc == 0 && ld.has_packs)
		rc = load_packs(&ld);
	/* A builder thread that cannot start leaves the adding to this one (ld.pipe NULL). */
	if (rc == 0 && use_pipe(json_len))
		(void)load_pipe_start(&ld.pipe, add_entry, &ld);
	if (rc == 0)
		rc = manifest_entries_walk(ld.json, json_len, ld.array, load_entry, &ld, ld.err,
		                           ld.err_len);
	if (ld.pipe) {
		/* The builder's failure is of an entry before any this thread refused. */
		int brc = load_pipe_finish(ld.pipe, ld.err, ld.err_len);
		ld.pipe = NULL;
		if (brc < 0)
			rc = brc;
	}
	if (rc == 0 && ld.judge)
		rc = judge_symlinks(&ld);
	if (rc == 0) {
		rc = index_build_commit(ld.b);
		ld.b = NULL;
	}
out:
	symlink_judge_free(ld.judge);
	index_build_abort(ld.b);
	if (rc < 0 && rc != -EINVAL && rc != -EBUSY && err && err_len && !err[0]) {
		char buf[64];
		snprintf(err, err_len, "cannot load the manifest: %s",
		         strerror_r(-rc, buf, sizeof(buf)));
	}
	sqlite3_finalize(ld.st_keys);
	sqlite3_finalize(ld.st_top);
	sqlite3_finalize(ld.st_packs);
	sqlite3_finalize(ld.st_chunks);
	sqlite3_close(ld.db);
	manifest_base_free(&ld.base);
	free(ld.json_copy);
	free(ld.packs);
	free(ld.orders);
	if (rc < 0 && ld.at_root) {
		free(ld.opts->read_order);
		ld.opts->read_order = NULL;
	}
	return rc;
}

int source_manifest_load(struct index *idx, const char *json, size_t json_len, const char *base_url,
                         struct manifest_load_options *opts, char *err, size_t err_len)
{
	return load_manifest(idx, INDEX_ROOT_INO, json, json_len, false, base_url, opts, err,
	                     err_len);
}

int source_manifest_load_text(struct index *idx, const char *text, size_t len, const char *base_url,
                              struct manifest_load_options *opts, char *err, size_t err_len)
{
	return load_manifest(idx, INDEX_ROOT_INO, text, len, true, base_url, opts, err, err_len);
}

int source_manifest_load_subtree(struct index *idx, uint64_t dir, const char *text, size_t len,
                                 const char *base_url, struct manifest_load_options *opts,
                                 char *err, size_t err_len)
{
	return load_manifest(idx, dir, text, len, true, base_url, opts, err, err_len);
}

/*
 * manifest.c loads a JSON manifest into the index's empty namespace: it owns the manifest
 * format, the rules for paths and URLs, and the errors a bad manifest gets.
 *
 * The JSON is read with sqlite's own JSON functions (no parser of ours), in one
 * transaction under idx->lock: either every entry is loaded or nothing is. Directories are
 * implied by paths; an in-memory table of every path seen (path_table.c) finds parents,
 * duplicates and file/directory clashes without a query per segment.
 */
#include "index/digest_sizes.h"
#include "index/path_table.h"
#include "index/index_i.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MANIFEST_VERSION 1
/* The sha256 of no bytes. */
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
/* Longest path shown in an error message before it is cut with "...". */
#define ERR_PATH_MAX 160

struct load {
	struct index *idx;
	sqlite3_stmt *st_top, *st_each, *st_ins, *st_mtime;
	CURLU *base; /* NULL when no usable base URL was given */
	/* A manifest from a server may not name local files: it could serve /etc/shadow to
	 * every reader of the mount. Only a local manifest (or one with no base) may. */
	bool file_urls_allowed;
	/* What curl makes of a plain relative reference against base, up to the reference
	 * itself ("http://h/dir/"); NULL when base is NULL. */
	char *base_dir;
	size_t base_dir_len;
	const char *json; /* the manifest, NUL-terminated: the caller's or json_copy */
	char *json_copy;  /* owned; NULL when the caller's text was terminated already */
	struct path_table pt;
	struct digest_sizes digests;
	bool sha256_indexed; /* node(sha256) has an index: see check_other_size */
	uint64_t files, dirs, bytes;
	char *err;
	size_t err_len;
};

/* The fields of an entry that mean something; other keys are ignored. */
enum field_id { F_PATH, F_SIZE, F_SHA256, F_URL, F_MTIME, F_EXECUTABLE, F_ETAG, F_COUNT };
static const char *const field_names[F_COUNT] = {"path",  "size",       "sha256", "url",
                                                 "mtime", "executable", "etag"};

/* What a file's node row holds besides its place in the tree. */
struct file_attrs {
	int64_t size;
	int64_t mtime;
	bool executable;
	const char *sha256; /* lower-case hex or NULL */
	const char *url;
	const char *etag; /* the version to pin, or NULL */
};

/* One field as st_each gave it. Text is copied: a column dies at the next step. */
struct field {
	bool seen;
	char type[8];  /* json_type's name: "text", "integer", "true", ... */
	bool is_int64; /* an "integer" that fits: sqlite hands larger ones over as reals */
	int64_t i;
	bool has_nul; /* a text whose raw form holds "\u0000" (sqlite 3.40 cuts there) */
	char *text;   /* NUL-terminated, for text fields; buffer kept across entries */
	size_t len, cap;
};

/* The entry being gathered from st_each's rows. */
struct entry {
	bool active;
	int64_t i;
	bool is_object;
	struct field f[F_COUNT];
};

static const char top_sql[] =
    "SELECT json_valid(:json),"
    " CASE WHEN json_valid(:json) THEN json_type(:json) END,"
    " CASE WHEN json_valid(:json) THEN json_type(:json, '$.version') END,"
    " CASE WHEN json_valid(:json) THEN json_extract(:json, '$.version') END,"
    " CASE WHEN json_valid(:json) THEN :json -> '$.version' END,"
    " CASE WHEN json_valid(:json) THEN json_type(:json, '$.files') END";

/*
 * One row per (entry, key): a nested json_each is a third of the cost of a json_extract per
 * field, which re-renders and re-parses the entry each time. Non-object entries give one row
 * with NULL key. The raw `->` form is asked for only when the manifest holds an escaped NUL
 * (:has_nul): sqlite 3.40 cuts a decoded string at "\u0000", the raw form keeps it.
 */
static const char each_sql[] =
    "SELECT e.key, e.type, f.key, f.type, f.atom,"
    " CASE WHEN :has_nul AND f.type = 'text' AND f.key IN ('path', 'sha256', 'url', 'etag')"
    "  THEN e.value -> f.key END"
    " FROM json_each(:json, '$.files') AS e"
    " LEFT JOIN json_each(CASE WHEN e.type = 'object' THEN e.value ELSE '{}' END) AS f";

static const char ins_sql[] =
    "INSERT INTO node(parent, name, is_dir, size, mtime, executable, sha256, url, etag)"
    " VALUES(:parent, :name, :is_dir, :size, :mtime, :executable, :sha256, :url, :etag)";

static const char mtime_sql[] = "UPDATE node SET mtime = :mtime WHERE ino = :ino";

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

/* Writes `files[I] "PATH": reason` (or `files[I]: reason` when there is no path). */
__attribute__((format(printf, 5, 6))) static int
entry_error(struct load *ld, int64_t i, const char *path, size_t path_len, const char *fmt, ...)
{
	char reason[256], quoted[ERR_PATH_MAX * 4 + 16];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	if (!path)
		return load_error(ld, "files[%" PRId64 "]: %s", i, reason);
	quote_path(quoted, sizeof(quoted), path, path_len);
	return load_error(ld, "files[%" PRId64 "] \"%s\": %s", i, quoted, reason);
}

/* Whether a raw JSON string literal (as `->` returns it) holds an escaped NUL. Escapes are
 * skipped pairwise so that "\\u0000" (a backslash, then "u0000") is not mistaken for one. */
static bool raw_has_nul(const unsigned char *raw)
{
	if (!raw)
		return false;
	for (const unsigned char *p = raw; *p; p++) {
		if (*p != '\\')
			continue;
		if (p[1] == 'u' && strncmp((const char *)p + 2, "0000", 4) == 0)
			return true;
		if (p[1])
			p++;
	}
	return false;
}

/* NULL when path is acceptable, else why not (possibly written into buf). */
static const char *check_path(const char *path, size_t len, char *buf, size_t cap)
{
	if (len == 0)
		return "path is empty";
	if (path[0] == '/')
		return "path is absolute";
	for (size_t start = 0; start <= len;) {
		const char *slash = memchr(path + start, '/', len - start);
		size_t end = slash ? (size_t)(slash - path) : len;
		const char *why = start == 0 ? index_check_root_segment(path, end)
		                             : index_check_segment(path + start, end - start);
		if (why) {
			snprintf(buf, cap, "path has %s", why);
			return buf;
		}
		start = end + 1;
	}
	return NULL;
}

static int is_hex(int c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Percent-encodes each segment of path, keeping the '/' between them. Caller frees. */
static char *escape_path(const char *path, size_t len)
{
	char *out = malloc(len * 3 + 1);
	size_t o = 0;

	if (!out)
		return NULL;
	for (size_t start = 0; start <= len;) {
		const char *slash = memchr(path + start, '/', len - start);
		size_t end = slash ? (size_t)(slash - path) : len;
		/* The handle argument is ignored since curl 7.82. */
		char *seg = curl_easy_escape(NULL, path + start, (int)(end - start));
		if (!seg) {
			free(out);
			return NULL;
		}
		size_t n = strlen(seg);
		memcpy(out + o, seg, n);
		o += n;
		curl_free(seg);
		if (end < len)
			out[o++] = '/';
		start = end + 1;
	}
	out[o] = '\0';
	return out;
}

/*
 * Whether ref is a relative path reference that resolving only appends to the base's
 * directory: unreserved characters and '/', no leading '/', no empty, "." or ".."
 * segment. Nothing in it is escaped, merged or removed by RFC 3986 resolution, so
 * base_dir + ref is exactly what curl would build.
 */
static bool is_plain_ref(const char *ref, size_t len)
{
	size_t seg_start = 0;

	if (len == 0)
		return false;
	for (size_t i = 0; i <= len; i++) {
		if (i == len || ref[i] == '/') {
			size_t seg = i - seg_start;
			if (seg == 0 || (seg == 1 && ref[seg_start] == '.') ||
			    (seg == 2 && ref[seg_start] == '.' && ref[seg_start + 1] == '.'))
				return false;
			seg_start = i + 1;
			continue;
		}
		unsigned char c = (unsigned char)ref[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '.' || c == '_' || c == '~'))
			return false;
	}
	return true;
}

/*
 * Resolves an entry's URL: `rel` (its "url", relative or absolute) or, when NULL, its
 * escaped path, against the base. *out is malloc'd. Returns 0, -ENOMEM, or -EINVAL with a
 * reason in why.
 */
static int resolve_url(struct load *ld, const char *rel, const char *path, size_t path_len,
                       char **out, char *why, size_t why_len)
{
	const char *ref = rel ? rel : path;
	size_t ref_len = rel ? strlen(rel) : path_len;
	CURLU *h = NULL;
	char *escaped = NULL, *scheme = NULL, *resolved = NULL;
	CURLUcode uc;
	int rc = -ENOMEM;

	*out = NULL;
	/* The common case, and a third of a 100,000-entry load when curl parsed each URL. */
	if (ld->base_dir && is_plain_ref(ref, ref_len)) {
		*out = malloc(ld->base_dir_len + ref_len + 1);
		if (!*out)
			return -ENOMEM;
		memcpy(*out, ld->base_dir, ld->base_dir_len);
		memcpy(*out + ld->base_dir_len, ref, ref_len);
		(*out)[ld->base_dir_len + ref_len] = '\0';
		return 0;
	}
	h = ld->base ? curl_url_dup(ld->base) : curl_url();
	if (!h)
		goto out;
	if (!rel) {
		escaped = escape_path(path, path_len);
		if (!escaped)
			goto out;
	}
	if (!ld->base && !rel) {
		snprintf(why, why_len, "no \"url\" and no base URL to resolve the path against");
		rc = -EINVAL;
		goto out;
	}
	uc = curl_url_set(h, CURLUPART_URL, rel ? rel : escaped, 0);
	if (uc == CURLUE_OUT_OF_MEMORY)
		goto out;
	if (uc != CURLUE_OK) {
		snprintf(why, why_len, "url cannot be resolved (%s)", curl_url_strerror(uc));
		rc = -EINVAL;
		goto out;
	}
	uc = curl_url_get(h, CURLUPART_SCHEME, &scheme, 0);
	if (uc == CURLUE_OUT_OF_MEMORY)
		goto out;
	if (uc != CURLUE_OK || (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0 &&
	                        strcmp(scheme, "file") != 0)) {
		snprintf(why, why_len, "url scheme \"%s\" is not allowed (http, https, file)",
		         scheme ? scheme : "");
		rc = -EINVAL;
		goto out;
	}
	if (strcmp(scheme, "file") == 0 && !ld->file_urls_allowed) {
		snprintf(why, why_len,
		         "a file: url is allowed only in a local manifest, not one from a server");
		rc = -EINVAL;
		goto out;
	}
	uc = curl_url_get(h, CURLUPART_URL, &resolved, 0);
	if (uc == CURLUE_OUT_OF_MEMORY)
		goto out;
	if (uc != CURLUE_OK) {
		snprintf(why, why_len, "url cannot be resolved (%s)", curl_url_strerror(uc));
		rc = -EINVAL;
		goto out;
	}
	*out = strdup(resolved);
	if (!*out)
		goto out;
	rc = 0;
out:
	curl_free(resolved);
	curl_free(scheme);
	free(escaped);
	curl_url_cleanup(h);
	return rc;
}

/* Inserts one node row (a directory when attrs is NULL) and returns its inode, or -errno. */
static int64_t insert_node(struct load *ld, int64_t parent, const char *name, size_t name_len,
                           const struct file_attrs *attrs)
{
	static const struct file_attrs dir = {0};
	const struct file_attrs *a = attrs ? attrs : &dir;
	sqlite3_stmt *st = ld->st_ins;
	int rc = index_db_bind_int64(st, ":parent", parent);

	if (rc == 0)
		rc = index_db_bind_text(st, ":name", name, (int)name_len);
	if (rc == 0)
		rc = index_db_bind_int64(st, ":is_dir", attrs == NULL);
	if (rc == 0)
		rc = index_db_bind_int64(st, ":size", a->size);
	if (rc == 0)
		rc = index_db_bind_int64(st, ":mtime", a->mtime);
	if (rc == 0)
		rc = index_db_bind_int64(st, ":executable", a->executable);
	if (rc == 0)
		rc = a->sha256 ? index_db_bind_text(st, ":sha256", a->sha256, INDEX_SHA256_HEX)
		               : index_db_bind_null(st, ":sha256");
	if (rc == 0)
		rc = a->url ? index_db_bind_text(st, ":url", a->url, -1)
		            : index_db_bind_null(st, ":url");
	if (rc == 0)
		rc = a->etag ? index_db_bind_text(st, ":etag", a->etag, -1)
		             : index_db_bind_null(st, ":etag");
	if (rc == 0)
		rc = index_db_exec(st);
	if (rc < 0)
		return rc;
	return sqlite3_last_insert_rowid(ld->idx->db);
}

/*
 * Adds a file at `path` with its implied directories. Returns 0, -errno, or -EINVAL with the
 * entry's message written when the path clashes with an earlier one.
 */
static int add_file(struct load *ld, int64_t i, const char *path, size_t len,
                    const struct file_attrs *attrs)
{
	uint32_t parent = 0; /* the root */
	long found;
	int64_t ino;
	size_t start = 0;

	for (;;) {
		const char *slash = memchr(path + start, '/', len - start);
		if (!slash)
			break;
		size_t end = (size_t)(slash - path);
		uint64_t h = path_table_hash(&ld->pt, path, end);
		found = path_table_find(&ld->pt, path, end, h);
		if (found >= 0) {
			if (!ld->pt.v[found].is_dir)
				return entry_error(ld, i, path, len,
				                   "\"%.*s\" is both a file and a directory",
				                   (int)end, path);
		} else {
			ino =
			    insert_node(ld, ld->pt.v[parent].ino, path + start, end - start, NULL);
			if (ino < 0)
				return (int)ino;
			found = path_table_add(&ld->pt, path, end, h, ino, true, parent);
			if (found < 0)
				return (int)found;
			ld->dirs++;
		}
		parent = (uint32_t)found;
		start = end + 1;
	}

	uint64_t h = path_table_hash(&ld->pt, path, len);
	found = path_table_find(&ld->pt, path, len, h);
	if (found >= 0)
		return entry_error(ld, i, path, len, "%s",
		                   ld->pt.v[found].is_dir ? "path is both a file and a directory"
		                                          : "duplicate path");
	ino = insert_node(ld, ld->pt.v[parent].ino, path + start, len - start, attrs);
	if (ino < 0)
		return (int)ino;
	found = path_table_add(&ld->pt, path, len, h, ino, false, parent);
	if (found < 0)
		return (int)found;
	ld->files++;
	uint64_t size = (uint64_t)attrs->size;
	ld->bytes = ld->bytes + size < ld->bytes ? UINT64_MAX : ld->bytes + size;
	/* A directory's mtime is the newest below it; ancestors are never older than their
	 * children, so the walk stops at the first that already is new enough. */
	for (uint32_t d = parent;; d = ld->pt.v[d].parent) {
		if (ld->pt.v[d].mtime >= attrs->mtime)
			break;
		ld->pt.v[d].mtime = attrs->mtime;
		if (d == 0)
			break;
	}
	return 0;
}

/* Records one row of st_each into e (the first of duplicate keys wins, as with
 * json_extract). */
static int gather_field(struct load *ld, struct entry *e)
{
	sqlite3_stmt *st = ld->st_each;
	const char *key = (const char *)sqlite3_column_text(st, 2);
	const char *type = (const char *)sqlite3_column_text(st, 3);
	struct field *f = NULL;

	if (!key || !type)
		return 0;
	for (int k = 0; k < F_COUNT; k++) {
		if (strcmp(key, field_names[k]) == 0) {
			f = &e->f[k];
			break;
		}
	}
	if (!f || f->seen)
		return 0;
	f->seen = true;
	/* json_type's names are at most 7 bytes; snprintf here was 5% of a large load. */
	size_t type_len = strnlen(type, sizeof(f->type) - 1);
	memcpy(f->type, type, type_len);
	f->type[type_len] = '\0';
	if (strcmp(type, "integer") == 0 && sqlite3_column_type(st, 4) == SQLITE_INTEGER) {
		f->is_int64 = true;
		f->i = sqlite3_column_int64(st, 4);
	} else if (strcmp(type, "text") == 0) {
		const char *s = (const char *)sqlite3_column_text(st, 4);
		int n = sqlite3_column_bytes(st, 4);
		if (!s)
			return -ENOMEM;
		if ((size_t)n + 1 > f->cap) {
			char *t = realloc(f->text, (size_t)n + 1);
			if (!t)
				return -ENOMEM;
			f->text = t;
			f->cap = (size_t)n + 1;
		}
		memcpy(f->text, s, (size_t)n + 1);
		f->len = (size_t)n;
		/* Newer sqlite keeps the NUL in the value; 3.40 needs the raw form. */
		f->has_nul = strlen(f->text) != f->len || raw_has_nul(sqlite3_column_text(st, 5));
	}
	return 0;
}

static void entry_reset(struct entry *e, int64_t i, bool is_object)
{
	e->active = true;
	e->i = i;
	e->is_object = is_object;
	for (int k = 0; k < F_COUNT; k++) {
		struct field *f = &e->f[k];
		f->seen = f->is_int64 = f->has_nul = false;
		f->type[0] = '\0';
		f->len = 0;
	}
}

static void entry_free(struct entry *e)
{
	for (int k = 0; k < F_COUNT; k++)
		free(e->f[k].text);
}

/*
 * Entries with one sha256 share one download, whose size is the first opener's: another
 * entry (already inserted) with this digest and another size makes the manifest wrong.
 * Returns 0 or -EINVAL with the message, or -errno.
 */
static int check_other_size(struct load *ld, int64_t i, const char *path, size_t len,
                            const char *sha256, int64_t size)
{
	static const char sql[] = "SELECT size FROM node WHERE sha256 = ?1 AND size <> ?2 LIMIT 1";
	sqlite3_stmt *st = NULL;
	int rc = 0;

	/* Made at the first confirmation: a manifest crafted to collide in 64 bits again and
	 * again would otherwise cost a scan of the table for each entry. */
	if (!ld->sha256_indexed)
		rc = index_db_errno(sqlite3_exec(
		    ld->idx->db, "CREATE INDEX IF NOT EXISTS node_sha256 ON node(sha256)", NULL,
		    NULL, NULL));
	ld->sha256_indexed = rc == 0;
	if (rc == 0)
		rc = index_db_errno(sqlite3_prepare_v2(ld->idx->db, sql, -1, &st, NULL));

	if (rc == 0)
		rc = index_db_errno(sqlite3_bind_text(st, 1, sha256, -1, SQLITE_STATIC));
	if (rc == 0)
		rc = index_db_errno(sqlite3_bind_int64(st, 2, size));
	if (rc == 0) {
		int step = sqlite3_step(st);
		if (step == SQLITE_ROW)
			rc = entry_error(ld, i, path, len,
			                 "another entry has the same sha256 and size %lld",
			                 (long long)sqlite3_column_int64(st, 0));
		else if (step != SQLITE_DONE)
			rc = index_db_errno(step);
	}
	sqlite3_finalize(st);
	return rc;
}

static bool is_type(const struct field *f, const char *type)
{
	return f->seen && strcmp(f->type, type) == 0;
}

/* Checks a gathered entry and loads it. */
static int load_entry(struct load *ld, const struct entry *e)
{
	const struct field *fp = &e->f[F_PATH], *fz = &e->f[F_SIZE], *fs = &e->f[F_SHA256];
	const struct field *fu = &e->f[F_URL], *fm = &e->f[F_MTIME], *fx = &e->f[F_EXECUTABLE];
	const struct field *fe = &e->f[F_ETAG];
	const char *path = fp->text, *bad;
	size_t len = fp->len;
	char sha256[INDEX_SHA256_HEX + 1], why[256];
	char *url = NULL;
	int64_t i = e->i;
	int rc;

	if (!e->is_object)
		return entry_error(ld, i, NULL, 0, "entry is not an object");
	if (!fp->seen)
		return entry_error(ld, i, NULL, 0, "path is missing");
	if (!is_type(fp, "text"))
		return entry_error(ld, i, NULL, 0, "path is not a string");
	if (fp->has_nul)
		return entry_error(ld, i, path, strlen(path), "path contains a NUL byte");
	bad = check_path(path, len, why, sizeof(why));
	if (bad)
		return entry_error(ld, i, path, len, "%s", bad);

	if (!fz->seen)
		return entry_error(ld, i, path, len, "size is missing");
	/* json_type says "integer" for digits beyond int64 too; those are not sizes. */
	if (!fz->is_int64)
		return entry_error(ld, i, path, len, "size is not an integer");
	if (fz->i < 0)
		return entry_error(ld, i, path, len, "size is negative");

	if (fs->seen) {
		bool ok = is_type(fs, "text") && !fs->has_nul && fs->len == INDEX_SHA256_HEX;
		for (size_t k = 0; ok && k < INDEX_SHA256_HEX; k++)
			ok = is_hex((unsigned char)fs->text[k]);
		if (!ok)
			return entry_error(ld, i, path, len, "sha256 is not 64 hex digits");
		/* Flights are keyed by the digest: one spelling per object. */
		for (size_t k = 0; k < INDEX_SHA256_HEX; k++)
			sha256[k] = (char)(fs->text[k] | 0x20);
		sha256[INDEX_SHA256_HEX] = '\0';
		/* Nothing is fetched for an empty object, so nothing else would catch this. */
		if (fz->i == 0 && strcmp(sha256, EMPTY_SHA256) != 0)
			return entry_error(ld, i, path, len,
			                   "size is 0 but sha256 is not that of empty content");
	}
	if (fu->seen && !is_type(fu, "text"))
		return entry_error(ld, i, path, len, "url is not a string");
	if (fu->seen && fu->has_nul)
		return entry_error(ld, i, path, len, "url contains a NUL byte");
	/* "" would resolve to the manifest's own directory: surely a mistake. */
	if (fu->seen && fu->len == 0)
		return entry_error(ld, i, path, len, "url is empty");
	if (fm->seen && !fm->is_int64)
		return entry_error(ld, i, path, len, "mtime is not an integer");
	if (fx->seen && !is_type(fx, "true") && !is_type(fx, "false"))
		return entry_error(ld, i, path, len, "executable is not a boolean");
	if (fe->seen && !is_type(fe, "text"))
		return entry_error(ld, i, path, len, "etag is not a string");
	/* It goes into an If-Match header as it is: visible ASCII only, so no header can be
	 * injected, and short enough for the flight's copy. */
	if (fe->seen && fe->has_nul)
		return entry_error(ld, i, path, len, "etag contains a NUL byte");
	if (fe->seen && (fe->len == 0 || fe->len > INDEX_ETAG_MAX))
		return entry_error(ld, i, path, len, "etag must be 1 to %d characters",
		                   INDEX_ETAG_MAX);
	for (size_t k = 0; fe->seen && k < fe->len; k++)
		if (fe->text[k] < 0x21 || fe->text[k] > 0x7e)
			return entry_error(ld, i, path, len,
			                   "etag has a character that is not visible ASCII");

	if (fs->seen) {
		rc = digest_sizes_note(&ld->digests, sha256, fz->i);
		if (rc == 1)
			rc = check_other_size(ld, i, path, len, sha256, fz->i);
		if (rc < 0)
			return rc;
	}
	rc = resolve_url(ld, fu->seen ? fu->text : NULL, path, len, &url, why, sizeof(why));
	if (rc == -EINVAL)
		return entry_error(ld, i, path, len, "%s", why);
	if (rc < 0)
		return rc;
	const struct file_attrs attrs = {.size = fz->i,
	                                 .mtime = fm->seen ? fm->i : ld->idx->default_mtime,
	                                 .executable = is_type(fx, "true"),
	                                 .sha256 = fs->seen ? sha256 : NULL,
	                                 .url = url,
	                                 .etag = fe->seen ? fe->text : NULL};
	rc = add_file(ld, i, path, len, &attrs);
	free(url);
	return rc;
}

/* Walks st_each, gathering an entry's rows and loading it when the next entry starts. */
static int load_entries(struct load *ld)
{
	sqlite3_stmt *st = ld->st_each;
	struct entry e = {0};
	int rc = 0, step;

	while ((step = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t i = sqlite3_column_int64(st, 0);
		if (!e.active || i != e.i) {
			if (e.active) {
				rc = load_entry(ld, &e);
				if (rc < 0)
					goto out;
			}
			const char *type = (const char *)sqlite3_column_text(st, 1);
			entry_reset(&e, i, type && strcmp(type, "object") == 0);
		}
		rc = gather_field(ld, &e);
		if (rc < 0)
			goto out;
	}
	if (step != SQLITE_DONE) {
		rc = index_db_step_errno(step);
		goto out;
	}
	if (e.active)
		rc = load_entry(ld, &e);
out:
	if (sqlite3_reset(st) != SQLITE_OK && rc == 0)
		rc = -EIO;
	entry_free(&e);
	return rc;
}

/* Checks the manifest's outer shape: valid JSON, an object, version 1, "files" an array. */
static int check_top(struct load *ld)
{
	sqlite3_stmt *st = ld->st_top;
	int rc = sqlite3_step(st);

	if (rc != SQLITE_ROW) {
		rc = rc == SQLITE_DONE ? -EIO : index_db_step_errno(rc);
		goto out;
	}
	const char *top = (const char *)sqlite3_column_text(st, 1);
	const char *vtype = (const char *)sqlite3_column_text(st, 2);
	const char *vraw = (const char *)sqlite3_column_text(st, 4);
	const char *ftype = (const char *)sqlite3_column_text(st, 5);
	if (!sqlite3_column_int(st, 0)) {
		rc = load_error(ld, "manifest is not valid JSON");
	} else if (!top || strcmp(top, "object") != 0) {
		rc = load_error(ld, "manifest is not a JSON object");
	} else if (!vtype) {
		rc = load_error(ld, "unsupported manifest version (\"version\" is missing)");
	} else if (strcmp(vtype, "integer") != 0 || sqlite3_column_type(st, 3) != SQLITE_INTEGER ||
	           sqlite3_column_int64(st, 3) != MANIFEST_VERSION) {
		rc = load_error(ld, "unsupported manifest version %.40s (expected %d)",
		                vraw ? vraw : "?", MANIFEST_VERSION);
	} else if (!ftype) {
		rc = load_error(ld, "manifest has no \"files\"");
	} else if (strcmp(ftype, "array") != 0) {
		rc = load_error(ld, "manifest \"files\" is not an array");
	} else {
		rc = 0;
	}
out:
	if (sqlite3_reset(st) != SQLITE_OK && rc == 0)
		rc = -EIO;
	return rc;
}

static int check_empty_namespace(struct load *ld)
{
	sqlite3_stmt *st = NULL;
	int rc = index_db_errno(sqlite3_prepare_v2(
	    ld->idx->db, "SELECT EXISTS(SELECT 1 FROM node WHERE ino <> 1)", -1, &st, NULL));

	if (rc < 0)
		goto out;
	rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		rc = rc == SQLITE_DONE ? -EIO : index_db_step_errno(rc);
		goto out;
	}
	rc = sqlite3_column_int(st, 0) ? -EBUSY : 0;
	if (rc < 0)
		load_error(ld, "the namespace is already loaded");
out:
	sqlite3_finalize(st);
	return rc;
}

static int update_dir_mtimes(struct load *ld)
{
	int rc = 0;

	for (size_t k = 0; rc == 0 && k < ld->pt.n; k++) {
		const struct path_node *p = &ld->pt.v[k];
		if (!p->is_dir || p->mtime == 0)
			continue;
		rc = index_db_bind_int64(ld->st_mtime, ":mtime", p->mtime);
		if (rc == 0)
			rc = index_db_bind_int64(ld->st_mtime, ":ino", p->ino);
		if (rc == 0)
			rc = index_db_exec(ld->st_mtime);
	}
	return rc;
}

static int prepare_load(struct load *ld)
{
	sqlite3 *db = ld->idx->db;
	int rc = index_db_errno(sqlite3_prepare_v2(db, top_sql, -1, &ld->st_top, NULL));

	if (rc == 0)
		rc = index_db_errno(sqlite3_prepare_v2(db, each_sql, -1, &ld->st_each, NULL));
	if (rc == 0)
		rc = index_db_errno(sqlite3_prepare_v2(db, ins_sql, -1, &ld->st_ins, NULL));
	if (rc == 0)
		rc = index_db_errno(sqlite3_prepare_v2(db, mtime_sql, -1, &ld->st_mtime, NULL));
	if (rc < 0)
		return rc;
	/* sqlite copies a text value that it does not know to be NUL-terminated each time a
	 * JSON function reads it (15 MB per call for 100,000 entries); a bound C string is read
	 * in place. ld->json outlives both statements. */
	rc = index_db_bind_text(ld->st_top, ":json", ld->json, -1);
	if (rc == 0)
		rc = index_db_bind_text(ld->st_each, ":json", ld->json, -1);
	if (rc == 0)
		rc = index_db_bind_int64(ld->st_each, ":has_nul",
		                         raw_has_nul((const unsigned char *)ld->json));
	return rc;
}

/* Asks resolve_url (curl, while base_dir is still NULL) where a plain reference lands, so
 * that its shortcut is curl's own answer. Leaves base_dir NULL (no shortcut) when the base
 * cannot resolve one or curl does not simply append. Fails only with -ENOMEM. */
static int set_base_dir(struct load *ld)
{
	char *probe = NULL, why[160];
	int rc = resolve_url(ld, "x", NULL, 0, &probe, why, sizeof(why));
	size_t len = probe ? strlen(probe) : 0;

	if (rc == 0 && len >= 2 && probe[len - 2] == '/' && probe[len - 1] == 'x') {
		probe[len - 1] = '\0';
		ld->base_dir = probe;
		ld->base_dir_len = len - 1;
		return 0;
	}
	free(probe);
	return rc == -ENOMEM ? rc : 0;
}

static int set_base(struct load *ld, const char *base_url)
{
	CURLUcode uc;

	ld->file_urls_allowed = !base_url || strncasecmp(base_url, "file:", 5) == 0;
	if (!base_url)
		return 0;
	ld->base = curl_url();
	if (!ld->base)
		return -ENOMEM;
	uc = curl_url_set(ld->base, CURLUPART_URL, base_url, 0);
	if (uc == CURLUE_OUT_OF_MEMORY)
		return -ENOMEM;
	if (uc != CURLUE_OK)
		return load_error(ld, "base URL \"%.200s\" is not a valid URL (%s)", base_url,
		                  curl_url_strerror(uc));
	return set_base_dir(ld);
}

/* json[json_len] is '\0' when `terminated`; otherwise the text is copied to make it so. */
static int load_manifest(struct index *idx, const char *json, size_t json_len, bool terminated,
                         const char *base_url, char *err, size_t err_len)
{
	struct load ld = {.idx = idx, .err = err, .err_len = err_len};
	bool began = false;
	long root;
	int rc;

	if (err && err_len)
		err[0] = '\0';
	pthread_mutex_lock(&idx->lock);
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
	rc = set_base(&ld, base_url);
	if (rc < 0)
		goto out;
	rc = index_begin(idx);
	if (rc < 0)
		goto out;
	began = true;
	rc = check_empty_namespace(&ld);
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
	rc = check_top(&ld);
	if (rc < 0)
		goto out;
	rc = path_table_init(&ld.pt);
	if (rc == 0)
		rc = digest_sizes_init(&ld.digests);
	if (rc < 0)
		goto out;
	root =
	    path_table_add(&ld.pt, "", 0, path_table_hash(&ld.pt, "", 0), INDEX_ROOT_INO, true, 0);
	if (root < 0) {
		rc = (int)root;
		goto out;
	}
	rc = load_entries(&ld);
	if (rc < 0)
		goto out;
	rc = update_dir_mtimes(&ld);
	if (rc < 0)
		goto out;
	rc = index_namespace_indexes(idx);
	if (rc < 0)
		goto out;
	rc = index_commit(idx);
	if (rc < 0)
		goto out;
	idx->total_files = ld.files;
	idx->total_dirs = ld.dirs + 1; /* the root */
	idx->total_bytes = ld.bytes;
	idx->totals_valid = true;
out:
	if (rc < 0 && began)
		index_rollback(idx);
	if (rc < 0 && rc != -EINVAL && rc != -EBUSY && err && err_len && !err[0]) {
		char buf[64];
		snprintf(err, err_len, "cannot load the manifest: %s",
		         strerror_r(-rc, buf, sizeof(buf)));
	}
	sqlite3_finalize(ld.st_top);
	sqlite3_finalize(ld.st_each);
	sqlite3_finalize(ld.st_ins);
	sqlite3_finalize(ld.st_mtime);
	curl_url_cleanup(ld.base);
	free(ld.base_dir);
	free(ld.json_copy);
	path_table_free(&ld.pt);
	digest_sizes_free(&ld.digests);
	pthread_mutex_unlock(&idx->lock);
	return rc;
}

int index_load_manifest(struct index *idx, const char *json, size_t json_len, const char *base_url,
                        char *err, size_t err_len)
{
	return load_manifest(idx, json, json_len, false, base_url, err, err_len);
}

int index_load_manifest_text(struct index *idx, const char *text, size_t len, const char *base_url,
                             char *err, size_t err_len)
{
	return load_manifest(idx, text, len, true, base_url, err, err_len);
}

/*
 * `spoolfs verify SOURCE`: checks that every object a manifest names is where its URL says,
 * with its size (one listing of an S3 prefix; a stat in a local OUT_DIR), and with --deep
 * that its bytes hash to its sha256. Nested manifests are read and checked in turn. Prints
 * each object missing or wrong, one line each, and a summary line; exit status 1 if any.
 *
 * The manifest's object references are read with sqlite's JSON functions into an in-memory
 * table, one row per URL: an object named by many entries (a pack, a shared file) is
 * checked once. Single-threaded; nothing is shared.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/evp.h>
#include <sqlite3.h>

#include "fetch/http/net.h"
#include "publish/publish_i.h"

/* A manifest larger than this is refused, as a mount refuses it. */
#define MANIFEST_MAX (512u << 20)

/*
 * Every object a manifest names: files with a url (or, in version 1, at their path), chunk
 * hash lists (their size: 32 bytes per chunk of the file, 36 when the file is compressed),
 * nested manifests and packs. A compressed object (version 3's "stored") is checked as it
 * is stored: its stored size and the sha256 of its stored bytes, which names it; nothing is
 * decompressed.
 */
static const char collect_sql[] =
    "INSERT OR IGNORE INTO obj(url, size, sha256, nested)"
    " SELECT coalesce(json_extract(e.value, '$.url'), json_extract(e.value, '$.path')),"
    "  coalesce(json_extract(e.value, '$.stored.size'), json_extract(e.value, '$.size')),"
    "  coalesce(json_extract(e.value, '$.stored.sha256'), json_extract(e.value, '$.sha256')),"
    "  0 FROM json_each(?1, '$.entries') e"
    "  WHERE coalesce(json_extract(e.value, '$.type'), 'file') = 'file'"
    "   AND json_type(e.value, '$.pack') IS NULL"
    " UNION ALL SELECT json_extract(e.value, '$.chunks.url'),"
    "  (json_extract(e.value, '$.size') + json_extract(e.value, '$.chunks.size') - 1)"
    "   / json_extract(e.value, '$.chunks.size')"
    "   * (CASE WHEN json_type(e.value, '$.stored') = 'object' THEN 36 ELSE 32 END),"
    "  json_extract(e.value, '$.chunks.sha256'), 0"
    "  FROM json_each(?1, '$.entries') e WHERE json_type(e.value, '$.chunks.url') = 'text'"
    " UNION ALL SELECT json_extract(e.value, '$.manifest.url'),"
    "  json_extract(e.value, '$.manifest.size'), json_extract(e.value, '$.manifest.sha256'), 1"
    "  FROM json_each(?1, '$.entries') e WHERE json_type(e.value, '$.manifest.url') = 'text'"
    " UNION ALL SELECT json_extract(p.value, '$.url'),"
    "  coalesce(json_extract(p.value, '$.stored.size'), json_extract(p.value, '$.size')),"
    "  coalesce(json_extract(p.value, '$.stored.sha256'), json_extract(p.value, '$.sha256')),"
    "  0 FROM json_each(?1, '$.packs') p";

struct vfy {
	bool deep;
	const char *where; /* the manifest's directory or prefix, for messages */
	/* Local: the manifest's directory, every URL opened beneath it. */
	int dir_fd;
	/* S3: the store and what its prefix holds. */
	struct pub_s3 s3;
	struct pub_s3_list have;
	bool is_s3;
	/* HTTP(S): the manifest URL's directory ("https://host/rel/"), one handle reused so
	 * that HEADs share a connection. */
	char *base;
	CURL *http;
	struct fetch_net_guard guard;
	sqlite3 *db;
	size_t checked, missing, wrong, unchecked;
	/* gc: refuses a manifest text it does not fully know (NULL: verify takes any). */
	int (*vet)(const char *where, const char *name, const char *text, size_t len);
};

/* Bytes of an object, hashed as they come, kept too for a nested manifest. */
struct sink {
	EVP_MD_CTX *md;
	uint64_t n;
	char *keep; /* NULL: not kept */
	size_t cap;
	bool too_big;
};

static size_t on_bytes(char *data, size_t size, size_t nmemb, void *ctx)
{
	struct sink *k = ctx;
	size_t len = size * nmemb;

	if (k->md && EVP_DigestUpdate(k->md, data, len) != 1)
		return 0;
	if (k->cap) {
		if (k->n + len > k->cap) {
			k->too_big = true;
			return 0;
		}
		memcpy(k->keep + k->n, data, len);
	}
	k->n += len;
	return len;
}

/* A relative URL without "..", "." or empty segments: a key under the prefix, a path
 * beneath the directory. Anything else is not checked here. */
bool pub_plain_relative(const char *url)
{
	const char *p = url;

	if (!*url || strchr(url, ':') || strchr(url, '?') || strchr(url, '#') || *url == '/')
		return false;
	while (*p) {
		size_t n = strcspn(p, "/");
		if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return false;
		p += n + (p[n] == '/');
	}
	return url[strlen(url) - 1] != '/';
}

/*
 * A GET (sink set) or HEAD of url under v->base: the status, or 0 with why set. *size gets
 * a HEAD's Content-Length (-1 when none).
 */
static long http_call(struct vfy *v, const char *url, struct sink *k, int64_t *size, char *why,
                      size_t cap)
{
	char *full = NULL, errbuf[CURL_ERROR_SIZE] = "";
	curl_off_t len = -1;
	long code = 0;
	CURLcode res;

	if (asprintf(&full, "%s%s", v->base, url) < 0) {
		snprintf(why, cap, "%s", strerror(ENOMEM));
		return 0;
	}
	curl_easy_setopt(v->http, CURLOPT_URL, full);
	curl_easy_setopt(v->http, CURLOPT_NOBODY, k ? 0L : 1L);
	curl_easy_setopt(v->http, CURLOPT_HTTPGET, k ? 1L : 0L);
	curl_easy_setopt(v->http, CURLOPT_WRITEFUNCTION, on_bytes);
	curl_easy_setopt(v->http, CURLOPT_WRITEDATA, k);
	curl_easy_setopt(v->http, CURLOPT_ERRORBUFFER, errbuf);
	/* The body of an error answer is not the object's. */
	curl_easy_setopt(v->http, CURLOPT_FAILONERROR, 1L);
	res = curl_easy_perform(v->http);
	curl_easy_getinfo(v->http, CURLINFO_RESPONSE_CODE, &code);
	curl_easy_getinfo(v->http, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
	if (size)
		*size = len;
	if (res != CURLE_OK && !(res == CURLE_HTTP_RETURNED_ERROR && code)) {
		snprintf(why, cap, "%s",
		         v->guard.refused ? v->guard.why
		         : errbuf[0]      ? errbuf
		                          : curl_easy_strerror(res));
		code = 0;
	} else if (code / 100 != 2) {
		snprintf(why, cap, "HTTP %ld", code);
	}
	free(full);
	return code;
}

/* Reads url's bytes into k (hashing, keeping). 0, -ENOENT, or -EIO with why. */
static int fetch(struct vfy *v, const char *url, struct sink *k, char *why, size_t cap)
{
	unsigned char buf[1 << 16];
	ssize_t n;
	int fd;

	if (v->base) {
		long code = http_call(v, url, k, NULL, why, cap);
		if (code == 404 || code == 410)
			return -ENOENT;
		if (k->too_big)
			snprintf(why, cap, "larger than %u bytes", MANIFEST_MAX);
		return code / 100 == 2 && !k->too_big ? 0 : -EIO;
	}
	if (v->is_s3) {
		long code = pub_s3_get(&v->s3, url, on_bytes, k, why, cap);
		if (code == 404)
			return -ENOENT;
		if (k->too_big)
			snprintf(why, cap, "larger than %u bytes", MANIFEST_MAX);
		return code / 100 == 2 && !k->too_big ? 0 : -EIO;
	}
	fd = pub_open_beneath(v->dir_fd, url, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(why, cap, "%s", pub_beneath_why(fd));
		return fd == -ENOENT ? -ENOENT : -EIO;
	}
	while ((n = read(fd, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR))
		if (n > 0 && on_bytes((char *)buf, 1, (size_t)n, k) != (size_t)n)
			break;
	snprintf(why, cap, "%s", n < 0 ? strerror(errno) : "larger than a manifest may be");
	close(fd);
	return n == 0 ? 0 : -EIO;
}

/* Its size as the store or directory has it, or -1 when missing. */
static int64_t size_of(struct vfy *v, const char *url)
{
	struct stat sb;
	int fd;

	if (v->is_s3)
		return pub_s3_list_size(&v->have, url);
	if (v->base) {
		char why[300];
		int64_t size = -1;
		long code = http_call(v, url, NULL, &size, why, sizeof(why));
		/* A server that names no length: its bytes will say (checked with --deep). */
		return code / 100 == 2 ? (size >= 0 ? size : INT64_MAX) : -1;
	}
	fd = pub_open_beneath(v->dir_fd, url, O_PATH | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
		sb.st_size = -1;
	close(fd);
	return sb.st_size;
}

static void say(struct vfy *v, const char *url, const char *why)
{
	printf("%s%s%s: %s\n", v->where, v->base ? "" : "/", url, why);
}

/* Adds the objects of the manifest text to the table. 0 or -EINVAL said. */
static int collect(struct vfy *v, const char *name, const char *text, size_t len)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(v->db, collect_sql, -1, &st, NULL);

	if (v->vet && v->vet(v->where, name, text, len) != 0) {
		sqlite3_finalize(st);
		return -EINVAL;
	}
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_text(st, 1, text, (int)len, SQLITE_STATIC);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		fprintf(stderr, "spoolfs verify: %s%s%s: not a manifest: %s\n", v->where,
		        v->base ? "" : "/", name, sqlite3_errmsg(v->db));
		return -EINVAL;
	}
	return 0;
}

/* Checks one object; a nested manifest that is right is read for its objects too. */
static int check(struct vfy *v, const char *url, int64_t size, const char *sha256, bool nested)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	char hex[2 * EVP_MAX_MD_SIZE + 1], why[700] = "", line[800];
	struct sink k = {0};
	unsigned mdlen = 0;
	int64_t have;
	int rc = 0;

	if (!pub_plain_relative(url)) {
		v->unchecked++;
		return 0;
	}
	v->checked++;
	have = size_of(v, url);
	if (have < 0) {
		v->missing++;
		say(v, url, "missing");
		return 0;
	}
	if (size >= 0 && have != size && have != INT64_MAX) {
		v->wrong++;
		snprintf(line, sizeof(line), "%" PRId64 " bytes, not %" PRId64, have, size);
		say(v, url, line);
		return 0;
	}
	if (!nested && (!v->deep || !sha256))
		return 0;
	k.md = EVP_MD_CTX_new();
	if (nested) {
		k.cap = (size_t)have < MANIFEST_MAX ? (size_t)have : MANIFEST_MAX;
		k.keep = malloc(k.cap + 1);
	}
	if (!k.md || (nested && !k.keep) || EVP_DigestInit_ex(k.md, EVP_sha256(), NULL) != 1) {
		rc = -ENOMEM;
		goto out;
	}
	rc = fetch(v, url, &k, why, sizeof(why));
	if (rc == -ENOENT) {
		v->missing++;
		say(v, url, "missing");
		rc = 0;
		goto out;
	}
	if (rc) {
		v->wrong++;
		say(v, url, why);
		rc = 0;
		goto out;
	}
	EVP_DigestFinal_ex(k.md, md, &mdlen);
	for (unsigned i = 0; i < mdlen; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	if (sha256 && strcasecmp(hex, sha256) != 0) {
		v->wrong++;
		say(v, url, "its bytes do not hash to its sha256");
		goto out;
	}
	if (nested)
		rc = collect(v, url, k.keep, (size_t)k.n);
out:
	EVP_MD_CTX_free(k.md);
	free(k.keep);
	return rc;
}

/* Checks every object in the table, the rows nested manifests add included. */
static int check_all(struct vfy *v)
{
	sqlite3_int64 last = 0;
	int rc = 0;

	for (;;) {
		sqlite3_stmt *st = NULL;
		char *url = NULL, *sha = NULL;
		int64_t size;
		bool nested, row;
		if (sqlite3_prepare_v2(
		        v->db,
		        "SELECT rowid, url, coalesce(size, -1), sha256, nested FROM obj"
		        " WHERE rowid > ?1 AND typeof(url) = 'text' ORDER BY rowid"
		        " LIMIT 1",
		        -1, &st, NULL) != SQLITE_OK)
			return -ENOMEM;
		sqlite3_bind_int64(st, 1, last);
		row = sqlite3_step(st) == SQLITE_ROW;
		if (row) {
			last = sqlite3_column_int64(st, 0);
			url = strdup((const char *)sqlite3_column_text(st, 1));
			size = sqlite3_column_int64(st, 2);
			sha = sqlite3_column_type(st, 3) == SQLITE_TEXT
			          ? strdup((const char *)sqlite3_column_text(st, 3))
			          : NULL;
			nested = sqlite3_column_int(st, 4) != 0;
		}
		sqlite3_finalize(st);
		if (row && url)
			rc = check(v, url, size, sha, nested);
		else if (row)
			rc = -ENOMEM;
		free(url);
		free(sha);
		if (!row || rc)
			return rc;
	}
}

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: spoolfs verify SOURCE [--manifest NAME] [--deep] [--endpoint URL]\n"
	        "                      [--region R] [--profile NAME] [--role-arn ARN]\n"
	        "                      [--path-style]\n"
	        "\n"
	        "Checks that every object the manifest names is there with its size; with\n"
	        "--deep, that its bytes hash to its sha256 too. SOURCE: an OUT_DIR or a\n"
	        "manifest file, a manifest's http(s):// URL (a HEAD per object), or\n"
	        "s3://BUCKET[/PREFIX] (one listing; its manifest: --manifest, default\n"
	        "manifest.json). Prints what is missing or wrong; exit status 1 if anything is.\n");
}

/* Reads the top manifest into the table. 0 or -errno, said. */
static int load_top(struct vfy *v, const char *name)
{
	struct sink k = {.cap = MANIFEST_MAX};
	char why[700] = "";
	int rc;

	k.keep = malloc(MANIFEST_MAX);
	if (!k.keep)
		return -ENOMEM;
	rc = fetch(v, name, &k, why, sizeof(why));
	if (rc)
		fprintf(stderr, "spoolfs verify: %s%s%s: %s\n", v->where, v->base ? "" : "/", name,
		        rc == -ENOENT ? "no such manifest" : why);
	else
		rc = collect(v, name, k.keep, (size_t)k.n);
	free(k.keep);
	return rc;
}

int publish_verify_main(int argc, char **argv)
{
	static const struct option own[] = {
	    {"manifest", required_argument, NULL, 'm'},
	    {"deep", no_argument, NULL, 'd'},
	    {"help", no_argument, NULL, 'h'},
	};
	struct option longs[sizeof(own) / sizeof(own[0]) + PUB_S3_STORE_OPTIONS + 1];
	struct publish_s3_options so = {0};
	struct vfy v = {.dir_fd = -1};
	const char *name = "manifest.json", *source;
	char *copy = NULL;
	struct stat sb;
	int c, rc;

	pub_s3_longs(own, sizeof(own) / sizeof(own[0]), longs);
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
		if (c == 'm')
			name = optarg;
		else if (c == 'd')
			v.deep = true;
		else if (c == 'h')
			return usage(stdout), 0;
		else if (c == '?' || pub_s3_option(&so, c, optarg) != 0)
			return usage(stderr), 2;
	}
	if (argc - optind != 1)
		return usage(stderr), 2;
	source = argv[optind];
	v.is_s3 = strncmp(source, "s3://", 5) == 0;
	if (!v.is_s3 && so.given) {
		fprintf(stderr, "spoolfs verify: --endpoint, --region, --profile, --role-arn and"
		                " --path-style are for an s3:// SOURCE\n");
		return 2;
	}
	if (v.is_s3) {
		rc = pub_s3_open(&so, source, &v.s3);
		if (rc == 0)
			rc = pub_s3_list(&v.s3, "", &v.have);
		v.where = v.s3.display;
	} else if (strncmp(source, "http://", 7) == 0 || strncmp(source, "https://", 8) == 0) {
		/* A manifest URL: its objects' URLs are relative to its directory. */
		const char *slash = strrchr(source + 8, '/');
		static const struct fetch_net net = {.connect_timeout_s = 10,
		                                     .stall_timeout_s = 30};
		rc = -ENOMEM;
		if (slash && slash[1] && (copy = strdup(source)) &&
		    (v.base = strndup(source, (size_t)(slash - source) + 1)) &&
		    curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK &&
		    (v.http = curl_easy_init())) {
			name = copy + (slash - source) + 1;
			v.where = v.base;
			fetch_net_apply(v.http, &net, &v.guard);
			curl_easy_setopt(v.http, CURLOPT_PROTOCOLS_STR, "http,https");
			curl_easy_setopt(v.http, CURLOPT_NOSIGNAL, 1L);
			rc = 0;
		} else if (!slash || !slash[1]) {
			fprintf(stderr, "spoolfs verify: %s: give the manifest's URL\n", source);
			rc = -EINVAL;
		}
	} else if (stat(source, &sb) != 0) {
		rc = -errno;
		fprintf(stderr, "spoolfs verify: %s: %s\n", source, strerror(-rc));
	} else {
		/* A manifest file: its directory is where its URLs lead. */
		if (!S_ISDIR(sb.st_mode) && (copy = strdup(source))) {
			char *slash = strrchr(copy, '/');
			name = slash ? slash + 1 : copy;
			if (slash)
				*slash = '\0';
			v.where = slash ? (slash == copy ? "/" : copy) : ".";
		} else {
			v.where = source;
		}
		v.dir_fd = open(v.where, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		rc = v.dir_fd < 0 ? -errno : 0;
		if (rc)
			fprintf(stderr, "spoolfs verify: %s: %s\n", v.where, strerror(-rc));
	}
	if (rc == 0 &&
	    (sqlite3_open(":memory:", &v.db) != SQLITE_OK ||
	     sqlite3_exec(v.db, "CREATE TABLE obj(url PRIMARY KEY, size, sha256, nested)", NULL,
	                  NULL, NULL) != SQLITE_OK))
		rc = -ENOMEM;
	if (rc == 0)
		rc = load_top(&v, name);
	if (rc == 0)
		rc = check_all(&v);
	if (rc == 0)
		printf("spoolfs verify: %s%s%s: %zu objects checked%s, %zu missing, %zu wrong%s\n",
		       v.where, v.base ? "" : "/", name, v.checked, v.deep ? " (hashed)" : "",
		       v.missing, v.wrong,
		       v.unchecked ? "; some URLs lead elsewhere and were not checked" : "");
	sqlite3_close(v.db);
	if (v.http) {
		curl_easy_cleanup(v.http);
		curl_global_cleanup();
	}
	free(v.base);
	pub_s3_list_free(&v.have);
	pub_s3_close(&v.s3);
	if (v.dir_fd >= 0)
		close(v.dir_fd);
	free(copy);
	return rc ? 1 : v.missing || v.wrong ? 1 : 0;
}

int pub_verify_mark(const struct pub_mark *m)
{
	struct vfy v = {.dir_fd = m->dir_fd, .where = m->where, .db = m->db, .vet = m->vet};
	int rc = 0;

	if (m->s3) {
		v.is_s3 = true;
		v.s3 = *m->s3; /* borrowed: never closed here */
		v.have = *m->have;
	}
	for (size_t i = 0; i < m->n_names && rc == 0; i++)
		rc = load_top(&v, m->names[i]);
	if (rc == 0)
		rc = check_all(&v);
	return rc ? rc : v.missing || v.wrong ? -EIO : 0;
}

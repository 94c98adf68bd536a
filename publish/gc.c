/*
 * `spoolfs gc OUT_DIR|s3://BUCKET[/PREFIX]`: deletes the objects no kept manifest reaches.
 *
 * Mark: the top-level *.json keys are the manifests (each must be a manifest this binary
 * knows entirely, or nothing is deleted); those kept (all, or what --keep-last,
 * --keep-newer-than and --keep choose), and every dropped one younger than the grace, are
 * walked with verify's walk (verify.c: packs, chunk lists, nested manifests) into a table
 * of reachable URLs. Sweep: the keys under objects/ it does not hold, older than --grace.
 * Just before deleting, the store is listed again: a manifest written meanwhile (or one
 * rewritten) is walked too and keeps its objects, and an object's age is taken from this
 * second listing, so one that a publish refreshed meanwhile (PUB_REFRESH_AGE) stays.
 * Release tags (every other top-level key; fetch/source/tag_pointer.h) keep the manifest
 * they name, in both listings, whatever --keep-* say; a top-level key gc cannot account
 * for as a manifest or a tag stops it, as an unreadable manifest does.
 * Single-threaded; nothing is shared.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "fetch/source/tag_pointer.h"
#include "publish/gc_i.h"
#include "util/hex.h"

#define MANIFEST_MAX (512u << 20)
#define DAY (24 * 3600)

/* The fields of manifest versions 2 and 3 (doc/manifest.md; 3 adds "stored" on files and
 * packs). A manifest with any other field is refused: a field this binary does not know
 * might name objects it would not keep. */
/* Entries and packs, each with its name for a message (w) and its JSON (v). */
#define STORED_OWNERS                                                                              \
	"(SELECT 'entries[' || e.key || ']' AS w, e.value AS v FROM json_each(?1, '$.entries') e"  \
	" UNION ALL SELECT 'packs[' || p.key || ']', p.value FROM json_each(?1, '$.packs') p) s"
static const char vet_sql[] =
    "SELECT CASE"
    " WHEN json_type(?1) IS NOT 'object' THEN 'not a JSON object'"
    " WHEN json_type(?1, '$.version') IS NOT 'integer'"
    "  OR json_type(?1, '$.entries') IS NOT 'array'"
    "  THEN 'not a manifest (no integer \"version\" and \"entries\" list)'"
    " WHEN json_extract(?1, '$.version') NOT IN (2, 3)"
    "  THEN 'manifest version ' || json_extract(?1, '$.version') || ', which gc does not know'"
    " WHEN coalesce(json_type(?1, '$.packs'), 'array') != 'array'"
    "  THEN '\"packs\" is not a list'"
    " ELSE coalesce("
    "  (SELECT 'a field it does not know: \"' || key || '\"' FROM json_each(?1)"
    "   WHERE key NOT IN ('version', 'packs', 'entries', 'read_orders') LIMIT 1),"
    "  (SELECT 'entries[' || e.key || '] is not an object' FROM json_each(?1, '$.entries') e"
    "   WHERE e.type != 'object' LIMIT 1),"
    "  (SELECT 'packs[' || p.key || '] is not an object' FROM json_each(?1, '$.packs') p"
    "   WHERE p.type != 'object' LIMIT 1),"
    "  (SELECT 'entries[' || e.key || '] has a field it does not know: \"' || f.key || '\"'"
    "   FROM json_each(?1, '$.entries') e, json_each(e.value) f"
    "   WHERE f.key NOT IN ('path', 'type', 'size', 'sha256', 'url', 'pack', 'offset',"
    "    'mode', 'mtime', 'target', 'chunks', 'manifest', 'executable', 'etag', 'stored')"
    "   LIMIT 1),"
    "  (SELECT 'packs[' || p.key || '] has a field it does not know: \"' || f.key || '\"'"
    "   FROM json_each(?1, '$.packs') p, json_each(p.value) f"
    "   WHERE f.key NOT IN ('sha256', 'size', 'url', 'stored') LIMIT 1),"
    /* "stored": version 3 only, an object of its five fields. */
    "  (SELECT s.w || '.stored in a version 2 manifest' FROM " STORED_OWNERS
    "   WHERE json_type(s.v, '$.stored') IS NOT NULL"
    "    AND json_extract(?1, '$.version') = 2 LIMIT 1),"
    "  (SELECT s.w || '.stored is not an object' FROM " STORED_OWNERS
    "   WHERE coalesce(json_type(s.v, '$.stored'), 'object') != 'object' LIMIT 1),"
    "  (SELECT s.w || '.stored has a field it does not know: \"' || f.key || '\"' "
    "FROM " STORED_OWNERS
    ", json_each(s.v, '$.stored') f WHERE json_type(s.v, '$.stored') = 'object'"
    "    AND f.key NOT IN ('encoding', 'size', 'sha256', 'frame', 'frames') LIMIT 1),"
    "  (SELECT 'entries[' || e.key || '].' || s.k || ' has a field it does not know: \"'"
    "   || f.key || '\"' FROM json_each(?1, '$.entries') e,"
    "   (SELECT 'chunks' AS k UNION ALL SELECT 'manifest') s,"
    "   json_each(e.value, '$.' || s.k) f"
    "   WHERE json_type(e.value, '$.' || s.k) = 'object'"
    "    AND f.key NOT IN ('sha256', 'size', 'url') LIMIT 1),"
    "  (SELECT 'entries[' || e.key || '].' || s.k || ' is not an object'"
    "   FROM json_each(?1, '$.entries') e,"
    "   (SELECT 'chunks' AS k UNION ALL SELECT 'manifest') s"
    "   WHERE coalesce(json_type(e.value, '$.' || s.k), 'object') != 'object' LIMIT 1))"
    " END";

struct gc {
	struct gc_store g;
	struct pub_s3 s3;
	sqlite3 *db;
	int64_t now, grace;
	bool dry_run;
	bool keep_all;
	unsigned long keep_last;
	int64_t keep_newer; /* seconds; -1: not given */
	char **keep_names;
	size_t n_keep_names;
	bool said_tags; /* --dry-run: the tags were shown (the first listing's) */
};

/* A manifest of the store: its key, its age, whether it is kept, walked, deleted, and
 * whether a release tag names it (then kept, whatever --keep-* say). */
struct man {
	const char *key;
	int64_t mtime;
	uint64_t size;
	char sha256[UTIL_SHA256_HEX_LEN];
	bool keep, mark, drop, tagged;
};

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: spoolfs gc OUT_DIR|s3://BUCKET[/PREFIX] [--keep-last N]\n"
	    "                  [--keep-newer-than DURATION] [--keep NAME]... [--grace DURATION]\n"
	    "                  [--dry-run] [--endpoint URL] [--region R] [--profile NAME]\n"
	    "                  [--role-arn ARN] [--path-style]\n"
	    "\n"
	    "Deletes the objects under objects/ that no kept manifest (the top-level *.json)\n"
	    "reaches and that are older than --grace (default 24h), and the dropped manifests\n"
	    "older than it. Without --keep-*, every manifest is kept. DURATION: a number with\n"
	    "s, m, h, d or w (seconds without one). --grace 0 is for tests: a mount that\n"
	    "began before a release was dropped may lose objects it needs. What a release tag\n"
	    "(publish --tag: every other top-level file must be one) names is always kept;\n"
	    "tags are never deleted.\n");
}

/* "90", "30s", "15m", "24h", "7d", "2w": seconds, or -1. */
static int64_t parse_duration(const char *s)
{
	static const struct {
		char unit;
		int64_t secs;
	} units[] = {{'s', 1}, {'m', 60}, {'h', 3600}, {'d', DAY}, {'w', 7 * DAY}};
	char *end;
	unsigned long long n;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	n = strtoull(s, &end, 10);
	if (errno || n > (1ull << 40))
		return -1;
	if (!*end)
		return (int64_t)n;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (end[0] == units[i].unit && !end[1])
			return (int64_t)n * units[i].secs;
	return -1;
}

/* Bytes of one manifest, kept. */
struct text {
	char *p;
	size_t n;
	bool too_big;
};

static size_t on_text(char *data, size_t size, size_t nmemb, void *ctx)
{
	struct text *t = ctx;
	size_t len = size * nmemb;

	if (t->n + len > MANIFEST_MAX) {
		t->too_big = true;
		return 0;
	}
	memcpy(t->p + t->n, data, len);
	t->n += len;
	return len;
}

/* Reads key's text into t (t->p: MANIFEST_MAX bytes). 0, or -errno said. */
static int read_text(struct gc *c, const char *key, struct text *t)
{
	char why[700] = "";
	int rc = 0;

	t->n = 0;
	if (c->g.s3) {
		long code = pub_s3_get(c->g.s3, key, on_text, t, why, sizeof(why));
		if (code / 100 != 2 || t->too_big)
			rc = -EIO;
	} else {
		int fd = openat(c->g.dir_fd, key, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		ssize_t n = 0;
		if (fd < 0) {
			rc = -errno;
			snprintf(why, sizeof(why), "%s", strerror(errno));
		}
		while (fd >= 0 && (n = read(fd, t->p + t->n, MANIFEST_MAX - t->n)) > 0)
			t->n += (size_t)n;
		if (fd >= 0 && n < 0)
			snprintf(why, sizeof(why), "%s", strerror(errno));
		if (fd >= 0 && (n < 0 || t->n == MANIFEST_MAX))
			rc = -EIO;
		if (fd >= 0)
			close(fd);
	}
	if (t->too_big || (!c->g.s3 && t->n == MANIFEST_MAX))
		snprintf(why, sizeof(why), "larger than %u bytes", MANIFEST_MAX);
	if (rc)
		fprintf(stderr,
		        "spoolfs gc: %s/%s: cannot be read: %s: refusing to delete anything\n",
		        c->g.where, key, why);
	return rc;
}

/* The vet for verify's walk: 0 when text is a manifest gc knows wholly, else -EINVAL said.
 * vet_db: gc's database (set once before the walk; gc is single-threaded). */
static sqlite3 *vet_db;
static int vet(const char *where, const char *name, const char *text, size_t len)
{
	sqlite3_stmt *st = NULL;
	const char *why = NULL;
	char *copy = NULL;
	int rc = -EINVAL;

	if (sqlite3_prepare_v2(vet_db, vet_sql, -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_bind_text(st, 1, text, (int)len, SQLITE_STATIC) == SQLITE_OK) {
		int step = sqlite3_step(st);
		if (step == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_NULL)
			rc = 0;
		else if (step == SQLITE_ROW)
			why = copy = strdup((const char *)sqlite3_column_text(st, 0));
		else
			why = "not valid JSON";
	}
	if (rc)
		fprintf(stderr, "spoolfs gc: %s/%s: %s: refusing to delete anything\n", where, name,
		        why ? why : "out of memory");
	sqlite3_finalize(st);
	free(copy);
	return rc;
}

static bool is_manifest_key(const char *key)
{
	size_t n = strlen(key);

	return !strchr(key, '/') && key[0] != '.' && n > 5 && strcmp(key + n - 5, ".json") == 0;
}

/*
 * The release tags of listing l: every other top-level key (not a dot file, not *.json) must
 * be one, naming a manifest of m (n of them) that is there: it is kept (tagged). A key that
 * is no tag, a tag this binary cannot read, or one naming a manifest that is not there,
 * stops gc: it must never delete what it cannot account for. t: a buffer to read into.
 * 0, or -errno said.
 */
static int find_tags(struct gc *c, const struct pub_s3_list *l, struct man *m, size_t n,
                     struct text *t)
{
	struct source_tag tag;
	char why[512];
	int rc = 0;

	for (size_t i = 0; i < l->n && rc == 0; i++) {
		const char *key = l->v[i].key;
		size_t j = 0;
		/* "": the prefix's own "folder" marker, which a console may make. */
		if (!key[0] || strchr(key, '/') || key[0] == '.' || is_manifest_key(key))
			continue;
		rc = read_text(c, key, t);
		if (rc)
			break;
		rc = source_tag_parse(t->p, t->n, &tag, why, sizeof(why));
		if (rc == 0)
			snprintf(why, sizeof(why),
			         "neither a manifest (*.json) nor a release tag"
			         " (keep other files out of the top of the store)");
		if (rc <= 0) {
			fprintf(stderr, "spoolfs gc: %s/%s: %s: refusing to delete anything\n",
			        c->g.where, key, rc == -ENOMEM ? strerror(ENOMEM) : why);
			return rc ? rc : -EINVAL;
		}
		rc = 0;
		while (j < n && strcmp(m[j].key, tag.manifest) != 0)
			j++;
		if (j == n) {
			fprintf(stderr,
			        "spoolfs gc: %s/%s: the release tag names %s, which is not there:"
			        " refusing to delete anything\n",
			        c->g.where, key, tag.manifest);
			return -ENOENT;
		}
		m[j].tagged = true;
		/* Kept by name all the same: what it names now is what a mount may serve once
		 * the tag is written again. */
		if (strcmp(m[j].sha256, tag.sha256) != 0)
			fprintf(
			    stderr,
			    "spoolfs gc: warning: %s/%s: the release tag names %s with sha256 %s,"
			    " but it has sha256 %s now (a mount of the tag is refused)\n",
			    c->g.where, key, tag.manifest, tag.sha256, m[j].sha256);
		if (c->dry_run && !c->said_tags)
			printf("tag %s/%s: %s (kept)\n", c->g.where, key, tag.manifest);
	}
	c->said_tags = true;
	return rc;
}

/* The manifests of listing l, each read and vetted, and which of them tags name. 0, or
 * -errno said. */
static int find_manifests(struct gc *c, const struct pub_s3_list *l, struct man **out,
                          size_t *n_out)
{
	struct text t = {.p = malloc(MANIFEST_MAX)};
	struct man *m = calloc(l->n + 1, sizeof(*m));
	size_t n = 0;
	int rc = t.p && m ? 0 : -ENOMEM;

	for (size_t i = 0; i < l->n && rc == 0; i++) {
		if (!is_manifest_key(l->v[i].key))
			continue;
		m[n] =
		    (struct man){.key = l->v[i].key, .mtime = l->v[i].mtime, .size = l->v[i].size};
		rc = read_text(c, m[n].key, &t);
		if (rc == 0)
			rc = vet(c->g.where, m[n].key, t.p, t.n);
		if (rc == 0)
			rc = util_sha256_hex(t.p, t.n, m[n].sha256);
		n++;
	}
	if (rc == 0)
		rc = find_tags(c, l, m, n, &t);
	free(t.p);
	if (rc) {
		free(m);
		return rc;
	}
	*out = m;
	*n_out = n;
	return 0;
}

static int newest_first(const void *a, const void *b)
{
	const struct man *x = *(struct man *const *)a, *y = *(struct man *const *)b;

	return x->mtime != y->mtime ? (x->mtime < y->mtime ? 1 : -1) : strcmp(x->key, y->key);
}

/* Decides which manifests are kept, walked and deleted. 0, or -EINVAL said (a --keep
 * NAME that is no manifest). */
static int choose(struct gc *c, struct man *m, size_t n)
{
	struct man **by_age = calloc(n + 1, sizeof(*by_age));

	if (!by_age)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		by_age[i] = &m[i];
		m[i].keep = c->keep_all || m[i].tagged ||
		            (c->keep_newer >= 0 && m[i].mtime > c->now - c->keep_newer);
	}
	qsort(by_age, n, sizeof(*by_age), newest_first);
	for (size_t i = 0; i < n && i < c->keep_last; i++)
		by_age[i]->keep = true;
	free(by_age);
	for (size_t k = 0; k < c->n_keep_names; k++) {
		size_t i = 0;
		while (i < n && strcmp(m[i].key, c->keep_names[k]) != 0)
			i++;
		if (i == n) {
			fprintf(stderr, "spoolfs gc: %s/%s: --keep names no manifest there\n",
			        c->g.where, c->keep_names[k]);
			return -EINVAL;
		}
		m[i].keep = true;
	}
	/* A dropped manifest younger than the grace still keeps its objects: a mount of it
	 * may have begun just before it was dropped. */
	for (size_t i = 0; i < n; i++) {
		m[i].drop = !m[i].keep && m[i].mtime <= c->now - c->grace;
		m[i].mark = !m[i].drop;
	}
	return 0;
}

/* Walks the manifests marked in m from listing have into c->db. 0 or -errno said. */
static int mark(struct gc *c, const struct man *m, size_t n, const struct pub_s3_list *have)
{
	const char **names = calloc(n + 1, sizeof(*names));
	struct pub_mark pm = {.dir_fd = c->g.dir_fd,
	                      .s3 = c->g.s3,
	                      .have = have,
	                      .where = c->g.where,
	                      .names = names,
	                      .db = c->db,
	                      .vet = vet};
	sqlite3_stmt *st = NULL;
	int rc;

	if (!names)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		if (m[i].mark)
			names[pm.n_names++] = m[i].key;
	rc = pub_verify_mark(&pm);
	free(names);
	if (rc == -EIO)
		fprintf(stderr,
		        "spoolfs gc: %s: a kept manifest names objects that are missing or"
		        " wrong (above): refusing to delete anything\n",
		        c->g.where);
	if (rc)
		return rc;
	/* A URL that is not a plain key (./x, a/../b, an absolute one: this very bucket by
	 * another name, or a nested manifest verify's walk does not read) could name a key gc
	 * would not see kept. publish writes none. */
	if (sqlite3_prepare_v2(c->db, "SELECT url FROM obj WHERE typeof(url) = 'text'", -1, &st,
	                       NULL) != SQLITE_OK)
		return -ENOMEM;
	while (rc == 0 && sqlite3_step(st) == SQLITE_ROW) {
		const char *url = (const char *)sqlite3_column_text(st, 0);
		if (!pub_plain_relative(url)) {
			fprintf(stderr,
			        "spoolfs gc: %s: a kept manifest names \"%s\", not a plain key:"
			        " refusing to delete anything\n",
			        c->g.where, url);
			rc = -EINVAL;
		}
	}
	sqlite3_finalize(st);
	return rc;
}

static bool reachable(struct gc *c, const char *key)
{
	sqlite3_stmt *st = NULL;
	bool hit = true; /* on any doubt, kept */

	if (sqlite3_prepare_v2(c->db, "SELECT 1 FROM obj WHERE url = ?1", -1, &st, NULL) ==
	        SQLITE_OK &&
	    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC) == SQLITE_OK) {
		int step = sqlite3_step(st);
		hit = step != SQLITE_DONE;
	}
	sqlite3_finalize(st);
	return hit;
}

/*
 * Tests (tests/integration/test_gc.py): waits after the first mark, before the store is
 * listed again, until the FIFO named by SPOOLFS_TEST_GC_GATE has been opened for writing
 * and closed, so that a test can publish at that moment. Harmless elsewhere.
 */
static void test_gate(void)
{
	const char *path = getenv("SPOOLFS_TEST_GC_GATE");
	char ch;
	int fd;

	if (!path)
		return;
	while ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 && errno == EINTR)
		;
	while (fd >= 0 && (read(fd, &ch, 1) > 0 || errno == EINTR))
		;
	if (fd >= 0)
		close(fd);
}

/*
 * The second look, just before deleting: manifests new or rewritten since the first
 * listing are read, vetted and walked too (the kept ones again). 0 or -errno said.
 */
static int remark(struct gc *c, const struct pub_s3_list *l1, const struct pub_s3_list *l2,
                  struct man *m1, size_t n1)
{
	struct man *m2 = NULL;
	size_t n2 = 0;
	int rc = find_manifests(c, l2, &m2, &n2);

	for (size_t i = 0; rc == 0 && i < n2; i++) {
		const struct pub_s3_have *was = pub_s3_list_find(l1, m2[i].key);
		/* A manifest tagged meanwhile is kept too, dropped before or not. */
		m2[i].mark =
		    m2[i].tagged || !was || was->mtime != m2[i].mtime || was->size != m2[i].size;
		for (size_t j = 0; j < n1 && !m2[i].mark; j++)
			m2[i].mark = m1[j].mark && strcmp(m1[j].key, m2[i].key) == 0;
		/* A dropped manifest rewritten meanwhile is a new release: not deleted. */
		for (size_t j = 0; j < n1; j++)
			if (m2[i].mark && strcmp(m1[j].key, m2[i].key) == 0)
				m1[j].drop = false;
	}
	if (rc == 0)
		rc = mark(c, m2, n2, l2);
	free(m2);
	return rc;
}

/* What goes: dropped manifests still as they were, then unreachable old objects. */
static int sweep(struct gc *c, const struct pub_s3_list *l1, const struct pub_s3_list *l2,
                 const struct man *m1, size_t n1)
{
	const char **keys = calloc(l1->n + 1, sizeof(*keys));
	size_t n = 0, n_man = 0, kept = 0;
	uint64_t bytes = 0;
	int rc = 0;

	if (!keys)
		return -ENOMEM;
	for (size_t i = 0; i < n1; i++) {
		const struct pub_s3_have *now = pub_s3_list_find(l2, m1[i].key);
		if (m1[i].drop && now && now->mtime == m1[i].mtime && now->size == m1[i].size) {
			keys[n++] = m1[i].key;
			bytes += m1[i].size;
			n_man++;
		}
	}
	for (size_t i = 0; i < l1->n; i++) {
		const struct pub_s3_have *now;
		if (strncmp(l1->v[i].key, "objects/", 8) != 0)
			continue;
		now = pub_s3_list_find(l2, l1->v[i].key);
		/* Its age from the second listing: an object a publish refreshed stays. */
		if (!now || now->mtime > c->now - c->grace || reachable(c, now->key)) {
			kept += now != NULL;
			continue;
		}
		keys[n++] = now->key;
		bytes += now->size;
	}
	for (size_t i = 0; c->dry_run && i < n; i++)
		printf("would delete %s/%s (%" PRIu64 " bytes)\n", c->g.where, keys[i],
		       (pub_s3_list_find(l2, keys[i]) ? pub_s3_list_find(l2, keys[i])->size : 0));
	/* Manifests first: no mount begins on a release whose objects are going. */
	if (!c->dry_run && n_man)
		rc = gc_store_delete(&c->g, keys, n_man);
	if (!c->dry_run && rc == 0 && n > n_man)
		rc = gc_store_delete(&c->g, keys + n_man, n - n_man);
	if (rc == 0)
		printf("spoolfs gc: %s: %s %zu manifests and %zu objects, %" PRIu64
		       " bytes; %zu objects kept\n",
		       c->g.where, c->dry_run ? "would delete" : "deleted", n_man, n - n_man, bytes,
		       kept);
	free(keys);
	return rc;
}

static int run(struct gc *c)
{
	struct pub_s3_list l1 = {0}, l2 = {0};
	struct man *m1 = NULL;
	size_t n1 = 0;
	int rc = gc_store_list(&c->g, &l1);

	if (rc == 0)
		rc = find_manifests(c, &l1, &m1, &n1);
	if (rc == 0)
		rc = choose(c, m1, n1);
	if (rc == 0)
		rc = mark(c, m1, n1, &l1);
	if (rc == 0) {
		test_gate();
		rc = gc_store_list(&c->g, &l2);
	}
	if (rc == 0)
		rc = remark(c, &l1, &l2, m1, n1);
	if (rc == 0)
		rc = sweep(c, &l1, &l2, m1, n1);
	if (rc == 0 && c->g.s3)
		rc = gc_store_abort_uploads(&c->g, c->now - c->grace, c->dry_run);
	free(m1);
	pub_s3_list_free(&l1);
	pub_s3_list_free(&l2);
	return rc;
}

int publish_gc_main(int argc, char **argv)
{
	static const struct option longs[] = {
	    {"keep-last", required_argument, NULL, 'L'},
	    {"keep-newer-than", required_argument, NULL, 'N'},
	    {"keep", required_argument, NULL, 'K'},
	    {"grace", required_argument, NULL, 'G'},
	    {"dry-run", no_argument, NULL, 'n'},
	    {"endpoint", required_argument, NULL, 'E'},
	    {"region", required_argument, NULL, 'R'},
	    {"profile", required_argument, NULL, 'P'},
	    {"role-arn", required_argument, NULL, 'A'},
	    {"path-style", no_argument, NULL, 'S'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct publish_s3_options so = {0};
	struct gc c = {.g.dir_fd = -1, .grace = DAY, .keep_newer = -1};
	bool chosen = false;
	const char *source;
	char *end, *real = NULL;
	int ch, rc = 0;

	opterr = 0;
	optind = 1;
	c.keep_names = calloc((size_t)argc + 1, sizeof(*c.keep_names));
	if (!c.keep_names)
		return 1;
	while ((ch = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
		if (ch == 'L') {
			errno = 0;
			c.keep_last = strtoul(optarg, &end, 10);
			if (errno || *end || optarg[0] < '0' || optarg[0] > '9')
				rc = 2;
			chosen = true;
		} else if (ch == 'N') {
			rc = (c.keep_newer = parse_duration(optarg)) < 0 ? 2 : rc;
			chosen = true;
		} else if (ch == 'G') {
			rc = (c.grace = parse_duration(optarg)) < 0 ? 2 : rc;
		} else if (ch == 'K') {
			c.keep_names[c.n_keep_names++] = optarg;
			chosen = true;
		} else if (ch == 'n') {
			c.dry_run = true;
		} else if (ch == 'h') {
			free(c.keep_names);
			return usage(stdout), 0;
		} else if (ch == '?' || pub_s3_option(&so, ch, optarg) != 0) {
			rc = 2;
		}
		if (rc == 2 && (ch == 'L' || ch == 'N' || ch == 'G'))
			fprintf(stderr, "spoolfs gc: %s: not a %s\n", optarg,
			        ch == 'L' ? "count" : "duration (e.g. 90s, 15m, 24h, 7d)");
	}
	if (rc || argc - optind != 1) {
		free(c.keep_names);
		return usage(stderr), 2;
	}
	c.keep_all = !chosen;
	c.now = (int64_t)time(NULL);
	source = argv[optind];
	if (strncmp(source, "s3://", 5) == 0) {
		rc = pub_s3_open(&so, source, &c.s3);
		c.g.s3 = &c.s3;
		c.g.where = c.s3.display ? c.s3.display : source;
	} else if (so.given) {
		fprintf(stderr, "spoolfs gc: --endpoint, --region, --profile, --role-arn and"
		                " --path-style are for an s3:// store\n");
		free(c.keep_names);
		return 2;
	} else {
		c.g.where = source;
		real = realpath(source, NULL);
		if (!real) {
			rc = -errno;
			fprintf(stderr, "spoolfs gc: %s: %s\n", source, strerror(errno));
		} else {
			/* Deleting as root: nobody else may swap objects/ for a symlink. */
			rc = pub_out_trusted(real);
		}
		c.g.dir_fd = rc ? -1 : open(real, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (rc == 0 && c.g.dir_fd < 0) {
			rc = -errno;
			fprintf(stderr, "spoolfs gc: %s: %s\n", source, strerror(errno));
		}
	}
	if (rc == 0 &&
	    (sqlite3_open(":memory:", &c.db) != SQLITE_OK ||
	     sqlite3_exec(c.db, "CREATE TABLE obj(url PRIMARY KEY, size, sha256, nested)", NULL,
	                  NULL, NULL) != SQLITE_OK))
		rc = -ENOMEM;
	vet_db = c.db;
	if (rc == 0)
		rc = run(&c);
	sqlite3_close(c.db);
	if (c.g.s3)
		pub_s3_close(&c.s3);
	if (c.g.dir_fd >= 0)
		close(c.g.dir_fd);
	free(c.keep_names);
	free(real);
	return rc ? 1 : 0;
}

/*
 * object.c: from an inode to its object's flight (object.h). One index query gives the file
 * and where its bytes are; the key names the object; a running flight is joined at once,
 * and only a new one is given its name, its --mirror URLs, its frame table (a second
 * query, whose cost grows with the table) and a kick of the engine.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fetch/engine/engine.h"
#include "fetch/engine/flight_key.h"
#include "fetch/engine/object.h"
#include "fetch/engine/object_i.h"
#include "fetch/http/beneath.h"
#include "fetch/source/frame_table.h"
#include "index/records.h"
#include "util/log.h"
#include "util/ranges.h"

int fetch_objects_create(const struct fetch_objects_config *cfg, struct fetch_objects **out)
{
	struct fetch_objects *o = calloc(1, sizeof(*o));

	*out = NULL;
	if (!o)
		return -ENOMEM;
	if (cfg->n_mirrors > FLIGHT_MAX_URLS - 1) {
		free(o);
		return -EINVAL; /* the options refuse more */
	}
	o->cfg = *cfg;
	pthread_mutex_init(&o->verified_lock, NULL);
	*out = o;
	return 0;
}

void fetch_objects_destroy(struct fetch_objects *o)
{
	if (!o)
		return;
	fetch_member_forget_all(o);
	pthread_mutex_destroy(&o->verified_lock);
	free(o);
}

void fetch_object_clear(struct fetch_object *out)
{
	free(out->url);
	out->url = NULL;
}

/* An object's URLs on the --mirror bases (mirror_urls). */
struct mirror_set {
	char **urls;     /* per --mirror; NULL: the object is asked of no mirror */
	char *path;      /* its path beneath a mirror's base, decoded (fetch_mirror_path) */
	const char *rel; /* its URL's part after the manifest's directory */
	size_t rel_len;  /* the path of rel, without query or fragment */
	bool refused;    /* that path could lead out of a mirror's base: no mirror is asked */
};

/*
 * The object's URL on each --mirror: the part after the manifest's directory, on the
 * mirror's base. m->urls stays NULL when there are no mirrors or the URL is elsewhere,
 * and when that part's path could leave the base however a mirror decodes it (see
 * fetch_mirror_path: the manifest's author writes it): the object is then fetched from its
 * own URL only, and m->refused says why. A refusal at mount would have failed a whole
 * manifest for names that are legal on a server ("a\\b", "100%.txt" once encoded); this
 * way the only loss is the mirror, for that entry, and the log names it.
 */
static int mirror_urls(const struct fetch_objects_config *c, const char *url, struct mirror_set *m)
{
	size_t dir_len = c->manifest_dir ? strlen(c->manifest_dir) : 0;
	int rc;

	memset(m, 0, sizeof(*m));
	if (!c->n_mirrors || !dir_len || strncmp(url, c->manifest_dir, dir_len) != 0)
		return 0;
	m->rel = url + dir_len;
	m->rel_len = strcspn(m->rel, "?#");
	rc = fetch_mirror_path(m->rel, m->rel_len, &m->path);
	if (rc == -EINVAL) {
		m->refused = true;
		return 0;
	}
	if (rc)
		return rc;
	m->urls = calloc(c->n_mirrors, sizeof(*m->urls));
	if (!m->urls)
		return -ENOMEM;
	for (unsigned i = 0; i < c->n_mirrors; i++) {
		const char *base = c->mirrors[i];
		size_t len = strlen(base);
		if (asprintf(&m->urls[i], "%s%s%s", base, len && base[len - 1] == '/' ? "" : "/",
		             m->rel) < 0) {
			m->urls[i] = NULL;
			return -ENOMEM;
		}
	}
	return 0;
}

static void mirror_set_free(const struct fetch_objects_config *c, struct mirror_set *m)
{
	for (unsigned i = 0; m->urls && i < c->n_mirrors; i++)
		free(m->urls[i]);
	free(m->urls);
	free(m->path);
}

/* Said once per flight: every open of the entry asks its own URL only. */
static void log_mirrors_refused(const struct fetch_objects_config *c, const char *name,
                                const struct mirror_set *m)
{
	char shown[512];

	for (unsigned i = 0; i < c->n_mirrors; i++)
		util_log(UTIL_LOG_ERROR,
		         "%s: not fetched from --mirror %s: its URL's path \"%.*s\" after the "
		         "manifest's directory could lead out of the mirror (a \"..\", \".\" or "
		         "empty segment, or an encoded '/', '\\' or '%%')",
		         name, util_redact_url(c->mirrors[i], shown, sizeof(shown)),
		         (int)(m->rel_len > 300 ? 300 : m->rel_len), m->rel);
}

/* Whether the cache directory holds key's object complete (an earlier session's). */
static bool complete_in_cache(const struct fetch_objects_config *c, const char *key)
{
	struct util_ranges ranges;
	bool complete = false;

	if (!c->records)
		return false;
	util_ranges_init(&ranges);
	if (index_records_lookup(c->records, key, &complete, &ranges) != 0)
		complete = false;
	util_ranges_free(&ranges);
	return complete;
}

/* Joins or starts the flight spec names, with its mirrors (which last the call only). */
static int join_new(struct fetch_objects *o, struct flight_spec *spec, struct flight **out,
                    bool *created)
{
	const struct fetch_objects_config *c = &o->cfg;
	struct mirror_set mirrors = {0};
	const char *paths[FLIGHT_MAX_URLS];
	int rc;

	rc = mirror_urls(c, spec->url, &mirrors);
	if (rc)
		goto out;
	for (unsigned i = 0; mirrors.urls && i < c->n_mirrors; i++)
		paths[i] = c->mirror_dir_fds && c->mirror_dir_fds[i] >= 0 ? mirrors.path : NULL;
	spec->mirror_urls = (const char *const *)mirrors.urls;
	spec->n_mirror_urls = mirrors.urls ? c->n_mirrors : 0;
	spec->mirror_dir_fds = c->mirror_dir_fds;
	spec->mirror_paths = paths;
	rc = flight_table_join(c->flights, spec, out, created);
	spec->mirror_urls = NULL; /* mirrors' and paths' lives end here */
	spec->mirror_paths = NULL;
	if (rc == 0 && *created && mirrors.refused)
		log_mirrors_refused(c, spec->name, &mirrors);
out:
	mirror_set_free(c, &mirrors);
	return rc;
}

/* What an object is, from its index row: the flight_spec's fields, name aside. */
struct target {
	const char *url;
	const char *etag;
	const char *sha256;
	uint64_t size;
	uint64_t chunk_size; /* the object's own chunk hashes; 0: none */
	/* How it is stored (flight_spec's): frame_size 0, stored as it is. frame_stored is a
	 * chunked object's from its hash list (req->list); else NULL here, and for a new
	 * flight read from the index (frames_in_index, n_frames of them: index_frames). */
	uint64_t frame_size;
	const uint32_t *frame_stored;
	uint64_t stored_size;
	uint64_t n_frames;
	bool frames_in_index;
	const char *suffix; /* after the path in its flight's name */
};

/* The bytes per chunk in a hash list: a digest, and for an object stored compressed its
 * chunk's frame's stored length too (doc/manifest.md, version 3). */
static uint64_t hash_list_record(const struct index_object_ref *ref)
{
	return FLIGHT_DIGEST_BYTES + (ref->stored.frame ? FRAME_TABLE_LE_BYTES : 0);
}

static void target_of(const struct index_object_ref *ref, const struct fetch_object_req *req,
                      struct target *t)
{
	const struct index_node *n = &ref->node;

	if (req->hash_list) {
		/* Its length is what the object's size and chunk size make it: no other is
		 * taken. It is stored as it is. */
		*t = (struct target){.url = ref->chunks.url,
		                     .etag = "",
		                     .sha256 = ref->chunks.sha256,
		                     .size = flight_chunk_count(n->size, ref->chunks.chunk_size) *
		                             hash_list_record(ref),
		                     .suffix = " (hash list)"};
	} else if (ref->pack.url) {
		/* A member's flight is its pack's: one download for all its members, keyed by
		 * the pack's sha256 like any object, and stored as the pack is. */
		*t = (struct target){.url = ref->pack.url,
		                     .etag = "",
		                     .sha256 = ref->pack.pack_sha256,
		                     .size = ref->pack.pack_size,
		                     .frame_size = ref->pack.stored.frame,
		                     .stored_size = ref->pack.stored.size,
		                     .n_frames = ref->pack.stored.n_frames,
		                     .frames_in_index = ref->pack.stored.in_index,
		                     .suffix = ""};
	} else {
		*t = (struct target){.url = ref->url,
		                     .etag = ref->etag,
		                     .sha256 = n->sha256,
		                     .size = n->size,
		                     .chunk_size = ref->chunks.chunk_size,
		                     .frame_size = ref->stored.frame,
		                     .stored_size = ref->stored.size,
		                     .n_frames = ref->stored.n_frames,
		                     .frames_in_index = ref->stored.in_index,
		                     .suffix = ""};
		if (ref->chunks.chunk_size && req->list)
			t->frame_stored = req->list->frame_stored;
	}
}

/* A new flight's frame table (n lengths) from the index, decoded into *lens (malloc'd):
 * read only here, so that a join of a running flight costs nothing per frame. 0, -ENOMEM;
 * -EIO when the index has no table of n lengths (not reached: the loader checked it). */
static int index_frames(struct index *idx, uint64_t ino, uint64_t n, uint32_t **lens)
{
	unsigned char *le = NULL;
	size_t len = 0;
	int rc = index_get_stored_frames(idx, ino, &le, &len);

	*lens = NULL;
	if (rc == -ENOENT || (rc == 0 && len != n * FRAME_TABLE_LE_BYTES))
		rc = -EIO;
	if (rc == 0) {
		*lens = malloc(n ? n * sizeof(**lens) : 1);
		rc = *lens ? 0 : -ENOMEM;
	}
	if (rc == 0)
		frame_table_decode_le(le, n, *lens);
	free(le);
	return rc;
}

int fetch_object_open(struct fetch_objects *o, const struct fetch_object_req *req,
                      struct fetch_object *out)
{
	const struct fetch_objects_config *c = &o->cfg;
	struct index_object_ref ref;
	struct flight_spec spec;
	struct target t;
	char *key = NULL, name[1024];
	uint32_t *lens = NULL;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = index_get_object(c->idx, req->ino, &ref);
	if (rc)
		goto out;
	if (ref.node.kind != INDEX_KIND_FILE) { /* the kernel follows symlinks before it opens */
		rc = ref.node.kind == INDEX_KIND_DIR ? -EISDIR : -ELOOP;
		goto out;
	}
	if (req->hash_list && !ref.chunks.chunk_size) {
		rc = -EIO; /* only a chunked object has one */
		goto out;
	}
	out->parent = ref.node.parent;
	out->is_member = !req->hash_list && ref.pack.url;
	if (out->is_member) {
		out->member.base = ref.pack.offset;
		out->member.size = ref.node.size;
		memcpy(out->member.sha256, ref.node.sha256, sizeof(out->member.sha256));
	}
	target_of(&ref, req, &t);
	rc = flight_key_build(t.sha256, t.size, t.url, t.etag, &key);
	if (rc)
		goto out;
	/* Nothing to fetch: its reader's open finds it there without a request. */
	if (req->speculative && complete_in_cache(c, key)) {
		rc = -EEXIST;
		goto out;
	}
	rc = flight_table_join_existing(c->flights, key, req->ino, &out->flight);
	if (rc == 0) {
		/* Chunks that failed for good get one more try at each open, as failed objects
		 * do. */
		if (flight_retry_bad_chunks(out->flight) && c->engine)
			engine_kick(c->engine, out->flight);
		goto joined;
	}
	/* Nothing to join, and no hash list: it comes first. */
	if (t.chunk_size && !req->list) {
		rc = FETCH_OBJECT_HASH_LIST;
		goto out;
	}
	/* A frame table the engine would read past (a caller's hash list of the wrong form). */
	if (t.frame_size && !t.frame_stored && !t.frames_in_index) {
		rc = -EIO;
		goto out;
	}
	if (t.frame_size && !t.frame_stored) {
		rc = index_frames(c->idx, req->ino, t.n_frames, &lens);
		if (rc)
			goto out;
		t.frame_stored = lens;
	}
	/* A new flight (most likely): its name is the file's path, for its log lines. The path
	 * keeps its tail when cut, and leaves room for the suffixes after it. */
	index_node_path(c->idx, &ref.node, name, sizeof(name) - 64);
	snprintf(name + strnlen(name, sizeof(name) - 32), 32, "%s", t.suffix);
	if (out->is_member) /* the pack's log lines name the member that opened it */
		snprintf(name + strnlen(name, sizeof(name) - 32), 32, " (pack %.12s)", t.sha256);
	spec = (struct flight_spec){.key = key,
	                            .url = t.url,
	                            .etag = t.etag,
	                            .sha256 = t.sha256,
	                            .name = name,
	                            .size = t.size,
	                            .ino = req->ino,
	                            .readers_verify = out->is_member,
	                            .chunk_size = t.chunk_size,
	                            .chunk_digests = req->list ? req->list->digests : NULL,
	                            .frame_size = t.frame_size,
	                            .frame_stored = t.frame_stored,
	                            .stored_size = t.stored_size,
	                            .speculative = req->speculative};
	rc = join_new(o, &spec, &out->flight, &out->created);
	if (rc)
		goto out;
	/* A new flight starts downloading now, before the first read asks; an existing one
	 * that lost a race to this join gets its retry like any other. */
	if (c->engine && (out->created || flight_retry_bad_chunks(out->flight)))
		engine_kick(c->engine, out->flight);
joined:
	if (req->hash_list) {
		/* Read in full at once, whatever its size (a sparse flight would wait for a
		 * reader). */
		flight_fetch_whole(out->flight);
		if (c->engine)
			engine_kick(c->engine, out->flight);
		out->url = ref.chunks.url;
		ref.chunks.url = NULL;
	}
out:
	if (rc && out->flight) {
		flight_unref(out->flight);
		out->flight = NULL;
	}
	index_object_ref_free(&ref);
	free(lens);
	free(key);
	return rc;
}

int fetch_hash_list_read(struct flight *list, unsigned char **out)
{
	uint64_t size = flight_size(list), got = 0;
	unsigned char *buf = malloc(size ? size : 1);
	int fd, rc;

	*out = NULL;
	if (!buf)
		return -ENOMEM;
	rc = flight_hold_spool(list); /* reopens it if it was closed while idle */
	if (rc) {
		free(buf);
		return rc;
	}
	fd = flight_spool_fd(list);
	while (got < size && rc == 0) {
		ssize_t n = pread(fd, buf + got, size - got, (off_t)got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			rc = n < 0 ? -errno : -EIO;
		else
			got += (uint64_t)n;
	}
	flight_release_spool(list);
	if (rc)
		free(buf);
	else
		*out = buf;
	return rc;
}

int fetch_object_view(struct fetch_objects *o, uint64_t ino, bool want_cached,
                      struct fetch_object_view *out)
{
	struct index_object_ref ref;
	char *key = NULL;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = index_get_object(o->cfg.idx, ino, &ref);
	if (rc || ref.node.kind != INDEX_KIND_FILE)
		goto out;
	out->node = ref.node;
	if (want_cached) {
		struct fetch_object_req req = {.ino = ino};
		struct target t;
		target_of(&ref, &req, &t);
		rc = flight_key_build(t.sha256, t.size, t.url, t.etag, &key);
		if (rc)
			goto out;
		out->cached = flight_table_cached_bytes(o->cfg.flights, key);
		/* A member is cached once its pack is, whole. */
		if (ref.pack.url)
			out->cached = out->cached == ref.pack.pack_size ? ref.node.size : 0;
	}
	/* A pack member's URL is its pack's. */
	if (ref.pack.url) {
		out->url = ref.pack.url;
		ref.pack.url = NULL;
	} else {
		out->url = ref.url;
		ref.url = NULL;
	}
out:
	if (rc == 0 && ref.node.kind != INDEX_KIND_FILE)
		out->node = ref.node;
	index_object_ref_free(&ref);
	free(key);
	return rc;
}

void fetch_object_view_clear(struct fetch_object_view *v)
{
	free(v->url);
	v->url = NULL;
}

bool fetch_object_spool_gone(struct flight *f, int rc)
{
	enum flight_state state;

	if (rc != -ENOENT && rc != -ESTALE)
		return false;
	flight_progress(f, NULL, NULL, &state);
	if (state == FLIGHT_COMPLETE) {
		util_log(UTIL_LOG_INFO, "%s: its spool file is %s: opening it afresh",
		         flight_name(f), rc == -ENOENT ? "gone" : "another mount's now");
		flight_table_forget(f);
	}
	return true;
}

int fetch_object_open_ahead(struct fetch_objects *o, uint64_t ino, struct fetch_object *out)
{
	struct fetch_object_req req = {.ino = ino, .speculative = true};
	struct fetch_hash_list hl = {0};
	struct fetch_object list;
	enum flight_state state;
	int rc = fetch_object_open(o, &req, out);

	if (rc != FETCH_OBJECT_HASH_LIST)
		return rc;
	req.hash_list = true;
	rc = fetch_object_open(o, &req, &list);
	if (rc == -EEXIST) { /* complete in the cache directory: read from there */
		req.speculative = false;
		rc = fetch_object_open(o, &req, &list);
	}
	if (rc)
		return rc;
	flight_progress(list.flight, NULL, NULL, &state);
	if (state == FLIGHT_ACTIVE) {
		fetch_object_clear(&list);
		out->flight = list.flight;
		return FETCH_OBJECT_PENDING;
	}
	/* A failed one was logged by its flight; a spool that is gone is retried later. */
	rc = state == FLIGHT_COMPLETE
	         ? fetch_hash_list_take(o, ino, list.flight, 0, false, list.url, &hl)
	         : -EIO;
	fetch_object_clear(&list);
	flight_unref(list.flight);
	if (rc)
		return rc;
	req = (struct fetch_object_req){.ino = ino, .speculative = true, .list = &hl};
	rc = fetch_object_open(o, &req, out);
	fetch_hash_list_clear(&hl);
	return rc;
}

void fetch_hash_list_clear(struct fetch_hash_list *hl)
{
	free(hl->digests);
	free(hl->frame_stored);
	hl->digests = NULL;
	hl->frame_stored = NULL;
}

/* Splits the hash list's bytes (n records of hash_list_record(ref)) into out. */
static int split_hash_list(const struct index_object_ref *ref, unsigned char *bytes, uint64_t n,
                           struct fetch_hash_list *out, char *why, size_t why_len)
{
	char said[200];

	if (!ref->stored.frame) { /* as it is: the digests are the whole list */
		out->digests = bytes;
		return 0;
	}
	out->digests = malloc(n ? n * FLIGHT_DIGEST_BYTES : 1);
	out->frame_stored = malloc(n ? n * sizeof(uint32_t) : 1);
	if (!out->digests || !out->frame_stored) {
		free(bytes);
		return -ENOMEM;
	}
	for (uint64_t k = 0; k < n; k++) {
		const unsigned char *r = bytes + k * (FLIGHT_DIGEST_BYTES + FRAME_TABLE_LE_BYTES);
		memcpy(out->digests + k * FLIGHT_DIGEST_BYTES, r, FLIGHT_DIGEST_BYTES);
		out->frame_stored[k] = frame_table_get_le(r + FLIGHT_DIGEST_BYTES);
	}
	free(bytes);
	if (frame_table_check(ref->node.size, ref->stored.frame, out->frame_stored, n,
	                      ref->stored.size, said, sizeof(said))) {
		snprintf(why, why_len, "its hash list's %s", said);
		return -EIO;
	}
	return 0;
}

int fetch_hash_list_take(struct fetch_objects *o, uint64_t ino, struct flight *list, int list_err,
                         bool retried, const char *url, struct fetch_hash_list *out)
{
	struct index_object_ref ref;
	unsigned char *bytes = NULL;
	char why[256] = "", name[1024], shown[512];
	int rc;

	memset(out, 0, sizeof(*out));
	rc = index_get_object(o->cfg.idx, ino, &ref);
	if (rc)
		return rc;
	uint64_t n = flight_chunk_count(ref.node.size, ref.chunks.chunk_size);
	rc = list_err;
	if (rc == 0 && !ref.chunks.chunk_size)
		rc = -EIO; /* not reached: the namespace does not change */
	if (rc == 0 && flight_size(list) != n * hash_list_record(&ref))
		rc = -EIO; /* not reached: the flight's size is what target_of made it */
	if (rc == 0)
		rc = fetch_hash_list_read(list, &bytes);
	if (rc == 0)
		rc = split_hash_list(&ref, bytes, n, out, why, sizeof(why));
	bool gone = rc == -ENOENT || rc == -ESTALE;
	/* A spool that is gone is the caller's to retry once (fetch_object_spool_gone). */
	if (rc && !(gone && !retried)) {
		index_node_path(o->cfg.idx, &ref.node, name, sizeof(name));
		util_redact_url(url ? url : "?", shown, sizeof(shown));
		if (list_err)
			util_log(UTIL_LOG_ERROR,
			         "%s: its hash list from %s could not be fetched or does not match "
			         "its sha256 (%s): the open fails with EIO",
			         name, shown, strerror(-rc));
		else if (gone)
			util_log(UTIL_LOG_ERROR,
			         "%s: its hash list's spool file from %s went away again after it "
			         "was fetched afresh (%s): the open fails with EIO",
			         name, shown, strerror(-rc));
		else
			util_log(
			    UTIL_LOG_ERROR,
			    "%s: its hash list from %s does not describe its stored object (%s): "
			    "the open fails with EIO",
			    name, shown, why[0] ? why : strerror(-rc));
	}
	if (rc)
		fetch_hash_list_clear(out);
	index_object_ref_free(&ref);
	return rc;
}

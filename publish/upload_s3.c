/*
 * `spoolfs publish SRC s3://BUCKET/PREFIX`: uploads a staged OUT_DIR (run.c wrote it, see
 * s3.c) into an S3 store, objects first, manifest last.
 *
 * One listing of PREFIX/objects/, before the stage is written (pub_s3_begin), tells which
 * objects the store holds already: those are neither staged nor sent again. Every other
 * object goes up with a PUT whose x-amz-content-sha256 (signed) and x-amz-checksum-sha256
 * are the sha256 its name already is, so bytes damaged on the way are refused by the store,
 * not found by a reader. The PUTs run several at a time on one curl multi handle in this
 * thread (pub_s3_run); objects over --part-size go up in parts first (multipart_s3.c). A PUT
 * is atomic in S3: a killed publish leaves whole objects or none, and a rerun skips what is
 * there. After the last object, a second listing confirms that every object the manifest
 * names (sent, or skipped as the first listing showed it) is present with its size; only
 * then is the manifest written (with --if-absent, conditionally, on a store that was
 * seen to honour If-None-Match).
 *
 * Single-threaded. Secrets stay in the signed headers and never reach a message.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "fetch/s3/s3_list.h"
#include "fetch/s3/source_s3.h"
#include "publish/s3_i.h"

#define CACHE_IMMUTABLE "public, max-age=31536000, immutable"

/* The staged objects: every objects/XX/<sha256> of the stage. 0 or -errno, said. */
static int stage_items(struct pub_s3 *s, struct up_item **out, size_t *n_out)
{
	struct up_item *v = NULL;
	size_t n = 0, cap = 0;
	char dir[PATH_MAX];
	int rc = 0;

	for (unsigned b = 0; b < 256 && rc == 0; b++) {
		snprintf(dir, sizeof(dir), "%s/objects/%02x", s->stage, b);
		DIR *d = opendir(dir);
		struct dirent *de;
		if (!d) {
			if (errno != ENOENT)
				rc = -errno;
			continue;
		}
		while (rc == 0 && (de = readdir(d))) {
			struct stat sb;
			if (strlen(de->d_name) != 2 * PUB_SHA256_LEN)
				continue; /* ".", "..", a temporary file of a failed run */
			if (fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
				rc = -errno;
				break;
			}
			if (n == cap) {
				size_t c = cap ? 2 * cap : 256;
				struct up_item *w = realloc(v, c * sizeof(*w));
				if (!w) {
					rc = -ENOMEM;
					break;
				}
				v = w;
				cap = c;
			}
			snprintf(v[n].key, sizeof(v[n].key), "objects/%02x/%s", b, de->d_name);
			v[n].size = (uint64_t)sb.st_size;
			if (pub_s3_unhex(de->d_name, v[n].sha256, PUB_SHA256_LEN) == 0)
				n++;
		}
		closedir(d);
	}
	if (rc)
		pub_say("", s->stage, "objects", strerror(-rc), false);
	*out = v;
	*n_out = n;
	return rc;
}

void pub_s3_progress(struct pub_s3 *s, bool last)
{
	double t = pub_s3_now();
	char sent[32], all[32], rate[32];

	if (!s->tty || (!last && t - s->shown < 0.5))
		return;
	s->shown = t;
	fprintf(stderr, "\rspoolfs publish: %zu/%zu objects, %s of %s, %zu skipped, %s/s  %s",
	        s->uploaded, s->to_upload, pub_human(s->sent_bytes, sent, sizeof(sent)),
	        pub_human(s->upload_bytes, all, sizeof(all)), s->skipped,
	        pub_human((uint64_t)(s->sent_bytes / (t - s->started + 1e-9)), rate, sizeof(rate)),
	        last ? "\n" : "");
}

/* Makes the PUT of item i. 0 or -errno, said. */
static int start_put(struct pub_s3 *s, void *ctx, size_t i, struct up_xfer **out)
{
	const struct up_item *it = &s->items[i];
	struct up_xfer *x = pub_s3_xfer_new();
	char path[PATH_MAX];
	int rc = -ENOMEM;

	(void)ctx;
	if (!x)
		goto fail;
	snprintf(path, sizeof(path), "%s/%s", s->stage, it->key);
	x->body.len = it->size;
	x->body.fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (x->body.fd < 0) {
		rc = -errno;
		pub_say("", s->stage, it->key, strerror(-rc), false);
		goto fail;
	}
	rc = pub_s3_put_setup(s, x, it->key, NULL, 0, it->sha256, CACHE_IMMUTABLE, false);
	if (rc == 0) {
		*out = x;
		return 0;
	}
	pub_say("", s->display, it->key, strerror(-rc), false);
fail:
	pub_s3_xfer_free(x);
	return rc;
}

/* A finished PUT: done, to be tried again (-EAGAIN), or failed (said). */
static int end_put(struct pub_s3 *s, void *ctx, struct up_xfer *x, CURLcode res, unsigned tries)
{
	const struct up_item *it = &s->items[x->item];
	char why[700];
	int rc = pub_s3_outcome(s, x, res, tries, why, sizeof(why));

	(void)ctx;
	if (rc == 0) {
		s->uploaded++;
		s->sent_bytes += it->size;
	} else if (rc != -EAGAIN) {
		pub_say("", s->display, it->key, why, false);
	}
	return rc;
}

/* PUTs the items marked to go whole: those over s->multipart_over go in parts. */
static int upload_all(struct pub_s3 *s, const bool *go)
{
	bool *whole = calloc(s->n_items + 1, sizeof(*whole));
	struct pub_s3_batch b = {.n = s->n_items,
	                         .go = whole,
	                         .start = start_put,
	                         .end = end_put,
	                         .progress = pub_s3_progress};
	int rc = whole ? 0 : -ENOMEM;

	for (size_t i = 0; rc == 0 && i < s->n_items; i++)
		whole[i] = go[i] && s->items[i].size <= s->multipart_over;
	s->started = pub_s3_now();
	if (rc == 0)
		rc = pub_s3_multipart(s, go);
	if (rc == 0)
		rc = pub_s3_run(s, &b);
	if (rc == -EINTR)
		pub_say("", s->display, "",
		        "interrupted: no manifest was written; a rerun sends only what is missing",
		        false);
	free(whole);
	return rc;
}

/*
 * --if-absent: whether the store honours If-None-Match: * on a PUT. A probe key is written
 * twice with the condition: the second must be refused (412). Some stores (s3rver) write
 * both and answer 200: then the condition would protect nothing, and the publish refuses
 * instead of pretending. The probe key goes again either way. 0 or -errno, said.
 */
static int probe_if_absent(struct pub_s3 *s)
{
	unsigned char rnd[8];
	char key[64], why[700] = "";
	long first, second = 0;
	char why2[300];

	if (RAND_bytes(rnd, sizeof(rnd)) != 1)
		return -EIO;
	snprintf(key, sizeof(key), ".spoolfs-if-absent-probe-");
	pub_s3_hex(rnd, sizeof(rnd), key + strlen(key));
	first = pub_s3_put_bytes(s, key, "probe\n", 6, "no-cache", true, why, sizeof(why));
	if (first / 100 == 2)
		second = pub_s3_put_bytes(s, key, "probe\n", 6, "no-cache", true, why, sizeof(why));
	pub_s3_delete(s, key, NULL, 0, why2, sizeof(why2));
	if (first / 100 != 2) {
		pub_say("", s->display, key, why, false);
		return -EIO;
	}
	if (second == 412)
		return 0;
	pub_say("", s->display, "",
	        second / 100 == 2
	            ? "--if-absent refused: this store does not honour If-None-Match: * (a second"
	              " conditional write of one key succeeded), so it could not keep two"
	              " publishers from overwriting one manifest"
	            : why,
	        false);
	return second / 100 == 2 ? -EOPNOTSUPP : -EIO;
}

/* Whether have (the listing after the uploads) holds key with size; said if not. */
static bool present(struct pub_s3 *s, const struct pub_s3_list *have, const char *key,
                    uint64_t size)
{
	int64_t got = pub_s3_list_size(have, key);
	char why[120];

	if (got == (int64_t)size)
		return true;
	if (got < 0)
		snprintf(why, sizeof(why),
		         "missing from the store before the manifest was written");
	else
		snprintf(why, sizeof(why), "the store holds %" PRId64 " bytes, not %" PRIu64, got,
		         size);
	pub_say("", s->display, key, why, false);
	return false;
}

/*
 * Every object the manifest names present in the store with its size: those staged (and
 * sent or found since) and those the first listing showed (pub_s3_known), which another
 * publish's cleanup or a lifecycle rule may have removed while this one ran. One listing.
 * 0, or -EIO with each missing or wrong one said.
 */
static int confirm(struct pub_s3 *s)
{
	struct pub_s3_list have = {0};
	size_t bad = 0;
	int rc = pub_s3_list(s, "objects/", &have);

	for (size_t i = 0; rc == 0 && i < s->n_items; i++)
		bad += !present(s, &have, s->items[i].key, s->items[i].size);
	for (size_t i = 0; rc == 0 && i < s->have.n; i++)
		if (atomic_load(&s->have.v[i].named))
			bad += !present(s, &have, s->have.v[i].key, s->have.v[i].size);
	pub_s3_list_free(&have);
	return rc ? rc : bad ? -EIO : 0;
}

/* Reads the staged manifest whole. 0 or -errno, said. */
static int read_manifest(struct pub_s3 *s, const char *name, char **data, size_t *len)
{
	return pub_read_whole(s->stage, name, data, len);
}

int pub_s3_begin(struct pub_s3 *s)
{
	int rc = s->if_absent && !s->dry_run ? probe_if_absent(s) : 0;

	return rc ? rc : pub_s3_list(s, "objects/", &s->have);
}

bool pub_s3_known(void *ctx, const unsigned char sha256[PUB_SHA256_LEN], uint64_t size)
{
	struct pub_s3 *s = ctx;
	char key[PUB_URL_LEN + 1];
	struct pub_s3_have *h;

	pub_object_url(sha256, key);
	h = pub_s3_list_find(&s->have, key);
	if (!h || h->size != size)
		return false;
	/* Confirmed again before the manifest (confirm), and made young if old (refresh). */
	atomic_store(&h->named, true);
	return true;
}

int pub_s3_upload(struct pub_s3 *s, const char *manifest)
{
	bool *go = NULL;
	char *body = NULL, why[700] = "", a[32], b[32], raw[32], stored[32];
	size_t len = 0;
	long code;
	int rc = stage_items(s, &s->items, &s->n_items);

	if (rc == 0 && !(go = calloc(s->n_items + 1, sizeof(*go))))
		rc = -ENOMEM;
	/* The stage holds what the store lacked when it was listed (and the tree's own
	 * duplicates once): anything of the right size there since is not sent again. */
	for (size_t i = 0; rc == 0 && i < s->n_items; i++) {
		go[i] = pub_s3_list_size(&s->have, s->items[i].key) != (int64_t)s->items[i].size;
		s->to_upload += go[i];
		s->upload_bytes += go[i] ? s->items[i].size : 0;
		if (go[i] && s->dry_run)
			printf("would upload %s/%s (%s)\n", s->display, s->items[i].key,
			       pub_human(s->items[i].size, a, sizeof(a)));
	}
	s->skipped = (size_t)s->totals.existing;
	if (rc == 0 && s->dry_run) {
		printf("would upload %s/%s (manifest, last)\n", s->display, manifest);
		goto out;
	}
	if (rc == 0)
		rc = upload_all(s, go);
	if (rc == 0)
		rc = confirm(s);
	if (rc == 0) /* gc's race: refreshed after the uploads, before the manifest */
		rc = pub_s3_refresh(s);
	if (rc == 0)
		rc = read_manifest(s, manifest, &body, &len);
	if (rc == 0) {
		code = pub_s3_put_bytes(s, manifest, body, len, "no-cache", s->if_absent, why,
		                        sizeof(why));
		if (code == 412 && s->if_absent) {
			pub_say("", s->display, manifest,
			        "exists already (--if-absent): another publish wrote it; left as it"
			        " is",
			        false);
			rc = -EEXIST;
		} else if (code / 100 != 2) {
			pub_say("", s->display, manifest, why, false);
			rc = -EIO;
		}
	}
out:
	if (rc == 0)
		printf(
		    "spoolfs publish: %s%zu objects (%s)%s, %zu already there; the tree's objects"
		    " %s raw, %s stored; %s %s/%s\n",
		    s->dry_run ? "would upload " : "", s->to_upload,
		    pub_human(s->upload_bytes, b, sizeof(b)), s->dry_run ? "" : " uploaded",
		    s->skipped, pub_human(s->totals.raw, raw, sizeof(raw)),
		    pub_human(s->totals.stored, stored, sizeof(stored)),
		    s->dry_run ? "would write" : "wrote", s->display, manifest);
	free(body);
	free(go);
	return rc;
}

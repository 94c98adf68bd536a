/*
 * Large objects of an S3 publish go up in parts (S3's multipart upload): one object at a
 * time, its parts s->uploads at a time on the batch runner (s3_client.c). Each part is
 * hashed in one pass over its range of the staged object, then sent from the file with its
 * sha256 signed and as x-amz-checksum-sha256, so a damaged part is refused by the store: S3
 * has no checksum of a whole multipart object to check it by. The object appears under its name
 * only when the upload is completed; an upload that fails or is interrupted (SIGINT, SIGTERM) is
 * aborted, so it leaves no parts behind to pay for (a publish killed outright leaves its upload
 * open: ListMultipartUploads shows it, and S3 lifecycle rules or `gc` end it).
 */
#include <errno.h>
#include <expat.h>
#include <fcntl.h>
#include <limits.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

#include "fetch/s3/s3_list.h"
#include "fetch/s3/source_s3.h"
#include "publish/s3_i.h"

/* S3's bounds: parts per upload, and the least part (but the last). */
#define MAX_PARTS 10000
#define UPLOAD_ID_MAX 1024
/* What a part is hashed through before it is sent from its file. */
#define HASH_BUF (1u << 20)

struct part {
	char etag[S3_ETAG_MAX];
	char b64[4 * ((PUB_SHA256_LEN + 2) / 3) + 1];
};

struct mp {
	const struct up_item *it;
	int fd;
	char upload_id[UPLOAD_ID_MAX];
	uint64_t part_size;
	size_t n_parts;
	struct part *parts;
};

/* The text of the first <UploadId> of an InitiateMultipartUploadResult. */
struct find {
	char *out;
	size_t cap, len;
	int in, done;
};

static void XMLCALL on_start(void *ctx, const XML_Char *name, const XML_Char **attrs)
{
	struct find *f = ctx;

	(void)attrs;
	if (!f->done && strcmp(name, "UploadId") == 0)
		f->in = 1;
}

static void XMLCALL on_end(void *ctx, const XML_Char *name)
{
	struct find *f = ctx;

	if (f->in && strcmp(name, "UploadId") == 0)
		f->in = 0, f->done = 1;
}

static void XMLCALL on_text(void *ctx, const XML_Char *s, int len)
{
	struct find *f = ctx;

	if (!f->in)
		return;
	if (f->len + (size_t)len >= f->cap) {
		f->done = -1; /* too long: refused below */
		f->in = 0;
		return;
	}
	memcpy(f->out + f->len, s, (size_t)len);
	f->len += (size_t)len;
	f->out[f->len] = '\0';
}

static int upload_id(const char *doc, size_t len, char *out, size_t cap)
{
	XML_Parser p = XML_ParserCreate(NULL);
	struct find f = {.out = out, .cap = cap};
	int ok;

	if (!p)
		return -ENOMEM;
	out[0] = '\0';
	XML_SetUserData(p, &f);
	XML_SetElementHandler(p, on_start, on_end);
	XML_SetCharacterDataHandler(p, on_text);
	ok = XML_Parse(p, doc, (int)len, 1) == XML_STATUS_OK;
	XML_ParserFree(p);
	return ok && f.done == 1 && f.len ? 0 : -EBADMSG;
}

/* A POST of body: its status, or 0; why set unless 2xx. *kept is the request, for its
 * answer (the caller frees it). */
static long post(struct pub_s3 *s, const char *key, const struct sigv4_param *params,
                 size_t n_params, const struct sigv4_header *h, size_t n_h, const char *body,
                 size_t len, struct up_xfer **kept, char *why, size_t cap)
{
	struct up_xfer *x = pub_s3_xfer_new();
	int rc =
	    x ? pub_s3_prepare(s, x, "POST", key, params, n_params, h, n_h, body, len) : -ENOMEM;

	*kept = x;
	if (rc) {
		snprintf(why, cap, "%s", strerror(-rc));
		return 0;
	}
	return pub_s3_perform(x, why, cap);
}

static int create(struct pub_s3 *s, struct mp *m)
{
	static const struct sigv4_param uploads = {"uploads", NULL};
	static const struct sigv4_header h[] = {
	    {"Cache-Control", "public, max-age=31536000, immutable"},
	    {"Content-Type", "application/octet-stream"},
	    {"x-amz-checksum-algorithm", "SHA256"}};
	struct up_xfer *x = NULL;
	char why[700] = "";
	long code = post(s, m->it->key, &uploads, 1, h, 3, "", 0, &x, why, sizeof(why));
	int rc = code / 100 == 2 ? upload_id(x->answer ? x->answer : "", x->answer_len,
	                                     m->upload_id, sizeof(m->upload_id))
	                         : -EIO;

	if (code / 100 == 2 && rc)
		snprintf(why, sizeof(why), "no UploadId in the answer to CreateMultipartUpload");
	if (rc)
		pub_say("", s->display, m->it->key, why, false);
	pub_s3_xfer_free(x);
	return rc;
}

/* The sha256 of len bytes of fd at off, read a buffer at a time. 0 or -errno. */
static int hash_range(int fd, uint64_t off, uint64_t len, unsigned char sha[PUB_SHA256_LEN])
{
	unsigned char *buf = malloc(HASH_BUF);
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	int rc = buf && md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 ? 0 : -ENOMEM;

	for (uint64_t got = 0; rc == 0 && got < len;) {
		size_t want = len - got < HASH_BUF ? (size_t)(len - got) : HASH_BUF;
		ssize_t n = pread(fd, buf, want, (off_t)(off + got));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			rc = n < 0 ? -errno : -EIO; /* shorter than staged: never a short part */
		else if (EVP_DigestUpdate(md, buf, (size_t)n) != 1)
			rc = -EIO;
		else
			got += (uint64_t)n;
	}
	if (rc == 0 && EVP_DigestFinal_ex(md, sha, NULL) != 1)
		rc = -EIO;
	EVP_MD_CTX_free(md);
	free(buf);
	return rc;
}

/* Part i: hashed in one pass over its range, then sent from the file (on_read, at the
 * part's offset), so memory does not grow with --part-size or --uploads. */
static int start_part(struct pub_s3 *s, void *ctx, size_t i, struct up_xfer **out)
{
	struct mp *m = ctx;
	uint64_t off = (uint64_t)i * m->part_size;
	uint64_t len = m->it->size - off < m->part_size ? m->it->size - off : m->part_size;
	char number[24];
	struct sigv4_param p[2] = {{"partNumber", number}, {"uploadId", m->upload_id}};
	unsigned char sha[PUB_SHA256_LEN];
	struct up_xfer *x = pub_s3_xfer_new();
	int rc = x ? hash_range(m->fd, off, len, sha) : -ENOMEM;

	if (rc) {
		pub_say("", s->stage, m->it->key, strerror(-rc), false);
		goto fail;
	}
	EVP_EncodeBlock((unsigned char *)m->parts[i].b64, sha, PUB_SHA256_LEN);
	/* Its own descriptor: pub_s3_xfer_free closes it. */
	x->body = (struct up_body){.fd = fcntl(m->fd, F_DUPFD_CLOEXEC, 0), .base = off, .len = len};
	if (x->body.fd < 0) {
		rc = -errno;
		pub_say("", s->stage, m->it->key, strerror(-rc), false);
		goto fail;
	}
	snprintf(number, sizeof(number), "%zu", i + 1);
	rc = pub_s3_put_setup(s, x, m->it->key, p, 2, sha, NULL, false);
	if (rc == 0) {
		*out = x;
		return 0;
	}
	pub_say("", s->display, m->it->key, strerror(-rc), false);
fail:
	pub_s3_xfer_free(x);
	return rc;
}

static int end_part(struct pub_s3 *s, void *ctx, struct up_xfer *x, CURLcode res, unsigned tries)
{
	struct mp *m = ctx;
	char why[700], where[KEY_LEN + 32];
	int rc = pub_s3_outcome(s, x, res, tries, why, sizeof(why));

	if (rc == 0 && !x->etag[0]) {
		snprintf(why, sizeof(why), "the store gave the part no ETag");
		rc = -EIO;
	}
	if (rc == 0) {
		memcpy(m->parts[x->item].etag, x->etag, sizeof(x->etag));
		s->sent_bytes += x->body.len;
	} else if (rc != -EAGAIN) {
		snprintf(where, sizeof(where), "%s part %zu", m->it->key, x->item + 1);
		pub_say("", s->display, where, why, false);
	}
	return rc;
}

static size_t raw_put(char *buf, size_t at, const char *s)
{
	size_t n = strlen(s);

	memcpy(buf + at, s, n);
	return at + n;
}

/* Appends s to buf with XML's five escapes. */
static size_t xml_put(char *buf, size_t at, const char *s)
{
	for (; *s; s++) {
		const char *e = *s == '&'    ? "&amp;"
		                : *s == '<'  ? "&lt;"
		                : *s == '>'  ? "&gt;"
		                : *s == '"'  ? "&quot;"
		                : *s == '\'' ? "&apos;"
		                             : NULL;
		size_t n = e ? strlen(e) : 1;
		memcpy(buf + at, e ? e : s, n);
		at += n;
	}
	return at;
}

static int complete(struct pub_s3 *s, struct mp *m)
{
	struct sigv4_param p = {"uploadId", m->upload_id};
	/* Each part's line at most: the tags, a number, an ETag escaped, a checksum. */
	size_t cap = 128 + m->n_parts * (160 + 6 * S3_ETAG_MAX), at = 0;
	char *body = malloc(cap), why[700] = "", num[24];
	struct up_xfer *x = NULL;
	struct s3_list_result r = {0};
	long code;
	int rc = 0;

	if (!body)
		return -ENOMEM;
	at = raw_put(body, at, "<CompleteMultipartUpload>");
	for (size_t i = 0; i < m->n_parts; i++) {
		snprintf(num, sizeof(num), "%zu", i + 1);
		at = raw_put(body, at, "<Part><PartNumber>");
		at = raw_put(body, at, num);
		at = raw_put(body, at, "</PartNumber><ETag>");
		at = xml_put(body, at, m->parts[i].etag);
		at = raw_put(body, at, "</ETag><ChecksumSHA256>");
		at = xml_put(body, at, m->parts[i].b64);
		at = raw_put(body, at, "</ChecksumSHA256></Part>");
	}
	at = raw_put(body, at, "</CompleteMultipartUpload>");
	code = post(s, m->it->key, &p, 1, NULL, 0, body, at, &x, why, sizeof(why));
	/* S3 may answer 200 and still fail: the error is then the body. */
	if (code == 200 && x->answer_len &&
	    s3_list_parse(x->answer, x->answer_len, NULL, &r, NULL, 0) == 0 &&
	    r.kind == S3_DOC_ERROR) {
		snprintf(why, sizeof(why), "CompleteMultipartUpload: %s: %s", r.error.code,
		         r.error.message);
		code = 0;
	}
	if (code / 100 != 2) {
		pub_say("", s->display, m->it->key, why, false);
		rc = -EIO;
	}
	s3_list_result_free(&r);
	pub_s3_xfer_free(x);
	free(body);
	return rc;
}

/* Ends an upload that will not complete, so its parts are not kept (and paid for). */
static void abort_upload(struct pub_s3 *s, struct mp *m)
{
	struct sigv4_param p = {"uploadId", m->upload_id};
	char why[700] = "", line[900];
	long code = pub_s3_delete(s, m->it->key, &p, 1, why, sizeof(why));

	snprintf(line, sizeof(line), "%s; upload %s",
	         code / 100 == 2 || code == 404 ? "its multipart upload was aborted"
	                                        : "its multipart upload could not be aborted",
	         code / 100 == 2 || code == 404 ? m->upload_id : why);
	pub_say("", s->display, m->it->key, line, false);
}

/* The upload's line, kept up to date between parts; the last word is the batch of all. */
static void part_progress(struct pub_s3 *s, bool last)
{
	if (!last)
		pub_s3_progress(s, false);
}

static int one(struct pub_s3 *s, const struct up_item *it)
{
	struct mp m = {.it = it, .part_size = s->part_size};
	struct pub_s3_batch b = {
	    .start = start_part, .end = end_part, .progress = part_progress, .ctx = &m};
	char path[PATH_MAX];
	int rc;

	/* S3 takes at most MAX_PARTS parts: a larger object takes larger parts. */
	if ((it->size + m.part_size - 1) / m.part_size > MAX_PARTS)
		m.part_size = ((it->size + MAX_PARTS - 1) / MAX_PARTS + (1u << 20) - 1) &
		              ~(uint64_t)((1u << 20) - 1);
	m.n_parts = (size_t)((it->size + m.part_size - 1) / m.part_size);
	b.n = m.n_parts;
	snprintf(path, sizeof(path), "%s/%s", s->stage, it->key);
	m.fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (m.fd < 0) {
		rc = -errno;
		pub_say("", s->stage, it->key, strerror(-rc), false);
		return rc;
	}
	m.parts = calloc(m.n_parts, sizeof(*m.parts));
	rc = m.parts ? create(s, &m) : -ENOMEM;
	if (rc == 0) {
		rc = pub_s3_run(s, &b);
		if (rc == 0)
			rc = complete(s, &m);
		if (rc)
			abort_upload(s, &m);
		else
			s->uploaded++;
	}
	free(m.parts);
	close(m.fd);
	return rc;
}

int pub_s3_multipart(struct pub_s3 *s, const bool *go)
{
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < s->n_items; i++)
		if (go[i] && s->items[i].size > s->multipart_over)
			rc = one(s, &s->items[i]);
	return rc;
}

/*
 * `spoolfs gc` on S3: aborts the multipart uploads under the prefix begun before the grace
 * (a publish killed with SIGKILL leaves its upload open, and its parts are paid for until
 * it ends). One ListMultipartUploads page at a time (expat reads it), each stale upload
 * aborted with a DELETE of its id. Single-threaded.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <expat.h>

#include "fetch/s3/source_s3.h"
#include "publish/gc_i.h"
#include "publish/s3_i.h"

#define FIELD_MAX 1100 /* a key (1,024 bytes) and then some; an upload id */

struct upload {
	char key[FIELD_MAX], id[FIELD_MAX], initiated[64];
};

/* One page of a ListMultipartUploadsResult: the uploads, and where the next page starts. */
struct page {
	struct upload *v;
	size_t n, cap;
	char next_key[FIELD_MAX], next_id[FIELD_MAX];
	bool truncated;
	char *field; /* the text being read, or NULL */
	size_t field_cap, field_len;
	char text[FIELD_MAX];
	bool in_upload, bad;
};

static void XMLCALL on_start(void *ctx, const XML_Char *name, const XML_Char **attrs)
{
	struct page *p = ctx;

	(void)attrs;
	p->field = NULL;
	p->field_len = 0;
	p->text[0] = '\0';
	if (strcmp(name, "Upload") == 0) {
		if (p->n == p->cap) {
			size_t cap = p->cap ? 2 * p->cap : 64;
			struct upload *v = realloc(p->v, cap * sizeof(*v));
			if (!v) {
				p->bad = true;
				return;
			}
			p->v = v;
			p->cap = cap;
		}
		memset(&p->v[p->n], 0, sizeof(p->v[p->n]));
		p->in_upload = true;
	} else if (p->in_upload && strcmp(name, "Key") == 0) {
		p->field = p->v[p->n].key, p->field_cap = FIELD_MAX;
	} else if (p->in_upload && strcmp(name, "UploadId") == 0) {
		p->field = p->v[p->n].id, p->field_cap = FIELD_MAX;
	} else if (p->in_upload && strcmp(name, "Initiated") == 0) {
		p->field = p->v[p->n].initiated, p->field_cap = sizeof(p->v[p->n].initiated);
	} else if (!p->in_upload &&
	           (strcmp(name, "NextKeyMarker") == 0 || strcmp(name, "NextUploadIdMarker") == 0 ||
	            strcmp(name, "IsTruncated") == 0)) {
		p->field = name[4] == 'K' ? p->next_key : name[4] == 'U' ? p->next_id : p->text;
		p->field_cap = FIELD_MAX;
	}
}

static void XMLCALL on_end(void *ctx, const XML_Char *name)
{
	struct page *p = ctx;

	if (strcmp(name, "Upload") == 0 && p->in_upload) {
		p->in_upload = false;
		p->n++;
	} else if (strcmp(name, "IsTruncated") == 0) {
		p->truncated = strcmp(p->text, "true") == 0;
	}
	p->field = NULL;
}

static void XMLCALL on_text(void *ctx, const XML_Char *s, int len)
{
	struct page *p = ctx;

	if (!p->field)
		return;
	if (p->field_len + (size_t)len >= p->field_cap) {
		p->bad = true;
		return;
	}
	memcpy(p->field + p->field_len, s, (size_t)len);
	p->field_len += (size_t)len;
	p->field[p->field_len] = '\0';
}

/* "2026-12-06T16:00:00.000Z": seconds since the epoch, or 0 (then taken as new). */
static int64_t initiated_at(const char *s)
{
	struct tm tm = {0};
	const char *end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);

	return end ? (int64_t)timegm(&tm) : 0;
}

/* Reads one page (after the markers of the last) into p. 0 or -errno said. */
static int list_page(struct gc_store *g, struct page *p)
{
	char key_marker[FIELD_MAX], id_marker[FIELD_MAX], why[700] = "";
	/* The markers of the last page, when there was one; sorted as SigV4 signs them. */
	struct sigv4_param q[4] = {{"key-marker", key_marker},
	                           {"prefix", s3_source_prefix(g->s3->src)},
	                           {"upload-id-marker", id_marker},
	                           {"uploads", ""}};
	bool first = !p->next_key[0];
	struct up_xfer *x = pub_s3_xfer_new();
	XML_Parser xp = NULL;
	long code;
	int rc;

	snprintf(key_marker, sizeof(key_marker), "%s", p->next_key);
	snprintf(id_marker, sizeof(id_marker), "%s", p->next_id);
	p->n = 0;
	p->truncated = false;
	if (first)
		q[0] = q[1], q[1] = q[3];
	rc =
	    x ? pub_s3_prepare(g->s3, x, "GET", NULL, q, first ? 2 : 4, NULL, 0, NULL, 0) : -ENOMEM;
	if (rc)
		goto out;
	x->answer_max = 8u << 20;
	code = pub_s3_perform(x, why, sizeof(why));
	if (code / 100 != 2) {
		fprintf(stderr, "spoolfs gc: %s: ListMultipartUploads: %s\n", g->where, why);
		rc = -EIO;
		goto out;
	}
	p->next_key[0] = p->next_id[0] = '\0';
	xp = XML_ParserCreate(NULL);
	if (!xp) {
		rc = -ENOMEM;
		goto out;
	}
	XML_SetUserData(xp, p);
	XML_SetElementHandler(xp, on_start, on_end);
	XML_SetCharacterDataHandler(xp, on_text);
	if (XML_Parse(xp, x->answer ? x->answer : "", (int)x->answer_len, 1) != XML_STATUS_OK ||
	    p->bad || (p->truncated && !p->next_key[0])) {
		fprintf(stderr, "spoolfs gc: %s: ListMultipartUploads: not a listing\n", g->where);
		rc = -EIO;
	}
out:
	if (xp)
		XML_ParserFree(xp);
	pub_s3_xfer_free(x);
	return rc;
}

int gc_store_abort_uploads(struct gc_store *g, int64_t before, bool dry_run)
{
	const char *prefix = s3_source_prefix(g->s3->src);
	size_t plen = strlen(prefix), aborted = 0;
	struct page p = {0};
	int rc = 0;

	for (unsigned pages = 0; rc == 0 && pages < LIST_MAX_PAGES; pages++) {
		rc = list_page(g, &p);
		for (size_t i = 0; rc == 0 && i < p.n; i++) {
			struct upload *u = &p.v[i];
			struct sigv4_param id = {"uploadId", u->id};
			char why[700] = "";
			int64_t at = initiated_at(u->initiated);
			long code;
			if (strncmp(u->key, prefix, plen) != 0 || at == 0 || at > before)
				continue;
			if (dry_run) {
				printf("would abort the multipart upload of %s/%s begun %s\n",
				       g->where, u->key + plen, u->initiated);
				continue;
			}
			code = pub_s3_delete(g->s3, u->key + plen, &id, 1, why, sizeof(why));
			if (code / 100 != 2 && code != 404) {
				fprintf(stderr, "spoolfs gc: %s/%s: its multipart upload: %s\n",
				        g->where, u->key + plen, why);
				rc = -EIO;
			}
			aborted++;
		}
		if (!p.truncated)
			break;
	}
	if (rc == 0 && aborted)
		printf("spoolfs gc: %s: %zu stale multipart uploads aborted\n", g->where, aborted);
	free(p.v);
	return rc;
}

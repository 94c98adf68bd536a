/*
 * `spoolfs publish ... s3://`: the objects the store held already and this tree names again
 * (pub_s3_known marks them while the tree is staged) that are older than
 * PUB_REFRESH_AGE are copied onto themselves before the manifest is written, so that their
 * LastModified is now. `spoolfs gc` deletes only unreachable objects older than its grace
 * and takes their age from a listing made just before it deletes: an old object nobody
 * named, that this publish names again, is then young when gc looks (doc/publish.md
 * "Garbage collection"). Single-threaded, after the workers have ended.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "fetch/s3/source_s3.h"
#include "publish/s3_i.h"

/* CopyObject of key onto itself (REPLACE: S3 refuses a copy that changes nothing), with
 * the headers an object is uploaded with. 0 or -EIO said. */
static int copy_onto_itself(struct pub_s3 *s, CURL *esc, const char *bucket, size_t blen,
                            const char *key)
{
	char *full = NULL, *enc = NULL, *source = NULL, why[700] = "";
	struct sigv4_header h[4] = {{"Cache-Control", "public, max-age=31536000, immutable"},
	                            {"Content-Type", "application/octet-stream"},
	                            {"x-amz-copy-source", NULL},
	                            {"x-amz-metadata-directive", "REPLACE"}};
	struct up_xfer *x = NULL;
	long code = 0;
	int rc = -ENOMEM;

	if (asprintf(&full, "%s%s", s3_source_prefix(s->src), key) < 0) {
		full = NULL;
		goto out;
	}
	enc = curl_easy_escape(esc, full, 0);
	if (!enc || asprintf(&source, "/%.*s/%s", (int)blen, bucket, enc) < 0) {
		source = NULL;
		goto out;
	}
	h[2].value = source;
	x = pub_s3_xfer_new();
	rc = x ? pub_s3_prepare(s, x, "PUT", key, NULL, 0, h, 4, "", 0) : -ENOMEM;
	if (rc == 0)
		code = pub_s3_perform(x, why, sizeof(why));
	if (rc == 0 && code / 100 != 2) {
		pub_say("", s->display, key, why, false);
		rc = -EIO;
	}
out:
	if (rc == -ENOMEM)
		pub_say("", s->display, key, strerror(ENOMEM), false);
	pub_s3_xfer_free(x);
	curl_free(enc);
	free(source);
	free(full);
	return rc;
}

int pub_s3_refresh(struct pub_s3 *s)
{
	/* "s3://bucket[/prefix]": the copy source names the bucket. */
	const char *bucket = s->display + 5;
	size_t blen = strcspn(bucket, "/");
	int64_t old = (int64_t)time(NULL) - PUB_REFRESH_AGE;
	CURL *esc = curl_easy_init();
	size_t n = 0;
	int rc = esc ? 0 : -ENOMEM;

	for (size_t i = 0; rc == 0 && i < s->have.n; i++) {
		struct pub_s3_have *h = &s->have.v[i];
		if (!atomic_load(&h->named) || h->mtime > old || h->mtime == 0)
			continue;
		rc = copy_onto_itself(s, esc, bucket, blen, h->key);
		n++;
	}
	if (rc == 0 && n && s->tty)
		fprintf(stderr, "spoolfs publish: %s: %zu old objects named again were refreshed\n",
		        s->display, n);
	if (esc)
		curl_easy_cleanup(esc);
	return rc;
}

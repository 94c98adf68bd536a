/*
 * Release tags: the pointer's format and the mount's step from it to the manifest
 * (tag_pointer.h). A pointer is parsed with yajl's tree API and written with yajl_gen, so
 * a name is quoted the way JSON wants by a parser that is not ours.
 */
#include "fetch/source/tag_pointer.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yajl/yajl_gen.h>
#include <yajl/yajl_tree.h>

#include "util/hex.h"
#include "util/log.h"

bool source_tag_name_ok(const char *name, bool is_tag)
{
	size_t n = strlen(name);

	if (n == 0 || n > SOURCE_TAG_NAME_MAX || name[0] == '.' || strstr(name, "..") ||
	    strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") != n)
		return false;
	/* gc takes every top-level *.json for a manifest: a tag must never look like one. */
	return !is_tag ||
	       ((n < 5 || strcmp(name + n - 5, ".json") != 0) && strcmp(name, "objects") != 0);
}

/* The one field of the pointer named key, or NULL; *twice when it is given more than once. */
static yajl_val field(yajl_val top, const char *key, bool *twice)
{
	yajl_val v = NULL;

	for (size_t i = 0; i < top->u.object.len; i++) {
		if (strcmp(top->u.object.keys[i], key) != 0)
			continue;
		*twice |= v != NULL;
		v = top->u.object.values[i];
	}
	return v;
}

static const char *const fields[] = {"spoolfs_tag", "manifest", "sha256", "size"};

/* Fills t from a pointer's tree. NULL, or why it cannot be taken. */
static const char *read_fields(yajl_val top, struct source_tag *t)
{
	bool twice = false;
	yajl_val format = field(top, fields[0], &twice), name = field(top, fields[1], &twice);
	yajl_val sha = field(top, fields[2], &twice), size = field(top, fields[3], &twice);
	const char *s;

	/* A field this binary does not know might name more than the one manifest: gc would
	 * not keep what it names. */
	for (size_t i = 0; i < top->u.object.len; i++) {
		size_t k = 0;
		while (k < sizeof(fields) / sizeof(fields[0]) &&
		       strcmp(top->u.object.keys[i], fields[k]) != 0)
			k++;
		if (k == sizeof(fields) / sizeof(fields[0]))
			return "it has a field this binary does not know";
	}
	if (twice)
		return "a field is given twice";
	if (!YAJL_IS_INTEGER(format) || YAJL_GET_INTEGER(format) != SOURCE_TAG_FORMAT)
		return "\"spoolfs_tag\" is not 1 (a format this binary does not know)";
	s = YAJL_IS_STRING(name) ? YAJL_GET_STRING(name) : NULL;
	if (!s || !source_tag_name_ok(s, false))
		return "\"manifest\" is not a plain name (1 to 200 of A-Z a-z 0-9 . _ -, not"
		       " beginning with '.')";
	snprintf(t->manifest, sizeof(t->manifest), "%s", s);
	s = YAJL_IS_STRING(sha) ? YAJL_GET_STRING(sha) : NULL;
	if (!s || strlen(s) != 64 || strspn(s, "0123456789abcdefABCDEF") != 64)
		return "\"sha256\" is not 64 hex digits";
	for (size_t k = 0; k < 64; k++)
		t->sha256[k] = (char)(s[k] >= 'A' && s[k] <= 'F' ? s[k] | 0x20 : s[k]);
	t->sha256[64] = '\0';
	if (!YAJL_IS_INTEGER(size) || YAJL_GET_INTEGER(size) < 0)
		return "\"size\" is not a non-negative integer";
	t->size = (uint64_t)YAJL_GET_INTEGER(size);
	return NULL;
}

int source_tag_parse(const char *text, size_t len, struct source_tag *t, char *err, size_t err_len)
{
	char *copy, why[128] = "";
	const char *bad;
	yajl_val top;
	bool twice = false;
	int rc = 0;

	*t = (struct source_tag){0};
	/* A NUL in the text makes it no JSON: the loader says so. */
	if (len > SOURCE_TAG_TEXT_MAX || memchr(text, '\0', len))
		return 0;
	copy = malloc(len + 1);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, text, len);
	copy[len] = '\0';
	top = yajl_tree_parse(copy, why, sizeof(why));
	free(copy);
	if (!YAJL_IS_OBJECT(top) || !field(top, fields[0], &twice))
		goto out; /* no pointer: a manifest, or the loader's to refuse */
	bad = read_fields(top, t);
	if (bad) {
		snprintf(err, err_len, "a release tag this binary cannot take: %s", bad);
		rc = -EINVAL;
		goto out;
	}
	rc = 1;
out:
	yajl_tree_free(top);
	return rc;
}

int source_tag_format(const char *manifest, const void *data, size_t len, char **out,
                      size_t *out_len)
{
	char hex[UTIL_SHA256_HEX_LEN];
	const unsigned char *buf;
	size_t n = 0;
	yajl_gen g;
	int rc;

	*out = NULL;
	if (!source_tag_name_ok(manifest, false))
		return -EINVAL;
	rc = util_sha256_hex(data, len, hex);
	if (rc)
		return rc;
	g = yajl_gen_alloc(NULL);
	if (!g)
		return -ENOMEM;
	if (yajl_gen_map_open(g) != yajl_gen_status_ok ||
	    yajl_gen_string(g, (const unsigned char *)fields[0], strlen(fields[0])) !=
	        yajl_gen_status_ok ||
	    yajl_gen_integer(g, SOURCE_TAG_FORMAT) != yajl_gen_status_ok ||
	    yajl_gen_string(g, (const unsigned char *)fields[1], strlen(fields[1])) !=
	        yajl_gen_status_ok ||
	    yajl_gen_string(g, (const unsigned char *)manifest, strlen(manifest)) !=
	        yajl_gen_status_ok ||
	    yajl_gen_string(g, (const unsigned char *)fields[2], strlen(fields[2])) !=
	        yajl_gen_status_ok ||
	    yajl_gen_string(g, (const unsigned char *)hex, 64) != yajl_gen_status_ok ||
	    yajl_gen_string(g, (const unsigned char *)fields[3], strlen(fields[3])) !=
	        yajl_gen_status_ok ||
	    yajl_gen_integer(g, (long long)len) != yajl_gen_status_ok ||
	    yajl_gen_map_close(g) != yajl_gen_status_ok ||
	    yajl_gen_get_buf(g, &buf, &n) != yajl_gen_status_ok) {
		rc = -ENOMEM;
		goto out;
	}
	*out = malloc(n + 2);
	if (!*out) {
		rc = -ENOMEM;
		goto out;
	}
	memcpy(*out, buf, n);
	memcpy(*out + n, "\n", 2);
	*out_len = n + 1;
out:
	yajl_gen_free(g);
	return rc;
}

/* The length of url up to and with its last '/' before any query or fragment. */
static size_t dir_len(const char *url)
{
	size_t n = strcspn(url, "?#");

	while (n > 0 && url[n - 1] != '/')
		n--;
	return n;
}

int source_tag_follow(const struct source_options *opts, char **text, size_t *len, char **base_url,
                      int64_t *mtime, struct source_tag *t, char *err, size_t err_len)
{
	struct source_tag chained;
	char *url = NULL, *mtext = NULL, *mbase = NULL, hex[UTIL_SHA256_HEX_LEN], why[512];
	char shown[512];
	size_t d = dir_len(*base_url), mlen = 0;
	int64_t mmtime = 0;
	int rc = source_tag_parse(*text, *len, t, why, sizeof(why));

	util_redact_url(*base_url, shown, sizeof(shown));
	if (rc <= 0) {
		if (rc == -EINVAL)
			snprintf(err, err_len, "%s: %s", shown, why);
		return rc;
	}
	/* Its own name, for the log and status: the pointer URL's last segment, if plain. */
	snprintf(t->tag, sizeof(t->tag), "%.*s", (int)(strcspn(*base_url + d, "?#")),
	         *base_url + d);
	if (!source_tag_name_ok(t->tag, false))
		snprintf(t->tag, sizeof(t->tag), "?");
	/* Beside the pointer: its URL's directory, the name as it is (it needs no escaping),
	 * signed as the pointer was when opts sign. */
	if (asprintf(&url, "%.*s%s", (int)d, *base_url, t->manifest) < 0) {
		url = NULL;
		rc = -ENOMEM;
		goto out;
	}
	rc = source_manifest_read(url, opts, &mtext, &mlen, &mbase, &mmtime, why, sizeof(why));
	if (rc) {
		snprintf(err, err_len, "tag %s: %s", t->tag, why);
		goto out;
	}
	rc = source_tag_parse(mtext, mlen, &chained, why, sizeof(why));
	if (rc != 0) {
		snprintf(err, err_len,
		         "tag %s names %s, which is a release tag itself, not a manifest: a tag"
		         " must name a manifest (no chains)",
		         t->tag, t->manifest);
		rc = rc == -ENOMEM ? -ENOMEM : -EINVAL;
		goto out;
	}
	rc = util_sha256_hex(mtext, mlen, hex);
	if (rc)
		goto out;
	if (mlen != t->size || strcmp(hex, t->sha256) != 0) {
		snprintf(
		    err, err_len,
		    "tag %s names %s with sha256 %s (%" PRIu64 " bytes), but %s has sha256 %s"
		    " (%zu bytes): rewritten since it was tagged? Refused: a tag mounts exactly"
		    " the release it names",
		    t->tag, t->manifest, t->sha256, t->size, t->manifest, hex, mlen);
		rc = -EINVAL;
		goto out;
	}
	free(*text);
	free(*base_url);
	*text = mtext;
	*len = mlen;
	*base_url = mbase;
	*mtime = mmtime;
	mtext = mbase = NULL;
	rc = 1;
out:
	free(url);
	free(mtext);
	free(mbase);
	return rc;
}

/*
 * What `spoolfs gc` asks of a store, local or S3: list every key with its size and age,
 * read a manifest's text, delete keys. A local OUT_DIR is listed into the same sorted
 * struct pub_s3_list an S3 listing gives (keys relative to OUT_DIR), so that gc.c and
 * verify's walk see one kind of store. Single-threaded.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "fetch/s3/source_s3.h"
#include "publish/gc_i.h"
#include "publish/s3_i.h"

/* DeleteObjects takes at most this many keys a request. */
#define DELETE_BATCH 1000

static int cmp_key(const void *a, const void *b)
{
	return strcmp(((const struct pub_s3_have *)a)->key, ((const struct pub_s3_have *)b)->key);
}

/* Adds the regular files of dir (relative to the store, "" for its top) that are not
 * dot files; descends into subdirectories depth more levels. */
static int list_dir(struct gc_store *g, const char *dir, int depth, struct pub_s3_list *l)
{
	int fd =
	    openat(g->dir_fd, *dir ? dir : ".", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct dirent *d;
	DIR *dh;
	int rc = 0;

	if (fd < 0)
		return errno == ENOENT && *dir ? 0 : -errno;
	dh = fdopendir(fd);
	if (!dh) {
		close(fd);
		return -errno;
	}
	while (rc == 0 && (errno = 0, d = readdir(dh))) {
		char key[PATH_MAX];
		struct stat sb;
		if (d->d_name[0] == '.' && (!*dir || !d->d_name[1] || strcmp(d->d_name, "..") == 0))
			continue;
		if (fstatat(fd, d->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
			if (errno != ENOENT) /* gone meanwhile: nothing to keep or delete */
				rc = -errno;
			continue;
		}
		if ((size_t)snprintf(key, sizeof(key), "%s%s%s", dir, *dir ? "/" : "", d->d_name) >=
		    sizeof(key))
			continue;
		if (S_ISREG(sb.st_mode))
			rc = pub_s3_list_add(l, key, (uint64_t)sb.st_size, sb.st_mtime);
		else if (S_ISDIR(sb.st_mode) && depth > 0 && (*dir || strcmp(key, "objects") == 0))
			rc = list_dir(g, key, depth - 1, l);
	}
	if (rc == 0 && errno)
		rc = -errno;
	closedir(dh);
	return rc;
}

int gc_store_list(struct gc_store *g, struct pub_s3_list *l)
{
	int rc;

	if (g->s3)
		return pub_s3_list(g->s3, "", l);
	/* The top (manifests), objects/ and objects/ab/ (objects and temporary files). */
	rc = list_dir(g, "", 2, l);
	if (rc)
		fprintf(stderr, "spoolfs gc: %s: cannot be listed: %s\n", g->where, strerror(-rc));
	else if (l->n)
		qsort(l->v, l->n, sizeof(*l->v), cmp_key);
	return rc;
}

static int delete_local(struct gc_store *g, const char *key)
{
	if (unlinkat(g->dir_fd, key, 0) == 0 || errno == ENOENT)
		return 0;
	fprintf(stderr, "spoolfs gc: %s/%s: %s\n", g->where, key, strerror(errno));
	return -errno;
}

/* Appends s to *b (grown as needed), XML-escaped unless raw. */
static int put_text(char **b, size_t *len, size_t *cap, const char *s, bool raw)
{
	for (; *s; s++) {
		const char *rep = raw         ? NULL
		                  : *s == '&' ? "&amp;"
		                  : *s == '<' ? "&lt;"
		                  : *s == '>' ? "&gt;"
		                              : NULL;
		size_t n = rep ? strlen(rep) : 1;
		if (*len + n + 1 > *cap) {
			size_t c = *cap ? 2 * *cap + n : 4096;
			char *nb = realloc(*b, c);
			if (!nb)
				return -ENOMEM;
			*b = nb;
			*cap = c;
		}
		memcpy(*b + *len, rep ? rep : s, n);
		*len += n;
		(*b)[*len] = '\0';
	}
	return 0;
}

static int put_raw(char **b, size_t *len, size_t *cap, const char *s)
{
	return put_text(b, len, cap, s, true);
}

static int put_escaped(char **b, size_t *len, size_t *cap, const char *s)
{
	return put_text(b, len, cap, s, false);
}

/* One DeleteObjects request (Quiet: the answer names only the keys that failed). */
static int delete_batch(struct gc_store *g, const char *const *keys, size_t n)
{
	const char *prefix = s3_source_prefix(g->s3->src);
	unsigned char md5[EVP_MAX_MD_SIZE];
	char b64[32], why[700] = "", *body = NULL;
	size_t len = 0, cap = 0;
	struct sigv4_param p = {"delete", ""};
	struct sigv4_header h[2] = {{"Content-MD5", b64}, {"Content-Type", "application/xml"}};
	struct up_xfer *x = NULL;
	long code;
	int rc = 0;

	/* The markup as it is, the keys (the prefix's included) escaped. */
	static const char head[] = "<Delete xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
	                           "<Quiet>true</Quiet>";
	rc = put_raw(&body, &len, &cap, head);
	for (size_t i = 0; i < n && rc == 0; i++) {
		rc = put_raw(&body, &len, &cap, "<Object><Key>");
		if (rc == 0)
			rc = put_escaped(&body, &len, &cap, prefix);
		if (rc == 0)
			rc = put_escaped(&body, &len, &cap, keys[i]);
		if (rc == 0)
			rc = put_raw(&body, &len, &cap, "</Key></Object>");
	}
	if (rc == 0)
		rc = put_raw(&body, &len, &cap, "</Delete>");
	if (rc)
		goto out;
	/* S3 refuses a DeleteObjects without an integrity header. */
	if (EVP_Digest(body, len, md5, NULL, EVP_md5(), NULL) != 1) {
		rc = -ENOMEM;
		goto out;
	}
	EVP_EncodeBlock((unsigned char *)b64, md5, 16);
	x = pub_s3_xfer_new();
	rc = x ? pub_s3_prepare(g->s3, x, "POST", NULL, &p, 1, h, 2, body, len) : -ENOMEM;
	if (rc)
		goto out;
	code = pub_s3_perform(x, why, sizeof(why));
	if (code / 100 != 2) {
		fprintf(stderr, "spoolfs gc: %s: DeleteObjects: %s\n", g->where, why);
		rc = -EIO;
	} else if (x->answer && memmem(x->answer, x->answer_len, "<Error>", 7)) {
		fprintf(stderr, "spoolfs gc: %s: DeleteObjects: some keys were not deleted: %.*s\n",
		        g->where, (int)(x->answer_len < 300 ? x->answer_len : 300), x->answer);
		rc = -EIO;
	}
out:
	pub_s3_xfer_free(x);
	free(body);
	return rc;
}

int gc_store_delete(struct gc_store *g, const char *const *keys, size_t n)
{
	int rc = 0;

	for (size_t i = 0; i < n && rc == 0; i += DELETE_BATCH)
		rc = g->s3 ? delete_batch(g, keys + i, n - i < DELETE_BATCH ? n - i : DELETE_BATCH)
		           : 0;
	for (size_t i = 0; i < n && rc == 0 && !g->s3; i++)
		rc = delete_local(g, keys[i]);
	return rc;
}

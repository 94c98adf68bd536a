/*
 * `spoolfs publish --tag NAME`: after the manifest is written (locally: fsync'd and renamed
 * into place; in S3: its PUT answered 2xx with its checksum checked), a pointer object NAME
 * beside it names that manifest by name, sha256 and size (fetch/source/tag_pointer.h holds
 * the format). A tag is the one mutable name of a store: written over the old one (locally
 * by rename, in S3 by an unconditional PUT with Cache-Control: no-cache), so a reader sees
 * the old pointer or the new one, and a mount checks the manifest against it either way.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fetch/s3/source_s3.h"
#include "fetch/source/tag_pointer.h"
#include "publish/s3_i.h"

int pub_tag_option(struct publish_options *o, const char *name)
{
	if (!source_tag_name_ok(name, true)) {
		fprintf(stderr,
		        "spoolfs publish: --tag %.*s: a tag is 1 to %d of A-Z a-z 0-9 . _ -, not"
		        " beginning with '.', without \"..\", not ending in \".json\" (gc takes"
		        " those for manifests), not \"objects\"\n",
		        SOURCE_TAG_NAME_MAX + 1, name, SOURCE_TAG_NAME_MAX);
		return 2;
	}
	if (o->tags.n == PUB_TAGS_MAX) {
		fprintf(stderr, "spoolfs publish: at most %d --tag\n", PUB_TAGS_MAX);
		return 2;
	}
	o->tags.names[o->tags.n++] = name;
	return 0;
}

int pub_tag_check_manifest(const struct publish_options *o)
{
	size_t n = strlen(o->manifest);

	if (!o->tags.n)
		return 0;
	/* The manifest must be what gc counts as one (a top-level *.json), and a name the
	 * pointer may hold. */
	if (!source_tag_name_ok(o->manifest, false) || n < 6 ||
	    strcmp(o->manifest + n - 5, ".json") != 0) {
		fprintf(stderr,
		        "spoolfs publish: --tag needs a --manifest NAME of A-Z a-z 0-9 . _ -"
		        " ending in \".json\"\n");
		return 2;
	}
	return 0;
}

int pub_read_whole(const char *dir, const char *name, char **data, size_t *len)
{
	char path[PATH_MAX];
	struct stat sb;
	size_t got = 0;
	int fd, rc = 0;

	*data = NULL;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &sb) != 0)
		rc = -errno;
	else if (!(*data = malloc((size_t)sb.st_size + 1)))
		rc = -ENOMEM;
	/* A file shorter than fstat said is an error, not a smaller manifest. */
	while (rc == 0 && got < (size_t)sb.st_size) {
		ssize_t n = read(fd, *data + got, (size_t)sb.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			rc = n < 0 ? -errno : -EIO;
		else
			got += (size_t)n;
	}
	*len = got;
	if (fd >= 0)
		close(fd);
	if (rc) {
		pub_say("", dir, name, strerror(-rc), false);
		free(*data);
		*data = NULL;
	}
	return rc;
}

/* The pointer to o->manifest, whose bytes are in dir. 0 or -errno, said. */
static int pointer(const struct publish_options *o, const char *dir, char **body, size_t *len)
{
	char *data = NULL;
	size_t n = 0;
	int rc = pub_read_whole(dir, o->manifest, &data, &n);

	if (rc == 0)
		rc = source_tag_format(o->manifest, data, n, body, len);
	if (rc && rc != -EIO && data)
		pub_say("", dir, o->manifest, strerror(-rc), false);
	free(data);
	return rc;
}

/* Writes body as out/name by a temporary file renamed over it: readers see the old tag or
 * the new one. 0 or -errno, said. */
static int write_local(const char *out, const char *name, const char *body, size_t len, mode_t mode)
{
	char tmp[PATH_MAX], final[PATH_MAX];
	size_t done = 0;
	int fd, rc = 0;

	snprintf(tmp, sizeof(tmp), "%s/.%s.tmp.XXXXXX", out, name);
	snprintf(final, sizeof(final), "%s/%s", out, name);
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		pub_say("", out, "", strerror(-rc), false);
		return rc;
	}
	while (rc == 0 && done < len) {
		ssize_t n = write(fd, body + done, len - done);
		if (n < 0 && errno != EINTR)
			rc = -errno;
		done += n > 0 ? (size_t)n : 0;
	}
	if (rc == 0 && (fchmod(fd, mode) != 0 || fsync(fd) != 0))
		rc = -errno;
	close(fd);
	if (rc == 0 && rename(tmp, final) != 0)
		rc = -errno;
	if (rc) {
		unlink(tmp);
		pub_say("", out, name, strerror(-rc), false);
	}
	return rc;
}

int pub_tags_write_local(const struct publish_options *o, const char *out, mode_t mode)
{
	char *body = NULL;
	size_t len = 0;
	int rc;

	if (!o->tags.n)
		return 0;
	rc = pointer(o, out, &body, &len);
	for (size_t i = 0; rc == 0 && i < o->tags.n; i++)
		rc = write_local(out, o->tags.names[i], body, len, mode);
	/* The renames are durable once the directory is. */
	if (rc == 0)
		rc = pub_sync_dir(out);
	for (size_t i = 0; rc == 0 && !o->quiet && i < o->tags.n; i++)
		printf("spoolfs publish: tagged %s/%s: %s\n", out, o->tags.names[i], o->manifest);
	free(body);
	return rc;
}

int pub_tags_write_s3(struct pub_s3 *s, const struct publish_options *o)
{
	char *body = NULL, why[700] = "";
	size_t len = 0;
	int rc;

	if (!o->tags.n)
		return 0;
	/* The staged bytes are those the manifest's PUT sent, checked by the store. */
	rc = pointer(o, s->stage, &body, &len);
	for (size_t i = 0; rc == 0 && i < o->tags.n; i++) {
		long code;
		if (s->dry_run) {
			printf("would tag %s/%s: %s\n", s->display, o->tags.names[i], o->manifest);
			continue;
		}
		/* Unconditional: moving a tag is what it is for. */
		code = pub_s3_put_bytes(s, o->tags.names[i], body, len, "no-cache", false, why,
		                        sizeof(why));
		if (code / 100 != 2) {
			pub_say("", s->display, o->tags.names[i], why, false);
			rc = -EIO;
			break;
		}
		printf("spoolfs publish: tagged %s/%s: %s\n", s->display, o->tags.names[i],
		       o->manifest);
	}
	free(body);
	return rc;
}

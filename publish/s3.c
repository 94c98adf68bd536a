/*
 * The S3 route of `spoolfs publish`: opens the store with the mount's client (options,
 * credential chain), publishes the tree into a private staging OUT_DIR exactly as a local
 * publish does, uploads it (upload_s3.c), and removes the stage.
 *
 * Why a stage rather than streaming from SRC: the objects' names are their digests, which
 * are known only once their bytes (a pack's members, a nested manifest's entries) have been
 * read; a stage lets the upload be planned, resumed and checked from files that do not
 * change under it, with every rule of the local publish (walk, packs, trust) unchanged. It
 * costs one local copy of the tree: on the test machine 1 GiB stages in about 2 s of
 * writing to page cache, against about 10 s to send it at 100 MB/s (doc/publish.md).
 */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "fetch/s3/source_s3.h"
#include "publish/publish_i.h"

int pub_s3_option(struct publish_s3_options *s3, int c, const char *arg)
{
	unsigned long n;
	char *end;

	s3->given = true;
	switch (c) {
	case 'E':
		s3->endpoint = arg;
		break;
	case 'R':
		s3->region = arg;
		break;
	case 'P':
		s3->profile = arg;
		break;
	case 'A':
		s3->role_arn = arg;
		break;
	case 'S':
		s3->path_style = true;
		break;
	case 'I':
		s3->if_absent = true;
		break;
	case 'D':
		s3->dry_run = true;
		break;
	case 'U':
		n = strtoul(arg, &end, 10);
		if (arg[0] < '0' || arg[0] > '9' || *end || n < 1 || n > PUB_MAX_UPLOADS) {
			fprintf(stderr, "spoolfs publish: --uploads takes 1 to %d\n",
			        PUB_MAX_UPLOADS);
			return -EINVAL;
		}
		s3->uploads = (unsigned)n;
		break;
	default:
		return -EINVAL;
	}
	return 0;
}

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

int pub_s3_publish(const struct publish_options *o)
{
	struct s3_options so = {.source = o->out,
	                        .endpoint = o->s3.endpoint,
	                        .region = o->s3.region,
	                        .profile = o->s3.profile,
	                        .role_arn = o->s3.role_arn,
	                        .path_style = o->s3.path_style};
	struct pub_s3 s = {.uploads = o->s3.uploads ? o->s3.uploads : 8,
	                   .if_absent = o->s3.if_absent,
	                   .dry_run = o->s3.dry_run,
	                   .tty = isatty(STDERR_FILENO) == 1};
	struct publish_options staged = *o;
	const char *tmp = getenv("TMPDIR");
	char err[512] = "", stage[PATH_MAX] = "", *real = NULL, *display = NULL;
	int rc;

	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		fprintf(stderr, "spoolfs publish: cannot initialise libcurl\n");
		return -EIO;
	}
	rc = s3_source_open(&so, &s.src, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "spoolfs publish: %s\n", err);
		goto out;
	}
	rc = s3_source_start(s.src);
	if (rc)
		goto out;
	/* Without its last '/': messages add one before the key. */
	display = strdup(s3_source_display(s.src));
	if (!display) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t n = strlen(display); n > 5 && display[n - 1] == '/'; n--)
		display[n - 1] = '\0';
	s.display = display;
	s.max_tries = s3_source_net(s.src)->max_tries;
	/* Not /tmp by default: it is often memory, and a tree may be large. */
	snprintf(stage, sizeof(stage), "%s/spoolfs-publish.XXXXXX", tmp && *tmp ? tmp : "/var/tmp");
	if (!mkdtemp(stage) || !(real = realpath(stage, NULL))) {
		rc = -errno;
		pub_say("", stage, "", strerror(-rc), false);
		stage[0] = '\0';
		goto out;
	}
	s.stage = real;
	staged.out = real;
	staged.quiet = true;
	staged.s3.given = false;
	rc = publish_run(&staged);
	if (rc == 0)
		rc = pub_s3_upload(&s, o->manifest);
out:
	/* Private to this run (mode 0700): nothing in it is anyone else's. */
	if (stage[0])
		nftw(stage, remove_one, 16, FTW_DEPTH | FTW_PHYS);
	free(s.items);
	free(real);
	free(display);
	s3_source_free(s.src);
	curl_global_cleanup();
	return rc;
}

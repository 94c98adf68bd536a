/*
 * The S3 route of `spoolfs publish`: opens the store with the mount's client (options,
 * credential chain), publishes the tree into a private staging OUT_DIR exactly as a local
 * publish does, uploads it (upload_s3.c), and removes the stage.
 *
 * Why a stage rather than streaming from SRC: the objects' names are their digests, which
 * are known only once their bytes (a pack's members, a nested manifest's entries) have been
 * read; a stage lets the upload be planned, resumed and checked from files that do not
 * change under it, with every rule of the local publish (walk, packs, trust) unchanged. It
 * costs a local copy of each new object: the store is listed first, and a file whose object
 * is there is hashed only. Measured on the 2-core test machine under load: staging 1 GiB
 * took 4.4-5.0 s and 1.7 s of CPU, where hashing it alone (which the names need anyway)
 * took 0.8 s of CPU; sending 1 GiB at 100 MB/s takes 10 s (doc/publish.md).
 */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "fetch/s3/source_s3.h"
#include "publish/s3_i.h"
#include "util/size.h"

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
	case 'Z':
		if (util_parse_size(arg, &s3->part_size) != 0 || s3->part_size < (5u << 20) ||
		    s3->part_size > (5ull << 30)) {
			fprintf(stderr, "spoolfs publish: --part-size takes 5M to 5G\n");
			return -EINVAL;
		}
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

int pub_s3_open(const struct publish_s3_options *o, const char *dest, struct pub_s3 *s)
{
	struct s3_options so = {.source = dest,
	                        .endpoint = o->endpoint,
	                        .region = o->region,
	                        .profile = o->profile,
	                        .role_arn = o->role_arn,
	                        .path_style = o->path_style};
	char err[512] = "";
	int rc;

	*s = (struct pub_s3){.uploads = o->uploads ? o->uploads : 8,
	                     .part_size = o->part_size ? o->part_size : PUB_PART_SIZE,
	                     .multipart_over = o->part_size ? o->part_size : PUB_PART_SIZE,
	                     .if_absent = o->if_absent,
	                     .dry_run = o->dry_run,
	                     .tty = isatty(STDERR_FILENO) == 1};
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		fprintf(stderr, "spoolfs: cannot initialise libcurl\n");
		return -EIO;
	}
	s->curl = true;
	rc = s3_source_open(&so, &s->src, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "spoolfs: %s\n", err);
		goto fail;
	}
	rc = s3_source_start(s->src);
	if (rc)
		goto fail;
	/* Without its last '/': messages add one before the key. */
	s->display = strdup(s3_source_display(s->src));
	if (!s->display) {
		rc = -ENOMEM;
		goto fail;
	}
	for (size_t n = strlen(s->display); n > 5 && s->display[n - 1] == '/'; n--)
		s->display[n - 1] = '\0';
	s->max_tries = s3_source_net(s->src)->max_tries;
	return 0;
fail:
	pub_s3_close(s);
	return rc;
}

void pub_s3_close(struct pub_s3 *s)
{
	bool curl = s->curl;

	free(s->items);
	pub_s3_list_free(&s->have);
	free(s->display);
	s3_source_free(s->src);
	*s = (struct pub_s3){0};
	if (curl)
		curl_global_cleanup();
}

static void on_signal(int sig)
{
	(void)sig;
	pub_s3_interrupted = 1;
}

int pub_s3_publish(const struct publish_options *o)
{
	struct pub_s3 s;
	struct publish_options staged = *o;
	const char *tmp = getenv("TMPDIR");
	char stage[PATH_MAX] = "", *real = NULL;
	int rc = pub_s3_open(&o->s3, o->out, &s);

	if (rc)
		return rc;
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
	/* The store is listed first: a file whose object is there already is hashed only,
	 * never copied into the stage. */
	staged.known_ctx = &s;
	staged.existing_out = &s.existing;
	rc = pub_s3_begin(&s);
	/* Into an empty store every file is copied while it is hashed, in one pass. */
	staged.known = s.have.n ? pub_s3_known : NULL;
	if (rc == 0)
		rc = publish_run(&staged);
	if (rc == 0) {
		/* From here on an interrupt ends the uploads cleanly: multipart ones are
		 * aborted, the stage removed. (Before, the default kills: nothing is sent.) */
		struct sigaction sa = {.sa_handler = on_signal};
		sigemptyset(&sa.sa_mask);
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
		rc = pub_s3_upload(&s, o->manifest);
	}
out:
	/* Private to this run (mode 0700): nothing in it is anyone else's. */
	if (stage[0])
		nftw(stage, remove_one, 16, FTW_DEPTH | FTW_PHYS);
	free(real);
	pub_s3_close(&s);
	return rc;
}

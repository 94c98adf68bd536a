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
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>

#include "fetch/s3/source_s3.h"
#include "publish/s3_i.h"
#include "util/size.h"

static const struct option store_options[PUB_S3_STORE_OPTIONS] = {
    {"endpoint", required_argument, NULL, 'E'}, {"region", required_argument, NULL, 'R'},
    {"profile", required_argument, NULL, 'P'},  {"role-arn", required_argument, NULL, 'A'},
    {"path-style", no_argument, NULL, 'S'},
};

void pub_s3_longs(const struct option *own, size_t n_own, struct option *out)
{
	memcpy(out, own, n_own * sizeof(*own));
	memcpy(out + n_own, store_options, sizeof(store_options));
	out[n_own + PUB_S3_STORE_OPTIONS] = (struct option){0};
}

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

#define STAGE_PREFIX "spoolfs-publish."

/*
 * Removes the stages of publishes that died (SIGKILL, a crash) from dir: a directory
 * STAGE_PREFIX<pid>.XXXXXX that is the euid's, whose pid is gone, and whose lock no live
 * publish holds (a pid of another PID namespace may look gone; its lock does not). Only
 * then is it ours to remove: mode 0700, nothing in it is anyone else's.
 */
static void sweep_stages(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		char path[PATH_MAX], *end;
		struct stat sb;
		long pid;
		int fd;
		if (strncmp(de->d_name, STAGE_PREFIX, strlen(STAGE_PREFIX)) != 0)
			continue;
		pid = strtol(de->d_name + strlen(STAGE_PREFIX), &end, 10);
		if (pid <= 0 || *end != '.' || pid == (long)getpid() ||
		    !(kill((pid_t)pid, 0) != 0 && errno == ESRCH))
			continue;
		if (fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
		    !S_ISDIR(sb.st_mode) || sb.st_uid != geteuid())
			continue;
		fd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (flock(fd, LOCK_EX | LOCK_NB) == 0 &&
		    snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) < (int)sizeof(path))
			nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS);
		close(fd);
	}
	closedir(d);
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

/*
 * SIGINT and SIGTERM from before the stage is made until it is removed: the first stops
 * the publish cleanly (no new file staged, uploads cut, multipart ones aborted, the stage
 * removed); SA_RESETHAND makes a second one kill, as a user pressing Ctrl-C twice means.
 * An inherited SIG_IGN (nohup, a script's background job) is kept. old gets what was.
 */
static void catch_signals(struct sigaction old[2])
{
	static const int sigs[2] = {SIGINT, SIGTERM};
	struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESETHAND};

	sigemptyset(&sa.sa_mask);
	for (int i = 0; i < 2; i++) {
		sigaction(sigs[i], NULL, &old[i]);
		if (old[i].sa_handler != SIG_IGN)
			sigaction(sigs[i], &sa, NULL);
	}
}

static void restore_signals(const struct sigaction old[2])
{
	sigaction(SIGINT, &old[0], NULL);
	sigaction(SIGTERM, &old[1], NULL);
}

int pub_s3_publish(const struct publish_options *o)
{
	struct pub_s3 s;
	struct publish_options staged = *o;
	const char *tmp = getenv("TMPDIR");
	char stage[PATH_MAX] = "", *real = NULL;
	struct sigaction old[2];
	int lock_fd = -1, rc;

	pub_s3_interrupted = 0;
	catch_signals(old);
	rc = pub_s3_open(&o->s3, o->out, &s);
	if (rc) {
		restore_signals(old);
		return rc;
	}
	/* Not /tmp by default: it is often memory, and a tree may be large. */
	tmp = tmp && *tmp ? tmp : "/var/tmp";
	sweep_stages(tmp);
	snprintf(stage, sizeof(stage), "%s/" STAGE_PREFIX "%ld.XXXXXX", tmp, (long)getpid());
	if (!mkdtemp(stage) || !(real = realpath(stage, NULL))) {
		rc = -errno;
		pub_say("", stage, "", strerror(-rc), false);
		stage[0] = '\0';
		goto out;
	}
	/* Held until the stage is gone: a sweep by another publish leaves it alone. */
	lock_fd = open(real, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (lock_fd < 0 || flock(lock_fd, LOCK_EX) != 0) {
		rc = -errno;
		pub_say("", real, "", strerror(-rc), false);
		goto out;
	}
	s.stage = real;
	staged.out = real;
	staged.quiet = true;
	staged.tags.n = 0; /* written into the store, after its manifest */
	staged.s3.given = false;
	staged.interrupted = &pub_s3_interrupted;
	/* The store is listed first: a file whose object is there already is hashed only,
	 * never copied into the stage. */
	staged.known_ctx = &s;
	staged.totals = &s.totals;
	rc = pub_s3_begin(&s);
	/* Into an empty store every file is copied while it is hashed, in one pass. */
	staged.known = s.have.n ? pub_s3_known : NULL;
	if (rc == 0)
		rc = publish_run(&staged);
	if (rc == 0) {
		rc = pub_s3_upload(&s, o->manifest);
		if (rc == 0 && !pub_s3_interrupted)
			rc = pub_tags_write_s3(&s, o);
	} else if (rc == -EINTR || pub_s3_interrupted) {
		pub_say("", s.display, "", "interrupted while staging: nothing was sent", false);
	}
out:
	/* Private to this run (mode 0700): nothing in it is anyone else's. */
	if (stage[0])
		nftw(stage, remove_one, 16, FTW_DEPTH | FTW_PHYS);
	if (lock_fd >= 0)
		close(lock_fd);
	free(real);
	pub_s3_close(&s);
	restore_signals(old);
	return rc;
}

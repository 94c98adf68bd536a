/*
 * spoolfs: start-up and shut-down. Everything that can fail for a bad source or bad
 * options fails here, before the mount exists, with a message and a non-zero exit. After
 * the mount is up nothing exits: requests fail with an errno instead.
 *
 * Order: options, manifest into the index, mount, daemonise, then the transfer thread
 * (threads do not survive the fork), then the FUSE loop. Shut-down reverses it: the loop
 * ends (unmount or SIGTERM/SIGINT), the engine stops and answers every parked reader, the
 * session unmounts, and a cache directory we created is removed.
 */
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fetch/cache/cache_dir.h"
#include "util/log.h"
#include "util/trusted_path.h"
#include "fetch/source/manifest_load.h"
#include "fetch/source/read_orders.h"
#include "util/size.h"
#include "fetch/source/source.h"
#include "fetch/source/tag_pointer.h"
#include "daemon/abort.h"
#include "daemon/kept.h"
#include "daemon/mountinfo.h"
#include "daemon/options.h"
#include "daemon/overlay.h"
#include "util/output.h"
#include "daemon/run_dir.h"
#include "daemon/shared_counters.h"
#include "daemon/status.h"
#include "fs/handles.h"
#include "fs/listing.h"
#include "fs/open.h"
#include "fs/passthrough.h"
#include "fs/prefetch.h"
#include "fs/session.h"
#include "daemon/metrics.h"
#include "fs/notify.h"
#include "daemon/supervisor.h"
#include "publish/publish.h"
#include "util/supervise.h"

/*
 * Every object read in the session keeps its spool file open (readers splice from it), so
 * the soft descriptor limit, often 1024, would cap a session at about that many objects.
 */
static void raise_fd_limit(void)
{
	struct rlimit lim;

	if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
		lim.rlim_cur = lim.rlim_max;
		setrlimit(RLIMIT_NOFILE, &lim);
	}
}

/*
 * Spools of objects no version names (a bare URL) serve only the session that fetched them,
 * and the mounts sharing its directory then: one that an earlier session kept (or left in
 * a crash) would serve a mount that starts now the bytes of then, the server's version of
 * then (a second mount could adopt its records before the first one started afresh). So
 * the first mount of a directory forgets them, before any other mount can start.
 */
static void forget_unversioned_spools(struct fs_session *s)
{
	char **keys = NULL, *name = NULL;
	size_t n = 0, forgotten = 0;

	if (index_records_keys(s->records, &keys, &n) != 0)
		return; /* kept, and started afresh by reuse_spool's rules as before */
	for (size_t i = 0; i < n; i++) {
		/* A key that holds a password or a signature was written by a spoolfs before
		 * keys hid them: no object of ours has it now, and the secret should go. */
		if ((!flight_key_names_version(keys[i]) || util_url_has_secret(keys[i])) &&
		    flight_spool_name(keys[i], &name) == 0) {
			if ((unlinkat(cache_dir_spool_fd(s->cache), name, 0) == 0 ||
			     errno == ENOENT) &&
			    index_records_forget(s->records, keys[i]) == 0)
				forgotten++;
			free(name);
		}
		free(keys[i]);
	}
	free(keys);
	if (forgotten)
		util_log(UTIL_LOG_INFO,
		         "forgot %zu cached objects that name no version (no sha256 or etag), or"
		         " whose keys hold a secret (kept by an older spoolfs)",
		         forgotten);
}

/*
 * The namespace database, in the run directory: made by the first serving process,
 * reopened as it is by the later ones (index_open_file).
 */
static int open_namespace(struct fs_session *s)
{
	char path[PATH_MAX];

	if (!s->daemon.run_dir)
		return index_open(&s->idx);
	snprintf(path, sizeof(path), "%s/namespace.db", s->daemon.run_dir);
	return index_open_file(path, s->generation == 0, &s->idx);
}

/*
 * The cache directory (fetch/cache/cache_dir.h), then the index in it. While this is the only
 * mount of the directory it holds the directory's lock exclusive: no other mount can start
 * until forget_unversioned_spools is done.
 */
static int open_cache(struct fs_session *s)
{
	const char *tmp = getenv("TMPDIR");
	char err[4200] = "";
	int rc;

	/* The session's own goes in its run directory, which the supervisor removes whole. */
	if (s->opts.cache_dir)
		rc = cache_dir_open(s->opts.cache_dir, true, &s->cache, err, sizeof(err));
	else
		rc = cache_dir_open(s->daemon.run_dir ? s->daemon.run_dir
		                    : tmp && *tmp     ? tmp
		                                      : "/var/tmp",
		                    false, &s->cache, err, sizeof(err));
	if (rc)
		goto refused;
	rc = index_records_open_at(cache_dir_fd(s->cache), cache_dir_path(s->cache), &s->records,
	                           err, sizeof(err));
	if (rc) {
		fprintf(stderr, "spoolfs: %s\n", err);
		return rc;
	}
	rc = open_namespace(s);
	if (rc) {
		fprintf(stderr, "spoolfs: cannot open the namespace: %s\n",
		        rc == -EPROTO ? "a newer spoolfs made it (unmount and mount again to "
		                        "serve with this one)"
		                      : strerror(-rc));
		return rc;
	}
	if (!cache_dir_alone(s->cache))
		return 0;
	if (s->opts.cache_dir)
		forget_unversioned_spools(s);
	/* Other mounts may start now: they take the lock shared too. */
	rc = cache_dir_share(s->cache, err, sizeof(err));
	if (rc == 0)
		return 0;
refused:
	fprintf(stderr, "spoolfs: %s %s\n", s->opts.cache_dir ? "--cache-dir" : "cache directory",
	        err);
	return rc;
}

/* The network settings of the requests a mount or a lookup waits for: the manifest and S3
 * listings stall and retry by the downloads' options. */
static struct fetch_net blocking_net(const struct fs_session *s)
{
	return (struct fetch_net){.ca_file = s->opts.net.ca_file,
	                          .proxy = s->opts.net.proxy,
	                          .netrc_file = s->opts.net.netrc_file,
	                          .connect_timeout_s = 10,
	                          .stall_timeout_s = s->opts.net.stall_timeout_s,
	                          .max_tries = s->opts.net.retries,
	                          .allow_link_local = s->opts.net.allow_link_local};
}

/*
 * Object URLs under the manifest's directory are the ones a mirror also has, and the only
 * ones of its bucket a manifest in a bucket may name: sets s->daemon.manifest_dir from the
 * manifest's URL (after redirects) and the confinement rules. 0 or -ENOMEM.
 */
static int manifest_context(struct fs_session *s, const char *base_url,
                            struct manifest_load_options *load_opts)
{
	size_t dir_len = strcspn(base_url, "?#");

	while (dir_len > 0 && base_url[dir_len - 1] != '/')
		dir_len--;
	s->daemon.manifest_dir = strndup(base_url, dir_len);
	if (!s->daemon.manifest_dir)
		return -ENOMEM;
	if (s->listing.s3) {
		load_opts->confine_origin = s3_source_origin(s->listing.s3);
		load_opts->confine_dir = s->daemon.manifest_dir;
	}
	return 0;
}

/* Nested manifests are fetched as this one was, under its rules, at first lookup. Takes
 * *base_url. */
static int keep_nested_rules(struct fs_session *s, const struct source_options *src,
                             const struct manifest_load_options *load_opts, char **base_url)
{
	s->listing.nested_src = *src;
	s->listing.nested_src.max_bytes = 0;
	s->listing.nested_rules = *load_opts;
	s->listing.nested_rules.hidden_symlinks = 0;
	s->listing.manifest_url = *base_url;
	*base_url = NULL;
	return listing_flights_create(&s->listing.flights);
}

/* The release a tag led to ("NAME sha256 HEX tag TAG", or NULL: none): logged, kept in the
 * index for a later serving process, shown by /.spoolfs/stats. 0 or -errno. */
static int keep_release(struct fs_session *s, const struct source_tag *t)
{
	char *release = NULL;
	int rc = 0;

	if (t) {
		util_log(UTIL_LOG_INFO, "serving %s (sha256 %s) via tag %s", t->manifest, t->sha256,
		         t->tag);
		if (asprintf(&release, "%s sha256 %s tag %s", t->manifest, t->sha256, t->tag) < 0)
			return -ENOMEM;
		rc = index_meta_put(s->idx, "release", release);
	} else if (index_meta_get(s->idx, "release", &release) != 0) {
		release = NULL; /* a manifest mounted by its own name */
	}
	free(s->daemon.release);
	s->daemon.release = release;
	return rc;
}

/* What a manifest's session needs, for a later serving process: the namespace is in the
 * database already, never fetched again; only the manifest's URL (kept there) matters, and
 * the release a tag led to: the same release for the session, whatever the tag says now. */
static int restore_manifest(struct fs_session *s)
{
	struct source_options src = {.net = blocking_net(s)};
	struct manifest_load_options load_opts = {
	    .outside_symlinks = (enum manifest_outside_symlinks)s->opts.outside_symlinks};
	char *base_url = NULL;
	int rc;

	if (s->listing.s3) {
		src.sign = s3_source_sign;
		src.sign_ctx = s->listing.s3;
	}
	rc = index_meta_get(s->idx, "manifest_url", &base_url);
	if (rc == 0)
		rc = keep_release(s, NULL);
	if (rc == 0)
		rc = manifest_context(s, base_url, &load_opts);
	if (rc == 0)
		rc = keep_nested_rules(s, &src, &load_opts, &base_url);
	free(base_url);
	return rc;
}

/* Loads the manifest's text into the empty namespace, with the mount's options. */
static int load_text(struct fs_session *s, const char *text, size_t len, const char *base_url,
                     int64_t mtime, struct manifest_load_options *load_opts)
{
	char err[1024] = "";
	/* Entries without an mtime are as old as the manifest, else the mount: never 1970. */
	int rc = index_set_default_mtime(s->idx, mtime > 0 ? mtime : (int64_t)time(NULL));

	if (rc)
		return rc;
	rc = source_manifest_load_text(s->idx, text, len, base_url, load_opts, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "spoolfs: bad manifest: %s\n", err[0] ? err : strerror(-rc));
		return rc;
	}
	if (load_opts->hidden_symlinks)
		util_log(UTIL_LOG_INFO,
		         "%u symlinks lead out of the mount: left out "
		         "(--outside-symlinks=hide)",
		         load_opts->hidden_symlinks);
	return fs_read_order_keep(s, load_opts);
}

/*
 * Reads the manifest and loads it, or, in a kept cache directory that holds the namespace
 * this manifest loaded into before, takes that (daemon/kept.h). In a private bucket
 * (s->listing.s3 open, --manifest KEY) the manifest is the object KEY under the source's
 * prefix, fetched with a signed request, and its objects must lie under its own prefix there
 * (they are signed too).
 */
static int load_manifest(struct fs_session *s)
{
	struct source_options src = {.net = blocking_net(s),
	                             .max_bytes = s->daemon.max_manifest_size};
	struct manifest_load_options load_opts = {
	    .outside_symlinks = (enum manifest_outside_symlinks)s->opts.outside_symlinks};
	char *text = NULL, *base_url = NULL, *key_url = NULL, err[1024] = "";
	struct daemon_kept kept;
	struct source_tag tag;
	size_t len = 0;
	int64_t mtime = 0;
	bool from_copy;
	int rc, followed;

	if (s->listing.s3) {
		rc = s3_source_key_url(s->listing.s3, s->opts.manifest, &key_url);
		if (rc)
			goto out;
		src.sign = s3_source_sign;
		src.sign_ctx = s->listing.s3;
	}
	rc = source_manifest_read(key_url ? key_url : s->opts.source, &src, &text, &len, &base_url,
	                          &mtime, err, sizeof(err));
	/* A release tag: the manifest it names, verified, is what this session serves. */
	if (rc == 0)
		rc =
		    source_tag_follow(&src, &text, &len, &base_url, &mtime, &tag, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "spoolfs: %s\n", err);
		goto out;
	}
	followed = rc;
	if (s->opts.read_order_name &&
	    !source_read_order_name_ok(s->opts.read_order_name, strlen(s->opts.read_order_name))) {
		fprintf(stderr,
		        "spoolfs: --read-order-name: a name is 1 to %d of A-Z a-z 0-9 . _ -\n",
		        READ_ORDER_NAME_MAX);
		rc = -EINVAL;
		goto out;
	}
	if (!s->opts.no_read_order)
		load_opts.read_order_name =
		    s->opts.read_order_name ? s->opts.read_order_name : READ_ORDER_DEFAULT;
	rc = manifest_context(s, base_url, &load_opts);
	if (rc)
		goto out;
	daemon_kept_prepare(
	    s,
	    &(struct source_kept_inputs){
	        .text = text, .len = len, .base_url = base_url, .mtime = mtime, .opts = &load_opts},
	    &kept);
	/* Before the release is kept: the copy replaces the whole namespace. */
	rc = daemon_kept_restore(s, &kept);
	from_copy = rc == 1;
	if (rc >= 0)
		rc = keep_release(s, followed == 1 ? &tag : NULL);
	if (rc == 0 && !from_copy)
		rc = load_text(s, text, len, base_url, mtime, &load_opts);
	if (rc)
		goto out;
	/* The copy leaves out the session's own meta: the release, and the URL put below. */
	if (!from_copy)
		daemon_kept_save(s, &kept);
	rc = index_meta_put(s->idx, "manifest_url", base_url);
	if (rc == 0)
		rc = keep_nested_rules(s, &src, &load_opts, &base_url);
out:
	free(key_url);
	free(base_url);
	free(text);
	return rc;
}

/*
 * Lists the bucket's root now: a wrong region, bad credentials, a missing bucket or an
 * unreachable endpoint fail the mount with one line instead of a half-working mount.
 */
static int open_bucket(struct fs_session *s)
{
	struct s3_options opts = {.source = s->opts.source,
	                          .endpoint = s->opts.s3.endpoint,
	                          .region = s->opts.s3.region,
	                          .profile = s->opts.s3.profile,
	                          .role_arn = s->opts.s3.role_arn,
	                          .requester_pays = s->opts.s3.requester_pays,
	                          .expected_bucket_owner = s->opts.s3.expected_bucket_owner,
	                          .net = blocking_net(s),
	                          .path_style = s->opts.s3.path_style,
	                          .no_sign = s->opts.s3.no_sign,
	                          .request_timeout_s = 0};
	char err[512] = "";
	int rc;

	rc = s3_source_open(&opts, &s->listing.s3, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "spoolfs: %s\n", err);
		return rc;
	}
	if (s->opts.manifest) /* a manifest in the bucket: no listing */
		return s->generation ? restore_manifest(s) : load_manifest(s);
	rc = listing_flights_create(&s->listing.flights);
	if (rc) {
		fprintf(stderr, "spoolfs: cannot start: %s\n", strerror(-rc));
		return rc;
	}
	/* A later serving process: what was listed is in the database; the rest is listed
	 * when first used, as before. */
	if (s->generation)
		return 0;
	/* A listing dates its objects (LastModified), not its directories: those show the mount. */
	rc = index_set_default_mtime(s->idx, (int64_t)time(NULL));
	if (rc == 0)
		rc = index_begin_lazy(s->idx);
	if (rc)
		return rc;
	rc = s3_source_list(s->listing.s3, "", s->idx, INDEX_ROOT_INO, err, sizeof(err));
	if (rc)
		fprintf(stderr, "spoolfs: %s\n", err);
	return rc;
}

static int load_namespace(struct fs_session *s)
{
	char shown[512];

	fs_notify_status("%s %s",
	                 strncmp(s->opts.source, "s3://", 5) == 0 && !s->opts.manifest ? "listing"
	                                                                               : "fetching",
	                 util_redact_url(s->opts.source, shown, sizeof(shown)));
	if (strncmp(s->opts.source, "s3://", 5) == 0)
		return open_bucket(s);
	return s->generation ? restore_manifest(s) : load_manifest(s);
}

/*
 * Opens each file: mirror's directory now, as the user named it (a symlink to it is
 * followed: the user chose it). Its objects are opened beneath this descriptor, so what a
 * manifest names cannot leave it. A directory that cannot be opened is a usage error.
 */
static int open_mirror_dirs(struct fs_session *s)
{
	char shown[512], *path = NULL;
	CURLU *h = NULL;
	int rc = 0;

	if (!s->opts.net.n_mirrors || s->listing.s3)
		return 0;
	s->daemon.mirror_dir_fds =
	    malloc(s->opts.net.n_mirrors * sizeof(*s->daemon.mirror_dir_fds));
	if (!s->daemon.mirror_dir_fds)
		return -ENOMEM;
	for (unsigned i = 0; i < s->opts.net.n_mirrors; i++)
		s->daemon.mirror_dir_fds[i] = -1;
	for (unsigned i = 0; i < s->opts.net.n_mirrors && rc == 0; i++) {
		const char *url = s->opts.net.mirrors[i];
		if (strncasecmp(url, "file:", 5) != 0)
			continue;
		const char *why = NULL;
		h = curl_url();
		if (!h) {
			rc = -ENOMEM;
			break;
		}
		if (curl_url_set(h, CURLUPART_URL, url, 0) != CURLUE_OK ||
		    curl_url_get(h, CURLUPART_PATH, &path, CURLU_URLDECODE) != CURLUE_OK)
			why = "not a local file: URL";
		else if ((s->daemon.mirror_dir_fds[i] =
		              open(path, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
			why = strerror(errno);
		if (why) {
			fprintf(stderr, "spoolfs: --mirror %s: cannot open its directory: %s\n",
			        util_redact_url(url, shown, sizeof(shown)), why);
			rc = -EINVAL;
		}
		curl_free(path);
		path = NULL;
		curl_url_cleanup(h);
		h = NULL;
	}
	return rc;
}

static void close_mirror_dirs(struct fs_session *s)
{
	for (unsigned i = 0; s->daemon.mirror_dir_fds && i < s->opts.net.n_mirrors; i++)
		if (s->daemon.mirror_dir_fds[i] >= 0)
			close(s->daemon.mirror_dir_fds[i]);
	free(s->daemon.mirror_dir_fds);
	s->daemon.mirror_dir_fds = NULL;
}

/* The engine records a finished object in the index at once, and fetches a chunk that failed
 * its hash again at once, not at its next wake-up. */
static void kick_engine(void *ctx, struct flight *f)
{
	struct fs_session *s = ctx;

	engine_kick(s->engine, f);
}

/*
 * The run directory's progress/ (fetch/engine/progress_note.h): with --cache-dir, the
 * serving process that replaces a dead one resumes its downloads from what that one wrote,
 * not only from what it had made durable. -1 without one (it is never needed for a spool in
 * the run directory: a restart starts that afresh), or when it cannot be made.
 */
static int open_progress_dir(struct fs_session *s)
{
	int fd;

	if (!s->opts.cache_dir || s->daemon.run_dir_fd < 0)
		return -1;
	if (mkdirat(s->daemon.run_dir_fd, "progress", 0700) != 0 && errno != EEXIST) {
		util_log(UTIL_LOG_WARN,
		         "cannot make the run directory's progress/ (%s): a restart "
		         "fetches again what was not recorded",
		         strerror(errno));
		return -1;
	}
	fd = openat(s->daemon.run_dir_fd, "progress",
	            O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		util_log(UTIL_LOG_WARN,
		         "cannot open the run directory's progress/ (%s): a restart "
		         "fetches again what was not recorded",
		         strerror(errno));
	return fd;
}

static int start_fetching(struct fs_session *s)
{
	struct engine_config cfg;
	int rc;

	rc = flight_table_create(cache_dir_spool_fd(s->cache), &s->flights);
	if (rc)
		return rc;
	flight_table_on_failed(s->flights, fs_on_flight_failed, s);
	flight_table_on_complete(s->flights, kick_engine, s);
	/* A chunk that failed its hash is fetched again now, not at the engine's next turn. */
	flight_table_on_refetch(s->flights, kick_engine, s);
	/* Else a session that reads more objects than its fd limit fails the rest. */
	flight_table_close_idle_spools(s->flights, s->opts.cache_dir != NULL);
	engine_config_defaults(&cfg);
	cfg.stall_timeout_s = s->opts.net.stall_timeout_s;
	cfg.max_tries = s->opts.net.retries;
	cfg.max_transfers = s->opts.net.max_transfers;
	cfg.spec_max = s->opts.prefetch_requests ? s->opts.prefetch_requests : 16;
	cfg.net.ca_file = s->opts.net.ca_file;
	cfg.net.proxy = s->opts.net.proxy;
	cfg.net.netrc_file = s->opts.net.netrc_file;
	cfg.net.allow_link_local = s->opts.net.allow_link_local;
	cfg.durable = s->opts.cache_dir != NULL; /* only a named directory outlives the session */
	cfg.cache_max_size = s->cache_max_size;
	cfg.records = s->records;
	cfg.lease_dirfd = s->opts.cache_dir ? cache_dir_fd(s->cache) : -1;
	cfg.progress_dirfd = s->daemon.progress_dirfd = open_progress_dir(s);
	cfg.stats = s->daemon.shared_counters ? &s->daemon.shared_counters->engine : NULL;
	if (s->listing.s3) {
		cfg.sign = s3_source_sign;
		cfg.sign_ctx = s->listing.s3;
		cfg.creds_expired = s3_source_creds_expired;
		cfg.creds_generation = s3_source_creds_generation;
		cfg.error_is_expired = s3_error_is_expired_creds;
	}
	rc = engine_create(&cfg, &s->engine);
	if (rc)
		return rc;
	return fetch_objects_create(
	    &(struct fetch_objects_config){
	        .idx = s->idx,
	        /* Only a named directory holds what earlier sessions fetched. */
	        .records = s->opts.cache_dir ? s->records : NULL,
	        .flights = s->flights,
	        .engine = s->engine,
	        .manifest_dir = s->daemon.manifest_dir,
	        .mirrors = s->opts.net.mirrors,
	        .n_mirrors = s->opts.net.n_mirrors,
	        .mirror_dir_fds = s->daemon.mirror_dir_fds,
	    },
	    &s->resolver);
}

void daemon_set_log_level(const char *name, bool debug)
{
	if (debug || (name && strcmp(name, "debug") == 0))
		util_log_set_level(UTIL_LOG_DEBUG);
	else if (name && strcmp(name, "warn") == 0)
		util_log_set_level(UTIL_LOG_WARN);
	else if (name && strcmp(name, "error") == 0)
		util_log_set_level(UTIL_LOG_ERROR);
	else
		util_log_set_level(UTIL_LOG_INFO);
}

static int add_mount_options(struct fuse_args *args, const char *source)
{
	char shown[512], opt[700];

	/* fsname shows in /proc/mounts: no credentials there. Commas would split options. */
	util_redact_url(source, shown, sizeof(shown));
	for (char *p = shown; *p; p++)
		if (*p == ',' || *p == '\\')
			*p = '_';
	/* Last, so that they win over a "rw" given before (daemon_options_parse drops dev and
	 * suid): nobody's set-user-ID binary or device node comes from a store. */
	snprintf(opt, sizeof(opt),
	         "-oro,nosuid,nodev,default_permissions,subtype=spoolfs,fsname=%s", shown);
	return fuse_opt_add_arg(args, opt) == 0 ? 0 : -ENOMEM;
}

/* The command line as the process shows it once scrubbed (main), for the supervisor's. */
static char **shown_argv;
static int shown_argc;

/*
 * The mount is up: this process splits. The child goes on as the first serving process
 * (generation 0, with everything loaded); this one execs the supervisor (supervisor.c),
 * which keeps the device's descriptor and restarts serving processes on it, and holds
 * nothing else. Returns 0 in the child; the parent returns only when its exec failed.
 */
static int start_supervisor(struct fs_session *s, char **argv_copy, size_t argc_copy,
                            const char *cwd, int ledger_fd)
{
	const char *head[DAEMON_RUN_ARGV] = {s->daemon.run_dir, s->mount_path, s->mount_dev, cwd};
	const char **strings = calloc(DAEMON_RUN_ARGV + argc_copy, sizeof(*strings));
	int ctl[2] = {-1, -1}, memfd = -1, exe = -1, rc = -ENOMEM;
	char pid_text[32], arg0[] = "spoolfs", arg1[] = "__supervise";
	char **argv = calloc((size_t)shown_argc + 3, sizeof(*argv));
	sigset_t block, old;
	pid_t pid;

	if (!strings || !argv)
		goto out;
	/* ps shows the supervisor with the command line as scrubbed (no secret), for operators. */
	argv[0] = arg0;
	argv[1] = arg1;
	argv[2] = pid_text;
	for (int i = 1; i < shown_argc; i++)
		argv[2 + i] = shown_argv[i];
	memcpy(strings, head, sizeof(head));
	for (size_t i = 0; i < argc_copy; i++)
		strings[DAEMON_RUN_ARGV + i] = argv_copy[i];
	/* The command line, secrets included, goes to each serving process on a descriptor:
	 * never in an argv, which every local user can read. */
	memfd = memfd_create("spoolfs-args", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (memfd < 0 || pipe2(ctl, O_CLOEXEC) != 0) {
		rc = -errno;
		goto out;
	}
	rc = util_strings_write(memfd, strings, DAEMON_RUN_ARGV + argc_copy);
	if (rc)
		goto out;
	fcntl(memfd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL);
	exe = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	if (exe < 0) {
		rc = -errno;
		goto out;
	}
	/* The supervisor's signals are blocked from before the fork until its signalfd takes
	 * them (exec keeps the mask and what is pending): a stop sent meanwhile is not lost. */
	daemon_supervisor_signals(&block);
	sigprocmask(SIG_BLOCK, &block, &old);
	pid = fork();
	if (pid < 0) {
		rc = -errno;
		sigprocmask(SIG_SETMASK, &old, NULL);
		goto out;
	}
	if (pid == 0) {
		char err[512];
		sigprocmask(SIG_SETMASK, &old, NULL);
		s->daemon.ctl_fd = ctl[1];
		ctl[1] = -1;
		/* The records' sqlite locks stayed with the parent, which execs the supervisor. */
		rc = index_records_reopen_at(s->records, cache_dir_fd(s->cache),
		                             cache_dir_path(s->cache), err, sizeof(err));
		if (rc)
			util_log(UTIL_LOG_ERROR, "%s", err);
		goto out;
	}
	snprintf(pid_text, sizeof(pid_text), "%ld", (long)pid);
	int fds[] = {
	    fuse_session_fd(s->se),      memfd, ctl[0], exe, ledger_fd, s->daemon.run_lock_fd,
	    s->daemon.shared_counters_fd};
	_Static_assert(sizeof(fds) / sizeof(fds[0]) == DAEMON_RUN_FD_COUNT, "one per fd");
	rc = util_fds_place(fds, DAEMON_RUN_FD_COUNT, DAEMON_RUN_FD_DEV);
	if (rc == 0) {
		fexecve(DAEMON_RUN_FD_EXE, argv, environ);
		rc = -errno;
	}
	/* No supervisor: the child serves on, as a mount without one did. */
	util_log(UTIL_LOG_ERROR, "cannot start the supervisor: %s", strerror(-rc));
	int status = 0;
	waitpid(pid, &status, 0);
	_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
out:
	if (ctl[0] >= 0)
		close(ctl[0]);
	if (ctl[1] >= 0)
		close(ctl[1]);
	if (memfd >= 0)
		close(memfd);
	if (exe >= 0)
		close(exe);
	free(strings);
	free(argv);
	return rc;
}

/* A later serving process takes the connection over (handover.c): INIT is replayed, and
 * the kernel resends what the dead one had read. Passthrough is as the first process
 * settled it: the ledger says how the kernel holds each inode the dead ones left open. */
static int take_over(struct fs_session *s)
{
	int rc;

	/* Tests: a serving process that hangs before it serves (--start-timeout ends it). */
	while (getenv("SPOOLFS_TEST_SERVE_HANG"))
		pause();
	rc = fs_handover_load(s);
	if (rc == 0)
		fs_passthrough_note_replayed_init(s);
	if (rc && rc != -ENOENT) {
		util_log(UTIL_LOG_ERROR, "cannot read the recorded INIT: %s", strerror(-rc));
		return rc;
	}
	/* Without a record the first process died before replying to INIT: the kernel
	 * resends it too (where it can resend at all). */
	if (rc == -ENOENT)
		s->handover.init_resend = true;
	rc = fs_handover_resend(s);
	if (rc)
		util_log(UTIL_LOG_WARN, "the kernel refused to resend requests: %s", strerror(-rc));
	return 0;
}

static int run_session(struct fs_session *s, struct fuse_args *args, char **argv_copy,
                       size_t argc_copy, const char *cwd, int ledger_fd)
{
	struct fuse_loop_config *loop = NULL;
	int rc = -EIO, abort_rc;
	char device[32];

	s->se = fuse_session_new(args, &fs_ops, sizeof(fs_ops), s);
	if (!s->se)
		goto out;
	if (fuse_set_signal_handlers(s->se) != 0)
		goto out_session;
	if (s->generation) {
		/* The mount exists: its descriptor is ours from the supervisor. */
		snprintf(device, sizeof(device), "/dev/fd/%d", DAEMON_RUN_FD_DEV);
		if (fuse_session_mount(s->se, device) != 0)
			goto out_signals;
		s->daemon.was_mounted = true;
	} else {
		/* Canonical before the mount: afterwards, resolving it would ask this daemon. */
		s->mount_path = realpath(s->opts.mountpoint, NULL);
		if (fuse_session_mount(s->se, s->opts.mountpoint) != 0)
			goto out_signals;
		s->daemon.was_mounted = true;
		/* Now, while this mount is surely the one on top: see daemon_abort_connection. */
		if (!s->mount_path ||
		    daemon_mount_device(s->mount_path, s->mount_dev, sizeof(s->mount_dev))) {
			s->mount_dev[0] = '\0';
			util_log(UTIL_LOG_WARN,
			         "%s is not in the mount table: a stop cannot abort "
			         "requests still queued in the kernel",
			         s->opts.mountpoint);
		}
	}
	rc = fs_passthrough_install(s);
	if (rc) {
		util_log(UTIL_LOG_ERROR, "cannot route FUSE device I/O: %s", strerror(-rc));
		goto out_unmount;
	}
	if (s->generation) {
		rc = take_over(s);
		if (rc)
			goto out_unmount;
	} else {
		/* Before the daemon splits off: the command returns once the overlay is up. */
		rc = daemon_overlay_start_mounter(s);
		if (rc) {
			util_log(UTIL_LOG_ERROR, "cannot start the overlay's mount: %s",
			         strerror(-rc));
			goto out_unmount;
		}
		if (fuse_daemonize(s->opts.log.foreground) != 0)
			goto out_unmount;
		if (s->mount_path && s->daemon.run_dir && !getenv("SPOOLFS_NO_SUPERVISOR")) {
			rc = start_supervisor(s, argv_copy, argc_copy, cwd, ledger_fd);
			if (rc)
				util_log(
				    UTIL_LOG_WARN,
				    "cannot start the supervisor (%s): this mount ends with its"
				    " process",
				    strerror(-rc));
		}
	}
	/* Daemonised, stderr is /dev/null: operators look in the journal (or the log file). */
	if (!s->opts.log.foreground && !s->opts.log.log_file)
		util_log_use_syslog();
	rc = fs_replier_start(s);
	if (rc == 0)
		rc = fs_opener_start(s);
	if (rc == 0)
		rc = fs_inval_start(s);
	if (rc == 0)
		rc = fs_page_drop_start(s);
	if (rc == 0)
		rc = flight_table_start_hasher(s->flights);
	if (rc == 0)
		rc = engine_start(s->engine);
	if (rc == 0 && s->listing.s3)
		rc = s3_source_start(s->listing.s3);
	/* Before the walk prefetch: its walks may queue listings ahead from their start. */
	if (rc == 0)
		rc = fs_list_ahead_start(s);
	if (rc == 0)
		rc = fs_prefetch_start(s);
	if (rc) {
		util_log(UTIL_LOG_ERROR, "cannot start the transfer thread: %s", strerror(-rc));
		goto out_engine; /* each stop is a no-op for what did not start */
	}
	rc = daemon_metrics_start(s);
	if (rc) {
		util_log(UTIL_LOG_ERROR, "cannot start the metrics writer: %s", strerror(-rc));
		goto out_engine;
	}
	rc = daemon_overlay_watch_start(s);
	if (rc) {
		util_log(UTIL_LOG_ERROR, "cannot watch the overlay: %s", strerror(-rc));
		goto out_engine;
	}
	if (s->generation)
		util_log(UTIL_LOG_INFO, "serving %s (generation %llu)", s->opts.mountpoint,
		         (unsigned long long)s->generation);
	else
		util_log(UTIL_LOG_INFO, "mounted on %s", s->opts.mountpoint);
	loop = fuse_loop_cfg_create();
	if (!loop) {
		rc = -ENOMEM;
		goto out_engine;
	}
	fuse_loop_cfg_set_idle_threads(loop, 16);
	/* A lookup in a lazily listed S3 directory holds its worker while the listing runs
	 * (and so does every lookup waiting for the same listing): with libfuse's default of
	 * 10 workers, ten slow listings froze every other operation of the mount. Reads never
	 * hold one (they are answered later), so the workers are for such waits alone. */
	fuse_loop_cfg_set_max_threads(loop, FS_MAX_WORKERS);
	rc = fuse_session_loop_mt(s->se, loop);
	atomic_store(&s->loop_ended, true);
	fs_notify_stopping();
	/* The overlay over this mount goes first (when a signal, not its unmount, stopped us). */
	daemon_overlay_watch_stop(s);
	daemon_overlay_unmount(s);
	/* Before anything below waits on a kernel invalidation (see daemon/abort.c). */
	abort_rc = daemon_abort_connection(s);
	if (abort_rc)
		util_log(UTIL_LOG_WARN, "cannot abort the FUSE connection of %s: %s", s->mount_path,
		         strerror(-abort_rc));
	/* libfuse reports the signal that ended the loop; SIGTERM/SIGINT/SIGHUP are a clean stop.
	 */
	if (rc == SIGTERM || rc == SIGINT || rc == SIGHUP)
		rc = 0;
	rc = rc == 0 ? 0 : -EIO;
	fuse_loop_cfg_destroy(loop);
out_engine:
	daemon_overlay_watch_stop(s); /* a no-op after the loop's stop */
	/* Before the engine: its thread starts flights. Writes the records of what was read. */
	fs_prefetch_stop(s);
	fs_list_ahead_stop(s); /* after the walks that may queue it; before the index closes */
	/* Answers every parked reader before the session goes away. */
	engine_stop(s->engine);
	flight_table_stop_hasher(s->flights);
	fs_opener_stop(s); /* after the threads that answer hash lists' waiters */
	fs_replier_stop(s);
	fs_page_drop_stop(s);   /* after the replier: a drop may wait for a page being answered */
	fs_inval_stop(s);       /* after the engine and the hasher, the threads that fail flights */
	daemon_metrics_stop(s); /* last: its final write has the session's final counts */
	fs_handles_free_all(s);
out_unmount:
	/* While the connection lives, libfuse detaches whatever is topmost at the path: not a
	 * mount made over ours since, which ours then stays under until the device's last
	 * close below ends it (libfuse 3.14 frees its copy of the path only in its unmount:
	 * that one string is left to the exit). Once the connection is gone it only closes. */
	if (!s->mount_dev[0] || daemon_connection_gone(s) || daemon_mount_still_ours(s))
		fuse_session_unmount(s->se);
out_signals:
	fuse_remove_signal_handlers(s->se);
out_session:
	fuse_session_destroy(s->se);
	s->se = NULL;
out:
	return rc;
}

/*
 * Without --cache-max-size a named cache directory would grow until the disk is full and
 * the runner's builds fail: it is bounded to leave a share of its filesystem free
 * (cache_dir_default_bound), said once so an operator knows what to raise.
 */
static void set_default_cache_bound(struct fs_session *s)
{
	uint64_t held = 0, bound;
	size_t n = 0;

	if (index_records_usage(s->records, &held, NULL, 0, &n) != 0 ||
	    cache_dir_default_bound_of(s->cache, held, &bound) != 0) {
		util_log(UTIL_LOG_WARN, "cannot size %s's filesystem: the cache is unbounded",
		         s->opts.cache_dir);
		return;
	}
	s->cache_max_size = bound;
	util_log(UTIL_LOG_INFO,
	         "cache bound %" PRIu64 " MiB: what leaves %d%% of %s's filesystem free (at least"
	         " 1 GiB); --cache-max-size sets another",
	         bound >> 20, CACHE_DIR_RESERVE_SHARE, s->opts.cache_dir);
}

/*
 * An ordinary user's mount (through fusermount3) works, without what only root may do:
 * passthrough (the kernel's backing-file ioctl needs CAP_SYS_ADMIN) and raising the
 * mount's readahead (a root-only sysfs file). Both are off from the start, said once each
 * at mount rather than found out at the first open. (A root without those rights, in a
 * container, still finds out then: each is also turned off the first time it fails.)
 */
static void drop_root_features(struct fs_session *s)
{
	if (geteuid() == 0)
		return;
	if (!s->opts.no_passthrough) {
		s->opts.no_passthrough = 1;
		util_log(UTIL_LOG_INFO,
		         "passthrough reads are off: they need root (complete objects"
		         " are read through FUSE's page cache)");
	}
	atomic_store(&s->readahead_tuned, true);
	util_log(UTIL_LOG_INFO, "readahead stays at the kernel's default: raising it needs root");
}

/*
 * `spoolfs __serve GENERATION`, started by the supervisor: the run directory, the mount
 * and the command line come on DAEMON_RUN_FD_STRINGS (supervisor.h). 0 or -errno, said.
 */
static int take_run_strings(struct fs_session *s, const char *generation, char ***strings,
                            size_t *n)
{
	int rc = util_strings_read(DAEMON_RUN_FD_STRINGS, strings, n);

	close(DAEMON_RUN_FD_STRINGS);
	close(DAEMON_RUN_FD_EXE);
	if (rc == 0) {
		int mapped = util_ledger_map(DAEMON_RUN_FD_LEDGER, &s->pt.ledger);
		if (mapped == -EPROTO) {
			/* Made by the supervisor's build: this one cannot tell how the kernel holds
			 * the inodes open now, so it must not serve them (a reload is rolled back).
			 */
			fprintf(
			    stderr,
			    "spoolfs: serving process: the passthrough ledger was made by"
			    " another spoolfs build; unmount and mount again to run this one\n");
			close(DAEMON_RUN_FD_LEDGER);
			return mapped;
		}
		if (mapped)
			s->pt.ledger =
			    NULL; /* inherited passthrough opens then fail in the kernel (EIO) */
	}
	close(DAEMON_RUN_FD_LEDGER);
	daemon_run_dir_adopt_lock(s, DAEMON_RUN_FD_LOCK);
	if (rc == 0) {
		int counted =
		    daemon_shared_counters_map(DAEMON_RUN_FD_COUNTERS, &s->daemon.shared_counters);
		if (counted)
			util_log(UTIL_LOG_INFO, "counters start at 0 in this serving process: %s",
			         counted == -EPROTO ? "the mount's were laid out by another build"
			                            : strerror(-counted));
	}
	close(DAEMON_RUN_FD_COUNTERS);
	fcntl(DAEMON_RUN_FD_DEV, F_SETFD, FD_CLOEXEC);
	fcntl(DAEMON_RUN_FD_CTL, F_SETFD, FD_CLOEXEC);
	if (rc == 0 && *n <= DAEMON_RUN_ARGV + 1)
		rc = -EINVAL;
	if (rc) {
		fprintf(stderr, "spoolfs: serving process: bad start-up strings: %s\n",
		        strerror(-rc));
		return rc;
	}
	s->generation = strtoull(generation, NULL, 10);
	s->daemon.ctl_fd = DAEMON_RUN_FD_CTL;
	s->daemon.run_dir = strdup((*strings)[DAEMON_RUN_DIR]);
	s->mount_path = strdup((*strings)[DAEMON_RUN_MOUNT_PATH]);
	snprintf(s->mount_dev, sizeof(s->mount_dev), "%s", (*strings)[DAEMON_RUN_MOUNT_DEV]);
	if (!s->daemon.run_dir || !s->mount_path || s->generation == 0)
		return -ENOMEM;
	s->daemon.run_dir_fd =
	    open(s->daemon.run_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	/* Relative options name files from where the mount was started. */
	if (s->daemon.run_dir_fd < 0 ||
	    ((*strings)[DAEMON_RUN_CWD][0] && chdir((*strings)[DAEMON_RUN_CWD]) != 0)) {
		fprintf(stderr, "spoolfs: serving process: %s\n", strerror(errno));
		return -errno;
	}
	return 0;
}

/*
 * The order of start and stop (main): each step's start, in the table's order, once the
 * options are checked and logging is set up; then the FUSE loop (run_session); then the
 * stop of every step begun, in reverse, at exit as after a failed start. A start that fails
 * may leave part of its work done: its stop runs too, so every stop takes what is there.
 * A later serving process (s->generation > 0) inherits the mountpoint, the run directory,
 * the ledger and the counters from the supervisor (take_run_strings): those starts do
 * nothing then, their stops release what it inherited.
 */
struct step {
	const char *name;
	int (*start)(struct fs_session *s, struct fuse_args *args); /* 0 or -errno, said */
	void (*stop)(struct fs_session *s);                         /* NULL: nothing to undo */
	int failed_status; /* the exit status when start fails: 2 for a usage error */
};

/* Refuses a mountpoint that is not a directory, before the manifest's fetch: libfuse would
 * mount on a file and give a broken mount. Before the stat: a dead mount there fails it
 * with ENOTCONN. A later serving process must not look: the mount there is its own,
 * waiting for it. */
static int start_mountpoint(struct fs_session *s, struct fuse_args *args)
{
	struct stat st;
	const char *unusable;

	if (s->generation)
		return 0;
	if (daemon_mountpoint_prepare(s->opts.mountpoint) != 0)
		return -EINVAL;
	unusable = stat(s->opts.mountpoint, &st) != 0 ? strerror(errno)
	           : !S_ISDIR(st.st_mode)             ? "not a directory"
	                                              : NULL;
	if (unusable) {
		fprintf(stderr, "spoolfs: mountpoint %s: %s\n", s->opts.mountpoint, unusable);
		return -EINVAL;
	}
	return 0;
}

static int start_run_dir(struct fs_session *s, struct fuse_args *args)
{
	return s->generation ? 0 : daemon_run_dir_make(s);
}

static void stop_run_dir(struct fs_session *s)
{
	if (s->daemon.progress_dirfd >= 0)
		close(s->daemon.progress_dirfd);
	s->daemon.progress_dirfd = -1;
	daemon_run_dir_close(s);
}

/* --writable: the spoolfs mount moves to the run directory; the mountpoint is an overlay. */
static int start_overlay(struct fs_session *s, struct fuse_args *args)
{
	return daemon_overlay_prepare(s);
}

/* Shared with the serving processes to come: which inodes the kernel holds open
 * passthrough, with which backing id. */
static int start_ledger(struct fs_session *s, struct fuse_args *args)
{
	int rc = s->generation ? 0 : util_ledger_create(&s->daemon.ledger_fd, &s->pt.ledger);

	if (rc)
		fprintf(stderr, "spoolfs: cannot make the passthrough ledger: %s\n", strerror(-rc));
	return rc;
}

static void stop_ledger(struct fs_session *s)
{
	util_ledger_unmap(s->pt.ledger);
	s->pt.ledger = NULL;
	if (s->daemon.ledger_fd >= 0)
		close(s->daemon.ledger_fd);
	s->daemon.ledger_fd = -1;
}

static int start_counters(struct fs_session *s, struct fuse_args *args)
{
	int rc = s->generation ? 0
	                       : daemon_shared_counters_create(&s->daemon.shared_counters_fd,
	                                                       &s->daemon.shared_counters);

	if (rc) {
		fprintf(stderr, "spoolfs: cannot make the counters: %s\n", strerror(-rc));
		return rc;
	}
	daemon_counters_settle(s);
	return 0;
}

static void stop_counters(struct fs_session *s)
{
	daemon_shared_counters_unmap(s->daemon.shared_counters);
	s->daemon.shared_counters = NULL;
	if (s->daemon.shared_counters_fd >= 0)
		close(s->daemon.shared_counters_fd);
	s->daemon.shared_counters_fd = -1;
}

static int start_process(struct fs_session *s, struct fuse_args *args)
{
	raise_fd_limit();
	drop_root_features(s);
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		fprintf(stderr, "spoolfs: cannot initialise libcurl\n");
		return -EIO;
	}
	return 0;
}

static void stop_process(struct fs_session *s)
{
	curl_global_cleanup();
}

/* open_cache says why itself, naming the directory or the entry in it. */
static int start_cache(struct fs_session *s, struct fuse_args *args)
{
	int rc = open_cache(s);

	if (rc == 0 && s->opts.cache_dir && !s->opts.cache_max_size)
		set_default_cache_bound(s);
	return rc;
}

static void stop_cache(struct fs_session *s)
{
	index_close(s->idx);
	s->idx = NULL;
	index_records_close(s->records);
	s->records = NULL;
	/* A mount refused before it came up (a bad manifest URL, a bad index) loses nothing of
	 * a named directory that was there: what an earlier session kept stays. */
	cache_dir_close(s->cache, s->opts.keep_cache || (!s->daemon.was_mounted &&
	                                                 !(s->cache && cache_dir_made(s->cache))));
	s->cache = NULL;
}

static int start_namespace(struct fs_session *s, struct fuse_args *args)
{
	return load_namespace(s);
}

static void stop_namespace(struct fs_session *s)
{
	s3_source_free(s->listing.s3);
	s->listing.s3 = NULL;
	listing_flights_destroy(s->listing.flights);
	s->listing.flights = NULL;
	free(s->daemon.manifest_dir);
	s->daemon.manifest_dir = NULL;
	free(s->daemon.release);
	s->daemon.release = NULL;
	free(s->listing.manifest_url);
	s->listing.manifest_url = NULL;
}

static int start_mirrors(struct fs_session *s, struct fuse_args *args)
{
	int rc = open_mirror_dirs(s);

	if (rc == -ENOMEM)
		fprintf(stderr, "spoolfs: cannot start: %s\n", strerror(-rc));
	return rc;
}

static int start_engine(struct fs_session *s, struct fuse_args *args)
{
	int rc = start_fetching(s);

	if (rc)
		fprintf(stderr, "spoolfs: cannot start: %s\n", strerror(-rc));
	return rc;
}

static void stop_engine(struct fs_session *s)
{
	engine_destroy(s->engine);
	s->engine = NULL;
	fetch_objects_destroy(s->resolver);
	s->resolver = NULL;
	flight_table_destroy(s->flights);
	s->flights = NULL;
}

static int start_prefetch(struct fs_session *s, struct fuse_args *args)
{
	return fs_prefetch_open(s);
}

static int start_mount_options(struct fs_session *s, struct fuse_args *args)
{
	if (add_mount_options(args, s->listing.s3 ? s3_source_display(s->listing.s3)
	                                          : s->opts.source) != 0)
		return -ENOMEM;
	/* Relative options are resolved: hold no directory. */
	if (s->generation && chdir("/") != 0)
		return -errno;
	return 0;
}

static const struct step steps[] = {
    {"mountpoint", start_mountpoint, NULL, 1},
    {"run directory", start_run_dir, stop_run_dir, 1},
    {"overlay", start_overlay, daemon_overlay_free, 2},
    {"passthrough ledger", start_ledger, stop_ledger, 1},
    {"counters", start_counters, stop_counters, 1},
    {"process", start_process, stop_process, 1},
    {"cache directory", start_cache, stop_cache, 1},
    {"namespace", start_namespace, stop_namespace, 1},
    {"mirrors", start_mirrors, close_mirror_dirs, 2},
    {"engine", start_engine, stop_engine, 1},
    {"prefetch", start_prefetch, fs_prefetch_free, 2},
    {"mount options", start_mount_options, NULL, 1},
};

/* Starts steps[] in order until one fails: 0, or that step's exit status. *begun counts
 * the steps begun, the failed one included. */
static int start_steps(struct fs_session *s, struct fuse_args *args, size_t *begun)
{
	for (*begun = 0; *begun < sizeof(steps) / sizeof(steps[0]);) {
		const struct step *step = &steps[(*begun)++];
		if (step->start(s, args) != 0) {
			util_log(UTIL_LOG_DEBUG, "start: %s failed", step->name);
			return step->failed_status;
		}
	}
	return 0;
}

/* Stops the steps begun, last first. */
static void stop_steps(struct fs_session *s, size_t begun)
{
	while (begun > 0) {
		const struct step *step = &steps[--begun];
		if (step->stop)
			step->stop(s);
	}
}

static void on_sigusr1(int sig)
{
	(void)sig;
	util_log_reopen();
}

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fs_session s;
	char **strings = NULL, cwd[PATH_MAX] = "";
	size_t n_strings = 0;
	int rc, status = 1;
	size_t begun = 0; /* steps[] begun: each of them is stopped, in reverse */

	/* Before anything opens a database; a failure only costs speed. */
	(void)index_init_process();
	if (argc > 1 && strcmp(argv[1], "status") == 0)
		return daemon_status_main(argc, argv);
	if (argc > 1 && strcmp(argv[1], "publish") == 0)
		return publish_main(argc - 1, argv + 1);
	if (argc > 1 && strcmp(argv[1], "verify") == 0)
		return publish_verify_main(argc - 1, argv + 1);
	if (argc > 1 && strcmp(argv[1], "gc") == 0)
		return publish_gc_main(argc - 1, argv + 1);
	if (argc > 1 && strcmp(argv[1], "reload") == 0)
		return daemon_reload_main(argc, argv);
	if (argc > 2 && strcmp(argv[1], "__supervise") == 0)
		return daemon_supervisor_main(argc, argv);
	memset(&s, 0, sizeof(s));
	s.daemon.run_dir_fd = s.daemon.progress_dirfd = s.daemon.ctl_fd = s.daemon.run_lock_fd =
	    s.daemon.shared_counters_fd = s.daemon.ledger_fd = -1;
	s.daemon.metrics_out.dir_fd = s.reads_out.dir_fd = -1;
	pthread_mutex_init(&s.pt.lock, NULL);
	pthread_mutex_init(&s.pushes.lock, NULL);
	pthread_cond_init(&s.pushes.push_ended, NULL);
	pthread_mutex_init(&s.handles.lock, NULL);
	pthread_mutex_init(&s.handover.lock, NULL);
	pthread_cond_init(&s.handover.cond, NULL);
	if (argc > 2 && strcmp(argv[1], "__serve") == 0) {
		/* Tests: a serving process that dies as it starts (a crash loop). */
		if (getenv("SPOOLFS_TEST_SERVE_EXIT"))
			_exit(1);
		/* A later serving process: its command line comes from the supervisor. */
		if (take_run_strings(&s, argv[2], &strings, &n_strings) != 0)
			goto out_args;
		args = (struct fuse_args)FUSE_ARGS_INIT((int)(n_strings - DAEMON_RUN_ARGV),
		                                        strings + DAEMON_RUN_ARGV);
		argc = args.argc;
		argv = args.argv;
	} else {
		/* Kept as given (before the scrub below) for the serving processes to come. */
		if (!getcwd(cwd, sizeof(cwd)))
			cwd[0] = '\0';
		strings = calloc((size_t)argc + 1, sizeof(*strings));
		for (int i = 0; strings && i < argc; i++)
			if ((strings[i] = strdup(argv[i])) != NULL)
				n_strings++;
		if (!strings || n_strings != (size_t)argc) {
			fprintf(stderr, "spoolfs: out of memory\n");
			goto out_args;
		}
	}

	s.daemon.started = time(NULL);
	s.uid = getuid();
	s.gid = getgid();
	s.timeout_s = 86400.0 * 365;
	s.write_stats = daemon_metrics_write_stats;
	if (daemon_options_parse(&args, &s.opts) != 0) {
		status = 2;
		goto out_args;
	}
	/* Relative file options name files from where the mount was started: the daemon runs
	 * from "/" later (and a later serving process from the start), and opens some again. */
	if (daemon_options_resolve(&s.opts, s.generation ? strings[DAEMON_RUN_CWD] : cwd) != 0) {
		fprintf(stderr, "spoolfs: out of memory\n");
		goto out_args;
	}
	if (s.opts.uid >= 0)
		s.uid = (uid_t)s.opts.uid;
	if (s.opts.gid >= 0)
		s.gid = (gid_t)s.opts.gid;
	/* Everything is copied out of argv now; the mount lives for hours, readable by all. */
	if (daemon_argv_scrub(argc, argv))
		util_log(UTIL_LOG_WARN,
		         "the command line held a password or a signed URL query: hidden from"
		         " this process's command line now, but other users could read it while"
		         " the mount started; use --netrc-file for passwords and the https_proxy"
		         " or http_proxy variable for a proxy's");
	shown_argv = argv;
	shown_argc = argc;
	if (s.opts.show_help) {
		daemon_options_usage(argv[0]);
		status = 0;
		goto out_args;
	}
	if (s.opts.show_version) {
		printf("spoolfs %s (libfuse %s, %s)\n", SPOOLFS_VERSION, fuse_pkgversion(),
		       curl_version());
		status = 0;
		goto out_args;
	}
	if (daemon_options_check(&s.opts, &s.cache_max_size, &s.daemon.max_manifest_size) != 0 ||
	    (s.opts.log.metrics_file && util_output_open("--metrics-file", &s.opts.log.metrics_file,
	                                                 &s.daemon.metrics_out) != 0)) {
		status = 2;
		goto out_args;
	}
	daemon_set_log_level(s.opts.log.log_level, s.opts.log.debug);
	char log_why[PATH_MAX + 256];
	if (s.opts.log.log_file &&
	    (rc = util_log_use_file(s.opts.log.log_file, log_why, sizeof(log_why))) != 0) {
		fprintf(stderr, "spoolfs: --log-file: %s\n", log_why);
		status = 2;
		goto out_args;
	}
	/* logrotate's signal; its default action would end the mount. */
	struct sigaction reopen = {.sa_handler = on_sigusr1, .sa_flags = SA_RESTART};
	sigemptyset(&reopen.sa_mask);
	sigaction(SIGUSR1, &reopen, NULL);
	if (s.opts.asked_dev || s.opts.asked_suid)
		util_log(UTIL_LOG_INFO, "ignored %s%s%s: a spoolfs mount is always nosuid,nodev",
		         s.opts.asked_dev ? "dev" : "",
		         s.opts.asked_dev && s.opts.asked_suid ? " and " : "",
		         s.opts.asked_suid ? "suid" : "");
	status = start_steps(&s, &args, &begun);
	if (status == 0) {
		rc = run_session(&s, &args, s.generation ? NULL : strings,
		                 s.generation ? 0 : n_strings, cwd, s.daemon.ledger_fd);
		status = rc == 0 ? 0 : 1;
	}
	stop_steps(&s, begun);
	free(s.mount_path);
	free(s.handover.init_req);
	free(s.handover.init_reply);
	pthread_mutex_destroy(&s.pt.lock);
	fs_member_pushes_free(&s);
	pthread_mutex_destroy(&s.pushes.lock);
	pthread_cond_destroy(&s.pushes.push_ended);
	pthread_mutex_destroy(&s.handles.lock);
	pthread_mutex_destroy(&s.handover.lock);
	pthread_cond_destroy(&s.handover.cond);
out_args:
	util_output_close(&s.daemon.metrics_out);
	util_output_close(&s.reads_out);
	daemon_options_free(&s.opts);
	fuse_opt_free_args(&args); /* frees only what option parsing made */
	util_strings_free(strings, n_strings);
	return status;
}

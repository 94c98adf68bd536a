/*
 * Command-line parsing with libfuse's fuse_opt: every long option also works as
 * `-o name=value`, so fstab lines and mount(8) can pass them. What FUSE itself understands
 * (-d, -o allow_other, ...) stays in args for fuse_session_new.
 */
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "daemon/options.h"
#include "util/log.h"
#include "util/size.h"
#include "util/trusted_path.h"

enum {
	KEY_FOREGROUND,
	KEY_DEBUG,
	KEY_MIRROR,
	KEY_DEV,
	KEY_SUID,
};

#define OPT(template, field)                                                                       \
	{                                                                                          \
		template, offsetof(struct daemon_options, field), 0                                \
	}
#define OPT_FLAG(template, field)                                                                  \
	{                                                                                          \
		template, offsetof(struct daemon_options, field), 1                                \
	}

static const struct fuse_opt option_spec[] = {
    OPT("--cache-dir %s", cache_dir),
    OPT("cache_dir=%s", cache_dir),
    OPT_FLAG("--keep-cache", keep_cache),
    OPT("--cache-max-size %s", cache_max_size),
    OPT("cache_max_size=%s", cache_max_size),
    OPT_FLAG("keep_cache", keep_cache),
    OPT_FLAG("--no-passthrough", no_passthrough),
    OPT_FLAG("no_passthrough", no_passthrough),
    OPT("--ca-file %s", net.ca_file),
    OPT("ca_file=%s", net.ca_file),
    OPT("--proxy %s", net.proxy),
    OPT("proxy=%s", net.proxy),
    OPT("--max-manifest-size %s", max_manifest_size),
    OPT("max_manifest_size=%s", max_manifest_size),
    OPT_FLAG("--allow-link-local", net.allow_link_local),
    OPT_FLAG("allow_link_local", net.allow_link_local),
    OPT("--netrc-file %s", net.netrc_file),
    OPT("netrc_file=%s", net.netrc_file),
    OPT("--stall-timeout %s", text.stall_timeout_text),
    OPT("stall_timeout=%s", text.stall_timeout_text),
    OPT("--start-timeout %s", text.start_timeout_text),
    OPT("start_timeout=%s", text.start_timeout_text),
    OPT("--retries %s", text.retries_text),
    OPT("retries=%s", text.retries_text),
    OPT("--max-transfers %s", text.max_transfers_text),
    OPT("max_transfers=%s", text.max_transfers_text),
    OPT("--endpoint %s", s3.endpoint),
    OPT("endpoint=%s", s3.endpoint),
    OPT("--region %s", s3.region),
    OPT("region=%s", s3.region),
    OPT("--profile %s", s3.profile),
    OPT("profile=%s", s3.profile),
    OPT("--manifest %s", manifest),
    OPT("manifest=%s", manifest),
    OPT("--role-arn %s", s3.role_arn),
    OPT("role_arn=%s", s3.role_arn),
    OPT_FLAG("--requester-pays", s3.requester_pays),
    OPT_FLAG("requester_pays", s3.requester_pays),
    OPT("--expected-bucket-owner %s", s3.expected_bucket_owner),
    OPT("expected_bucket_owner=%s", s3.expected_bucket_owner),
    OPT_FLAG("--path-style", s3.path_style),
    OPT_FLAG("path_style", s3.path_style),
    OPT_FLAG("--no-sign", s3.no_sign),
    OPT_FLAG("no_sign", s3.no_sign),
    OPT("--uid %s", text.uid_text),
    OPT("uid=%s", text.uid_text),
    OPT("--gid %s", text.gid_text),
    OPT("gid=%s", text.gid_text),
    OPT("--file-mode %s", text.file_mode_text),
    OPT("file_mode=%s", text.file_mode_text),
    OPT("--dir-mode %s", text.dir_mode_text),
    OPT("dir_mode=%s", text.dir_mode_text),
    OPT("--outside-symlinks %s", text.outside_symlinks_text),
    OPT("outside_symlinks=%s", text.outside_symlinks_text),
    OPT("--stats-mode %s", text.stats_mode_text),
    OPT("stats_mode=%s", text.stats_mode_text),
    OPT("--log-level %s", log.log_level),
    OPT("log_level=%s", log.log_level),
    OPT("--log-file %s", log.log_file),
    OPT("log_file=%s", log.log_file),
    OPT("--metrics-file %s", log.metrics_file),
    OPT("metrics_file=%s", log.metrics_file),
    OPT("--metrics-interval %s", text.metrics_interval_text),
    OPT("metrics_interval=%s", text.metrics_interval_text),
    OPT("--prefetch-requests %s", text.prefetch_requests_text),
    OPT("prefetch_requests=%s", text.prefetch_requests_text),
    OPT("--prefetch-window %s", prefetch_window),
    OPT("prefetch_window=%s", prefetch_window),
    OPT("--prefetch-budget %s", prefetch_budget),
    OPT("prefetch_budget=%s", prefetch_budget),
    OPT("--prefetch-list %s", prefetch_list),
    OPT("prefetch_list=%s", prefetch_list),
    OPT("--record-reads %s", record_reads),
    OPT("record_reads=%s", record_reads),
    OPT("--writable %s", writable),
    OPT("writable=%s", writable),
    OPT("--read-order-name %s", read_order_name),
    OPT("read_order_name=%s", read_order_name),
    OPT_FLAG("--no-read-order", no_read_order),
    OPT_FLAG("no_read_order", no_read_order),
    OPT_FLAG("-h", show_help),
    OPT_FLAG("--help", show_help),
    OPT_FLAG("-V", show_version),
    OPT_FLAG("--version", show_version),
    FUSE_OPT_KEY("-f", KEY_FOREGROUND),
    FUSE_OPT_KEY("-d", KEY_DEBUG),
    FUSE_OPT_KEY("--mirror ", KEY_MIRROR),
    FUSE_OPT_KEY("mirror=", KEY_MIRROR),
    FUSE_OPT_KEY("debug", KEY_DEBUG),
    /* A spoolfs mount is always nosuid,nodev: mount.fuse3 passes these for root. */
    FUSE_OPT_KEY("dev", KEY_DEV),
    FUSE_OPT_KEY("suid", KEY_SUID),
    /* Options mount(8), fstab and mount.fuse3 pass on that mean nothing to a FUSE mount. */
    FUSE_OPT_KEY("_netdev", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("nofail", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("auto", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("noauto", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("user", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("users", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("nouser", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("defaults", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("comment=%s", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("relatime", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("norelatime", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("strictatime", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("nostrictatime", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("lazytime", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("nodiratime", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_END,
};

void daemon_options_usage(const char *prog)
{
	printf(
	    "usage: %s [options] SOURCE MOUNTPOINT\n"
	    "       %s status MOUNTPOINT [--watch] [--interval SEC]\n"
	    "       %s reload MOUNTPOINT  (a new serving process from the binary on disk)\n"
	    "       %s publish SRC_DIR OUT_DIR [options]  (%s publish --help)\n"
	    "\n"
	    "Mounts a read-only object store. SOURCE is a JSON manifest (an http(s) URL or a\n"
	    "local path) or an S3 bucket (s3://BUCKET[/PREFIX]). Unmount with\n"
	    "`fusermount3 -u MOUNTPOINT`.\n"
	    "\n"
	    "options (each also as -o name=value, with '_' for '-'):\n"
	    "  -f                     stay in the foreground\n"
	    "  -d                     debug: log every FUSE request and every upstream object\n"
	    "                         request (implies -f; also -o debug)\n"
	    "  -o opt[,opt...]        FUSE mount options (allow_other, ...)\n"
	    "  --cache-dir DIR        where spool files and the index live\n"
	    "                         (default: a fresh directory under $TMPDIR or /var/tmp,\n"
	    "                         removed at unmount); mounts may share one, and then\n"
	    "                         fetch each object once between them\n"
	    "  --keep-cache           keep --cache-dir's spool and index after unmount; the\n"
	    "                         next mount serves verified objects without a request,\n"
	    "                         and an unchanged manifest's namespace without loading\n"
	    "                         it (a cache dir left by a crash is reused either way)\n"
	    "  --cache-max-size SIZE  bound --cache-dir (K, M, G, T suffixes); least recently\n"
	    "                         used objects not in use are evicted (default: what leaves\n"
	    "                         10%% of its filesystem free, at least 1 GiB; 0: no bound)\n"
	    "  --no-passthrough       read complete objects through FUSE's page cache, not\n"
	    "                         kernel passthrough from the spool (passthrough needs\n"
	    "                         root and Linux 6.9 or later; it is used when there)\n"
	    "  --ca-file FILE         trust these CA certificates (default: the system's)\n"
	    "  --proxy URL            HTTP(S) proxy for every request (default: libcurl's\n"
	    "                         http_proxy, https_proxy and no_proxy variables; a proxy\n"
	    "                         password belongs there, not on the command line)\n"
	    "  --netrc-file FILE      user names and passwords for http(s) hosts, in netrc\n"
	    "                         format, so that none is on the command line\n"
	    "  --allow-link-local     allow connections to link-local addresses\n"
	    "                         (169.254.0.0/16, fe80::/10: cloud instance metadata),\n"
	    "                         refused by default whatever URL or redirect leads there\n"
	    "  --stall-timeout SEC    no byte, or under 1 KiB/s, for this long restarts a\n"
	    "                         transfer, the manifest's and listings' too (default 30)\n"
	    "  --retries N            tries in a row without 64 KiB of progress before a read\n"
	    "                         fails (default 6)\n"
	    "  --max-transfers N      concurrent upstream transfers (default 16)\n"
	    "  --prefetch-requests N  speculative requests at once, beside --max-transfers:\n"
	    "                         files a walk of a directory will open next, and\n"
	    "                         --prefetch-list's; halved while the store answers 503 or\n"
	    "                         429 or fds run short (EMFILE), then grown again slowly\n"
	    "                         (default 32; 0: no walk prefetch)\n"
	    "  --prefetch-window SIZE bytes a walk fetches ahead of its reader, not yet opened\n"
	    "                         (default 32M)\n"
	    "  --prefetch-list FILE   fetch these paths (one a line, in order) in the\n"
	    "                         background from mount time, objects already local skipped\n"
	    "  --prefetch-budget SIZE bytes --prefetch-list may fetch, at most (default 4G;\n"
	    "                         --cache-max-size bounds it too)\n"
	    "  --read-order-name NAME the manifest's read order to fetch from mount time, before\n"
	    "                         --prefetch-list's paths (default: the one named default)\n"
	    "  --no-read-order        fetch no read order of the manifest\n"
	    "  --record-reads FILE    at unmount, write the paths of the files opened, in the\n"
	    "                         order first opened (a --prefetch-list for the next run);\n"
	    "                         with --keep-cache the record is also kept in the cache\n"
	    "                         directory, and the next mount of the same source uses it\n"
	    "  --writable DIR         the mountpoint is an overlay whose writes go to DIR\n"
	    "                         (DIR/upper, DIR/work): builds may write into the tree\n"
	    "  --max-manifest-size SIZE  refuse a manifest larger than this (K, M, G\n"
	    "                         suffixes; default 256M, about 4 million entries)\n"
	    "  --mirror URL           another base for the manifest's relative object URLs,\n"
	    "                         tried in order when a fetch fails (repeatable)\n"
	    "  --uid USER             the owner every file shows (a name or a number; default:\n"
	    "                         the mounting user); with -o allow_other another user\n"
	    "                         can read a root mount as its own\n"
	    "  --gid GROUP            the group every file shows (default: the mounting user's)\n"
	    "  --file-mode MODE       octal permission bits every file shows instead of the\n"
	    "                         source's (write bits always cleared; a file executable\n"
	    "                         in the source keeps x where MODE has r)\n"
	    "  --dir-mode MODE        the same for directories\n"
	    "  --outside-symlinks show|hide|refuse\n"
	    "                         symlinks whose target leads out of the mount (absolute,\n"
	    "                         or above its root) point at this machine's files: shown\n"
	    "                         as given (default), left out, or the manifest refused\n"
	    "  --stats-mode MODE      mode of the /.spoolfs files: octal read bits, 0400 for\n"
	    "                         the mount's owner alone (default 0444: with allow_other,\n"
	    "                         every local user)\n"
	    "  --log-level LEVEL      debug, info, warn or error (default info)\n"
	    "  --log-file PATH        log there (timestamped, 0600) instead of stderr or syslog;\n"
	    "                         SIGUSR1 opens PATH again (for logrotate)\n"
	    "  --metrics-file PATH    write the metrics in the Prometheus text format there\n"
	    "                         (node_exporter's textfile collector: name it *.prom),\n"
	    "                         with latency histograms and a mount label, replaced\n"
	    "                         whole every --metrics-interval and at unmount\n"
	    "  --metrics-interval SEC seconds between writes of --metrics-file (default 5)\n"
	    "  --start-timeout SEC    a serving process that does not serve within SEC after it\n"
	    "                         starts (a restart, a reload) is killed and counts as a\n"
	    "                         failed start (default 30)\n"
	    "S3 sources (credentials, never on the command line: the AWS chain of environment,\n"
	    "web identity, ~/.aws/credentials and config, container, instance metadata;\n"
	    "refreshed before they expire; see spoolfs(1)):\n"
	    "  --manifest KEY         mount the manifest stored at KEY under s3://BUCKET/PREFIX,\n"
	    "                         not a listing: it and the objects it names under PREFIX\n"
	    "                         are fetched with signed requests (other hosts: unsigned)\n"
	    "  --endpoint URL         S3 endpoint (default $AWS_ENDPOINT_URL_S3,\n"
	    "                         $AWS_ENDPOINT_URL, else AWS); implies path-style\n"
	    "  --region REGION        (default $AWS_REGION, $AWS_DEFAULT_REGION, us-east-1)\n"
	    "  --profile NAME         use this profile of ~/.aws/credentials and ~/.aws/config\n"
	    "                         alone (default: the chain, with $AWS_PROFILE or default)\n"
	    "  --role-arn ARN         assume this role with a web identity token alone: from\n"
	    "                         $AWS_WEB_IDENTITY_TOKEN_FILE, else GitHub Actions' OIDC\n"
	    "                         endpoint (needs permissions: id-token: write)\n"
	    "  --requester-pays       send x-amz-request-payer: requester\n"
	    "  --expected-bucket-owner ID  refuse a bucket another account owns\n"
	    "  --path-style           path-style addressing on AWS too\n"
	    "  --no-sign              public bucket: send no credentials\n"
	    "  -h, --help             this help\n"
	    "  -V, --version          the version\n",
	    prog, prog, prog, prog, prog);
}

/* Levenshtein distance of a and b (each at most 63 bytes; longer: 64), for suggestions. */
static size_t edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), row[64];

	if (la > 63 || lb > 63)
		return 64;
	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t diag = row[0];
		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
			if (row[j] + 1 < best)
				best = row[j] + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[lb];
}

/* The long option named arg exactly ("--name", no value), or NULL. */
static const struct fuse_opt *long_option(const char *arg)
{
	for (const struct fuse_opt *o = option_spec; o->templ; o++) {
		size_t n = strcspn(o->templ, " ");
		if (strncmp(o->templ, "--", 2) == 0 && strlen(arg) == n &&
		    strncmp(o->templ, arg, n) == 0)
			return o;
	}
	return NULL;
}

/* An unknown long option, named with the closest known one when one is close. */
static void say_unknown_long_option(const char *arg)
{
	char best[64] = "";
	size_t best_d = SIZE_MAX;

	for (const struct fuse_opt *o = option_spec; o->templ; o++) {
		if (strncmp(o->templ, "--", 2) != 0)
			continue;
		char name[64];
		snprintf(name, sizeof(name), "%.*s", (int)strcspn(o->templ, " "), o->templ);
		size_t d = edit_distance(arg, name);
		if (d < best_d) {
			best_d = d;
			snprintf(best, sizeof(best), "%s", name);
		}
	}
	/* Close: a typo or two, a few more in a long name (--retry for --retries). */
	size_t near = strlen(best) / 3;
	if (best_d <= (near > 2 ? near : 2))
		fprintf(stderr, "spoolfs: unknown option '%s' (did you mean %s?)\n", arg, best);
	else
		fprintf(stderr, "spoolfs: unknown option '%s' (see --help)\n", arg);
}

/*
 * Every long option must be one of ours, exactly: FUSE takes none, and fuse_opt matches a
 * "--name %s" template against any argument that starts with "--name", so "--cache-dirr /x"
 * set the cache directory to "r", took /x for SOURCE and blamed the mountpoint as an
 * unexpected argument. Values (after "--name" or -o) and what follows "--" are skipped.
 * Only the name is shown: split_long_options has cut off any "=value", which may be secret.
 */
static int check_long_options(const struct fuse_args *args)
{
	bool value_next = false;

	for (int i = 1; i < args->argc; i++) {
		const char *arg = args->argv[i];
		const struct fuse_opt *o;
		if (value_next) {
			value_next = false;
			continue;
		}
		if (strcmp(arg, "--") == 0)
			break;
		if (strcmp(arg, "-o") == 0) {
			value_next = true;
			continue;
		}
		if (strncmp(arg, "--", 2) != 0)
			continue;
		o = long_option(arg);
		if (!o) {
			say_unknown_long_option(arg);
			return -EINVAL;
		}
		value_next = strchr(o->templ, ' ') != NULL;
	}
	return 0;
}

static int on_arg(void *data, const char *arg, int key, struct fuse_args *outargs)
{
	struct daemon_options *opts = data;

	switch (key) {
	case FUSE_OPT_KEY_NONOPT:
		if (!opts->source) {
			opts->source = strdup(arg);
			return opts->source ? 0 : -1;
		}
		if (!opts->mountpoint) {
			opts->mountpoint = strdup(arg);
			return opts->mountpoint ? 0 : -1;
		}
		fprintf(stderr, "spoolfs: unexpected argument '%s'\n", arg);
		return -1;
	case FUSE_OPT_KEY_OPT:
		/* fstab's "x-" options (x-systemd.automount, x-gvfs-show) are for the tools that
		 * read fstab; the kernel would refuse them. */
		return strncmp(arg, "x-", 2) == 0 ? 0 : 1;
	case KEY_FOREGROUND:
		opts->log.foreground = 1;
		return 0;
	case KEY_MIRROR: {
		/* fuse_opt hands over "--mirrorURL" (separate argument, also "--mirror=URL" once
		 * split by split_long_options) or "mirror=URL". */
		const char *url = arg;
		if (strncmp(url, "--mirror", 8) == 0)
			url += 8;
		else if (strncmp(url, "mirror", 6) == 0)
			url += 6;
		if (*url == '=')
			url++;
		char **v = realloc(opts->net.mirrors, (opts->net.n_mirrors + 1) * sizeof(*v));
		if (!v)
			return -1;
		opts->net.mirrors = v;
		v[opts->net.n_mirrors] = strdup(url);
		return v[opts->net.n_mirrors++] ? 0 : -1;
	}
	case KEY_DEV:
		opts->asked_dev = true;
		return 0;
	case KEY_SUID:
		opts->asked_suid = true;
		return 0;
	case KEY_DEBUG:
		opts->log.debug = 1;
		opts->log.foreground = 1;
		return 1; /* libfuse logs requests with -d too */
	default:
		return 1;
	}
}

/*
 * A whole number in [min, max] for option `name`, else a usage error. fuse_opt's %u takes
 * "-1" as 4294967295 and "4294967297" as 1: a wrapped --stall-timeout or --retries would
 * quietly lift the bounds that keep reads from hanging.
 */
static int parse_count(const char *name, const char *text, unsigned min, unsigned max,
                       unsigned fallback, unsigned *out)
{
	char *end = NULL;
	unsigned long n;

	if (!text) {
		*out = fallback;
		return 0;
	}
	errno = 0;
	n = text[0] >= '0' && text[0] <= '9' ? strtoul(text, &end, 10) : 0;
	if (!end || *end || errno || n < min || n > max) {
		fprintf(stderr, "spoolfs: %s must be a whole number from %u to %u, not '%s'\n",
		        name, min, max, text);
		return -EINVAL;
	}
	*out = (unsigned)n;
	return 0;
}

/*
 * The /.spoolfs files' permission bits: octal, read bits only (they are read-only files), so
 * 0400 keeps them to the mount's owner. The kernel checks them: spoolfs always mounts with
 * default_permissions.
 */
static int parse_stats_mode(const char *text, unsigned *out)
{
	char *end = NULL;
	unsigned long mode;

	if (!text) {
		*out = 0444;
		return 0;
	}
	errno = 0;
	mode = text[0] >= '0' && text[0] <= '7' ? strtoul(text, &end, 8) : 0;
	if (!end || *end || errno || (mode & ~0444UL) != 0) {
		fprintf(stderr,
		        "spoolfs: --stats-mode must be octal read bits (0400, 0440 or 0444, say),"
		        " not '%s'\n",
		        text);
		return -EINVAL;
	}
	*out = (unsigned)mode;
	return 0;
}

/* --file-mode, --dir-mode: octal; the mount is read-only, so only read and execute bits are
 * kept (write, setuid, setgid and sticky bits are cleared, not refused: 0644 is what a user
 * naturally writes). -1 when not given. */
static int parse_node_mode(const char *name, const char *text, int *out)
{
	char *end = NULL;
	unsigned long mode;

	*out = -1;
	if (!text)
		return 0;
	errno = 0;
	mode = text[0] >= '0' && text[0] <= '7' ? strtoul(text, &end, 8) : 0;
	if (!end || *end || errno || mode > 07777) {
		fprintf(stderr, "spoolfs: %s must be an octal mode (0444, 0550, ...), not '%s'\n",
		        name, text);
		return -EINVAL;
	}
	*out = (int)(mode & 0555);
	return 0;
}

/* --uid, --gid: a number or a name (resolved now, once). -1 when not given. */
static int parse_owner(const char *name, const char *text, bool group, long long *out)
{
	char buf[4096], *end = NULL;
	unsigned long long id;
	int rc;

	*out = -1;
	if (!text)
		return 0;
	errno = 0;
	id = text[0] >= '0' && text[0] <= '9' ? strtoull(text, &end, 10) : 0;
	if (end && !*end && !errno && id < 0xffffffffULL) {
		*out = (long long)id;
		return 0;
	}
	if (group) {
		struct group gr, *found = NULL;
		rc = getgrnam_r(text, &gr, buf, sizeof(buf), &found);
		if (rc == 0 && found)
			*out = found->gr_gid;
	} else {
		struct passwd pw, *found = NULL;
		rc = getpwnam_r(text, &pw, buf, sizeof(buf), &found);
		if (rc == 0 && found)
			*out = found->pw_uid;
	}
	if (*out >= 0)
		return 0;
	fprintf(stderr, "spoolfs: %s: no %s '%s'\n", name, group ? "group" : "user", text);
	return -EINVAL;
}

/* --outside-symlinks: show (default), hide or refuse; enum manifest_outside_symlinks. */
static int parse_outside_symlinks(const char *text, int *out)
{
	static const char *const names[] = {"show", "hide", "refuse"};

	*out = 0;
	if (!text)
		return 0;
	for (int i = 0; i < 3; i++) {
		if (strcmp(text, names[i]) == 0) {
			*out = i;
			return 0;
		}
	}
	fprintf(stderr, "spoolfs: --outside-symlinks must be show, hide or refuse, not '%s'\n",
	        text);
	return -1;
}

/*
 * An http(s) or file URL without a query or fragment, else a usage error: a mirror replaces
 * the manifest's base, and an object's path goes after it (a query there would end up in
 * the middle of every URL). Shown redacted: it may hold credentials.
 */
static int check_mirror(const char *url)
{
	char shown[512];

	if ((strncasecmp(url, "http://", 7) == 0 || strncasecmp(url, "https://", 8) == 0 ||
	     strncasecmp(url, "file://", 7) == 0) &&
	    !strpbrk(url, "?#"))
		return 0;
	fprintf(stderr,
	        "spoolfs: --mirror must be an http://, https:// or file:// URL without a query or"
	        " fragment, not '%s'\n",
	        util_redact_url(url, shown, sizeof(shown)));
	return -EINVAL;
}

/*
 * "--name=value" as "--name" "value". fuse_opt applies every template that matches, and a
 * "--name %s" template (a separate argument) also matches "--name=value", with "=value"
 * as its value: each such option got "=" in front of its value, and --mirror twice.
 * Fails with -ENOMEM.
 */
static int split_long_options(struct fuse_args *args)
{
	struct fuse_args split = FUSE_ARGS_INIT(0, NULL);
	int rc = 0;

	for (int i = 0; i < args->argc && rc == 0; i++) {
		const char *arg = args->argv[i], *eq = strchr(arg, '=');
		if (i > 0 && strncmp(arg, "--", 2) == 0 && arg[2] && eq) {
			char *name = strndup(arg, (size_t)(eq - arg));
			rc = !name || fuse_opt_add_arg(&split, name) != 0 ||
			             fuse_opt_add_arg(&split, eq + 1) != 0
			         ? -ENOMEM
			         : 0;
			free(name);
		} else if (fuse_opt_add_arg(&split, arg) != 0) {
			rc = -ENOMEM;
		}
	}
	if (rc) {
		fuse_opt_free_args(&split);
		return rc;
	}
	fuse_opt_free_args(args);
	*args = split;
	return 0;
}

int daemon_options_parse(struct fuse_args *args, struct daemon_options *opts)
{
	if (split_long_options(args) != 0 || check_long_options(args) != 0 ||
	    fuse_opt_parse(args, opts, option_spec, on_arg) != 0)
		return -EINVAL;
	if (opts->show_help || opts->show_version)
		return 0;
	if (!opts->source || !opts->mountpoint) {
		fprintf(stderr, "spoolfs: need SOURCE and MOUNTPOINT (see --help)\n");
		return -EINVAL;
	}
	if (parse_count("--stall-timeout", opts->text.stall_timeout_text, 1, 86400, 30,
	                &opts->net.stall_timeout_s) != 0 ||
	    parse_count("--start-timeout", opts->text.start_timeout_text, 1, 3600, 30,
	                &opts->start_timeout_s) != 0 ||
	    parse_count("--retries", opts->text.retries_text, 1, 1000, 6, &opts->net.retries) !=
	        0 ||
	    parse_count("--max-transfers", opts->text.max_transfers_text, 1, 1024, 16,
	                &opts->net.max_transfers) != 0 ||
	    parse_count("--metrics-interval", opts->text.metrics_interval_text, 1, 3600, 5,
	                &opts->log.metrics_interval_s) != 0 ||
	    parse_count("--prefetch-requests", opts->text.prefetch_requests_text, 0, 1024, 32,
	                &opts->prefetch_requests) != 0 ||
	    parse_stats_mode(opts->text.stats_mode_text, &opts->stats_mode) != 0)
		return -EINVAL;
	/* A flight keeps one bit per URL (its own and the mirrors') for those that refused it. */
	if (opts->net.n_mirrors > DAEMON_MAX_MIRRORS) {
		fprintf(stderr, "spoolfs: at most %u --mirror options\n", DAEMON_MAX_MIRRORS);
		return -EINVAL;
	}
	for (unsigned i = 0; i < opts->net.n_mirrors; i++)
		if (check_mirror(opts->net.mirrors[i]) != 0)
			return -EINVAL;
	if (parse_outside_symlinks(opts->text.outside_symlinks_text, &opts->outside_symlinks) !=
	        0 ||
	    parse_owner("--uid", opts->text.uid_text, false, &opts->uid) != 0 ||
	    parse_owner("--gid", opts->text.gid_text, true, &opts->gid) != 0 ||
	    parse_node_mode("--file-mode", opts->text.file_mode_text, &opts->file_mode) != 0 ||
	    parse_node_mode("--dir-mode", opts->text.dir_mode_text, &opts->dir_mode) != 0)
		return -EINVAL;
	if (opts->log.log_level && strcmp(opts->log.log_level, "debug") != 0 &&
	    strcmp(opts->log.log_level, "info") != 0 && strcmp(opts->log.log_level, "warn") != 0 &&
	    strcmp(opts->log.log_level, "error") != 0) {
		fprintf(stderr, "spoolfs: unknown log level '%s'\n", opts->log.log_level);
		return -EINVAL;
	}
	return 0;
}

/* *path joined to cwd when it is relative. 0 or -ENOMEM. */
static int make_absolute(char **path, const char *cwd)
{
	char *joined;

	if (!*path || (*path)[0] == '/' || !(*path)[0])
		return 0;
	if (asprintf(&joined, "%s/%s", cwd, *path) < 0)
		return -ENOMEM;
	free(*path);
	*path = joined;
	return 0;
}

int daemon_options_resolve(struct daemon_options *opts, const char *cwd)
{
	char **paths[] = {&opts->cache_dir,    &opts->net.ca_file,      &opts->net.netrc_file,
	                  &opts->log.log_file, &opts->log.metrics_file, &opts->prefetch_list,
	                  &opts->record_reads, &opts->writable};

	if (!cwd || cwd[0] != '/')
		return 0; /* unknown: they stay as given */
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
		if (make_absolute(paths[i], cwd) != 0)
			return -ENOMEM;
	return 0;
}

/* Options for the other kind of source do nothing here: said, so a typo'd source shows. */
static void warn_unused_options(const struct daemon_options *o)
{
	bool bucket = strncmp(o->source, "s3://", 5) == 0;

	if (!bucket &&
	    (o->s3.endpoint || o->s3.region || o->s3.profile || o->s3.path_style || o->s3.no_sign ||
	     o->s3.role_arn || o->s3.requester_pays || o->s3.expected_bucket_owner))
		fprintf(
		    stderr,
		    "spoolfs: warning: --endpoint, --region, --profile, --role-arn, --path-style,"
		    " --no-sign, --requester-pays and --expected-bucket-owner are for s3://"
		    " sources; ignored\n");
	if (bucket && o->net.n_mirrors)
		fprintf(stderr,
		        "spoolfs: warning: --mirror is for a manifest's objects; ignored\n");
	if (!bucket && o->manifest)
		fprintf(stderr, "spoolfs: warning: --manifest KEY is for s3:// sources (a manifest"
		                " in the bucket); ignored\n");
	if (bucket && !o->manifest && o->max_manifest_size)
		fprintf(stderr,
		        "spoolfs: warning: --max-manifest-size is for a manifest; ignored\n");
	if (bucket && o->net.netrc_file)
		fprintf(stderr, "spoolfs: warning: --netrc-file is for http(s) sources (S3 requests"
		                " are signed); ignored\n");
}

/*
 * A file option (--ca-file, --netrc-file) as the daemon will open it: it works in "/"
 * (libfuse's daemonising, -f too), so a relative name is made absolute now, and a missing
 * one is refused now rather than failing downloads later. curl opens it again at each
 * connection, by its path: so the path must be one only root or this user can change
 * (util/trusted_path.h), which util_trusted_open checks now. A last symlink of theirs is
 * followed (a rotated secret), one of another user's is refused. 0 or -EINVAL, said.
 */
static int check_file_option(const char *option, char **name)
{
	char why[PATH_MAX + 256], *absolute;
	int fd = util_trusted_open(*name, UTIL_TRUSTED_READ_FOLLOW, why, sizeof(why));

	if (fd == -EACCES || fd == -ELOOP || fd == -EINVAL) {
		fprintf(stderr, "spoolfs: %s %s: refused: %s\n", option, *name, why);
		return -EINVAL;
	}
	if (fd < 0) {
		/* The path as it was looked up: a relative one from where the mount started. */
		char cwd[PATH_MAX] = "";
		if ((*name)[0] != '/' && !getcwd(cwd, sizeof(cwd)))
			cwd[0] = '\0';
		fprintf(stderr, "spoolfs: %s %s%s%s: %s\n", option, cwd, cwd[0] ? "/" : "", *name,
		        strerror(-fd));
		return -EINVAL;
	}
	close(fd);
	if ((*name)[0] == '/')
		return 0;
	absolute = realpath(*name, NULL);
	if (!absolute) {
		fprintf(stderr, "spoolfs: %s %s: %s\n", option, *name, strerror(errno));
		return -EINVAL;
	}
	free(*name);
	*name = absolute;
	return 0;
}

int daemon_options_check(struct daemon_options *o, uint64_t *cache_max_size,
                         size_t *max_manifest_size)
{
	uint64_t manifest_max = 0;

	/* The session's own cache directory has a fresh name each mount: kept, no mount
	 * would ever find it again. */
	if (o->keep_cache && !o->cache_dir) {
		fprintf(stderr, "spoolfs: --keep-cache keeps --cache-dir DIR: give one\n");
		return -EINVAL;
	}
	warn_unused_options(o);
	if (strncmp(o->source, "s3://", 5) == 0)
		o->net.n_mirrors = 0; /* said to be ignored: a bucket's requests are signed */
	if (o->cache_max_size && util_parse_size(o->cache_max_size, cache_max_size) != 0) {
		fprintf(stderr, "spoolfs: bad --cache-max-size '%s' (e.g. 512M, 10G)\n",
		        o->cache_max_size);
		return -EINVAL;
	}
	if (o->max_manifest_size && (util_parse_size(o->max_manifest_size, &manifest_max) != 0 ||
	                             manifest_max == 0 || manifest_max >= SIZE_MAX)) {
		fprintf(stderr, "spoolfs: bad --max-manifest-size '%s' (e.g. 64M, 2G)\n",
		        o->max_manifest_size);
		return -EINVAL;
	}
	*max_manifest_size = (size_t)manifest_max;
	if (strncmp(o->source, "s3://", 5) == 0) {
		free(o->net.netrc_file); /* said by warn_unused_options */
		o->net.netrc_file = NULL;
	}
	if ((o->net.ca_file && check_file_option("--ca-file", &o->net.ca_file) != 0) ||
	    (o->net.netrc_file && check_file_option("--netrc-file", &o->net.netrc_file) != 0))
		return -EINVAL;
	return 0;
}

void daemon_options_free(struct daemon_options *opts)
{
	free(opts->source);
	free(opts->mountpoint);
	free(opts->cache_dir);
	free(opts->net.ca_file);
	free(opts->net.proxy);
	free(opts->net.netrc_file);
	free(opts->cache_max_size);
	free(opts->max_manifest_size);
	free(opts->text.stall_timeout_text);
	free(opts->text.retries_text);
	free(opts->text.max_transfers_text);
	free(opts->text.stats_mode_text);
	free(opts->text.outside_symlinks_text);
	free(opts->text.uid_text);
	free(opts->text.gid_text);
	free(opts->text.file_mode_text);
	free(opts->text.dir_mode_text);
	free(opts->text.metrics_interval_text);
	free(opts->text.prefetch_requests_text);
	free(opts->prefetch_window);
	free(opts->prefetch_budget);
	free(opts->prefetch_list);
	free(opts->record_reads);
	free(opts->writable);
	free(opts->read_order_name);
	free(opts->log.metrics_file);
	for (unsigned i = 0; i < opts->net.n_mirrors; i++)
		free(opts->net.mirrors[i]);
	free(opts->net.mirrors);
	free(opts->log.log_level);
	free(opts->log.log_file);
	free(opts->text.start_timeout_text);
	free(opts->s3.endpoint);
	free(opts->s3.region);
	free(opts->s3.profile);
	free(opts->s3.role_arn);
	free(opts->manifest);
	free(opts->s3.expected_bucket_owner);
}

/*
 * Masks the userinfo of the authority starting at a: the last '@' before its first '/', '?'
 * or '#' ends it, as util_redact_url reads it. A ',' is legal in a password; only in a -o
 * list (in_list) does one end the option, and not when escaped ("\\,", as libfuse reads it).
 */
static bool mask_userinfo(char *a, bool in_list)
{
	char *end = a + strcspn(a, "/?#"), *at = NULL;

	for (char *c = a; c < end; c++) {
		if (in_list && *c == '\\' && c[1]) {
			c++;
			continue;
		}
		if (in_list && *c == ',')
			break;
		if (*c == '@')
			at = c;
	}
	if (!at || at == a)
		return false;
	memset(a, '*', (size_t)(at - a));
	return true;
}

/* The value of a proxy option starting in arg at p ("proxy=" in a -o list, "--proxy="). */
static bool is_proxy_option(const char *arg, const char *p)
{
	return p == arg || p[-1] == ',' ||
	       (p == arg + 2 && arg[0] == '-' && (arg[1] == 'o' || arg[1] == '-'));
}

bool daemon_argv_scrub(int argc, char *argv[])
{
	bool hidden = false;

	for (int i = 1; i < argc; i++) {
		char *arg = argv[i];
		/* "-o LIST" or "-oLIST": its options are separated by ','. */
		bool in_list = (arg[0] == '-' && arg[1] == 'o') || strcmp(argv[i - 1], "-o") == 0;

		for (char *p = strstr(arg, "://"); p; p = strstr(p + 3, "://")) {
			hidden |= mask_userinfo(p + 3, in_list);
			/* A presigned URL's signature is in its query: everything after its '?'
			 * goes (more than the query, in a -o list: harmless). */
			char *query = strchr(p + 3, '?');
			if (query && query[1]) {
				memset(query + 1, '*', strlen(query + 1));
				hidden = true;
				break;
			}
		}
		/* libcurl takes a proxy without a scheme too: "user:pass@host:port". */
		for (char *p = strstr(arg, "proxy="); p; p = strstr(p + 6, "proxy="))
			if (is_proxy_option(arg, p))
				hidden |= mask_userinfo(p + 6, in_list);
		if (i > 1 && strcmp(argv[i - 1], "--proxy") == 0)
			hidden |= mask_userinfo(arg, false);
	}
	return hidden;
}

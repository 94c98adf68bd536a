/*
 * The command line (options.c): what it may say, checked once, before anything starts.
 */
#ifndef SPOOLFS_DAEMON_OPTIONS_H
#define SPOOLFS_DAEMON_OPTIONS_H

#include <stdbool.h>
#include <fuse_lowlevel.h>
#include "fetch/engine/flight.h"

/* As given; daemon_options_parse checks them and sets the numbers they stand for. */
struct daemon_option_texts {
	char *stall_timeout_text;
	char *start_timeout_text;
	char *retries_text;
	char *max_transfers_text;
	char *stats_mode_text;
	char *outside_symlinks_text;
	char *uid_text;
	char *gid_text;
	char *file_mode_text;
	char *dir_mode_text;
	char *metrics_interval_text;
	char *prefetch_requests_text;
};

/* For s3:// sources. */
struct daemon_s3_options {
	char *endpoint; /* --endpoint: another S3 API than AWS's */
	char *region;
	char *profile;
	char *role_arn;              /* --role-arn: web identity (GitHub Actions' OIDC token) */
	char *expected_bucket_owner; /* --expected-bucket-owner */
	int requester_pays;          /* --requester-pays */
	int path_style;
	int no_sign;
};

/* How downloads are made: TLS, proxy, credentials, mirrors, timeouts, retries. */
struct daemon_net_options {
	char *ca_file;
	char *proxy;
	char *netrc_file; /* userinfo for http(s) hosts, kept out of argv */
	char **mirrors;   /* --mirror bases, in order */
	unsigned n_mirrors;
	unsigned stall_timeout_s;
	unsigned retries;
	unsigned max_transfers;
	int allow_link_local;
};

/* What the daemon says and where, and how it runs. */
struct daemon_log_options {
	char *log_level;
	char *log_file;     /* --log-file: instead of stderr or syslog */
	char *metrics_file; /* --metrics-file: absolute once main checked it; NULL: none */
	unsigned metrics_interval_s;
	int foreground;
	int debug;
};

/* The command line: what every part reads (groups of one concern below, the rest here). */
struct daemon_options {
	char *source;
	char *mountpoint;
	char *cache_dir;         /* NULL: a fresh directory per mount, removed at unmount */
	char *cache_max_size;    /* "10G": parsed by daemon_options_check */
	char *max_manifest_size; /* "1G": parsed by daemon_options_check */
	char *manifest;          /* --manifest KEY: a manifest in the s3:// source's bucket */
	char *prefetch_window;   /* "32M": parsed by main */
	char *prefetch_budget;   /* "2G": parsed by main */
	char *prefetch_list;     /* --prefetch-list FILE: paths to fetch from mount time */
	char *record_reads;      /* --record-reads FILE: absolute once main checked it */
	char *writable;          /* --writable DIR: an overlay's upper (daemon/overlay.c) */
	/* Set by the daemon, not a flag: every file and directory shows its owner's write bit
	 * (the mount stays read-only). --writable's overlay sets it (overlay.c): an overlay
	 * copies a file up with the mode the lower one shows and checks a write against it. */
	bool owner_writable;
	char *read_order_name;      /* --read-order-name NAME; NULL: "default", if any */
	int no_read_order;          /* --no-read-order */
	unsigned prefetch_requests; /* speculative requests at once; 0: no walk prefetch */
	unsigned start_timeout_s;   /* --start-timeout: a serving process serves within it */
	unsigned stats_mode;        /* permission bits of the /.spoolfs files: read bits only */
	int outside_symlinks;       /* enum manifest_outside_symlinks */
	/* --uid, --gid: the owner every node shows (-1: the mounting user's). */
	long long uid;
	long long gid;
	/* --file-mode, --dir-mode: permission bits shown instead of the source's, read and
	 * execute only (-1: the source's). */
	int file_mode;
	int dir_mode;
	int keep_cache;
	int no_passthrough;
	int show_help;
	int show_version;
	/* "dev" or "suid" was asked for (mount.fuse3 passes both for root): dropped, and
	 * said once logging is set up. */
	bool asked_dev;
	bool asked_suid;
	struct daemon_option_texts text;
	struct daemon_s3_options s3;
	struct daemon_net_options net;
	struct daemon_log_options log;
};

/* --mirror options: with the manifest's own URL, a flight's FLIGHT_MAX_URLS. */
#define DAEMON_MAX_MIRRORS (FLIGHT_MAX_URLS - 1u)

/* --log-level NAME (or -d) for util_log. */
void daemon_set_log_level(const char *name, bool debug);

/* Parses argv. Returns 0, or -EINVAL after printing why. args keeps what FUSE must see. */
int daemon_options_parse(struct fuse_args *args, struct daemon_options *opts);
void daemon_options_usage(const char *prog);
/* Makes every relative file option (--log-file, --cache-dir, ...) absolute against cwd,
 * the directory the mount was started from: the supervisor and each serving process run
 * from "/" and open them later (a restart, a log reopened at SIGUSR1). 0 or -ENOMEM. */
int daemon_options_resolve(struct daemon_options *opts, const char *cwd);
/*
 * Checks the options against each other and the files they name, after
 * daemon_options_resolve: warns of options the source ignores (and drops them), parses
 * --cache-max-size and --max-manifest-size into *cache_max_size and *max_manifest_size
 * (0: not given), and opens --ca-file and --netrc-file once (made absolute). 0, or -EINVAL
 * after saying why (a usage error).
 */
int daemon_options_check(struct daemon_options *o, uint64_t *cache_max_size,
                         size_t *max_manifest_size);
void daemon_options_free(struct daemon_options *opts);

/*
 * Overwrites in place, with '*', the secrets in the process's own command line: the
 * userinfo and query of every URL, and the userinfo of a scheme-less --proxy/-o proxy=.
 * /proc/PID/cmdline (what `ps` shows every local user) reads this memory, so after this
 * only the lengths show. Call it once the arguments have been copied (daemon_options_parse
 * does). True when something was hidden.
 */
bool daemon_argv_scrub(int argc, char *argv[]);

#endif

/*
 * Network settings every transfer shares (objects, manifests, S3 listings), applied in one
 * place so that a trust store or a proxy set for one is set for all.
 */
#ifndef SPOOLFS_FETCH_NET_H
#define SPOOLFS_FETCH_NET_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stdint.h>

struct fetch_net {
	const char *ca_file;    /* NULL: the system's trust store */
	const char *proxy;      /* NULL: libcurl's http_proxy, https_proxy and no_proxy */
	const char *netrc_file; /* NULL: none; else user names and passwords by host */
	unsigned connect_timeout_s;
	/* Blocking requests (the manifest, S3 listings): one that receives nothing this long
	 * is dropped (0: the caller watches for stalls itself, as the engine does), and tries
	 * in all of one that fails transiently (fetch_net_retry_wait). */
	unsigned stall_timeout_s;
	unsigned max_tries;
};

/* Sets the shared options on easy: TLS trust, proxy, netrc, timeouts, no signals, user agent. */
void fetch_net_apply(CURL *easy, const struct fetch_net *net);

/* A jitter for http_backoff_ms, uniform in [0, 1), different in every process and call. */
double fetch_net_jitter(void);

/*
 * After try `attempt` of a blocking request failed with `why`: false when it may not be
 * tried again (retry_after_s < 0: it cannot pass; or no try is left); else logs and waits
 * the downloads' backoff, or what Retry-After asks (retry_after_s > 0) up to
 * retry_after_cap_ms, and returns true.
 */
bool fetch_net_retry_wait(const struct fetch_net *net, unsigned attempt, int retry_after_s,
                          uint64_t retry_after_cap_ms, const char *why);

#endif

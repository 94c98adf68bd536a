/*
 * Network settings every transfer shares (objects, manifests, S3 listings), applied in one
 * place so that a trust store, a proxy, the stall floor or the address policy set for one
 * is set for all.
 */
#ifndef SPOOLFS_FETCH_NET_H
#define SPOOLFS_FETCH_NET_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

/* Slower than this on average over a stall timeout counts as stalled, for every transfer:
 * a byte now and then keeps no promise, and would hold a mount, a lookup or a reader for
 * days. */
#define FETCH_NET_LOW_SPEED_BYTES_PER_S 1024u

struct fetch_net {
	const char *ca_file;    /* NULL: the system's trust store */
	const char *proxy;      /* NULL: libcurl's http_proxy, https_proxy and no_proxy */
	const char *netrc_file; /* NULL: none; else user names and passwords by host */
	unsigned connect_timeout_s;
	/* Blocking requests (the manifest, S3 listings): one that receives nothing, or under
	 * FETCH_NET_LOW_SPEED_BYTES_PER_S, this long is dropped (0: the caller watches for
	 * stalls itself, as the engine does), and tries in all of one that fails transiently
	 * (fetch_net_retry_wait). */
	unsigned stall_timeout_s;
	unsigned max_tries;
	/* Connections to link-local addresses (instance metadata) are allowed. */
	bool allow_link_local;
};

/*
 * One transfer's view of the address policy: fetch_net_apply points the socket check at
 * it, so it must live as long as the easy handle does transfers. Written by the thread
 * that runs the transfer only.
 */
struct fetch_net_guard {
	CURL *easy;
	bool refused;  /* a connection was refused: its address was link-local */
	char why[300]; /* the refusal as one line naming the host and the address */
};

/* Sets the shared options on easy: TLS trust, proxy, netrc, timeouts, the stall floor (when
 * net->stall_timeout_s), no signals, user agent, and the address policy, whose refusals
 * are recorded in guard. */
void fetch_net_apply(CURL *easy, const struct fetch_net *net, struct fetch_net_guard *guard);

/*
 * Whether a connection to addr is refused without --allow-link-local: IPv4 169.254.0.0/16,
 * IPv6 fe80::/10, those IPv4 addresses mapped into IPv6 (::ffff:169.254.x.y), and AWS's
 * IPv6 instance metadata address fd00:ec2::254.
 */
bool fetch_net_link_local(const struct sockaddr *addr, socklen_t len);

/*
 * Whether easy, asked for url, failed with curl's res because a redirect was refused: to
 * plain http from https, or off http(s) (http_redirected_off_scheme). Then why gets a line
 * naming where it led. Such a failure is not transient.
 */
bool fetch_net_redirect_refused(CURL *easy, int res, const char *url, char *why, size_t why_len);

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

/* The Host header curl sends for a URL (scheme://host[:port]...): "host", with ":port"
 * only when it is not the scheme's default; what a SigV4 signature must name. *host is
 * malloc'd. 0, -EINVAL (not a URL), -ENOMEM. */
int fetch_net_host_header(const char *url, char **host);

#endif

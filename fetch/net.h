/*
 * Network settings every transfer shares (objects, manifests, S3 listings), applied in one
 * place so that a trust store or a proxy set for one is set for all.
 */
#ifndef SPOOLFS_FETCH_NET_H
#define SPOOLFS_FETCH_NET_H

#include <curl/curl.h>

struct fetch_net {
	const char *ca_file; /* NULL: the system's trust store */
	const char *proxy;   /* NULL: libcurl's http_proxy, https_proxy and no_proxy */
	unsigned connect_timeout_s;
};

/* Sets the shared options on easy: TLS trust, proxy, timeouts, no signals, user agent. */
void fetch_net_apply(CURL *easy, const struct fetch_net *net);

#endif

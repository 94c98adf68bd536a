/*
 * See net.h. The strings in struct fetch_net must outlive the transfers it configures.
 *
 * Link-local addresses are checked where curl opens a socket, with the address it is about
 * to connect to: a name that resolves there, a redirect, a manifest's object URL and an
 * IPv4-mapped spelling are all caught, and nothing is sent before the refusal.
 */
#include "fetch/http/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "fetch/http/http.h"
#include "util/log.h"

bool fetch_net_link_local(const struct sockaddr *addr, socklen_t len)
{
	static const unsigned char aws_metadata[16] = {0xfd, 0x00,        0x0e,
	                                               0xc2, [15] = 0x54, [14] = 0x02};

	if (addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		const unsigned char *b =
		    (const unsigned char *)&((const struct sockaddr_in *)addr)->sin_addr;
		return b[0] == 169 && b[1] == 254;
	}
	if (addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
		const struct in6_addr *a6 = &((const struct sockaddr_in6 *)addr)->sin6_addr;
		const unsigned char *b = a6->s6_addr;
		if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80)
			return true;
		if (IN6_IS_ADDR_V4MAPPED(a6))
			return b[12] == 169 && b[13] == 254;
		return memcmp(b, aws_metadata, 16) == 0;
	}
	return false;
}

/* The host of the URL easy is working on, for a message. */
static void current_host(CURL *easy, char *out, size_t out_len)
{
	char *url = NULL, *host = NULL;
	CURLU *u = curl_url();

	snprintf(out, out_len, "?");
	if (u && curl_easy_getinfo(easy, CURLINFO_EFFECTIVE_URL, &url) == CURLE_OK && url &&
	    curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK)
		snprintf(out, out_len, "%s", host);
	curl_free(host);
	curl_url_cleanup(u);
}

static curl_socket_t open_checked(void *clientp, curlsocktype purpose,
                                  struct curl_sockaddr *address)
{
	struct fetch_net_guard *guard = clientp;
	char host[160], shown[INET6_ADDRSTRLEN] = "?";
	const void *raw = NULL;

	(void)purpose;
	if (!fetch_net_link_local(&address->addr, address->addrlen))
		return socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
	if (address->family == AF_INET)
		raw = &((const struct sockaddr_in *)&address->addr)->sin_addr;
	else
		raw = &((const struct sockaddr_in6 *)&address->addr)->sin6_addr;
	inet_ntop(address->family, raw, shown, sizeof(shown));
	current_host(guard->easy, host, sizeof(host));
	/* The first refusal is the one named; curl may try the host's other addresses. */
	if (!guard->refused)
		snprintf(guard->why, sizeof(guard->why),
		         "refused to connect to %s at %s: link-local (cloud instance metadata"
		         " lives there); --allow-link-local allows it",
		         host, shown);
	guard->refused = true;
	return CURL_SOCKET_BAD;
}

void fetch_net_apply(CURL *easy, const struct fetch_net *net, struct fetch_net_guard *guard)
{
	curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(easy, CURLOPT_USERAGENT, "spoolfs/" SPOOLFS_VERSION);
	curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT, (long)net->connect_timeout_s);
	curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
	if (net->ca_file)
		curl_easy_setopt(easy, CURLOPT_CAINFO, net->ca_file);
	if (net->proxy) {
		curl_easy_setopt(easy, CURLOPT_PROXY, net->proxy);
		curl_easy_setopt(easy, CURLOPT_NOPROXY, ""); /* --proxy overrides no_proxy too */
	}
	/* Optional: a URL's own userinfo still wins, and hosts the file does not name get
	 * no credentials. */
	if (net->netrc_file) {
		curl_easy_setopt(easy, CURLOPT_NETRC, (long)CURL_NETRC_OPTIONAL);
		curl_easy_setopt(easy, CURLOPT_NETRC_FILE, net->netrc_file);
	}
	if (net->stall_timeout_s) {
		curl_easy_setopt(easy, CURLOPT_LOW_SPEED_LIMIT,
		                 (long)FETCH_NET_LOW_SPEED_BYTES_PER_S);
		curl_easy_setopt(easy, CURLOPT_LOW_SPEED_TIME, (long)net->stall_timeout_s);
	}
	/* Every connection, the user's own endpoint included: one rule, with nothing to
	 * get wrong about which URL came from whom, and the option lifts it. */
	guard->easy = easy;
	guard->refused = false;
	guard->why[0] = '\0';
	if (!net->allow_link_local) {
		curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, open_checked);
		curl_easy_setopt(easy, CURLOPT_OPENSOCKETDATA, guard);
	}
}

bool fetch_net_redirect_refused(CURL *easy, int res, const char *url, char *why, size_t why_len)
{
	char *effective = NULL, shown[512];

	if (!http_redirected_off_scheme(easy, res, url))
		return false;
	curl_easy_getinfo(easy, CURLINFO_EFFECTIVE_URL, &effective);
	util_redact_url(effective ? effective : "?", shown, sizeof(shown));
	if (strncasecmp(shown, "http://", 7) == 0)
		snprintf(why, why_len,
		         "refused a redirect from https to plain http (%s): it would drop TLS",
		         shown);
	else
		snprintf(why, why_len, "refused a redirect to %s: only http(s) is followed", shown);
	return true;
}

double fetch_net_jitter(void)
{
	return (double)arc4random_uniform(1u << 20) / (double)(1u << 20);
}

bool fetch_net_retry_wait(const struct fetch_net *net, unsigned attempt, int retry_after_s,
                          uint64_t retry_after_cap_ms, const char *why)
{
	uint64_t delay_ms;

	if (retry_after_s < 0 || attempt >= net->max_tries)
		return false;
	/* Jitter keeps many CI machines that failed together from retrying together. */
	delay_ms =
	    http_backoff_ms(attempt, HTTP_BACKOFF_BASE_MS, HTTP_BACKOFF_CAP_MS, fetch_net_jitter(),
	                    retry_after_s > 0 ? retry_after_s : -1, retry_after_cap_ms);
	util_log(UTIL_LOG_WARN, "%s; try %u of %u in %" PRIu64 " ms", why, attempt + 1,
	         net->max_tries, delay_ms);
	nanosleep(&(struct timespec){.tv_sec = (time_t)(delay_ms / 1000),
	                             .tv_nsec = (long)(delay_ms % 1000) * 1000000},
	          NULL);
	return true;
}

/* Host header value curl will send for url: the port only when it is not the default. */
int fetch_net_host_header(const char *base, char **host)
{
	CURLU *u = curl_url();
	char *name = NULL, *port = NULL, *scheme = NULL;
	int rc = -EINVAL;

	if (!u)
		return -ENOMEM;
	if (curl_url_set(u, CURLUPART_URL, base, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_HOST, &name, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK)
		goto out;
	curl_url_get(u, CURLUPART_PORT, &port, 0);
	if (port && !((strcmp(scheme, "http") == 0 && strcmp(port, "80") == 0) ||
	              (strcmp(scheme, "https") == 0 && strcmp(port, "443") == 0)))
		rc = asprintf(host, "%s:%s", name, port) < 0 ? -ENOMEM : 0;
	else
		rc = (*host = strdup(name)) ? 0 : -ENOMEM;
out:
	curl_free(name);
	curl_free(port);
	curl_free(scheme);
	curl_url_cleanup(u);
	return rc;
}

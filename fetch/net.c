/* See net.h. The strings in struct fetch_net must outlive the transfers it configures. */
#include "fetch/net.h"

#include <inttypes.h>
#include <stdlib.h>
#include <time.h>

#include "fetch/http.h"
#include "fetch/log.h"

void fetch_net_apply(CURL *easy, const struct fetch_net *net)
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
		curl_easy_setopt(easy, CURLOPT_LOW_SPEED_LIMIT, 1L);
		curl_easy_setopt(easy, CURLOPT_LOW_SPEED_TIME, (long)net->stall_timeout_s);
	}
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
	fetch_log(FETCH_LOG_WARN, "%s; try %u of %u in %" PRIu64 " ms", why, attempt + 1,
	          net->max_tries, delay_ms);
	nanosleep(&(struct timespec){.tv_sec = (time_t)(delay_ms / 1000),
	                             .tv_nsec = (long)(delay_ms % 1000) * 1000000},
	          NULL);
	return true;
}

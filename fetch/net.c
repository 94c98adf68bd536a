/* See net.h. The strings in struct fetch_net must outlive the transfers it configures. */
#include "fetch/net.h"

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
}

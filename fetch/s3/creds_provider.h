/*
 * The mount's S3 credentials: the current ones, where they came from and when they
 * expire, kept fresh by a thread of their own ("s3-creds").
 *
 * Refresh. Credentials that carry an expiry are fetched again from the source that gave
 * them (creds_chain_fetch) REFRESH_MARGIN before they expire: five minutes, or half their
 * lifetime when that is shorter (test credentials live seconds; an STS session an hour,
 * refreshed after 55 minutes). A refresh that fails is tried again after 1 s, doubling to
 * 60 s, and logged each time with the source and why; the current credentials stay in use
 * until they expire and after (a request then fails, and says so). A request refused
 * because its credentials expired or were revoked (ExpiredToken, RequestExpired,
 * InvalidToken, TokenRefreshRequired) asks for a refresh at once (s3_provider_expired):
 * a clock that runs behind the server's is caught that way.
 *
 * Lock: `lock` guards the current credentials, their generation and the refresh state. It
 * is never held across the network or a process: the refresh thread fetches unlocked and
 * swaps the result in. Signers copy the credentials under it (s3_provider_get) and sign
 * with the copy. No lock is taken while it is held.
 */
#ifndef SPOOLFS_FETCH_S3_CREDS_PROVIDER_H
#define SPOOLFS_FETCH_S3_CREDS_PROVIDER_H

#include <stdbool.h>
#include <stdint.h>

#include "fetch/s3/creds_chain.h"
#include "fetch/s3/s3_creds.h"

#define REFRESH_MARGIN_MAX_S 300
#define REFRESH_RETRY_MIN_MS 1000
#define REFRESH_RETRY_MAX_MS 60000

struct s3_provider;

/*
 * Resolves the chain now (blocking; at mount time) and keeps what it gives. Takes ownership
 * of chain, also on failure. 0, or -errno with one line in err (creds_chain_resolve).
 */
int s3_provider_open(struct creds_chain *chain, struct s3_provider **out, char *err,
                     size_t err_len);

/* Starts the refresh thread (after any fork). 0 or -errno. Without it, refreshes asked
 * for by s3_provider_wait_newer run in the caller's thread. */
int s3_provider_start(struct s3_provider *p);

/* Stops the thread (a fetch in progress is waited for) and frees p. NULL is fine. */
void s3_provider_free(struct s3_provider *p);

/* A copy of the current credentials into *out (release with s3_creds_free) and their
 * generation (1, 2, ...: each refresh adds one). 0 or -ENOMEM. */
int s3_provider_get(struct s3_provider *p, struct s3_creds *out, uint64_t *gen);

/* The current generation. */
uint64_t s3_provider_generation(struct s3_provider *p);

/* A request signed with generation gen was refused as expired: refresh now, unless a newer
 * generation is there already. Never blocks on the network. */
void s3_provider_expired(struct s3_provider *p, uint64_t gen);

/*
 * s3_provider_expired, then waits up to timeout_ms for a generation newer than gen (a
 * lookup's listing, which blocks anyway). True when one came.
 */
bool s3_provider_wait_newer(struct s3_provider *p, uint64_t gen, unsigned timeout_ms);

/* Where the credentials came from, for the log (valid for p's life). */
const char *s3_provider_origin(struct s3_provider *p);

/* When the refresh thread renews credentials obtained at obtained_ms that expire at
 * expiration_ms (both UTC milliseconds): half their life before they expire, at most
 * REFRESH_MARGIN_MAX_S before. Expiration 0 (they never expire): INT64_MAX, never. */
int64_t s3_provider_refresh_due_ms(int64_t obtained_ms, int64_t expiration_ms);

#endif

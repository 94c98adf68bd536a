/*
 * Flight keys: the identity of one object, as the flight table, the spool file's name and
 * index.db know it. This file owns their format; nothing else builds or takes one apart.
 *
 *   "sha256:<hex>"                 an object named by its hash (its size comes with it)
 *   "etag:<size>:<etag> <url>"     one version of a URL (no space in an ETag, nor in a URL)
 *   "url:<size>:<url>"             whatever the URL holds
 *
 * The <url> part is the URL as flight_key_url shows it: never a password or a signature.
 * Callers expecting different bytes never share a key: a sha256 names its size too (the
 * manifest refuses one with two sizes); a URL does not, so two entries naming one URL with
 * different sizes get a key each, and the wrong one fails on its size.
 */
#ifndef SPOOLFS_FETCH_FLIGHT_KEY_H
#define SPOOLFS_FETCH_FLIGHT_KEY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum flight_key_kind {
	FLIGHT_KEY_SHA256,
	FLIGHT_KEY_ETAG,
	FLIGHT_KEY_URL,
};

/*
 * The key of an object (*key, the caller frees it): by sha256 when it has one (lower-case
 * hex, "" for none), else by url and size, and by etag too when it is not "" (a new
 * version is a new object). 0, -ENOMEM, or -EIO when the URL cannot be hashed.
 */
int flight_key_build(const char *sha256, uint64_t size, const char *url, const char *etag,
                     char **key);

/* A key taken apart; the pointers point into the key parsed, the lengths end each part. */
struct flight_key_parts {
	enum flight_key_kind kind;
	const char *sha256; /* FLIGHT_KEY_SHA256 only, else NULL */
	size_t sha256_len;
	uint64_t size;    /* not FLIGHT_KEY_SHA256 */
	const char *etag; /* FLIGHT_KEY_ETAG only, else NULL */
	size_t etag_len;
	const char *url; /* not FLIGHT_KEY_SHA256, else NULL; runs to the end of the key */
};

/* Takes key apart. 0, or -EINVAL when it is not a key this format makes (*out undefined). */
int flight_key_parse(const char *key, struct flight_key_parts *out);

/*
 * Whether key names one version of an object (a sha256, or an ETag): only such a key's
 * spool may serve a later session, or a mount that did not fetch it. By prefix only: a
 * URL may hold a '#' (a fragment) and still name no version.
 */
bool flight_key_names_version(const char *key);

/*
 * url as a key holds it (*out, the caller frees it): as is, unless it carries a secret
 * (util_url_has_secret); then redacted, with the sha256 of the URL without its userinfo
 * (its query kept) after a '#', so the key still names one object and index.db never holds
 * a password, a signature, or a hash a weak password could be guessed back from.
 * 0, -ENOMEM, or -EIO when the URL cannot be hashed.
 */
int flight_key_url(const char *url, char **out);

/* The name of key's spool file in the spool directory, in *name (the caller frees it): a
 * hash of the key, so a later session finds it again. 0, -ENOMEM, or -EIO when the key
 * cannot be hashed. */
int flight_spool_name(const char *key, char **name);

/*
 * What a log line shows of key, in buf (cap bytes), which it returns: the key of a sha256,
 * the URL (redacted: util_redact_url) of the others. A key from an older spoolfs that does
 * not parse shows redacted from its first URL on, else as it is.
 */
const char *flight_key_shown(const char *key, char *buf, size_t cap);

#endif

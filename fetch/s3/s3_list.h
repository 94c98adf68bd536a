/*
 * Streaming parser (expat) for the XML bodies of S3 ListObjectsV2 responses and of S3 error
 * responses. Feed the body in chunks as curl delivers it, then finish to get either one page
 * of the listing or the error. One parser per response; no globals, no I/O, no logging: a
 * parser may be used by one thread at a time, different parsers by different threads.
 *
 * Servers are not trusted. Documents with a DOCTYPE (and so any entity definition) are
 * rejected; the body size, nesting depth, entries per page and every text field are bounded;
 * a malformed document, an unexpected root element, a bad number or boolean, a truncated page
 * without a continuation token, a key that decodes to more than S3_KEY_MAX bytes, an empty
 * key and a malformed %-escape are all errors with a one-line message. A key that decodes to
 * a NUL byte is the bucket's, not a fault of the document: it is left out and counted.
 *
 * Keys are returned exactly as stored in the bucket (after URL-decoding when the response says
 * <EncodingType>url</EncodingType>; S3 writes a space as '+' there, and a '+' as %2B). Keys
 * like "a//b", ".", "..", "dir/" or names over 255 bytes are passed through unchanged: mapping
 * them to file names is the caller's job.
 */
#ifndef SPOOLFS_FETCH_S3_LIST_H
#define SPOOLFS_FETCH_S3_LIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define S3_KEY_MAX 1024   /* bytes of a decoded key or prefix, as S3 allows */
#define S3_ETAG_MAX 256   /* bytes of an ETag with its quotes, plus NUL (= HTTP_ETAG_MAX) */
#define S3_TOKEN_MAX 4096 /* bytes of a NextContinuationToken */
#define S3_LIST_DEFAULT_MAX_ENTRIES 10000 /* Contents + CommonPrefixes per page */
/* Body size: a page of S3's 1000 entries (MinIO, GCS and R2 send no more) with keys of
 * S3_KEY_MAX bytes, every byte %-escaped, is about 3.5 MB; twice that and some. */
#define S3_LIST_DEFAULT_MAX_BYTES (8u << 20)

struct s3_object {
	char *key;              /* decoded, NUL-terminated, 1..S3_KEY_MAX bytes, no NUL inside */
	uint64_t size;          /* <Size> */
	char etag[S3_ETAG_MAX]; /* <ETag> as sent, quotes included ("" when absent) */
	int64_t mtime;          /* <LastModified> in seconds since the epoch, 0 when absent or
	                           not of the form 2009-10-12T17:50:30[.000]Z */
};

struct s3_list_page {
	struct s3_object *objects; /* <Contents>, in document order */
	size_t n_objects;
	char **prefixes; /* <CommonPrefixes><Prefix>, decoded, in document order */
	size_t n_prefixes;
	bool is_truncated; /* <IsTruncated>true: fetch the next page with next_token */
	char *next_token; /* <NextContinuationToken> verbatim (opaque, not decoded); NULL if none */
	long key_count;   /* <KeyCount>, -1 when absent */
	bool url_encoded; /* <EncodingType>url</EncodingType> was present (keys were decoded) */
	size_t n_unnamable;    /* keys and prefixes left out: they hold a NUL byte */
	char *first_unnamable; /* the first of them, still %-encoded; NULL if none */
};

/* The fields of an <Error> body, each truncated to its buffer and with control characters
 * replaced by spaces, so any of them can go into a one-line message. "" when absent. */
struct s3_error {
	char code[64];        /* "NoSuchBucket", "AccessDenied", "PermanentRedirect", ... */
	char message[512];    /* <Message> */
	char region[64];      /* <Region> (AuthorizationHeaderMalformed, wrong region) */
	char endpoint[256];   /* <Endpoint> (PermanentRedirect: the bucket's endpoint) */
	char bucket[256];     /* <BucketName> or <Bucket> */
	char request_id[128]; /* <RequestId> */
};

enum s3_doc_kind {
	S3_DOC_LIST = 1,  /* <ListBucketResult> */
	S3_DOC_ERROR = 2, /* <Error> */
};

struct s3_list_result {
	enum s3_doc_kind kind;
	struct s3_list_page page; /* S3_DOC_LIST: owned here, release with s3_list_result_free */
	struct s3_error error;    /* S3_DOC_ERROR */
};

/* Bounds; a zero field takes the default. */
struct s3_list_limits {
	size_t max_entries; /* S3_LIST_DEFAULT_MAX_ENTRIES */
	size_t max_bytes;   /* S3_LIST_DEFAULT_MAX_BYTES */
};

struct s3_list_parser;

/* A parser for one response body. limits may be NULL. Returns 0 or -ENOMEM. */
int s3_list_parser_new(const struct s3_list_limits *limits, struct s3_list_parser **out);

/*
 * Feeds the next chunk of the body (any size, any split, len 0 is fine). Returns 0, or
 * -EBADMSG (malformed or unexpected XML), -E2BIG (a bound exceeded) or -ENOMEM. Errors are
 * sticky: later calls return the same error. The message is s3_list_parser_errmsg.
 */
int s3_list_parser_feed(struct s3_list_parser *p, const void *data, size_t len);

/*
 * Ends the body and moves the result into *out (zeroed first; on failure left empty). Returns
 * 0, -EBADMSG (including a body that ended early), -E2BIG or -ENOMEM. Call once.
 */
int s3_list_parser_finish(struct s3_list_parser *p, struct s3_list_result *out);

/* The last error as one line ("" when none); valid until the parser is freed. */
const char *s3_list_parser_errmsg(const struct s3_list_parser *p);

/* Frees the parser and anything it still holds. NULL-safe. */
void s3_list_parser_free(struct s3_list_parser *p);

/* Frees what *r owns and zeroes it. NULL-safe and idempotent. */
void s3_list_result_free(struct s3_list_result *r);

/*
 * One-shot: new + feed(all) + finish + free. err (may be NULL) gets the message on failure.
 */
int s3_list_parse(const void *body, size_t len, const struct s3_list_limits *limits,
                  struct s3_list_result *out, char *err, size_t err_len);

/*
 * Strict URL-decoding of an S3 encoding-type=url value: "%XX" (two hex digits, any case) is
 * that byte, '+' is a space, every other byte is itself. Writes a NUL-terminated string of at
 * most out_len - 1 bytes. Returns the decoded length, -EINVAL for a malformed escape, -EILSEQ
 * for a decoded NUL, -E2BIG when it does not fit.
 */
long s3_url_decode(const char *in, size_t len, char *out, size_t out_len);

#endif

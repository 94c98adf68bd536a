/*
 * Unit tests for fetch/s3/s3_list.h: realistic ListObjectsV2 pages (truncated with a token, the
 * last page, url-encoded and plain keys, hostile key shapes), S3 error bodies, malformed and
 * hostile XML, bounds, and streaming in arbitrary chunks.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fetch/s3/s3_list.h"
#include "helpers.h"

#define XML_DECL "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
#define LBR_OPEN "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
#define OWNER                                                                                      \
	"<Owner><ID>75aa57f09aa0c8caeab4f8c24e99d10f8e7faeebf76c078efc7c6caea54ba06a</ID></Owner>"

/* Page 1 of a delimiter=/ encoding-type=url listing, as AWS writes it (fields in AWS order). */
static const char page1[] = XML_DECL LBR_OPEN
    "<Name>examplebucket</Name><Prefix></Prefix>"
    "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
    "<KeyCount>9</KeyCount><MaxKeys>9</MaxKeys><Delimiter>%2F</Delimiter>"
    "<EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>"
    "<Contents><Key>a+b+c.txt</Key><LastModified>2009-10-12T17:50:30.000Z</LastModified>"
    "<ETag>&quot;fba9dede5f27731c9771645a39863328&quot;</ETag>"
    "<ChecksumAlgorithm>CRC32</ChecksumAlgorithm><Size>434234</Size>" OWNER
    "<StorageClass>STANDARD</StorageClass></Contents>"
    "<Contents><Key>caf%C3%A9+%2B1%25.txt</Key><LastModified>2023-02-28T23:59:59Z</LastModified>"
    "<ETag>\"9b2cf535f27731c974343645a3985328-3\"</ETag><Size>18446744073709551</Size>"
    "<StorageClass>STANDARD</StorageClass></Contents>"
    "<Contents><Key>a%2F%2Fb</Key><LastModified>2023-01-01T00:00:00.000Z</LastModified>"
    "<ETag>\"d41d8cd98f00b204e9800998ecf8427e\"</ETag><Size>1</Size></Contents>"
    "<Contents><Key>a//b2</Key><LastModified>bogus</LastModified><Size>2</Size></Contents>"
    "<Contents><Key>.</Key><Size>3</Size></Contents>"
    "<Contents><Key>..</Key><Size>4</Size></Contents>"
    "<Contents><Key>dir%2F</Key><LastModified>2023-01-01T00:00:00.000Z</LastModified>"
    "<ETag>\"d41d8cd98f00b204e9800998ecf8427e\"</ETag><Size>0</Size></Contents>"
    "<CommonPrefixes><Prefix>photos%2F</Prefix></CommonPrefixes>"
    "<CommonPrefixes><Prefix>sp+ace%2F%E2%82%AC%2F</Prefix></CommonPrefixes>"
    "</ListBucketResult>";

/* The last page, MinIO style: <EncodingType> after the entries it applies to, pretty-printed. */
static const char page2[] =
    XML_DECL LBR_OPEN "\n"
                      "  <Name>examplebucket</Name>\n"
                      "  <ContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM="
                      "</ContinuationToken>\n"
                      "  <KeyCount> 2 </KeyCount>\n"
                      "  <IsTruncated>\n    false\n  </IsTruncated>\n"
                      "  <Contents>\n"
                      "    <Key>z%20last</Key>\n"
                      "    <Size>\n 7 \n</Size>\n"
                      "  </Contents>\n"
                      "  <CommonPrefixes><Prefix>zz%2F</Prefix></CommonPrefixes>\n"
                      "  <EncodingType>url</EncodingType>\n"
                      "</ListBucketResult>\n";

static void check_page1(const struct s3_list_result *r)
{
	const struct s3_list_page *pg = &r->page;

	assert_int_equal(r->kind, S3_DOC_LIST);
	assert_true(pg->is_truncated);
	assert_true(pg->url_encoded);
	assert_string_equal(pg->next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
	assert_int_equal(pg->key_count, 9);
	assert_int_equal(pg->n_objects, 7);
	assert_int_equal(pg->n_prefixes, 2);

	assert_string_equal(pg->objects[0].key, "a b c.txt");
	assert_int_equal(pg->objects[0].size, 434234);
	assert_string_equal(pg->objects[0].etag, "\"fba9dede5f27731c9771645a39863328\"");
	assert_int_equal(pg->objects[0].mtime, 1255369830);

	assert_string_equal(pg->objects[1].key, "caf\xc3\xa9 +1%.txt");
	assert_int_equal(pg->objects[1].size, 18446744073709551ULL);
	assert_string_equal(pg->objects[1].etag, "\"9b2cf535f27731c974343645a3985328-3\"");
	assert_int_equal(pg->objects[1].mtime, 1677628799);

	/* Hostile shapes pass through unchanged; the caller maps them to names. */
	assert_string_equal(pg->objects[2].key, "a//b");
	assert_string_equal(pg->objects[3].key, "a//b2");
	assert_int_equal(pg->objects[3].mtime, 0); /* unparsable date */
	assert_string_equal(pg->objects[3].etag, "");
	assert_string_equal(pg->objects[4].key, ".");
	assert_string_equal(pg->objects[5].key, "..");
	assert_int_equal(pg->objects[5].mtime, 0); /* absent */
	assert_string_equal(pg->objects[6].key, "dir/");
	assert_int_equal(pg->objects[6].size, 0);

	assert_string_equal(pg->prefixes[0], "photos/");
	assert_string_equal(pg->prefixes[1], "sp ace/\xe2\x82\xac/");
}

static void test_page_truncated(void **state)
{
	struct s3_list_result r;
	char err[256];

	assert_int_equal(s3_list_parse(page1, strlen(page1), NULL, &r, err, sizeof(err)), 0);
	check_page1(&r);
	s3_list_result_free(&r);
	s3_list_result_free(&r); /* idempotent */
	s3_list_result_free(NULL);
}

static void test_page_last_encoding_at_end(void **state)
{
	struct s3_list_result r;
	char err[256];

	assert_int_equal(s3_list_parse(page2, strlen(page2), NULL, &r, err, sizeof(err)), 0);
	assert_int_equal(r.kind, S3_DOC_LIST);
	assert_false(r.page.is_truncated);
	assert_null(r.page.next_token);
	assert_int_equal(r.page.key_count, 2);
	assert_int_equal(r.page.n_objects, 1);
	assert_string_equal(r.page.objects[0].key, "z last");
	assert_int_equal(r.page.objects[0].size, 7);
	assert_int_equal(r.page.n_prefixes, 1);
	assert_string_equal(r.page.prefixes[0], "zz/");
	s3_list_result_free(&r);
}

/* Without <EncodingType> keys are taken literally: '+' and "%41" stay. An empty bucket. */
static void test_page_plain_and_empty(void **state)
{
	static const char plain[] = LBR_OPEN "<IsTruncated>false</IsTruncated>"
	                                     "<Contents><Key>a+b%41 &amp; &lt;c&gt;</Key>"
	                                     "<Size>5</Size></Contents></ListBucketResult>";
	static const char empty[] = LBR_OPEN "<Name>b</Name><KeyCount>0</KeyCount>"
	                                     "<IsTruncated>false</IsTruncated></ListBucketResult>";
	struct s3_list_result r;

	assert_int_equal(s3_list_parse(plain, strlen(plain), NULL, &r, NULL, 0), 0);
	assert_false(r.page.url_encoded);
	assert_string_equal(r.page.objects[0].key, "a+b%41 & <c>");
	assert_int_equal(r.page.key_count, -1);
	s3_list_result_free(&r);

	assert_int_equal(s3_list_parse(empty, strlen(empty), NULL, &r, NULL, 0), 0);
	assert_int_equal(r.page.n_objects, 0);
	assert_int_equal(r.page.n_prefixes, 0);
	assert_null(r.page.objects);
	assert_int_equal(r.page.key_count, 0);
	s3_list_result_free(&r);
}

/* Feeding one byte at a time, or in uneven chunks, gives the same page. */
static void test_streaming(void **state)
{
	static const size_t chunks[] = {1, 2, 3, 7, 64, 1000};
	size_t len = strlen(page1);

	for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
		struct s3_list_parser *p;
		struct s3_list_result r;

		assert_int_equal(s3_list_parser_new(NULL, &p), 0);
		for (size_t off = 0; off < len; off += chunks[c]) {
			size_t n = len - off < chunks[c] ? len - off : chunks[c];
			assert_int_equal(s3_list_parser_feed(p, page1 + off, n), 0);
			assert_int_equal(s3_list_parser_feed(p, page1, 0), 0);
		}
		assert_int_equal(s3_list_parser_finish(p, &r), 0);
		assert_string_equal(s3_list_parser_errmsg(p), "");
		check_page1(&r);
		/* A second finish is a usage error, and the result already handed over stays. */
		struct s3_list_result r2;
		assert_int_equal(s3_list_parser_finish(p, &r2), -EINVAL);
		s3_list_parser_free(p);
		s3_list_result_free(&r);
	}
}

static void expect_error_doc(const char *xml, const char *code, const char *message,
                             const char *region, const char *endpoint, const char *bucket)
{
	struct s3_list_result r;
	char err[256];

	assert_int_equal(s3_list_parse(xml, strlen(xml), NULL, &r, err, sizeof(err)), 0);
	assert_int_equal(r.kind, S3_DOC_ERROR);
	assert_string_equal(r.error.code, code);
	assert_string_equal(r.error.message, message);
	assert_string_equal(r.error.region, region);
	assert_string_equal(r.error.endpoint, endpoint);
	assert_string_equal(r.error.bucket, bucket);
	assert_null(r.page.objects);
	s3_list_result_free(&r);
}

static void test_error_bodies(void **state)
{
	expect_error_doc(XML_DECL
	                 "<Error><Code>NoSuchBucket</Code>"
	                 "<Message>The specified bucket does not exist</Message>"
	                 "<BucketName>nosuch</BucketName><RequestId>4442587FB7D0A2F9</RequestId>"
	                 "<HostId>abc=</HostId></Error>",
	                 "NoSuchBucket", "The specified bucket does not exist", "", "", "nosuch");
	expect_error_doc(
	    XML_DECL "<Error><Code>AuthorizationHeaderMalformed</Code><Message>The authorization "
	             "header is malformed; the region 'us-east-1' is wrong; expecting "
	             "'eu-west-1'</Message><Region>eu-west-1</Region>"
	             "<RequestId>ABC</RequestId><HostId>x</HostId></Error>",
	    "AuthorizationHeaderMalformed",
	    "The authorization header is malformed; the region 'us-east-1' is wrong; expecting "
	    "'eu-west-1'",
	    "eu-west-1", "", "");
	expect_error_doc(XML_DECL "<Error><Code>PermanentRedirect</Code><Message>The bucket you "
	                          "are attempting to access must be addressed using the specified "
	                          "endpoint.</Message><Endpoint>mybucket.s3.eu-west-1.amazonaws.com"
	                          "</Endpoint><Bucket>mybucket</Bucket></Error>",
	                 "PermanentRedirect",
	                 "The bucket you are attempting to access must be addressed using the "
	                 "specified endpoint.",
	                 "", "mybucket.s3.eu-west-1.amazonaws.com", "mybucket");
	/* Control characters become spaces (one-line messages; XML already made CRLF one LF);
	 * unknown fields are ignored. */
	expect_error_doc("<Error><Code>AccessDenied</Code><Message>Access\r\nDenied\t!</Message>"
	                 "<Extra><Deep>1</Deep></Extra></Error>",
	                 "AccessDenied", "Access Denied !", "", "", "");

	/* An overlong message is truncated, not an error. */
	char *big = malloc(20000);
	assert_non_null(big);
	strcpy(big, "<Error><Code>SlowDown</Code><Message>");
	size_t n = strlen(big);
	memset(big + n, 'm', 10000);
	strcpy(big + n + 10000, "</Message></Error>");
	struct s3_list_result r;
	assert_int_equal(s3_list_parse(big, strlen(big), NULL, &r, NULL, 0), 0);
	assert_int_equal(r.kind, S3_DOC_ERROR);
	assert_int_equal(strlen(r.error.message), sizeof(r.error.message) - 1);
	assert_string_equal(r.error.code, "SlowDown");
	free(big);
}

static void expect_bad(const char *xml, int rc, const char *msg)
{
	struct s3_list_result r;
	char err[256] = "";

	assert_int_equal(s3_list_parse(xml, strlen(xml), NULL, &r, err, sizeof(err)), rc);
	assert_int_equal(r.kind, 0);
	assert_null(r.page.objects);
	assert_null(r.page.prefixes);
	assert_null(r.page.next_token);
	if (!strstr(err, msg))
		fail_msg("message \"%s\" lacks \"%s\"", err, msg);
}

#define C(key, size) "<Contents><Key>" key "</Key><Size>" size "</Size></Contents>"
#define L(body) LBR_OPEN body "</ListBucketResult>"

/* A key holding a NUL is the bucket's: left out and counted, the rest of the page kept. */
static void test_key_with_a_nul_is_left_out(void **state)
{
	static const char xml[] =
	    L("<EncodingType>url</EncodingType>" C("a", "1") C("a%00b", "2") C("b", "3")
	          C("c%00", "4") "<CommonPrefixes><Prefix>d%00/</Prefix></CommonPrefixes>"
	                         "<CommonPrefixes><Prefix>e/</Prefix></CommonPrefixes>");
	struct s3_list_result r;
	char err[256];

	assert_int_equal(s3_list_parse(xml, strlen(xml), NULL, &r, err, sizeof(err)), 0);
	assert_int_equal(r.page.n_objects, 2);
	assert_string_equal(r.page.objects[0].key, "a");
	assert_string_equal(r.page.objects[1].key, "b");
	assert_int_equal(r.page.objects[1].size, 3);
	assert_int_equal(r.page.n_prefixes, 1);
	assert_string_equal(r.page.prefixes[0], "e/");
	assert_int_equal(r.page.n_unnamable, 3);
	assert_string_equal(r.page.first_unnamable, "a%00b");
	s3_list_result_free(&r);
}

static void test_malformed_xml(void **state)
{
	expect_bad("", -EBADMSG, "malformed XML at line 1");
	expect_bad("not xml", -EBADMSG, "malformed XML");
	expect_bad(LBR_OPEN C("a", "1"), -EBADMSG, "malformed XML"); /* ends early */
	expect_bad(L(C("a", "1")) "<x/>", -EBADMSG, "junk after document element");
	expect_bad(LBR_OPEN "<Contents><Key>a</Size></Contents></ListBucketResult>", -EBADMSG,
	           "mismatched tag");
	expect_bad(L("<Contents><Key>&bogus;</Key><Size>1</Size></Contents>"), -EBADMSG,
	           "undefined entity");
	expect_bad(L("<Contents><Key>a&#0;b</Key><Size>1</Size></Contents>"), -EBADMSG,
	           "malformed XML");
	expect_bad("<html><body>502 Bad Gateway</body></html>", -EBADMSG,
	           "unexpected root element <html>");
	/* Billion laughs: refused at the DOCTYPE, before any expansion. */
	expect_bad("<?xml version=\"1.0\"?><!DOCTYPE lolz [<!ENTITY lol \"lol\">"
	           "<!ENTITY lol2 \"&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;\">]>"
	           "<ListBucketResult><Contents><Key>&lol2;</Key><Size>1</Size></Contents>"
	           "</ListBucketResult>",
	           -EBADMSG, "DOCTYPE is not allowed");
	expect_bad("<!DOCTYPE x SYSTEM \"file:///etc/passwd\"><Error><Code>&x;</Code></Error>",
	           -EBADMSG, "DOCTYPE is not allowed");
}

static void test_bad_fields(void **state)
{
	expect_bad(L("<Contents><Key>a<b>x</b></Key><Size>1</Size></Contents>"), -EBADMSG,
	           "unexpected element <b> inside <Key>");
	expect_bad(L("<Contents><Size>1</Size></Contents>"), -EBADMSG, "<Contents> without <Key>");
	expect_bad(L("<Contents><Key>a</Key></Contents>"), -EBADMSG, "<Contents> without <Size>");
	expect_bad(L("<Contents><Key>a</Key><Key>b</Key><Size>1</Size></Contents>"), -EBADMSG,
	           "two <Key>");
	expect_bad(L("<CommonPrefixes></CommonPrefixes>"), -EBADMSG, "without <Prefix>");
	expect_bad(L(C("a", "-1")), -EBADMSG, "bad <Size> \"-1\"");
	expect_bad(L(C("a", "12abc")), -EBADMSG, "bad <Size>");
	expect_bad(L(C("a", "")), -EBADMSG, "bad <Size>");
	expect_bad(L(C("a", "99999999999999999999")), -EBADMSG, "bad <Size>");
	expect_bad(L(C("a", "9223372036854775808")), -EBADMSG, "bad <Size>");
	expect_bad(L("<IsTruncated>yes</IsTruncated>"), -EBADMSG, "bad <IsTruncated> \"yes\"");
	expect_bad(L("<IsTruncated>true</IsTruncated>" C("a", "1")), -EBADMSG,
	           "no <NextContinuationToken>");
	expect_bad(
	    L("<IsTruncated>true</IsTruncated><NextContinuationToken></NextContinuationToken>"),
	    -EBADMSG, "no <NextContinuationToken>");
	expect_bad(L("<KeyCount>x</KeyCount>"), -EBADMSG, "bad <KeyCount>");
	expect_bad(L("<EncodingType>base64</EncodingType>"), -EBADMSG,
	           "unsupported <EncodingType> \"base64\"");
	expect_bad(L("<EncodingType>url</EncodingType>" C("a%4", "1")), -EBADMSG,
	           "malformed %-escape");
	expect_bad(L("<EncodingType>url</EncodingType>" C("a%zz", "1")), -EBADMSG,
	           "malformed %-escape");
	expect_bad(L("<EncodingType>url</EncodingType>" C("a%", "1")), -EBADMSG,
	           "malformed %-escape");
	/* After keys left out (a NUL) and kept: each freed once (a double free, under ASan). */
	expect_bad(L("<EncodingType>url</EncodingType>" C("a%00b", "1") C("b", "2")
	                 C("c%zz", "3") "<CommonPrefixes><Prefix>d%00/</Prefix></CommonPrefixes>"),
	           -EBADMSG, "<Key> \"c%zz\" has a malformed");
	expect_bad(L("<EncodingType>url</EncodingType>" C("b", "2")
	                 C("a%00b", "1") "<CommonPrefixes><Prefix>d%00/</Prefix></CommonPrefixes>"
	                                 "<CommonPrefixes><Prefix>e/</Prefix></CommonPrefixes>"
	                                 "<CommonPrefixes><Prefix>%G1/</Prefix></CommonPrefixes>"),
	           -EBADMSG, "has a malformed");
	expect_bad(L("<EncodingType>url</EncodingType><CommonPrefixes><Prefix>%G1/</Prefix>"
	             "</CommonPrefixes>"),
	           -EBADMSG, "<CommonPrefixes><Prefix> \"%G1/\" has a malformed");
	expect_bad(L(C("", "1")), -EBADMSG, "empty <Key>");
	/* Server text is echoed as printable ASCII only. */
	expect_bad(L("<IsTruncated>tru\xc3\xa9</IsTruncated>"), -EBADMSG, "\"tru??\"");
}

static char *repeat(const char *unit, size_t n)
{
	size_t u = strlen(unit);
	char *s = malloc(u * n + 1);

	assert_non_null(s);
	for (size_t i = 0; i < n; i++)
		memcpy(s + i * u, unit, u);
	s[u * n] = '\0';
	return s;
}

static int parse_key(const char *key, bool url, struct s3_list_result *r, char *err, size_t err_len)
{
	size_t n = strlen(key) + 256;
	char *xml = malloc(n);
	int rc;

	assert_non_null(xml);
	snprintf(xml, n,
	         LBR_OPEN "%s<Contents><Key>%s</Key><Size>1</Size></Contents>"
	                  "</ListBucketResult>",
	         url ? "<EncodingType>url</EncodingType>" : "", key);
	rc = s3_list_parse(xml, strlen(xml), NULL, r, err, err_len);
	free(xml);
	return rc;
}

static void test_key_length(void **state)
{
	struct s3_list_result r;
	char err[256];
	char *k;

	/* 1024 bytes is the most S3 allows: fine, plain or fully escaped. */
	k = repeat("k", S3_KEY_MAX);
	assert_int_equal(parse_key(k, false, &r, err, sizeof(err)), 0);
	assert_int_equal(strlen(r.page.objects[0].key), S3_KEY_MAX);
	s3_list_result_free(&r);
	free(k);
	k = repeat("%C3", S3_KEY_MAX);
	assert_int_equal(parse_key(k, true, &r, err, sizeof(err)), 0);
	assert_int_equal(strlen(r.page.objects[0].key), S3_KEY_MAX);
	s3_list_result_free(&r);
	free(k);

	/* 1025 bytes is not. */
	k = repeat("k", S3_KEY_MAX + 1);
	assert_int_equal(parse_key(k, false, &r, err, sizeof(err)), -E2BIG);
	assert_string_equal(err, "<Key> longer than 1024 bytes");
	free(k);
	k = repeat("%41", S3_KEY_MAX + 1);
	assert_int_equal(parse_key(k, true, &r, err, sizeof(err)), -E2BIG);
	assert_string_equal(err, "<Key> longer than 1024 bytes");
	free(k);
	/* A huge key is refused while streaming, without being buffered whole. */
	k = repeat("k", 100000);
	assert_int_equal(parse_key(k, false, &r, err, sizeof(err)), -E2BIG);
	assert_string_equal(err, "<Key> longer than 1024 bytes");
	free(k);

	/* ETag and token bounds. */
	char *xml = malloc(8000);
	assert_non_null(xml);
	k = repeat("e", S3_ETAG_MAX);
	snprintf(xml, 8000, L("<Contents><Key>a</Key><ETag>%s</ETag><Size>1</Size></Contents>"), k);
	assert_int_equal(s3_list_parse(xml, strlen(xml), NULL, &r, err, sizeof(err)), -E2BIG);
	assert_string_equal(err, "<ETag> longer than 255 bytes");
	free(k);
	k = repeat("t", S3_TOKEN_MAX + 1);
	snprintf(xml, 8000, L("<NextContinuationToken>%s</NextContinuationToken>"), k);
	assert_int_equal(s3_list_parse(xml, strlen(xml), NULL, &r, err, sizeof(err)), -E2BIG);
	free(k);
	free(xml);
}

static void test_limits(void **state)
{
	static const char three[] = L(C("a", "1") C("b", "2") "<CommonPrefixes><Prefix>c/</Prefix>"
	                                                      "</CommonPrefixes>");
	struct s3_list_limits lim = {.max_entries = 2};
	struct s3_list_parser *p;
	struct s3_list_result r;
	char err[256];

	assert_int_equal(s3_list_parse(three, strlen(three), &lim, &r, err, sizeof(err)), -E2BIG);
	assert_string_equal(err, "more than 2 entries in one listing page");
	lim.max_entries = 3;
	assert_int_equal(s3_list_parse(three, strlen(three), &lim, &r, err, sizeof(err)), 0);
	s3_list_result_free(&r);

	/* Body size, counted across feeds; the error is sticky. */
	lim = (struct s3_list_limits){.max_bytes = 100};
	assert_int_equal(s3_list_parser_new(&lim, &p), 0);
	assert_int_equal(s3_list_parser_feed(p, three, 60), 0);
	assert_int_equal(s3_list_parser_feed(p, three + 60, 41), -E2BIG);
	assert_string_equal(s3_list_parser_errmsg(p), "response body larger than 100 bytes");
	assert_int_equal(s3_list_parser_feed(p, "", 0), -E2BIG);
	assert_int_equal(s3_list_parser_finish(p, &r), -E2BIG);
	assert_null(r.page.objects);
	s3_list_parser_free(p);

	/* Nesting depth, even inside ignored elements. */
	char *open = repeat("<x>", 40), *close = repeat("</x>", 40);
	char *xml = malloc(strlen(open) + strlen(close) + 200);
	assert_non_null(xml);
	sprintf(xml, L("<Owner>%s%s</Owner>"), open, close);
	assert_int_equal(s3_list_parse(xml, strlen(xml), NULL, &r, err, sizeof(err)), -E2BIG);
	assert_string_equal(err, "XML nested deeper than 32 elements");
	free(open);
	free(close);
	free(xml);
	s3_list_parser_free(NULL);
}

/* A full page of 1000 keys, as S3 sends by default. */
static void test_full_page(void **state)
{
	size_t cap = 1000 * 200 + 1000, len = 0;
	char *xml = malloc(cap);
	struct s3_list_result r;

	assert_non_null(xml);
	len += (size_t)snprintf(xml + len, cap - len,
	                        LBR_OPEN "<KeyCount>1000</KeyCount><IsTruncated>true</IsTruncated>"
	                                 "<NextContinuationToken>tok</NextContinuationToken>"
	                                 "<EncodingType>url</EncodingType>");
	for (int i = 0; i < 1000; i++)
		len += (size_t)snprintf(xml + len, cap - len,
		                        "<Contents><Key>d%%2Ff%04d</Key><LastModified>2009-10-12T"
		                        "17:50:30.000Z</LastModified><ETag>\"%032d\"</ETag>"
		                        "<Size>%d</Size></Contents>",
		                        i, i, i);
	len += (size_t)snprintf(xml + len, cap - len, "</ListBucketResult>");
	assert_true(len < cap);
	assert_int_equal(s3_list_parse(xml, len, NULL, &r, NULL, 0), 0);
	assert_int_equal(r.page.n_objects, 1000);
	assert_string_equal(r.page.objects[999].key, "d/f0999");
	assert_int_equal(r.page.objects[999].size, 999);
	assert_string_equal(r.page.next_token, "tok");
	s3_list_result_free(&r);
	free(xml);
}

static void test_url_decode(void **state)
{
	char out[16];

	assert_int_equal(s3_url_decode("a+b%2fc%2F", 10, out, sizeof(out)), 6);
	assert_string_equal(out, "a b/c/");
	assert_int_equal(s3_url_decode("", 0, out, sizeof(out)), 0);
	assert_string_equal(out, "");
	assert_int_equal(s3_url_decode("%", 1, out, sizeof(out)), -EINVAL);
	assert_int_equal(s3_url_decode("%4", 2, out, sizeof(out)), -EINVAL);
	/* The length bounds the input: "%41" cut after two bytes is malformed. */
	assert_int_equal(s3_url_decode("%41", 2, out, sizeof(out)), -EINVAL);
	assert_int_equal(s3_url_decode("%g1", 3, out, sizeof(out)), -EINVAL);
	assert_int_equal(s3_url_decode("%00", 3, out, sizeof(out)), -EILSEQ);
	assert_int_equal(s3_url_decode("abcd", 4, out, 4), -E2BIG);
	assert_int_equal(s3_url_decode("abc", 3, out, 4), 3);
	assert_int_equal(s3_url_decode("abc", 3, out, 0), -E2BIG);
}

/* Hostile input never crashes (run under ASan/UBSan): random bytes, and page1 with bytes
 * flipped, cut, or fed in random chunks. Every outcome must be a clean result or error. */
static void test_hostile_input(void **state)
{
	uint64_t seed = 0x9e3779b97f4a7c15ULL;
	size_t len = strlen(page1);
	char *buf = malloc(len + 1);

	assert_non_null(buf);
	for (int iter = 0; iter < 3000; iter++) {
		struct s3_list_parser *p;
		struct s3_list_result r;
		size_t n = len, off = 0;
		int rc = 0;

		memcpy(buf, page1, len);
		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		if (iter % 3 == 0) {
			for (size_t i = 0; i < len; i++) {
				seed = seed * 6364136223846793005ULL + 1;
				buf[i] = (char)(seed >> 56);
			}
		} else {
			for (int k = 0; k < 1 + iter % 7; k++) {
				seed = seed * 6364136223846793005ULL + 1;
				buf[(seed >> 33) % len] = "<>/&%;\"'x\0\xff+"[(seed >> 20) % 13];
			}
			if (iter % 3 == 2)
				n = (size_t)(seed >> 40) % len;
		}
		assert_int_equal(s3_list_parser_new(NULL, &p), 0);
		while (off < n && rc == 0) {
			seed = seed * 6364136223846793005ULL + 1;
			size_t c = 1 + (size_t)(seed >> 50) % 97;
			if (c > n - off)
				c = n - off;
			rc = s3_list_parser_feed(p, buf + off, c);
			off += c;
		}
		if (rc == 0)
			rc = s3_list_parser_finish(p, &r);
		if (rc == 0) {
			assert_true(r.kind == S3_DOC_LIST || r.kind == S3_DOC_ERROR);
			for (size_t i = 0; i < r.page.n_objects; i++)
				assert_true(strlen(r.page.objects[i].key) <= S3_KEY_MAX);
			s3_list_result_free(&r);
		} else {
			assert_true(rc == -EBADMSG || rc == -E2BIG);
			assert_true(strlen(s3_list_parser_errmsg(p)) > 0);
		}
		s3_list_parser_free(p);
	}
	free(buf);
}

/* Parsers share nothing: threads parsing at once each get the full page. */
#define N_THREADS 4

static void *parse_worker(void *arg)
{
	int *ok = arg;

	*ok = 1;
	for (int i = 0; i < 100; i++) {
		struct s3_list_result r;
		if (s3_list_parse(page1, strlen(page1), NULL, &r, NULL, 0) != 0) {
			*ok = 0;
			return NULL;
		}
		if (r.page.n_objects != 7 ||
		    strcmp(r.page.objects[1].key, "caf\xc3\xa9 +1%.txt") != 0)
			*ok = 0;
		s3_list_result_free(&r);
	}
	return NULL;
}

static void test_threads(void **state)
{
	int ok[N_THREADS];

	test_threads_run(N_THREADS, parse_worker, ok, sizeof(ok[0]));
	for (int i = 0; i < N_THREADS; i++)
		assert_int_equal(ok[i], 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_page_truncated),
	    cmocka_unit_test(test_page_last_encoding_at_end),
	    cmocka_unit_test(test_key_with_a_nul_is_left_out),
	    cmocka_unit_test(test_page_plain_and_empty),
	    cmocka_unit_test(test_streaming),
	    cmocka_unit_test(test_error_bodies),
	    cmocka_unit_test(test_malformed_xml),
	    cmocka_unit_test(test_bad_fields),
	    cmocka_unit_test(test_key_length),
	    cmocka_unit_test(test_limits),
	    cmocka_unit_test(test_full_page),
	    cmocka_unit_test(test_url_decode),
	    cmocka_unit_test(test_hostile_input),
	    cmocka_unit_test(test_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

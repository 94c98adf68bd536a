/*
 * Credential documents (see creds_doc.h). Every buffer that held a secret is cleansed.
 */
#include "fetch/s3/creds_doc.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <expat.h>
#include <openssl/crypto.h>
#include <sqlite3.h>

#define FIELD_MAX 8192 /* an STS session token is a few KiB */

enum sts_field { F_NONE, F_KEY, F_SECRET, F_TOKEN, F_EXPIRES, F_CODE, F_MESSAGE, F_COUNT };

struct sts_parse {
	char *text[F_COUNT]; /* malloc'd text of each field seen */
	size_t len[F_COUNT];
	enum sts_field cur;
	int depth;
	bool in_credentials;
	bool is_error;
	bool too_long;
	bool nomem;
};

/* Element names arrive as "namespace|local" (the parser is namespace-aware). */
static const char *local_name(const char *name)
{
	const char *bar = strrchr(name, '|');

	return bar ? bar + 1 : name;
}

static void XMLCALL on_start(void *ud, const XML_Char *name, const XML_Char **attrs)
{
	struct sts_parse *p = ud;
	const char *n = local_name(name);

	(void)attrs;
	p->depth++;
	p->cur = F_NONE;
	if (p->depth == 1 && strcmp(n, "ErrorResponse") == 0)
		p->is_error = true;
	else if (strcmp(n, "Credentials") == 0)
		p->in_credentials = true;
	else if (p->in_credentials && strcmp(n, "AccessKeyId") == 0)
		p->cur = F_KEY;
	else if (p->in_credentials && strcmp(n, "SecretAccessKey") == 0)
		p->cur = F_SECRET;
	else if (p->in_credentials && strcmp(n, "SessionToken") == 0)
		p->cur = F_TOKEN;
	else if (p->in_credentials && strcmp(n, "Expiration") == 0)
		p->cur = F_EXPIRES;
	else if (p->is_error && strcmp(n, "Code") == 0)
		p->cur = F_CODE;
	else if (p->is_error && strcmp(n, "Message") == 0)
		p->cur = F_MESSAGE;
	if (p->cur != F_NONE && p->text[p->cur]) {
		/* A field given twice: the last one counts. */
		OPENSSL_cleanse(p->text[p->cur], p->len[p->cur]);
		free(p->text[p->cur]);
		p->text[p->cur] = NULL;
		p->len[p->cur] = 0;
	}
}

static void XMLCALL on_end(void *ud, const XML_Char *name)
{
	struct sts_parse *p = ud;

	if (strcmp(local_name(name), "Credentials") == 0)
		p->in_credentials = false;
	p->cur = F_NONE;
	p->depth--;
}

static void XMLCALL on_text(void *ud, const XML_Char *s, int len)
{
	struct sts_parse *p = ud;
	char *grown;
	enum sts_field f = p->cur;

	if (f == F_NONE || len <= 0)
		return;
	if (p->len[f] + (size_t)len > FIELD_MAX) {
		p->too_long = true;
		return;
	}
	grown = malloc(p->len[f] + (size_t)len + 1);
	if (!grown) {
		p->nomem = true;
		return;
	}
	if (p->text[f]) {
		memcpy(grown, p->text[f], p->len[f]);
		OPENSSL_cleanse(p->text[f], p->len[f]);
		free(p->text[f]);
	}
	memcpy(grown + p->len[f], s, (size_t)len);
	p->len[f] += (size_t)len;
	grown[p->len[f]] = '\0';
	p->text[f] = grown;
}

/* Text without surrounding blanks, as a new string; NULL when empty (or out of memory). */
static char *trimmed(const char *s)
{
	size_t n;

	if (!s)
		return NULL;
	while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')
		s++;
	n = strlen(s);
	while (n > 0 && strchr(" \t\r\n", s[n - 1]))
		n--;
	return n ? strndup(s, n) : NULL;
}

int creds_doc_sts(const char *xml, size_t len, struct s3_creds *out, char *err, size_t err_len)
{
	struct sts_parse p = {0};
	XML_Parser parser = NULL;
	char *expires = NULL;
	int rc = -EINVAL;

	memset(out, 0, sizeof(*out));
	if (len > CREDS_DOC_MAX) {
		snprintf(err, err_len, "STS answer of %zu bytes is too large", len);
		return -EINVAL;
	}
	parser = XML_ParserCreateNS(NULL, '|');
	if (!parser)
		return -ENOMEM;
	XML_SetUserData(parser, &p);
	XML_SetElementHandler(parser, on_start, on_end);
	XML_SetCharacterDataHandler(parser, on_text);
	if (XML_Parse(parser, xml, (int)len, 1) != XML_STATUS_OK) {
		snprintf(err, err_len, "STS answer is not XML: %s at line %lu",
		         XML_ErrorString(XML_GetErrorCode(parser)),
		         (unsigned long)XML_GetCurrentLineNumber(parser));
		goto out;
	}
	if (p.nomem) {
		rc = -ENOMEM;
		goto out;
	}
	if (p.too_long) {
		snprintf(err, err_len, "STS answer has a field over %u bytes", FIELD_MAX);
		goto out;
	}
	if (p.is_error) {
		char *code = trimmed(p.text[F_CODE]), *msg = trimmed(p.text[F_MESSAGE]);
		snprintf(err, err_len, "STS refused: %s%s%s", code ? code : "no error code",
		         msg ? ": " : "", msg ? msg : "");
		free(code);
		free(msg);
		rc = -EACCES;
		goto out;
	}
	out->access_key_id = trimmed(p.text[F_KEY]);
	out->secret_access_key = trimmed(p.text[F_SECRET]);
	out->session_token = trimmed(p.text[F_TOKEN]);
	expires = trimmed(p.text[F_EXPIRES]);
	if (!out->access_key_id || !out->secret_access_key || !out->session_token || !expires) {
		snprintf(err, err_len,
		         "STS answer has no Credentials with AccessKeyId, SecretAccessKey, "
		         "SessionToken and Expiration");
		goto out;
	}
	long long t = creds_doc_time(expires);
	if (t <= 0) {
		snprintf(err, err_len, "STS answer has a bad Expiration: %.40s", expires);
		goto out;
	}
	out->expiration = (time_t)t;
	rc = 0;
out:
	if (rc)
		s3_creds_free(out);
	for (int i = 0; i < F_COUNT; i++) {
		if (p.text[i]) {
			OPENSSL_cleanse(p.text[i], p.len[i]);
			free(p.text[i]);
		}
	}
	free(expires);
	XML_ParserFree(parser);
	return rc;
}

/* One in-memory database for a query over a JSON text bound as ?1. */
static int json_query(const char *sql, const char *json, size_t len, sqlite3 **db,
                      sqlite3_stmt **st)
{
	*db = NULL;
	*st = NULL;
	if (len > CREDS_DOC_MAX)
		return -EINVAL;
	if (sqlite3_open_v2(":memory:", db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_MEMORY, NULL) !=
	    SQLITE_OK)
		return -ENOMEM;
	if (sqlite3_prepare_v2(*db, sql, -1, st, NULL) != SQLITE_OK ||
	    sqlite3_bind_text(*st, 1, json, (int)len, SQLITE_STATIC) != SQLITE_OK)
		return -ENOMEM;
	return sqlite3_step(*st) == SQLITE_ROW ? 0 : -EINVAL;
}

static void json_done(sqlite3 *db, sqlite3_stmt *st)
{
	sqlite3_finalize(st);
	sqlite3_close(db);
}

/* Column i as a new string when it is a non-empty JSON string (type 'text'). */
static char *text_col(sqlite3_stmt *st, int value_col, int type_col)
{
	const unsigned char *type = sqlite3_column_text(st, type_col);
	const unsigned char *v = sqlite3_column_text(st, value_col);

	if (!type || strcmp((const char *)type, "text") != 0 || !v || !*v)
		return NULL;
	return strdup((const char *)v);
}

int creds_doc_json(const char *json, size_t len, int version_required, struct s3_creds *out,
                   char *err, size_t err_len)
{
	/* json_type() is NULL for a missing member; a JSON object is checked first, since
	 * json_extract of a non-JSON text is an error, not NULL. */
	static const char sql[] =
	    "SELECT json_type(?1) = 'object',"
	    " json_extract(?1, '$.AccessKeyId'), json_type(?1, '$.AccessKeyId'),"
	    " json_extract(?1, '$.SecretAccessKey'), json_type(?1, '$.SecretAccessKey'),"
	    " coalesce(json_extract(?1, '$.Token'), json_extract(?1, '$.SessionToken')),"
	    " coalesce(json_type(?1, '$.Token'), json_type(?1, '$.SessionToken')),"
	    " json_extract(?1, '$.Expiration'), json_type(?1, '$.Expiration'),"
	    " json_extract(?1, '$.Version'), json_type(?1, '$.Version'),"
	    " json_extract(?1, '$.Code'), json_type(?1, '$.Code'),"
	    " unixepoch(json_extract(?1, '$.Expiration'))"
	    " WHERE json_valid(?1)";
	sqlite3 *db;
	sqlite3_stmt *st;
	char *code = NULL;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = json_query(sql, json, len, &db, &st);
	if (rc == -EINVAL || (rc == 0 && sqlite3_column_int(st, 0) != 1)) {
		snprintf(err, err_len, "not a JSON object");
		rc = -EINVAL;
		goto out;
	}
	if (rc)
		goto out;
	code = text_col(st, 11, 12);
	if (code && strcmp(code, "Success") != 0) {
		snprintf(err, err_len, "the endpoint answered Code \"%.60s\"", code);
		rc = -EACCES;
		goto out;
	}
	rc = -EINVAL;
	if (version_required &&
	    (sqlite3_column_type(st, 10) == SQLITE_NULL ||
	     strcmp((const char *)sqlite3_column_text(st, 10), "integer") != 0 ||
	     sqlite3_column_int64(st, 9) != 1)) {
		snprintf(err, err_len, "its JSON lacks \"Version\": 1");
		goto out;
	}
	out->access_key_id = text_col(st, 1, 2);
	out->secret_access_key = text_col(st, 3, 4);
	out->session_token = text_col(st, 5, 6);
	if (!out->access_key_id || !out->secret_access_key) {
		snprintf(err, err_len, "its JSON lacks a string AccessKeyId or SecretAccessKey");
		goto out;
	}
	if (sqlite3_column_type(st, 8) != SQLITE_NULL) {
		if (sqlite3_column_type(st, 13) == SQLITE_NULL ||
		    sqlite3_column_int64(st, 13) <= 0) {
			snprintf(err, err_len, "its JSON has a bad Expiration");
			goto out;
		}
		out->expiration = (time_t)sqlite3_column_int64(st, 13);
	}
	rc = 0;
out:
	free(code);
	if (rc)
		s3_creds_free(out);
	json_done(db, st);
	return rc;
}

int creds_doc_json_string(const char *json, size_t len, const char *name, char **value)
{
	static const char sql[] = "SELECT json_extract(?1, '$.' || ?2), json_type(?1, '$.' || ?2)"
	                          " WHERE json_valid(?1)";
	sqlite3 *db;
	sqlite3_stmt *st;
	int rc;

	*value = NULL;
	if (len > CREDS_DOC_MAX)
		return -EINVAL;
	if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_MEMORY, NULL) !=
	    SQLITE_OK) {
		sqlite3_close(db);
		return -ENOMEM;
	}
	rc = -ENOMEM;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		goto out_db;
	if (sqlite3_bind_text(st, 1, json, (int)len, SQLITE_STATIC) != SQLITE_OK ||
	    sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC) != SQLITE_OK)
		goto out;
	rc = -EINVAL;
	if (sqlite3_step(st) == SQLITE_ROW) {
		*value = text_col(st, 0, 1);
		rc = *value ? 0 : -EINVAL;
	}
out:
	sqlite3_finalize(st);
out_db:
	sqlite3_close(db);
	return rc;
}

long long creds_doc_time(const char *iso)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	long long t = -1;

	if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_MEMORY, NULL) ==
	        SQLITE_OK &&
	    sqlite3_prepare_v2(db, "SELECT unixepoch(?1)", -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_bind_text(st, 1, iso, -1, SQLITE_STATIC) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
		t = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return t;
}

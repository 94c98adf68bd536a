/*
 * S3 credentials from the environment or the shared credentials file (see s3_creds.h).
 * Every buffer that held file text or a secret is cleansed before it is freed.
 */
#include "fetch/s3/s3_creds.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "util/trusted_path.h"

#define CREDS_FILE_MAX (1u << 20)

static void set_err(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t err_len, const char *fmt, ...)
{
	va_list ap;

	if (!err || err_len == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, err_len, fmt, ap);
	va_end(ap);
}

/* strerror without its shared buffer (GNU strerror_r). */
static const char *errstr(int e, char buf[128])
{
	return strerror_r(e, buf, 128);
}

static void free_secret(char **s)
{
	if (*s) {
		OPENSSL_cleanse(*s, strlen(*s));
		free(*s);
		*s = NULL;
	}
}

void s3_creds_free(struct s3_creds *c)
{
	if (!c)
		return;
	free_secret(&c->access_key_id);
	free_secret(&c->secret_access_key);
	free_secret(&c->session_token);
	free(c->origin);
	c->origin = NULL;
	c->expiration = 0;
}

int s3_creds_copy(const struct s3_creds *src, struct s3_creds *dst)
{
	memset(dst, 0, sizeof(*dst));
	dst->access_key_id = src->access_key_id ? strdup(src->access_key_id) : NULL;
	dst->secret_access_key = src->secret_access_key ? strdup(src->secret_access_key) : NULL;
	dst->session_token = src->session_token ? strdup(src->session_token) : NULL;
	dst->origin = src->origin ? strdup(src->origin) : NULL;
	dst->expiration = src->expiration;
	if ((src->access_key_id && !dst->access_key_id) ||
	    (src->secret_access_key && !dst->secret_access_key) ||
	    (src->session_token && !dst->session_token) || (src->origin && !dst->origin)) {
		s3_creds_free(dst);
		return -ENOMEM;
	}
	return 0;
}

static char *dup_n(const char *s, size_t n)
{
	char *p = malloc(n + 1);

	if (p) {
		memcpy(p, s, n);
		p[n] = '\0';
	}
	return p;
}

static bool is_blank(char c)
{
	return c == ' ' || c == '\t';
}

static void trim(const char **s, const char **e)
{
	while (*s < *e && is_blank(**s))
		(*s)++;
	while (*e > *s && (is_blank((*e)[-1]) || (*e)[-1] == '\r'))
		(*e)--;
}

static bool key_is(const char *k, size_t n, const char *want)
{
	return strlen(want) == n && strncasecmp(k, want, n) == 0;
}

/* Replaces *slot with a copy of [v, v+n), or NULL when n == 0 (an empty value is no value). */
static int set_value(char **slot, const char *v, size_t n)
{
	free_secret(slot);
	if (n == 0)
		return 0;
	*slot = dup_n(v, n);
	return *slot ? 0 : -ENOMEM;
}

int s3_ini_scan(const char *text, size_t len, const char *name, const char *section, s3_ini_fn fn,
                void *ctx, char *err, size_t err_len)
{
	const char *p = text, *end = text + len;
	bool in_section = false, in_target = false, seen_target = false;
	long key_indent = -1;
	size_t lineno = 0;
	int rc;

	if (!name)
		name = "credentials file";
	if (len > 0 && memchr(text, '\0', len)) {
		set_err(err, err_len, "%s: NUL byte in file", name);
		return -EINVAL;
	}

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *ls = p, *le = nl ? nl : end;
		long indent = 0;

		p = nl ? nl + 1 : end;
		lineno++;
		while (ls < le && is_blank(*ls)) {
			ls++;
			indent++;
		}
		trim(&ls, &le);
		if (ls == le || *ls == '#' || *ls == ';')
			continue;
		if (key_indent >= 0 && indent > key_indent)
			continue; /* continuation of the previous value */
		if (*ls == '[') {
			const char *ns = ls + 1, *ne = le - 1;
			bool closed = le - ls >= 2 && *ne == ']';
			if (closed)
				trim(&ns, &ne);
			if (!closed || ns == ne) {
				set_err(err, err_len, "%s:%zu: malformed section header", name,
				        lineno);
				return -EINVAL;
			}
			in_section = true;
			in_target = strlen(section) == (size_t)(ne - ns) &&
			            memcmp(ns, section, (size_t)(ne - ns)) == 0;
			seen_target = seen_target || in_target;
			key_indent = -1;
			continue;
		}

		const char *ks = ls, *ke = ls, *vs, *ve = le;
		while (ke < le && *ke != '=' && *ke != ':')
			ke++;
		if (ke == le) {
			set_err(err, err_len, "%s:%zu: expected \"key = value\"", name, lineno);
			return -EINVAL;
		}
		vs = ke + 1;
		trim(&ks, &ke);
		trim(&vs, &ve);
		if (ks == ke) {
			set_err(err, err_len, "%s:%zu: empty key", name, lineno);
			return -EINVAL;
		}
		if (!in_section) {
			set_err(err, err_len, "%s:%zu: key outside of a [profile] section", name,
			        lineno);
			return -EINVAL;
		}
		key_indent = indent;
		if (!in_target)
			continue;
		rc = fn(ctx, ks, (size_t)(ke - ks), vs, (size_t)(ve - vs));
		if (rc < 0) {
			set_err(err, err_len, "out of memory");
			return rc;
		}
	}
	return seen_target ? 1 : 0;
}

static int take_creds_key(void *ctx, const char *k, size_t kn, const char *v, size_t vn)
{
	struct s3_creds *out = ctx;

	if (key_is(k, kn, "aws_access_key_id"))
		return set_value(&out->access_key_id, v, vn);
	if (key_is(k, kn, "aws_secret_access_key"))
		return set_value(&out->secret_access_key, v, vn);
	if (key_is(k, kn, "aws_session_token"))
		return set_value(&out->session_token, v, vn);
	return 0;
}

int s3_creds_parse(const char *text, size_t len, const char *name, const char *profile,
                   struct s3_creds *out, char *err, size_t err_len)
{
	int rc;

	memset(out, 0, sizeof(*out));
	if (!profile)
		profile = "default";
	if (!name)
		name = "credentials file";
	if (!*profile) {
		set_err(err, err_len, "empty profile name");
		return -EINVAL;
	}
	rc = s3_ini_scan(text, len, name, profile, take_creds_key, out, err, err_len);
	if (rc < 0)
		goto fail;
	bool seen_target = rc == 1;

	rc = -ENOENT;
	if (!seen_target) {
		set_err(err, err_len, "no credentials: no profile [%s] in %s", profile, name);
		goto fail;
	}
	if (!out->access_key_id && !out->secret_access_key) {
		set_err(err, err_len, "no credentials: profile [%s] in %s has no aws_access_key_id",
		        profile, name);
		goto fail;
	}
	rc = -EINVAL;
	if (!out->secret_access_key) {
		set_err(err, err_len,
		        "profile [%s] in %s has aws_access_key_id but no aws_secret_access_key",
		        profile, name);
		goto fail;
	}
	if (!out->access_key_id) {
		set_err(err, err_len,
		        "profile [%s] in %s has aws_secret_access_key but no aws_access_key_id",
		        profile, name);
		goto fail;
	}
	rc = -ENOMEM;
	if (asprintf(&out->origin, "%s [%s]", name, profile) < 0) {
		out->origin = NULL;
		set_err(err, err_len, "out of memory");
		goto fail;
	}
	return 0;
fail:
	s3_creds_free(out);
	return rc;
}

/* Reads the whole file (at most CREDS_FILE_MAX bytes) into *buf, *len. */
int s3_creds_read_file(const char *path, char **buf, size_t *len, char *err, size_t err_len)
{
	struct stat st;
	char *b = NULL, ebuf[128], why[PATH_MAX + 256];
	size_t n = 0, cap;
	int fd, rc;

	*buf = NULL;
	*len = 0;
	/* As ssh does with its config: a file that names a command to run (credential_process)
	 * or keys to use is read only when no one but root or this user could have written
	 * it, nor renamed a directory above it (util/trusted_path.h). */
	fd = util_trusted_open(path, UTIL_TRUSTED_READ_FOLLOW, why, sizeof(why));
	if (fd < 0) {
		rc = fd;
		if (rc == -ENOENT)
			set_err(
			    err, err_len,
			    "no credentials: AWS_ACCESS_KEY_ID is not set and %s does not exist",
			    path);
		else if (rc == -EACCES || rc == -ELOOP || rc == -EINVAL)
			set_err(
			    err, err_len,
			    "refused %s: %s (it must be owned by root or uid %u, and neither it "
			    "nor a directory above it writable by group or others)",
			    path, why, (unsigned)geteuid());
		else
			set_err(err, err_len, "cannot open %s: %s", path, errstr(-rc, ebuf));
		return rc;
	}
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		set_err(err, err_len, "cannot stat %s: %s", path, errstr(-rc, ebuf));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		set_err(err, err_len, "%s is not a regular file", path);
		goto out;
	}
	if ((unsigned long long)st.st_size > CREDS_FILE_MAX) {
		rc = -EFBIG;
		set_err(err, err_len, "%s is larger than %u bytes", path, CREDS_FILE_MAX);
		goto out;
	}
	cap = (size_t)st.st_size + 1;
	b = malloc(cap);
	if (!b) {
		rc = -ENOMEM;
		set_err(err, err_len, "out of memory");
		goto out;
	}
	for (;;) {
		ssize_t r = read(fd, b + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = -errno;
			set_err(err, err_len, "cannot read %s: %s", path, errstr(-rc, ebuf));
			goto out;
		}
		if (r == 0)
			break;
		n += (size_t)r;
		if (n == cap) {
			/* The file grew while we read it. */
			rc = -EFBIG;
			set_err(err, err_len, "%s changed while being read", path);
			goto out;
		}
	}
	*buf = b;
	*len = n;
	b = NULL;
	rc = 0;
out:
	if (b) {
		OPENSSL_cleanse(b, cap);
		free(b);
	}
	close(fd);
	return rc;
}

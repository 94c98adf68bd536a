/*
 * Unit tests for fetch/s3/s3_creds.h: the environment, the shared credentials file (profile
 * choice, INI rules, malformed files), and that no message carries a secret.
 *
 * Each test runs with the AWS_* variables cleared and HOME pointing at a fresh temporary
 * directory, so the machine's own ~/.aws is never read.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fetch/s3/creds_chain.h"
#include "fetch/s3/creds_doc.h"
#include "fetch/s3/creds_provider.h"
#include "fetch/s3/s3_creds.h"

#define SECRET "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define SECRET2 "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY"

static const char *const aws_vars[] = {
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
};

struct fixture {
	char home[64];
	char file[128]; /* $HOME/creds */
	char *saved_home;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	const char *home = getenv("HOME");

	if (!f)
		return -1;
	f->saved_home = home ? strdup(home) : NULL;
	snprintf(f->home, sizeof(f->home), "/tmp/test_s3_creds.XXXXXX");
	if (!mkdtemp(f->home))
		return -1;
	snprintf(f->file, sizeof(f->file), "%s/creds", f->home);
	for (size_t i = 0; i < sizeof(aws_vars) / sizeof(aws_vars[0]); i++)
		unsetenv(aws_vars[i]);
	setenv("HOME", f->home, 1);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char path[256];

	unlink(f->file);
	snprintf(path, sizeof(path), "%s/.aws/credentials", f->home);
	unlink(path);
	snprintf(path, sizeof(path), "%s/.aws", f->home);
	rmdir(path);
	snprintf(path, sizeof(path), "%s/adir", f->home);
	rmdir(path);
	rmdir(f->home);
	if (f->saved_home)
		setenv("HOME", f->saved_home, 1);
	else
		unsetenv("HOME");
	free(f->saved_home);
	free(f);
	return 0;
}

/* The chain as the mount runs it (--profile = profile), with no instance metadata. */
static int resolve(const char *profile, struct s3_creds *c, char *err, size_t err_len)
{
	struct creds_chain_options o = {.profile = profile};
	struct creds_chain *chain = NULL;
	enum creds_source source;
	int rc;

	memset(c, 0, sizeof(*c));
	setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
	rc = creds_chain_create(&o, &chain, err, err_len);
	if (rc == 0)
		rc = creds_chain_resolve(chain, &source, c, err, err_len);
	creds_chain_free(chain);
	return rc;
}

static void write_file(const char *path, const char *text)
{
	FILE *fp = fopen(path, "w");

	assert_non_null(fp);
	assert_int_equal(fwrite(text, 1, strlen(text), fp), strlen(text));
	assert_int_equal(fclose(fp), 0);
}

static const char two_profiles[] = "# shared credentials\n"
                                   "[default]\n"
                                   "aws_access_key_id = AKIADEFAULT\n"
                                   "aws_secret_access_key = " SECRET "\n"
                                   "\n"
                                   "; another profile\n"
                                   "[dev]\n"
                                   "aws_access_key_id=AKIADEV\n"
                                   "aws_secret_access_key=" SECRET2 "\n"
                                   "aws_session_token = TOKEN/dev+==\n";

static void test_env(void **state)
{
	struct s3_creds c;
	char err[256];

	setenv("AWS_ACCESS_KEY_ID", "AKIAENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", SECRET, 1);
	setenv("AWS_SESSION_TOKEN", "TOKENENV", 1);
	assert_int_equal(resolve(NULL, &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key_id, "AKIAENV");
	assert_string_equal(c.secret_access_key, SECRET);
	assert_string_equal(c.session_token, "TOKENENV");
	assert_string_equal(c.origin, "environment");
	s3_creds_free(&c);
	assert_null(c.access_key_id);
	s3_creds_free(&c); /* idempotent */
	s3_creds_free(NULL);

	/* An empty token is none. */
	setenv("AWS_SESSION_TOKEN", "", 1);
	assert_int_equal(resolve(NULL, &c, err, sizeof(err)), 0);
	assert_null(c.session_token);
	s3_creds_free(&c);
}

static void test_env_partial(void **state)
{
	struct s3_creds c;
	char err[256];

	/* A broken step: said, and the next one tried (here none is left). */
	setenv("AWS_ACCESS_KEY_ID", "AKIAENV", 1);
	assert_int_equal(resolve(NULL, &c, err, sizeof(err)), -ENOENT);
	assert_null(c.access_key_id);
	assert_non_null(
	    strstr(err, "environment: AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not"));

	unsetenv("AWS_ACCESS_KEY_ID");
	setenv("AWS_SECRET_ACCESS_KEY", SECRET, 1);
	assert_int_equal(resolve(NULL, &c, err, sizeof(err)), -ENOENT);
	assert_null(strstr(err, SECRET));
	assert_non_null(strstr(err, "AWS_ACCESS_KEY_ID is not"));
}

/* The environment wins over the file, unless a profile is named explicitly (--profile). */
static void test_env_vs_file(void **state)
{
	struct fixture *f = *state;
	struct s3_creds c;
	char err[256];

	write_file(f->file, two_profiles);
	setenv("AWS_SHARED_CREDENTIALS_FILE", f->file, 1);
	setenv("AWS_ACCESS_KEY_ID", "AKIAENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", SECRET, 1);
	setenv("AWS_PROFILE", "dev", 1);

	assert_int_equal(resolve(NULL, &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key_id, "AKIAENV");
	s3_creds_free(&c);

	assert_int_equal(resolve("dev", &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key_id, "AKIADEV");
	s3_creds_free(&c);
}

static void test_file_profiles(void **state)
{
	struct fixture *f = *state;
	struct s3_creds c;
	char err[256], origin[256];

	write_file(f->file, two_profiles);
	setenv("AWS_SHARED_CREDENTIALS_FILE", f->file, 1);

	/* "default" when nothing names a profile. */
	assert_int_equal(resolve(NULL, &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key_id, "AKIADEFAULT");
	assert_string_equal(c.secret_access_key, SECRET);
	assert_null(c.session_token);
	snprintf(origin, sizeof(origin), "%s [default]", f->file);
	assert_string_equal(c.origin, origin);
	s3_creds_free(&c);

	/* AWS_PROFILE. */
	setenv("AWS_PROFILE", "dev", 1);
	assert_int_equal(resolve(NULL, &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key_id, "AKIADEV");
	assert_string_equal(c.secret_access_key, SECRET2);
	assert_string_equal(c.session_token, "TOKEN/dev+==");
	s3_creds_free(&c);

	/* The argument beats AWS_PROFILE. */
	assert_int_equal(resolve("default", &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key_id, "AKIADEFAULT");
	s3_creds_free(&c);

	/* No such profile, named explicitly: the mount fails, with a message naming it. */
	assert_int_equal(resolve("prod", &c, err, sizeof(err)), -EINVAL);
	assert_null(c.access_key_id);
	assert_non_null(strstr(err, "no profile [prod]"));

	assert_int_equal(resolve("", &c, err, sizeof(err)), -EINVAL);
}

/* $HOME/.aws/credentials by default; "~/" in AWS_SHARED_CREDENTIALS_FILE is $HOME. */
static void test_file_locations(void **state)
{
	struct fixture *f = *state;
	struct s3_creds c;
	char err[256], path[256];

	assert_int_equal(resolve(NULL, &c, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "/.aws/credentials and no "));

	snprintf(path, sizeof(path), "%s/.aws", f->home);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/.aws/credentials", f->home);
	write_file(path, two_profiles);
	assert_int_equal(resolve(NULL, &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key_id, "AKIADEFAULT");
	s3_creds_free(&c);

	write_file(f->file, "[default]\naws_access_key_id=AKIATILDE\naws_secret_access_key=s\n");
	setenv("AWS_SHARED_CREDENTIALS_FILE", "~/creds", 1);
	assert_int_equal(resolve(NULL, &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key_id, "AKIATILDE");
	s3_creds_free(&c);

	/* An explicit file that does not exist is "no credentials" too. */
	setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/spoolfs/creds", 1);
	assert_int_equal(resolve(NULL, &c, err, sizeof(err)), -ENOENT);

	/* No HOME and no file variable. */
	unsetenv("AWS_SHARED_CREDENTIALS_FILE");
	unsetenv("HOME");
	assert_int_equal(resolve(NULL, &c, err, sizeof(err)), -ENOENT);
	setenv("HOME", f->home, 1);

	/* A directory is not a credentials file. */
	snprintf(path, sizeof(path), "%s/adir", f->home);
	assert_int_equal(mkdir(path, 0700), 0);
	setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
	assert_int_equal(resolve(NULL, &c, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "is not a regular file"));
}

static void test_file_too_big(void **state)
{
	struct fixture *f = *state;
	struct s3_creds c;
	char err[256];
	int fd = open(f->file, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (1 << 20) + 1), 0);
	close(fd);
	setenv("AWS_SHARED_CREDENTIALS_FILE", f->file, 1);
	assert_int_equal(resolve(NULL, &c, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "larger than"));
}

/* Python-configparser rules: ':' delimiter, case-insensitive keys, CRLF, continuation lines,
 * indented comments, no inline comments, merged duplicate sections, trimmed section names. */
static void test_ini_rules(void **state)
{
	static const char text[] = "\r\n"
	                           "  # indented comment\r\n"
	                           "[ other ]\r\n"
	                           "aws_access_key_id = AKIAOTHER\r\n"
	                           "[ default ]\r\n"
	                           "AWS_ACCESS_KEY_ID : AKIAFIRST\r\n"
	                           "region = us-east-1\r\n"
	                           "s3 =\r\n"
	                           "    max_concurrent_requests = 20\r\n"
	                           "    aws_access_key_id = AKIANESTED\r\n"
	                           "aws_secret_access_key=  abc#def;ghi  \r\n"
	                           "[other]\r\n"
	                           "x = y\r\n"
	                           "[default]\r\n"
	                           "aws_access_key_id = AKIALAST\r\n";
	struct s3_creds c;
	char err[256];

	assert_int_equal(s3_creds_parse(text, strlen(text), "f", NULL, &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key_id, "AKIALAST");
	assert_string_equal(c.secret_access_key, "abc#def;ghi");
	assert_null(c.session_token);
	assert_string_equal(c.origin, "f [default]");
	s3_creds_free(&c);

	assert_int_equal(s3_creds_parse(text, strlen(text), "f", "other", &c, err, sizeof(err)),
	                 -EINVAL);
	assert_non_null(strstr(err, "has aws_access_key_id but no aws_secret_access_key"));
}

static void expect_parse(const char *text, const char *profile, int rc, const char *msg)
{
	struct s3_creds c;
	char err[256] = "";

	assert_int_equal(s3_creds_parse(text, strlen(text), "creds", profile, &c, err, sizeof(err)),
	                 rc);
	assert_null(c.access_key_id);
	assert_null(c.secret_access_key);
	assert_null(c.origin);
	if (!strstr(err, msg))
		fail_msg("message \"%s\" lacks \"%s\"", err, msg);
	assert_null(strstr(err, SECRET));
}

static void test_malformed(void **state)
{
	expect_parse("[default\naws_secret_access_key = " SECRET "\n", NULL, -EINVAL,
	             "creds:1: malformed section header");
	expect_parse("[default]\naws_secret_access_key = " SECRET "\ngarbage\n", NULL, -EINVAL,
	             "creds:3: expected \"key = value\"");
	expect_parse("aws_secret_access_key = " SECRET "\n[default]\n", NULL, -EINVAL,
	             "creds:1: key outside of a [profile] section");
	expect_parse("[default]\n = " SECRET "\n", NULL, -EINVAL, "creds:2: empty key");
	expect_parse("[]\n", NULL, -EINVAL, "creds:1: malformed section header");
	expect_parse("[default]\naws_secret_access_key = " SECRET "\n", NULL, -EINVAL,
	             "has aws_secret_access_key but no aws_access_key_id");
	expect_parse("[default]\nregion = eu-west-1\n", NULL, -ENOENT,
	             "profile [default] in creds has no aws_access_key_id");
	expect_parse("[default]\naws_access_key_id =\naws_secret_access_key =\n", NULL, -ENOENT,
	             "has no aws_access_key_id");
	expect_parse("", NULL, -ENOENT, "no profile [default] in creds");
	expect_parse("[default]\n", "", -EINVAL, "empty profile name");

	static const char nul[] = "[default]\naws_access_key_id = A\0B\n";
	struct s3_creds c;
	char err[128];
	assert_int_equal(s3_creds_parse(nul, sizeof(nul) - 1, "n", NULL, &c, err, sizeof(err)),
	                 -EINVAL);
	/* A NULL or tiny err buffer is fine. */
	assert_int_equal(s3_creds_parse("", 0, "n", NULL, &c, NULL, 0), -ENOENT);
	assert_int_equal(s3_creds_parse("", 0, "n", NULL, &c, err, 1), -ENOENT);
	assert_string_equal(err, "");
}

static void test_sts_doc(void **state)
{
	static const char ok[] =
	    "<AssumeRoleWithWebIdentityResponse "
	    "xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
	    "<AssumeRoleWithWebIdentityResult><Credentials><AccessKeyId> ASIAX </AccessKeyId>"
	    "<SecretAccessKey>" SECRET "</SecretAccessKey><SessionToken>tok&amp;en</SessionToken>"
	    "<Expiration>2026-12-05T06:00:00Z</Expiration></Credentials>"
	    "</AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>";
	static const char refused[] =
	    "<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><Error>"
	    "<Type>Sender</Type><Code>AccessDenied</Code><Message>Not authorized</Message>"
	    "</Error></ErrorResponse>";
	struct s3_creds c;
	char err[256] = "";

	(void)state;
	assert_int_equal(creds_doc_sts(ok, strlen(ok), &c, err, sizeof(err)), 0);
	assert_string_equal(c.access_key_id, "ASIAX");
	assert_string_equal(c.secret_access_key, SECRET);
	assert_string_equal(c.session_token, "tok&en");
	assert_int_equal(c.expiration, 1796450400);
	s3_creds_free(&c);
	assert_int_equal(creds_doc_sts(refused, strlen(refused), &c, err, sizeof(err)), -EACCES);
	assert_string_equal(err, "STS refused: AccessDenied: Not authorized");
	assert_int_equal(creds_doc_sts("<x", 2, &c, err, sizeof(err)), -EINVAL);
	assert_int_equal(creds_doc_sts("<a/>", 4, &c, err, sizeof(err)), -EINVAL);
	assert_null(strstr(err, SECRET));
}

static void test_json_doc(void **state)
{
	static const char v1[] = "{\"Version\": 1, \"AccessKeyId\": \"AK\", \"SecretAccessKey\": "
	                         "\"" SECRET "\", \"SessionToken\": \"T\", "
	                         "\"Expiration\": \"2026-12-05T06:00:00.000Z\"}";
	static const char imds[] = "{\"Code\": \"Success\", \"AccessKeyId\": \"AK\", "
	                           "\"SecretAccessKey\": \"S\", \"Token\": \"T2\"}";
	struct s3_creds c;
	char err[256] = "", *v = NULL;

	(void)state;
	assert_int_equal(creds_doc_json(v1, strlen(v1), 1, &c, err, sizeof(err)), 0);
	assert_string_equal(c.session_token, "T");
	assert_int_equal(c.expiration, 1796450400);
	s3_creds_free(&c);
	assert_int_equal(creds_doc_json(imds, strlen(imds), 1, &c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "Version"));
	assert_int_equal(creds_doc_json(imds, strlen(imds), 0, &c, err, sizeof(err)), 0);
	assert_string_equal(c.session_token, "T2");
	assert_int_equal(c.expiration, 0);
	s3_creds_free(&c);
	assert_int_equal(creds_doc_json("{\"Code\": \"Failed\"}", 18, 0, &c, err, sizeof(err)),
	                 -EACCES);
	assert_int_equal(creds_doc_json("[1]", 3, 0, &c, err, sizeof(err)), -EINVAL);
	assert_int_equal(creds_doc_json("nope", 4, 0, &c, err, sizeof(err)), -EINVAL);
	assert_int_equal(creds_doc_json("{\"AccessKeyId\": 5, \"SecretAccessKey\": \"S\"}", 41, 0,
	                                &c, err, sizeof(err)),
	                 -EINVAL);
	assert_int_equal(creds_doc_json_string("{\"value\": \"jwt\"}", 16, "value", &v), 0);
	assert_string_equal(v, "jwt");
	free(v);
	assert_int_equal(creds_doc_json_string("{}", 2, "value", &v), -EINVAL);
	assert_int_equal(creds_doc_time("2026-12-05T06:00:00+01:00"), 1796446800);
	assert_int_equal(creds_doc_time("yesterday"), -1);
}

static void test_refresh_due(void **state)
{
	(void)state;
	/* The refresh thread's own schedule (next_due_ms), in ms. */
	assert_true(s3_provider_refresh_due_ms(1000000, 0) == INT64_MAX);
	assert_int_equal(s3_provider_refresh_due_ms(1000000, 1000000 + 3600000),
	                 1000000 + 3600000 - 300000);
	assert_int_equal(s3_provider_refresh_due_ms(1000000, 1004000), 1002000);
	assert_int_equal(s3_provider_refresh_due_ms(1000000, 1003000), 1001500);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_env, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_env_partial, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_env_vs_file, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_file_profiles, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_file_locations, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_file_too_big, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_ini_rules, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_malformed, setup, teardown),
	    cmocka_unit_test(test_sts_doc),
	    cmocka_unit_test(test_json_doc),
	    cmocka_unit_test(test_refresh_due),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

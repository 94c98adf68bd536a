"""S3 credentials as CI machines have them, refreshed before they expire (issue 24).

Against tests/upstream/s3_upstream.py, whose creds_endpoints.py serves STS (AssumeRole,
AssumeRoleWithWebIdentity), IMDSv2, container credentials and GitHub's OIDC token endpoint
on 127.0.0.1, issuing credentials that expire after a few seconds and are refused after
that (400 ExpiredToken). The bucket is private: every S3 request must be signed with the
server's key or with credentials it issued. Every test isolates the AWS_* environment.
"""

import glob
import hashlib
import os
import socket
import sys
import time

import pytest

from conftest import ROOT, SLOW, read_file
from helpers import wait_until
from test_s3 import AK, BUCKET, SECRET, TOKEN, content, failed_mount

sys.path.insert(0, os.path.join(ROOT, "tests", "upstream"))
from s3_client import S3Upstream  # noqa: E402

MiB = 1 << 20
ROLE = "arn:aws:iam::111122223333:role/spoolfs-ci"
WEB_TOKEN = "eyJ.web-identity-token.first"
WEB_TOKEN_2 = "eyJ.web-identity-token.rotated"
CONTAINER_TOKEN = "container-authorization-token-0123"
GH_REQUEST_TOKEN = "gh-request-token-0123456789"
LIFETIME = 3  # seconds every issued credential lives
POLL = 0.1  # wait_until's pace on the server's counters: each poll is a connection


@pytest.fixture
def env(monkeypatch, tmp_path):
    """A clean AWS environment: no keys, no files, no instance metadata."""
    for var in list(os.environ):
        if var.startswith("AWS_") or var.startswith("ACTIONS_ID_TOKEN"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return monkeypatch


@pytest.fixture
def s3(tmp_path, env):
    """A verifying S3 server with a private bucket and the credential endpoints; STS is
    pointed at it (AWS_ENDPOINT_URL_STS)."""
    root = tmp_path / "s3"
    (root / BUCKET).mkdir(parents=True)
    for key, size in (("a.bin", 3000), ("dir/b.bin", 70000), ("c.bin", 12345)):
        os.makedirs(os.path.dirname(str(root / BUCKET / key)), exist_ok=True)
        (root / BUCKET / key).write_bytes(content(key, size))
    srv = S3Upstream(root, verify=(AK, SECRET),
                     extra_args=["--creds-lifetime", str(LIFETIME)])
    srv.temp_creds(web_tokens=[WEB_TOKEN, WEB_TOKEN_2], container_token=CONTAINER_TOKEN,
              oidc_request_token=GH_REQUEST_TOKEN)
    env.setenv("AWS_ENDPOINT_URL_STS", srv.endpoint)
    yield srv
    srv.stop()


def mount_it(mount, s3, *args, name="mnt"):
    return mount("s3://" + BUCKET, "--endpoint", s3.endpoint, *args, name=name)


def check_reads(m):
    assert read_file(m.p("a.bin")) == content("a.bin", 3000)
    assert read_file(m.p("dir/b.bin")) == content("dir/b.bin", 70000)


def sources(s3):
    return [i["source"] for i in s3.temp_creds()["issued"]]


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write(path, text, mode=0o600):
    path.write_text(text)
    os.chmod(path, mode)
    return str(path)


# ----------------------------------------------------------------- each step of the chain

def use_env_keys(env):
    env.setenv("AWS_ACCESS_KEY_ID", AK)
    env.setenv("AWS_SECRET_ACCESS_KEY", SECRET)


def use_web_identity(env, tmp_path, token=WEB_TOKEN):
    env.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", write(tmp_path / "web-token", token + "\n"))
    env.setenv("AWS_ROLE_ARN", ROLE)
    env.setenv("AWS_ROLE_SESSION_NAME", "spoolfs-test")


def use_profile_role(env, tmp_path):
    """[base] keys in the credentials file; [profile dev] assumes a role with them."""
    env.setenv("AWS_SHARED_CREDENTIALS_FILE", write(
        tmp_path / "credentials",
        "[base]\naws_access_key_id = %s\naws_secret_access_key = %s\n" % (AK, SECRET)))
    env.setenv("AWS_CONFIG_FILE", write(
        tmp_path / "config",
        "[profile dev]\nrole_arn = %s\nsource_profile = base\nregion = us-east-1\n" % ROLE))
    env.setenv("AWS_PROFILE", "dev")


def use_container(env, tmp_path, s3):
    env.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", s3.endpoint + "/_creds/container")
    env.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
               write(tmp_path / "container-token", CONTAINER_TOKEN))


def use_imds(env, s3):
    env.delenv("AWS_EC2_METADATA_DISABLED")
    env.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", s3.endpoint)


def test_environment(s3, env, mount):
    use_env_keys(env)
    m = mount_it(mount, s3)
    check_reads(m)
    assert sources(s3) == []
    assert "S3 credentials from environment" in m.stderr()


def test_web_identity_token_file_reread(s3, env, tmp_path, mount):
    use_web_identity(env, tmp_path)
    m = mount_it(mount, s3)
    check_reads(m)
    assert sources(s3)[0] == "web identity"
    assert s3.temp_creds()["sts_calls"][0] == {"action": "AssumeRoleWithWebIdentity", "role": ROLE,
                                          "session": "spoolfs-test"}
    # Kubernetes rotates the file: the next refresh sends the new token.
    write(tmp_path / "web-token", WEB_TOKEN_2)
    wait_until(lambda: WEB_TOKEN_2 in s3.temp_creds()["web_tokens_seen"],
               "the rotated token file was never read", timeout=4 * LIFETIME, interval=POLL)
    assert read_file(m.p("c.bin")) == content("c.bin", 12345)
    assert "web identity: role %s, token from AWS_WEB_IDENTITY_TOKEN_FILE" % ROLE in m.stderr()


def test_role_arn_with_github_oidc(s3, env, mount):
    env.setenv("ACTIONS_ID_TOKEN_REQUEST_URL", s3.endpoint + "/_oidc/token?api-version=2.0")
    env.setenv("ACTIONS_ID_TOKEN_REQUEST_TOKEN", GH_REQUEST_TOKEN)
    use_env_keys(env)  # --role-arn is explicit: the environment's keys are not used
    m = mount_it(mount, s3, "--role-arn", ROLE)
    check_reads(m)
    # a fresh OIDC token at each refresh, for STS's audience
    wait_until(lambda: len(s3.temp_creds()["oidc_audiences"]) >= 2, "no refresh asked GitHub",
               timeout=4 * LIFETIME, interval=POLL)
    assert set(s3.temp_creds()["oidc_audiences"]) == {"sts.amazonaws.com"}
    assert set(sources(s3)) == {"web identity"}
    assert read_file(m.p("c.bin")) == content("c.bin", 12345)
    assert "token from GitHub Actions" in m.stderr()


def test_role_arn_without_a_token_is_one_clear_line(s3, env, tmp_path):
    rc, err = failed_mount(tmp_path, "s3://" + BUCKET, "--endpoint", s3.endpoint,
                           "--role-arn", ROLE)
    assert rc != 0 and "id-token: write" in err, err


def test_profile_assume_role(s3, env, tmp_path, mount):
    use_profile_role(env, tmp_path)
    m = mount_it(mount, s3)
    check_reads(m)
    calls = s3.temp_creds()["sts_calls"]
    assert calls[0]["action"] == "AssumeRole" and calls[0]["role"] == ROLE
    assert sources(s3)[0] == "assume role"
    # refreshed by assuming the role again before the credentials expire
    wait_until(lambda: len(sources(s3)) >= 3, "never refreshed", timeout=4 * LIFETIME,
               interval=POLL)
    assert read_file(m.p("c.bin")) == content("c.bin", 12345)


def test_profile_credential_source_and_chains(s3, env, tmp_path, mount):
    """[profile a] -> source_profile b -> role with credential_source = Environment; and
    --profile of a loop is refused with one line."""
    use_env_keys(env)
    env.setenv("AWS_CONFIG_FILE", write(
        tmp_path / "config",
        "[profile a]\nrole_arn = %s-a\nsource_profile = b\n"
        "[profile b]\nrole_arn = %s-b\ncredential_source = Environment\n"
        "[profile loop1]\nrole_arn = %s\nsource_profile = loop2\n"
        "[profile loop2]\nrole_arn = %s\nsource_profile = loop1\n" % (ROLE, ROLE, ROLE, ROLE)))
    m = mount_it(mount, s3, "--profile", "a")
    check_reads(m)
    assert [c["role"] for c in s3.temp_creds()["sts_calls"]][:2] == [ROLE + "-b", ROLE + "-a"]
    rc, err = failed_mount(tmp_path, "s3://" + BUCKET, "--endpoint", s3.endpoint,
                           "--profile", "loop1")
    assert rc != 0 and "makes a loop" in err, err


PROCESS = r"""
import json, sys, time
mode = sys.argv[1]
if mode == "fail":
    sys.stderr.write("credential helper: not logged in\n")
    sys.exit(1)
doc = {"Version": 2 if mode == "v2" else 1, "AccessKeyId": sys.argv[2],
       "SecretAccessKey": sys.argv[3], "SessionToken": sys.argv[4],
       "Expiration": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))}
print(json.dumps(doc))
"""


def use_process(env, tmp_path, mode, profile="default"):
    script = write(tmp_path / "helper.py", PROCESS, 0o700)
    header = "[default]" if profile == "default" else "[profile %s]" % profile
    env.setenv("AWS_CONFIG_FILE", write(
        tmp_path / "config", "%s\ncredential_process = %s %s %s '%s' '%s'\n"
        % (header, sys.executable, script, mode, AK, SECRET) + "region = us-east-1\n"))
    # the token the process prints is checked by the server
    return script


def test_credential_process(tmp_path, env, mount):
    root = tmp_path / "s3p"
    (root / BUCKET).mkdir(parents=True)
    (root / BUCKET / "a.bin").write_bytes(content("a.bin", 3000))
    srv = S3Upstream(root, verify=(AK, SECRET), session_token=TOKEN)
    try:
        cfg = "[default]\ncredential_process = %s %s %%s %s '%s' '%s'\n" % (
            sys.executable, write(tmp_path / "helper.py", PROCESS, 0o700), AK, SECRET, TOKEN)
        env.setenv("AWS_CONFIG_FILE", write(tmp_path / "config", cfg % "ok"))
        m = mount("s3://" + BUCKET, "--endpoint", srv.endpoint)
        assert read_file(m.p("a.bin")) == content("a.bin", 3000)
        assert "S3 credentials from %s [default]; they expire in" % (tmp_path / "config") \
            in m.stderr()
        m.check_clean_exit()
        write(tmp_path / "config", cfg % "v2")
        rc, err = failed_mount(tmp_path, "s3://" + BUCKET, "--endpoint", srv.endpoint)
        assert rc != 0 and 'lacks "Version": 1' in err, err
        write(tmp_path / "config", "[default]\ncredential_process = echo $(id)\n")
        rc, err = failed_mount(tmp_path, "s3://" + BUCKET, "--endpoint", srv.endpoint)
        assert rc != 0 and "command substitution" in err, err
    finally:
        srv.stop()


def test_container_credentials(s3, env, tmp_path, mount):
    use_container(env, tmp_path, s3)
    m = mount_it(mount, s3)
    check_reads(m)
    assert sources(s3)[0] == "container"
    # the token file is read again at each refresh
    write(tmp_path / "container-token", "rotated-container-token")
    s3.temp_creds(container_token="rotated-container-token")
    n = len(sources(s3))
    wait_until(lambda: len(sources(s3)) > n + 1, "no refresh with the rotated token",
               timeout=4 * LIFETIME, interval=POLL)
    assert read_file(m.p("c.bin")) == content("c.bin", 12345)


def test_container_full_uri_hosts(s3, env, tmp_path):
    env.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://198.51.100.7/creds")
    rc, err = failed_mount(tmp_path, "s3://" + BUCKET, "--endpoint", s3.endpoint)
    assert rc != 0 and "AWS_CONTAINER_CREDENTIALS_FULL_URI names 198.51.100.7" in err, err


def test_instance_metadata(s3, env, mount):
    use_imds(env, s3)
    m = mount_it(mount, s3)
    check_reads(m)
    assert sources(s3)[0] == "imds"
    assert "instance metadata (IMDSv2) role spoolfs-test-role" in m.stderr()


def test_order_a_higher_step_wins(s3, env, tmp_path, mount):
    """Every source configured at once; each mount uses the highest, then that one is
    taken away."""
    use_imds(env, s3)
    use_container(env, tmp_path, s3)
    use_profile_role(env, tmp_path)
    use_web_identity(env, tmp_path)
    use_env_keys(env)
    order = [("environment", None, ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")),
             ("web identity", "web identity", ("AWS_WEB_IDENTITY_TOKEN_FILE",)),
             ("credentials and", "assume role", ("AWS_PROFILE", "AWS_CONFIG_FILE")),
             ("container endpoint", "container", ("AWS_CONTAINER_CREDENTIALS_FULL_URI",)),
             ("instance metadata", "imds", ())]
    for i, (origin, source, unset) in enumerate(order):
        before = len(sources(s3))
        m = mount_it(mount, s3, name="mnt%d" % i)
        assert read_file(m.p("a.bin")) == content("a.bin", 3000)
        first = [ln for ln in m.stderr().splitlines() if "S3 credentials from" in ln][0]
        assert origin in first, (origin, m.stderr())
        issued = sources(s3)[before:]
        assert (issued[:1] == [source]) if source else issued == [], (source, issued)
        m.check_clean_exit()
        for var in unset:
            env.delenv(var)


def test_broken_sources_one_line_each_then_next(s3, env, tmp_path, mount):
    """A credential_process that exits 1, an STS answering 403 and IMDS absent: one clear
    line each, and the next source is tried."""
    use_web_identity(env, tmp_path)
    s3.temp_creds(fault={"sts": 403})
    use_process(env, tmp_path, "fail")
    use_container(env, tmp_path, s3)
    m = mount_it(mount, s3)
    check_reads(m)
    log = m.stderr()
    lines = [ln for ln in log.splitlines() if "trying the next source" in ln]
    assert len(lines) == 2, log
    assert "web identity: STS refused: AccessDenied" in lines[0] and "HTTP 403" in lines[0]
    assert "shared files: profile [default]: credential_process" in lines[1]
    assert "exited with status 1" in lines[1]
    assert sources(s3) and sources(s3)[0] == "container"
    m.check_clean_exit()
    # nothing left but an instance metadata service that is not there: no credentials
    env.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI")
    env.delenv("AWS_EC2_METADATA_DISABLED")
    env.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:%d" % closed_port())
    t0 = time.monotonic()
    rc, err = failed_mount(tmp_path, "s3://" + BUCKET, "--endpoint", s3.endpoint)
    assert rc != 0 and "no S3 credentials" in err, err
    assert "instance metadata: no IMDSv2 token" in err, err
    assert time.monotonic() - t0 < 10 * SLOW


# ------------------------------------------------------------------------ refresh

def test_expired_token_before_the_margin_is_refreshed_and_retried_once(tmp_path, env, mount):
    """The server refuses credentials the mount believes in for an hour (a clock skew):
    the read is refreshed, sent again once, and succeeds; so is a listing."""
    root = tmp_path / "s3l"
    (root / BUCKET).mkdir(parents=True)
    for key in ("a.bin", "b.bin", "sub/c.bin"):
        os.makedirs(os.path.dirname(str(root / BUCKET / key)), exist_ok=True)
        (root / BUCKET / key).write_bytes(content(key, 5000))
    srv = S3Upstream(root, verify=(AK, SECRET), extra_args=["--creds-lifetime", "3600"])
    try:
        srv.temp_creds(web_tokens=[WEB_TOKEN])
        env.setenv("AWS_ENDPOINT_URL_STS", srv.endpoint)
        use_web_identity(env, tmp_path)
        m = mount("s3://" + BUCKET, "--endpoint", srv.endpoint)
        assert read_file(m.p("a.bin")) == content("a.bin", 5000)
        assert len(srv.temp_creds()["issued"]) == 1
        srv.temp_creds(expire_all=True)
        assert read_file(m.p("b.bin")) == content("b.bin", 5000)
        assert srv.stats("%s/b.bin" % BUCKET)["gets"] == 2  # refused once, sent again once
        assert len(srv.temp_creds()["issued"]) == 2
        assert "credentials refused as expired" in m.stderr()
        assert "retry" not in m.stderr()  # not counted as a failed try
        srv.temp_creds(expire_all=True)
        assert sorted(os.listdir(m.p("sub"))) == ["c.bin"]  # a listing: the same
        assert len(srv.temp_creds()["issued"]) == 3
        m.check_clean_exit()
    finally:
        srv.stop()


def test_credentials_are_renewed_before_they_expire(tmp_path, env, mount):
    """The refresh thread renews credentials by the clock, before they expire: a read sent
    after each credential the mount held has expired is signed with a newer one, so the
    server, which answers ExpiredToken to an expired one (and counts it), never sees one.
    (The refresh on ExpiredToken would make the reads succeed anyway: it must not be needed.)"""
    keys = ["later%d.bin" % i for i in range(3)]
    root = tmp_path / "s3r"
    (root / BUCKET).mkdir(parents=True)
    for key in keys:
        (root / BUCKET / key).write_bytes(content(key, 20000))
    srv = S3Upstream(root, verify=(AK, SECRET), extra_args=["--creds-lifetime", str(LIFETIME)])
    try:
        srv.temp_creds(web_tokens=[WEB_TOKEN])
        env.setenv("AWS_ENDPOINT_URL_STS", srv.endpoint)
        use_web_identity(env, tmp_path)
        m = mount("s3://" + BUCKET, "--endpoint", srv.endpoint)
        for key in keys:
            held = srv.temp_creds()["issued"][-1]["expires"]
            wait_until(lambda: time.time() > held + 0.2, "never expired", timeout=2 * LIFETIME,
                       interval=POLL)
            assert read_file(m.p(key)) == content(key, 20000)
        creds = srv.temp_creds()
        assert creds["expired_refusals"] == 0, m.stderr()
        issued = creds["issued"]
        assert len(issued) >= 4, issued
        # each one came while the one before was still good
        assert all(b["at"] < a["expires"] for a, b in zip(issued, issued[1:])), issued
        assert "refused as expired" not in m.stderr()
        m.check_clean_exit()
    finally:
        srv.stop()


def test_long_read_spans_expiries(tmp_path, env, mount):
    """A cold read through a throttled upstream that cuts every connection after 3 MiB spans
    three credential expiries or more, with new requests signed after each: the right bytes,
    no failed read; then a read after the credentials expired while the mount was idle."""
    size = int(os.environ.get("SPOOLFS_TEST_CREDS_READ_MIB", "256")) * MiB
    root = tmp_path / "s3big"
    (root / BUCKET).mkdir(parents=True)
    big = root / BUCKET / "big.bin"
    with open(big, "wb") as f:
        block = hashlib.sha256(b"big").digest() * (MiB // 32)
        for i in range(size // MiB):
            f.write(block[i % 32:] + block[:i % 32])
    (root / BUCKET / "later.bin").write_bytes(content("later.bin", 100000))
    srv = S3Upstream(root, verify=(AK, SECRET), etag="fast",
                     extra_args=["--creds-lifetime", str(LIFETIME)])
    try:
        srv.temp_creds(web_tokens=[WEB_TOKEN])
        env.setenv("AWS_ENDPOINT_URL_STS", srv.endpoint)
        use_web_identity(env, tmp_path)
        duration = 4 * LIFETIME  # seconds the read should take
        srv.fault("%s/big.bin" % BUCKET, total_rate=size // duration, drop_after=3 * MiB)
        m = mount("s3://" + BUCKET, "--endpoint", srv.endpoint)
        t0 = time.monotonic()
        h = hashlib.sha256()
        with open(m.p("big.bin"), "rb", buffering=0) as f:
            while True:
                b = f.read(MiB)
                if not b:
                    break
                h.update(b)
        elapsed = time.monotonic() - t0
        with open(big, "rb") as f:
            want = hashlib.file_digest(f, "sha256").hexdigest()
        assert h.hexdigest() == want
        issued = srv.temp_creds()["issued"]
        assert elapsed > 3 * LIFETIME, elapsed
        expired_during = [i for i in issued if i["at"] >= t0 - 1 and i["expires"] < time.time()]
        assert len(issued) >= 4 and len(expired_during) >= 3, issued
        st = srv.stats("%s/big.bin" % BUCKET)
        assert st["drops"] >= 3, (st["gets"], st["ranges"][:20])
        log = m.stderr()
        assert log.count("S3 credentials refreshed from web identity") >= 3, log
        assert "giving up" not in log, log
        # renewed before each expiry, not after a refusal (ExpiredToken)
        assert srv.temp_creds()["expired_refusals"] == 0, log
        # idle until what the mount held when the read ended has expired
        last = srv.temp_creds()["issued"][-1]["expires"]
        wait_until(lambda: time.time() > last + 0.5, "never expired", timeout=3 * LIFETIME,
                   interval=POLL)
        assert read_file(m.p("later.bin")) == content("later.bin", 100000)
        assert srv.temp_creds()["expired_refusals"] == 0
        m.check_clean_exit()
    finally:
        srv.stop()


# ------------------------------------------------------------------------ options

def test_requester_pays_and_expected_bucket_owner(s3, env, tmp_path, mount):
    use_env_keys(env)
    s3.s3opts(requester_pays=[BUCKET], owner="111122223333")
    rc, err = failed_mount(tmp_path, "s3://" + BUCKET, "--endpoint", s3.endpoint)
    assert rc != 0 and "access denied" in err, err
    m = mount_it(mount, s3, "--requester-pays", "--expected-bucket-owner", "111122223333")
    check_reads(m)
    assert s3.temp_creds()["payer_seen"] >= 3  # the listing and each object
    m.check_clean_exit()
    rc, err = failed_mount(tmp_path, "s3://" + BUCKET, "--endpoint", s3.endpoint,
                           "--requester-pays", "--expected-bucket-owner", "444455556666")
    assert rc != 0 and "access denied" in err, err


# ------------------------------------------------------------------------ secrets

def test_secrets_never_leak(tmp_path, env, mount):
    """Keys, session tokens, web identity and container tokens and GitHub's request token
    never appear in argv, the -d log, /.spoolfs files or the index."""
    root = tmp_path / "s3s"
    (root / BUCKET).mkdir(parents=True)
    (root / BUCKET / "a.bin").write_bytes(content("a.bin", 3000))
    srv = S3Upstream(root, verify=(AK, SECRET), session_token=TOKEN)
    try:
        srv.temp_creds(web_tokens=[WEB_TOKEN], container_token=CONTAINER_TOKEN,
                  oidc_request_token=GH_REQUEST_TOKEN)
        env.setenv("AWS_ENDPOINT_URL_STS", srv.endpoint)
        use_web_identity(env, tmp_path)
        srv.temp_creds(fault={"sts": 403})  # tried, said, and the next source used
        use_container(env, tmp_path, srv)
        srv.temp_creds(fault={"container": 500})
        env.setenv("ACTIONS_ID_TOKEN_REQUEST_TOKEN", GH_REQUEST_TOKEN)
        env.setenv("ACTIONS_ID_TOKEN_REQUEST_URL", srv.endpoint + "/_oidc/token")
        cfg = "[default]\ncredential_process = %s %s ok %s '%s' '%s'\n" % (
            sys.executable, write(tmp_path / "helper.py", PROCESS, 0o700), AK, SECRET, TOKEN)
        env.setenv("AWS_CONFIG_FILE", write(tmp_path / "config", cfg))
        cache = tmp_path / "cache"
        m = mount("s3://" + BUCKET, "--endpoint", srv.endpoint, "-d", "--cache-dir",
                  str(cache), "--keep-cache")
        assert read_file(m.p("a.bin")) == content("a.bin", 3000)
        argv = b""
        for pid in {m.proc.pid, m.serving_pid()}:  # the supervisor's and the serving one's
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                argv += f.read()
        spoolfs_files = b""
        for name in os.listdir(m.p(".spoolfs")):
            spoolfs_files += read_file(m.p(".spoolfs/" + name))
        m.check_clean_exit()
        index = b"".join(open(p, "rb").read() for p in glob.glob(str(cache) + "/**",
                                                                  recursive=True)
                         if os.path.isfile(p))
        log = m.stderr().encode()
        assert b"trying the next source" in log
        for secret in (SECRET, TOKEN, WEB_TOKEN, CONTAINER_TOKEN, GH_REQUEST_TOKEN):
            s = secret.encode()
            for where, text in (("argv", argv), ("log", log), ("/.spoolfs", spoolfs_files),
                                ("index", index)):
                assert s not in text, "%s in %s" % (secret, where)
    finally:
        srv.stop()



def test_failed_refresh_is_logged_and_tried_again(s3, env, tmp_path, mount):
    """STS fails for a while: each failed refresh says which source and why, and is tried
    again with backoff; once STS answers, the mount reads with fresh credentials."""
    use_web_identity(env, tmp_path)
    m = mount_it(mount, s3)
    check_reads(m)
    s3.temp_creds(fault={"sts": 503})
    wait_until(lambda: "refreshing from web identity failed" in m.stderr(),
               "no failed refresh in the log", timeout=4 * LIFETIME, interval=POLL)
    line = [ln for ln in m.stderr().splitlines() if "refreshing from web identity failed" in ln][0]
    assert "STS refused: AccessDenied" in line and "HTTP 503" in line and "trying again in" in line
    n = len(sources(s3))
    s3.temp_creds(fault={"sts": None})
    wait_until(lambda: len(sources(s3)) > n, "never refreshed after STS came back",
               timeout=6 * LIFETIME, interval=POLL)
    assert read_file(m.p("c.bin")) == content("c.bin", 12345)

"""Metadata transfers that never end, and where the daemon may be sent.

A manifest or an S3 listing page is read before the mount comes up (or while a lookup
waits): one that streams for ever after garbage, trickles, or grows past its bound must fail
the mount with a line that says why, in bounded time. A redirect may not take a transfer
from https to plain http, and no URL, redirect or name may make the daemon connect to a
link-local address (cloud instance metadata) unless --allow-link-local says so.

Servers are rawhttp.RawServer on 127.0.0.1 (HTTPS with a certificate made here). The
link-local targets are refused before any socket exists; the daemon under test must have
that policy (checked first, see require_link_local_policy), so that a daemon without it is
never pointed at a real link-local address. fe80::1%lo, which can only be tried on the
loopback interface, is the one target a connection attempt is allowed to reach.
"""

import errno
import json
import os
import ssl
import subprocess
import sys
import time

import pytest

from conftest import SANITIZER_MARKS, SLOW, SPOOLFS, daemon_env, is_mounted
from rawhttp import RawServer, manifest, pattern, serve_object, sha, static
from s3mock import BUCKET, S3Mock, listing_xml
from test_s3 import aws_env  # noqa: F401 (a fixture: a clean AWS environment)
from test_security import make_cert

MiB = 1 << 20
ENDLESS_CAP = 256 * MiB  # what an "endless" server sends at most before it gives up


@pytest.fixture
def raw(servers):
    return lambda routes, **kw: servers(RawServer, routes, **kw)


def run_refused(source, mnt, *args, within):
    """Runs a mount that must fail within `within` seconds -> (its output, seconds taken).
    One that comes up, or is still trying then, is torn down and the test fails."""
    os.makedirs(mnt, exist_ok=True)
    t0 = time.monotonic()
    proc = subprocess.Popen([SPOOLFS, "-f", str(source), str(mnt)] + list(args),
                            env=daemon_env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out, _ = proc.communicate(timeout=within * SLOW)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)
        pytest.fail("the mount neither failed nor gave up within %.0f s:\n%s"
                    % (within * SLOW, out.decode("utf-8", "replace")[-3000:]))
    seconds = time.monotonic() - t0
    text = out.decode("utf-8", "replace")
    if is_mounted(str(mnt)):
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)
        pytest.fail("the mount came up:\n" + text)
    assert proc.returncode != 0, text
    for mark in SANITIZER_MARKS:
        assert mark not in text, text
    return text, seconds


def endless(first, step=64 * 1024):
    """A handler that sends a close-delimited 200 whose body is `first` and then filler
    until the client goes away (or ENDLESS_CAP)."""
    filler = b" " * step

    def handler(ex):
        ex.head(200, [("Content-Type", "application/octet-stream")])
        ex.body(first)
        while ex.server.sent.get(ex.req.path, 0) < ENDLESS_CAP:
            if ex.server.stopping.is_set():
                break
            ex.body(filler)
        return False

    return handler


def trickle(head_len, first=b"", per_second=4):
    """A handler that promises head_len bytes and sends `first`, then per_second bytes a
    second: far below any useful rate, far above one byte a second."""
    def handler(ex):
        ex.head(200, [("Content-Type", "application/octet-stream"),
                      ("Content-Length", str(head_len))])
        data = first + b" " * head_len
        i = 0
        while i < head_len and ex.sleep(1):
            ex.body(data[i:i + per_second])
            i += per_second
        return False

    return handler


# --------------------------------------------------- 4. listings and manifests that never end


def test_a_listing_that_streams_on_after_garbage_is_cut_at_once(aws_env, servers, tmp_path):
    """The listing parser failed on the first bytes, and the transfer went on taking the
    rest (a server pushed 23 GB in 20 s and the mount never came up). The parse error must
    end the transfer: the mount fails at once with the parser's line, and the server sees
    the connection closed after a bounded number of bytes."""
    path = "/" + BUCKET
    hook = endless(b"<?xml version='1.0'?><ListBucketResult><<garbage")
    s3 = servers(S3Mock, {}, list_hook=lambda ex, prefix, token: hook(ex))
    out, seconds = run_refused("s3://" + BUCKET, tmp_path / "mnt", "--endpoint", s3.endpoint,
                               "--no-sign", "--retries", "3", within=30)
    assert "bad listing from s3://%s/" % BUCKET in out, out
    sent = s3.srv.sent.get(path, 0) + s3.srv.sent.get(path + "/", 0)
    assert sent < 32 * MiB, "the daemon read %d bytes past a parse error:\n%s" % (sent, out)
    assert len(s3.lists()) == 1, out  # a bad document is not asked for again
    assert seconds < 10 * SLOW, seconds


def test_a_listing_page_past_its_bound_is_cut(aws_env, servers, tmp_path):
    """A page that is well-formed so far but never ends is cut at the page bound (8 MiB),
    not read to the server's end."""
    head = listing_xml("", [("k%d" % i, 1, '"e"') for i in range(3)])
    head = head[:head.rindex(b"</ListBucketResult>")] + b"<Filler>"
    hook = endless(head)
    s3 = servers(S3Mock, {}, list_hook=lambda ex, prefix, token: hook(ex))
    out, _ = run_refused("s3://" + BUCKET, tmp_path / "mnt", "--endpoint", s3.endpoint,
                         "--no-sign", within=30)
    assert "larger than" in out and "bad listing" in out, out
    sent = s3.srv.sent.get("/" + BUCKET, 0) + s3.srv.sent.get("/" + BUCKET + "/", 0)
    assert sent < 48 * MiB, sent


def test_a_listing_page_that_trickles_fails_the_mount_in_bounded_time(aws_env, servers,
                                                                      tmp_path):
    """A listing page that comes at a few bytes a second kept the mount waiting for ever:
    curl's floor was one byte a second. It is held to the objects' floor (1 KiB/s over
    --stall-timeout), tried --retries times, and the mount fails with a line."""
    hook = trickle(100000, listing_xml("", [("k", 1, '"e"')])[:40])
    s3 = servers(S3Mock, {}, list_hook=lambda ex, prefix, token: hook(ex))
    out, seconds = run_refused("s3://" + BUCKET, tmp_path / "mnt", "--endpoint", s3.endpoint,
                               "--no-sign", "--stall-timeout", "1", "--retries", "2",
                               within=40)
    assert "too slow" in out.lower(), out
    assert "cannot reach S3 endpoint" in out, out
    assert len(s3.lists()) == 2, out
    # two tries of 1 s of stall each, a backoff, and slack (the default floor takes 30 s)
    assert seconds < 15 * SLOW, seconds


LIST_CHILD = r"""
import json, os, sys
try:
    print(json.dumps(sorted(os.listdir(sys.argv[1]))))
except OSError as e:
    print(json.dumps(e.errno))
"""


def test_a_directory_whose_listing_trickles_gets_eio_in_bounded_time(aws_env, servers, mount):
    """A directory listed at its first lookup, after the mount: a trickling page gives the
    lookup EIO after its tries, with a line naming the directory, instead of a hang."""
    hook = trickle(100000, listing_xml("d/", [("d/f", 1, '"e"')])[:40])
    s3 = servers(S3Mock, {"d/f": b"x"},
                 list_hook=lambda ex, prefix, token: hook(ex) if prefix == "d/" else None)
    m = mount("s3://" + BUCKET, "--endpoint", s3.endpoint, "--no-sign", "--stall-timeout", "1",
              "--retries", "2")
    t0 = time.monotonic()
    child = subprocess.Popen([sys.executable, "-c", LIST_CHILD, m.p("d")],
                             stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        out, _ = child.communicate(timeout=40 * SLOW)
    except subprocess.TimeoutExpired:
        # the child waits on FUSE unkillably: the daemon goes first, which ends its wait
        log = m.stderr()
        m.kill()
        child.kill()
        child.communicate()
        pytest.fail("the lookup of a trickling directory did not end:\n" + log)
    assert json.loads(out) == errno.EIO, (out, m.stderr())
    assert time.monotonic() - t0 < 15 * SLOW
    assert "listing /d failed" in m.stderr() and "too slow" in m.stderr().lower(), m.stderr()
    assert len(s3.lists("d/")) == 2, m.stderr()


def test_a_manifest_that_trickles_fails_the_mount_in_bounded_time(raw, tmp_path):
    """The same for the manifest."""
    srv = raw({"/manifest.json": trickle(100000, b'{"version": 1, "files": [')})
    out, seconds = run_refused(srv.url("manifest.json"), tmp_path / "mnt",
                               "--stall-timeout", "1", "--retries", "2", within=40)
    assert "cannot fetch manifest %s" % srv.url("manifest.json") in out, out
    assert "too slow" in out.lower(), out
    assert len(srv.requests("/manifest.json")) == 2, out
    assert seconds < 15 * SLOW, seconds


def test_a_manifest_larger_than_the_bound_is_refused_at_the_bound(raw, tmp_path):
    """A manifest is held whole in memory: one past --max-manifest-size fails the mount with
    a line naming the bound and the option, and is not read on to the server's end."""
    srv = raw({"/manifest.json": endless(b'{"version": 1, "files": [')})
    out, seconds = run_refused(srv.url("manifest.json"), tmp_path / "mnt",
                               "--max-manifest-size", "1M", within=30)
    assert "manifest %s is larger than 1048576 bytes" % srv.url("manifest.json") in out, out
    assert "--max-manifest-size" in out, out
    assert srv.sent["/manifest.json"] < 32 * MiB, srv.sent
    assert len(srv.requests("/manifest.json")) == 1, out


def test_a_manifest_within_a_raised_bound_mounts(raw, mount):
    """The bound is the option's: a manifest just under it mounts."""
    obj = pattern(1000)
    entries = [{"path": "o.bin", "size": len(obj), "sha256": sha(obj)}]
    body = manifest(entries)
    body = body[:-1] + b', "pad": "' + b"x" * (3 * MiB) + b'"}'
    srv = raw({"/manifest.json": static(body), "/o.bin": lambda ex: serve_object(ex, obj)})
    m = mount(srv.url("manifest.json"), "--max-manifest-size", "4M")
    with open(m.p("o.bin"), "rb") as f:
        assert f.read() == obj


@pytest.mark.parametrize("value", ["0", "-1", "12Q", "huge"])
def test_a_bad_manifest_bound_is_a_usage_error(value, tmp_path):
    proc = subprocess.run([SPOOLFS, "-f", "/nonexistent/manifest.json", str(tmp_path),
                           "--max-manifest-size", value], env=daemon_env(),
                          capture_output=True, timeout=20 * SLOW)
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode != 0 and "--max-manifest-size '%s'" % value in err, err


# -------------------------------------------------------------------- 6. downgrades


@pytest.fixture
def tls(tmp_path):
    """-> (server-side SSLContext, the certificate's path for --ca-file)."""
    cert, key = make_cert(str(tmp_path))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    return ctx, cert


def redirect_to(location):
    def handler(ex):
        ex.send(302, [("Location", location), ("Content-Length", "0")])
        return True

    return handler


def test_an_https_manifest_redirected_to_http_is_refused(raw, tls, tmp_path):
    """A redirect from https to http was followed for the manifest, and the http URL became
    the base of its relative entries. The fetch fails at once with a line saying so; the
    http server is never asked."""
    ctx, cert = tls
    obj = pattern(1000)
    plain = raw({"/manifest.json": static(manifest([{"path": "o.bin", "size": len(obj)}]))})
    secure = raw({"/manifest.json": redirect_to(plain.url("manifest.json"))}, tls=ctx)
    out, _ = run_refused(secure.url("manifest.json"), tmp_path / "mnt", "--ca-file", cert,
                         "--retries", "3", within=30)
    assert "refused a redirect from https to plain http" in out, out
    assert plain.url("manifest.json") in out, out
    assert plain.requests() == [], "the http URL was asked: %s" % out
    assert len(secure.requests("/manifest.json")) == 1, out  # not retried


def test_an_https_object_redirected_to_http_is_refused(raw, mount, tls, tmp_path):
    """The same for an object: EIO at once, a line in the log, nothing asked over http. A
    redirect that stays on https is still followed (the manifest's, here)."""
    ctx, cert = tls
    obj = pattern(50000)
    plain = raw({"/o.bin": lambda ex: serve_object(ex, obj)})
    body = manifest([{"path": "o.bin", "size": len(obj), "sha256": sha(obj)}])
    secure = raw({"/m": None, "/manifest.json": static(body),
                  "/o.bin": redirect_to(plain.url("o.bin"))}, tls=ctx)
    secure.routes["/m"] = redirect_to(secure.url("manifest.json"))
    m = mount(secure.url("m"), "--ca-file", cert, "--retries", "3")
    try:
        with open(m.p("o.bin"), "rb") as f:
            f.read()
        got = None
    except OSError as e:
        got = e.errno
    assert got == errno.EIO, m.stderr()
    assert "refused a redirect from https to plain http" in m.stderr(), m.stderr()
    assert plain.requests() == [], m.stderr()
    assert "retry" not in m.stderr(), m.stderr()
    assert len(secure.requests("/o.bin")) == m.stderr().count("download failed"), m.stderr()


# ---------------------------------------------------------------------- 6. link-local


def require_link_local_policy():
    """A daemon without the policy would really connect to the link-local targets below
    (instance metadata, off this machine): such a build fails here, before any mount."""
    out = subprocess.run([SPOOLFS, "--help"], capture_output=True, env=daemon_env(),
                         timeout=20 * SLOW).stdout.decode()
    if "--allow-link-local" not in out:
        pytest.fail("this spoolfs has no link-local policy (no --allow-link-local): not"
                    " pointing it at a link-local address")


def read_errno(path):
    try:
        with open(path, "rb") as f:
            f.read()
    except OSError as e:
        return e.errno
    return None


# fe80::1 on lo is the only target a daemon without the policy may try: it cannot leave the
# machine. The others are the metadata address spelled as IPv4, as an IPv4-mapped IPv6
# address and as one 32-bit number (the address is checked, not the name).
TARGETS = [("[fe80::1%25lo]", "fe80::1", False),
           ("169.254.169.254", "169.254.169.254", True),
           ("[::ffff:169.254.169.254]", "::ffff:169.254.169.254", True),
           ("2852039166", "169.254.169.254", True)]


@pytest.mark.parametrize("host,address,guarded", TARGETS, ids=[t[1] + "/" + t[0][:4]
                                                                for t in TARGETS])
def test_a_redirect_to_a_link_local_address_is_refused(raw, mount, tmp_path, host, address,
                                                       guarded):
    """A manifest's object redirected to instance metadata was followed. The connection is
    refused before it is made, with a line naming the host and the address, not retried,
    and the read gets EIO."""
    if guarded:
        require_link_local_policy()
    obj = pattern(5000)
    srv = raw({"/manifest.json": static(manifest([{"path": "o.bin", "size": len(obj)}])),
               "/o.bin": redirect_to("http://%s:9/latest/meta-data/" % host)})
    m = mount(srv.url("manifest.json"), "--retries", "3")
    assert read_errno(m.p("o.bin")) == errno.EIO, m.stderr()
    log = m.stderr()
    assert "at %s: link-local" % address in log, log
    assert "--allow-link-local" in log, log
    # refused for good, not retried (the kernel may ask a failed page again, which is a
    # new download that fails the same way, and says so)
    assert "retry" not in log, log
    assert len(srv.requests("/o.bin")) == log.count("download failed"), log


def test_a_link_local_manifest_url_is_refused(tmp_path):
    """The rule is every connection's, the SOURCE's included (the option lifts it)."""
    require_link_local_policy()
    out, _ = run_refused("http://169.254.169.254:9/manifest.json", tmp_path / "mnt",
                         "--retries", "3", within=20)
    assert "cannot fetch manifest http://169.254.169.254:9/manifest.json: refused to" \
        " connect to 169.254.169.254 at 169.254.169.254" in out, out
    assert "retry" not in out.lower() and "try 2" not in out, out


def test_allow_link_local_lifts_the_refusal(raw, mount, tmp_path):
    """With --allow-link-local the connection is attempted: fe80::1 on lo, where nothing
    listens (it cannot leave the machine), so the read still fails, but with curl's connect
    error, not the refusal."""
    obj = pattern(5000)
    srv = raw({"/manifest.json": static(manifest([{"path": "o.bin", "size": len(obj)}])),
               "/o.bin": redirect_to("http://[fe80::1%25lo]:9/x")})
    m = mount(srv.url("manifest.json"), "--retries", "1", "--allow-link-local")
    assert read_errno(m.p("o.bin")) == errno.EIO, m.stderr()
    log = m.stderr()
    assert "link-local" not in log, log
    assert "connect" in log.lower(), log


# ----------------------------------------------------------- 6. plain http with credentials


@pytest.mark.parametrize("token", [None, "fAkE-session-token-123"], ids=["keys", "token"])
def test_credentials_over_a_plain_http_endpoint_are_warned_of(aws_env, servers, mount, token):
    """Signed requests to an http:// endpoint travel unencrypted (a session token in
    clear, replayable requests): the mount says so at start. Unsigned ones do not."""
    s3 = servers(S3Mock, {"a": b"x"})
    aws_env(token=token)
    m = mount("s3://" + BUCKET, "--endpoint", s3.endpoint)
    log = m.stderr()
    assert "S3 endpoint %s is plain http" % s3.endpoint in log, log
    assert ("session token" in log) == (token is not None), log
    assert token is None or token not in log
    m2 = mount("s3://" + BUCKET, "--endpoint", s3.endpoint, "--no-sign", name="mnt2")
    assert "plain http" not in m2.stderr(), m2.stderr()

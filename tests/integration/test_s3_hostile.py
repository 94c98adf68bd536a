"""S3 servers that answer in ways a real one would not, or not often: a control byte in a
listed ETag, a redirect of a signed GET to another host, a continuation token that never
changes, listings that take their time, a listed prefix echoed back as a CommonPrefix.

Each test runs its own mock (s3mock.S3Mock, on rawhttp.RawServer) and orders its steps with
the mock's request log and gates, never with sleeps. Reads that may hang on a broken daemon
run in a child process, which the test kills before the mount is torn down. Every test
isolates the AWS_* environment; credentials, when a test needs them, are fake and go in
the environment only.
"""

import errno
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import SANITIZER_MARKS, SLOW, SPOOLFS, daemon_env, is_mounted
from helpers import waiting_on_fuse
from rawhttp import RawServer, serve_object
from s3mock import BUCKET, S3Mock, listing_xml, send_listing
from test_s3 import aws_env  # noqa: F401 (a fixture: a clean AWS environment)

AK = "AKIDSPOOLFSHOSTILE01"
SECRET = "fAkE/spoolfs+Hostile=Secret0123456789abcd"
TOKEN = "fAkE/spoolfs+Hostile=SessionToken0123456789"

# A child that reads sys.argv[1] whole and prints {"n": bytes read, "errno": n or null}.
CHILD_READ = r"""
import json, os, sys
n, err = 0, None
try:
    with open(sys.argv[1], "rb", buffering=0) as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            n += len(b)
except OSError as e:
    err = e.errno
print(json.dumps({"n": n, "errno": err}))
"""

# A child that lists the directory sys.argv[1] and prints its names (or the errno).
CHILD_LIST = r"""
import json, os, sys
try:
    print(json.dumps(sorted(os.listdir(sys.argv[1]))))
except OSError as e:
    print(json.dumps(e.errno))
"""


@pytest.fixture
def mocks(aws_env, servers):
    """mocks(S3Mock args) or mocks(routes=...) for a plain RawServer -> a started server,
    stopped after the test (after the mounts: request this before mount)."""
    def make(*args, routes=None, **kw):
        return servers(RawServer, routes) if routes is not None else servers(S3Mock, *args, **kw)

    return make


@pytest.fixture
def children():
    """child(code, *argv) -> Popen of a python child printing JSON; any still running is
    killed at teardown, before the mount goes."""
    kids = []

    def make(code, *argv):
        kids.append(subprocess.Popen([sys.executable, "-c", code] + [str(a) for a in argv],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE))
        return kids[-1]

    yield make
    for k in kids:
        if k.poll() is None:
            k.kill()
        k.communicate()


def child_result(proc, timeout, what):
    """The JSON a child printed; a child still running after timeout s is killed and the
    test fails."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("%s did not end in %.0f s" % (what, timeout))
    return json.loads(out)


def mount_mock(mount, s3, *args, source="s3://" + BUCKET):
    return mount(source, "--endpoint", s3.endpoint, *args)


# ----------------------------------------------------------------- 1. CR LF in an ETag


def test_crlf_in_a_listed_etag_injects_no_header(mocks, mount, children):
    """A listed ETag went raw into If-Match: '"A"' CR LF 'X-Injected: yes' added a header
    of the server's choosing to every GET of the object. Only a well-formed strong ETag may
    be sent: no GET may carry an X-Injected header (the read may fail with EIO, as the
    object's ETag cannot match the listed one; it must not hang)."""
    good = b"g" * 100
    listed = '"A"\r\nX-Injected: yes'

    def get(ex, key):
        return serve_object(ex, good, [("ETag", '"A"')])

    s3 = mocks({"crlf": (good, listed)}, get_hook=get)
    m = mount_mock(mount, s3, "--no-sign", "--retries", "2")
    res = child_result(children(CHILD_READ, m.p("crlf")), 30 * SLOW, "the read")
    gets = s3.gets("crlf")
    assert gets, "the object was never asked for:\n" + m.stderr()
    injected = [r for r in gets if "x-injected" in r.headers]
    assert not injected, "the listed ETag injected a header: %r" % injected
    for r in gets:
        assert "\r" not in r.h("if-match", "") and "\n" not in r.h("if-match", "")
    assert res["errno"] in (None, errno.EIO), res
    if res["errno"] is None:
        assert res["n"] == len(good)


# ------------------------------------------------------- 2. a redirect to another host


def test_a_redirect_of_a_signed_get_takes_no_credentials_elsewhere(aws_env, mocks, mount,
                                                                   children):
    """A signed object GET answered with 307 to another host was followed: curl drops
    Authorization there, but not the signer's other headers, the session token
    (x-amz-security-token) among them. A signed request must not follow a redirect: the
    other host sees no x-amz-* header (nor Authorization), and the read fails with EIO in
    bounded time."""
    aws_env(AK, SECRET, token=TOKEN)
    data = b"hello world\n"
    other = mocks(routes={"/elsewhere/f": lambda ex: serve_object(ex, data, [("ETag", '"e"')])})
    location = "http://localhost:%d/elsewhere/f" % other.port  # not 127.0.0.1: another host

    def get(ex, key):
        ex.send(307, [("Location", location), ("Content-Length", "0")])
        return True

    s3 = mocks({"f": (data, '"e"')}, get_hook=get)
    m = mount_mock(mount, s3, "--retries", "2", "--stall-timeout", "3")
    t0 = time.monotonic()
    res = child_result(children(CHILD_READ, m.p("f")), 30 * SLOW, "the read")
    seconds = time.monotonic() - t0
    gets = s3.gets("f")
    assert gets and gets[0].h("x-amz-security-token") == TOKEN, \
        "the GET at the endpoint was not signed with the session token: %r" % gets
    leaked = [(r.target, name) for r in other.requests() for name in r.headers
              if name.startswith("x-amz-") or name == "authorization"]
    assert not leaked, "signer headers followed the redirect to %s: %r" % (location, leaked)
    assert res["errno"] == errno.EIO, "the redirected read gave %r, not EIO" % res
    assert seconds < 20 * SLOW, seconds


# --------------------------------------------- 3. a continuation token that repeats


def test_a_repeated_continuation_token_fails_the_mount_at_once(mocks, tmp_path):
    """A listing whose every page says IsTruncated=true with the same NextContinuationToken
    was asked again up to the 10,000-page limit (about 33 min at 0.2 s a page) before the
    mount failed. The repeat must fail the mount at once (at most a few list requests) with
    a message that says the listing repeats its continuation token."""

    def same_token(ex, prefix, token):
        key = "f-" + (token or "first")
        return send_listing(ex, listing_xml(prefix, [(key, 1, '"e"')], truncated=True,
                                            token="SAME-TOKEN"))

    s3 = mocks(list_hook=same_token)
    mnt = tmp_path / "failmnt"
    mnt.mkdir()
    log = tmp_path / "failmnt.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([SPOOLFS, "-f", "s3://" + BUCKET, str(mnt), "--endpoint",
                                 s3.endpoint, "--no-sign"], stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, env=daemon_env())
    try:
        # the daemon ends, or asks a fourth page: either way the test goes on at once
        s3.srv.wait_for(lambda: proc.poll() is not None or len(s3.lists()) > 3,
                        "the mount neither failed nor went on listing", 30 * SLOW)
        pages = len(s3.lists())
        rc = proc.wait(30 * SLOW) if pages <= 3 else None
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        if is_mounted(str(mnt)):
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)])
    err = log.read_text(errors="replace")
    assert pages <= 3, "the same page was asked %d times and the mount went on:\n%s" \
        % (pages, err[-2000:])
    assert not is_mounted(str(mnt))
    for mark in SANITIZER_MARKS:
        assert mark not in err, err
    assert rc != 0, err
    lines = [ln for ln in err.splitlines()
             if ln.strip() and not re.match(r"spoolfs: (debug|info|warn|warning):", ln)]
    assert len(lines) == 1, err  # one message, which says what went wrong
    assert "listing s3://%s/" % BUCKET in lines[0], err
    assert "repeats its continuation token" in lines[0], err


# ------------------------------------------------ 4. slow listings and a local file


N_SLOW = 12  # more than libfuse's default of 10 workers


def test_slow_listings_do_not_hold_up_a_local_read(mocks, mount, children):
    """A lookup in a lazily listed directory holds its FUSE worker while the listing runs:
    with libfuse's default of 10 workers, ten slow listings froze every other operation of
    the mount. While 12 listings of 12 directories are held at a gate, a read of a file
    already local (in another directory) must complete; once the gate opens every listing
    completes."""
    gate = threading.Event()
    local = b"L" * 4096
    objects = {"fast/file": local}
    objects.update({"slow%02d/f" % i: b"s" for i in range(N_SLOW)})

    def slow(ex, prefix, token):
        if prefix.startswith("slow") and not ex.wait(gate):
            return False
        return None  # the listing, once the gate opens

    s3 = mocks(objects, list_hook=slow)
    m = mount_mock(mount, s3, "--no-sign")
    with open(m.p("fast/file"), "rb") as f:
        assert f.read() == local  # fast/ listed, the file fetched: local from now on
    box = {}

    def read_local():
        with open(m.p("fast/file"), "rb") as f:
            box["data"] = f.read()

    reader = threading.Thread(target=read_local, daemon=True)
    try:
        listers = [children(CHILD_LIST, m.p("slow%02d" % i)) for i in range(N_SLOW)]
        # 10 listings at least reach the mock (the old default's every worker), and every
        # lister waits on the mount
        s3.srv.wait_for(lambda: len([r for r in s3.lists()
                                     if r.query().get("prefix", "").startswith("slow")]) >= 10,
                        "the slow listings never reached the mock", 20 * SLOW)
        deadline = time.monotonic() + 20 * SLOW
        while not all(waiting_on_fuse(p.pid) for p in listers):
            assert time.monotonic() < deadline, "the listers never waited on the mount"
            time.sleep(0.01)
        reader.start()
        reader.join(5 * SLOW)
        assert not gate.is_set()
        assert not reader.is_alive(), \
            "a read of a local file waited for %d slow listings of other directories" % N_SLOW
        assert box.get("data") == local
    finally:
        gate.set()
        if reader.ident is not None:
            reader.join(30 * SLOW)
    for i, p in enumerate(listers):
        assert child_result(p, 30 * SLOW, "a listing") == ["f"], i
    assert box.get("data") == local


# --------------------------------------------------- 5. the listed prefix echoed back


def test_a_common_prefix_equal_to_the_listed_prefix_is_skipped(mocks, mount):
    """A CommonPrefix equal to the listed prefix (s3://bkt/pre listed "pre/" among its
    CommonPrefixes) made the name length underflow, and the log gave a wrong reason ("a NUL
    byte"). It must be skipped as the listed prefix itself, logged so, and the rest of the
    listing shown."""

    def echo(ex, prefix, token):
        if prefix == "pre/":
            body = listing_xml(prefix, [("pre/f", 1, '"e"')], ["pre/", "pre/d/"])
        else:
            body = listing_xml(prefix, [(prefix + "g", 1, '"e"')], [prefix])
        return send_listing(ex, body)

    s3 = mocks({"pre/f": (b"f", '"e"'), "pre/d/g": (b"g", '"e"')}, list_hook=echo)
    m = mount_mock(mount, s3, "--no-sign", source="s3://%s/pre" % BUCKET)
    assert sorted(os.listdir(m.path)) == ["d", "f"]
    assert os.listdir(m.p("d")) == ["g"]
    with open(m.p("d/g"), "rb") as f:
        assert f.read() == b"g"
    log = m.stderr()
    for key in ("pre/", "pre/d/"):
        line = 'S3 key "%s" is not shown: the listed prefix itself' % key
        assert line in log, log
    assert "NUL" not in log, log


def test_a_key_holding_a_nul_byte_is_left_out_not_the_listing(mocks, mount):
    """S3 lets a key hold any character; one listed as "a%00b" (a NUL byte) failed the
    whole listing, and at the root the mount. It cannot be a file name: it is left out,
    with a log line, and the rest is shown. So is a key below the listed directory that a
    server ignoring the delimiter lists, with its own reason."""

    def with_nul(ex, prefix, token):
        return send_listing(ex, listing_xml(prefix, [
            ("good1", 1, '"e"'), ("a\x00b", 1, '"e"'), ("good2", 1, '"e"'),
            ("deep/x", 1, '"e"'), ("good3", 1, '"e"')], ["sub/"]))

    s3 = mocks({"good1": (b"1", '"e"'), "good2": (b"2", '"e"'), "good3": (b"3", '"e"')},
               list_hook=with_nul)
    m = mount_mock(mount, s3, "--no-sign")
    assert sorted(os.listdir(m.path)) == ["good1", "good2", "good3", "sub"]
    log = m.stderr()
    assert 'S3 key "a%00b" is not shown: it holds a NUL byte' in log, log
    assert 'S3 key "deep/x" is not shown: it lies below the listed directory' in log, log

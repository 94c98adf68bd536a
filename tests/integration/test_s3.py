"""S3-compatible buckets as a source (issue 3), against real mounts.

Two servers: tests/upstream/s3_upstream.py (verifies SigV4, injects faults, counts bytes per
"BUCKET/KEY") and s3rver from npm (tests/s3/s3rver.py; skipped when node/npm are missing).
Every test isolates the AWS_* environment, so no credentials of the machine are used.
"""

import base64
import errno
import hashlib
import os
import re
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT, SANITIZER_MARKS, SLOW, SPOOLFS, daemon_env, is_mounted, read_file
from helpers import read_until_error, sha, wait_until

sys.path.insert(0, os.path.join(ROOT, "tests", "s3"))
from s3_client import S3Upstream  # noqa: E402
import s3rver  # noqa: E402

MiB = 1 << 20
CHUNK = MiB  # FLIGHT_CHUNK_BYTES
AK = "AKIDSPOOLFSTEST0001"
SECRET = "sEcReT/spoolfs+Test=Value0123456789abcdef"
TOKEN = "tOkEn/spoolfs+Session=0123456789ABCDEFfedcba"
BUCKET = "bkt"

def content(key, size):
    """Deterministic bytes of an object."""
    seed = hashlib.sha256(key.encode()).digest()
    return (seed * (size // 32 + 1))[:size]


# ------------------------------------------------------------------------------ fixtures

@pytest.fixture
def aws_env(monkeypatch, tmp_path):
    """A clean AWS environment; returns a function setting credentials in it."""
    for var in list(os.environ):
        if var.startswith("AWS_"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    # The machine's own instance metadata, if any, is never asked.
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")

    def set_creds(ak=AK, secret=SECRET, token=None):
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", ak)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
        if token is not None:
            monkeypatch.setenv("AWS_SESSION_TOKEN", token)
        else:
            monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)

    return set_creds


@pytest.fixture
def s3_server(tmp_path, aws_env):
    """s3_server(**S3Upstream kwargs) -> a started verifying S3 test server (root under
    tmp_path/s3-N); the environment's credentials are its credentials unless told."""
    servers = []

    def start(verify=(AK, SECRET), creds=True, **kw):
        root = tmp_path / ("s3-%d" % len(servers))
        root.mkdir()
        s = S3Upstream(root, verify=verify, **kw)
        servers.append(s)
        if creds and verify:
            aws_env(verify[0], verify[1], kw.get("session_token"))
        return s

    yield start
    for s in servers:
        s.stop()


def mount_s3(mount, server, source="s3://" + BUCKET, *args, name="mnt"):
    return mount(source, "--endpoint", server.endpoint, *args, name=name)


def failed_mount(tmp_path, source, *args, timeout=30):
    """Runs spoolfs where the mount must fail -> (exit code, stderr)."""
    mnt = tmp_path / "failmnt"
    mnt.mkdir(exist_ok=True)
    r = subprocess.run([SPOOLFS, "-f", source, str(mnt)] + list(args), stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=daemon_env(),
                       timeout=timeout * SLOW)
    err = r.stderr.decode("utf-8", "replace")
    assert not is_mounted(str(mnt)), "a failed mount left a mount behind:\n" + err
    for mark in SANITIZER_MARKS:
        assert mark not in err, err
    return r.returncode, err


def error_lines(err):
    """The lines of stderr that are not info/debug/warn log lines: the message."""
    return [ln for ln in err.splitlines()
            if ln.strip() and not re.match(r"spoolfs: (debug|info|warn|warning):", ln)]


def read_all(path, block=MiB):
    """Reads until EOF or an error -> (bytes read, errno or None)."""
    got, err = read_until_error(path, block)
    return got, err.errno if err is not None else None


# ---------------------------------------------------------------- 1. 2,500 objects, paged

N_OBJECTS = 2500


def many_keys():
    """2,500 keys under nested prefixes; the root (1,050 files + 2 dirs) and deep/a/b
    (1,100 files) each need two ListObjectsV2 pages at 1,000 entries."""
    keys = ["top%04d.bin" % i for i in range(1050)]
    keys += ["deep/a/b/k%04d" % i for i in range(1100)]
    keys += ["x/y%d/z/o%03d.dat" % (i % 5, i) for i in range(350)]
    assert len(keys) == N_OBJECTS
    return {k: content(k, (i * 37) % 700) for i, k in enumerate(keys)}  # some zero-byte


def check_tree(m, objects):
    out = subprocess.run(["find", m.path, "-type", "f"], check=True, stdout=subprocess.PIPE,
                         timeout=120 * SLOW).stdout.decode()
    found = sorted(os.path.relpath(p, m.path) for p in out.splitlines())
    assert len(found) == N_OBJECTS
    assert found == sorted(objects)
    for key, data in objects.items():
        got = read_file(m.p(key))
        assert sha(got) == sha(data), key


@pytest.mark.slow  # 4-13 s plain: the plain pass only (pytest.ini)
def test_2500_objects_paged_python_server(s3_server, mount):
    s3 = s3_server()
    objects = many_keys()
    for key, data in objects.items():
        p = os.path.join(s3.root, BUCKET, key)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
    s3.rescan()
    m = mount_s3(mount, s3)
    check_tree(m, objects)
    lists = [r for r in s3.lists() if r["bucket"] == BUCKET]
    assert all(r["status"] == 200 for r in lists)
    # the root and deep/a/b/ were each followed to a second page
    for prefix in ("", "deep/a/b/"):
        pages = [r for r in lists if r["query"].get("prefix", "") == prefix]
        assert len(pages) == 2, pages
        assert sum(1 for r in pages if r["query"].get("continuation-token")) == 1
    assert s3.auth_failures() == []


@pytest.fixture(scope="module")
def s3rver_installed():
    ok, why = s3rver.available()
    if not ok:
        pytest.skip("s3rver unavailable: " + why)
    s3rver.install()


@pytest.mark.slow  # 4-13 s plain: the plain pass only (pytest.ini)
def test_2500_objects_paged_s3rver(s3rver_installed, aws_env, mount):
    aws_env(s3rver.ACCESS_KEY, s3rver.SECRET)
    objects = many_keys()
    with s3rver.S3rver(buckets=[BUCKET]) as srv:
        srv.seed(BUCKET, objects)
        m = mount("s3://" + BUCKET, "--endpoint", srv.endpoint)
        check_tree(m, objects)
        m.check_clean_exit()


# ------------------------------------------------------- 2. one fetch, killed first reader
# test_core.py's test_eight_readers_one_fetch and test_killed_first_reader run on an S3
# source too (their "s3" parameter), with big_object below.

def big_object(s3, key, size):
    p = os.path.join(s3.root, BUCKET, key)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    data = os.urandom(size)
    with open(p, "wb") as f:
        f.write(data)
    s3.rescan()
    return data


# ------------------------------------------------------------------------------- 3. SigV4

def test_wrong_secret_is_access_denied(s3_server, aws_env, tmp_path, mount):
    s3 = s3_server()
    s3.put(BUCKET, "f.txt", b"hello")
    aws_env(AK, SECRET + "x")
    rc, err = failed_mount(tmp_path, "s3://" + BUCKET, "--endpoint", s3.endpoint)
    assert rc != 0
    assert "access denied to s3://bkt/ (SignatureDoesNotMatch" in err, err
    assert len(error_lines(err)) == 1, err
    assert SECRET not in err
    assert [f["code"] for f in s3.auth_failures()] == ["SignatureDoesNotMatch"]

    # the right secret mounts, and every request it signs verifies
    aws_env(AK, SECRET)
    before = len(s3.auth_failures())
    m = mount_s3(mount, s3)
    assert read_file(m.p("f.txt")) == b"hello"
    assert len(s3.auth_failures()) == before
    assert s3.stats()["auth_failures"] == before


def test_session_token(s3_server, aws_env, tmp_path, mount):
    s3 = s3_server(session_token=TOKEN)
    s3.put(BUCKET, "t.txt", b"token")
    m = mount_s3(mount, s3)
    assert read_file(m.p("t.txt")) == b"token"
    assert s3.auth_failures() == []
    m.check_clean_exit()
    # without the token the server refuses
    aws_env(AK, SECRET)
    rc, err = failed_mount(tmp_path, "s3://" + BUCKET, "--endpoint", s3.endpoint)
    assert rc != 0 and "access denied to s3://bkt/" in err, err


def test_shared_credentials_file_profile(s3_server, aws_env, monkeypatch, tmp_path, mount):
    s3 = s3_server(creds=False)
    s3.put(BUCKET, "p.txt", b"profile")
    creds = tmp_path / "credentials"
    creds.write_text("[default]\naws_access_key_id = WRONGKEY\naws_secret_access_key = nope\n\n"
                     "[dev]\naws_access_key_id = %s\naws_secret_access_key = %s\n" % (AK, SECRET))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    m = mount_s3(mount, s3, "s3://" + BUCKET, "--profile", "dev")
    assert read_file(m.p("p.txt")) == b"profile"
    assert s3.auth_failures() == []
    log = m.stderr()
    assert "credentials from %s [dev]" % creds in log, log
    m.check_clean_exit()
    # the default profile has a key the server does not know
    rc, err = failed_mount(tmp_path, "s3://" + BUCKET, "--endpoint", s3.endpoint)
    assert rc != 0 and "access denied to s3://bkt/ (InvalidAccessKeyId" in err, err


def test_no_sign_public_bucket(s3_server, aws_env, tmp_path, mount):
    s3 = s3_server(creds=False, public=(BUCKET,))
    s3.put(BUCKET, "pub/x.bin", b"public bytes")
    s3.put("private", "y.bin", b"secret bytes")
    m = mount_s3(mount, s3, "s3://" + BUCKET, "--no-sign")
    assert read_file(m.p("pub/x.bin")) == b"public bytes"
    assert s3.auth_failures() == []
    # without credentials and without --no-sign: a clear message
    rc, err = failed_mount(tmp_path, "s3://" + BUCKET, "--endpoint", s3.endpoint)
    assert rc != 0 and "no S3 credentials" in err and "--no-sign" in err, err


# ------------------------------------------------------------------ 4. mount-time errors

def test_no_such_bucket(s3_server, tmp_path):
    s3 = s3_server()
    s3.put(BUCKET, "f", b"x")
    rc, err = failed_mount(tmp_path, "s3://nosuch/pre", "--endpoint", s3.endpoint)
    assert rc != 0
    assert "no such bucket: nosuch" in err, err
    assert len(error_lines(err)) == 1, err


@pytest.mark.parametrize("status", [400, 301])
def test_wrong_region(s3_server, tmp_path, status):
    s3 = s3_server(region="eu-west-1", region_error=status)
    s3.put(BUCKET, "f", b"x")
    rc, err = failed_mount(tmp_path, "s3://" + BUCKET, "--endpoint", s3.endpoint,
                           "--region", "us-east-1")
    assert rc != 0
    assert "bucket bkt is in region eu-west-1, not us-east-1: use --region eu-west-1" in err, err
    assert len(error_lines(err)) == 1, err


def test_right_region_mounts(s3_server, mount):
    s3 = s3_server(region="eu-west-1")
    s3.put(BUCKET, "f", b"x")
    m = mount_s3(mount, s3, "s3://" + BUCKET, "--region", "eu-west-1")
    assert read_file(m.p("f")) == b"x"
    assert s3.auth_failures() == []


@pytest.mark.slow  # 4-13 s plain: the plain pass only (pytest.ini)
def test_unreachable_endpoint(aws_env, tmp_path):
    aws_env()
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = "http://127.0.0.1:%d" % port
    t0 = time.monotonic()
    rc, err = failed_mount(tmp_path, "s3://" + BUCKET, "--endpoint", endpoint)
    assert rc != 0
    assert "cannot reach S3 endpoint %s" % endpoint in err, err
    assert len(error_lines(err)) == 1, err
    assert time.monotonic() - t0 < 15 * SLOW


def listings_of(s3, prefix):
    """Statuses of the ListObjectsV2 requests for prefix so far."""
    return [r.get("status") for r in s3.lists()
            if r["bucket"] == BUCKET and r["query"].get("prefix", "") == prefix]


def test_a_listing_that_fails_once_is_tried_again(s3_server, mount):
    """S3 asks clients to retry a 503 SlowDown: one on the root listing must not fail the
    mount, nor one on a directory listed later its lookup (both used to, at once)."""
    s3 = s3_server()
    s3.put(BUCKET, "top", b"t")
    s3.put(BUCKET, "sub/a", b"a")
    s3.fault(BUCKET + "/", fail_status=503, fail_count=1)
    m = mount_s3(mount, s3)
    assert sorted(os.listdir(m.path)) == ["sub", "top"]
    assert listings_of(s3, "") == [503, 200]
    s3.fault(BUCKET + "/", fail_status=500, fail_count=1)
    assert os.listdir(m.p("sub")) == ["a"]
    assert listings_of(s3, "sub/") == [500, 200]
    assert read_file(m.p("sub/a")) == b"a"
    assert "HTTP 500" in m.stderr() and "try 2 of 6" in m.stderr()


def test_a_listing_that_keeps_failing_gives_eio_after_the_retries(s3_server, mount):
    s3 = s3_server()
    s3.put(BUCKET, "sub/a", b"a")
    m = mount_s3(mount, s3, "s3://" + BUCKET, "--retries", "3")
    s3.fault(BUCKET + "/", fail_status=503, fail_count=1000)
    with pytest.raises(OSError) as e:
        os.listdir(m.p("sub"))
    assert e.value.errno == errno.EIO
    assert listings_of(s3, "sub/") == [503, 503, 503]
    assert "listing /sub failed" in m.stderr() and "try 3 of 3" in m.stderr()
    s3.clear()
    assert os.listdir(m.p("sub")) == ["a"]  # a failed listing is not remembered


@pytest.mark.slow  # 4-13 s plain: the plain pass only (pytest.ini)
def test_a_stalled_listing_is_dropped_and_tried_again(s3_server, mount):
    """A listing whose response stops is dropped after --stall-timeout, as a download is
    (it used to wait out a fixed 60 s, then fail)."""
    s3 = s3_server()
    s3.put(BUCKET, "sub/a", b"a")
    m = mount_s3(mount, s3, "s3://" + BUCKET, "--stall-timeout", "1")
    s3.fault(BUCKET + "/", stall_at=10)
    out = {}
    t = threading.Thread(target=lambda: out.update(names=os.listdir(m.p("sub"))))
    t.start()
    try:
        wait_until(lambda: "try 2 of" in m.stderr(), lambda: m.stderr())
    finally:
        s3.clear()  # the retry, or a stalled response still open, completes
        t.join(30 * SLOW)
    assert out.get("names") == ["a"]
    assert len(listings_of(s3, "sub/")) >= 2


def test_access_denied_unsigned_private_bucket(s3_server, tmp_path):
    s3 = s3_server(creds=False)
    s3.put(BUCKET, "f", b"x")
    rc, err = failed_mount(tmp_path, "s3://" + BUCKET, "--endpoint", s3.endpoint, "--no-sign")
    assert rc != 0
    assert "access denied to s3://bkt/ (AccessDenied" in err, err
    assert len(error_lines(err)) == 1, err


# ------------------------------------------------------------ 5. replaced mid-session

def test_replaced_object_gives_eio_never_a_mix(s3_server, mount):
    size = 8 * MiB
    s3 = s3_server()
    old = os.urandom(size)
    new = os.urandom(size)
    etag0 = s3.put(BUCKET, "r.bin", old)["etag"]
    m = mount_s3(mount, s3)
    rel = BUCKET + "/r.bin"
    s3.fault(rel, stall_at=2 * MiB)
    got = bytearray()
    with open(m.p("r.bin"), "rb", buffering=0) as f:
        got += f.read(MiB)  # the first bytes of the old version arrive
        s3.wait_for(lambda s: s["stalled"] == 1, timeout=20 * SLOW, path=rel)
        assert s3.replace(BUCKET, "r.bin", new)["etag"] != etag0
        s3.clear(rel)  # the stalled response drops; the resume is pinned to the old ETag
        with pytest.raises(OSError) as e:
            while True:
                b = f.read(MiB)
                if not b:
                    break
                got += b
        assert e.value.errno == errno.EIO
    assert bytes(got) == old[:len(got)], "bytes of two versions were mixed"
    assert len(got) < size
    st = s3.stats(rel)
    assert 412 in st["statuses"], st
    log = m.stderr()
    assert "r.bin: download failed (object changed upstream (ETag %s no longer matches))" \
        % etag0 in log, log

    # A new open in the same session is pinned to the listing's ETag too: the session is a
    # snapshot, so the replaced object stays unreadable (EIO) instead of showing new bytes.
    assert os.stat(m.p("r.bin")).st_size == size
    data, err = read_all(m.p("r.bin"))
    assert err == errno.EIO
    assert data == old[:len(data)]


# ---------------------------------------------------------- 6. secrets never logged

def test_secret_and_token_never_logged(s3_server, mount):
    s3 = s3_server(session_token=TOKEN)
    for i in range(3):
        s3.put(BUCKET, "d/f%d" % i, content("f%d" % i, 100_000))
    s3.put(BUCKET, "d/denied", b"nope")
    # Refused from the start: the three reads below are a walk of d/, which fetches
    # d/denied ahead of its reader.
    s3.fault(BUCKET + "/d/denied", fail_status=403)
    m = mount_s3(mount, s3, "s3://" + BUCKET, "-d")
    for i in range(3):
        assert read_file(m.p("d/f%d" % i)) == content("f%d" % i, 100_000)
    data, err = read_all(m.p("d/denied"))
    assert err == errno.EIO and data == b""
    assert 403 in s3.stats(BUCKET + "/d/denied")["statuses"]
    texts = []
    for name in os.listdir(m.p("d")):
        for attr in os.listxattr(m.p("d/" + name)):
            texts.append(os.getxattr(m.p("d/" + name), attr).decode("utf-8", "replace"))
    for name in ("stats", "flights"):
        p = m.p(".spoolfs/" + name)
        if os.path.exists(p):
            texts.append(open(p, "rb").read().decode("utf-8", "replace"))
    with open("/proc/mounts") as f:
        texts.append(f.read())
    m.check_clean_exit()
    log = m.stderr()
    assert "403" in log and len(log.splitlines()) > 10  # -d logged the run
    texts.append(log)
    for t in texts:
        for secret in (SECRET, TOKEN):
            assert secret not in t
            # nor in an encoded form
            assert secret.replace("/", "%2F").replace("+", "%2B").replace("=", "%3D") not in t
    assert s3.auth_failures() == []


# ---------------------------------------------------------------- 7. hostile keys

HOSTILE = {
    "a//b": None,            # empty segment: a/ shows, a//b does not
    "./x": None,             # "." segment: skipped
    "../x": None,            # ".." segment: skipped
    "a/./b": None,
    "a/../b": None,
    "L" * 256: None,         # over 255 bytes: skipped
    "m/" + "M" * 300 + "/f": None,
    "both": "object",        # both an object and a prefix: the directory wins
    "both/b": "b",
    "dir/": "",              # zero-byte marker: dir shows, the marker does not
    "dir/in": "in",
    "empty/": "",            # a marker alone: an empty directory
    "sp ace ü %41+b%2F.txt": "odd",
    "ok/" + "N" * 255: "long-ok",   # exactly 255 bytes is fine
}


@pytest.fixture
def hostile_mount(s3_server, mount):
    s3 = s3_server()
    for k, v in HOSTILE.items():
        s3.put(BUCKET, k, (v if v is not None else "hidden " + k).encode())
    return s3, mount_s3(mount, s3)


def walk(root):
    """Every path under root (relative), files and directories, without following."""
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs:
            out[os.path.relpath(os.path.join(d, n), root)] = "dir"
        for n in files:
            out[os.path.relpath(os.path.join(d, n), root)] = "file"
    return out


def test_keys_with_control_bytes_read_and_log_escaped(s3_server, mount):
    """Tabs, newlines and other control bytes are legal in keys and in file names: they are
    read under their names (signing used to refuse them, so every read failed with EINVAL),
    and a log line that names one shows the bytes escaped, so a key cannot start a line of
    its own in the daemon's log."""
    s3 = s3_server()
    keys = ["tab\tx", "ctl\x01x", "del\x7fx", "nl\nspoolfs: error: forged"]
    for k in keys:
        s3.put(BUCKET, k, k.encode())
    s3.put(BUCKET, "nl\nspoolfs: error: forged" + "L" * 255, b"h")  # too long: logged
    m = mount_s3(mount, s3)
    assert sorted(os.listdir(m.path)) == sorted(keys)
    for k in keys:
        assert read_file(m.p(k)) == k.encode()
    assert s3.auth_failures() == []
    log = m.stderr()
    assert "nl\\x0aspoolfs: error: forged" in log, log
    assert not any(ln.startswith("spoolfs: error: forged") for ln in log.splitlines()), log


def test_a_bucket_cannot_hide_the_status_directory(s3_server, mount):
    s3 = s3_server()
    s3.put(BUCKET, ".spoolfs/stats", b"upstream_requests_total 999\n")
    s3.put(BUCKET, ".spoolfs/flights", b"fake\n")
    s3.put(BUCKET, "d/.spoolfs", b"fine below the root")
    m = mount_s3(mount, s3)
    assert os.listdir(m.path) == ["d"]  # the status directory is found, never listed
    assert read_file(m.p("d/.spoolfs")) == b"fine below the root"
    stats = read_file(m.p(".spoolfs/stats")).decode()
    assert "999" not in stats and "spoolfs_" in stats, stats
    assert 'S3 key ".spoolfs/" is not shown' in m.stderr()


def test_hostile_keys(hostile_mount):
    s3, m = hostile_mount
    tree = walk(m.path)
    tree.pop(".spoolfs", None)
    tree = {k: v for k, v in tree.items() if not k.startswith(".spoolfs/")}
    assert tree == {
        "a": "dir",                      # from a//b, a/./b, a/../b: shown, empty
        "m": "dir",                      # its only child's name is too long
        "both": "dir", "both/b": "file",
        "dir": "dir", "dir/in": "file",
        "empty": "dir",
        "ok": "dir", "ok/" + "N" * 255: "file",
        "sp ace ü %41+b%2F.txt": "file",
    }
    assert os.listdir(m.p("a")) == [] and os.listdir(m.p("m")) == []
    assert os.listdir(m.p("empty")) == []
    assert sorted(os.listdir(m.p("dir"))) == ["in"]
    assert read_file(m.p("both/b")) == b"b"
    assert read_file(m.p("dir/in")) == b"in"
    assert read_file(m.p("sp ace ü %41+b%2F.txt")) == b"odd"
    assert read_file(m.p("ok/" + "N" * 255)) == b"long-ok"
    for bad in ("x", "b", "L" * 255):
        with pytest.raises(FileNotFoundError):
            os.stat(m.p(bad))
    with pytest.raises(OSError) as e:
        os.stat(m.p("L" * 256))
    assert e.value.errno in (errno.ENOENT, errno.ENAMETOOLONG)
    # ".." and "." are resolved by the kernel: they cannot reach outside the mount
    assert os.path.samestat(os.stat(m.p("a/..")), os.stat(m.path))
    assert sorted(os.listdir(m.p("a/.."))) == sorted(os.listdir(m.path))
    # nothing but the shown objects was ever fetched
    fetched = {p for p, s in s3.stats()["paths"].items() if s.get("gets")}
    assert fetched == {BUCKET + "/" + k for k in
                       ("both/b", "dir/in", "sp ace ü %41+b%2F.txt", "ok/" + "N" * 255)}, fetched
    m.check_clean_exit()
    log = m.stderr()
    for key, why in (("../", 'a ".." segment'), ("./", 'a "." segment'),
                     ("a//", "empty segment"), ("a/./", 'a "." segment'),
                     ("a/../", 'a ".." segment'), ("L" * 256, "longer than 255 bytes"),
                     ("m/" + "M" * 300 + "/", "longer than 255 bytes"),
                     ("dir/", "directory marker"), ("empty/", "directory marker")):
        line = 'S3 key "%s" is not shown: ' % key
        assert any(line in ln and why in ln for ln in log.splitlines()), (key, log)


def test_object_shadowed_by_prefix_is_logged(hostile_mount):
    s3, m = hostile_mount
    os.listdir(m.path)
    m.check_clean_exit()
    assert 'S3 key "both" is not shown' in m.stderr()


# ------------------------------------------------------------- 8. checksums

@pytest.mark.parametrize("kind", ["checksum", "meta"])
def test_sha256_checksum_verified(s3_server, mount, kind):
    s3 = s3_server()
    good = content("good", 3 * MiB + 123)
    bad = content("bad", 3 * MiB + 123)
    other = hashlib.sha256(b"something else").digest()
    if kind == "checksum":
        s3.put(BUCKET, "good.bin", good, checksum_sha256="auto")
        s3.put(BUCKET, "bad.bin", bad, checksum_sha256=base64.b64encode(other).decode())
    else:
        s3.put(BUCKET, "good.bin", good, sha256="auto")
        s3.put(BUCKET, "bad.bin", bad, sha256=other.hex())
    m = mount_s3(mount, s3)
    assert read_file(m.p("good.bin")) == good
    data, err = read_all(m.p("bad.bin"))
    assert err == errno.EIO
    assert data == bad[:len(data)] and len(data) <= len(bad) - CHUNK  # the tail is withheld
    assert "sha256" in m.stderr().lower()


# ---------------------------------------------------------- prefetch of a walk (issue 22)

def test_a_walk_of_a_bucket_is_fetched_ahead_subdirectories_listed_first(s3_server, mount):
    s3 = s3_server()
    names = ["d/f%02d" % i for i in range(30)]
    subs = ["d/sub/g%d" % i for i in range(3)]
    for key in names + subs:
        s3.put(BUCKET, key, content(key, 3000))
    m = mount_s3(mount, s3)
    for key in names[:3]:
        assert read_file(m.p(key)) == content(key, 3000)
    # Objects of the listed directory not opened yet are fetched ahead of the walker.
    wait_until(lambda: sum(s3.stats(BUCKET + "/" + k)["gets"] for k in names[3:]) >= 4,
               lambda: [s3.stats(BUCKET + "/" + k)["gets"] for k in names])
    for key in names[3:]:
        assert read_file(m.p(key)) == content(key, 3000)
    # Then its subdirectory: listed by the walk (nobody looked into it), then fetched.
    wait_until(lambda: all(s3.stats(BUCKET + "/" + k)["gets"] == 1 for k in subs),
               lambda: [s3.stats(BUCKET + "/" + k) for k in subs])
    for key in subs:
        assert read_file(m.p(key)) == content(key, 3000)
    assert all(s3.stats(BUCKET + "/" + k)["gets"] == 1 for k in names + subs)


def test_find_and_ls_of_a_bucket_fetch_listings_and_no_content(s3_server, mount):
    """A bare `find` or `ls -lR` of a bucket lists its prefixes and asks for no object:
    only opens start a walk (issue 22)."""
    s3 = s3_server()
    keys = ["a/f%02d" % i for i in range(20)] + ["a/b/g%d" % i for i in range(5)] + ["c/h0"]
    for key in keys:
        s3.put(BUCKET, key, content(key, 3000))
    m = mount_s3(mount, s3)
    subprocess.run(["find", m.path], check=True, stdout=subprocess.DEVNULL, timeout=60 * SLOW)
    subprocess.run(["ls", "-lR", m.path], check=True, stdout=subprocess.DEVNULL,
                   timeout=60 * SLOW)
    assert [k for k in keys if s3.stats(BUCKET + "/" + k)["gets"]] == []
    with open(m.p(".spoolfs/stats")) as f:
        assert "spoolfs_speculative_flights_total 0\n" in f.read()

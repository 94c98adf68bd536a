"""Self-tests for the test upstream (tests/upstream/upstream.py)."""

import hashlib
import http.client
import os
import re
import socket
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client import Upstream, UpstreamError  # noqa: E402
from mkstore import content, make_store, parse_size  # noqa: E402

SIZE = 1 << 20  # a.bin
SMALL = 10000


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("store")
    man = make_store(str(root), ["dir/a.bin:1M", "s.bin:%d" % SMALL, "empty:0"],
                     no_hash=["s.bin"])
    return root, man


@pytest.fixture(scope="module")
def up_mod(store):
    with Upstream(store[0]) as up:
        yield up


@pytest.fixture
def up(up_mod):
    up_mod.clear()
    up_mod.reset()
    yield up_mod
    up_mod.clear()


A = None


def data_a():
    global A
    if A is None:
        A = content("dir/a.bin", SIZE)
    return A


def raw_get(up, path, headers=(), timeout=5):
    """GET on a raw socket; read until EOF (or Content-Length). Returns
    (status, headers, body, eof) where eof says the server closed the connection."""
    s = socket.create_connection(("127.0.0.1", up.port), timeout=timeout)
    req = "GET /%s HTTP/1.1\r\nHost: x\r\n" % path
    for k, v in headers:
        req += "%s: %s\r\n" % (k, v)
    s.sendall((req + "\r\n").encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            break
        buf += d
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    clen = int(hdrs.get("content-length", 0))
    eof = False
    while len(body) < clen:
        d = s.recv(65536)
        if not d:
            eof = True
            break
        body += d
    s.close()
    return status, hdrs, body, eof


# ------------------------------------------------------------------ basics

def test_manifest(store):
    root, man = store
    files = {f["path"]: f for f in man["files"]}
    assert man["version"] == 1
    assert files["dir/a.bin"]["size"] == SIZE
    assert files["dir/a.bin"]["sha256"] == hashlib.sha256(data_a()).hexdigest()
    assert "sha256" not in files["s.bin"]
    assert (root / "manifest.json").exists()
    assert parse_size("2K") == 2048 and parse_size("3G") == 3 << 30 and parse_size("7") == 7
    # deterministic, and blocks differ
    assert content("dir/a.bin", SIZE) == data_a()
    big = content("x", 3 << 20)
    assert big[:1 << 20] != big[1 << 20:2 << 20]


def test_full_get_and_head(up):
    st, h, body = up.request("dir/a.bin")
    assert st == 200 and body == data_a()
    assert h["content-length"] == str(SIZE)
    assert h["accept-ranges"] == "bytes"
    assert re.fullmatch(r'"[0-9a-f]{40}"', h["etag"])
    assert "last-modified" in h
    st2, h2, body2 = up.request("dir/a.bin", method="HEAD")
    assert st2 == 200 and body2 == b"" and h2["etag"] == h["etag"]
    assert h2["content-length"] == str(SIZE)
    s = up.stats("dir/a.bin")
    assert (s["gets"], s["heads"], s["bytes"]) == (1, 1, SIZE)
    assert s["statuses"] == [200, 200] and s["ranges"] == [None]
    assert up.request("nope")[0] == 404
    assert up.request("empty")[:3:2] == (200, b"")


def test_ranges(up):
    a = data_a()
    st, h, b = up.request("dir/a.bin", headers={"Range": "bytes=100-199"})
    assert (st, b, h["content-range"]) == (206, a[100:200], "bytes 100-199/%d" % SIZE)
    st, h, b = up.request("dir/a.bin", headers={"Range": "bytes=%d-" % (SIZE - 10)})
    assert (st, b, h["content-range"]) == (206, a[-10:], "bytes %d-%d/%d" % (SIZE - 10, SIZE - 1, SIZE))
    st, h, b = up.request("dir/a.bin", headers={"Range": "bytes=-5"})
    assert (st, b) == (206, a[-5:])
    st, h, b = up.request("dir/a.bin", headers={"Range": "bytes=%d-%d" % (SIZE - 2, SIZE + 100)})
    assert (st, b, h["content-range"]) == (206, a[-2:], "bytes %d-%d/%d" % (SIZE - 2, SIZE - 1, SIZE))
    st, h, b = up.request("dir/a.bin", headers={"Range": "bytes=%d-" % SIZE})
    assert st == 416 and h["content-range"] == "bytes */%d" % SIZE
    assert up.request("empty", headers={"Range": "bytes=0-"})[0] == 416
    s = up.stats("dir/a.bin")
    assert s["statuses"] == [206, 206, 206, 206, 416]
    assert s["ranges"][0] == "bytes=100-199"
    assert s["bytes"] == 100 + 10 + 5 + 2


def test_if_match_and_if_range(up):
    a = data_a()
    etag = up.request("dir/a.bin", method="HEAD")[1]["etag"]
    assert up.request("dir/a.bin", headers={"If-Match": '"nope"'})[0] == 412
    assert up.request("dir/a.bin", headers={"If-Match": etag, "Range": "bytes=0-9"})[0] == 206
    assert up.request("dir/a.bin", headers={"If-Match": "*"})[0] == 200
    st, h, b = up.request("dir/a.bin", headers={"If-Range": '"other"', "Range": "bytes=0-9"})
    assert st == 200 and b == a
    st, h, b = up.request("dir/a.bin", headers={"If-Range": etag, "Range": "bytes=5-9"})
    assert st == 206 and b == a[5:10]
    # ETag override is what conditionals compare against
    up.fault("dir/a.bin", etag='"v2"')
    assert up.request("dir/a.bin", method="HEAD")[1]["etag"] == '"v2"'
    assert up.request("dir/a.bin", headers={"If-Match": etag})[0] == 412
    assert up.request("dir/a.bin", headers={"If-Match": '"v2"', "Range": "bytes=0-0"})[0] == 206


# ------------------------------------------------------------------ faults

def test_gate_release(up):
    up.fault("s.bin", gate=True)
    res = []

    def get():
        res.append(up.request("s.bin"))

    ts = [threading.Thread(target=get) for _ in range(3)]
    for t in ts:
        t.start()
    s = up.wait_for(lambda s: s["gated"] == 3, path="s.bin")
    assert s["gets"] == 3 and s["statuses"] == [] and s["active"] == 0
    # The server answers another request meanwhile, and the gated ones still wait.
    assert up.request("empty")[0] == 200
    assert not res and up.stats("s.bin")["gated"] == 3 and up.stats()["peak_gated"] == 3
    up.release("s.bin")
    for t in ts:
        t.join(5)
    assert [r[0] for r in res] == [200] * 3
    s = up.wait_for(lambda s: s["active"] == 0, path="s.bin")
    assert s["gated"] == 0 and s["bytes"] == 3 * SMALL
    # gate opened; a new request is not gated
    assert up.request("s.bin")[0] == 200


def test_fail_gated_fails_only_the_requests_held_at_the_gate(up):
    up.fault("s.bin", gate=True)
    res = []
    t = threading.Thread(target=lambda: res.append(up.request("s.bin")))
    t.start()
    up.wait_for(lambda s: s["gated"] == 1, path="s.bin")
    up.fault("s.bin", fail_status=503, fail_count=2, fail_gated=True)
    up.release("s.bin")
    # Not held: it passes, and leaves the failures to the held requests.
    assert up.request("s.bin")[0] == 200
    t.join(5)
    assert [r[0] for r in res] == [503]
    assert sorted(up.stats("s.bin")["statuses"]) == [200, 503]


def test_gate_skip_lets_the_first_requests_through(up):
    up.fault("s.bin", gate=True, gate_skip=1)
    assert up.request("s.bin")[0] == 200  # the first passes
    res = []
    t = threading.Thread(target=lambda: res.append(up.request("s.bin")))
    t.start()
    up.wait_for(lambda s: s["gated"] == 1, path="s.bin")  # the second waits
    up.release("s.bin")
    t.join(5)
    assert [r[0] for r in res] == [200]


def test_gate_client_gone(up):
    up.fault("s.bin", gate=True)
    c = socket.create_connection(("127.0.0.1", up.port))
    c.sendall(b"GET /s.bin HTTP/1.1\r\nHost: x\r\n\r\n")
    up.wait_for(lambda s: s["gated"] == 1, path="s.bin")
    c.close()
    up.wait_for(lambda s: s["gated"] == 0, path="s.bin")


def test_drop_after(up):
    a = data_a()
    up.fault("dir/a.bin", drop_after=70000)
    for _ in range(2):
        st, h, b, eof = raw_get(up, "dir/a.bin")
        assert st == 200 and eof and b == a[:70000]
    st, h, b, eof = raw_get(up, "dir/a.bin", [("Range", "bytes=1000-")])
    assert st == 206 and eof and b == a[1000:71000]
    with pytest.raises(http.client.IncompleteRead):
        up.request("dir/a.bin")
    s = up.stats("dir/a.bin")
    assert s["bytes"] == 4 * 70000 and s["drops"] == 4


def test_drop_at_fires_once(up):
    a = data_a()
    up.fault("dir/a.bin", drop_at=[5000, 1000])
    st, h, b, eof = raw_get(up, "dir/a.bin")
    assert eof and b == a[:1000]
    st, h, b, eof = raw_get(up, "dir/a.bin", [("Range", "bytes=1000-")])
    assert st == 206 and eof and b == a[1000:5000]
    st, h, b, eof = raw_get(up, "dir/a.bin")
    assert not eof and b == a
    assert up.faults()["dir/a.bin"]["drop_at"] == []
    assert up.stats("dir/a.bin")["bytes"] == 5000 + SIZE


def test_corrupt_at(up):
    a = data_a()
    up.fault("dir/a.bin", corrupt_at=123456)
    for _ in range(2):
        b = up.request("dir/a.bin")[2]
        assert b[123456] == a[123456] ^ 0xFF
        assert b[:123456] == a[:123456] and b[123457:] == a[123457:]
    b = up.request("dir/a.bin", headers={"Range": "bytes=123450-123460"})[2]
    assert b[6] == a[123456] ^ 0xFF and b[:6] == a[123450:123456]
    assert up.request("dir/a.bin", headers={"Range": "bytes=0-99"})[2] == a[:100]
    up.clear("dir/a.bin")
    assert up.request("dir/a.bin")[2] == a


def test_fail_status(up):
    up.fault("s.bin", fail_status=503, fail_count=2, retry_after=1)
    st, h, b = up.request("s.bin")
    assert st == 503 and h["retry-after"] == "1"
    assert up.request("s.bin", method="HEAD")[0] == 503
    st, h, b = up.request("s.bin")
    assert st == 200 and "retry-after" not in h and len(b) == SMALL
    s = up.stats("s.bin")
    assert s["statuses"] == [503, 503, 200] and s["gets"] == 2 and s["heads"] == 1
    assert s["bytes"] == SMALL
    up.fault("s.bin", fail_status=429)  # no count: until cleared
    assert [up.request("s.bin")[0] for _ in range(3)] == [429] * 3
    up.clear("s.bin")
    assert up.request("s.bin")[0] == 200


def test_stall_at_and_clear(up):
    a = data_a()
    up.fault("dir/a.bin", stall_at=200000)
    s = socket.create_connection(("127.0.0.1", up.port), timeout=5)
    s.sendall(b"GET /dir/a.bin HTTP/1.1\r\nHost: x\r\n\r\n")
    buf = b""
    while len(buf) < 200000 or b"\r\n\r\n" not in buf:
        buf += s.recv(65536)
        hdr_end = buf.find(b"\r\n\r\n")
        if hdr_end >= 0 and len(buf) - hdr_end - 4 >= 200000:
            break
    body = buf[buf.index(b"\r\n\r\n") + 4:]
    st = up.wait_for(lambda x: x["stalled"] == 1, path="dir/a.bin")
    assert st["bytes"] == 200000 and st["active"] == 1
    s.settimeout(0.3)
    with pytest.raises(socket.timeout):
        s.recv(1)
    assert body == a[:200000]
    # fires once: another request goes through
    assert up.request("dir/a.bin")[2] == a
    up.clear("dir/a.bin")
    s.settimeout(5)
    assert s.recv(1) == b""  # closed by the server
    s.close()
    up.wait_for(lambda x: x["stalled"] == 0 and x["active"] == 0, path="dir/a.bin")


def test_hold_at_pauses_the_body_until_release(up):
    """hold_at pauses the one response mid-body and lets it go on, unlike stall_at."""
    a = data_a()
    up.fault("dir/a.bin", hold_at=200000)
    res = []
    t = threading.Thread(target=lambda: res.append(up.request("dir/a.bin")))
    t.start()
    st = up.wait_for(lambda x: x["held"] == 1, path="dir/a.bin")
    assert st["bytes"] == 200000 and st["active"] == 1 and not res
    up.release("dir/a.bin")
    t.join(10)
    assert res and res[0][0] == 200 and res[0][2] == a
    st = up.wait_for(lambda x: x["active"] == 0, path="dir/a.bin")
    assert st["gets"] == 1 and st["held"] == 0 and st["bytes"] == len(a)


def test_stall_client_close(up):
    up.fault("s.bin", stall_at=10)
    s = socket.create_connection(("127.0.0.1", up.port), timeout=5)
    s.sendall(b"GET /s.bin HTTP/1.1\r\nHost: x\r\n\r\n")
    up.wait_for(lambda x: x["stalled"] == 1, path="s.bin")
    s.close()
    up.wait_for(lambda x: x["stalled"] == 0 and x["active"] == 0, path="s.bin")
    assert up.stats("s.bin")["bytes"] == 10


def test_size_lie(up):
    a = data_a()
    up.fault("dir/a.bin", size_lie=SIZE + 100)
    st, h, b = up.request("dir/a.bin")
    assert h["content-length"] == str(SIZE + 100) and b == a + bytes(100)
    st, h, b = up.request("dir/a.bin", headers={"Range": "bytes=-200"})
    assert h["content-range"] == "bytes %d-%d/%d" % (SIZE - 100, SIZE + 99, SIZE + 100)
    assert b == a[-100:] + bytes(100)
    up.fault("dir/a.bin", size_lie=1000)
    st, h, b = up.request("dir/a.bin")
    assert st == 200 and b == a[:1000]
    assert up.request("dir/a.bin", headers={"Range": "bytes=1000-"})[0] == 416


def test_ignore_range_and_content_range_lie(up):
    a = data_a()
    up.fault("dir/a.bin", ignore_range=True)
    st, h, b = up.request("dir/a.bin", headers={"Range": "bytes=10-19"})
    assert st == 200 and b == a and "content-range" not in h
    up.fault("dir/a.bin", ignore_range=None, content_range_lie=True)
    st, h, b = up.request("dir/a.bin", headers={"Range": "bytes=10-19"})
    assert st == 206 and b == a[10:20]
    assert h["content-range"] == "bytes 4106-4115/%d" % SIZE


def test_rate(up):
    rate = 4 << 20
    up.fault("dir/a.bin", rate=rate)
    t0 = time.monotonic()
    assert up.request("dir/a.bin")[2] == data_a()
    dt = time.monotonic() - t0
    # The lower bound shows the pacing; the upper one only that it is not far off: 60 ms of
    # slack for a connection, a thread and 100 sleeps was thin on a loaded 2-core VM.
    assert SIZE / rate * 0.95 <= dt <= SIZE / rate * 1.25 + 0.25


def test_bad_fault_and_paths(up):
    with pytest.raises(UpstreamError):
        up.fault("s.bin", bogus=1)
    with pytest.raises(UpstreamError):
        up.fault("s.bin", drop_after="x")
    for p in ["../../../etc/passwd", "%2e%2e/%2e%2e/etc/passwd", "dir/../../etc/hostname"]:
        st, h, b, eof = raw_get(up, p)
        assert st == 404
    assert up.request("dir")[0] == 404


def test_stats_totals_and_reset(up):
    up.request("s.bin")
    up.request("s.bin", headers={"Range": "bytes=0-99"})
    up.request("dir/a.bin", headers={"Range": "bytes=0-999"})
    t = up.stats()
    assert t["total_gets"] == 3 and t["total_bytes"] == SMALL + 100 + 1000
    assert t["paths"]["s.bin"]["ranges"] == [None, "bytes=0-99"]
    up.reset()
    assert up.stats()["total_gets"] == 0
    assert up.stats("s.bin")["gets"] == 0


def test_concurrent_keepalive(up):
    a = data_a()
    errors = []

    def worker(i):
        try:
            c = http.client.HTTPConnection("127.0.0.1", up.port, timeout=10)
            for j in range(5):
                off = (i * 7919 + j * 104729) % (SIZE - 5000)
                c.request("GET", "/dir/a.bin", headers={"Range": "bytes=%d-%d" % (off, off + 4999)})
                r = c.getresponse()
                if r.status != 206 or r.read() != a[off:off + 5000]:
                    errors.append((i, j))
            c.close()
        except Exception as e:  # pragma: no cover
            errors.append(repr(e))

    up.fault("dir/a.bin", gate=True)
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(40)]
    for t in ts:
        t.start()
    up.wait_for(lambda s: s["gated"] == 40, path="dir/a.bin")
    up.release("dir/a.bin")
    for t in ts:
        t.join(20)
    assert not errors
    s = up.stats("dir/a.bin")
    assert s["gets"] == 200 and s["bytes"] == 200 * 5000


def test_total_rate_caps_every_path_together(tmp_path):
    # Two paths at once, half the bytes each: a cap per path would let each go at the full
    # rate (done in half the time), so finishing no sooner than all bytes at one rate shows
    # that every response takes from one budget.
    rate = 4 << 20
    make_store(str(tmp_path), ["x.bin:512K", "y.bin:512K"])
    with Upstream(tmp_path, total_rate=rate) as up:
        bodies = {}

        def get(path):
            bodies[path] = up.request(path)[2]

        ts = [threading.Thread(target=get, args=(p,)) for p in ("x.bin", "y.bin")]
        t0 = time.monotonic()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        dt = time.monotonic() - t0
        assert bodies == {p: content(p, 512 << 10) for p in ("x.bin", "y.bin")}
        assert dt >= (1 << 20) / rate * 0.95


def test_total_rate_must_be_positive(store):
    p = subprocess.run(["/usr/bin/python3", os.path.join(os.path.dirname(__file__), "upstream.py"),
                        "--root", str(store[0]), "--total-rate", "-1"],
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 2 and "--total-rate must be a positive" in p.stderr


def test_sigterm_exit(store):
    up = Upstream(store[0])
    assert up.request("s.bin")[0] == 200
    # an open idle keep-alive connection and a gated request must not block exit
    c = socket.create_connection(("127.0.0.1", up.port))
    up.fault("s.bin", gate=True)
    c.sendall(b"GET /s.bin HTTP/1.1\r\nHost: x\r\n\r\n")
    up.wait_for(lambda s: s["gated"] == 1, path="s.bin")
    t0 = time.monotonic()
    assert up.stop() == 0
    assert time.monotonic() - t0 < 3
    c.close()


def test_cli_port_line(store):
    p = subprocess.Popen(["/usr/bin/python3", os.path.join(os.path.dirname(__file__), "upstream.py"),
                          "--root", str(store[0])], stdout=subprocess.PIPE)
    line = p.stdout.readline().decode()
    assert re.fullmatch(r"PORT \d+\n", line)
    p.send_signal(2)
    assert p.wait(5) == 0
    p.stdout.close()


def test_restart_on_fixed_port(store):
    up = Upstream(store[0])
    port = up.port
    assert up.request("s.bin")[0] == 200
    up.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    with Upstream(store[0], port=port) as up2:
        assert up2.port == port
        status, _, body = up2.request("s.bin")
        assert status == 200 and body == content("s.bin", SMALL)


def make_cert(dirpath):
    cert, key = os.path.join(dirpath, "cert.pem"), os.path.join(dirpath, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", key, "-out", cert, "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


def test_tls(store, tmp_path):
    import ssl
    cert, key = make_cert(str(tmp_path))
    with Upstream(store[0], tls_cert=cert, tls_key=key) as up:
        assert up.base.startswith("https://127.0.0.1:")
        # A client that does not trust the certificate fails the handshake ...
        ctx = ssl.create_default_context()
        with pytest.raises(ssl.SSLError):
            with socket.create_connection(("127.0.0.1", up.port), timeout=5) as raw:
                ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        # ... and does not wedge the server for the next one, which trusts it.
        ctx = ssl.create_default_context(cafile=cert)
        c = http.client.HTTPSConnection("127.0.0.1", up.port, timeout=5, context=ctx)
        c.request("GET", "/dir/a.bin", headers={"Range": "bytes=10-19"})
        r = c.getresponse()
        assert r.status == 206 and r.read() == data_a()[10:20]
        c.close()
        # Control endpoints and faults work over TLS too (gate uses the peer-closed check).
        up.fault("s.bin", gate=True)
        t = threading.Thread(target=lambda: up.request("s.bin"))
        t.start()
        up.wait_for(lambda s: s["gated"] == 1, path="s.bin")
        up.release("s.bin")
        t.join(5)
        assert up.stats("s.bin")["statuses"] == [200]


def test_tls_args_must_pair(store, tmp_path):
    p = subprocess.run(["/usr/bin/python3", os.path.join(os.path.dirname(__file__), "upstream.py"),
                        "--root", str(store[0]), "--tls-cert", str(tmp_path / "c.pem")],
                       capture_output=True, timeout=10)
    assert p.returncode == 2 and b"go together" in p.stderr


def test_ignore_if_match(up):
    a = data_a()
    up.fault("dir/a.bin", etag='"v2"')
    h = {"If-Match": '"v1"', "Range": "bytes=100-199"}
    assert up.request("dir/a.bin", headers=h)[0] == 412
    up.fault("dir/a.bin", ignore_if_match=True)
    st, hdrs, body = up.request("dir/a.bin", headers=h)
    assert st == 206 and hdrs["etag"] == '"v2"' and body == a[100:200]

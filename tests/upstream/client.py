"""Test helper: run tests/upstream/upstream.py as a subprocess and drive it.

    from client import Upstream
    with Upstream(root) as up:
        up.url("dir/a.bin")                      # http://127.0.0.1:PORT/dir/a.bin
        up.fault("dir/a.bin", gate=True)         # merge fault options (None removes one)
        up.wait_for(lambda s: s["gated"] == 1, path="dir/a.bin")
        up.release("dir/a.bin")                  # opens the gate (and a hold_at)
        up.stats("dir/a.bin")["gets"]
        up.clear()                               # all faults; up.clear(path) for one
        up.reset()                               # counters

    Upstream(root, port=PORT)                    # a fixed port (e.g. restart after stop())
    Upstream(root, tls_cert="c.pem", tls_key="k.pem")   # HTTPS; up.base is https://...

Fault options (per path): gate (+ gate_skip N: the first N requests pass), rate (B/s),
drop_after (N body bytes per response), drop_at ([abs offsets], each fires once), stall_at (abs offset, once; until clear or
client close), hold_at (abs offset: the body pauses there until release/clear, then the same
response goes on; stats "held" counts the waiting ones), corrupt_at (abs offset or list; byte ^ 0xFF), fail_status + fail_count
(+ retry_after; + fail_gated: only requests held at the gate fail), etag, ignore_range, size_lie (N), content_range_lie (+4096),
ignore_if_match (answer as if no If-Match came: e.g. 206 with a new ETag),
basic_auth ("user:password": 401 to a request without that Authorization),
no_auth (401 to a request carrying any credential: Authorization or X-Amz-* headers).
"""

import http.client
import json
import os
import select
import ssl
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
UPSTREAM = os.path.join(HERE, "upstream.py")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class UpstreamError(RuntimeError):
    pass


def send_raw(conn, method, target, headers, body=b""):
    """Sends one request as given (headers: [(name, value)], Host among them) on conn,
    closes it -> (status, {lower-case header: value}, body)."""
    try:
        conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        for k, v in headers:
            conn.putheader(k, v)
        if body or method in ("PUT", "POST"):
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body if body else None)
        r = conn.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        conn.close()


def stop_process(proc, timeout, kill=None):
    """SIGTERM, up to timeout seconds, then kill(proc) (default: proc.kill()); closes its
    stdout -> its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            (kill or subprocess.Popen.kill)(proc)
            proc.wait()
    if proc.stdout:
        proc.stdout.close()
    return proc.returncode


class ServerProcess:
    """A test server subprocess owned by this object: a context manager whose exit
    (and garbage collection) calls stop()."""

    proc = None

    def stop(self, timeout=5.0):
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def __del__(self):
        try:
            self.stop()
        except Exception:
            pass


class Upstream(ServerProcess):
    def __init__(self, root, host="127.0.0.1", port=0, verbose=False, startup_timeout=10.0,
                 tls_cert=None, tls_key=None, delay_ms=0, total_rate=0):
        cmd = [PYTHON, UPSTREAM, "--root", str(root), "--host", host, "--port", str(port)]
        if total_rate:
            cmd += ["--total-rate", str(total_rate)]
        if verbose:
            cmd.append("--verbose")
        if delay_ms:
            cmd += ["--delay-ms", str(delay_ms)]
        if tls_cert:
            cmd += ["--tls-cert", str(tls_cert), "--tls-key", str(tls_key)]
        self._start(cmd, root, host, bool(tls_cert), startup_timeout)

    def _start(self, cmd, root, host, tls, startup_timeout):
        """Runs cmd (a server that prints "PORT N" first) and sets up this object's
        connection to it (root, host, tls, port, base, _ssl, _opener)."""
        self.root = str(root)
        self.host = host
        self.tls = tls
        if tls:
            # The control channel trusts the test's own certificate, whatever it is.
            self._ssl = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            self._ssl.check_hostname = False
            self._ssl.verify_mode = ssl.CERT_NONE
            self._opener = urllib.request.build_opener(
                urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=self._ssl))
        else:
            self._ssl = None
            self._opener = _opener
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        try:
            self.port = self._read_port(startup_timeout)
        except BaseException:
            self.stop()
            raise
        self.base = "%s://%s:%d" % ("https" if self.tls else "http", host if ":" not in host else "[%s]" % host, self.port)

    def _read_port(self, timeout):
        fd = self.proc.stdout.fileno()
        buf = b""
        deadline = time.monotonic() + timeout
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise UpstreamError("upstream did not print PORT within %.1fs" % timeout)
            r, _, _ = select.select([fd], [], [], min(left, 0.1))
            if r:
                chunk = os.read(fd, 256)
                if not chunk:
                    break
                buf += chunk
            elif self.proc.poll() is not None:
                break
        line = buf.split(b"\n", 1)[0].decode(errors="replace").strip()
        if not line.startswith("PORT "):
            raise UpstreamError("upstream failed to start (rc=%s, said %r)"
                                % (self.proc.poll(), line))
        if self.proc.poll() is not None:
            raise UpstreamError("upstream exited right after start (rc=%s)" % self.proc.returncode)
        return int(line.split()[1])

    # ------------------------------------------------------------------ urls
    def url(self, path=""):
        return self.base + "/" + urllib.parse.quote(str(path).lstrip("/"))

    # --------------------------------------------------------------- control
    def _ctl(self, method, name, body=None, query=None, timeout=10):
        u = self.base + "/_ctl/" + name
        if query:
            u += "?" + urllib.parse.urlencode(query)
        data = None
        headers = {}
        if method == "POST":
            data = json.dumps(body or {}).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(u, data=data, method=method, headers=headers)
        try:
            with self._opener.open(req, timeout=timeout) as r:
                return json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise UpstreamError("%s %s -> %d: %s" % (method, name, e.code,
                                                      e.read().decode(errors="replace")))

    def fault(self, path, **opts):
        """Merge fault options into path's config; returns the resulting config."""
        body = dict(opts)
        body["path"] = str(path)
        return self._ctl("POST", "fault", body)

    def release(self, path):
        return self._ctl("POST", "release", {"path": str(path)})

    def clear(self, path=None):
        return self._ctl("POST", "clear", {"path": str(path)} if path is not None else {})

    def reset(self):
        return self._ctl("POST", "reset", {})

    def stats(self, path=None):
        return self._ctl("GET", "stats", query={"path": str(path)} if path is not None else None)

    def faults(self):
        return self._ctl("GET", "faults")

    def wait_for(self, pred, timeout=5.0, path=None, interval=0.01):
        """Poll stats(path) until pred(stats) is true; return those stats.
        Raises TimeoutError (with the last stats) on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            s = self.stats(path)
            if pred(s):
                return s
            if time.monotonic() >= deadline:
                raise TimeoutError("upstream condition not met in %.1fs; last stats: %s"
                                   % (timeout, json.dumps(s)[:2000]))
            if self.proc.poll() is not None:
                raise UpstreamError("upstream died (rc=%s)" % self.proc.returncode)
            time.sleep(interval)

    # ------------------------------------------------------- direct requests
    def _connection(self, timeout):
        """A fresh (not yet connected) HTTP(S) connection to the server."""
        if self._ssl is not None:
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                               context=self._ssl)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, path, method="GET", headers=None, timeout=10):
        """One request on a fresh connection: returns (status, headers dict, body).
        Raises http.client.IncompleteRead etc. on injected drops."""
        c = self._connection(timeout)
        try:
            c.request(method, "/" + urllib.parse.quote(str(path).lstrip("/")),
                      headers=headers or {})
            r = c.getresponse()
            body = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, body
        finally:
            c.close()

    # -------------------------------------------------------------- lifetime
    def stop(self, timeout=5.0):
        p = self.proc
        if p is None:
            return None
        rc = stop_process(p, timeout)
        self.proc = None
        return rc

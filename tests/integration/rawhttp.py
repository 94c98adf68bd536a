"""A raw-socket HTTP/1.1 server for tests of upstream misbehaviour that the project's test
upstream (tests/upstream/upstream.py) cannot produce: garbled status lines, short 206s,
close-delimited bodies, trickles, per-response validators, unasked-for Content-Encoding.

    srv = RawServer({"/manifest.json": static(manifest_bytes), "/o.bin": my_handler})
    srv.url("o.bin")                       # http://127.0.0.1:PORT/o.bin
    srv.requests("/o.bin")                 # [Request] in arrival order
    srv.wait_for(lambda: len(srv.requests("/o.bin")) >= 2, "two GETs", timeout=10)
    srv.sent["/o.bin"]                     # body bytes handed to the socket for the path
    srv.stop()

A handler is handler(ex) -> bool (True: keep the connection for its next request). ex is
an Exchange: ex.req (method, path, target, headers by lower-case name, query(), range()), ex.n (1 for the
first request of the path, 2 for the next, ...), ex.send(status, headers, body),
ex.head(status, headers) and ex.body(data) (body bytes, counted in srv.sent) for a
response in parts, ex.send_raw(data) for anything else, ex.sleep(s) and ex.wait(event)
(both give up once the server stops: never hold up a teardown).
The server listens on 127.0.0.1, port 0; each connection is served by its own thread.
RawServer(routes, tls=ssl_context) speaks HTTPS instead (srv.url gives https://).
"""

import hashlib
import json
import random
import re
import socket
import threading
import time
import urllib.parse

REASONS = {200: "OK", 206: "Partial Content", 304: "Not Modified", 404: "Not Found",
           412: "Precondition Failed", 416: "Range Not Satisfiable", 503: "Service Unavailable"}


def pattern(n, seed="raw"):
    """n reproducible pseudo-random bytes: every 4 KiB page differs."""
    return random.Random(seed).randbytes(n)


def sha(data):
    return hashlib.sha256(data).hexdigest()


def manifest(entries):
    """A manifest's bytes for [{"path", "size", ...}]."""
    return json.dumps({"version": 1, "files": entries}).encode()


class Request:
    def __init__(self, method, target, headers):
        self.method = method
        self.path = target.split("?", 1)[0]
        self.target = target
        self.headers = headers  # lower-case name -> value (the last one of a name)

    def h(self, name, default=None):
        return self.headers.get(name.lower(), default)

    def query(self):
        """The query string's parameters, decoded: {name: value} (the last one of a name)."""
        return dict(urllib.parse.parse_qsl(self.target.partition("?")[2], keep_blank_values=True))

    def range(self):
        """(first, last or None) of a single "bytes=a-b" Range, or None."""
        r = self.h("range")
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", r.strip()) if r else None
        if not m:
            return None
        return int(m.group(1)), int(m.group(2)) if m.group(2) else None

    def __repr__(self):
        return "Request(%s %s %r)" % (self.method, self.path, self.headers)


class Exchange:
    """One request and the means to answer it."""

    def __init__(self, server, conn, req, n):
        self.server, self.conn, self.req, self.n = server, conn, req, n

    def send_raw(self, data):
        self.conn.sendall(data)

    def head(self, status, headers=(), reason=None):
        lines = ["HTTP/1.1 %d %s" % (status, reason or REASONS.get(status, "X"))]
        lines += ["%s: %s" % (k, v) for k, v in headers]
        self.conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    def body(self, data):
        """Body bytes, counted in server.sent before they are handed over."""
        with self.server.cond:
            self.server.sent[self.req.path] = self.server.sent.get(self.req.path, 0) + len(data)
        self.conn.sendall(data)

    def send(self, status, headers=(), body=b"", reason=None):
        """A response with these headers (add Content-Length yourself when you mean it)."""
        self.head(status, headers, reason)
        if body and self.req.method != "HEAD":
            self.body(body)

    def sleep(self, seconds):
        """Sleeps; False (at once) when the server is stopping."""
        return not self.server.stopping.wait(seconds)

    def wait(self, gate):
        """Waits until the threading.Event gate is set: True; False once the server stops."""
        while not gate.wait(0.05):
            if self.server.stopping.is_set():
                return False
        return True


def serve_object(ex, obj, headers=(), cap=None):
    """A correct answer for obj: 206 with a truthful Content-Range for a single Range (at
    most cap bytes of it when cap is given), 200 with the whole object otherwise; always a
    Content-Length. headers are added to every answer (ETag, Last-Modified, ...)."""
    rg = ex.req.range()
    hdr = list(headers) + [("Accept-Ranges", "bytes")]
    if rg is None:
        ex.send(200, hdr + [("Content-Length", str(len(obj)))], obj)
        return True
    first, last = rg
    if first >= len(obj):
        ex.send(416, hdr + [("Content-Range", "bytes */%d" % len(obj)), ("Content-Length", "0")])
        return True
    last = len(obj) - 1 if last is None else min(last, len(obj) - 1)
    if cap is not None:
        last = min(last, first + cap - 1)
    part = obj[first:last + 1]
    ex.send(206, hdr + [("Content-Range", "bytes %d-%d/%d" % (first, last, len(obj))),
                        ("Content-Length", str(len(part)))], part)
    return True


def head_to_end(ex, obj, headers=()):
    """Sends the head of a correct answer for obj from the Range's first byte (or byte 0) to
    its end, Content-Length included, and returns that first byte: the body is the caller's
    to send (or not)."""
    rg = ex.req.range()
    first = rg[0] if rg else 0
    hdr = list(headers) + [("Content-Length", str(len(obj) - first))]
    if rg:
        ex.head(206, hdr + [("Content-Range", "bytes %d-%d/%d" % (first, len(obj) - 1, len(obj)))])
    else:
        ex.head(200, hdr)
    return first


def static(data, ctype="application/json"):
    """A handler that answers every request with data (200, Content-Length)."""
    def handler(ex):
        ex.send(200, [("Content-Type", ctype), ("Content-Length", str(len(data)))], data)
        return True
    return handler


def _read_head(conn, buf):
    """-> (Request or None at EOF, the bytes after the head)."""
    while b"\r\n\r\n" not in buf:
        chunk = conn.recv(65536)
        if not chunk:
            return None, b""
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return Request(method, target, headers), rest


class RawServer:
    def __init__(self, routes, tls=None):
        """routes: {path: handler}; an unknown path gets 404. tls: a server-side
        ssl.SSLContext for HTTPS."""
        self.routes = dict(routes)
        self.tls = tls
        self.cond = threading.Condition()
        self.log = []  # every Request, in arrival order
        self.sent = {}  # path -> body bytes sent
        self.counts = {}  # path -> requests so far
        self.stopping = threading.Event()
        self.conns = set()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def url(self, path=""):
        return "%s://127.0.0.1:%d/%s" % ("https" if self.tls else "http", self.port,
                                         path.lstrip("/"))

    def requests(self, path=None):
        with self.cond:
            return [r for r in self.log if path is None or r.path == path]

    def wait_for(self, pred, what, timeout):
        """Waits (on the server's condition: woken by every request) until pred() holds."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not pred():
                left = deadline - time.monotonic()
                assert left > 0, "%s; requests: %r" % (what, self.log)
                self.cond.wait(min(left, 0.1))

    def _accept(self):
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.cond:
                self.conns.add(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        buf = b""
        try:
            if self.tls is not None:
                with self.cond:
                    self.conns.discard(conn)
                conn = self.tls.wrap_socket(conn, server_side=True)
                with self.cond:
                    self.conns.add(conn)
            while not self.stopping.is_set():
                req, buf = _read_head(conn, buf)
                if req is None:
                    break
                with self.cond:
                    self.log.append(req)
                    n = self.counts[req.path] = self.counts.get(req.path, 0) + 1
                    self.cond.notify_all()
                handler = self.routes.get(req.path)
                ex = Exchange(self, conn, req, n)
                if handler is None:
                    ex.send(404, [("Content-Length", "10")], b"not found\n")
                    continue
                if not handler(ex):
                    break
        except (OSError, ValueError):
            pass
        finally:
            with self.cond:
                self.conns.discard(conn)
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()

    def stop(self):
        self.stopping.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        with self.cond:
            conns = list(self.conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.thread.join(5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

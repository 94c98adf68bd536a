#!/usr/bin/python3
"""spoolfs test upstream: serves files under --root over HTTP/1.1 with
byte-precise fault injection and request/byte accounting.

Usage: upstream.py --root DIR [--host 127.0.0.1] [--port 0] [--verbose] [--delay-ms MS]
                   [--total-rate B/S] [--tls-cert CERT.pem --tls-key KEY.pem]
Prints "PORT <n>" on stdout once listening; exits 0 on SIGTERM/SIGINT.
With --tls-cert/--tls-key it speaks HTTPS only (control endpoints included); the TLS
handshake runs in the connection's own thread, so a client that rejects the certificate
never blocks the accept loop.

Object requests: GET/HEAD /<path>   (single Range, If-Match, If-Range)
Control (never files):
  POST /_ctl/fault    {"path": P, <option>: value, ...}  merge options (value null -> remove)
  POST /_ctl/release  {"path": P}     open the gate and any hold_at, wake gated/held requests
  POST /_ctl/clear    {"path": P} | {} clear faults of P | all (wakes gated/stalled)
  POST /_ctl/reset    {}              clear all counters (live gauges kept)
  GET  /_ctl/stats[?path=P]           counters (see stats_for / all_stats); without a path
                                      also "gated" (requests at a gate now, all paths) and
                                      "peak_gated" (the most at once since the last reset)
  GET  /_ctl/faults                   current fault configs
With --index, GET/HEAD of a directory answers an HTML page linking its entries (for peers
that crawl listings, e.g. rclone's http remote and httpdirfs); without it, 404 as before.
Fault options: gate (gate_skip: how many requests pass it first), rate (B/s per
response), total_rate (B/s shared by all responses for the path; --total-rate caps all
  responses of every path together, as one link does), drop_after, drop_at, stall_at,
  hold_at (abs offset: the body pauses there until release or clear, then goes on in the
  same response; counted in "held" while it waits), corrupt_at,
  fail_status, fail_count, retry_after (fail_gated: only requests that waited at the gate
  take the failures, so a request that comes after the release cannot), etag, ignore_range, size_lie,
  content_range_lie, ignore_if_match, basic_auth ("user:password": 401 without it),
  no_auth (401 to a request that carries any credential: Authorization, X-Amz-*).
  See tests/upstream/client.py for a summary.
"""

import argparse
import base64
import email.utils
import hashlib
import json
import os
import posixpath
import select
import signal
import socket
import ssl
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHUNK = 64 * 1024
CTL = "/_ctl/"

BOOL_OPTS = ("gate", "fail_gated", "ignore_range", "content_range_lie", "ignore_if_match", "no_auth")
INT_OPTS = ("drop_after", "stall_at", "hold_at", "fail_status", "fail_count", "size_lie", "gate_skip")
NUM_OPTS = ("rate", "total_rate")
INT_LIST_OPTS = ("drop_at", "corrupt_at")
OTHER_OPTS = ("etag", "retry_after", "basic_auth")
ALL_OPTS = BOOL_OPTS + INT_OPTS + NUM_OPTS + INT_LIST_OPTS + OTHER_OPTS


class State:
    """All shared state; one lock (also the condition for gate/stall wakeups)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.faults = {}  # path -> dict of options
        self.stats = {}  # path -> counters
        self.gens = {}  # path -> clear generation
        self.global_gen = 0
        self.stopping = False
        # Requests waiting at a gate, across all paths, and the most there ever were at
        # once since the last reset. A request that reached a gate has had no byte of its
        # answer, so a client's bound on requests at once shows here exactly, with no race
        # against the end of an answer.
        self.gated = 0
        self.peak_gated = 0

    # --- call with lock held ---
    def stat(self, path):
        s = self.stats.get(path)
        if s is None:
            s = {"gets": 0, "heads": 0, "bytes": 0, "gated": 0, "active": 0, "held": 0,
                 "stalled": 0, "drops": 0, "ranges": [], "statuses": []}
            self.stats[path] = s
        return s

    def gen(self, path):
        return (self.gens.get(path, 0), self.global_gen)

    def snapshot(self, path):
        s = self.stats.get(path)
        if s is None:
            s = {"gets": 0, "heads": 0, "bytes": 0, "gated": 0, "active": 0, "held": 0,
                 "stalled": 0, "drops": 0, "ranges": [], "statuses": []}
        out = dict(s)
        out["ranges"] = list(s["ranges"])
        out["statuses"] = list(s["statuses"])
        return out


STATE = State()
VERBOSE = False
ROOT = "."
DELAY = 0.0  # --delay-ms: every object request waits this long (seconds) before its answer
INDEX = False  # --index: GET of a directory answers an HTML listing (for crawling peers)
RATE_NEXT = {}  # path -> monotonic time the next total_rate slot starts; under STATE.lock
# --total-rate: B/s of object bodies for all paths together (0: none); its next slot is
# RATE_NEXT[None], so a path never shares a budget with the whole server.
TOTAL_RATE = 0.0


def log(msg):
    if VERBOSE:
        sys.stderr.write("upstream: %s\n" % msg)
        sys.stderr.flush()


def validate_opts(body):
    opts = {}
    for k, v in body.items():
        if k == "path":
            continue
        if k not in ALL_OPTS:
            raise ValueError("unknown fault option %r" % k)
        if v is None:
            opts[k] = None
            continue
        if k in BOOL_OPTS:
            if not isinstance(v, bool):
                raise ValueError("%s must be a bool" % k)
            opts[k] = v if v else None
        elif k in INT_OPTS:
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError("%s must be a non-negative int" % k)
            opts[k] = v
        elif k in NUM_OPTS:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise ValueError("%s must be a positive number" % k)
            opts[k] = v
        elif k in INT_LIST_OPTS:
            if isinstance(v, int) and not isinstance(v, bool):
                v = [v]
            if not isinstance(v, list) or not all(
                    isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
                raise ValueError("%s must be an offset or a list of offsets" % k)
            opts[k] = sorted(v)
        elif k == "etag":
            if not isinstance(v, str):
                raise ValueError("etag must be a string")
            opts[k] = v
        elif k == "retry_after":
            opts[k] = str(v)
        elif k == "basic_auth":
            if not isinstance(v, str) or ":" not in v:
                raise ValueError("basic_auth must be \"user:password\"")
            opts[k] = v
    return opts


def norm_path(p):
    if p is None:
        return None
    p = str(p).lstrip("/")
    return p


def parse_range(value, size):
    """Single byte range. Returns (start, end_exclusive), "416", or None (ignore)."""
    value = value.strip()
    if not value.lower().startswith("bytes="):
        return None
    spec = value[6:].strip()
    if "," in spec:
        return None  # multi-range: not supported, serve the full body
    if "-" not in spec:
        return None
    a, b = spec.split("-", 1)
    a, b = a.strip(), b.strip()
    try:
        if a == "":
            if b == "":
                return None
            n = int(b)
            if n < 0:
                return None
            if n == 0 or size == 0:
                return "416"
            return (max(0, size - n), size)
        start = int(a)
        if start < 0:
            return None
        if b == "":
            end = size - 1
        else:
            end = int(b)
            if end < start:
                return None
        if start >= size:
            return "416"
        return (start, min(end, size - 1) + 1)
    except ValueError:
        return None


def take_fail(cfg):
    """Consumes one injected fail_status from a path's fault config (the caller holds
    STATE.lock) -> (status, retry_after) or None. fail_count None: fail every time."""
    if "fail_status" not in cfg:
        return None
    cnt = cfg.get("fail_count")
    fail = None
    if cnt is None or cnt > 0:
        fail = (cfg["fail_status"], cfg.get("retry_after"))
    if cnt is not None:
        cnt -= 1
        if cnt <= 0:
            for k in ("fail_status", "fail_count", "retry_after"):
                cfg.pop(k, None)
        else:
            cfg["fail_count"] = cnt
    return fail


def if_range_holds(header, etag, lastmod):
    """Whether a Range may be honoured under If-Range (header None: there was none): an
    entity tag compares strongly (a weak one never matches), a date exactly."""
    if header is None:
        return True
    header = header.strip()
    if header.startswith('"') or header.startswith("W/"):
        return header == etag
    return header == lastmod


def etag_list_match(header, etag):
    header = header.strip()
    if header == "*":
        return True
    for tag in header.split(","):
        tag = tag.strip()
        if tag.startswith("W/"):
            continue  # strong comparison
        if tag == etag:
            return True
    return False


def pace(key, n, rate):
    """Waits for n bytes' slot of a budget of rate B/s that every response with this key
    (a path, or None for the whole server) takes its slots from, one after another: a
    token bucket without a burst. Sleeps without STATE.lock."""
    with STATE.lock:
        now = time.monotonic()
        slot = max(now, RATE_NEXT.get(key, 0.0)) + n / rate
        RATE_NEXT[key] = slot
    if slot > now:
        time.sleep(slot - now)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "spoolfs-test-upstream/1"
    sys_version = ""

    def setup(self):
        if isinstance(self.request, ssl.SSLSocket):
            # Raises on a failed handshake (the client rejected our certificate): the
            # server's handle_error drops OSErrors quietly.
            self.request.settimeout(10)
            self.request.do_handshake()
            self.request.settimeout(None)
        super().setup()
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass

    def log_message(self, fmt, *args):
        if VERBOSE:
            super().log_message(fmt, *args)

    # ---------------------------------------------------------------- helpers
    def _split(self):
        u = urllib.parse.urlsplit(self.path)
        return urllib.parse.unquote(u.path), u.query

    def _simple(self, code, body=b"", ctype="text/plain", extra=(), head=False):
        if isinstance(body, str):
            body = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if body and not head:
            self.connection.sendall(body)

    def _json(self, code, obj):
        self._simple(code, json.dumps(obj) + "\n", "application/json")

    def _peer_closed(self):
        """Non-blocking check whether the client has closed (or reset) the connection."""
        try:
            r, _, _ = select.select([self.connection], [], [], 0)
            if not r:
                return False
            # On TLS, peek at the raw TCP stream (SSLSocket.recv refuses flags): EOF there
            # is the client's close as well.
            data = socket.socket.recv(self.connection, 1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            return data == b""
        except (BlockingIOError, ValueError):
            return False
        except OSError:
            return True

    def _abort(self):
        """Close the connection now: shutdown + close, no more bytes."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.connection.close()
        except OSError:
            pass

    # ---------------------------------------------------------------- control
    def _ctl_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n > 0 else b""
        if not raw.strip():
            return {}
        body = json.loads(raw)
        if not isinstance(body, dict):
            raise ValueError("body must be a JSON object")
        return body

    def _ctl(self, method, path, query):
        name = path[len(CTL):].strip("/")
        st = STATE
        try:
            body = self._ctl_body() if method == "POST" else {}
        except (ValueError, json.JSONDecodeError) as e:
            return self._json(400, {"error": str(e)})
        if method == "GET" and name == "stats":
            q = urllib.parse.parse_qs(query)
            with st.lock:
                if "path" in q:
                    out = st.snapshot(norm_path(q["path"][0]))
                else:
                    paths = {p: st.snapshot(p) for p in st.stats}
                    out = {"paths": paths,
                           "total_gets": sum(s["gets"] for s in paths.values()),
                           "total_heads": sum(s["heads"] for s in paths.values()),
                           "total_bytes": sum(s["bytes"] for s in paths.values()),
                           "gated": st.gated, "peak_gated": st.peak_gated}
            return self._json(200, out)
        if method == "GET" and name == "faults":
            with st.lock:
                out = {p: dict(f) for p, f in st.faults.items()}
            return self._json(200, out)
        if method != "POST":
            return self._json(404, {"error": "unknown control endpoint"})
        p = norm_path(body.get("path"))
        if name == "fault":
            if not p:
                return self._json(400, {"error": "path required"})
            try:
                opts = validate_opts(body)
            except ValueError as e:
                return self._json(400, {"error": str(e)})
            with st.cond:
                cfg = st.faults.setdefault(p, {})
                for k, v in opts.items():
                    if v is None:
                        cfg.pop(k, None)
                    else:
                        cfg[k] = v
                out = dict(cfg)
                st.cond.notify_all()  # e.g. gate: false releases
            log("fault %s %r" % (p, out))
            return self._json(200, out)
        if name == "release":
            if not p:
                return self._json(400, {"error": "path required"})
            with st.cond:
                cfg = st.faults.get(p)
                if cfg is not None:
                    cfg.pop("gate", None)
                    cfg.pop("hold_at", None)
                st.cond.notify_all()
            log("release %s" % p)
            return self._json(200, {})
        if name == "clear":
            with st.cond:
                if p:
                    st.faults.pop(p, None)
                    st.gens[p] = st.gens.get(p, 0) + 1
                else:
                    st.faults.clear()
                    st.global_gen += 1
                st.cond.notify_all()
            log("clear %s" % (p or "*"))
            return self._json(200, {})
        if name == "reset":
            with st.lock:
                for q, s in list(st.stats.items()):
                    if s["gated"] or s["active"] or s["stalled"]:
                        s.update(gets=0, heads=0, bytes=0, drops=0, ranges=[], statuses=[])
                    else:
                        del st.stats[q]
                st.peak_gated = st.gated
            return self._json(200, {})
        return self._json(404, {"error": "unknown control endpoint"})

    # ---------------------------------------------------------------- objects
    def _status(self, path, code):
        with STATE.lock:
            STATE.stat(path)["statuses"].append(code)

    def _gate(self, path):
        """Wait while the path is gated. Returns False if the client went away."""
        st = STATE
        self._held = False  # per request: a keep-alive connection's handler serves many
        with st.cond:
            cfg = st.faults.get(path, {})
            if not cfg.get("gate"):
                return True
            if cfg.get("gate_skip"):  # the first gate_skip requests pass the gate
                cfg["gate_skip"] -= 1
                return True
            self._held = True
            s = st.stat(path)
            s["gated"] += 1
            st.gated += 1
            st.peak_gated = max(st.peak_gated, st.gated)
            try:
                while st.faults.get(path, {}).get("gate") and not st.stopping:
                    st.cond.wait(0.05)
                    if self._peer_closed():
                        return False
                return not st.stopping
            finally:
                s["gated"] -= 1
                st.gated -= 1

    def _count_request(self, rel, head, rng):
        """Counts a GET (with its Range header, None for none) or HEAD of rel."""
        with STATE.lock:
            s = STATE.stat(rel)
            if head:
                s["heads"] += 1
            else:
                s["gets"] += 1
                s["ranges"].append(rng)

    def _authorized(self, rel):
        """False when rel requires basic_auth and the request's Authorization is not it."""
        with STATE.lock:
            want = STATE.faults.get(rel, {}).get("basic_auth")
            no_auth = STATE.faults.get(rel, {}).get("no_auth")
        if no_auth and any(k.lower() == "authorization" or k.lower().startswith("x-amz-")
                           for k in self.headers.keys()):
            return False
        if want is None:
            return True
        expect = "Basic " + base64.b64encode(want.encode()).decode()
        return self.headers.get("Authorization") == expect

    def _admit(self, rel):
        """Waits at rel's gate; then counts the response active (the caller decrements
        "active" when done) and returns True, or aborts the connection and returns False."""
        if not self._gate(rel):
            self._abort()
            return False
        with STATE.lock:
            STATE.stat(rel)["active"] += 1
        return True

    def _object(self, head):
        path, _ = self._split()
        if path.startswith(CTL) or path.rstrip("/") == CTL.rstrip("/"):
            if head:
                return self._simple(405, head=True)
            return self._ctl("GET", path, self._split()[1])
        rel = norm_path(path)
        rng = self.headers.get("Range")
        st = STATE
        self._count_request(rel, head, rng)
        if not self._authorized(rel):
            self._status(rel, 401)
            return self._simple(401, "authorization required\n", head=head,
                                extra=[("WWW-Authenticate", 'Basic realm="upstream"')])
        if DELAY:
            time.sleep(DELAY)
        if not self._admit(rel):
            return
        try:
            self._respond(rel, head, rng)
        except (ConnectionError, TimeoutError, OSError):
            self.close_connection = True
        finally:
            with st.lock:
                st.stat(rel)["active"] -= 1

    def _resolve(self, rel):
        if "\x00" in rel:
            return None
        parts = rel.split("/")
        if any(x == ".." for x in parts):
            return None
        root = os.path.realpath(ROOT)
        full = os.path.realpath(os.path.join(root, posixpath.normpath(rel) if rel else ""))
        if full != root and not full.startswith(root + os.sep):
            return None
        if not os.path.isfile(full):
            return None
        return full

    def _index(self, rel, head):
        """--index: answer a directory with an HTML page of links (subdirectories end in
        "/"), like a web server's autoindex. Returns False when rel is no directory."""
        if "\x00" in rel or ".." in rel.split("/"):
            return False
        root = os.path.realpath(ROOT)
        full = os.path.realpath(os.path.join(root, posixpath.normpath(rel) if rel else ""))
        if (full != root and not full.startswith(root + os.sep)) or not os.path.isdir(full):
            return False
        self._status(rel, 200)
        with os.scandir(full) as it:
            names = sorted(e.name + "/" if e.is_dir() else e.name for e in it)
        body = "<html><body><h1>Index of /%s</h1>\n%s</body></html>\n" % (
            rel, "".join('<a href="%s">%s</a><br>\n' % (urllib.parse.quote(n), n)
                         for n in names))
        self._simple(200, body, "text/html; charset=utf-8", head=head)
        return True

    def _respond(self, rel, head, rng):
        st = STATE
        with st.lock:
            cfg = st.faults.get(rel, {})
            fail = None
            if not cfg.get("fail_gated") or getattr(self, "_held", False):
                fail = take_fail(cfg)
            cfg = dict(cfg)
        if fail is not None:
            code, ra = fail
            self._status(rel, code)
            extra = [("Retry-After", ra)] if ra is not None else []
            return self._simple(code, "injected failure %d\n" % code, extra=extra, head=head)

        full = self._resolve(rel)
        if full is None and INDEX and self._index(rel, head):
            return
        if full is None:
            self._status(rel, 404)
            return self._simple(404, "not found\n", head=head)
        stt = os.stat(full)
        real_size = stt.st_size
        etag = cfg.get("etag")
        if etag is None:
            etag = '"%s"' % hashlib.sha1(
                ("%s%d%d" % (rel, real_size, stt.st_mtime_ns)).encode()).hexdigest()
        lastmod = email.utils.formatdate(stt.st_mtime, usegmt=True)
        size = cfg.get("size_lie", real_size)

        im = self._if_match(cfg)
        if im is not None and not etag_list_match(im, etag):
            self._status(rel, 412)
            return self._simple(412, "precondition failed\n",
                                extra=[("ETag", etag)], head=head)

        start, end, partial = 0, size, False
        if rng is not None and not cfg.get("ignore_range") and \
                if_range_holds(self.headers.get("If-Range"), etag, lastmod):
            r = parse_range(rng, size)
            if r == "416":
                self._status(rel, 416)
                return self._simple(416, "", extra=[
                    ("Content-Range", "bytes */%d" % size),
                    ("ETag", etag), ("Accept-Ranges", "bytes")], head=head)
            if r is not None:
                start, end = r
                partial = True

        self._object_headers(rel, 206 if partial else 200, "application/octet-stream",
                             end - start, etag, lastmod)
        if partial:
            self._content_range(cfg, start, end, size)
        self.end_headers()
        if head or end == start:
            return
        with open(full, "rb") as f:
            self._send_body(rel, f.fileno(), real_size, start, end)

    def _object_headers(self, rel, code, ctype, length, etag, lastmod):
        """Counts the status and starts an object response: its status line and the
        headers every one has (the caller adds more and ends them)."""
        self._status(rel, code)
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", etag)
        self.send_header("Last-Modified", lastmod)

    def _if_match(self, cfg):
        """The request's If-Match, or None under ignore_if_match (a server that does not
        check preconditions)."""
        if cfg.get("ignore_if_match"):
            return None
        return self.headers.get("If-Match")

    def _content_range(self, cfg, start, end, size):
        """Sends Content-Range for [start, end) of size (shifted under content_range_lie)."""
        off = 4096 if cfg.get("content_range_lie") else 0
        self.send_header("Content-Range", "bytes %d-%d/%d" % (start + off, end - 1 + off, size))

    def _send_body(self, rel, fd, real_size, start, end):
        st = STATE
        sock = self.connection
        pos = start
        cur_rate = None
        t_base = 0.0
        b_base = 0
        while pos < end:
            event = None
            with st.lock:
                cfg = st.faults.get(rel, {})
                rate = cfg.get("rate")
                n = min(CHUNK, end - pos)
                if rate:
                    n = min(n, max(4096, int(rate / 100)))
                trate = cfg.get("total_rate")
                for r in (trate, TOTAL_RATE):
                    if r:
                        n = min(n, max(4096, int(r / 100)))
                lim = pos + n
                da = cfg.get("drop_after")
                if da is not None and pos <= start + da < lim:
                    lim, event = start + da, "drop"
                dat = cfg.get("drop_at")
                hit_drop = None
                if dat:
                    for o in dat:
                        if pos <= o < lim:
                            lim, event, hit_drop = o, "drop_at", o
                            break
                sa = cfg.get("stall_at")
                if sa is not None and pos <= sa < lim:
                    lim, event, hit_drop = sa, "stall", None
                ha = cfg.get("hold_at")
                if ha is not None and pos <= ha < lim:
                    lim, event, hit_drop = ha, "hold", None
                # claim once-only events under the lock
                if event == "drop_at":
                    dat.remove(hit_drop)
                elif event == "stall":
                    del cfg["stall_at"]
                corrupt = [o for o in cfg.get("corrupt_at", ()) if pos <= o < lim]
            n = lim - pos
            if n > 0:
                if rate:
                    now = time.monotonic()
                    if rate != cur_rate:
                        cur_rate, t_base, b_base = rate, now, pos
                    target = t_base + (pos + n - b_base) / rate
                    if target > now:
                        time.sleep(target - now)
                else:
                    cur_rate = None
                if trate:  # all responses for this path share one budget of B/s
                    pace(rel, n, trate)
                if TOTAL_RATE:  # and every response of the server shares another
                    pace(None, n, TOTAL_RATE)
                data = b""
                if pos < real_size:
                    data = os.pread(fd, min(n, real_size - pos), pos)
                if len(data) < n:
                    data += bytes(n - len(data))
                if corrupt:
                    b = bytearray(data)
                    for o in corrupt:
                        b[o - pos] ^= 0xFF
                    data = bytes(b)
                # Counted before it is handed over: a client that has the bytes must find
                # them counted (after sendall, this thread may run only later). A client
                # that hangs up mid-piece makes this over-count by at most one piece.
                with st.lock:
                    st.stat(rel)["bytes"] += n
                try:
                    sock.sendall(data)
                except OSError:
                    self.close_connection = True
                    return
                pos += n
            if event in ("drop", "drop_at"):
                with st.lock:
                    st.stat(rel)["drops"] += 1
                log("drop %s at %d" % (rel, pos))
                self._abort()
                return
            if event == "stall":
                log("stall %s at %d" % (rel, pos))
                self._stall(rel)
                return
            if event == "hold":
                log("hold %s at %d" % (rel, pos))
                if not self._hold(rel, pos):
                    self.close_connection = True
                    return

    def _hold(self, rel, at):
        """Waits while rel's hold_at is still `at` (release or clear ends it). False when
        the client went away or the server stops."""
        st = STATE
        with st.cond:
            s = st.stat(rel)
            s["held"] += 1
            try:
                while st.faults.get(rel, {}).get("hold_at") == at and not st.stopping:
                    st.cond.wait(0.05)
                    if self._peer_closed():
                        return False
                return not st.stopping
            finally:
                s["held"] -= 1

    def _stall(self, rel):
        st = STATE
        with st.cond:
            g0 = st.gen(rel)
            s = st.stat(rel)
            s["stalled"] += 1
            try:
                while st.gen(rel) == g0 and not st.stopping:
                    st.cond.wait(0.05)
                    if self._peer_closed():
                        break
            finally:
                s["stalled"] -= 1
        self._abort()

    # ---------------------------------------------------------------- verbs
    def do_GET(self):
        self._object(head=False)

    def do_HEAD(self):
        self._object(head=True)

    def do_POST(self):
        path, query = self._split()
        if path.startswith(CTL):
            return self._ctl("POST", path, query)
        self._simple(405, "method not allowed\n", extra=[("Allow", "GET, HEAD")])


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256
    tls = None  # an ssl.SSLContext when serving HTTPS

    def get_request(self):
        sock, addr = self.socket.accept()
        if self.tls is not None:
            # The handshake happens in Handler.setup, in the connection's thread.
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError, OSError)):
            return
        super().handle_error(request, client_address)


def main(argv=None):
    global VERBOSE, ROOT, INDEX, DELAY, TOTAL_RATE
    ap = argparse.ArgumentParser(description="spoolfs test upstream")
    ap.add_argument("--root", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--index", action="store_true",
                    help="answer GET of a directory with an HTML listing of links")
    ap.add_argument("--delay-ms", type=float, default=0.0,
                    help="every object request waits this long before its answer (a round"
                         " trip to a distant store)")
    ap.add_argument("--total-rate", type=float, default=0.0,
                    help="B/s of object bodies for all responses together (a link's"
                         " bandwidth; default: no cap)")
    ap.add_argument("--tls-cert", help="serve HTTPS with this certificate (PEM)")
    ap.add_argument("--tls-key", help="the certificate's private key (PEM)")
    a = ap.parse_args(argv)
    if bool(a.tls_cert) != bool(a.tls_key):
        sys.stderr.write("upstream: --tls-cert and --tls-key go together\n")
        return 2
    VERBOSE = a.verbose
    INDEX = a.index
    DELAY = max(0.0, a.delay_ms) / 1000.0
    if a.total_rate < 0:
        sys.stderr.write("upstream: --total-rate must be a positive number of B/s\n")
        return 2
    TOTAL_RATE = a.total_rate
    ROOT = os.path.realpath(a.root)
    if not os.path.isdir(ROOT):
        sys.stderr.write("upstream: --root %s is not a directory\n" % a.root)
        return 2
    serve(a.host, a.port, Handler, a.tls_cert, a.tls_key)


def serve(host, port, handler, tls_cert=None, tls_key=None, cleanup=None):
    """Serves handler on host:port (HTTPS with tls_cert/tls_key), prints "PORT N" once
    listening, and runs until SIGTERM/SIGINT; then releases gated/stalled responses,
    closes the server, calls cleanup() and exits the process (never returns).
    s3_upstream.py serves with this too."""
    if ":" in host:
        Server.address_family = socket.AF_INET6
    httpd = Server((host, port), handler)
    if tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(tls_cert, tls_key)
        httpd.tls = ctx  # Server wraps accepted sockets; the handshake is in Handler.setup
    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # shutdown() waits for the loop's next poll: every test stops a server or more, and at
    # 0.05 s a stop took about 70 ms, at 0.01 s about 16 ms.
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01},
                         daemon=True)
    t.start()
    sys.stdout.write("PORT %d\n" % httpd.server_address[1])
    sys.stdout.flush()
    while not stop.wait(0.05):
        pass
    with STATE.cond:
        STATE.stopping = True
        STATE.cond.notify_all()
    httpd.shutdown()
    httpd.server_close()
    if cleanup is not None:
        cleanup()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())

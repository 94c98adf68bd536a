"""Test helper: run the pinned s3rver (tests/s3/start-s3rver.sh) and talk to it.

    from s3rver import S3rver, available
    ok, why = available()                 # (False, reason) without node/npm
    with S3rver(buckets=["bkt"]) as s3:   # temp dir, free port on 127.0.0.1
        s3.endpoint                       # http://127.0.0.1:PORT
        s3.put("bkt", "dir/a.bin", b"...")            # signed PUT -> ETag
        s3.seed("bkt", {"d/k%04d" % i: b"x" for i in range(2500)})  # fast, on disk
        st, hdrs, body = s3.get("bkt", "dir/a.bin", headers={"Range": "bytes=0-9"})
        keys, prefixes, pages = s3.list_all("bkt", prefix="dir/", delimiter="/")

s3rver accepts the credentials S3RVER / S3RVER (ACCESS_KEY / SECRET below) and
anonymous requests. It does NOT verify SigV4 signatures (only the access key id
and the presence of x-amz-content-sha256); use tests/upstream/s3_upstream.py
--verify-sigv4 for that. Known s3rver 3.7.1 differences from AWS: encoding-type=url
is ignored (keys come back raw, no <EncodingType>); If-Match is ignored; the
listing namespace is http://doc.s3.amazonaws.com/2006-03-01/; KeyCount counts
only Contents; common prefixes may repeat across pages; suffix ranges
(bytes=-N) are wrong; continuation tokens are tied to us-east-1.
"""

import http.client
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
START = os.path.join(HERE, "start-s3rver.sh")
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "upstream"))
import s3_upstream  # noqa: E402  (SigV4 signer)
from s3_client import list_pages, list_query, parse_error, parse_list  # noqa: E402,F401
from client import ServerProcess, send_raw, stop_process  # noqa: E402

ACCESS_KEY = "S3RVER"
SECRET = "S3RVER"
REGION = "us-east-1"


def available():
    """(True, "") when s3rver can run here, else (False, reason)."""
    if shutil.which("node") is None:
        return False, "node is not installed (Debian: nodejs)"
    pkg = os.path.join(HERE, "node_modules", "s3rver", "package.json")
    if not os.path.exists(pkg) and shutil.which("npm") is None:
        return False, "s3rver is not installed and npm is missing (Debian: npm)"
    return True, ""


def install(timeout=300):
    """Install the pinned s3rver if needed (npm ci). Returns seconds taken."""
    t0 = time.monotonic()
    r = subprocess.run([START, "--install-only"], stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError("s3rver install failed (rc=%d): %s"
                           % (r.returncode, r.stderr.decode(errors="replace")[-2000:]))
    return time.monotonic() - t0


class S3rver(ServerProcess):
    def __init__(self, buckets=(), directory=None, port=0, startup_timeout=300.0):
        """startup_timeout covers a first-time npm install. Without directory a
        temporary one is made (and removed by stop())."""
        self._own_dir = directory is None
        self.directory = tempfile.mkdtemp(prefix="s3rver-") if directory is None \
            else str(directory)
        cmd = [START, "--port", str(port), "--dir", self.directory]
        for b in buckets:
            cmd += ["--bucket", b]
        self.host = "127.0.0.1"
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     start_new_session=True)
        try:
            self.port = self._read_port(startup_timeout)
        except BaseException:
            self.stop()
            raise
        self.endpoint = "http://%s:%d" % (self.host, self.port)

    def _read_port(self, timeout):
        fd = self.proc.stdout.fileno()
        buf = b""
        deadline = time.monotonic() + timeout
        while b"PORT " not in buf or not buf.split(b"PORT ", 1)[1].count(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError("s3rver did not print PORT within %.0fs" % timeout)
            r, _, _ = select.select([fd], [], [], min(left, 0.1))
            if r:
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                buf += chunk
            elif self.proc.poll() is not None:
                break
        if b"PORT " not in buf:
            raise RuntimeError("s3rver failed to start (rc=%s)" % self.proc.poll())
        return int(buf.split(b"PORT ", 1)[1].split(b"\n", 1)[0])

    # ---------------------------------------------------------------- requests
    def request(self, method, bucket="", key="", query="", headers=None, body=b"",
                sign=True, creds=(ACCESS_KEY, SECRET), region=REGION, timeout=30):
        """-> (status, {lower-case header: value}, body). query: raw query string."""
        raw_path = "/" + s3_upstream.uri_encode(bucket, False)
        if key:
            raw_path += "/" + s3_upstream.uri_encode(key, False)
        hs = [("Host", "%s:%d" % (self.host, self.port))] + list((headers or {}).items())
        if sign:
            hs, _ = s3_upstream.sign(method, raw_path, query, hs, creds[0], creds[1], region,
                                     payload_hash=s3_upstream.hashlib.sha256(body).hexdigest())
        c = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        return send_raw(c, method, raw_path + ("?" + query if query else ""), hs, body)

    def create_bucket(self, bucket, **kw):
        st, _, body = self.request("PUT", bucket, **kw)
        if st != 200:
            raise RuntimeError("create bucket %s -> %d %s" % (bucket, st, body[:300]))

    def put(self, bucket, key, data, headers=None, **kw):
        """PUT an object (x-amz-meta-* etc. in headers); returns its ETag."""
        st, h, body = self.request("PUT", bucket, key, headers=headers, body=bytes(data), **kw)
        if st != 200:
            raise RuntimeError("put %s/%s -> %d %s" % (bucket, key, st, body[:300]))
        return h.get("etag")

    def seed(self, bucket, objects):
        """Write objects {key: bytes} straight into s3rver's store (its 3.7.1 on-disk
        layout: <dir>/<bucket>/<key>._S3rver_object; the ETag md5 is computed by
        s3rver on first use). Much faster than put() for thousands of objects; for
        plain keys only (no '.', '..' or empty segments) and an existing bucket."""
        base = os.path.join(self.directory, bucket)
        if not os.path.isdir(base):
            raise RuntimeError("seed: bucket %s does not exist" % bucket)
        for key, data in objects.items():
            parts = key.split("/")
            if any(p in ("", ".", "..") for p in parts[:-1]) or parts[-1] in (".", ".."):
                raise ValueError("seed: key %r is not a plain path; use put()" % key)
            d = os.path.join(base, *parts[:-1])
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, parts[-1] + "._S3rver_object"), "wb") as f:
                f.write(data)

    def delete(self, bucket, key, **kw):
        return self.request("DELETE", bucket, key, **kw)[0]

    def get(self, bucket, key, headers=None, **kw):
        return self.request("GET", bucket, key, headers=headers, **kw)

    def head(self, bucket, key, headers=None, **kw):
        return self.request("HEAD", bucket, key, headers=headers, **kw)

    def list(self, bucket, prefix=None, delimiter=None, token=None, max_keys=None, **kw):
        """One ListObjectsV2 page -> s3_client.parse_list() dict (namespace-agnostic)."""
        query = "&".join(s3_upstream.uri_encode(k) + "=" + s3_upstream.uri_encode(str(v))
                         for k, v in list_query(prefix, delimiter, token, max_keys))
        st, _, body = self.request("GET", bucket, query=query, **kw)
        if st != 200:
            raise RuntimeError("list %s -> %d %s" % (bucket, st, body[:300]))
        # s3rver's namespace differs from AWS's; parse with AWS's
        body = body.replace(b"http://doc.s3.amazonaws.com/2006-03-01/",
                            s3_upstream.XMLNS.encode())
        return parse_list(body)

    def list_all(self, bucket, prefix=None, delimiter=None, max_keys=None, **kw):
        """Follow continuation tokens -> (keys, prefixes (deduplicated), pages)."""
        return list_pages(lambda token: self.list(bucket, prefix=prefix, delimiter=delimiter,
                                                  token=token, max_keys=max_keys, **kw),
                          dedup_prefixes=True)

    # ---------------------------------------------------------------- lifetime
    def stop(self, timeout=10.0):
        p = self.proc
        if p is None:
            return None
        rc = stop_process(p, timeout, kill=lambda q: os.killpg(q.pid, signal.SIGKILL))
        self.proc = None
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)
        return rc

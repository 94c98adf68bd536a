#!/usr/bin/python3
"""Side-by-side benchmark of spoolfs and its peers (issue 5). Run it through peers.sh,
which builds spoolfs, installs peers on request and unmounts everything on any exit.

  peers.py run WORK SPOOLFS_BIN      the whole benchmark; prints one table
  peers.py op NAME ARGS...           one measured operation, run in a child process so
                                     that a hung mount costs a timeout, not the run

Environment: SCALE (full | small), RUNS (default 3 full, 1 small), PEERS (comma list,
default "spoolfs,rclone,httpdirfs,s3fs"), OP_TIMEOUT (s per operation), SEED (default 1),
W5_FILES / W5_DIRS (override the metadata tree).

Every system reads the same generated store from the same test upstream
(tests/upstream/upstream.py --index, on 127.0.0.1); s3fs reads it through
tests/upstream/s3_upstream.py (the same fault/accounting code, S3 API) over the same
store directory. Each measurement uses a fresh mount and a fresh cache directory, so a
"cold" read is cold for the system (the upstream's own page cache is warm for everyone).
"""

import hashlib
import http.client
import json
import queue
import os
import random
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "upstream"))
sys.path.insert(0, HERE)
import benchlib  # noqa: E402  (read_status, the /proc sampler)
import mkstore  # noqa: E402

PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
MiB = 1 << 20
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def log(msg):
    sys.stderr.write("[peers] %s\n" % msg)
    sys.stderr.flush()


# --------------------------------------------------------------------------- config
def config():
    scale = os.environ.get("SCALE", "full")
    if scale not in ("full", "small"):
        raise SystemExit("SCALE must be full or small")
    small = scale == "small"
    c = {
        "scale": scale,
        "runs": int(os.environ.get("RUNS", "1" if small else "3")),
        "seed": int(os.environ.get("SEED", "1")),
        # W1: one object, the whole path throttled (total_rate: all connections share it)
        "w1_size": mkstore.parse_size("8M" if small else "256M"),
        "w1_rate": (16 if small else 100) * MiB,
        "w1_readers": [8, 64],
        # W2/W3/W4: one object, unthrottled; W2cap: its own object, each response capped
        "w2_size": mkstore.parse_size("32M" if small else "1G"),
        "cap_size": mkstore.parse_size("16M" if small else "256M"),
        "cap_rate": (16 if small else 50) * MiB,
        "w4_reads": 200,
        "w5_files": int(os.environ.get("W5_FILES", "2000" if small else "100000")),
        "w5_dirs": int(os.environ.get("W5_DIRS", "20" if small else "1000")),
        # W7: a cold tree of small files behind a store 10 ms away (issue 22)
        "w7_files": int(os.environ.get("W7_FILES", "300" if small else "1000")),
        "w7_dirs": 10,
        "w7_delay_ms": 10,
        "w7_parallel": 32,
        "timeout": float(os.environ.get("OP_TIMEOUT", "60" if small else "300")),
        "peers": os.environ.get("PEERS", "spoolfs,rclone,httpdirfs,s3fs").split(","),
        "workloads": os.environ.get("WORKLOADS", "W1,W2,W2cap,W4,W5,W7").split(","),
    }
    for k in ("W1_SIZE", "W2_SIZE", "CAP_SIZE"):
        if os.environ.get(k):
            c[k.lower()] = mkstore.parse_size(os.environ[k])
    return c


# --------------------------------------------------------------------------- store
def make_store(work, c):
    store = os.path.join(work, "store")
    big = os.path.join(store, "big")
    log("generating store (seed %d): w1 %d MiB, w2 %d MiB, cap %d MiB, tree %d files in %d dirs"
        % (c["seed"], c["w1_size"] >> 20, c["w2_size"] >> 20, c["cap_size"] >> 20,
           c["w5_files"], c["w5_dirs"]))
    m = mkstore.make_store(big, ["w1.bin:%d" % c["w1_size"], "w2.bin:%d" % c["w2_size"],
                                 "cap.bin:%d" % c["cap_size"]], seed=c["seed"])
    os.unlink(os.path.join(big, "manifest.json"))  # crawling peers must not list it
    for f in m["files"]:
        f["url"] = "big/" + f["path"]
    with open(os.path.join(store, "big.json"), "w") as f:
        json.dump(m, f)
    # The same objects without sha256: spoolfs then verifies nothing, like its peers, which
    # isolates what verification costs in W2.
    with open(os.path.join(store, "big-nohash.json"), "w") as f:
        json.dump({**m, "files": [{k: v for k, v in e.items() if k != "sha256"}
                                  for e in m["files"]]}, f)
    # W5: tiny files, names and sizes from the seed; no sha256 (metadata only)
    rnd = random.Random("%d:tree" % c["seed"])
    tree = os.path.join(store, "tree")
    files = []
    per = -(-c["w5_files"] // c["w5_dirs"])
    for i in range(c["w5_files"]):
        d = "d%04d" % (i // per)
        rel = "%s/f%06d.txt" % (d, i)
        size = rnd.randrange(1, 200)
        os.makedirs(os.path.join(tree, d), exist_ok=True)
        with open(os.path.join(tree, rel), "wb") as f:
            f.write((b"%s\n" % rel.encode()).ljust(size, b"x")[:size])
        files.append({"path": rel, "size": size, "url": "tree/" + rel})
    with open(os.path.join(store, "tree.json"), "w") as f:
        json.dump({"version": 1, "files": files}, f)
    # W7: 1-3 KiB files in 10 directories, with sha256 (a v1 manifest as a build's inputs)
    rnd = random.Random("%d:cold" % c["seed"])
    cold = []
    per = -(-c["w7_files"] // c["w7_dirs"])
    for i in range(c["w7_files"]):
        rel = "d%02d/f%05d.c" % (i // per, i)
        data = rnd.randbytes(rnd.randrange(1024, 3073))
        os.makedirs(os.path.join(store, "cold", os.path.dirname(rel)), exist_ok=True)
        with open(os.path.join(store, "cold", rel), "wb") as f:
            f.write(data)
        cold.append({"path": rel, "size": len(data), "url": "cold/" + rel,
                     "sha256": hashlib.sha256(data).hexdigest()})
    with open(os.path.join(store, "cold.json"), "w") as f:
        json.dump({"version": 1, "files": cold}, f)
    with open(os.path.join(work, "cold.list"), "w") as f:
        json.dump(sorted([e["path"], e["size"]] for e in cold), f)
    return store


# --------------------------------------------------------------------------- upstreams
class Server:
    """upstream.py or s3_upstream.py as a child; /_ctl/ helpers."""

    def __init__(self, work, name, argv):
        self.name = name
        out = open(os.path.join(work, name + ".out"), "w+")
        err = open(os.path.join(work, name + ".log"), "w")
        self.proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        with open(os.path.join(work, "pids"), "a") as f:
            f.write("%d\n" % self.proc.pid)
        deadline = time.time() + 15
        port = None
        while port is None:
            out.seek(0)
            for line in out.read().splitlines():
                if line.startswith("PORT "):
                    port = int(line.split()[1])
            if port is None:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("%s did not start: %s" % (
                        name, open(os.path.join(work, name + ".log")).read()[-2000:]))
                time.sleep(0.05)
        self.base = "http://127.0.0.1:%d" % port

    def ctl(self, name, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + "/_ctl/" + name, data=data,
                                     method="GET" if body is None else "POST",
                                     headers={"Content-Type": "application/json"})
        with _opener.open(req, timeout=30) as r:
            return json.loads(r.read() or b"{}")

    def reset(self):
        self.ctl("reset", {})

    def bytes(self, path):
        return self.ctl("stats?path=" + path)["bytes"]

    def requests(self):
        s = self.ctl("stats")
        return s.get("total_gets", 0) + s.get("total_heads", 0)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# --------------------------------------------------------------------------- mounts
class Mount:
    """One mount of one system: start, wait until mounted, sample RSS, unmount."""

    def __init__(self, system, work, tag, what, shared_cache=None, durable=False,
                 extra_args=(), server=None):
        self.system, self.work = system, work
        self.mnt = os.path.join(work, "mnt." + tag)
        # Another mount's cache directory is that mount's to create and remove.
        self.cache = shared_cache or os.path.join(work, "cache." + tag)
        self.own_cache = shared_cache is None
        for p in (self.mnt, self.cache) if self.own_cache else (self.mnt,):
            shutil.rmtree(p, ignore_errors=True)
            os.makedirs(p)
        self.logpath = os.path.join(work, "log." + tag)
        argv = system.argv(what, self.mnt, self.cache, durable, server) + list(extra_args)
        t0 = time.monotonic()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=open(self.logpath, "w"), stderr=subprocess.STDOUT,
                                     env=system.env(self.cache))
        with open(os.path.join(work, "mounts"), "a") as f:
            f.write("%d %s\n" % (self.proc.pid, self.mnt))
        deadline = t0 + system.mount_timeout
        while not benchlib.is_mounted(self.mnt):
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited (%s) before mounting: %s" % (
                    system.name, self.proc.returncode, self.log_tail()))
            if time.monotonic() > deadline:
                self.unmount()
                raise RuntimeError("%s did not mount in %.0f s" % (system.name,
                                                                    system.mount_timeout))
            time.sleep(0.005)
        self.mount_s = time.monotonic() - t0
        self.peak_kb = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._sample, daemon=True)
        self._t.start()

    def log_tail(self):
        try:
            return open(self.logpath, errors="replace").read()[-1500:]
        except OSError:
            return ""

    def _sample(self):
        while not self._stop.is_set():
            st = benchlib.read_status(self.proc.pid)
            if not st:
                return
            self.peak_kb = max(self.peak_kb, st.get("VmRSS", 0), st.get("VmHWM", 0))
            self._stop.wait(0.05)

    def rss_mib(self):
        st = benchlib.read_status(self.proc.pid)
        self.peak_kb = max(self.peak_kb, st.get("VmHWM", 0), st.get("VmRSS", 0))
        return self.peak_kb / 1024

    def unmount(self):
        """Returns the daemon's exit status (None if it had to be killed)."""
        if getattr(self, "_stop", None):
            self._stop.set()
        if benchlib.is_mounted(self.mnt):
            if subprocess.call(["fusermount3", "-u", self.mnt], stderr=subprocess.DEVNULL):
                time.sleep(0.5)
                if subprocess.call(["fusermount3", "-u", self.mnt], stderr=subprocess.DEVNULL):
                    subprocess.call(["fusermount3", "-uz", self.mnt], stderr=subprocess.DEVNULL)
        rc = None
        try:
            rc = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.own_cache:
            shutil.rmtree(self.cache, ignore_errors=True)
        return rc


class System:
    name = "?"
    mount_timeout = 60
    server = "http"  # which upstream it reads

    def __init__(self, bench):
        self.b = bench

    def env(self, cache):
        e = dict(os.environ)
        for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                  "all_proxy"):
            e.pop(k, None)
        return e

    def missing(self):
        return None  # or the reason it cannot run at all


class Spoolfs(System):
    name = "spoolfs"
    # Defaults are its fast settings (it is what we tune): a session cache, the fresh
    # directory it makes under $TMPDIR (here inside this mount's cache directory, on the
    # same disk as the peers' caches) and removes at unmount, which it never fdatasyncs
    # because nothing outlives the session. durable: a named --cache-dir, which other
    # mounts can share and whose progress is made crash-safe (fdatasync every 64 MiB);
    # W2 measures it too, and W3 through another mount needs it.

    def binary(self):
        return self.b.spoolfs

    def argv(self, what, mnt, cache, durable=False, server=None):
        base = (server or self.b.http).base
        if what.startswith("s3://"):  # a public bucket of s3_upstream.py
            argv = [self.binary(), "-f", what, mnt, "--endpoint", base, "--no-sign"]
        else:
            argv = [self.binary(), "-f", "%s/%s.json" % (base, what), mnt]
        return argv + ["--cache-dir", cache] if durable else argv

    def env(self, cache):
        return {**super().env(cache), "TMPDIR": cache}


class SpoolfsBase(Spoolfs):
    # Another build of spoolfs (SPOOLFS_BASE_BIN, e.g. main before a change), beside the
    # one measured, in the same run: a before-and-after with the same baselines.
    name = "spoolfs-base"

    def binary(self):
        return os.environ["SPOOLFS_BASE_BIN"]

    def missing(self):
        b = os.environ.get("SPOOLFS_BASE_BIN")
        return None if b and os.access(b, os.X_OK) else "SPOOLFS_BASE_BIN is not set"


class Rclone(System):
    name = "rclone"
    # rclone mount of an http remote (no config: ":http:" + --http-url). Fast read-only
    # settings from rclone's mount docs: --read-only; --vfs-cache-mode full (reads are
    # cached on disk, sparse, shared by all handles of a file, with read-ahead, the mode
    # the docs recommend for reading); static store, so directory and attribute caches
    # never expire (--dir-cache-time, --attr-timeout long, --poll-interval 0); no modtime
    # or hash look-ups (--no-modtime, --no-checksum). The http remote HEADs each file of
    # a listing for its size (the default; --http-no-head would give wrong sizes).
    # Chunked reading (--vfs-read-chunk-size 128M doubling) and --buffer-size 16M are
    # rclone's defaults.

    def missing(self):
        return None if shutil.which("rclone") else "not installed (peers.sh --install)"

    def argv(self, what, mnt, cache, durable=False, server=None):
        conf = os.path.join(self.b.work, "rclone.conf")
        open(conf, "a").close()
        base = (server or self.b.http).base
        return ["rclone", "mount", ":http:", mnt, "--http-url", "%s/%s/" % (base, what),
                "--config", conf, "--read-only", "--vfs-cache-mode", "full",
                "--cache-dir", cache, "--dir-cache-time", "1000h", "--attr-timeout", "1000h",
                "--poll-interval", "0", "--no-modtime", "--no-checksum", "--log-level", "NOTICE"]


class Httpdirfs(System):
    name = "httpdirfs"
    # httpdirfs crawls the upstream's HTML directory listings (upstream.py --index).
    # Fast settings from its manual: --cache (segment cache on disk, 8 MiB segments by
    # default, so re-reads and concurrent readers are served locally) in a fresh
    # --cache-location; -o ro; --max-conns default 10.

    def missing(self):
        return None if shutil.which("httpdirfs") else "not installed (peers.sh --install)"

    def argv(self, what, mnt, cache, durable=False, server=None):
        return ["httpdirfs", "-f", "--cache", "--cache-location", cache, "-o", "ro",
                "%s/%s/" % (self.b.http.base, what), mnt]


class S3fs(System):
    name = "s3fs"
    server = "s3"
    # s3fs-fuse against tests/upstream/s3_upstream.py (path-style, anonymous: public
    # buckets). Fast read-only settings from its man page: -o ro; use_cache=DIR (local
    # file cache, so re-reads and other handles are served locally); parallel_count=5
    # and multipart_size=10 (MiB) are the documented defaults for ranged parallel
    # transfers; a large stat cache (max_stat_cache_size, stat_cache_expire) since the
    # store is static; enable_noobj_cache (no repeated HEADs of missing names).

    def missing(self):
        if not shutil.which("s3fs"):
            return "not installed (peers.sh --install)"
        if self.b.s3 is None:
            return self.b.s3_reason
        return None

    def argv(self, what, mnt, cache, durable=False, server=None):
        return ["s3fs", what, mnt, "-f", "-o",
                "ro,url=%s,use_path_request_style,public_bucket=1,endpoint=us-east-1,"
                "use_cache=%s,max_stat_cache_size=200000,stat_cache_expire=86400,"
                "enable_noobj_cache" % ((server or self.b.s3).base, cache)]


SYSTEMS = {c.name: c for c in (Spoolfs, SpoolfsBase, Rclone, Httpdirfs, S3fs)}


# --------------------------------------------------------------------------- operations
# Each runs as "peers.py op NAME ..." in a child process and prints one JSON object.

def _check_block(buf, n, off, bad):
    """mkstore stamps (block index, offset) into the first 16 bytes of each 1 MiB block."""
    if off % MiB == 0 and n >= 16 and not bad:
        i, o = struct.unpack_from("<QQ", buf, 0)
        if (i, o) != (off // MiB, off):
            bad.append("wrong bytes at offset %d" % off)


def op_readers(path, n, size):
    """n threads open and read path together (1 MiB reads); per reader: first byte and end
    time relative to the common start. Threads of bench_readers (readers.c) when peers.sh
    built it: Python's interpreter lock spreads 64 threads' first bytes by milliseconds."""
    tool = os.environ.get("BENCH_READERS")
    if tool and os.access(tool, os.X_OK):
        # PR_SET_PDEATHSIG in readers.c ends it with this process on a timeout.
        p = subprocess.run([tool, path, str(n), str(size)], capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError("bench_readers: %s" % p.stderr.strip()[-200:])
        return json.loads(p.stdout)
    n, size = int(n), int(size)
    bar = threading.Barrier(n + 1)
    res = [None] * n

    def reader(k):
        buf = bytearray(MiB)
        bad = []
        bar.wait()
        t0 = time.monotonic()
        first = None
        got = 0
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                while True:
                    r = os.readv(fd, [buf])
                    if r <= 0:
                        break
                    if first is None:
                        first = time.monotonic()
                    _check_block(buf, r, got, bad)
                    got += r
            finally:
                os.close(fd)
        except OSError as e:
            bad.append("%s after %d bytes" % (e, got))
        res[k] = (t0, first or time.monotonic(), time.monotonic(), got, bad)

    ts = [threading.Thread(target=reader, args=(k,)) for k in range(n)]
    for t in ts:
        t.start()
    bar.wait()
    start = time.monotonic()
    for t in ts:
        t.join()
    short = [r[3] for r in res if r[3] != size]
    bad = [r[4][0] for r in res if r[4]]
    firsts = sorted(r[1] - start for r in res)
    return {"wall": max(r[2] for r in res) - start, "first": firsts[0],
            "follow_max": firsts[-1] - firsts[0],
            "follow_med": statistics.median([f - firsts[0] for f in firsts[1:]] or [0]),
            "error": ("short read: %s bytes, want %d" % (short[:3], size)) if short else
                     ("reader error: %s" % bad[0]) if bad else None}


def op_seq(path, size):
    size = int(size)
    buf = bytearray(MiB)
    bad = []
    got = 0
    t0 = time.monotonic()
    fd = os.open(path, os.O_RDONLY)
    try:
        while True:
            r = os.readv(fd, [buf])
            if r <= 0:
                break
            _check_block(buf, r, got, bad)
            got += r
    finally:
        os.close(fd)
    t = time.monotonic() - t0
    err = None
    if got != size:
        err = "short read: %d bytes, want %d" % (got, size)
    elif bad:
        err = bad[0]
    return {"wall": t, "error": err}


def w4_offsets(size, reads, seed):
    rnd = random.Random("%s:w4" % seed)
    return [rnd.randrange(0, size // 4096) * 4096 for _ in range(reads)]


def op_random(path, size, reads, seed, ref):
    offs = w4_offsets(int(size), int(reads), seed)
    out = []
    t0 = time.monotonic()
    fd = os.open(path, os.O_RDONLY)
    try:
        for o in offs:
            out.append(os.pread(fd, 4096, o))
    finally:
        os.close(fd)
    t = time.monotonic() - t0
    err = None
    with open(ref, "rb") as f:  # verify after the clock stopped
        for o, d in zip(offs, out):
            if d != os.pread(f.fileno(), 4096, o):
                err = "wrong bytes at offset %d (%d bytes)" % (o, len(d))
                break
    return {"wall": t, "error": err}


def op_random_http(url, size, reads, seed):
    """Baseline for W4: the same 200 ranges as GETs on one keep-alive connection."""
    import http.client
    import urllib.parse
    u = urllib.parse.urlsplit(url)
    offs = w4_offsets(int(size), int(reads), seed)
    t0 = time.monotonic()
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    for o in offs:
        c.request("GET", u.path, headers={"Range": "bytes=%d-%d" % (o, o + 4095)})
        r = c.getresponse()
        d = r.read()
        if r.status != 206 or len(d) != 4096:
            return {"wall": 0, "error": "range GET: %d, %d bytes" % (r.status, len(d))}
    c.close()
    return {"wall": time.monotonic() - t0, "error": None}


def op_curl(url, size):
    t0 = time.monotonic()
    p = subprocess.run(["curl", "-s", "--noproxy", "*", "-o", "/dev/null", "-w",
                        "%{http_code} %{size_download}", url], capture_output=True, text=True)
    t = time.monotonic() - t0
    want = "200 %s" % size
    return {"wall": t, "error": None if p.stdout == want else
            "curl %s: got %r, want %r" % (url, p.stdout, want)}


def op_shell(cmd, want_lines):
    """Run a shell pipeline (find | wc -l, ls -lR > /dev/null) in the given directory."""
    t0 = time.monotonic()
    p = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True)
    t = time.monotonic() - t0
    err = None
    if p.returncode != 0:
        err = "%r exited %d: %s" % (cmd, p.returncode, p.stderr.strip()[-300:])
    elif want_lines != "-" and p.stdout.strip() != want_lines:
        err = "%r printed %r, want %s" % (cmd, p.stdout.strip()[:80], want_lines)
    return {"wall": t, "error": err}


def op_tree(root, listfile):
    """Reads every file of the list (sorted, as tar does) under root: open, read, close."""
    with open(listfile) as f:
        files = json.load(f)
    t0 = time.monotonic()
    for rel, size in files:
        with open(os.path.join(root, rel), "rb", buffering=0) as f:
            got = 0
            while True:
                b = f.read(1 << 16)
                if not b:
                    break
                got += len(b)
        if got != size:
            return {"wall": time.monotonic() - t0, "error": "%s: %d bytes, want %d"
                    % (rel, got, size)}
    return {"wall": time.monotonic() - t0, "error": None}


def _connect(base):
    host, port = base.split("//")[1].split(":")
    return http.client.HTTPConnection(host, int(port), timeout=60)


def _get_one(conn, rel, sizes, errors):
    """GETs one file of the tree on a keep-alive connection, checking its size."""
    conn.request("GET", "/cold/" + rel)
    r = conn.getresponse()
    body = r.read()
    if r.status != 200 or len(body) != sizes[rel]:
        errors.append("%s: HTTP %d, %d bytes" % (rel, r.status, len(body)))


def op_tree_http(base, listfile, connections):
    """The tree's files over `connections` keep-alive connections at once, each taking the
    next file of the sorted list: 1 is the one-round-trip-per-file floor."""
    with open(listfile) as f:
        files = json.load(f)
    sizes = dict((rel, size) for rel, size in files)
    n = int(connections)
    work = queue.Queue()
    for rel, _ in files:
        work.put(rel)
    errors = []
    t0 = time.monotonic()
    threads = [threading.Thread(target=worker_conn, args=(base, work, sizes, errors))
               for _ in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return {"wall": time.monotonic() - t0, "error": errors[0] if errors else None}


def worker_conn(base, work, sizes, errors):
    """One connection of op_tree_http: GETs files from the shared queue until it is empty."""
    conn = _connect(base)
    while True:
        try:
            rel = work.get_nowait()
        except queue.Empty:
            break
        _get_one(conn, rel, sizes, errors)
    conn.close()


OPS = {"tree": op_tree, "tree_http": op_tree_http, "readers": op_readers, "seq": op_seq, "random": op_random,
       "random_http": op_random_http, "curl": op_curl, "shell": op_shell}


# --------------------------------------------------------------------------- the bench
class Bench:
    def __init__(self, work, spoolfs):
        self.work, self.spoolfs = work, spoolfs
        self.c = config()
        self.vals = {}  # (row, system) -> [values]
        self.na = {}  # (row, system) -> reason
        self.problems = []  # spoolfs or the harness did not work: exit 1
        self.notes = []  # a peer did not work: shown as n/a, reported, exit 0
        self.s3 = None
        self.s3_reason = ""

    # results
    def put(self, row, system, value):
        self.vals.setdefault((row, system), []).append(value)

    def fail(self, row, system, reason):
        self.na.setdefault((row, system), reason)

    def op(self, *args, timeout=None):
        """Run one operation in a child; returns its dict or raises RuntimeError."""
        argv = [PYTHON, os.path.abspath(__file__), "op"] + [str(a) for a in args]
        try:
            p = subprocess.run(argv, capture_output=True, text=True,
                               timeout=timeout or self.c["timeout"])
        except subprocess.TimeoutExpired:
            raise RuntimeError("timeout after %.0f s" % (timeout or self.c["timeout"]))
        if p.returncode != 0:
            lines = p.stderr.strip().splitlines() or ["?"]
            raise RuntimeError("%s failed: %s" % (args[0], lines[-1][-200:]))
        r = json.loads(p.stdout)
        if r.get("error"):
            raise RuntimeError(r["error"])
        return r

    def trouble(self, system, msg):
        (self.problems if system.name.startswith("spoolfs") else self.notes).append(
            "%s %s" % (system.name, msg))

    def server_for(self, system):
        return self.s3 if system.server == "s3" else self.http

    # --- baselines
    def baselines(self, run):
        c, st = self.c, os.path.join(self.work, "store")
        h = self.http.base
        log("run %d: baselines" % run)
        self.put("W1 wall s", "baseline", self.op("curl", h + "/big/w1.bin", c["w1_size"])["wall"])
        self.put("W2 cold read s", "baseline",
                 self.op("curl", h + "/big/w2.bin", c["w2_size"])["wall"])
        self.put("W2 capped read s", "baseline",
                 self.op("curl", h + "/big/cap.bin", c["cap_size"])["wall"])
        self.op("seq", st + "/big/w2.bin", c["w2_size"])  # warm the page cache
        self.put("W3 warm read s", "baseline",
                 self.op("seq", st + "/big/w2.bin", c["w2_size"])["wall"])
        self.put("W4 wall s", "baseline", self.op("random_http", h + "/big/w2.bin", c["w2_size"],
                                                  c["w4_reads"], c["seed"])["wall"])
        self.put("W4 upstream B/asked", "baseline", 1.0)
        t = os.path.join(st, "tree")
        self.put("W5 find s", "baseline",
                 self.op("shell", "cd %s && find . -type f | wc -l" % t, c["w5_files"])["wall"])
        self.put("W5 ls -lR s", "baseline",
                 self.op("shell", "cd %s && ls -lR >/dev/null" % t, "-")["wall"])

    # --- one system, one run
    def mount(self, system, what, tag, shared_cache=None, durable=False):
        return Mount(system, self.work, "%s.%s" % (system.name, tag), what, shared_cache,
                     durable)

    def unmount(self, system, m):
        rc = m.unmount()
        if rc != 0:
            tail = [l for l in m.log_tail().splitlines() if l.strip()]
            tail = [l for l in tail if "fatal" in l.lower() or "error" in l.lower()] or tail
            self.trouble(system, "exited with status %s after unmount (%s); log: %s" % (
                rc, os.path.basename(m.mnt), " | ".join(tail[-3:])[-300:]))

    def w1(self, s, run):
        c, srv = self.c, self.server_for(s)
        rss = 0.0
        single = None
        for n in [1] + c["w1_readers"]:
            rows = ["W1x%d wall s" % n, "W1x%d wall/1 reader" % n, "W1x%d upstream B/size" % n,
                    "W1x%d follower TTFB-leader ms (max)" % n]
            if n == 1:
                rows = ["W1 wall s"]
            try:
                m = self.mount(s, "big", "w1.%d.%d" % (run, n))
            except RuntimeError as e:
                for r in rows:
                    self.fail(r, s.name, "mount: %s" % e)
                self.trouble(s, str(e))
                continue
            try:
                srv.reset()
                r = self.op("readers", m.mnt + "/w1.bin", n, c["w1_size"])
                up = srv.bytes("big/w1.bin") / c["w1_size"]
                if n == 1:
                    single = r["wall"]
                    self.put("W1 wall s", s.name, r["wall"])
                    self.put("W1x1 upstream B/size", s.name, up)
                else:
                    self.put(rows[0], s.name, r["wall"])
                    if single:
                        self.put(rows[1], s.name, r["wall"] / single)
                    else:
                        self.fail(rows[1], s.name, "no 1-reader time")
                    self.put(rows[2], s.name, up)
                    self.put(rows[3], s.name, r["follow_max"] * 1000)
            except RuntimeError as e:
                for r in rows:
                    self.fail(r, s.name, str(e)[:60])
                if "timeout" not in str(e):
                    self.trouble(s, "W1 x%d: %s" % ((n, e)))
            finally:
                rss = max(rss, m.rss_mib())
                self.unmount(s, m)
        if rss:
            self.put("W6 peak RSS MiB in W1", s.name, rss)

    def w2w3(self, s, run):
        c, srv = self.c, self.server_for(s)
        try:
            m = self.mount(s, "big", "w2.%d" % run)
        except RuntimeError as e:
            for r in ("W2 cold read s", "W3 warm read s", "W6 peak RSS MiB in W2"):
                self.fail(r, s.name, "mount: %s" % e)
            self.trouble(s, str(e))
            return
        try:
            srv.reset()
            self.put("W2 cold read s", s.name,
                     self.op("seq", m.mnt + "/w2.bin", c["w2_size"])["wall"])
            self.put("W2 upstream B/size", s.name, srv.bytes("big/w2.bin") / c["w2_size"])
            srv.reset()
            self.put("W3 warm read s", s.name,
                     self.op("seq", m.mnt + "/w2.bin", c["w2_size"])["wall"])
            self.put("W3 upstream B/size", s.name, srv.bytes("big/w2.bin") / c["w2_size"])
            self.put("W6 peak RSS MiB in W2", s.name, m.rss_mib())
        except RuntimeError as e:
            for r in ("W2 cold read s", "W3 warm read s"):
                self.fail(r, s.name, str(e)[:60])
            if "timeout" not in str(e):
                self.trouble(s, "W2/W3: %s" % e)
        finally:
            self.unmount(s, m)
        if isinstance(s, Spoolfs):
            self.w2_unverified(s, run)
            self.w2_durable(s, run)

    def w2_durable(self, s, run):
        """W2 through a named --cache-dir (durable), then W3 through a second mount of it."""
        self.mount_and_read_w2(s, "W2 cold read s, durable --cache-dir", "big", "w2d.%d" % run,
                               durable=True, then=lambda m: self.w3_other_mount(s, m, run))

    def w3_other_mount(self, s, first, run):
        """W3 on a second spoolfs mount sharing the first one's cache directory (CI jobs
        with their own mounts): the kernel reads the spool itself (passthrough)."""
        row = "W3 warm read s, another mount of the cache"
        flights = os.path.join(first.mnt, ".spoolfs", "flights")
        deadline = time.monotonic() + 30
        while not any(json.loads(l).get("durable") for l in open(flights) if l.strip()):
            if time.monotonic() > deadline:
                self.fail(row, s.name, "the first mount never recorded the object")
                return
            time.sleep(0.01)
        self.mount_and_read_w2(s, row, "big", "w3b.%d" % run, shared_cache=first.cache,
                               durable=True)

    def w2_unverified(self, s, run):
        """W2 again on a manifest without sha256: nothing verified, as with the peers."""
        self.mount_and_read_w2(s, "W2 cold read s, no sha256", "big-nohash", "w2n.%d" % run)

    def mount_and_read_w2(self, s, row, what, tag, shared_cache=None, durable=False,
                          then=None):
        """Row: one sequential read of w2.bin through a mount of its own; then(mount), if
        given, runs while it is still mounted."""
        try:
            m = self.mount(s, what, tag, shared_cache, durable)
        except RuntimeError as e:
            self.fail(row, s.name, "mount: %s" % e)
            return
        try:
            self.put(row, s.name, self.op("seq", m.mnt + "/w2.bin", self.c["w2_size"])["wall"])
            if then:
                then(m)
        except RuntimeError as e:
            self.fail(row, s.name, str(e)[:60])
        finally:
            self.unmount(s, m)

    def w2cap(self, s, run):
        c = self.c
        try:
            m = self.mount(s, "big", "cap.%d" % run)
        except RuntimeError as e:
            self.fail("W2 capped read s", s.name, "mount: %s" % e)
            return
        try:
            self.put("W2 capped read s", s.name,
                     self.op("seq", m.mnt + "/cap.bin", c["cap_size"])["wall"])
        except RuntimeError as e:
            self.fail("W2 capped read s", s.name, str(e)[:60])
            if "timeout" not in str(e):
                self.trouble(s, "W2 capped: %s" % e)
        finally:
            self.unmount(s, m)

    def w4(self, s, run):
        c, srv = self.c, self.server_for(s)
        try:
            m = self.mount(s, "big", "w4.%d" % run)
        except RuntimeError as e:
            self.fail("W4 wall s", s.name, "mount: %s" % e)
            return
        try:
            srv.reset()
            r = self.op("random", m.mnt + "/w2.bin", c["w2_size"], c["w4_reads"], c["seed"],
                        os.path.join(self.work, "store", "big", "w2.bin"))
            up = srv.bytes("big/w2.bin")  # right after the last read (downloads go on)
            self.put("W4 wall s", s.name, r["wall"])
            self.put("W4 upstream B/asked", s.name, up / (4096.0 * c["w4_reads"]))
            time.sleep(1.0)
            self.put("W4 upstream B/asked +1s", s.name,
                     srv.bytes("big/w2.bin") / (4096.0 * c["w4_reads"]))
        except RuntimeError as e:
            for r in ("W4 wall s", "W4 upstream B/asked"):
                self.fail(r, s.name, str(e)[:60])
            if "timeout" not in str(e):
                self.trouble(s, "W4: %s" % e)
        finally:
            self.unmount(s, m)

    def w5(self, s, run):
        c, srv = self.c, self.server_for(s)
        rows = ("W5 mount s", "W5 find s", "W5 ls -lR s", "W5 upstream requests after mount",
                "W6 peak RSS MiB in W5")
        srv.reset()
        try:
            m = self.mount(s, "tree", "w5.%d" % run)
        except RuntimeError as e:
            for r in rows:
                self.fail(r, s.name, "mount: %s" % e)
            self.trouble(s, "W5: %s" % e)
            return
        try:
            self.put("W5 mount s", s.name, m.mount_s)
            self.put("W5 upstream requests during mount", s.name, srv.requests())
            srv.reset()
            self.put("W5 find s", s.name, self.op(
                "shell", "cd %s && find . -type f | wc -l" % m.mnt, c["w5_files"])["wall"])
            self.put("W5 ls -lR s", s.name, self.op(
                "shell", "cd %s && ls -lR >/dev/null" % m.mnt, "-")["wall"])
            self.put("W5 upstream requests after mount", s.name, srv.requests())
        except RuntimeError as e:
            for r in rows[1:4]:
                self.fail(r, s.name, str(e)[:60])
            if "timeout" not in str(e):
                self.trouble(s, "W5: %s" % e)
        finally:
            self.put("W6 peak RSS MiB in W5", s.name, m.rss_mib())
            self.unmount(s, m)

    W7_ROWS = ("W7 tree read s", "W7 tree read s, second run, --prefetch-list",
               "W7 tree read s, second run, kept record", "W7 S3 tree read s")

    def w7(self, s, run):
        """A cold tree of small files, each request 10 ms away: a reader reads every file in
        sorted order. spoolfs: cold (v1 manifest), the second run of the same job (the first
        run's record as --prefetch-list, and kept in a --keep-cache directory emptied of
        objects), and cold from an S3 bucket; rclone over HTTP listings, s3fs from the
        bucket."""
        listfile = os.path.join(self.work, "cold.list")
        rows = self.W7_ROWS
        if isinstance(s, Spoolfs):
            record = os.path.join(self.work, "cold.%s.%d.reads" % (s.name, run))
            kept = os.path.join(self.work, "cache.w7kept.%s.%d" % (s.name, run))
            cases = [
                (rows[0], "cold", ["--record-reads", record], None, self.slow),
                (rows[1], "cold", ["--prefetch-list", record], None, self.slow),
                (rows[2], "cold", ["--cache-dir", kept, "--keep-cache"], "first", self.slow),
                (rows[2], "cold", ["--cache-dir", kept, "--keep-cache"], "second", self.slow),
            ]
            if self.slow_s3:
                cases.append((rows[3], "s3://cold", [], None, self.slow_s3))
            else:
                self.fail(rows[3], s.name, self.s3_reason or "no S3 server")
        elif s.name == "rclone":
            cases = [(rows[0], "cold", [], None, self.slow)]
            for r in (rows[3], rows[3] + ", 32 connections"):
                self.fail(r, s.name, "runs W7 over HTTP listings (the rows above)")
        elif s.name == "s3fs" and self.slow_s3:
            cases = [(rows[3], "cold", [], None, self.slow_s3)]
            for r in (rows[0], rows[0] + ", 32 connections"):
                self.fail(r, s.name, "S3 only: see W7 S3")
        else:
            for r in rows:
                self.fail(r, s.name, "not run for W7")
            return
        for n, (row, what, extra, phase, srv) in enumerate(cases):
            srv.reset()
            try:
                m = Mount(s, self.work, "%s.w7.%d.%d" % (s.name, run, n), what,
                          extra_args=extra, server=srv)
            except RuntimeError as e:
                self.fail(row, s.name, "mount: %s" % e)
                self.trouble(s, "W7: %s" % e)
                continue
            try:
                r = self.op("tree", m.mnt, listfile)
                if phase != "first":
                    self.put(row, s.name, r["wall"])
                    self.put(row + ", 32 connections", s.name, r["wall"])
                if phase is None and n == 0:
                    self.put("W7 upstream requests", s.name, srv.requests())
            except RuntimeError as e:
                self.fail(row, s.name, str(e)[:60])
                self.trouble(s, "W7: %s" % e)
            finally:
                self.unmount(s, m)
            if phase == "first":
                # An ephemeral runner's cache: the objects go, the record stays.
                shutil.rmtree(os.path.join(kept, "spool"), ignore_errors=True)
                for f in os.listdir(kept):
                    if f.startswith("index.db"):
                        os.unlink(os.path.join(kept, f))
        if isinstance(s, Spoolfs):
            shutil.rmtree(kept, ignore_errors=True)

    def w7_baselines(self, run):
        """The floors, over HTTP and over the S3 API (the same paths: /cold/KEY)."""
        listfile = os.path.join(self.work, "cold.list")
        for row, srv in (("W7 tree read s", self.slow), ("W7 S3 tree read s", self.slow_s3)):
            if srv is None:
                continue
            seq = self.op("tree_http", srv.base, listfile, 1)["wall"]
            par = self.op("tree_http", srv.base, listfile, self.c["w7_parallel"])["wall"]
            self.put(row, "baseline", seq)
            self.put(row + ", 32 connections", "baseline", par)

    def run(self):
        c = self.c
        store = make_store(self.work, c)
        self.http = Server(self.work, "upstream", [
            PYTHON, os.path.join(ROOT, "tests/upstream/upstream.py"), "--root", store,
            "--host", "127.0.0.1", "--port", "0", "--index"])
        # W7's store is 10 ms away: the same files, every request delayed (with HTML
        # listings for rclone's http remote), and the same over the S3 API.
        self.slow = Server(self.work, "upstream_slow", [
            PYTHON, os.path.join(ROOT, "tests/upstream/upstream.py"), "--root", store,
            "--host", "127.0.0.1", "--port", "0", "--delay-ms", str(c["w7_delay_ms"]),
            "--index"])
        s3py = os.path.join(ROOT, "tests/upstream/s3_upstream.py")
        self.slow_s3 = None
        if "W7" in c["workloads"]:
            try:
                self.slow_s3 = Server(self.work, "s3_upstream_slow", [
                    PYTHON, s3py, "--root", store, "--host", "127.0.0.1", "--port", "0",
                    "--public", "cold", "--etag", "fast", "--delay-ms",
                    str(c["w7_delay_ms"])])
            except RuntimeError as e:
                self.s3_reason = "s3_upstream.py did not start: %s" % str(e)[:100]
        systems = []
        for name in c["peers"]:
            if name not in SYSTEMS:
                raise SystemExit("unknown system %r in PEERS" % name)
            systems.append(SYSTEMS[name](self))
        if "s3fs" in c["peers"] and shutil.which("s3fs"):
            if os.environ.get("S3_ENDPOINT"):
                self.s3_reason = ("S3_ENDPOINT given, but seeding a foreign S3 server with "
                                  "the store is not implemented; unset it to use "
                                  "tests/upstream/s3_upstream.py")
            elif not os.path.exists(s3py):
                self.s3_reason = "no S3 API: tests/upstream/s3_upstream.py is missing"
            else:
                try:
                    self.s3 = Server(self.work, "s3_upstream", [
                        PYTHON, s3py, "--root", store, "--host", "127.0.0.1", "--port", "0",
                        "--public", "big", "--public", "tree", "--etag", "fast"])
                except RuntimeError as e:
                    self.s3_reason = "s3_upstream.py did not start: %s" % str(e)[:100]
        servers = [self.http, self.slow] + [x for x in (self.s3, self.slow_s3) if x]
        for srv in servers:
            srv.ctl("fault", {"path": "big/w1.bin", "total_rate": c["w1_rate"]})
            srv.ctl("fault", {"path": "big/cap.bin", "rate": c["cap_rate"]})
        live = []
        for s in systems:
            why = s.missing()
            if why:
                self.fail("*", s.name, why)
                log("%s: n/a (%s)" % (s.name, why))
            else:
                live.append(s)
        try:
            for run in range(1, c["runs"] + 1):
                self.baselines(run)
                if "W7" in c["workloads"]:
                    self.w7_baselines(run)
                for s in live:
                    for wname, key, fn in (("W1", "W1", self.w1), ("W2/W3", "W2", self.w2w3),
                                           ("W2 capped", "W2cap", self.w2cap),
                                           ("W4", "W4", self.w4), ("W5", "W5", self.w5),
                                           ("W7", "W7", self.w7)):
                        if key not in c["workloads"]:
                            continue
                        log("run %d/%d: %s %s" % (run, c["runs"], s.name, wname))
                        t0 = time.monotonic()
                        fn(s, run)
                        log("  %.1f s" % (time.monotonic() - t0))
        finally:
            for srv in servers:
                srv.stop()
        self.report([s.name for s in systems])
        for p in self.notes:
            print("NOTE: %s" % p)
        for p in self.problems:
            print("PROBLEM: %s" % p)
        return 1 if self.problems else 0

    # --- the table
    ROWS = [  # (row, baseline label or None)
        ("W1 wall s", "curl, 1 reader, same throttle"),
        ("W1x8 wall s", "W1 curl"), ("W1x8 wall/1 reader", None),
        ("W1x8 upstream B/size", None), ("W1x8 follower TTFB-leader ms (max)", None),
        ("W1x64 wall s", "W1 curl"), ("W1x64 wall/1 reader", None),
        ("W1x64 upstream B/size", None), ("W1x64 follower TTFB-leader ms (max)", None),
        ("W2 cold read s", "curl -o /dev/null"), ("W2 upstream B/size", None),
        ("W2 cold read s, no sha256", "W2 curl -o /dev/null"),
        ("W2 cold read s, durable --cache-dir", "W2 curl -o /dev/null"),
        ("W2 capped read s", "curl, same per-connection cap"),
        ("W3 warm read s", "read of the local store file"), ("W3 upstream B/size", None),
        ("W3 warm read s, another mount of the cache", "W3 local read"),
        ("W4 wall s", "200 Range GETs, 1 keep-alive connection"),
        ("W4 upstream B/asked", "the same GETs"), ("W4 upstream B/asked +1s", None),
        ("W5 mount s", None), ("W5 upstream requests during mount", None),
        ("W5 find s", "find on the local store tree"),
        ("W5 ls -lR s", "ls -lR on the local store tree"),
        ("W5 upstream requests after mount", None),
        ("W7 tree read s", "sequential GETs, 1 keep-alive connection"),
        ("W7 tree read s, 32 connections", "32 parallel keep-alive connections"),
        ("W7 tree read s, second run, --prefetch-list", "W7 32 connections"),
        ("W7 tree read s, second run, kept record", "W7 32 connections"),
        ("W7 upstream requests", None),
        ("W7 S3 tree read s", "sequential GETs from the bucket, 1 keep-alive connection"),
        ("W7 S3 tree read s, 32 connections", "32 parallel keep-alive connections"),
        ("W6 peak RSS MiB in W1", None), ("W6 peak RSS MiB in W2", None),
        ("W6 peak RSS MiB in W5", None),
    ]

    def report(self, names):
        c = self.c

        def fmt(v):
            if v >= 1000:
                return "%.0f" % v
            if v >= 100:
                return "%.1f" % v
            if v >= 10:
                return "%.2f" % v
            return "%.3f" % v

        base_of = {"W1x8 wall s": "W1 wall s", "W1x64 wall s": "W1 wall s",
                   "W2 cold read s, no sha256": "W2 cold read s",
                   "W2 cold read s, durable --cache-dir": "W2 cold read s",
                   "W3 warm read s, another mount of the cache": "W3 warm read s",
                   "W7 tree read s, second run, --prefetch-list":
                       "W7 tree read s, 32 connections",
                   "W7 tree read s, second run, kept record":
                       "W7 tree read s, 32 connections"}
        # The peers verify nothing anyway, and share no cache between mounts.
        only_spoolfs = {"W2 cold read s, no sha256", "W2 cold read s, durable --cache-dir",
                        "W3 warm read s, another mount of the cache",
                        "W7 tree read s, second run, --prefetch-list",
                        "W7 tree read s, second run, kept record"}
        lines = [("figure", "system", "median", "min-max", "x baseline", "note")]
        for row, blabel in self.ROWS:
            bkey = base_of.get(row, row)
            bvals = self.vals.get((bkey, "baseline"))
            bmed = statistics.median(bvals) if bvals else None
            if blabel and row not in base_of and bvals:
                lines.append((row, "baseline", fmt(bmed), "%s-%s" % (fmt(min(bvals)),
                              fmt(max(bvals))), "1.00", blabel))
            for n in names:
                if row in only_spoolfs and not n.startswith("spoolfs"):
                    continue
                v = self.vals.get((row, n))
                why = self.na.get((row, n)) or self.na.get(("*", n))
                if not v:
                    lines.append((row, n, "n/a", "", "", why or "not measured"))
                    continue
                med = statistics.median(v)
                ratio = ""
                if blabel and bmed:
                    ratio = "%.2f" % (med / bmed)
                note = ""
                if why:
                    note = "%d of %d runs failed: %s" % (c["runs"] - len(v), c["runs"], why)
                lines.append((row, n, fmt(med), "%s-%s" % (fmt(min(v)), fmt(max(v))), ratio,
                              note))
        w = [max(len(l[i]) for l in lines) for i in range(6)]
        print("spoolfs vs peers (issue 5), SCALE=%s, %d run(s) each; median, min-max, "
              "median / baseline median (same run)" % (c["scale"], c["runs"]))
        print("sizes: W1 %d MiB at %d MiB/s total; W2/W3/W4 %d MiB; W2 capped %d MiB at "
              "%d MiB/s per connection; W5 %d files in %d dirs; machine: %d cores, %s"
              % (c["w1_size"] >> 20, c["w1_rate"] >> 20, c["w2_size"] >> 20,
                 c["cap_size"] >> 20, c["cap_rate"] >> 20, c["w5_files"], c["w5_dirs"],
                 os.cpu_count(), os.uname().release))
        prev = None
        for i, l in enumerate(lines):
            if i > 1 and l[0].split()[0] != prev:
                print()
            prev = l[0].split()[0] if i else None
            print("  ".join(
                (l[j].ljust(w[j]) if j in (0, 1, 5) else l[j].rjust(w[j])) for j in range(6)
            ).rstrip())
            if i == 0:
                print("  ".join("-" * x for x in w))


def main(argv):
    if len(argv) >= 2 and argv[1] == "op":
        print(json.dumps(OPS[argv[2]](*argv[3:])))
        return 0
    if len(argv) == 4 and argv[1] == "run":
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
        return Bench(argv[2], argv[3]).run()
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))

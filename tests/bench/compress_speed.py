#!/usr/bin/python3
"""Compressed objects against raw ones: cold reads on loopback and at a capped upstream,
and sparse reads (issue 37's speed targets).

  /usr/bin/python3 tests/bench/compress_speed.py           # 1 GiB, 3 runs
  SIZE=64M RUNS=1 /usr/bin/python3 tests/bench/compress_speed.py

Env: SIZE (default 1G), RUNS (default 3), FRAME (bytes, default 262144), LEVEL (zstd,
default 3), CAP (upstream B/s for the capped runs, default 100 MiB/s), SPARSE_READS
(default 200), SPOOLFS_BIN (default build/spoolfs).

One store, two manifests of the same compressible object (text-like lines): version 2 with
chunk hashes, stored raw; version 3 (doc/manifest.md, "Version 3: compressed objects") with
the same chunk hashes and the object stored as independent zstd frames of FRAME bytes, made
here with python3-zstandard, its hash list holding 36 bytes per chunk. Each run reads the
object through a fresh mount of each (`dd bs=1M`), first on loopback, then with the upstream
capped to CAP. Printed: wall seconds (median, min-max), compressed/raw ratios against the
targets (loopback <= 1.3x; capped >= 2x faster), the bytes the upstream sent, and SPARSE_READS
random 4 KiB reads of each (bytes sent, wall). A benchmark: nothing is asserted; it exits 1
only when something does not work (a mount, wrong bytes).

Needs a mount that loads version 3 (the loader of branch zsrc, with the engine of branch
zeng): before those are merged the compressed mount is refused.
"""

import hashlib
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

import zstandard

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "upstream"))
import mkstore  # noqa: E402
from client import Upstream  # noqa: E402
from chunked_read import Mount, timed  # noqa: E402  (its folder is on sys.path)

SPOOLFS = os.environ.get("SPOOLFS_BIN", os.path.join(ROOT, "build", "spoolfs"))
SIZE = mkstore.parse_size(os.environ.get("SIZE", "1G"))
RUNS = int(os.environ.get("RUNS", "3"))
FRAME = int(os.environ.get("FRAME", str(256 * 1024)))
LEVEL = int(os.environ.get("LEVEL", "3"))
CAP = int(os.environ.get("CAP", str(100 << 20)))
SPARSE_READS = int(os.environ.get("SPARSE_READS", "200"))


def write_object(path):
    """SIZE bytes of text-like lines (slices of an 8 MiB pool of them); their sha256."""
    rng = random.Random(37)
    words = [("%x" % rng.getrandbits(rng.randrange(8, 48))).encode() for _ in range(4096)]
    lines = []
    while sum(map(len, lines)) < 8 << 20:
        lines.append(b" ".join(rng.choice(words) for _ in range(rng.randrange(4, 12))) + b"\n")
    pool = b"".join(lines)
    h = hashlib.sha256()
    left = SIZE
    with open(path, "wb") as f:
        while left:
            n = min(left, 1 << 20)
            at = rng.randrange(0, len(pool) - n)
            block = pool[at:at + n]
            f.write(block)
            h.update(block)
            left -= n
    return h.hexdigest()


def put(store, data):
    """data as a content-addressed object; its URL relative to the store."""
    name = hashlib.sha256(data).hexdigest()
    rel = "objects/%s/%s" % (name[:2], name)
    os.makedirs(os.path.join(store, os.path.dirname(rel)), exist_ok=True)
    with open(os.path.join(store, rel), "wb") as f:
        f.write(data)
    return rel, name


def make_store(store):
    raw_path = os.path.join(store, "obj")
    sha = write_object(raw_path)
    cctx = zstandard.ZstdCompressor(level=LEVEL, write_content_size=True)
    plain_list, framed_list, frames, stored = [], [], [], bytearray()
    with open(raw_path, "rb") as f:
        while True:
            chunk = f.read(FRAME)
            if not chunk:
                break
            digest = hashlib.sha256(chunk).digest()
            frame = cctx.compress(chunk)
            plain_list.append(digest)
            framed_list.append(digest + len(frame).to_bytes(4, "little"))
            frames.append(len(frame))
            stored += frame
    stored_rel, stored_sha = put(store, bytes(stored))
    plain_rel, plain_sha = put(store, b"".join(plain_list))
    framed_rel, framed_sha = put(store, b"".join(framed_list))
    raw = {"version": 2, "entries": [{
        "path": "obj", "size": SIZE, "sha256": sha, "url": "obj",
        "chunks": {"size": FRAME, "sha256": plain_sha, "url": plain_rel}}]}
    packed = {"version": 3, "entries": [{
        "path": "obj", "size": SIZE, "sha256": sha, "url": stored_rel,
        "chunks": {"size": FRAME, "sha256": framed_sha, "url": framed_rel},
        "stored": {"encoding": "zstd", "size": len(stored), "sha256": stored_sha,
                   "frame": FRAME}}]}
    for name, doc in (("raw.json", raw), ("zstd.json", packed)):
        with open(os.path.join(store, name), "w") as f:
            json.dump(doc, f)
    return sha, len(stored), raw_path, stored_rel


def cold_read(up, kind, work, name, want_sha):
    m = Mount(up.url(kind + ".json"), work, name)
    try:
        up.reset()
        path = os.path.join(m.path, "obj")
        wall, _ = timed(["dd", "if=" + path, "of=/dev/null", "bs=1M", "status=none"])
        sent = up.stats()["total_bytes"]
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        if h.hexdigest() != want_sha:
            raise RuntimeError("%s: wrong bytes" % name)
    finally:
        m.close()
    return wall, sent


def sparse(up, kind, work, name, raw_path):
    m = Mount(up.url(kind + ".json"), work, name)
    rng = random.Random(23)
    try:
        up.reset()
        path = os.path.join(m.path, "obj")
        t = time.monotonic()
        with open(path, "rb", buffering=0) as f, open(raw_path, "rb", buffering=0) as want:
            for _ in range(SPARSE_READS):
                off = rng.randrange(0, SIZE - 4096) // 4096 * 4096
                if os.pread(f.fileno(), 4096, off) != os.pread(want.fileno(), 4096, off):
                    raise RuntimeError("%s: wrong bytes at %d" % (name, off))
        wall = time.monotonic() - t
        sent = up.stats()["total_bytes"]
    finally:
        m.close()
    return wall, sent


def med(values):
    return statistics.median(values)


def main():
    if not os.path.exists(SPOOLFS):
        sys.exit("no %s: build first" % SPOOLFS)
    work = tempfile.mkdtemp(prefix="spoolfs-compress-")
    ups = []
    try:
        store = os.path.join(work, "store")
        os.makedirs(store)
        want_sha, stored_size, raw_path, _ = make_store(store)
        print("object %.0f MiB stored as %.1f MiB (%.2fx) in frames of %d KiB, zstd -%d; "
              "%d run(s)" % (SIZE / (1 << 20), stored_size / (1 << 20), stored_size / SIZE,
                             FRAME >> 10, LEVEL, RUNS))
        loop = Upstream(store)
        capped = Upstream(store, total_rate=CAP)
        ups = [loop, capped]
        results = {}
        for label, up in (("loopback", loop), ("capped %d MiB/s" % (CAP >> 20), capped)):
            for kind in ("raw", "zstd"):
                walls, sent = [], 0
                for run in range(RUNS):
                    w, sent = cold_read(up, kind, work, "%s-%s-%d" % (kind, label[:4], run),
                                        want_sha)
                    walls.append(w)
                results[(label, kind)] = (walls, sent)
                print("%-20s %-5s wall %.3f s (%.3f-%.3f), upstream sent %.1f MiB" % (
                    label, kind, med(walls), min(walls), max(walls), sent / (1 << 20)))
            ratio = med(results[(label, "zstd")][0]) / med(results[(label, "raw")][0])
            target = "<= 1.30" if label == "loopback" else "<= 0.50"
            print("%-20s compressed/raw wall %.2f (target %s)" % (label, ratio, target))
        rw, rs = sparse(loop, "raw", work, "sparse-raw", raw_path)
        zw, zs = sparse(loop, "zstd", work, "sparse-zstd", raw_path)
        print("sparse, %d random 4 KiB reads: raw %.3f s %.1f MiB, compressed %.3f s %.1f MiB:"
              " bytes %.2fx (target <= 1), wall %.2fx (target <= 1.5)" % (
                  SPARSE_READS, rw, rs / (1 << 20), zw, zs / (1 << 20), zs / max(rs, 1),
                  zw / max(rw, 1e-9)))
        return 0
    finally:
        for up in ups:
            up.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Deterministic test store generator.

  mkstore.py --root DIR [--seed 1] [--no-hash PATH]... path:size...

size accepts suffixes K, M, G (KiB, MiB, GiB). Writes pseudo-random content
(same seed + path -> same bytes) and DIR/manifest.json:
  {"version": 1, "files": [{"path": ..., "size": ..., "sha256": ...}]}
(sha256 omitted for --no-hash paths). Importable: make_store(root, specs, seed, no_hash).

Content: per file one 1 MiB random block from random.Random("seed:path"); block i
is that block rotated by a per-block amount with the block index and file offset
stamped into its first 16 bytes, so every block (and every 4 KiB page) differs.
"""

import argparse
import hashlib
import json
import os
import random
import struct
import sys

BLOCK = 1 << 20
_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(s):
    s = str(s).strip().upper()
    if s.endswith("IB"):
        s = s[:-2]
    elif s.endswith("B") and len(s) > 1 and not s[-2].isdigit():
        s = s[:-1]
    suf = s[-1:] if s[-1:] in ("K", "M", "G") else ""
    num = s[:-1] if suf else s
    return int(float(num) * _SUFFIX[suf]) if "." in num else int(num) * _SUFFIX[suf]


def parse_spec(spec):
    if isinstance(spec, (tuple, list)):
        path, size = spec
    else:
        path, _, size = spec.rpartition(":")
        if not path:
            raise ValueError("bad spec %r (want path:size)" % spec)
    return path.lstrip("/"), parse_size(size)


def block_iter(seed, path, size):
    """Yield the file's content in blocks of up to 1 MiB. The yielded memoryview is
    reused: consume it before advancing the iterator."""
    # A file smaller than a block draws only its own size of randomness (at least the
    # stamp's 16 bytes): 1 MiB drawn for each 10-byte file made a 10,000-file store take
    # 30 s.
    span = BLOCK if size >= BLOCK else max(16, size)
    base = random.Random("%s:%s" % (seed, path)).randbytes(span)
    buf = bytearray(span)
    mv = memoryview(buf)
    i = 0
    off = 0
    while off < size:
        h = hashlib.sha256(("%s:%s:%d" % (seed, path, i)).encode()).digest()
        k = int.from_bytes(h[:4], "little") % span
        mv[:span - k] = base[k:]
        mv[span - k:] = base[:k]
        mv[:16] = struct.pack("<QQ", i, off)
        n = min(BLOCK, size - off)
        yield mv[:n]
        off += n
        i += 1


def content(path, size, seed=1):
    """The bytes make_store writes for (path, size, seed): handy for small checks."""
    return b"".join([bytes(b) for b in block_iter(seed, path.lstrip("/"), size)])


def write_file(root, path, size, seed=1, want_hash=True):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full) or root, exist_ok=True)
    h = hashlib.sha256() if want_hash else None
    tmp = full + ".tmp-mkstore"
    with open(tmp, "wb") as f:
        for blk in block_iter(seed, path, size):
            f.write(blk)
            if h is not None:
                h.update(blk)
    os.replace(tmp, full)
    return h.hexdigest() if h is not None else None


def make_store(root, specs, seed=1, no_hash=()):
    """Create files for specs ("path:size" or (path, size)) under root; write and
    return the manifest dict."""
    os.makedirs(root, exist_ok=True)
    no_hash = {p.lstrip("/") for p in no_hash}
    files = []
    for spec in specs:
        path, size = parse_spec(spec)
        if not path or ".." in path.split("/"):
            raise ValueError("bad path %r" % path)
        digest = write_file(root, path, size, seed, want_hash=path not in no_hash)
        ent = {"path": path, "size": size}
        if digest is not None:
            ent["sha256"] = digest
        files.append(ent)
    manifest = {"version": 1, "files": files}
    with open(os.path.join(root, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    return manifest


def main(argv=None):
    ap = argparse.ArgumentParser(description="deterministic test store generator")
    ap.add_argument("--root", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-hash", action="append", default=[], metavar="PATH")
    ap.add_argument("specs", nargs="+", metavar="path:size")
    a = ap.parse_args(argv)
    make_store(a.root, a.specs, seed=a.seed, no_hash=a.no_hash)
    return 0


if __name__ == "__main__":
    sys.exit(main())

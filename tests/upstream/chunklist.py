#!/usr/bin/python3
"""Chunk hashes for tests: the hash lists and version 2 manifest entries that
`spoolfs publish` writes for large objects (doc/manifest.md, "Chunk hashes").

  chunklist.py --root DIR [--chunk-size BYTES] [--min-size 0] [PATH...]

Rewrites DIR/manifest.json (mkstore's version 1, or a version 2) as version 2, giving each
file (the PATHs named, else every file of at least --min-size bytes) a "chunks" entry, and
writes its hash list to DIR/lists/<sha256>. Importable: hash_list(), add_chunks().

A hash list is the 32-byte sha256 of each chunk of the object, in order, concatenated:
ceil(size / chunk_size) * 32 bytes, the last chunk being shorter when the size is not a
multiple. The entry names it by its own sha256:
  "chunks": {"size": CHUNK_SIZE, "sha256": "<sha256 of the hash list>", "url": "lists/<sha256>"}
"""

import argparse
import hashlib
import json
import os
import sys

CHUNK_SIZE = 256 * 1024


def hash_list(path, chunk_size=CHUNK_SIZE):
    """The hash list of the file at path."""
    out = []
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk_size)
            if not b:
                break
            out.append(hashlib.sha256(b).digest())
    return b"".join(out)


def write_list(root, data):
    """Stores a hash list under root/lists/ and returns (its sha256, its relative URL)."""
    h = hashlib.sha256(data).hexdigest()
    os.makedirs(os.path.join(root, "lists"), exist_ok=True)
    with open(os.path.join(root, "lists", h), "wb") as f:
        f.write(data)
    return h, "lists/" + h


def add_chunks(root, manifest=None, chunk_size=CHUNK_SIZE, min_size=0, paths=None,
               mutate_list=None):
    """Gives root's manifest (or `manifest`) chunk hashes and writes it as version 2 to
    root/manifest.json; returns it. mutate_list(path, data) -> data may change a hash list
    before it is stored (a broken publisher): the manifest then names what was stored."""
    if manifest is None:
        with open(os.path.join(root, "manifest.json")) as f:
            manifest = json.load(f)
    entries = manifest.get("entries", manifest.get("files", []))
    for e in entries:
        if e.get("type", "file") != "file" or "pack" in e:
            continue
        if paths is not None and e["path"] not in paths:
            continue
        if paths is None and e["size"] < min_size:
            continue
        data = hash_list(os.path.join(root, e.get("url", e["path"])), chunk_size)
        if mutate_list:
            data = mutate_list(e["path"], data)
        h, url = write_list(root, data)
        e["chunks"] = {"size": chunk_size, "sha256": h, "url": url}
    out = {"version": 2, "entries": entries}
    if manifest.get("packs"):
        out["packs"] = manifest["packs"]
    with open(os.path.join(root, "manifest.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description="give a test store's files chunk hashes")
    ap.add_argument("--root", required=True)
    ap.add_argument("--chunk-size", type=int, default=CHUNK_SIZE)
    ap.add_argument("--min-size", type=int, default=0)
    ap.add_argument("paths", nargs="*")
    a = ap.parse_args(argv)
    add_chunks(a.root, chunk_size=a.chunk_size, min_size=a.min_size, paths=a.paths or None)
    return 0


if __name__ == "__main__":
    sys.exit(main())

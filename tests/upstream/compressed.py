#!/usr/bin/python3
"""Compressed objects for tests: what `spoolfs publish` writes for manifest version 3
(doc/manifest.md, "Version 3: compressed objects"), and manifests that lie about it.

  compressed.py --root DIR [--frame BYTES] [--chunked PATH]... [PATH...]

Rewrites DIR/manifest.json (mkstore's version 1, or a version 2 or 3) as version 3, storing
each file (the PATHs named, else every non-empty file) compressed under DIR/z/<stored
sha256>; a --chunked PATH also gets chunk hashes whose hash list (DIR/lists/<sha256>) holds
36 bytes a chunk. Importable: stored(), hash_list(), stored_entry(), compress_store(),
make_pack() and the hostile helpers below.

The stored object is a series of independent zstd frames, one per `frame` bytes of the
file (the last holds the rest); `frames` lists each frame's stored length, and they add up
to the stored size. With chunks, the frame is the chunk size, `frames` is left out, and
the hash list holds per chunk its sha256 (32 bytes) then its frame's stored length (4
bytes, little-endian).
"""

import argparse
import hashlib
import json
import os
import struct
import sys

import zstandard

FRAME = 256 * 1024
LEVEL = 3


class Stored:
    """An object's stored form: data (the frames, concatenated), lengths (each frame's),
    sha256 (of data), frame (the bytes of the file per frame), and the file's digests per
    frame (its chunks' sha256, for a hash list)."""

    def __init__(self, data, lengths, frame, digests):
        self.data = data
        self.lengths = lengths
        self.sha256 = hashlib.sha256(data).hexdigest()
        self.frame = frame
        self.digests = digests

    @property
    def size(self):
        return len(self.data)


def stored(raw, frame=FRAME, level=LEVEL):
    """raw (bytes) compressed in independent frames of `frame` bytes each (an empty file has
    none, and is never stored so)."""
    c = zstandard.ZstdCompressor(level=level, write_content_size=True)
    parts = [c.compress(raw[at:at + frame]) for at in range(0, len(raw), frame)]
    digests = [hashlib.sha256(raw[at:at + frame]).digest() for at in range(0, len(raw), frame)]
    return Stored(b"".join(parts), [len(p) for p in parts], frame, digests)


def hash_list(st, lengths=None):
    """The 36-byte records of a compressed chunked object's hash list: each chunk's sha256
    then its frame's stored length (lengths: others than st's, for a lying list)."""
    lengths = st.lengths if lengths is None else lengths
    return b"".join(d + struct.pack("<I", n) for d, n in zip(st.digests, lengths))


def stored_entry(st, chunked=False, **override):
    """The manifest's "stored" for st; override replaces or (with None) drops a field."""
    e = {"encoding": "zstd", "size": st.size, "sha256": st.sha256, "frame": st.frame}
    if not chunked:
        e["frames"] = list(st.lengths)
    for k, v in override.items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    return e


def write_object(root, data, sub="z"):
    """Stores data under root/sub/<its sha256>; returns (sha256, relative URL)."""
    h = hashlib.sha256(data).hexdigest()
    os.makedirs(os.path.join(root, sub), exist_ok=True)
    with open(os.path.join(root, sub, h), "wb") as f:
        f.write(data)
    return h, "%s/%s" % (sub, h)


def compress_entry(root, e, raw, frame=FRAME, chunked=False, mutate_lengths=None):
    """Stores raw compressed for manifest entry e and gives e its url and stored (and, when
    chunked, its chunks with a 36-byte hash list). mutate_lengths(lengths) -> lengths makes
    the hash list lie about the frames (the stored object stays true). Returns the Stored."""
    st = stored(raw, frame)
    _, e["url"] = write_object(root, st.data)
    e["stored"] = stored_entry(st, chunked=chunked)
    if chunked:
        lengths = mutate_lengths(list(st.lengths)) if mutate_lengths else None
        h, url = write_object(root, hash_list(st, lengths), sub="lists")
        e["chunks"] = {"size": frame, "sha256": h, "url": url}
    return st


def make_pack(root, members, frame=FRAME, compress=True):
    """A pack of members ({path: bytes}, in order): returns (its "packs" item, the members'
    entries). Stored compressed unless compress is false."""
    raw = b"".join(members.values())
    sha = hashlib.sha256(raw).hexdigest()
    pack = {"sha256": sha, "size": len(raw)}
    if compress:
        st = stored(raw, frame)
        _, pack["url"] = write_object(root, st.data)
        pack["stored"] = stored_entry(st)
    else:
        _, pack["url"] = write_object(root, raw, sub="packs")
    entries, at = [], 0
    for path, data in members.items():
        entries.append({"path": path, "size": len(data),
                        "sha256": hashlib.sha256(data).hexdigest(), "pack": sha, "offset": at})
        at += len(data)
    return pack, entries


def write_manifest(root, entries, packs=(), name="manifest.json"):
    out = {"version": 3, "entries": list(entries)}
    if packs:
        out["packs"] = list(packs)
    with open(os.path.join(root, name), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    return out


def compress_store(root, manifest=None, frame=FRAME, paths=None, chunked=(), packs=(),
                   mutate_lengths=None):
    """Rewrites root's manifest (or `manifest`) as version 3 with the files named in paths
    (None: every non-empty file that is no pack member) stored compressed, those in chunked
    with chunk hashes too; packs: extra "packs" items. Returns the manifest."""
    if manifest is None:
        with open(os.path.join(root, "manifest.json")) as f:
            manifest = json.load(f)
    entries = manifest.get("entries", manifest.get("files", []))
    for e in entries:
        if e.get("type", "file") != "file" or "pack" in e or e["size"] == 0:
            continue
        if paths is not None and e["path"] not in paths and e["path"] not in chunked:
            continue
        with open(os.path.join(root, e.get("url", e["path"])), "rb") as f:
            raw = f.read()
        compress_entry(root, e, raw, frame, chunked=e["path"] in chunked,
                       mutate_lengths=mutate_lengths)
    return write_manifest(root, entries, list(manifest.get("packs", [])) + list(packs))


# ---- hostile: frame tables that lie --------------------------------------------------

def lie(st, how):
    """A "stored" for st that lies in one way doc/manifest.md refuses, and the words the
    refusal must carry: "sum" (lengths add up to one byte more than stored.size), "zero" (a
    frame of 0 bytes), "count" (a frame missing), "bound" (a frame longer than zstd's bound
    for its bytes), "encoding" (gzip), "frame" (not a power of two)."""
    n = list(st.lengths)
    if how == "sum":
        return stored_entry(st, size=st.size - 1), "not stored.size"
    if how == "zero":
        n[0] = 0
        return stored_entry(st, frames=n, size=sum(n)), "stored.frames[0] is not a length"
    if how == "count":
        return stored_entry(st, frames=n[:-1], size=sum(n[:-1])), "stored.frames has"
    if how == "bound":
        n[-1] = st.frame * 2
        return stored_entry(st, frames=n, size=sum(n)), "is not a length from 1 to"
    if how == "encoding":
        return stored_entry(st, encoding="gzip"), 'stored.encoding is not "zstd"'
    if how == "frame":
        return stored_entry(st, frame=st.frame + 1), "stored.frame is not a power of two"
    raise ValueError(how)


def bad_frame(raw, frame, k, kind, level=LEVEL):
    """raw stored with frame k lying about its bytes while the table stays true (the lengths
    are those of the bytes stored): "short" decompresses to a byte less than its share,
    "bomb" to 64 MiB (a decompression bomb), "garbage" is not zstd, "other" decompresses
    to another share's bytes of the same length. Returns the Stored (digests of raw's)."""
    good = stored(raw, frame, level)
    c = zstandard.ZstdCompressor(level=level, write_content_size=True)
    part = raw[k * frame:(k + 1) * frame]
    if kind == "short":
        lying = c.compress(part[:-1])
    elif kind == "bomb":
        lying = c.compress(bytes(64 << 20))
    elif kind == "garbage":
        lying = bytes((i * 7 + 1) & 0xff for i in range(good.lengths[k]))
    elif kind == "other":
        lying = c.compress(bytes(len(part)))
    else:
        raise ValueError(kind)
    parts, at = [], 0
    for i, n in enumerate(good.lengths):
        parts.append(lying if i == k else good.data[at:at + n])
        at += n
    return Stored(b"".join(parts), [len(p) for p in parts], frame, good.digests)


def main(argv=None):
    ap = argparse.ArgumentParser(description="store a test store's files compressed")
    ap.add_argument("--root", required=True)
    ap.add_argument("--frame", type=int, default=FRAME)
    ap.add_argument("--chunked", action="append", default=[], metavar="PATH")
    ap.add_argument("paths", nargs="*")
    a = ap.parse_args(argv)
    compress_store(a.root, frame=a.frame, paths=a.paths or None, chunked=a.chunked)
    return 0


if __name__ == "__main__":
    sys.exit(main())

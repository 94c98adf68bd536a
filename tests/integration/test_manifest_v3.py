"""Manifest version 3 (doc/manifest.md, "Version 3: compressed objects"): a mount of a
manifest whose frame tables lie is refused, naming the entry; a compressed tree shows its
files' own sizes; a chunked file whose hash list's frame lengths do not add up fails its
opens with EIO before any byte of it is fetched. The end-to-end reads of compressed
objects need the transfer engine's decompression (branch zeng) and are skipped until it is
merged.

The stores are written by tests/upstream/compressed.py (what `spoolfs publish` writes)."""

import errno
import json
import os
import subprocess
import sys

import pytest

from conftest import SPOOLFS, daemon_env, is_mounted, read_file
from helpers import errno_of

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "upstream"))
import compressed  # noqa: E402

KiB = 1 << 10
MiB = 1 << 20
FRAME = 256 * KiB


def raw_bytes(size, seed=1):
    """Compressible bytes (a build tree's are): runs of text with a counter in them."""
    out, i = [], 0
    while sum(map(len, out)) < size:
        out.append(b"line %d of file %d: the quick brown fox\n" % (i, seed))
        i += 1
    return b"".join(out)[:size]


def noise(size, seed=1):
    """Bytes zstd cannot shrink (stored all the same: the fixture compresses whatever it is
    given), so that a frame's share of the stored object is as large as its share of the
    file's."""
    h = compressed.hashlib.sha256
    return b"".join(h(b"%d:%d" % (seed, i)).digest() for i in range(size // 32 + 1))[:size]


def refused(tmp_path, manifest):
    """Mounts manifest (a dict, from a local file) and expects a refusal: its stderr."""
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    mnt = tmp_path / "mnt"
    mnt.mkdir(exist_ok=True)
    proc = subprocess.run([SPOOLFS, "-f", str(path), str(mnt)], env=daemon_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode != 0, err
    assert "bad manifest" in err, err
    assert not is_mounted(str(mnt))
    assert "AddressSanitizer" not in err and "ThreadSanitizer" not in err, err
    return err


@pytest.mark.parametrize("how", ["sum", "zero", "count", "bound", "encoding", "frame"])
def test_a_manifest_whose_frames_lie_is_refused(tmp_path, how):
    raw = raw_bytes(3 * FRAME + 1000)
    st = compressed.stored(raw, FRAME)
    lying, words = compressed.lie(st, how)
    entries = [{"path": "ok.txt", "size": 1, "url": "http://127.0.0.1:9/ok"},
               {"path": "lib/big.so", "size": len(raw), "url": "http://127.0.0.1:9/z",
                "stored": lying}]
    err = refused(tmp_path, {"version": 3, "entries": entries})
    assert 'entries[1] "lib/big.so": ' in err and words in err, err


def test_a_pack_whose_frames_lie_is_refused(tmp_path):
    pack, members = compressed.make_pack(str(tmp_path), {"a": raw_bytes(5000), "b": b"x"},
                                         frame=4096)
    pack["url"] = "http://127.0.0.1:9/p"
    pack["stored"]["size"] += 1
    err = refused(tmp_path, {"version": 3, "packs": [pack], "entries": members})
    assert "packs[0]: stored.frames add up to" in err, err


@pytest.mark.parametrize("version", [1, 2])
def test_stored_in_an_older_version_is_refused(tmp_path, version):
    raw = raw_bytes(5000)
    e = {"path": "f", "size": len(raw), "url": "http://127.0.0.1:9/f",
         "stored": compressed.stored_entry(compressed.stored(raw, 4096))}
    err = refused(tmp_path, {"version": version,
                             "files" if version == 1 else "entries": [e]})
    assert '"f": stored needs manifest version 3 (this one is version %d)' % version in err, err


def compressed_tree(store):
    """A tree of every kind: a compressed file, a raw one, an empty one, a compressed
    chunked file and a compressed pack of two members. Returns (manifest URL, {path: raw
    bytes})."""
    root = str(store.root)
    files = {"big.bin": raw_bytes(3 * FRAME + 12345, 1), "raw.txt": os.urandom(3000),
             "empty": b"", "c/chunked.bin": noise(5 * FRAME + 7, 2),
             "p/a.py": raw_bytes(7000, 3), "p/b.py": raw_bytes(100, 4)}
    entries = []
    for path in ("big.bin", "raw.txt", "empty", "c/chunked.bin"):
        raw = files[path]
        e = {"path": path, "size": len(raw)}
        if raw:
            e["sha256"] = compressed.hashlib.sha256(raw).hexdigest()
        if path in ("big.bin", "c/chunked.bin"):
            compressed.compress_entry(root, e, raw, FRAME, chunked=path.startswith("c/"))
        else:
            _, e["url"] = compressed.write_object(root, raw, sub="raw")
        entries.append(e)
    pack, members = compressed.make_pack(root, {p: files[p] for p in ("p/a.py", "p/b.py")},
                                         frame=4096)
    compressed.write_manifest(root, entries + members, [pack])
    return store.up.url("manifest.json"), files


def test_ls_and_stat_show_the_uncompressed_sizes(store, mount):
    url, files = compressed_tree(store)
    m = mount(url)
    for path, raw in files.items():
        assert os.stat(m.p(path)).st_size == len(raw), path
    out = subprocess.run(["ls", "-lR", m.p()], capture_output=True, text=True,
                         check=True).stdout
    shown = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 9 and f[0].startswith("-"):
            shown[f[-1]] = int(f[4])
    assert shown == {os.path.basename(p): len(raw) for p, raw in files.items()}, out
    # Names and sizes come from the manifest: nothing was fetched.
    stats = store.up.stats()
    assert all(s["gets"] == 0 for p, s in stats.get("paths", {}).items()
               if p != "manifest.json"), stats


@pytest.mark.parametrize("lie", ["sum", "zero"])
def test_a_hash_list_whose_frames_do_not_add_up_fails_the_open(store, mount, lie):
    root = str(store.root)
    raw = raw_bytes(4 * FRAME + 99)
    e = {"path": "d/c.bin", "size": len(raw),
         "sha256": compressed.hashlib.sha256(raw).hexdigest()}

    def mutate(lengths):
        if lie == "sum":
            lengths[1] += 1  # one byte more than stored.size
        else:
            lengths[2], lengths[3] = 0, lengths[3] + lengths[2]  # adds up, but a frame of 0
        return lengths

    compressed.compress_entry(root, e, raw, FRAME, chunked=True, mutate_lengths=mutate)
    compressed.write_manifest(root, [e])
    m = mount(store.up.url("manifest.json"))
    assert os.stat(m.p("d/c.bin")).st_size == len(raw)
    for _ in range(2):  # every open, not only the first
        assert errno_of(lambda: open(m.p("d/c.bin"), "rb").close()) == errno.EIO
    log = m.stderr()
    list_url = store.up.url(e["chunks"]["url"])
    want = {"sum": "its hash list's frames add up to",
            "zero": "its hash list's frames[2] is not a length from 1 to"}
    assert "d/c.bin: its hash list from %s does not describe its stored object (" % list_url \
        in log and want[lie] in log, log
    # The hash list was fetched once; nothing of the object was.
    assert store.up.stats("/" + e["chunks"]["url"])["gets"] == 1
    assert store.up.stats("/" + e["url"])["gets"] == 0


# ---- end to end: the engine decompresses (branch zeng) -----------------------------------

def test_reads_of_a_compressed_tree(store, mount):
    url, files = compressed_tree(store)
    m = mount(url)
    for path, raw in files.items():
        assert read_file(m.p(path)) == raw, path
    # Bytes on the wire are the stored ones, each once.
    with open(os.path.join(str(store.root), "manifest.json")) as f:
        man = json.load(f)
    for e in man["entries"] + man["packs"]:
        if "stored" in e:
            assert store.up.stats("/" + e["url"])["bytes"] == e["stored"]["size"], e["url"]


@pytest.mark.parametrize("chunked", [False, True])
def test_sparse_reads_of_a_compressed_file_fetch_their_frames(store, mount, chunked):
    """A file large enough to be read sparsely (8 MiB and over): two 4 KiB reads fetch
    the frames that hold them (and what readahead adds), not the whole stored object."""
    root = str(store.root)
    raw = noise(32 * MiB + 7)
    e = {"path": "s.bin", "size": len(raw), "sha256": compressed.hashlib.sha256(raw).hexdigest()}
    compressed.compress_entry(root, e, raw, FRAME, chunked=chunked)
    compressed.write_manifest(root, [e])
    m = mount(store.up.url("manifest.json"))
    with open(m.p("s.bin"), "rb", buffering=0) as f:
        assert os.pread(f.fileno(), 4096, 60 * FRAME + 100) == raw[60 * FRAME + 100:][:4096]
        assert os.pread(f.fileno(), 100, len(raw) - 50) == raw[-50:]
    got = store.up.stats("/" + e["url"])["bytes"]
    assert 0 < got <= 8 * (e["stored"]["size"] // 128), (got, e["stored"]["size"])


@pytest.mark.parametrize("kind", ["short", "bomb", "garbage", "other"])
def test_a_frame_that_lies_fails_only_its_reads(store, mount, kind):
    root = str(store.root)
    raw = raw_bytes(4 * FRAME + 99)
    st = compressed.bad_frame(raw, FRAME, 1, kind)
    _, url = compressed.write_object(root, st.data)
    h, list_url = compressed.write_object(root, compressed.hash_list(st), sub="lists")
    e = {"path": "bad.bin", "size": len(raw),
         "sha256": compressed.hashlib.sha256(raw).hexdigest(), "url": url,
         "stored": compressed.stored_entry(st, chunked=True),
         "chunks": {"size": FRAME, "sha256": h, "url": list_url}}
    compressed.write_manifest(root, [e])
    m = mount(store.up.url("manifest.json"))
    with open(m.p("bad.bin"), "rb", buffering=0) as f:
        assert os.pread(f.fileno(), 4096, 0) == raw[:4096]
        assert errno_of(lambda: os.pread(f.fileno(), 4096, FRAME + 10)) == errno.EIO
        assert os.pread(f.fileno(), 4096, 2 * FRAME) == raw[2 * FRAME:][:4096]

"""`spoolfs publish` compresses (manifest version 3, doc/manifest.md "Version 3: compressed
objects"; doc/publish.md "Compression"): every stored object is independent zstd frames of
the content, named by the sha256 of its stored bytes, with its frame table inline or in the
36-byte records of its hash list; an object that does not shrink enough is stored as it is;
the same content twice is one object; --no-compress writes version 2. Then the store side:
verify checks stored sizes and digests (a corrupted stored object is found), gc keeps what a
version 3 manifest reaches, and refuses one with a field it does not know.
"""

import hashlib
import json
import os
import re
import shutil

import pytest
import zstandard

from helpers import publish_tree
from test_gc import DAY, age, keys, run
from test_publish_s3 import BUCKET, compare, publish as publish_s3, verify
from test_s3 import aws_env, s3_server  # noqa: F401

KIB, MIB = 1 << 10, 1 << 20
CHUNK = 256 * KIB


def sha(data):
    return hashlib.sha256(data).hexdigest()


def text(n, seed=0):
    """n bytes of text that compress well, but not to nothing (a tree's sources)."""
    out, i, have = [], seed, 0
    while have < n:
        out.append(b"def function_%d(x):\n    return x * %d + %d  # line %d\n" %
                   (i % 977, i % 31, i % 7, i))
        have += len(out[-1])
        i += 1
    return b"".join(out)[:n]


def make_tree(src):
    """Files of every kind publish treats: chunked (over 1 MiB), inline frames, incompressible,
    packed, empty, the same content twice, and one that shrinks by about half."""
    (src / "lib" / "pkg").mkdir(parents=True)
    (src / "copy").mkdir()
    files = {
        "big.py": text(CHUNK * 5 + 12345),          # 6 chunks, the last short
        "lib/mid.py": text(300 * KIB, seed=7),       # 2 frames, inline table
        "lib/random.bin": os.urandom(200 * KIB),     # stored as it is
        "copy/big.py": text(CHUNK * 5 + 12345),      # the same content as big.py
        "lib/empty": b"",
        "half.bin": b"".join(os.urandom(32) + bytes(32) for _ in range(4096)),
    }
    for i in range(30):
        files["lib/pkg/m%02d.py" % i] = text(500 + 300 * i, seed=i)
    for rel, data in files.items():
        (src / rel).write_bytes(data)
    return files


def load(out, name="manifest.json"):
    with open(out / name) as f:
        return json.load(f)


def frame_table(out, obj, hash_list_url=None):
    """An object's stored frame lengths: inline, or from its hash list's 36-byte records."""
    st = obj["stored"]
    if hash_list_url is None:
        return st["frames"]
    hl = (out / hash_list_url).read_bytes()
    assert len(hl) % 36 == 0
    return [int.from_bytes(hl[i + 32:i + 36], "little") for i in range(0, len(hl), 36)]


def content_of(out, obj, size, hash_list_url=None):
    """An object's content, each frame decompressed on its own and checked for its exact
    share; the stored bytes checked against their name and the manifest's stored fields."""
    data = (out / obj["url"]).read_bytes()
    st = obj.get("stored")
    if st is None:
        assert obj["url"].endswith("/" + sha(data))
        return data
    assert st["encoding"] == "zstd"
    assert sha(data) == st["sha256"] and obj["url"] == "objects/%s/%s" % (sha(data)[:2],
                                                                          sha(data))
    frames = frame_table(out, obj, hash_list_url)
    assert len(frames) == (size + st["frame"] - 1) // st["frame"]
    assert sum(frames) == len(data) == st["size"]
    parts, off = [], 0
    for i, n in enumerate(frames):
        part = zstandard.ZstdDecompressor().decompress(data[off:off + n])
        assert len(part) == min(st["frame"], size - i * st["frame"]), (obj["url"], i)
        parts.append(part)
        off += n
    return b"".join(parts)


def check_tree(out, files, name="manifest.json"):
    """Every file of the manifest read back from the store equals its source; -> manifest."""
    man = load(out, name)
    packs = {p["sha256"]: p for p in man["packs"]}
    seen = set()
    for e in man["entries"]:
        if e.get("type", "file") != "file":
            continue
        want = files[e["path"]]
        if "pack" in e:
            p = packs[e["pack"]]
            whole = content_of(out, p, p["size"])
            assert sha(whole) == p["sha256"] and len(whole) == p["size"]
            got = whole[e["offset"]:e["offset"] + e["size"]]
        else:
            hl = e["chunks"]["url"] if "chunks" in e and "stored" in e else None
            got = content_of(out, e, e["size"], hl)
        assert got == want and sha(got) == e["sha256"], e["path"]
        seen.add(e["path"])
    assert seen == set(files)
    return man


def entry(man, path):
    return next(e for e in man["entries"] if e["path"] == path)


def test_publish_compresses_in_frames_named_by_stored_bytes(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    files = make_tree(src)
    _, stdout, err = publish_tree(src, out, compress=True)
    assert "warning" not in err
    man = check_tree(out, files)
    assert man["version"] == 3
    big = entry(man, "big.py")
    # Chunked: frame = chunk size, no inline table, and 36-byte records that add up.
    assert big["stored"]["frame"] == big["chunks"]["size"] == CHUNK
    assert "frames" not in big["stored"]
    hl = (out / big["chunks"]["url"]).read_bytes()
    assert len(hl) == 6 * 36 and sha(hl) == big["chunks"]["sha256"]
    data = files["big.py"]
    for k in range(6):  # each record: the chunk's own sha256, then its frame's length
        assert hl[36 * k:36 * k + 32] == hashlib.sha256(data[k * CHUNK:(k + 1) * CHUNK]).digest()
    assert big["stored"]["size"] < len(data) // 3
    mid = entry(man, "lib/mid.py")
    assert mid["stored"]["frame"] == CHUNK and len(mid["stored"]["frames"]) == 2
    # Incompressible: stored as it is, named by its content.
    rnd = entry(man, "lib/random.bin")
    assert "stored" not in rnd and rnd["url"].endswith(rnd["sha256"])
    assert "stored" not in entry(man, "lib/empty")
    # The same content twice: one object (and one hash list).
    copy = entry(man, "copy/big.py")
    assert copy["url"] == big["url"] and copy["chunks"] == big["chunks"]
    # The pack is compressed too, its sha256 and size its content's.
    assert len(man["packs"]) == 1 and "stored" in man["packs"][0]
    # Nothing in objects/ but what the manifest names.
    named = {e["url"] for e in man["entries"] if "url" in e}
    named |= {e["chunks"]["url"] for e in man["entries"] if "chunks" in e}
    named |= {p["url"] for p in man["packs"]}
    stored = {str(p.relative_to(out)) for p in out.glob("objects/*/*")}
    assert stored == named
    # The summary says both sizes.
    m = re.search(r"; ([\d.]+ \w+) raw, ([\d.]+ \w+) stored;", stdout)
    assert m, stdout
    # verify (deep): stored sizes and stored digests.
    status, vout, verr = verify(out, "--deep")
    assert status == 0, vout + verr


def test_no_compress_writes_version_2(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    files = make_tree(src)
    publish_tree(src, out, "--no-compress", compress=True)  # the flag itself
    man = check_tree(out, files)
    assert man["version"] == 2
    assert all("stored" not in x for x in man["entries"] + man["packs"])
    big = entry(man, "big.py")
    assert big["url"].endswith(big["sha256"])
    assert (out / big["chunks"]["url"]).stat().st_size == 6 * 32


def test_level_and_min_saving(tmp_path):
    src = tmp_path / "src"
    files = make_tree(src)
    sizes = {}
    for level in ("1", "19"):
        out = tmp_path / ("out" + level)
        publish_tree(src, out, "--compress-level", level, compress=True)
        man = check_tree(out, files)
        sizes[level] = entry(man, "big.py")["stored"]["size"]
    assert sizes["19"] < sizes["1"], sizes
    # half.bin shrinks by about half: stored at 40 %, as it is at 60 %.
    for saving, compressed in (("40", True), ("60", False), ("0", True)):
        out = tmp_path / ("saving" + saving)
        publish_tree(src, out, "--compress-min-saving", saving, compress=True)
        man = check_tree(out, files)
        assert ("stored" in entry(man, "half.bin")) == compressed, saving
        assert "stored" not in entry(man, "lib/random.bin")
    for args, why in ((("--compress-level", "0"), "--compress-level takes 1 to 19"),
                      (("--compress-level", "20"), "--compress-level takes 1 to 19"),
                      (("--compress-level", "3x"), "--compress-level takes 1 to 19"),
                      (("--compress-min-saving", "100"), "--compress-min-saving takes a percent"),
                      (("--compress-min-saving", "-1"), "--compress-min-saving takes a percent"),
                      (("--no-compress", "--compress-level", "3"), "give one")):
        out = tmp_path / "refused"
        status, _, err = publish_tree(src, out, *args, check=False, compress=True)
        assert status == 2 and why in err, (args, err)
        assert not out.exists()


def test_a_large_incompressible_file_is_judged_by_its_prefix(tmp_path):
    """Over 8 MiB, a file whose prefix does not shrink is copied as it is without the rest
    being tried (doc/publish.md); a compressible one of that size is compressed whole."""
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    files = {"weights.bin": os.urandom(9 * MIB + 5),
             "log.txt": text(9 * MIB + 5),
             "mixed.bin": text(8 * MIB) + os.urandom(MIB)}
    for rel, data in files.items():
        (src / rel).write_bytes(data)
    publish_tree(src, out, compress=True)
    man = check_tree(out, files)
    assert "stored" not in entry(man, "weights.bin")
    assert "stored" in entry(man, "log.txt") and "stored" in entry(man, "mixed.bin")
    assert entry(man, "weights.bin")["size"] == 9 * MIB + 5


@pytest.mark.skipif(not shutil.which("strace"), reason="needs strace")
def test_the_same_content_is_compressed_once(tmp_path):
    """Six copies of a file (no hash list: under --chunk-over) make one object, written to
    one temporary file: the others waited for its stored form instead of compressing their
    own (strace counts the temporary files the publish created)."""
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    data = text(900 * KIB, seed=3)
    files = {"c%d.py" % i: data for i in range(6)}
    files["other.py"] = text(900 * KIB, seed=4)  # the same size, another content
    for rel, d in files.items():
        (src / rel).write_bytes(d)
    trace = tmp_path / "trace"
    publish_tree(src, out, compress=True, wrap=["strace", "-f", "-qq", "-e", "trace=openat",
                                                "-o", str(trace)])
    made = [line for line in trace.read_text().splitlines()
            if "objects/tmp." in line and "O_CREAT" in line]
    assert len(made) == 2, made  # one per content
    man = check_tree(out, files)
    assert len({entry(man, rel)["url"] for rel in files}) == 2


def test_existing_objects_are_checked_by_stored_size_and_bytes(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    files = make_tree(src)
    publish_tree(src, out, compress=True)
    man = load(out)
    path = out / entry(man, "big.py")["url"]
    good = path.read_bytes()
    # Cut short: its stored size is wrong, and a publish replaces it.
    path.write_bytes(good[:100])
    _, _, err = publish_tree(src, out, compress=True)
    assert "replaced: it held 100 bytes, not %d" % len(good) in err, err
    assert path.read_bytes() == good
    # A flipped byte keeps the size: only --verify-existing re-hashes the stored bytes.
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 1
    path.write_bytes(bytes(bad))
    _, _, err = publish_tree(src, out, compress=True)
    assert "replaced" not in err and path.read_bytes() == bytes(bad)
    _, _, err = publish_tree(src, out, "--verify-existing", compress=True)
    assert "its bytes did not hash to its name" in err, err
    assert path.read_bytes() == good
    check_tree(out, files)


def test_s3_compressed_publish_then_verify_finds_a_corrupted_stored_object(s3_server,
                                                                           tmp_path):
    s3 = s3_server()
    s3.create_bucket(BUCKET)
    src = tmp_path / "src"
    make_tree(src)
    dest = "s3://%s/z" % BUCKET
    _, out, _ = publish_s3(s3, src, dest, "--dry-run", compress=True)
    assert re.search(r"the tree's objects [\d.]+ \w+ raw, [\d.]+ \w+ stored", out), out
    _, out, _ = publish_s3(s3, src, dest, compress=True)
    assert re.search(r"the tree's objects [\d.]+ \w+ raw, [\d.]+ \w+ stored", out), out
    man = json.loads(s3.get(BUCKET, "z/manifest.json")[2])
    assert man["version"] == 3
    big = entry(man, "big.py")
    key = "z/" + big["url"]
    stored = s3.get(BUCKET, key)[2]
    assert len(stored) == big["stored"]["size"] and sha(stored) == big["stored"]["sha256"]
    status, vout, verr = verify(dest, "--endpoint", s3.endpoint, "--deep")
    assert status == 0, vout + verr
    bad = bytearray(stored)
    bad[10] ^= 1
    s3.put(BUCKET, key, bytes(bad))
    status, vout, _ = verify(dest, "--endpoint", s3.endpoint, "--deep")
    assert status == 1
    assert "%s: its bytes do not hash to its sha256" % big["url"] in vout, vout
    s3.put(BUCKET, key, stored[:-1])
    status, vout, _ = verify(dest, "--endpoint", s3.endpoint)
    assert status == 1
    assert "%s: %d bytes, not %d" % (big["url"], len(stored) - 1, len(stored)) in vout, vout
    assert s3.auth_failures() == []


def test_gc_keeps_what_a_version_3_manifest_reaches(tmp_path):
    src = tmp_path / "src"
    files = make_tree(src)
    old = tmp_path / "old"
    old.mkdir()
    (old / "gone.py").write_bytes(text(100 * KIB, seed=99))
    out = tmp_path / "out"
    run("publish", old, out, "--manifest", "r1.json", check=0)
    run("publish", src, out, "--manifest", "r2.json", check=0)
    gone = entry(load(out, "r1.json"), "gone.py")
    assert "stored" in gone
    age(out, 2 * DAY)
    age(out / "r1.json", 3 * DAY)
    before = keys(out)
    _, text_, _ = run("gc", out, "--keep-last", "1", check=0)
    assert keys(out) == before - {"r1.json", gone["url"]}, text_
    check_tree(out, files, "r2.json")
    run("verify", out, "--manifest", "r2.json", "--deep", check=0)


def test_gc_refuses_a_version_3_manifest_with_a_field_it_does_not_know(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    make_tree(src)
    orphan = tmp_path / "orphan"
    orphan.mkdir()
    (orphan / "o.bin").write_bytes(os.urandom(100 * KIB))
    run("publish", orphan, out, "--manifest", "r0.json", check=0)
    os.unlink(out / "r0.json")
    run("publish", src, out, check=0)
    age(out, 2 * DAY)
    before = keys(out)
    good = (out / "manifest.json").read_text()
    assert '"stored":{"encoding":"zstd"' in good
    for text_, why in (
            (good.replace('"encoding":"zstd"', '"encoding":"zstd","dict":"x"', 1),
             '.stored has a field it does not know: "dict"'),
            (good.replace('"stored":{', '"stored2":{"a":1},"stored":{', 1),
             'has a field it does not know: "stored2"'),
            (good.replace('"version":3', '"version":2', 1), ".stored in a version 2 manifest"),
            (good.replace('"version":3', '"version":4', 1), "manifest version 4")):
        assert text_ != good
        (out / "manifest.json").write_text(text_)
        age(out / "manifest.json", 2 * DAY)
        _, _, err = run("gc", out, "--grace", "0")
        assert keys(out) == before, err
        assert why in err and "refusing to delete anything" in err, err
    (out / "manifest.json").write_text(good)
    run("gc", out, "--grace", "0", check=0)
    assert len(keys(out)) == len(before) - 1  # the orphan went, nothing else


def test_a_mount_of_a_compressed_tree_reads_every_file(tmp_path, mount):
    src, out = tmp_path / "src", tmp_path / "out"
    make_tree(src)
    publish_tree(src, out, compress=True)
    assert load(out)["version"] == 3
    m = mount(str(out / "manifest.json"))
    compare(m.p(), src)

"""`spoolfs publish SRC OUT`: the manifest (version 2) and objects it writes, checked against
the tree with Python: every entry, every object's sha256 against its name, every pack
member's bytes at its offset. Re-publishing writes only what changed; refusals leave the
old manifest as it was and no temporary file. No mount here (the mount round trip of a
published tree is the loader's test)."""
import hashlib
import json
import os
import socket
import stat
import subprocess

import pytest

from conftest import SPOOLFS, daemon_env
from helpers import publish_tree, sha256_file

KIB = 1024
MIB = 1024 * KIB


def publish(src, out, *args, check=True):
    # Chunk hash lists are their own test's (test_chunk_hash_lists): the others check
    # exactly which objects a tree makes.
    if "--chunk-over" not in args:
        args = ("--chunk-over", "0") + tuple(args)
    return publish_tree(src, out, *args, check=check)


def load(out, name="manifest.json"):
    with open(os.path.join(out, name), "rb") as f:
        return json.loads(f.read())


def objects(out):
    """{sha256 name: (inode, mtime_ns)} of every file under OUT/objects."""
    found = {}
    for dirpath, _, files in os.walk(os.path.join(out, "objects")):
        for name in files:
            st = os.lstat(os.path.join(dirpath, name))
            found[name] = (st.st_ino, st.st_mtime_ns)
    return found


def stray_temps(out):
    return [os.path.join(d, n) for d, _, files in os.walk(out) for n in files
            if n.startswith("tmp.") or ".tmp." in n]


def expected_tree(src):
    """What the manifest must say of src: {path: fields}, from lstat."""
    want = {}
    for dirpath, dirs, files in os.walk(src):
        for name in dirs + files:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, src)
            st = os.lstat(full)
            mode = "%04o" % (st.st_mode & 0o777)
            if stat.S_ISLNK(st.st_mode):
                want[rel] = {"type": "symlink", "target": os.readlink(full),
                             "mtime": int(st.st_mtime)}
            elif stat.S_ISDIR(st.st_mode):
                want[rel] = {"type": "directory", "mode": mode, "mtime": int(st.st_mtime)}
            elif stat.S_ISREG(st.st_mode):
                want[rel] = {"type": "file", "size": st.st_size, "sha256": sha256_file(full),
                             "mode": mode, "mtime": int(st.st_mtime)}
    return want


def check_output(src, out, name="manifest.json", pack_under=64 * KIB, pack_max=4 * MIB):
    """Checks OUT against SRC; returns the manifest."""
    man = load(out, name)
    assert man["version"] == 2
    entries = man["entries"]
    paths = [e["path"] for e in entries]
    assert paths == sorted(paths, key=lambda p: p.encode()), "entries are not sorted by path"
    assert len(set(paths)) == len(paths)

    # Every object is named by its bytes' sha256, under its first two hex digits.
    for dirpath, _, files in os.walk(os.path.join(out, "objects")):
        for fname in files:
            assert not fname.startswith("tmp."), "stray temporary object " + fname
            assert os.path.basename(dirpath) == fname[:2]
            assert sha256_file(os.path.join(dirpath, fname)) == fname

    packs = {}
    for p in man.get("packs", []):
        assert set(p) == {"sha256", "size", "url"}
        assert p["url"] == "objects/%s/%s" % (p["sha256"][:2], p["sha256"])
        blob = os.path.join(out, p["url"])
        assert os.path.getsize(blob) == p["size"] <= pack_max
        assert p["sha256"] not in packs
        packs[p["sha256"]] = {"size": p["size"], "members": []}

    want = expected_tree(src)
    got = {}
    for e in entries:
        kind = e.get("type", "file")
        fields = {k: v for k, v in e.items() if k not in ("path", "url", "pack", "offset")}
        fields["type"] = kind
        got[e["path"]] = fields
        if kind != "file":
            assert "url" not in e and "size" not in e
            continue
        if "pack" in e:
            assert "url" not in e
            assert 0 < e["size"] < pack_under
            pack = packs[e["pack"]]
            assert e["offset"] + e["size"] <= pack["size"]
            pack["members"].append(e)
            with open(os.path.join(out, "objects", e["pack"][:2], e["pack"]), "rb") as f:
                f.seek(e["offset"])
                data = f.read(e["size"])
            with open(os.path.join(src, e["path"]), "rb") as f:
                assert data == f.read(), "%s: pack bytes differ" % e["path"]
        else:
            assert e["url"] == "objects/%s/%s" % (e["sha256"][:2], e["sha256"])
            assert os.path.getsize(os.path.join(out, e["url"])) == e["size"]
    assert got == want

    # A pack: files of one directory, in name order, back to back from offset 0.
    for sha, pack in packs.items():
        members = pack["members"]
        assert len(members) >= 2, "pack %s has %d members" % (sha, len(members))
        dirs = {os.path.dirname(m["path"]) for m in members}
        assert len(dirs) == 1
        assert [m["path"] for m in members] == sorted(m["path"] for m in members)
        offset = 0
        for m in members:
            assert m["offset"] == offset
            offset += m["size"]
        assert offset == pack["size"]
    assert sorted(sorted(m["path"] for m in p["members"]) for p in packs.values()) == \
        sorted(planned_packs(src, pack_under, pack_max))
    assert not stray_temps(out)
    return man


def planned_packs(src, pack_under, pack_max):
    """The contract's packs: per directory, files of 1..pack_under-1 bytes in name order,
    a new pack when the next would pass pack_max; a pack of one file is not made."""
    groups = []
    for dirpath, _, files in os.walk(src):
        current, size = [], 0
        for name in sorted(files, key=os.fsencode):
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            if not stat.S_ISREG(st.st_mode) or not 0 < st.st_size < pack_under:
                continue
            if current and size + st.st_size > pack_max:
                groups.append(current)
                current, size = [], 0
            current.append(os.path.relpath(full, src))
            size += st.st_size
        groups.append(current)
    return [g for g in groups if len(g) > 1]


def make_tree(src):
    os.makedirs(os.path.join(src, "empty", "nested", "deeper"))
    os.makedirs(os.path.join(src, "bin"))
    os.makedirs(os.path.join(src, "lib"))
    with open(os.path.join(src, "bin", "tool"), "wb") as f:
        f.write(b"#!/bin/sh\necho tool\n")
    os.chmod(os.path.join(src, "bin", "tool"), 0o755)
    with open(os.path.join(src, "bin", "data"), "wb") as f:
        f.write(b"plain\n")
    os.chmod(os.path.join(src, "bin", "data"), 0o640)
    os.symlink("tool", os.path.join(src, "bin", "cc"))                 # relative
    os.symlink("/etc/hostname", os.path.join(src, "bin", "abs"))       # absolute
    os.symlink("../nowhere/at/all", os.path.join(src, "bin", "dead"))  # dangling
    os.symlink("../lib", os.path.join(src, "bin", "libdir"))           # to a directory
    with open(os.path.join(src, "lib", "libz.so.1.2.13"), "wb") as f:
        f.write(os.urandom(200 * KIB))
    os.link(os.path.join(src, "lib", "libz.so.1.2.13"), os.path.join(src, "lib", "hardlink"))
    os.link(os.path.join(src, "bin", "data"), os.path.join(src, "lib", "data-link"))
    open(os.path.join(src, "empty-file"), "wb").close()
    with open(os.path.join(src, "name with spaces é ü 日本.txt"), "wb") as f:
        f.write("ünïcödé\n".encode())
    with open(os.path.join(src, "big.bin"), "wb") as f:
        f.write(os.urandom(3 * MIB + 12345))
    many = os.path.join(src, "many")
    os.makedirs(many)
    for i in range(2000):
        with open(os.path.join(many, "f%04d.txt" % i), "wb") as f:
            f.write(os.urandom(100 + (i * 37) % 5000))
    os.utime(os.path.join(src, "bin"), (1600000000, 1600000000))
    os.utime(os.path.join(src, "empty", "nested"), (1500000000, 1500000000))


def test_publish_a_tree(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    make_tree(src)
    _, stdout, err = publish(src, out)
    assert "warning" not in err
    man = check_output(src, out)
    by_path = {e["path"]: e for e in man["entries"]}
    assert by_path["empty/nested/deeper"]["type"] == "directory"
    assert by_path["empty/nested"]["mtime"] == 1500000000
    assert by_path["bin/tool"]["mode"] == "0755" and by_path["bin/data"]["mode"] == "0640"
    assert by_path["bin/abs"]["target"] == "/etc/hostname"
    assert by_path["lib/hardlink"]["sha256"] == by_path["lib/libz.so.1.2.13"]["sha256"]
    assert by_path["empty-file"]["size"] == 0 and "url" in by_path["empty-file"]
    # 2,000 small files in one directory fill a handful of packs, not 2,000 objects.
    many = [e for e in man["entries"] if e["path"].startswith("many/")]
    assert len(many) == 2000 and all("pack" in e for e in many)
    assert 1 < len({e["pack"] for e in many}) < 5
    assert stdout.startswith("spoolfs publish: 2008 files, 6 directories, 4 symlinks")
    # The same tree gives the same bytes, however many workers.
    publish(src, tmp_path / "out1", "-j", "1")
    publish(src, tmp_path / "out4", "-j", "4")
    first = (out / "manifest.json").read_bytes()
    assert (tmp_path / "out1" / "manifest.json").read_bytes() == first
    assert (tmp_path / "out4" / "manifest.json").read_bytes() == first
    # Objects are readable by a server that does not run as us.
    some = next(iter(objects(out)))
    assert os.stat(out / "objects" / some[:2] / some).st_mode & 0o044 == 0o044
    assert os.stat(out / "manifest.json").st_mode & 0o044 == 0o044


def test_pack_caps(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    os.makedirs(src / "d")
    for i in range(40):
        (src / "d" / ("f%02d" % i)).write_bytes(os.urandom(1000 + i))
    (src / "d" / "large").write_bytes(os.urandom(5000))
    publish(src, out, "--pack-under", "4K", "--pack-max", "8K")
    man = check_output(src, out, pack_under=4 * KIB, pack_max=8 * KIB)
    assert len(man["packs"]) == 6  # 40 files of ~1 KB, at most 8 KiB each
    assert "url" in next(e for e in man["entries"] if e["path"] == "d/large")
    # --pack-under 0: no packs at all.
    publish(src, tmp_path / "nopack", "--pack-under", "0")
    man = check_output(src, tmp_path / "nopack", pack_under=0)
    assert man["packs"] == []


def test_republish_writes_only_new_objects(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    make_tree(src)
    publish(src, out)
    before = objects(out)
    old_manifest = (out / "manifest.json").read_bytes()

    # Nothing changed: nothing written, the same manifest.
    _, stdout, _ = publish(src, out)
    assert objects(out) == before
    assert (out / "manifest.json").read_bytes() == old_manifest
    assert " 0 new objects" in stdout

    # One large file changed: exactly its new object.
    with open(src / "big.bin", "r+b") as f:
        f.seek(MIB)
        f.write(b"changed")
    publish(src, out)
    after = objects(out)
    new = set(after) - set(before)
    assert new == {sha256_file(src / "big.bin")}
    assert {k: after[k] for k in before} == before, "an existing object was rewritten"
    assert (out / "manifest.json").read_bytes() != old_manifest
    check_output(src, out)

    # One packed file changed: exactly the new pack that holds it.
    before = after
    with open(src / "many" / "f1000.txt", "r+b") as f:
        f.write(b"X")
    publish(src, out)
    man = check_output(src, out)
    after = objects(out)
    entry = next(e for e in man["entries"] if e["path"] == "many/f1000.txt")
    assert set(after) - set(before) == {entry["pack"]}
    assert {k: after[k] for k in before} == before


def test_inserting_a_small_file_changes_only_its_directory_packs(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    for d in ("a", "b", "c"):
        os.makedirs(src / d)
        for i in range(30):
            (src / d / ("f%02d" % i)).write_bytes(os.urandom(2000))
    args = ("--pack-under", "4K", "--pack-max", "16K")
    publish(src, out, *args)

    def packs_by_dir(man):
        found = {}
        for e in man["entries"]:
            if "pack" in e:
                found.setdefault(os.path.dirname(e["path"]), set()).add(e["pack"])
        return found

    old = packs_by_dir(check_output(src, out, pack_under=4 * KIB, pack_max=16 * KIB))
    before = objects(out)
    (src / "b" / "f10x").write_bytes(os.urandom(2000))
    publish(src, out, *args)
    new = packs_by_dir(check_output(src, out, pack_under=4 * KIB, pack_max=16 * KIB))
    assert new["a"] == old["a"] and new["c"] == old["c"]
    assert new["b"] != old["b"]
    written = set(objects(out)) - set(before)
    assert written and written <= new["b"]


def test_manifest_name_shares_the_objects(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    os.makedirs(src)
    (src / "one").write_bytes(os.urandom(100 * KIB))
    publish(src, out)
    before = objects(out)
    (src / "two").write_bytes(os.urandom(100 * KIB))
    publish(src, out, "--manifest", "release-2.json")
    assert [e["path"] for e in load(out)["entries"]] == ["one"]
    assert [e["path"] for e in load(out, "release-2.json")["entries"]] == ["one", "two"]
    assert set(objects(out)) - set(before) == {sha256_file(src / "two")}
    for bad in ("a/b", ".hidden", "objects", ""):
        rc, _, err = publish(src, out, "--manifest", bad, check=False)
        assert rc == 2 and "--manifest" in err


def test_special_files_are_skipped_with_a_warning(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    os.makedirs(src / "sub")
    (src / "sub" / "kept").write_bytes(b"kept")
    os.mkfifo(src / "sub" / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(src / "sock"))
    os.mknod(src / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    os.makedirs(src / ".spoolfs")   # the mount's own status directory: not publishable
    os.makedirs(src / "sub" / ".spoolfs")  # anywhere else it is a name like any other
    try:
        _, _, err = publish(src, out)
    finally:
        sock.close()
    lines = err.splitlines()
    assert sum("warning" in line and line.endswith("sub/fifo: skipped: a FIFO") for line in lines) == 1
    assert sum("warning" in line and "sock: skipped: a socket" in line for line in lines) == 1
    assert sum("warning" in line and "null: skipped: a character device" in line
               for line in lines) == 1
    assert sum("warning" in line and "/.spoolfs: skipped" in line for line in lines) == 1
    assert len([line for line in lines if "warning" in line]) == 4
    paths = [e["path"] for e in load(out)["entries"]]
    assert paths == ["sub", "sub/.spoolfs", "sub/kept"]


def without_dac(cmd):
    """cmd run as root without the capabilities that read what its mode forbids."""
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--inh-caps=-all",
            "--"] + cmd


def publish_without_dac(src, out):
    proc = subprocess.run(without_dac([SPOOLFS, "publish", "--no-compress", str(src), str(out)]),
                          capture_output=True, timeout=120, env=daemon_env())
    return proc.returncode, proc.stderr.decode("utf-8", "replace")


@pytest.mark.parametrize("what", ["file", "directory"])
def test_unreadable_fails_and_keeps_the_old_manifest(tmp_path, what):
    src, out = tmp_path / "src", tmp_path / "out"
    make_tree(src)
    publish(src, out)
    old_manifest = (out / "manifest.json").read_bytes()
    before = objects(out)
    (src / "new-large").write_bytes(os.urandom(300 * KIB))  # would be a new object
    if what == "file":
        victim = src / "many" / "f0500.txt"
        victim.write_bytes(b"changed, and nobody may read it")
    else:
        victim = src / "lib" / "secret"
        os.makedirs(victim)
        (victim / "inside").write_bytes(b"x")
    os.chmod(victim, 0)
    try:
        rc, err = publish_without_dac(src, out)
    finally:
        os.chmod(victim, 0o755)
    assert rc == 1, err
    assert "%s: Permission denied" % victim in err
    assert (out / "manifest.json").read_bytes() == old_manifest
    assert not stray_temps(out)
    if what == "directory":  # found by the walk, before any object is written
        assert objects(out) == before


def test_out_inside_src_is_refused(tmp_path):
    src = tmp_path / "src"
    os.makedirs(src / "sub")
    (src / "f").write_bytes(b"f")
    for out in (src / "out", src / "sub" / "out", src, src / "sub"):
        rc, _, err = publish(src, out, check=False)
        assert rc == 1 and "inside SRC_DIR" in err, err
    assert not os.path.exists(src / "out") and not os.path.exists(src / "sub" / "out")
    # Through a symlink to the source, too.
    os.symlink(src, tmp_path / "alias")
    rc, _, err = publish(tmp_path / "alias", src / "out", check=False)
    assert rc == 1 and "inside SRC_DIR" in err


def test_names_that_are_not_utf8_are_refused(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    os.makedirs(src)
    (src / "fine").write_bytes(b"x")
    with open(os.path.join(os.fsencode(src), b"bad\xff\xfename"), "wb") as f:
        f.write(b"x")
    rc, _, err = publish(src, out, check=False)
    assert rc == 1
    assert "bad\\xff\\xfename: the name is not UTF-8" in err
    assert not os.path.exists(out / "manifest.json")
    os.unlink(os.path.join(os.fsencode(src), b"bad\xff\xfename"))
    os.symlink(b"target\xc0\xaf", os.path.join(os.fsencode(src), b"link"))
    rc, _, err = publish(src, out, check=False)
    assert rc == 1 and "link: the symlink's target is not UTF-8" in err


def test_bad_usage(tmp_path):
    for args in ([], ["only-one"], ["a", "b", "--pack-under", "-1"], ["a", "b", "-j", "0"],
                 ["a", "b", "--pack-under", "8M", "--pack-max", "4M"], ["a", "b", "--nope"]):
        proc = subprocess.run([SPOOLFS, "publish"] + args, capture_output=True, timeout=30)
        assert proc.returncode == 2, args
    proc = subprocess.run([SPOOLFS, "publish", "--help"], capture_output=True, timeout=30)
    assert proc.returncode == 0 and b"--pack-under" in proc.stdout


def test_an_empty_tree(tmp_path):
    os.makedirs(tmp_path / "src")
    publish(tmp_path / "src", tmp_path / "out")
    assert load(tmp_path / "out") == {"version": 2, "packs": [], "entries": []}


def test_a_large_file(tmp_path):
    """Larger than the stretches whose writeback starts while hashing goes on."""
    src, out = tmp_path / "src", tmp_path / "out"
    os.makedirs(src)
    with open(src / "large", "wb") as f:
        for _ in range(40):
            f.write(os.urandom(MIB))
        f.write(b"tail")
    _, stdout, _ = publish(src, out)
    assert "1 new objects (40.0 MiB)" in stdout
    check_output(src, out)
    _, stdout, _ = publish(src, out)
    assert " 0 new objects" in stdout and "1 already there" in stdout


def test_a_full_disk_fails_and_keeps_the_old_manifest(tmp_path):
    """The write fails on the writer thread of a large object (ENOSPC), partway."""
    src, out = tmp_path / "src", tmp_path / "out"
    os.makedirs(src)
    os.makedirs(out)
    (src / "small").write_bytes(b"first release")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "publish-test", str(out)],
                   check=True)
    try:
        publish(src, out)
        old_manifest = (out / "manifest.json").read_bytes()
        before = objects(out)
        with open(src / "large", "wb") as f:
            for _ in range(40):
                f.write(os.urandom(MIB))
        rc, _, err = publish(src, out, check=False)
        assert rc == 1
        assert "No space left on device" in err and "/objects/tmp." in err, err
        assert (out / "manifest.json").read_bytes() == old_manifest
        assert objects(out) == before
        assert not stray_temps(out)
    finally:
        subprocess.run(["umount", str(out)], check=True)


def test_chunk_hash_lists(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    os.makedirs(src)
    data = os.urandom(3 * MIB + 5)
    (src / "big").write_bytes(data)
    (src / "mid").write_bytes(os.urandom(MIB))  # not over --chunk-over: hashed whole only
    _, stdout, _ = publish(src, out, "--chunk-over", "1M", "--chunk-size", "512K")
    assert "3 new objects" in stdout  # two files and one hash list
    entries = {e["path"]: e for e in load(out)["entries"]}
    assert "chunks" not in entries["mid"]
    chunks = entries["big"]["chunks"]
    assert chunks["size"] == 512 << 10
    listed = (out / chunks["url"]).read_bytes()
    want = b"".join(hashlib.sha256(data[i:i + (512 << 10)]).digest()
                    for i in range(0, len(data), 512 << 10))
    assert listed == want and len(listed) == 7 * 32
    assert hashlib.sha256(listed).hexdigest() == chunks["sha256"]
    assert chunks["url"] == "objects/%s/%s" % (chunks["sha256"][:2], chunks["sha256"])
    # Again, unchanged: nothing new. A changed file: its object and its list.
    _, stdout, _ = publish(src, out, "--chunk-over", "1M", "--chunk-size", "512K")
    assert "0 new objects" in stdout
    (src / "big").write_bytes(data[:-1] + b"!")
    _, stdout, _ = publish(src, out, "--chunk-over", "1M", "--chunk-size", "512K")
    assert "2 new objects" in stdout
    rc, _, err = publish(src, out, "--chunk-size", "1000", check=False)
    assert rc == 2 and "--chunk-size must be a power of two" in err

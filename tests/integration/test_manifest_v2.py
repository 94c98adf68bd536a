"""Manifest version 2 on a real mount: directories of their own, symlinks, modes, and pack
members served from one download of their pack, each checked against its own sha256.

The manifests here are written by the test (v2_store), object by object, so each test
controls exactly which bytes lie where; tests/integration/test_publish_mount.py covers the
same through `spoolfs publish`.
"""

import errno
import hashlib
import json
import os
import stat
import threading

import pytest

from conftest import SLOW, read_file


def sha(data):
    return hashlib.sha256(data).hexdigest()


def member_bytes(name, size):
    seed = hashlib.sha256(name.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def v2_store(root, entries, packs=None):
    """Writes objects/<sha> for each file entry that has "data" and each pack of `packs`
    ({pack name: [(path, data), ...]}), and manifest.json (version 2) naming them."""
    os.makedirs(os.path.join(root, "objects"), exist_ok=True)
    out = []
    for e in entries:
        e = dict(e)
        data = e.pop("data", None)
        if data is not None:
            h = sha(data)
            with open(os.path.join(root, "objects", h), "wb") as f:
                f.write(data)
            e.update(size=len(data), sha256=h, url="objects/" + h)
        out.append(e)
    pack_list = []
    for name, members in (packs or {}).items():
        blob = b"".join(d for _, d in members)
        ph = sha(blob)
        with open(os.path.join(root, "objects", name), "wb") as f:
            f.write(blob)
        pack_list.append({"sha256": ph, "size": len(blob), "url": "objects/" + name})
        off = 0
        for path, d in members:
            out.append({"path": path, "size": len(d), "sha256": sha(d), "pack": ph,
                        "offset": off, "mode": "0644", "mtime": 1700000000})
            off += len(d)
    with open(os.path.join(root, "manifest.json"), "w") as f:
        json.dump({"version": 2, "packs": pack_list, "entries": out}, f)


def test_directories_symlinks_and_modes(upstream, mount):
    v2_store(upstream.root, [
        {"path": "repo.git/refs/heads", "type": "directory", "mode": "0755", "mtime": 1600000000},
        {"path": "repo.git/refs/tags", "type": "directory", "mode": "0700", "mtime": 1600000001},
        {"path": "bin/gcc", "data": b"#!/bin/sh\necho gcc\n", "mode": "0755", "mtime": 1600000100},
        {"path": "bin/cc", "type": "symlink", "target": "gcc", "mtime": 1600000200},
        {"path": "lib/libz.so.1.2.13", "data": b"z" * 5000, "mode": "0644"},
        {"path": "lib/libz.so.1", "type": "symlink", "target": "libz.so.1.2.13"},
        {"path": "lib/libz.so", "type": "symlink", "target": "libz.so.1"},
        {"path": "dangling", "type": "symlink", "target": "no/such/file"},
        {"path": "libdir", "type": "symlink", "target": "lib"},
        {"path": "abs", "type": "symlink", "target": "/etc/hostname"},
        {"path": "bin", "type": "directory", "mode": "0755", "mtime": 1600000050},
    ])
    m = mount(upstream.url("manifest.json"))
    heads = os.lstat(m.p("repo.git/refs/heads"))
    assert stat.S_ISDIR(heads.st_mode)
    assert stat.S_IMODE(heads.st_mode) == 0o555  # write bits never shown
    assert heads.st_mtime == 1600000000
    assert os.listdir(m.p("repo.git/refs/heads")) == []
    assert stat.S_IMODE(os.lstat(m.p("repo.git/refs/tags")).st_mode) == 0o500
    assert sorted(os.listdir(m.p("repo.git/refs"))) == ["heads", "tags"]
    # A directory of its own keeps its mtime though its children are newer.
    assert os.lstat(m.p("bin")).st_mtime == 1600000050
    cc = os.lstat(m.p("bin/cc"))
    assert stat.S_ISLNK(cc.st_mode)
    assert cc.st_size == 3
    assert cc.st_mtime == 1600000200
    assert os.readlink(m.p("bin/cc")) == "gcc"
    assert stat.S_IMODE(os.stat(m.p("bin/gcc")).st_mode) == 0o555
    assert stat.S_IMODE(os.stat(m.p("lib/libz.so.1.2.13")).st_mode) == 0o444
    # Reads follow a chain of symlinks inside the mount.
    assert read_file(m.p("lib/libz.so")) == b"z" * 5000
    assert read_file(m.p("libdir/libz.so.1")) == b"z" * 5000
    assert os.readlink(m.p("dangling")) == "no/such/file"
    with pytest.raises(FileNotFoundError):
        open(m.p("dangling"), "rb")
    assert os.readlink(m.p("abs")) == "/etc/hostname"
    # readdir gives each entry's type as lstat does.
    with os.scandir(m.p("")) as it:
        kinds = {e.name: (e.is_symlink(), e.is_dir(follow_symlinks=False)) for e in it}
    assert kinds["libdir"] == (True, False)
    assert kinds["bin"] == (False, True)
    # A symlink has no object: the xattrs of files are not there.
    with pytest.raises(OSError) as e:
        os.getxattr(m.p("bin/cc"), "user.spoolfs.sha256", follow_symlinks=False)
    assert e.value.errno in (errno.ENODATA, errno.EPERM)
    # The executable runs from the mount.
    import subprocess
    out = subprocess.run([m.p("bin/cc")], capture_output=True, timeout=30)
    assert out.stdout == b"gcc\n"


def eight_members():
    return [("d/m%d.txt" % i, member_bytes("m%d" % i, 3000 + 1000 * i)) for i in range(8)]


def test_eight_readers_of_eight_members_fetch_the_pack_once(upstream, mount):
    members = eight_members()
    v2_store(upstream.root, [], {"pack1": members})
    pack_size = sum(len(d) for _, d in members)
    upstream.fault("objects/pack1", gate=True)
    m = mount(upstream.url("manifest.json"))
    results = {}

    def reader(path):
        try:
            results[path] = read_file(m.p(path))
        except OSError as e:
            results[path] = e

    threads = [threading.Thread(target=reader, args=(p,)) for p, _ in members]
    for t in threads:
        t.start()
    # Every reader is parked on the one gated request before any byte is sent.
    upstream.wait_for(lambda s: s["gated"] >= 1, path="objects/pack1")
    upstream.release("objects/pack1")
    for t in threads:
        t.join(60)
    for path, data in members:
        assert results[path] == data, path
    st = upstream.stats("objects/pack1")
    assert st["gets"] == 1
    assert st["bytes"] <= pack_size
    assert os.getxattr(m.p("d/m3.txt"), "user.spoolfs.sha256").decode() == sha(members[3][1])


def test_first_member_is_served_before_the_pack_arrives(upstream, mount):
    members = eight_members()
    v2_store(upstream.root, [], {"pack1": members})
    first = len(members[0][1])
    # The pack's body pauses just after the first member: its reader must not wait.
    upstream.fault("objects/pack1", hold_at=first + 10)
    m = mount(upstream.url("manifest.json"))
    got = []
    reader = threading.Thread(target=lambda: got.append(read_file(m.p("d/m0.txt"))))
    reader.start()
    try:
        reader.join(20 * SLOW)
        assert got == [members[0][1]], "the first member waited for the rest of its pack"
        # The server counts the hold after it has sent the bytes before it: wait for it.
        upstream.wait_for(lambda s: s["held"] == 1, timeout=10 * SLOW, path="objects/pack1")
    finally:
        upstream.release("objects/pack1")
        reader.join()
    assert read_file(m.p("d/m7.txt")) == members[7][1]
    assert upstream.stats("objects/pack1")["gets"] == 1


def test_a_corrupt_pack_gives_eio_never_wrong_bytes_and_is_fetched_again(upstream, mount):
    members = eight_members()
    v2_store(upstream.root, [], {"pack1": members})
    at = sum(len(d) for _, d in members[:2]) + 7  # inside the third member
    end = sum(len(d) for _, d in members[:3])
    # The body pauses after the third member, so the member's own check is what fails,
    # not the pack's whole hash at its end.
    upstream.fault("objects/pack1", corrupt_at=at, hold_at=end + 10)
    m = mount(upstream.url("manifest.json"))
    with pytest.raises(OSError) as e:
        read_file(m.p("d/m2.txt"))
    assert e.value.errno == errno.EIO
    assert "not " + sha(members[2][1])[:16] in m.stderr()
    with open(m.p(".spoolfs/stats")) as f:
        assert "pack_member_hash_failures_total 1\n" in f.read()
    upstream.clear("objects/pack1")
    # The next open fetches the pack again, and every member reads right.
    for path, data in members:
        assert read_file(m.p(path)) == data
    assert upstream.stats("objects/pack1")["gets"] == 2


def test_two_members_at_one_offset_are_each_checked_against_their_own_sha256(upstream, mount):
    """x and y start at the same byte of one pack; y is longer and its sha256 is not of the
    pack's bytes. x reading right must not let y be served unchecked, in either order."""
    blob = b"AAAABBBB"
    v2_store(upstream.root, [], {"pack1": [("x", b"AAAA"), ("rest", b"BBBB")]})
    with open(os.path.join(upstream.root, "manifest.json")) as f:
        man = json.load(f)
    man["entries"].append({"path": "y", "size": len(blob), "sha256": sha(b"AAAACCCC"),
                           "pack": man["packs"][0]["sha256"], "offset": 0, "mode": "0644"})
    with open(os.path.join(upstream.root, "manifest.json"), "w") as f:
        json.dump(man, f)
    m = mount(upstream.url("manifest.json"))
    assert read_file(m.p("x")) == b"AAAA"
    with pytest.raises(OSError) as e:
        read_file(m.p("y"))
    assert e.value.errno == errno.EIO


def test_a_pack_whose_member_lies_beyond_it_is_refused(upstream, tmp_path):
    from helpers import refused_mount
    members = eight_members()
    v2_store(upstream.root, [], {"pack1": members})
    path = os.path.join(upstream.root, "manifest.json")
    with open(path) as f:
        doc = json.load(f)
    doc["entries"][-1]["offset"] += 1
    with open(path, "w") as f:
        json.dump(doc, f)
    err = refused_mount(upstream.url("manifest.json"), tmp_path / "mnt")
    assert "lies beyond its pack's size" in err
    assert "d/m7.txt" in err


def test_outside_symlinks_hidden_or_refused(upstream, mount, tmp_path):
    from helpers import refused_mount
    v2_store(upstream.root, [
        {"path": "etc", "type": "symlink", "target": "/etc"},
        {"path": "d/up", "type": "symlink", "target": "../../home"},
        {"path": "d/in", "type": "symlink", "target": "../f"},
        {"path": "f", "data": b"inside"},
    ])
    url = upstream.url("manifest.json")
    m = mount(url, "--outside-symlinks", "hide")
    assert sorted(os.listdir(m.p(""))) == ["d", "f"]
    assert os.listdir(m.p("d")) == ["in"]
    assert read_file(m.p("d/in")) == b"inside"
    m.unmount()
    assert "2 symlinks lead out of the mount" in m.stderr()
    err = refused_mount(url, tmp_path / "mnt2", "--outside-symlinks", "refuse")
    assert 'entries[0] "etc": target "/etc" leads out of the mount' in err
    shown = mount(url, name="mnt3")
    assert os.readlink(shown.p("etc")) == "/etc"


def nested_manifest(root, name, entries):
    """Writes a nested manifest object; returns its {"sha256", "size", "url"} reference."""
    body = json.dumps({"version": 2, "entries": entries}).encode()
    with open(os.path.join(root, "objects", name), "wb") as f:
        f.write(body)
    return {"sha256": sha(body), "size": len(body), "url": "objects/" + name}


def test_nested_manifests_load_at_first_lookup(upstream, mount):
    root = upstream.root
    os.makedirs(os.path.join(root, "objects"), exist_ok=True)
    data = b"deep bytes\n"
    with open(os.path.join(root, "objects", "leaf"), "wb") as f:
        f.write(data)
    leaf = {"path": "leaf.txt", "size": len(data), "sha256": sha(data), "url": "objects/leaf"}
    deeper = nested_manifest(root, "m-deeper", [leaf])
    sub = nested_manifest(root, "m-sub", [
        {"path": "x/y", "type": "directory", "mtime": 1600000000, "manifest": deeper},
        dict(leaf, path="x/top.txt")])
    v2_store(root, [
        {"path": "sub", "type": "directory", "mode": "0755", "mtime": 1600000001,
         "manifest": sub},
        {"path": "plain.txt", "data": b"plain\n"}])
    m = mount(upstream.url("manifest.json"))
    assert sorted(os.listdir(m.p(""))) == ["plain.txt", "sub"]
    assert os.stat(m.p("sub")).st_mtime == 1600000001
    # Nothing below the top was asked for yet.
    assert upstream.stats("objects/m-sub")["gets"] == 0
    assert read_file(m.p("sub/x/top.txt")) == data
    assert upstream.stats("objects/m-sub")["gets"] == 1
    assert upstream.stats("objects/m-deeper")["gets"] == 0
    assert os.stat(m.p("sub/x/y")).st_mtime == 1600000000
    assert read_file(m.p("sub/x/y/leaf.txt")) == data
    assert sorted(os.listdir(m.p("sub/x"))) == ["top.txt", "y"]
    assert upstream.stats("objects/m-sub")["gets"] == 1
    assert upstream.stats("objects/m-deeper")["gets"] == 1


def test_two_directories_listed_at_once_both_load(upstream, mount):
    """The first lookups in two directories with manifests of their own, at once: both load
    (one after the other: a load is one transaction on the namespace), neither fails with
    EIO. b's manifest is held back until a's has been sent whole, so b's load begins while
    a's 40,000 entries (over 1 MiB: added on the builder thread) are still going in."""
    root = upstream.root
    os.makedirs(os.path.join(root, "objects"), exist_ok=True)
    many = [{"path": "f%05d" % i, "size": 1} for i in range(40000)]
    a = nested_manifest(root, "m-a", many)
    assert a["size"] > 1 << 20
    b = nested_manifest(root, "m-b", [{"path": "only", "size": 1}])
    v2_store(root, [{"path": "a", "type": "directory", "manifest": a},
                    {"path": "b", "type": "directory", "manifest": b}])
    m = mount(upstream.url("manifest.json"))
    upstream.fault("objects/m-b", gate=True)
    got = {}

    def listdir(name):
        try:
            got[name] = len(os.listdir(m.p(name)))
        except OSError as e:
            got[name] = e.errno

    tb = threading.Thread(target=listdir, args=("b",))
    tb.start()
    upstream.wait_for(lambda s: s["gated"] == 1, path="objects/m-b")
    ta = threading.Thread(target=listdir, args=("a",))
    ta.start()
    # a's manifest is all here: its load has begun, or is about to.
    upstream.wait_for(lambda s: s["gets"] == 1 and s["active"] == 0, path="objects/m-a",
                      timeout=30)
    upstream.release("objects/m-b")
    ta.join(60)
    tb.join(60)
    assert got == {"a": 40000, "b": 1}
    assert "failed" not in m.stderr()


def test_a_nested_manifest_that_is_not_the_one_named_fails_its_directory(upstream, mount):
    root = upstream.root
    os.makedirs(os.path.join(root, "objects"), exist_ok=True)
    sub = nested_manifest(root, "m-sub", [{"path": "a", "type": "directory"}])
    v2_store(root, [{"path": "sub", "type": "directory", "manifest": sub},
                    {"path": "ok.txt", "data": b"ok\n"}])
    # The server now holds other bytes under that name.
    with open(os.path.join(root, "objects", "m-sub"), "wb") as f:
        f.write(json.dumps({"version": 2, "entries": [{"path": "b", "type": "directory"}]})
                .encode().ljust(sub["size"]))
    m = mount(upstream.url("manifest.json"))
    with pytest.raises(OSError) as e:
        os.listdir(m.p("sub"))
    assert e.value.errno == errno.EIO
    assert read_file(m.p("ok.txt")) == b"ok\n"
    assert "is not the one its parent names" in m.stderr()

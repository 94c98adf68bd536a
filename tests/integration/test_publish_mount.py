"""`spoolfs publish`, served by the test upstream and mounted: the mount shows exactly the
tree that was published (type, read and execute bits, size, symlink target, mtime, bytes),
a bare git repository published this way clones and checks clean, and a cold walk of a
published tree of small files costs one request per pack.
"""

import hashlib
import json
import os
import stat
import subprocess

import pytest

from conftest import SLOW, read_file
from client import Upstream
from helpers import publish_tree, sha256_file, wait_until

# The 100 MiB file: smaller under the sanitizers (the same code runs at any size).
BIG = (100 << 20) if SLOW == 1 else (8 << 20)


def snapshot(root):
    """{relative path: (kind, r/x bits, size, target or sha256, mtime)} of a tree, by lstat."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", None, st.st_size, os.readlink(full), int(st.st_mtime))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode) & 0o555, None, None,
                            int(st.st_mtime))
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode) & 0o555, st.st_size, sha256_file(full),
                            int(st.st_mtime))
    return out


def make_tree(src):
    os.makedirs(src / "a/b/empty/deeper")
    os.makedirs(src / "empty-top")
    os.makedirs(src / "lib")
    (src / "bin").mkdir()
    (src / "bin/tool").write_bytes(b"#!/bin/sh\necho published-tool \"$@\"\n")
    os.chmod(src / "bin/tool", 0o755)
    (src / "lib/libz.so.1.2.13").write_bytes(os.urandom(70000))
    os.symlink("libz.so.1.2.13", src / "lib/libz.so.1")
    os.symlink("libz.so.1", src / "lib/libz.so")
    os.symlink("/usr/bin/env", src / "bin/env-abs")
    os.symlink("../no/such", src / "a/dangling")
    os.symlink("lib", src / "lib-link")
    (src / "empty-file").write_bytes(b"")
    (src / "name with spaces.txt").write_bytes(b"spaces\n")
    (src / "ünïcödé-日本.txt").write_bytes("utf-8 name\n".encode())
    (src / "readme").write_bytes(b"read me\n")
    os.chmod(src / "readme", 0o600)
    os.link(src / "readme", src / "a/hardlink-to-readme")
    with open(src / "big.bin", "wb") as f:
        for i in range(BIG >> 20):
            f.write(hashlib.sha256(b"%d" % i).digest() * (1 << 15))
    for d in range(10):
        os.makedirs(src / ("small/d%d" % d))
        for i in range(200):
            (src / ("small/d%d/f%03d.txt" % (d, i))).write_bytes(
                (b"%d-%d " % (d, i)) * (50 + (i * 37) % 500))
    # Distinct, old mtimes, set last (children change their directory's).
    for n, (dirpath, dirnames, filenames) in enumerate(os.walk(src, topdown=False)):
        for name in filenames + dirnames:
            os.utime(os.path.join(dirpath, name), (1500000000 + n, 1500000000 + n),
                     follow_symlinks=False)


@pytest.fixture
def published(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    make_tree(src)
    publish_tree(src, out, compress=True)  # as a user publishes: compressed, version 3
    up = Upstream(out)
    yield src, out, up
    up.stop()


def test_the_mount_shows_exactly_the_published_tree(published, mount):
    src, out, up = published
    m = mount(up.url("manifest.json"))
    want, got = snapshot(src), snapshot(m.p(""))
    got.pop(".spoolfs", None)
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    differ = sorted(p for p in want if p in got and want[p] != got[p])
    assert not missing and not extra, (missing[:5], extra[:5])
    assert not differ, [(p, want[p], got[p]) for p in differ[:5]]
    assert len(want) > 2000
    # The large file is stored compressed and carries a chunk hash list (a sha256 and a
    # frame's stored length per chunk): every chunk was verified after decompression.
    with open(out / "manifest.json") as f:
        big = next(e for e in json.load(f)["entries"] if e["path"] == "big.bin")
    assert big["chunks"]["size"] == 256 << 10 and big["stored"]["frame"] == 256 << 10
    assert big["stored"]["size"] < BIG // 4
    assert os.path.getsize(out / big["chunks"]["url"]) == 36 * (BIG // (256 << 10))
    r = subprocess.run([m.p("bin/tool"), "x"], capture_output=True, timeout=30)
    assert r.stdout == b"published-tool x\n"


@pytest.fixture
def nested(published, tmp_path):
    """The same tree published with each small/dN (200 files) in a manifest of its own:
    (src, its upstream, {directory: its nested manifest's URL})."""
    src, _, _ = published
    out = tmp_path / "out-nested"
    publish_tree(src, out, "--nest-over", "150")
    with open(out / "manifest.json") as f:
        top = json.load(f)
    urls = {e["path"]: e["manifest"]["url"] for e in top["entries"] if "manifest" in e}
    assert sorted(urls) == ["small/d%d" % d for d in range(10)]
    up = Upstream(out)
    yield src, up, urls
    up.stop()


def test_nested_manifests_show_the_same_tree(nested, mount):
    src, up, urls = nested
    m = mount(up.url("manifest.json"), name="mnt-nested")
    assert up.stats()["total_gets"] == 1  # the top manifest alone
    want, got = snapshot(src), snapshot(m.p(""))
    got.pop(".spoolfs", None)
    assert want == got
    # The walk listed every directory: each nested manifest was fetched once.
    assert all(up.stats(url)["gets"] == 1 for url in urls.values())
    m.unmount()


def stat_value(m, name):
    with open(m.p(".spoolfs/stats")) as f:
        for line in f:
            if line.split()[0] == name:
                return int(line.split()[-1])
    raise KeyError(name)


def test_a_walk_across_nested_manifests_loads_the_next_one_ahead(nested, mount):
    """A walk entering directories with manifests of their own one after another: the next
    one is loaded while the walk is still in this one, one ahead, and each once."""
    src, up, urls = nested
    m = mount(up.url("manifest.json"), name="mnt-ahead")
    url = [urls["small/d%d" % d] for d in range(10)]

    def gets(d):
        return up.stats(url[d])["gets"]

    # d0 then d1: a walk. d2 comes ahead (fetched and loaded), nothing further.
    os.listdir(m.p("small/d0"))
    os.listdir(m.p("small/d1"))
    wait_until(lambda: stat_value(m, "spoolfs_nested_listed_ahead_total") == 1,
               "d2 was never loaded ahead")
    assert [gets(d) for d in range(10)] == [1, 1, 1] + [0] * 7
    # The walk enters d2: loaded already (no second request); d3 comes ahead now.
    assert sorted(os.listdir(m.p("small/d2"))) == sorted(os.listdir(src / "small/d2"))
    assert gets(2) == 1
    up.wait_for(lambda s: s["gets"] == 1, timeout=30 * SLOW, path=url[3])
    assert all(gets(d) == 0 for d in range(4, 10))
    # A find over all of it: the full tree, each nested manifest fetched once.
    found = subprocess.run(["find", m.p("small")], capture_output=True, check=True,
                           timeout=120 * SLOW).stdout.count(b"\n")
    assert found == sum(1 for _ in os.walk(src / "small")) + sum(
        len(files) for _, _, files in os.walk(src / "small"))
    assert [gets(d) for d in range(10)] == [1] * 10
    m.unmount()


def test_a_cold_walk_of_small_files_costs_a_request_per_pack(published, mount):
    src, out, up = published
    m = mount(up.url("manifest.json"))
    up.reset()
    for d in range(10):
        for name in sorted(os.listdir(m.p("small/d%d" % d))):
            path = "small/d%d/%s" % (d, name)
            assert read_file(m.p(path)) == (src / path).read_bytes()
    stats = up.stats()
    gets = stats["total_gets"]
    # 2,000 files of up to 10 KiB: a pack (4 MiB at most) per directory.
    assert gets <= 10, gets
    # A find alone fetches no content.
    up.reset()
    subprocess.run(["find", m.p(""), "-ls"], capture_output=True, check=True, timeout=120)
    assert up.stats()["total_gets"] == 0


def test_sparse_reads_of_a_packed_tree_cost_at_most_a_pack_each(published, mount):
    """20 members read across the tree, not a walk: at most one pack fetched per member read
    (issue 22), never the rest of the tree."""
    import random
    src, out, up = published
    m = mount(up.url("manifest.json"))
    up.reset()
    names = ["small/d%d/%s" % (d, n) for d in range(10)
             for n in sorted(os.listdir(src / ("small/d%d" % d)))]
    picked = random.Random(22).sample(names, 20)
    for path in picked:
        assert read_file(m.p(path)) == (src / path).read_bytes()
    asked = {p: s["gets"] for p, s in up.stats()["paths"].items() if s["gets"]}
    assert sum(asked.values()) <= len(picked), asked
    assert all(n == 1 for n in asked.values()), asked


def test_a_published_bare_git_repository_clones(tmp_path, mount):
    work, src, out = tmp_path / "work", tmp_path / "src", tmp_path / "out"
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.org")

    def git(*args, cwd=None):
        r = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, timeout=120)
        assert r.returncode == 0, r.stderr.decode()
        return r.stdout

    git("init", "-q", str(work))
    for i in range(30):
        (work / ("f%d.txt" % i)).write_text("file %d\n" % i * (i + 1))
    git("add", ".", cwd=work)
    git("commit", "-q", "-m", "one", cwd=work)
    git("clone", "-q", "--bare", str(work), str(src))
    # A bare repository's empty refs/tags (and refs/heads after packing) must exist.
    git("pack-refs", "--all", cwd=src)
    assert (src / "refs/tags").is_dir() and not os.listdir(src / "refs/tags")
    publish_tree(src, out, compress=True)
    up = Upstream(out)
    try:
        m = mount(up.url("manifest.json"))
        git("clone", "-q", m.p(""), str(tmp_path / "clone"))
        git("fsck", "--full", cwd=m.p(""))
        assert (tmp_path / "clone/f7.txt").read_text() == "file 7\n" * 8
        m.unmount()
    finally:
        up.stop()

"""Kept namespaces (doc/cache-dir.md): a --cache-dir DIR --keep-cache mount keeps a copy of
the namespace its manifest loaded into, named by everything that decides the load (the
manifest's bytes, its URL, its time, the load options, the schema, the spoolfs version), and
the next such mount of the same manifest starts from that copy instead of loading the
manifest again: the same tree, sizes, modes, times, contents, symlinks, nested manifests
and read order. Another manifest or other options load as before; a damaged copy is
replaced; the copy holds no secret; at most a few are kept."""

import hashlib
import os
import re
import stat
import threading

import pytest

from client import Upstream
from conftest import read_file
from helpers import publish_tree

KiB = 1 << 10
USED = "namespace from the cache directory"


def make_tree(src):
    """A tree with packed small files, a larger file, a directory big enough for a manifest of
    its own, symlinks (one inside, one out of the mount), an executable and an empty dir."""
    for i in range(8):
        (src / "lib" / ("m%02d.py" % i)).parent.mkdir(parents=True, exist_ok=True)
        (src / "lib" / ("m%02d.py" % i)).write_bytes(os.urandom(2 * KiB + i))
    (src / "data").mkdir()
    (src / "data" / "blob.bin").write_bytes(os.urandom(200 * KiB))
    (src / "bin").mkdir()
    (src / "bin" / "tool").write_bytes(b"#!/bin/sh\necho hi\n")
    os.chmod(src / "bin" / "tool", 0o755)
    (src / "empty").mkdir()
    os.symlink("../lib/m01.py", src / "bin" / "link")
    os.symlink("/etc/hostname", src / "bin" / "outside")
    (src / "order").write_text("lib/m03.py\ndata/blob.bin\n")


@pytest.fixture
def served(tmp_path):
    """The tree published (lib/ nested, a default read order), on a test upstream:
    (src, out, upstream)."""
    src = tmp_path / "src"
    src.mkdir()
    make_tree(src)
    out = tmp_path / "out"
    publish(src, out)
    up = Upstream(out)
    yield src, out, up
    up.stop()


def publish(src, out, *args):
    order = src / "order"
    publish_tree(src, out, "--nest-over", "5", "--read-order", str(order), *args)


def snapshot(root):
    """Everything a reader sees of the tree: per path, its kind, mode, size, mtime and its
    bytes' sha256 or its target."""
    seen = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x != ".spoolfs"]
        for name in dirs + files:
            p = os.path.join(d, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if stat.S_ISLNK(st.st_mode):
                what = "-> " + os.readlink(p)
            elif stat.S_ISREG(st.st_mode):
                what = hashlib.sha256(read_file(p)).hexdigest()
            else:
                what = "dir"
            seen[rel] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_size,
                         st.st_mtime, what)
    st = os.stat(root)
    seen["."] = (stat.S_IMODE(st.st_mode), st.st_mtime)
    return seen


def stats_text(m):
    with open(m.p(".spoolfs/stats")) as f:
        return f.read()


def kept(cache):
    d = cache / "namespaces"
    return sorted(os.listdir(d)) if d.exists() else []


def keep(mount, source, cache, *args, name="mnt"):
    m = mount(source, "--cache-dir", str(cache), "--keep-cache", *args, name=name)
    # INIT answered: an unmount at once could find the mount busy (fusermount3: EBUSY).
    os.listdir(m.p())
    return m


def kept_once(served, mount, tmp_path):
    """One --keep-cache mount of the served manifest, gone: (src, out, url, cache)."""
    src, out, up = served
    url = up.url("manifest.json")
    cache = tmp_path / "cache"
    keep(mount, url, cache).check_clean_exit()
    return src, out, url, cache


def used(m):
    return USED in m.stderr()


def test_a_second_mount_of_an_unchanged_manifest_uses_the_copy(served, mount, tmp_path):
    src, out, up = served
    url = up.url("manifest.json")
    cache = tmp_path / "cache"
    m1 = keep(mount, url, cache)
    first = snapshot(m1.p())
    assert "# read_order default" in stats_text(m1)
    assert not used(m1)
    m1.check_clean_exit()
    assert len(kept(cache)) == 1, kept(cache)
    assert re.fullmatch(r"[0-9a-f]{64}\.db", kept(cache)[0]), kept(cache)
    assert stat.S_IMODE(os.stat(cache / "namespaces" / kept(cache)[0]).st_mode) == 0o600

    m2 = keep(mount, url, cache, name="mnt2")
    manifest_sha = hashlib.sha256((out / "manifest.json").read_bytes()).hexdigest()
    line = re.search(r"namespace from the cache directory \(manifest sha256 (\w+), (\d+) "
                     r"entries\)", m2.stderr())
    assert line, m2.stderr()
    assert line.group(1) == manifest_sha
    # The root manifest's entries: lib/ is one, its files are its own manifest's.
    assert int(line.group(2)) == len([p for p in first if p != "." and not
                                      p.startswith("lib/")]), (line.group(0), sorted(first))
    assert snapshot(m2.p()) == first  # lib/'s nested manifest loaded as before
    assert (read_file(m2.p("lib/m03.py")) == (src / "lib" / "m03.py").read_bytes())
    assert os.readlink(m2.p("bin/outside")) == "/etc/hostname"
    text = stats_text(m2)
    assert "# read_order default" in text, text
    assert "# release" not in text
    m2.check_clean_exit()
    assert len(kept(cache)) == 1


@pytest.mark.nosan  # which copy is chosen: no path a sanitizer sees anew
def test_a_changed_manifest_does_not_use_the_old_copy(served, mount, tmp_path):
    src, out, url, cache = kept_once(served, mount, tmp_path)
    (src / "data" / "blob.bin").write_bytes(b"new bytes")
    publish(src, out)
    m2 = keep(mount, url, cache, name="mnt2")
    assert not used(m2), m2.stderr()
    assert read_file(m2.p("data/blob.bin")) == b"new bytes"
    assert os.stat(m2.p("data/blob.bin")).st_size == 9
    m2.check_clean_exit()
    assert len(kept(cache)) == 2, kept(cache)


@pytest.mark.nosan  # which copy is chosen: no path a sanitizer sees anew
def test_other_load_options_do_not_use_it(served, mount, tmp_path):
    src, out, url, cache = kept_once(served, mount, tmp_path)
    m = keep(mount, url, cache, "--outside-symlinks", "hide", name="hide")
    assert not used(m), m.stderr()
    assert "outside" not in os.listdir(m.p("bin"))
    m.check_clean_exit()
    m = keep(mount, url, cache, "--no-read-order", name="noorder")
    assert not used(m), m.stderr()
    assert "# read_order" not in stats_text(m)
    m.check_clean_exit()
    m = keep(mount, url, cache, "--read-order-name", "other", name="other")
    assert not used(m), m.stderr()
    m.check_clean_exit()
    # The first one is still there, and still serves the options it was made with.
    m = keep(mount, url, cache, name="again")
    assert used(m), m.stderr()
    assert sorted(os.listdir(m.p("bin"))) == ["link", "outside", "tool"]
    assert os.readlink(m.p("bin/outside")) == "/etc/hostname"
    m.check_clean_exit()
    assert len(kept(cache)) == 4, kept(cache)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_a_damaged_copy_is_loaded_over_and_replaced(served, mount, tmp_path, damage):
    src, out, up = served
    url = up.url("manifest.json")
    cache = tmp_path / "cache"
    m1 = keep(mount, url, cache)
    first = snapshot(m1.p())
    m1.check_clean_exit()
    (name,) = kept(cache)
    path = cache / "namespaces" / name
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[:len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(os.urandom(len(data)))
    else:
        path.write_bytes(b"")

    m2 = keep(mount, url, cache, name="mnt2")
    log = m2.stderr()
    assert not used(m2), log
    assert "kept namespace %s not used (" % name[:-3] in log, log
    assert "removed; loading the manifest" in log, log
    assert snapshot(m2.p()) == first
    m2.check_clean_exit()
    assert kept(cache) == [name]
    assert path.read_bytes() != b""
    m3 = keep(mount, url, cache, name="mnt3")
    assert used(m3), m3.stderr()
    assert snapshot(m3.p()) == first


def test_two_mounts_of_one_cache_directory_at_once(served, mount, tmp_path):
    src, out, up = served
    url = up.url("manifest.json")
    cache = tmp_path / "cache"
    for round_ in ("load", "copy"):
        mounts, errors = {}, []

        def start(name):
            try:
                mounts[name] = keep(mount, url, cache, name=name)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=start, args=("%s%d" % (round_, i),))
                   for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        snaps = [snapshot(m.p()) for m in mounts.values()]
        assert snaps[0] == snaps[1]
        assert read_file(mounts["%s0" % round_].p("lib/m02.py")) == \
            (src / "lib" / "m02.py").read_bytes()
        if round_ == "copy":
            assert all(used(m) for m in mounts.values()), [m.stderr() for m in mounts.values()]
        for m in mounts.values():
            m.check_clean_exit()
        assert len(kept(cache)) == 1, kept(cache)


def test_a_tag_mount_keeps_showing_the_tag(tmp_path, mount):
    src = tmp_path / "src"
    src.mkdir()
    make_tree(src)
    out = tmp_path / "out"
    publish(src, out, "--manifest", "r1.json", "--tag", "latest")
    r1 = hashlib.sha256((out / "r1.json").read_bytes()).hexdigest()
    cache = tmp_path / "cache"
    release = "# release r1.json sha256 %s tag latest" % r1
    m1 = keep(mount, str(out / "latest"), cache)
    first = snapshot(m1.p())
    assert release in stats_text(m1)
    m1.check_clean_exit()

    m2 = keep(mount, str(out / "latest"), cache, name="mnt2")
    assert used(m2), m2.stderr()
    assert "serving r1.json (sha256 %s) via tag latest" % r1 in m2.stderr()
    assert release in stats_text(m2)
    assert snapshot(m2.p()) == first
    m2.check_clean_exit()
    # The same manifest by its own name: the same namespace, and no release.
    m3 = keep(mount, str(out / "r1.json"), cache, name="mnt3")
    assert used(m3), m3.stderr()
    assert "# release" not in stats_text(m3)


SECRET = "TOKENSECRET1"


@pytest.mark.nosan  # what is written where: no path a sanitizer sees anew
def test_no_secret_in_the_copy(served, mount, tmp_path):
    """The manifest's URL carries a query (a token): the copy is made and used, and neither
    the token nor anything else of the URL's query is in any file of the cache directory."""
    src, out, up = served
    url = up.url("manifest.json") + "?token=" + SECRET
    cache = tmp_path / "cache"
    m1 = keep(mount, url, cache)
    first = snapshot(m1.p())
    m1.check_clean_exit()
    assert len(kept(cache)) == 1, (kept(cache), m1.stderr())
    m2 = keep(mount, url, cache, name="mnt2")
    assert used(m2), m2.stderr()
    assert snapshot(m2.p()) == first
    m2.check_clean_exit()
    for d, _, files in os.walk(cache):
        for n in files:
            data = open(os.path.join(d, n), "rb").read()
            assert SECRET.encode() not in data, os.path.join(d, n)


@pytest.mark.nosan  # what is written where: no path a sanitizer sees anew
def test_a_namespace_whose_urls_hold_a_password_is_not_kept(served, mount, tmp_path):
    src, out, up = served
    url = up.url("manifest.json").replace("http://", "http://user:PASSWORD1@")
    cache = tmp_path / "cache"
    m = keep(mount, url, cache)
    assert read_file(m.p("lib/m03.py")) == (src / "lib" / "m03.py").read_bytes()
    assert "its URLs hold a password or a signed query" in m.stderr(), m.stderr()
    m.check_clean_exit()
    assert kept(cache) == []


@pytest.mark.nosan  # which copy is chosen: no path a sanitizer sees anew
def test_at_most_four_are_kept_and_a_mount_without_keep_cache_removes_them(served, mount,
                                                                          tmp_path):
    src, out, up = served
    url = up.url("manifest.json")
    cache = tmp_path / "cache"
    for i in range(6):
        keep(mount, url, cache, "--read-order-name", "n%d" % i, name="m%d" % i).check_clean_exit()
    assert len(kept(cache)) == 4, kept(cache)
    # The most recent ones stay: the last is used.
    m = keep(mount, url, cache, "--read-order-name", "n5", name="last")
    assert used(m), m.stderr()
    m.check_clean_exit()
    m = keep(mount, url, cache, "--read-order-name", "n0", name="first")
    assert not used(m), m.stderr()
    m.check_clean_exit()

    m = mount(url, "--cache-dir", str(cache), name="nokeep")
    os.listdir(m.p())
    m.check_clean_exit()
    assert "namespaces" not in os.listdir(cache), os.listdir(cache)


@pytest.mark.nosan  # what is written where: no path a sanitizer sees anew
def test_a_link_planted_as_a_copy_is_not_followed(served, mount, tmp_path):
    """namespaces/KEY.db replaced by a symbolic link to a file elsewhere: not opened, said,
    and replaced by a copy of ours; the file it pointed to is untouched."""
    src, out, url, cache = kept_once(served, mount, tmp_path)
    (name,) = kept(cache)
    path = cache / "namespaces" / name
    victim = tmp_path / "victim.db"
    victim.write_bytes(path.read_bytes())
    before = os.stat(victim)
    path.unlink()
    path.symlink_to(victim)
    m = keep(mount, url, cache, name="mnt2")
    assert not used(m), m.stderr()
    assert "namespaces/%s is a symbolic link: not used (remove it)" % name in m.stderr()
    assert os.listdir(m.p("bin"))
    m.check_clean_exit()
    assert not path.is_symlink() and stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    after = os.stat(victim)
    assert (after.st_mtime_ns, after.st_size) == (before.st_mtime_ns, before.st_size)
    m3 = keep(mount, url, cache, name="mnt3")
    assert used(m3), m3.stderr()

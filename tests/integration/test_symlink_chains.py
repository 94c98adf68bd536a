"""Symlink chains in manifests against --outside-symlinks hide|refuse, on a real mount.

A link's target is judged by walking it over the snapshot's own names, following its
symlinks (at most 40, as the kernel does), not as text: a link `d -> "."` walked eight times
is still the root, so `d/d/d/d/d/d/d/d/../../../../../../../../etc` is /etc. These tests
mount as root and check that the host's /etc is not reached through the mount, that the
chain is named in the log or the refusal, and that `..` inside a nested manifest is
counted from the mount's root (legitimate links there are shown).
"""

import errno
import os

import pytest

from conftest import read_file
from helpers import refused_mount
from test_manifest_v2 import nested_manifest, v2_store

POC_TARGET = "d/d/d/d/d/d/d/d/../../../../../../../../etc"
POC = [
    {"path": "d", "type": "symlink", "target": "."},
    {"path": "x", "type": "symlink", "target": POC_TARGET},
    {"path": "f", "data": b"inside\n"},
]
CHAIN = 'x -> "%s", d -> "." (x8), then ".." above the mount\'s root' % POC_TARGET


def host_etc_unreached(m, rel):
    """Neither realpath nor open through m's `rel` reaches the host's /etc."""
    assert not os.path.realpath(m.p(rel)).startswith("/etc")
    with pytest.raises(OSError) as e:
        read_file(m.p(rel + "/passwd"))
    assert e.value.errno in (errno.ENOENT, errno.ENOTDIR)


def test_poc_is_a_real_escape_when_shown(upstream, mount):
    """The proof of concept as given (--outside-symlinks show, the default): the host's
    /etc, which is what hide and refuse must keep out."""
    v2_store(upstream.root, POC)
    m = mount(upstream.url("manifest.json"))
    assert os.path.realpath(m.p("x")) == "/etc"
    with open("/etc/passwd", "rb") as f:
        host_first = f.readline()
    with open(m.p("x/passwd"), "rb") as f:
        assert f.readline() == host_first


def test_poc_refused(upstream, tmp_path):
    v2_store(upstream.root, POC)
    err = refused_mount(upstream.url("manifest.json"), tmp_path / "mnt",
                        "--outside-symlinks", "refuse")
    assert 'entries[1] "x": target "%s" leads out of the mount' % POC_TARGET in err
    assert CHAIN in err


def test_poc_hidden_and_logged(upstream, mount):
    v2_store(upstream.root, POC)
    m = mount(upstream.url("manifest.json"), "--outside-symlinks", "hide")
    assert sorted(os.listdir(m.p(""))) == ["d", "f"]
    host_etc_unreached(m, "x")
    # d itself stays: it is the root.
    assert read_file(m.p("d/d/f")) == b"inside\n"
    m.unmount()
    log = m.stderr()
    assert "symlink left out (--outside-symlinks=hide): it leads out of the mount: " + CHAIN in log
    assert "1 symlinks lead out of the mount" in log


def nested_store(root, below):
    """A top manifest with file f and directory sub, whose entries are `below`."""
    os.makedirs(os.path.join(root, "objects"), exist_ok=True)
    sub = nested_manifest(root, "m-sub", below)
    v2_store(root, [{"path": "f", "data": b"top\n"},
                    {"path": "sub", "type": "directory", "manifest": sub}])


def test_poc_in_a_nested_manifest_hidden(upstream, mount):
    """The same chain inside a nested directory: counted from sub it never went below 0
    as text, so it was shown under hide."""
    nested_store(upstream.root, [
        {"path": "d", "type": "symlink", "target": "."},
        {"path": "x", "type": "symlink", "target": POC_TARGET},
        {"path": "g", "size": 0, "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "url": "objects/none"},
    ])
    m = mount(upstream.url("manifest.json"), "--outside-symlinks", "hide")
    assert sorted(os.listdir(m.p("sub"))) == ["d", "g"]
    host_etc_unreached(m, "sub/x")
    m.unmount()
    log = m.stderr()
    assert ('it leads out of the mount: sub/x -> "%s", sub/d -> "." (x8), then ".." above'
            % POC_TARGET) in log
    assert "/sub: 1 symlinks lead out of the mount" in log


def test_legitimate_dotdot_in_a_nested_manifest_is_shown(upstream, mount):
    """`..` in sub/lib/link counts from the mount's root: ../../f is the top's f. It was
    counted from sub, hidden under hide and refused (EIO on the listing) under refuse."""
    nested_store(upstream.root, [
        {"path": "lib/link", "type": "symlink", "target": "../../f"},
        {"path": "up", "type": "symlink", "target": "../f"},
        {"path": "out", "type": "symlink", "target": "../../etc"},
    ])
    url = upstream.url("manifest.json")
    m = mount(url, "--outside-symlinks", "hide")
    assert sorted(os.listdir(m.p("sub"))) == ["lib", "up"]
    assert read_file(m.p("sub/lib/link")) == b"top\n"
    assert read_file(m.p("sub/up")) == b"top\n"
    m.unmount()
    assert 'sub/out -> "../../etc", then ".." above the mount\'s root' in m.stderr()
    # Under refuse the listing fails for out alone, naming it and its chain...
    r = mount(url, "--outside-symlinks", "refuse", name="mnt1")
    with pytest.raises(OSError) as e:
        os.listdir(r.p("sub"))
    assert e.value.errno == errno.EIO
    r.unmount()
    assert ('listing /sub failed: entries[2] "out": target "../../etc" leads out of the mount'
            ' (--outside-symlinks=refuse): sub/out -> "../../etc", then ".." above') in r.stderr()
    # ... and without it, it loads.
    nested_store(upstream.root, [
        {"path": "lib/link", "type": "symlink", "target": "../../f"},
        {"path": "up", "type": "symlink", "target": "../f"},
    ])
    r = mount(url, "--outside-symlinks", "refuse", name="mnt2")
    assert read_file(r.p("sub/lib/link")) == b"top\n"
    assert os.readlink(r.p("sub/lib/link")) == "../../f"


def test_a_walk_over_directories_sharing_one_manifest_loads_each_once(upstream, mount):
    """Thirty directories name one nested manifest (one digest) whose links walk up, and
    into d00: a walk lists each directory, and fetches the manifest once for all of them
    (fetch/source/nested_cache.h; it was once a directory); judging a link never loads
    another directory's manifest: the link into d00 is left out of every other directory,
    though d00 was listed first (the verdict must not depend on that), and kept in d00."""
    root = upstream.root
    os.makedirs(os.path.join(root, "objects"), exist_ok=True)
    shared = nested_manifest(root, "m-shared", [
        {"path": "up", "type": "symlink", "target": "../f"},
        {"path": "next", "type": "symlink", "target": "../d00/up"},
    ])
    n = 30
    v2_store(root, [{"path": "f", "data": b"top\n"}] + [
        {"path": "d%02d" % i, "type": "directory", "manifest": shared} for i in range(n)])
    m = mount(upstream.url("manifest.json"), "--outside-symlinks", "hide")
    seen = []
    for dirpath, dirnames, filenames in os.walk(m.p("")):
        dirnames.sort()
        seen.extend(os.path.join(dirpath, f) for f in filenames)
    assert len([p for p in seen if p.endswith("/up")]) == n
    assert [p for p in seen if p.endswith("/next")] == [m.p("d00/next")]
    assert read_file(m.p("d07/up")) == b"top\n"
    assert upstream.stats("objects/m-shared")["gets"] == 1
    m.unmount()
    assert m.stderr().count("passes into another directory with a manifest of its own") == n - 1


@pytest.mark.parametrize("mode", ["hide", "refuse"])
def test_chains_too_long_to_judge_refuse_the_manifest_at_once(upstream, tmp_path, mode):
    """39 links whose targets each walk 781 times down and up again, and 100 links into
    the head of that chain (40 links: no loop): judging them all would take 100 x 39 x
    1,562 lookups (seconds here, minutes for a manifest of the largest size). A budget of
    lookups per load ends it with a message instead."""
    up_down = "/".join(["a", ".."] * 781)
    entries = [{"path": "a", "type": "directory"}]
    for k in range(39):
        nxt = "c%02d" % (k + 1) if k < 38 else "a"
        entries.append({"path": "c%02d" % k, "type": "symlink", "target": up_down + "/" + nxt})
    for k in range(100):
        entries.append({"path": "h%03d" % k, "type": "symlink", "target": "c00"})
    v2_store(upstream.root, entries)
    err = refused_mount(upstream.url("manifest.json"), tmp_path / "mnt",
                        "--outside-symlinks", mode)
    assert "chains are too long to judge" in err


def test_chains_too_long_to_judge_in_a_nested_manifest_fail_its_directory(upstream, mount):
    """Links of a nested manifest that lead through a path 600 directories deep outside it:
    each step of each walk looks the path up in the index from the root again (quadratic),
    seconds inside one FUSE lookup. The budget counts those queries too: the directory
    fails with EIO and the log says why."""
    os.makedirs(os.path.join(upstream.root, "objects"), exist_ok=True)
    deep = "/".join(["A"] * 600)
    links = [{"path": "l%02d" % k, "type": "symlink", "target": "../" + deep} for k in range(8)]
    sub = nested_manifest(upstream.root, "m-sub", links)
    v2_store(upstream.root, [{"path": deep, "type": "directory"},
                             {"path": "sub", "type": "directory", "manifest": sub}])
    m = mount(upstream.url("manifest.json"), "--outside-symlinks", "hide")
    with pytest.raises(OSError) as e:
        os.listdir(m.p("sub"))
    assert e.value.errno == errno.EIO
    m.unmount()
    assert "chains are too long to judge" in m.stderr()

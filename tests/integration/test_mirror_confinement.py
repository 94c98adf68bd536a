"""--mirror file:///DIR/: a manifest's entry can never make the mount serve a file outside DIR.

curl decodes a file: URL's path and follows symlinks when it opens it, so an entry whose
relative URL holds "%2e%2e/" (kept by curl when it resolves the URL), with no sha256 and
the right size, and a 404 from the manifest's server, used to serve e.g. /etc/hostname
through the mount. Each hostile entry here must fail with EIO and leave a log line naming
it and the mirror, and the mount must go on serving good objects from the mirror.
"""

import errno
import json
import os
import shutil

import pytest

from client import Upstream
from conftest import Mount, is_mounted
from helpers import expected, read_until_error

SECRET = b"outside the mirror: must never be served\n"

# Entry URLs, relative to the manifest's directory, that reach ../secret.txt from the
# mirror's directory once decoded, or would to a server or tool that decodes again.
ESCAPES = {
    "dotdot": "%2e%2e/secret.txt",
    "mixed-case": "%2E%2e/secret.txt",
    "encoded-slash": "..%2fsecret.txt",
    "slash-in-segment": "d%2f..%2f..%2fsecret.txt",
    "deep": "d/%2e%2e/%2e%2e/secret.txt",
    "backslash": "..%5csecret.txt",
    "double-encoded": "%252e%252e/secret.txt",
    "double-encoded-slash": "..%252fsecret.txt",
    "dot": "%2e/d/%2e%2e/%2e%2e/secret.txt",
    "empty-segment": "d//secret.txt",
}
# Entries whose URL is plain, but whose file in the mirror is (or goes through) a symlink
# to a file outside it.
SYMLINKS = ["link.txt", "abslink.txt", "dlink/secret.txt", "d/uplink/secret.txt"]


def layout(tmp_path, store):
    """The store (good objects, each answering 404 upstream), a secret next to the mirror,
    the mirror with copies of the good objects and planted symlinks. -> (manifest URL,
    mirror dir, {entry: url})."""
    (tmp_path / "secret.txt").write_bytes(SECRET)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_bytes(SECRET)
    good = [store.add("good.bin", 200000), store.add("d/good2.bin", 5000, hashed=False)]
    entries = {}
    for name, url in ESCAPES.items():
        entries["evil/" + name] = url
    entries["evil/absolute"] = store.up.base + "/%2e%2e/secret.txt"
    for link in SYMLINKS:
        entries["link/" + link] = link

    def add(manifest):
        for path, url in entries.items():
            manifest["files"].append({"path": path, "size": len(SECRET), "url": url})

    url = store.write(add)
    mirror = tmp_path / "mirror"
    for g in good:
        os.makedirs(os.path.dirname(mirror / g), exist_ok=True)
        shutil.copyfile(os.path.join(store.root, g), mirror / g)
        store.up.fault(g, fail_status=404)
    os.symlink("../secret.txt", mirror / "link.txt")
    os.symlink(str(tmp_path / "secret.txt"), mirror / "abslink.txt")
    os.symlink(str(tmp_path / "outside"), mirror / "dlink")
    os.symlink("../../outside", mirror / "d" / "uplink")
    return url, mirror, entries, good


@pytest.mark.parametrize("walk", [False, True], ids=["openat2", "fallback-walk"])
def test_a_manifest_cannot_make_a_file_mirror_serve_outside_files(
        store, mount, tmp_path, monkeypatch, walk):
    if walk:
        monkeypatch.setenv("SPOOLFS_TEST_NO_OPENAT2", "1")
    url, mirror, entries, good = layout(tmp_path, store)
    m = mount(url, "--mirror", mirror.as_uri() + "/")
    for path in entries:
        got, err = read_until_error(m.p(path))
        assert SECRET not in got and got == b"", (path, got)
        assert err is not None and err.errno == errno.EIO, (path, err)
    log = m.stderr()
    for path in entries:
        if path.startswith("evil/"):
            assert "%s: not fetched from --mirror %s/" % (path, mirror.as_uri()) in log, (
                path, log)
        else:
            assert ("%s: mirror %s/%s: refused: a symlink on its path in the mirror's directory"
                    % (path, mirror.as_uri(), path[len("link/"):])) in log, (path, log)
    # the rest of the mount works: good objects come from the mirror
    for g in good:
        assert read_file_ok(m.p(g)) == expected(store, g), g
        assert 404 in store.up.stats(g)["statuses"], g
    assert ("no openat2 (SPOOLFS_TEST_NO_OPENAT2)" in log) == walk, log


def read_file_ok(path):
    got, err = read_until_error(path)
    assert err is None, (path, err)
    return got


def test_a_symlink_swapped_in_after_mount_is_not_followed(store, mount, tmp_path):
    """The guard is at each open, not at mount: a good file replaced by a symlink later."""
    url, mirror, _, _ = layout(tmp_path, store)
    victim = store.add("later.txt", len(SECRET), hashed=False)
    url = store.write(lambda man: None)
    store.up.fault(victim, fail_status=404)
    m = mount(url, "--mirror", mirror.as_uri())  # no trailing slash: joined with one
    os.symlink("../secret.txt", mirror / victim)
    got, err = read_until_error(m.p(victim))
    assert got == b"" and err is not None and err.errno == errno.EIO, (got, err)
    assert "%s: mirror %s/%s: refused: a symlink" % (victim, mirror.as_uri(), victim) in \
        m.stderr()


def test_a_local_manifests_relative_urls_stay_inside_the_mirror(mount, tmp_path):
    """A local manifest is trusted for its own file: URLs, not for what they become on a
    mirror: "%2e%2e/" there leaves the mirror's directory all the same."""
    (tmp_path / "secret.txt").write_bytes(SECRET)
    local = tmp_path / "local" / "sub"
    local.mkdir(parents=True)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    good = b"a good object, only in the mirror\n"
    (mirror / "good.txt").write_bytes(good)
    files = [{"path": "good.txt", "size": len(good)}]
    for name, rel in ESCAPES.items():
        files.append({"path": "evil/" + name, "size": len(SECRET), "url": rel})
    files.append({"path": "evil/absolute", "size": len(SECRET),
                  "url": (local / "%2e%2e" / "secret.txt").as_uri().replace("%252e", "%2e")})
    # the primaries (local/sub/../secret.txt and so on) do not exist; the mirror's would
    (local / "manifest.json").write_text(json.dumps({"version": 1, "files": files}))
    m = mount(str(local / "manifest.json"), "--mirror", mirror.as_uri() + "/")
    for f in files[1:]:
        got, err = read_until_error(m.p(f["path"]))
        assert SECRET not in got and got == b"", (f, got)
        assert err is not None and err.errno == errno.EIO, (f, err)
        assert "%s: not fetched from --mirror" % f["path"] in m.stderr(), f
    assert read_file_ok(m.p("good.txt")) == good


def test_an_http_mirror_is_never_asked_for_an_escaping_url(store, mount, tmp_path):
    """A mirror's server may decode "%2e%2e" (or "%252e", twice) and leave its root: the
    entry is asked of no mirror at all, and a good one still is."""
    url, _, entries, good = layout(tmp_path, store)
    with Upstream(store.root) as mirror:
        # Walk prefetch on (the default): reading evil/ may fetch the good entries ahead,
        # from the mirror too; nothing else may ever reach it.
        m = mount(url, "--mirror", mirror.url(""))
        for path in entries:
            if path.startswith("evil/"):
                got, err = read_until_error(m.p(path))
                assert got == b"" and err is not None and err.errno == errno.EIO, (path, err)
                assert "%s: not fetched from --mirror %s" % (path, mirror.url("")) in \
                    m.stderr(), path
        plain = set(good) | {u for p, u in entries.items() if not p.startswith("evil/")}
        asked = {p for p, s in mirror.stats()["paths"].items() if s["gets"] or s["heads"]}
        assert asked <= plain, mirror.stats()
        assert read_file_ok(m.p(good[0])) == expected(store, good[0])
        assert mirror.stats(good[0])["gets"] >= 1


@pytest.mark.parametrize("what", ["missing", "a-file"])
def test_a_file_mirror_that_cannot_be_opened_is_refused_at_start(store, tmp_path, what):
    store.add("a.bin", 10)
    url = store.write()
    target = tmp_path / "mirror"
    if what == "a-file":
        target.write_bytes(b"not a directory")
    try:
        m = Mount(url, tmp_path / "mnt", tmp_path / "mnt.log",
                  ["--mirror", target.as_uri() + "/"])
    except RuntimeError as e:  # exited before mounting, its stderr in the message
        err = str(e)
    else:
        m.kill()
        pytest.fail("mounted with an unusable --mirror:\n" + m.stderr())
    assert "spoolfs exited with 2 before mounting" in err, err
    assert "--mirror %s/: cannot open its directory: %s" % (
        target.as_uri(), "No such file or directory" if what == "missing" else
        "Not a directory") in err, err
    assert not is_mounted(str(tmp_path / "mnt"))


IN_OPEN, IN_NONBLOCK = 0x20, 0o4000


def opened_names(fd):
    """The names in the IN_OPEN events waiting on inotify fd."""
    import struct
    names = set()
    while True:
        try:
            buf = os.read(fd, 65536)
        except BlockingIOError:
            return names
        at = 0
        while at < len(buf):
            _, _, _, length = struct.unpack_from("iIII", buf, at)
            names.add(buf[at + 16:at + 16 + length].rstrip(b"\0").decode())
            at += 16 + length


@pytest.mark.parametrize("walk", [False, True], ids=["openat2", "fallback-walk"])
def test_a_fifo_or_device_in_a_mirror_is_refused_unopened(store, mount, tmp_path, monkeypatch,
                                                           walk):
    """Opening a device node or a FIFO has effects of its own (a tape rewinds, a writer
    waiting on the FIFO goes on): they are refused from an O_PATH descriptor's fstat. inotify
    reports every open but an O_PATH one (Linux 6.5 on; older kernels report those too, and
    there only the refusal is checked). A blocking open of the FIFO would hang the read."""
    import ctypes
    if walk:
        monkeypatch.setenv("SPOOLFS_TEST_NO_OPENAT2", "1")
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    names = ["fifo.bin"]
    os.mkfifo(mirror / "fifo.bin")
    try:
        os.mknod(mirror / "null.bin", 0o644 | 0o020000, os.stat("/dev/null").st_rdev)
        names.append("null.bin")
    except PermissionError:
        pass  # no CAP_MKNOD here: the FIFO alone
    for name in names:
        store.add(name, 100, hashed=False)
        store.up.fault(name, fail_status=404)
    m = mount(store.write(), "--mirror", mirror.as_uri())
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(IN_NONBLOCK)
    assert fd >= 0
    try:
        assert libc.inotify_add_watch(fd, str(mirror).encode(), IN_OPEN) >= 0
        os.close(os.open(mirror, os.O_PATH))
        os.close(os.open(mirror / "fifo.bin", os.O_PATH))
        o_path_reported = "fifo.bin" in opened_names(fd)
        for name in names:
            got, err = read_until_error(m.p(name))
            assert got == b"" and err is not None and err.errno == errno.EIO, (name, got, err)
            assert "%s: mirror %s/%s: refused: not a regular file" % (
                name, mirror.as_uri(), name) in m.stderr(), m.stderr()
        opened = opened_names(fd)
        if not o_path_reported:
            assert not opened & set(names), opened
    finally:
        os.close(fd)


def test_a_hard_link_in_a_mirror_is_served(store, mount, tmp_path):
    """A mirror may dedupe its objects by hard links: one whose other name is outside the
    mirror is still the mirror's file (only who may write in the mirror decides that)."""
    content = b"deduplicated object\n"
    (tmp_path / "pool").mkdir()
    (tmp_path / "pool" / "obj").write_bytes(content)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    os.link(tmp_path / "pool" / "obj", mirror / "hl.bin")
    name = store.add("hl.bin", len(content), hashed=False)
    store.up.fault(name, fail_status=404)
    m = mount(store.write(), "--mirror", mirror.as_uri())
    assert read_file_ok(m.p(name)) == content

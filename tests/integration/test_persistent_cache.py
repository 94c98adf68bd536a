"""A cache directory that outlives the session: --keep-cache, and recovery after SIGKILL."""

import errno
import os
import signal
import sqlite3
import subprocess
import threading

import pytest

from conftest import SLOW, is_mounted, read_file
from helpers import (expected, flight_records, keep_in_cache, read_until_error, refused_mount,
                     wait_durable, wait_until)
from rawhttp import RawServer, manifest, pattern, serve_object, static

MiB = 1 << 20


def wait_closed(m, name, timeout=20):
    """Until the daemon has seen the release of every handle on the object."""
    wait_until(lambda: flight_records(m).get(name, {}).get("handles", 0) == 0,
               lambda: flight_records(m), timeout)


def test_keep_cache_serves_the_next_mount_without_requests(store, mount, tmp_path):
    a = store.add("a.bin", 5 * MiB)
    url = store.write()
    cache = tmp_path / "cache"
    keep_in_cache(store, mount, url, cache, a)
    gets = store.up.stats(a)["gets"]
    assert os.listdir(cache / "spool")

    m2 = mount(url, "--cache-dir", str(cache), "--keep-cache", name="mnt2")
    assert read_file(m2.p(a)) == expected(store, a)
    assert store.up.stats(a)["gets"] == gets, "a kept, verified object was fetched again"
    # The reader may be answered before the line is written: wait for it.
    wait_until(lambda: "served from the cache" in m2.stderr(), m2.stderr)
    # ...and counted as a hit: its open started a flight, which the cache served whole.
    with open(m2.p(".spoolfs/stats")) as f:
        counts = dict(l.split() for l in f if l.startswith("spoolfs_cache_"))
    assert counts == {"spoolfs_cache_hits_total": "1", "spoolfs_cache_misses_total": "0"}, \
        counts


def test_without_keep_cache_unmount_leaves_nothing(store, mount, tmp_path):
    a = store.add("a.bin", 2 * MiB)
    url = store.write()
    made = tmp_path / "made-by-spoolfs"
    m = mount(url, "--cache-dir", str(made))
    read_file(m.p(a))
    m.check_clean_exit()
    assert not made.exists()

    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "mine.txt").write_text("not spoolfs'")
    m = mount(url, "-o", "cache_dir=%s" % existing, name="mnt2")
    read_file(m.p(a))
    m.check_clean_exit()
    assert os.listdir(existing) == ["mine.txt"]


def test_sigkill_then_remount_reuses_finished_objects(store, mount, tmp_path):
    done = store.add("done.bin", 4 * MiB)
    partial = store.add("partial.bin", 32 * MiB)
    url = store.write()
    cache = tmp_path / "cache"
    m = mount(url, "--cache-dir", str(cache))
    assert read_file(m.p(done)) == expected(store, done)
    wait_durable(m, done)

    store.up.fault(partial, rate=8 * MiB)
    reader = threading.Thread(target=lambda: subprocess.run(
        ["cat", m.p(partial)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    reader.start()
    store.up.wait_for(lambda s: s["bytes"] >= 4 * MiB, timeout=30 * SLOW, path=partial)
    serving = m.serving_pid()
    m.proc.send_signal(signal.SIGKILL)  # the supervisor first: it would start another
    m.proc.wait(10 * SLOW)
    os.kill(serving, signal.SIGKILL)
    subprocess.run(["fusermount3", "-u", "-z", m.path], check=False)
    reader.join(30 * SLOW)
    m.unmounted = True
    m.log.close()
    assert not is_mounted(m.path)
    store.up.clear(partial)
    store.up.reset()

    m2 = mount(url, "--cache-dir", str(cache), name="mnt2")
    assert read_file(m2.p(done)) == expected(store, done)
    assert store.up.stats(done)["gets"] == 0, "a finished object was fetched again"
    assert read_file(m2.p(partial)) == expected(store, partial)
    # resumed or refetched, never more than once (+ one chunk: the killed session's last
    # piece may still be counted by the upstream after the reset)
    assert store.up.stats(partial)["bytes"] <= 32 * MiB + MiB


def set_field(path, field, value):
    """A store.write mutation: the manifest entry of path gets field = value."""
    def mutate(manifest):
        for e in manifest["files"]:
            if e["path"] == path:
                e[field] = value
    return mutate


def set_etag(path, etag):
    return set_field(path, "etag", etag)


def keep_unhashed_in_cache(store, mount, cache, name, size):
    """An object without sha256, pinned by the manifest to the ETag the server has, read
    through a mount that keeps cache; returns (path, manifest URL)."""
    a = store.add(name, size, hashed=False)
    store.up.fault(a, etag='"v1"')
    url = store.write(mutate=set_etag(a, '"v1"'))
    keep_in_cache(store, mount, url, cache, a)
    return a, url


def test_a_manifest_etag_lets_an_unhashed_object_be_reused(store, mount, tmp_path):
    cache = tmp_path / "cache"
    a, url = keep_unhashed_in_cache(store, mount, cache, "a.bin", 3 * MiB)
    gets = store.up.stats(a)["gets"]

    m2 = mount(url, "--cache-dir", str(cache), "--keep-cache", name="mnt2")
    assert read_file(m2.p(a)) == expected(store, a)
    assert store.up.stats(a)["gets"] == gets, "the version the manifest pins was fetched again"
    m2.check_clean_exit()

    # a new version in the manifest is a new object
    store.up.fault(a, etag='"v2"')
    url = store.write(mutate=set_etag(a, '"v2"'))
    m3 = mount(url, "--cache-dir", str(cache), name="mnt3")
    assert read_file(m3.p(a)) == expected(store, a)
    assert store.up.stats(a)["gets"] == gets + 1


def test_a_url_with_a_fragment_names_no_version(store, mount, tmp_path):
    """An object without sha256 or etag whose URL holds a '#' (a fragment, never sent) was
    taken for one pinned to an ETag (the key's separator was '#'), so the next session
    served its kept bytes without a request, after the server had new ones. Only a sha256
    or an etag lets a cached object be reused."""
    a = store.add("a.bin", 2 * MiB, hashed=False)
    url = store.write(mutate=set_field(a, "url", a + "#v1"))
    cache = tmp_path / "cache"
    keep_in_cache(store, mount, url, cache, a)
    sent = store.up.stats(a)["bytes"]
    new = bytes(x ^ 0x5A for x in expected(store, a))
    with open(os.path.join(store.root, a), "wb") as f:
        f.write(new)
    m2 = mount(url, "--cache-dir", str(cache), "--keep-cache", name="mnt2")
    assert read_file(m2.p(a)) == new, "the previous session's bytes were served"
    assert store.up.stats(a)["bytes"] == sent + 2 * MiB


def test_a_manifest_etag_the_server_does_not_have_is_an_error(store, mount, tmp_path):
    a = store.add("a.bin", MiB, hashed=False)
    store.up.fault(a, etag='"v2"')
    url = store.write(mutate=set_etag(a, '"v1"'))
    m = mount(url)
    with pytest.raises(OSError) as e:
        read_file(m.p(a))
    assert e.value.errno == errno.EIO
    assert "no longer matches" in m.stderr(), m.stderr()


def test_cache_max_size_evicts_least_recently_used(store, mount, tmp_path):
    a, b, c = (store.add(n, 4 * MiB) for n in ("a.bin", "b.bin", "c.bin"))
    url = store.write()
    m = mount(url, "--cache-dir", str(tmp_path / "cache"), "--cache-max-size", "10M")
    for p in (a, b):
        assert read_file(m.p(p)) == expected(store, p)
        wait_durable(m, p)
        wait_closed(m, p)  # the kernel sends release after close() returns
    assert read_file(m.p(c)) == expected(store, c)  # 12 MiB > 10 MiB: a, the oldest, goes
    wait_durable(m, c)
    assert "evicted sha256:%s (%d bytes)" % (store.sha256(a), 4 * MiB) in m.stderr()
    gets = {p: store.up.stats(p)["gets"] for p in (a, b, c)}
    a_bytes = store.up.stats(a)["bytes"]
    assert read_file(m.p(b)) == expected(store, b)
    assert store.up.stats(b)["gets"] == gets[b], "b was evicted instead of a"
    # An evicted object is fetched again by its next open (its pages may still be in the
    # kernel's cache, so the read itself need not wait for that fetch): once, whole, in
    # one GET or in ranged parts (a read far ahead splits it).
    assert read_file(m.p(a)) == expected(store, a)
    st = store.up.wait_for(lambda st: st["gets"] > gets[a] and st["bytes"] >= a_bytes + 4 * MiB,
                           timeout=20 * SLOW, path=a)
    assert st["bytes"] == a_bytes + 4 * MiB, st
    wait_durable(m, a)
    # a came back, so b (now the oldest) went: the bound holds again
    spool = tmp_path / "cache" / "spool"
    assert sum(os.path.getsize(spool / f) for f in os.listdir(spool)) <= 10 * MiB


def test_cache_max_size_never_evicts_an_object_in_use(store, mount, tmp_path):
    a, b, c = (store.add(n, 4 * MiB) for n in ("a.bin", "b.bin", "c.bin"))
    url = store.write()
    m = mount(url, "--cache-dir", str(tmp_path / "cache"), "--cache-max-size", "6M")
    with open(m.p(a), "rb") as held:
        assert held.read() == expected(store, a)
        wait_durable(m, a)
        for p in (b, c):
            assert read_file(m.p(p)) == expected(store, p)
        held.seek(0)
        assert held.read() == expected(store, a)
        assert flight_records(m)[a]["local"] == 4 * MiB, "an object in use was evicted"
    assert read_file(m.p(a)) == expected(store, a)  # a fresh open: still no request
    assert store.up.stats(a)["gets"] == 1
    assert "over --cache-max-size" in m.stderr()


def spool_cached_bytes(cache):
    """Bytes of the cache directory's spool files in the page cache."""
    total = 0
    for name in os.listdir(cache / "spool"):
        out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES",
                              str(cache / "spool" / name)],
                             capture_output=True, text=True, check=True).stdout
        total += int(out.split()[0])
    return total


def test_reads_through_fuse_leave_the_spool_in_the_page_cache(store, mount, tmp_path):
    """Replies copy from the spool and never take its pages: a page moved into FUSE's
    cache is gone from the spool's, and the next reader of the spool (a passthrough open,
    another mount) would wait for the disk. Once the spool is written back its pages can
    be taken, so it is read through FUSE again with FUSE's own pages dropped."""
    a = store.add("a.bin", 32 * MiB)
    cache = tmp_path / "cache"
    m = mount(store.write(), "--cache-dir", str(cache), "--no-passthrough")
    want = expected(store, a)
    assert read_file(m.p(a)) == want
    wait_durable(m, a)  # fdatasync'd: the spool's pages are clean now
    for _ in range(2):
        fd = os.open(m.p(a), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # FUSE's copy, not the spool
            got = bytearray()
            while True:
                b = os.read(fd, MiB)
                if not b:
                    break
                got += b
        finally:
            os.close(fd)
        assert got == want
    # Moved pages would leave little of the spool cached; the kernel's own reclaim of clean
    # pages may take a few on a busy machine (one TSan run of the suite found 6 of 8,192 gone).
    assert spool_cached_bytes(cache) >= 31 * MiB


def pages_of(data, version):
    """How many 4 KiB pages of data equal version's."""
    return sum(data[i:i + 4096] == version[i:i + 4096] for i in range(0, len(data), 4096))


@pytest.mark.parametrize("passthrough", [True, False], ids=["default", "no-passthrough"])
def test_an_evicted_object_keeps_its_version_for_the_session(store, mount, tmp_path,
                                                             passthrough):
    """a.bin has neither sha256 nor etag in the manifest: only the strong ETag of its first
    response pins its version for the session. Evicting it under --cache-max-size dropped
    that pin with the flight, so after the server replaced a.bin (same size, new ETag) the
    next download in the same session took the new version: a re-read returned version-2
    bytes (and, with --no-passthrough, a mix of cached version-1 pages and version-2 pages).
    A session is a snapshot: every read of a.bin returns version-1 bytes or fails with EIO,
    never version-2 bytes, never a mix."""
    size = 2 * MiB
    a, b = (store.add(n, size, hashed=False) for n in ("a.bin", "b.bin"))
    url = store.write()
    args = ["--cache-dir", str(tmp_path / "cache"), "--cache-max-size", "3M"]
    m = mount(url, *(args + ([] if passthrough else ["--no-passthrough"])))
    v1 = expected(store, a)
    assert read_file(m.p(a)) == v1
    wait_durable(m, a)
    wait_closed(m, a)
    assert read_file(m.p(b)) == expected(store, b)  # 4 MiB > 3 MiB: a.bin goes
    wait_until(lambda: flight_records(m).get(a, {}).get("local", 0) == 0,
               lambda: "a.bin was never evicted: %r" % flight_records(m))

    # The server's a.bin is replaced: same size, new bytes, new mtime (so a new ETag).
    v2 = bytes(x ^ 0x5A for x in v1)
    tmp = os.path.join(store.root, a + ".new")
    with open(tmp, "wb") as f:
        f.write(v2)
    os.replace(tmp, os.path.join(store.root, a))

    def check(data, err, what):
        same = data == v1[:len(data)]
        assert same, "%s: of %d pages read, %d are version 2's and %d version 1's" % (
            what, (len(data) + 4095) // 4096, pages_of(data, v2), pages_of(data, v1))
        if err is not None:
            assert err.errno == errno.EIO, (what, err)
        else:
            assert len(data) == size, what

    # 1. Every page dropped from the kernel's cache first: the daemon must answer the read.
    fd = os.open(m.p(a), os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        data, err = bytearray(), None
        try:
            while True:
                blk = os.read(fd, MiB)
                if not blk:
                    break
                data += blk
        except OSError as e:
            err = e
    finally:
        os.close(fd)
    check(bytes(data), err, "a re-read after the eviction")
    # 2. Whatever that re-read started has settled (no response in flight upstream).
    store.up.wait_for(lambda s: s["active"] == 0, timeout=20 * SLOW, path=a)
    # 3. Plain reads (kernel's cached pages allowed), and one with half of them dropped.
    data, err = read_until_error(m.p(a))
    check(data, err, "a later re-read")
    with open(m.p(a), "rb", buffering=0) as f:
        os.posix_fadvise(f.fileno(), 0, size // 2, os.POSIX_FADV_DONTNEED)
    data, err = read_until_error(m.p(a))
    check(data, err, "a re-read with the first half of the pages dropped")


def test_an_evicted_object_with_only_last_modified_keeps_its_version(mount, tmp_path):
    """As above, for a server that sends no ETag, only Last-Modified: the pin an evicted
    (or failed) flight leaves for the session held only ETags, so the next download took
    the server's new version. It must ask If-Unmodified-Since the first one's date and
    return version-1 bytes or EIO."""
    size = 2 * MiB
    dates = ["Mon, 01 Jan 2024 00:00:00 GMT", "Tue, 02 Jan 2024 00:00:00 GMT"]
    objs = {"a": [pattern(size, "a1"), pattern(size, "a2")], "b": [pattern(size, "b1")]}
    version = {"a": 0, "b": 0}

    def handler(name):
        return lambda ex: serve_object(ex, objs[name][version[name]],
                                       [("Last-Modified", dates[version[name]])])

    srv = RawServer({"/manifest.json": static(manifest([{"path": "a.bin", "size": size},
                                                         {"path": "b.bin", "size": size}])),
                     "/a.bin": handler("a"), "/b.bin": handler("b")})
    try:
        m = mount(srv.url("manifest.json"), "--cache-dir", str(tmp_path / "cache"),
                  "--cache-max-size", "3M")
        assert read_file(m.p("a.bin")) == objs["a"][0]
        wait_durable(m, "a.bin")
        wait_closed(m, "a.bin")
        assert read_file(m.p("b.bin")) == objs["b"][0]  # 4 MiB > 3 MiB: a.bin goes
        wait_until(lambda: flight_records(m).get("a.bin", {}).get("local", 0) == 0,
                   lambda: "a.bin was never evicted: %r" % flight_records(m))
        version["a"] = 1
        fd = os.open(m.p("a.bin"), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            data = os.pread(fd, size, 0)
            err = None
        except OSError as e:
            data, err = b"", e
        finally:
            os.close(fd)
        assert data == objs["a"][0][:len(data)], "version-2 bytes in the same session"
        assert err is None or err.errno == errno.EIO, err
        later = srv.requests("/a.bin")[1:]
        assert later and all(r.headers.get("if-unmodified-since") == dates[0] for r in later), \
            [r.headers for r in later]
    finally:
        srv.stop()


def test_a_refused_mount_loses_nothing_of_a_kept_cache(store, mount, tmp_path):
    """A kept cache, then a mount of it (without --keep-cache) that is refused: a mistyped
    manifest URL. The refused mount ran the unmount clean-up and deleted the index and
    every spool file. Bad input loses nothing: the next mount still serves the cache."""
    a = store.add("a.bin", 2 * MiB)
    url = store.write()
    cache = tmp_path / "cache"
    keep_in_cache(store, mount, url, cache, a)
    kept = sorted(os.listdir(cache / "spool"))
    assert kept

    err = refused_mount(url.replace("manifest.json", "no-such-manifest.json"),
                        tmp_path / "mnt-refused", "--cache-dir", str(cache))
    assert "no-such-manifest.json" in err, err
    assert sorted(os.listdir(cache / "spool")) == kept
    assert (cache / "index.db").exists()
    gets = store.up.stats(a)["gets"]
    m2 = mount(url, "--cache-dir", str(cache), name="mnt2")
    assert read_file(m2.p(a)) == expected(store, a)
    assert store.up.stats(a)["gets"] == gets


def test_a_spool_path_that_is_not_a_directory_refuses_the_mount(store, tmp_path):
    """DIR/spool a plain file: the mount came up and every read failed with ENOTDIR. It is
    refused at mount, with the reason."""
    store.add("a.bin", MiB)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "spool").write_text("not a directory")
    err = refused_mount(store.write(), tmp_path / "mnt", "--cache-dir", str(cache))
    assert "%s/spool is not a directory" % cache in err, err
    assert (cache / "spool").read_text() == "not a directory"


def test_cache_max_size_evicts_what_an_earlier_session_left_partial(store, mount, tmp_path):
    """A session read the last 4 KiB of four 16 MiB objects (an archive's index) and ended:
    four partial spools, each taking its object's whole size, 64 MiB against a 20 MiB bound.
    Only complete spools were eviction candidates, so the next session, with none of them
    in use, stayed over the bound for good. Partial ones left by an earlier session go too."""
    bigs = [store.add("big%d.bin" % i, 16 * MiB) for i in range(4)]
    smalls = [store.add("small%d.bin" % i, 2 * MiB) for i in range(2)]
    url = store.write()
    cache = tmp_path / "cache"
    args = ["--cache-dir", str(cache), "--cache-max-size", "20M", "--keep-cache"]

    def spool_bytes():
        spool = cache / "spool"
        return sum(os.stat(spool / n).st_blocks * 512 for n in os.listdir(spool))

    m = mount(url, *args)
    for b in bigs:
        with open(m.p(b), "rb", buffering=0) as f:
            f.seek(16 * MiB - 4096)
            assert f.read(4096) == expected(store, b)[-4096:]
    m.check_clean_exit()
    assert spool_bytes() > 20 * MiB  # what the test is about: partial spools over the bound

    m2 = mount(url, *args, name="mnt2")
    for s in smalls:
        assert read_file(m2.p(s)) == expected(store, s)
        wait_durable(m2, s)
    assert spool_bytes() <= 20 * MiB, "%d bytes of spool files" % spool_bytes()
    for b in bigs:  # an evicted partial object reads right
        assert read_file(m2.p(b))[-4096:] == expected(store, b)[-4096:]


def test_the_first_mount_forgets_kept_objects_that_name_no_version(store, mount, tmp_path):
    """A kept cache holds an object without sha256 or etag (its bytes are the server's of
    then). No later session may serve it, and with two mounts starting together the second
    could adopt its old records as another mount's download before the first had started
    afresh: 1-2 of 80 reads returned the old bytes. The first mount of the directory now
    forgets such objects before any other can start; both mounts read the new bytes."""
    a = store.add("a.bin", 2 * MiB, hashed=False)
    h = store.add("h.bin", 2 * MiB)  # hashed: names its version, kept
    url = store.write()
    cache = tmp_path / "cache"
    m0 = mount(url, "--cache-dir", str(cache), "--keep-cache", name="mnt0")
    for p in (a, h):
        assert read_file(m0.p(p)) == expected(store, p)
        wait_durable(m0, p)
    m0.check_clean_exit()
    assert len(os.listdir(cache / "spool")) == 2
    new = bytes(x ^ 0x5A for x in expected(store, a))
    with open(os.path.join(store.root, a), "wb") as f:
        f.write(new)

    m1 = mount(url, "--cache-dir", str(cache), name="mnt1")
    assert "forgot 1 cached objects that name no version" in m1.stderr(), m1.stderr()
    assert len(os.listdir(cache / "spool")) == 1  # h.bin's
    m2 = mount(url, "--cache-dir", str(cache), name="mnt2")
    assert read_file(m2.p(a)) == new
    assert read_file(m1.p(a)) == new
    gets = store.up.stats(h)["gets"]
    assert read_file(m1.p(h)) == expected(store, h)
    assert store.up.stats(h)["gets"] == gets, "a kept, verified object was fetched again"


def spool_file(cache):
    """The one spool file in cache."""
    files = [os.path.join(d, f) for d, _, fs in os.walk(cache / "spool") for f in fs]
    assert len(files) == 1, files
    return files[0]


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


@pytest.mark.parametrize("offset", [4096, 3 * MiB], ids=["head", "tail"])
def test_a_kept_object_changed_on_disk_is_never_served(store, mount, tmp_path, offset):
    """A complete spool was trusted by its size: one byte changed in the cache directory
    between sessions (a stray write, a disk tool) was served as the object's. All its bytes
    are local, so none is served before the hash says they are right."""
    a = store.add("a.bin", 4 * MiB)
    url = store.write()
    cache = tmp_path / "cache"
    keep_in_cache(store, mount, url, cache, a)
    flip_byte(spool_file(cache), offset)
    gets = store.up.stats(a)["gets"]

    m2 = mount(url, "--cache-dir", str(cache), "--keep-cache", name="mnt2")
    data, err = read_until_error(m2.p(a))
    assert data == expected(store, a)[:len(data)], "a changed byte was served"
    # EIO before any byte, or (the check done before the open) the object fetched afresh.
    assert (err is not None and err.errno == errno.EIO and data == b"") or \
        len(data) == 4 * MiB, (err, len(data))
    assert "checking its sha256 again" in m2.stderr(), m2.stderr()
    assert "sha256 mismatch" in m2.stderr(), m2.stderr()
    # The object is then fetched afresh, once, and right.
    assert read_file(m2.p(a)) == expected(store, a)
    assert store.up.stats(a)["gets"] == gets + 1


@pytest.mark.parametrize("hashed", [True, False], ids=["sha256", "etag"])
def test_a_cache_copied_with_its_times_is_served_as_it_is(store, mount, tmp_path, hashed):
    """A cache directory restored from an archive, or copied keeping times (new inodes),
    holds the bytes it was sealed with: served without a request and without a check."""
    cache = tmp_path / "cache"
    if hashed:
        a = store.add("a.bin", 4 * MiB)
        url = store.write()
        keep_in_cache(store, mount, url, cache, a)
    else:
        a, url = keep_unhashed_in_cache(store, mount, cache, "a.bin", 4 * MiB)
    path = spool_file(cache)
    subprocess.run(["cp", "-p", path, path + ".copy"], check=True)
    os.replace(path + ".copy", path)
    gets = store.up.stats(a)["gets"]

    m2 = mount(url, "--cache-dir", str(cache), name="mnt2")
    assert read_file(m2.p(a)) == expected(store, a)
    # The reader may be answered before the line is written: wait for it.
    wait_until(lambda: "served from the cache" in m2.stderr(), m2.stderr)
    assert "changed" not in m2.stderr()
    assert store.up.stats(a)["gets"] == gets


def test_a_cache_copied_without_its_times_is_checked_once(store, mount, tmp_path):
    """Copied without its times, a hashed object is hashed again (not fetched), and sealed
    anew for the next mount."""
    a = store.add("a.bin", 4 * MiB)
    url = store.write()
    cache = tmp_path / "cache"
    keep_in_cache(store, mount, url, cache, a)
    path = spool_file(cache)
    subprocess.run(["cp", path, path + ".copy"], check=True)
    os.replace(path + ".copy", path)
    gets = store.up.stats(a)["gets"]

    m2 = mount(url, "--cache-dir", str(cache), "--keep-cache", name="mnt2")
    assert read_file(m2.p(a)) == expected(store, a)
    wait_durable(m2, a)
    assert "checking its sha256 again" in m2.stderr(), m2.stderr()
    m2.check_clean_exit()
    m3 = mount(url, "--cache-dir", str(cache), name="mnt3")
    assert read_file(m3.p(a)) == expected(store, a)
    wait_until(lambda: "served from the cache" in m3.stderr(), m3.stderr)
    assert "checking" not in m3.stderr()
    assert store.up.stats(a)["gets"] == gets


def test_a_kept_unhashed_object_changed_on_disk_is_fetched_again(store, mount, tmp_path):
    cache = tmp_path / "cache"
    a, url = keep_unhashed_in_cache(store, mount, cache, "a.bin", 3 * MiB)
    flip_byte(spool_file(cache), 10)
    gets = store.up.stats(a)["gets"]

    m2 = mount(url, "--cache-dir", str(cache), name="mnt2")
    assert read_file(m2.p(a)) == expected(store, a)
    assert "fetching it again" in m2.stderr(), m2.stderr()
    assert store.up.stats(a)["gets"] == gets + 1


def test_a_session_reads_more_objects_than_its_fd_limit(store, mount, tmp_path):
    """With --cache-dir every object read kept its spool fd open for the whole session:
    past RLIMIT_NOFILE each new object failed ("Too many open files"). A complete object's
    fd is closed once it is recorded and nobody reads it, and opened again when read."""
    names = [store.add("f%03d.bin" % i, 1000 + i, hashed=i % 2 == 0) for i in range(300)]
    m = mount(store.write(), "--cache-dir", str(tmp_path / "cache"))
    pid = m.serving_pid()
    subprocess.run(["prlimit", "--pid", str(pid), "--nofile=150:150"], check=True)
    for n in names:
        assert read_file(m.p(n)) == expected(store, n), n
    assert "Too many open files" not in m.stderr()
    wait_until(lambda: len(os.listdir("/proc/%d/fd" % pid)) < 100,
               lambda: len(os.listdir("/proc/%d/fd" % pid)))
    # Read again from the kept spools, not fetched again.
    gets = sum(store.up.stats(n)["gets"] for n in names)
    for n in names[:20]:
        assert read_file(m.p(n)) == expected(store, n), n
    assert sum(store.up.stats(n)["gets"] for n in names) == gets


@pytest.mark.parametrize("how", ["truncated", "deleted"])
def test_a_kept_object_whose_file_does_not_match_its_records_says_so(store, mount, tmp_path,
                                                                      how):
    """A spool cut short (its time put back) or deleted was fetched again without a word,
    where a changed one is logged."""
    a = store.add("a.bin", 3 * MiB)
    url = store.write()
    cache = tmp_path / "cache"
    keep_in_cache(store, mount, url, cache, a)
    path = spool_file(cache)
    if how == "deleted":
        os.unlink(path)
    else:
        st = os.stat(path)
        os.truncate(path, MiB)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    gets = store.up.stats(a)["gets"]
    m2 = mount(url, "--cache-dir", str(cache), name="mnt2")
    assert read_file(m2.p(a)) == expected(store, a)
    assert "the cached copy does not match its records; fetching it again" in m2.stderr(), \
        m2.stderr()
    assert store.up.stats(a)["gets"] == gets + 1


def test_a_cache_kept_by_an_older_spoolfs_is_checked_once(store, mount, tmp_path):
    """An older spoolfs recorded no seals: its complete objects are hashed again once (not
    fetched), the log says why, and the next mount serves them as they are."""
    a = store.add("a.bin", 3 * MiB)
    url = store.write()
    cache = tmp_path / "cache"
    keep_in_cache(store, mount, url, cache, a)
    db = sqlite3.connect(str(cache / "index.db"))
    db.execute("DELETE FROM spool_seal")
    db.commit()
    db.close()
    gets = store.up.stats(a)["gets"]
    m2 = mount(url, "--cache-dir", str(cache), "--keep-cache", name="mnt2")
    assert read_file(m2.p(a)) == expected(store, a)
    assert "no seal (an older spoolfs kept it); checking its sha256 again" in m2.stderr()
    wait_durable(m2, a)
    m2.check_clean_exit()
    m3 = mount(url, "--cache-dir", str(cache), name="mnt3")
    assert read_file(m3.p(a)) == expected(store, a)
    assert "checking" not in m3.stderr()
    assert store.up.stats(a)["gets"] == gets


def test_without_cache_max_size_a_small_disk_still_never_fills(store, mount, tmp_path):
    """No --cache-max-size: the cache is bounded by its filesystem (half of a disk this
    small: 16 MiB of a 32 MiB tmpfs), says so, and evicts like an explicit bound."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m,mode=0700", "tmpfs", str(disk)],
                   check=True)
    try:
        a, b, c = (store.add(n, 6 * MiB) for n in ("a.bin", "b.bin", "c.bin"))
        m = mount(store.write(), "--cache-dir", str(disk / "cache"))
        assert "cache bound 15 MiB" in m.stderr() or "cache bound 16 MiB" in m.stderr(), \
            m.stderr()
        for p in (a, b):
            assert read_file(m.p(p)) == expected(store, p)
            wait_durable(m, p)
            wait_closed(m, p)
        assert read_file(m.p(c)) == expected(store, c)  # 18 MiB > the bound: a goes
        wait_durable(m, c)
        assert "evicted sha256:%s" % store.sha256(a) in m.stderr(), m.stderr()
        m.check_clean_exit()
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def thread_nice(pid, name):
    """The nice value of the daemon's thread called name (field 19 of its stat)."""
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
            if f.read().strip() == name:
                with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                    return int(f.read().rsplit(")", 1)[1].split()[16])
    return None


def test_the_recorder_yields_the_cpu_to_readers(store, mount, tmp_path):
    """A walk of small objects queued a record per object (two syncs, two transactions), and
    on a loaded machine the recorder's CPU came out of the reader's: it runs at nice 10,
    and its records still come (the object is durable)."""
    a = store.add("a.bin", 64 << 10)
    url = store.write()
    m = mount(url, "--cache-dir", str(tmp_path / "cache"), "--keep-cache")
    assert read_file(m.p(a)) == expected(store, a)
    wait_durable(m, a)
    with open(m.p(".spoolfs/stats")) as f:
        pid = int(dict(l.split() for l in f if not l.startswith("#"))["spoolfs_serving_pid"])
    assert thread_nice(pid, "spoolfs-record") == 10
    assert thread_nice(pid, "spoolfs-xfer") == 0

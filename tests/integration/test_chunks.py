"""Chunk hashes: an object whose manifest entry names a hash list is served chunk by chunk,
each chunk only once its bytes match its sha256, whatever the access pattern; a bad chunk
costs one refetch, then EIO for the reads that touch it, and nothing else.

The manifests are written by tests/upstream/chunklist.py (what `spoolfs publish` writes)."""

import errno
import json
import os
import random
import subprocess
import sys
import threading

import pytest

from conftest import SLOW, read_file
from helpers import (errno_of, expected, flight_records, mount_with_tmpdir, read_until_error,
                     readlink_or_empty, wait_durable, wait_until)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "upstream"))
import chunklist  # noqa: E402
from client import Upstream  # noqa: E402

KiB = 1 << 10
MiB = 1 << 20
CHUNK = 256 * KiB


def chunked_store(store, files, **kw):
    """Writes files ({path: size}) with chunk hashes; returns the manifest's URL."""
    for path, size in files.items():
        store.add(path, size)
    url = store.write()
    chunklist.add_chunks(store.root, **kw)
    return url


def pread(path, off, n):
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, n, off)
    finally:
        os.close(fd)


def test_a_corrupt_chunk_fails_only_the_reads_that_touch_it(store, mount):
    size = 12 * MiB
    k = 17  # the bad chunk
    url = chunked_store(store, {"big.bin": size})
    store.up.fault("big.bin", corrupt_at=[k * CHUNK + 1000])  # every copy it sends
    m = mount(url)
    want = expected(store, "big.bin")
    with open(m.p("big.bin"), "rb", buffering=0) as f:
        # a sparse reader of the 4 KiB around the flipped byte: EIO (after one refetch),
        # never the flipped byte
        assert errno_of(lambda: os.pread(f.fileno(), 4096, k * CHUNK)) == errno.EIO
        # the chunks beside it are served
        assert os.pread(f.fileno(), CHUNK, (k - 1) * CHUNK) == want[(k - 1) * CHUNK:k * CHUNK]
        assert os.pread(f.fileno(), 4096, (k + 1) * CHUNK) == want[(k + 1) * CHUNK:][:4096]
        assert errno_of(lambda: os.pread(f.fileno(), 4096, k * CHUNK + 8192)) == errno.EIO
    log = m.stderr()
    assert log.count("big.bin: chunk %d (bytes %d-%d) does not match its sha256, from http" % (
        k, k * CHUNK, (k + 1) * CHUNK)) == 1, log
    assert log.count("does not match its sha256 again") == 1, log
    assert "reads of it get EIO" in log, log
    # a sequential reader (a new open: the bad chunk gets one more try) gets every chunk
    # before the bad one, then EIO
    got, err = read_until_error(m.p("big.bin"), block=64 * KiB)
    assert err is not None and err.errno == errno.EIO, err
    assert got == want[:len(got)] and len(got) >= k * CHUNK - 128 * KiB, len(got)
    wait_until(lambda: flight_records(m)["big.bin"]["written"] == size,
               lambda: flight_records(m))
    # the object, its bad chunk once more for the first open, once for the second
    assert store.up.stats("big.bin")["bytes"] <= size + 2 * CHUNK, store.up.stats("big.bin")
    log = m.stderr()
    assert log.count("does not match its sha256 again") == 2, log
    assert "chunk %d " % (k + 1) not in log, log
    m.check_clean_exit()


MMAP_READER = r"""
import mmap, sys
f = open(sys.argv[1], "rb")
mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
sys.stdout.buffer.write(mm[int(sys.argv[2]):int(sys.argv[2]) + 4096])
sys.stdout.flush()
"""


def test_mmap_of_a_corrupt_chunk_is_sigbus_never_wrong_bytes(store, mount):
    size = 4 * MiB
    k = 9
    url = chunked_store(store, {"m.bin": size})
    store.up.fault("m.bin", corrupt_at=[k * CHUNK + 77])
    m = mount(url)
    want = expected(store, "m.bin")
    good = subprocess.run([sys.executable, "-c", MMAP_READER, m.p("m.bin"), str(2 * CHUNK)],
                          capture_output=True, timeout=30 * SLOW)
    assert good.returncode == 0 and good.stdout == want[2 * CHUNK:2 * CHUNK + 4096]
    bad = subprocess.run([sys.executable, "-c", MMAP_READER, m.p("m.bin"), str(k * CHUNK)],
                         capture_output=True, timeout=30 * SLOW)
    assert bad.returncode == -7, (bad.returncode, bad.stderr)  # SIGBUS
    assert bad.stdout == b""
    m.check_clean_exit()


def test_a_reader_waits_for_its_chunk_not_for_the_whole_object(store, mount):
    """The response is held near the end of the object: what arrived before it is served,
    chunk by chunk, although the object cannot be whole (nothing waits for a whole hash).
    One stream (under 12 MiB), so its last MiB is the last to arrive: what a whole hash
    withholds."""
    size = 6 * MiB
    url = chunked_store(store, {"held.bin": size})
    hold = size - 100 * KiB
    store.up.fault("held.bin", hold_at=hold)
    m = mount(url)
    want = expected(store, "held.bin")
    out = {}
    off = size - 2 * CHUNK  # the last whole chunk before the held one

    def reader():
        try:
            out["first"] = pread(m.p("held.bin"), 0, 4096)
            out["late"] = pread(m.p("held.bin"), off, 4096)
        except OSError as e:
            out["err"] = e

    t = threading.Thread(target=reader)
    try:
        t.start()
        t.join(15 * SLOW)
        assert not t.is_alive(), "the reader waited for the whole object"
        assert store.up.stats("held.bin")["held"] == 1  # the response is still held
    finally:
        store.up.release("held.bin")
        t.join(30 * SLOW)
    assert out.get("first") == want[:4096], out
    assert out.get("late") == want[off:off + 4096], out
    assert read_file(m.p("held.bin")) == want
    m.check_clean_exit()


def test_a_sparse_reader_is_verified(store, mount):
    """200 random 4 KiB reads of a large object: each one's chunk is fetched whole and
    checked; the one whose chunk came corrupt gets EIO, the others their bytes."""
    size = 256 * MiB
    url = chunked_store(store, {"sparse.bin": size})
    rng = random.Random(23)
    offs = sorted({rng.randrange(CHUNK, size - 4096) // 4096 * 4096 for _ in range(200)})
    rng.shuffle(offs)
    bad_off = offs[100]
    store.up.fault("sparse.bin", corrupt_at=[bad_off + 5])
    m = mount(url)
    want = expected(store, "sparse.bin")
    with open(m.p("sparse.bin"), "rb", buffering=0) as f:
        for off in offs:
            if off // CHUNK == bad_off // CHUNK:
                assert errno_of(lambda: os.pread(f.fileno(), 4096, off)) == errno.EIO
            else:
                assert os.pread(f.fileno(), 4096, off) == want[off:off + 4096], off
    rec = flight_records(m)["sparse.bin"]
    assert rec["access"] == "sparse", rec
    sent = store.up.stats("sparse.bin")["bytes"]
    # whole chunks (grown by the kernel's readahead to two at most), and one refetch
    assert sent <= len(offs) * 2 * CHUNK + CHUNK, sent
    print("sparse: %d reads of 4 KiB, %d bytes fetched: %.1fx" % (
        len(offs), sent, sent / (len(offs) * 4096)))
    m.check_clean_exit()


def test_a_mirror_serves_the_chunk_the_first_source_corrupted(store, mount):
    size = 6 * MiB
    k = 11
    url = chunked_store(store, {"mir.bin": size})
    store.up.fault("mir.bin", corrupt_at=[k * CHUNK + 3])
    with Upstream(store.root) as mirror:
        m = mount(url, "--mirror", mirror.url(""))
        assert read_file(m.p("mir.bin")) == expected(store, "mir.bin")
        assert mirror.stats("mir.bin")["gets"] >= 1
        log = m.stderr()
        assert "mir.bin: chunk %d (bytes %d-%d) does not match its sha256, from %s" % (
            k, k * CHUNK, (k + 1) * CHUNK, store.up.url("mir.bin")) in log, log
        assert "reads of it get EIO" not in log, log
        m.check_clean_exit()


def test_a_hash_list_that_does_not_match_fails_the_open(store, mount):
    """The server's hash list is not the one the manifest names (a bad mirror, a broken
    upload): the open fails, and nothing of the object is fetched or served."""
    url = chunked_store(store, {"hl.bin": 3 * MiB, "ok.bin": 1 * MiB})
    with open(os.path.join(store.root, "manifest.json")) as f:
        manifest = json.load(f)
    entry = next(e for e in manifest["entries"] if e["path"] == "hl.bin")
    listed = os.path.join(store.root, entry["chunks"]["url"])
    with open(listed, "r+b") as f:
        f.seek(40)
        b = f.read(1)
        f.seek(40)
        f.write(bytes([b[0] ^ 1]))
    m = mount(url)
    assert errno_of(lambda: open(m.p("hl.bin"), "rb").close()) == errno.EIO
    assert store.up.stats("hl.bin")["gets"] == 0  # nothing of the object was fetched
    assert read_file(m.p("ok.bin")) == expected(store, "ok.bin")
    log = m.stderr()
    assert "hl.bin (hash list): sha256 mismatch" in log, log
    # Said once, by fetch/ (fs/ only replies).
    said = "hl.bin: its hash list from %s could not be fetched or does not match its " \
        "sha256" % store.up.url(entry["chunks"]["url"])
    assert log.count(said) == 1, log
    m.check_clean_exit()


def test_a_hash_list_of_the_wrong_length_fails_the_open(store, mount):
    url = chunked_store(store, {"short.bin": 2 * MiB},
                        mutate_list=lambda path, data: data[:-32])  # one chunk short
    m = mount(url)
    assert errno_of(lambda: open(m.p("short.bin"), "rb").close()) == errno.EIO
    assert store.up.stats("short.bin")["gets"] == 0
    assert "short.bin (hash list)" in m.stderr(), m.stderr()
    m.check_clean_exit()


def spool_of(cache, size):
    names = [n for n in os.listdir(cache / "spool")
             if os.path.getsize(cache / "spool" / n) == size]
    assert len(names) == 1, names
    return cache / "spool" / names[0]


def test_a_corrupt_chunk_of_a_kept_spool_is_fetched_again_not_served(store, mount, tmp_path):
    size = 8 * MiB
    k = 5
    url = chunked_store(store, {"kept.bin": size})
    cache = tmp_path / "cache"
    m = mount(url, "--cache-dir", str(cache), "--keep-cache")
    want = expected(store, "kept.bin")
    assert read_file(m.p("kept.bin")) == want
    wait_durable(m, "kept.bin")
    m.check_clean_exit()
    with open(spool_of(cache, size), "r+b") as f:  # a disk error, a stray write
        f.seek(k * CHUNK + 123)
        b = f.read(1)
        f.seek(k * CHUNK + 123)
        f.write(bytes([b[0] ^ 0x40]))
    store.up.reset()
    m2 = mount(url, "--cache-dir", str(cache), "--keep-cache", name="mnt2")
    assert pread(m2.p("kept.bin"), k * CHUNK + 120, 16) == want[k * CHUNK + 120:][:16]
    assert read_file(m2.p("kept.bin")) == want
    assert store.up.stats("kept.bin")["bytes"] == CHUNK, store.up.stats("kept.bin")
    log = m2.stderr()
    assert "kept.bin: chunk %d (bytes %d-%d) does not match its sha256, from the cache " \
        "directory; fetching it again" % (k, k * CHUNK, (k + 1) * CHUNK) in log, log
    m2.check_clean_exit()


def test_a_chunked_object_whose_idle_spool_was_swept_is_fetched_again(store, mount, tmp_path):
    """Its complete spool closed while idle and deleted behind the daemon's back (a tmp
    cleaner): the next open starts a new flight, which needs the digests again, from the
    hash list (kept: no request for it)."""
    size = 3 * MiB
    url = chunked_store(store, {"swept.bin": size})
    tmpdir = tmp_path / "tmp"
    m = mount_with_tmpdir(mount, tmpdir, url)
    want = expected(store, "swept.bin")
    assert read_file(m.p("swept.bin")) == want
    spools = [os.path.join(d, n) for d, _, names in os.walk(tmpdir) for n in names
              if n.endswith(".spool") and os.path.getsize(os.path.join(d, n)) == size]
    assert len(spools) == 1, spools

    def spool_fd_open():
        fds = "/proc/%d/fd" % m.serving_pid()
        # An fd closed between the listing and its readlink is the very thing awaited.
        return any(readlink_or_empty(os.path.join(fds, fd)).startswith(spools[0])
                   for fd in os.listdir(fds))
    wait_until(lambda: not spool_fd_open(), "the idle spool's fd stays open")
    os.unlink(spools[0])
    with open(m.p("swept.bin"), "rb") as f:
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    assert read_file(m.p("swept.bin")) == want
    assert store.up.stats("swept.bin")["gets"] == 2
    assert "its spool file is gone: opening it afresh" in m.stderr()
    m.check_clean_exit()


def test_a_chunked_object_whose_hash_list_spool_was_swept_is_fetched_again(store, mount, tmp_path):
    """Every spool file deleted behind the daemon's back, the hash list's too: the next open
    fetches the hash list again (its complete flight leaves the table), where it failed
    with EIO at every open for the rest of the session."""
    size = 3 * MiB
    url = chunked_store(store, {"gone.bin": size})
    tmpdir = tmp_path / "tmp"
    m = mount_with_tmpdir(mount, tmpdir, url)
    want = expected(store, "gone.bin")
    assert read_file(m.p("gone.bin")) == want
    spools = [os.path.join(d, n) for d, _, names in os.walk(tmpdir) for n in names
              if n.endswith(".spool")]
    assert len(spools) == 2, spools  # the object's and its hash list's
    for p in spools:
        os.unlink(p)
    for _ in range(2):
        with open(m.p("gone.bin"), "rb") as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        assert read_file(m.p("gone.bin")) == want
    assert store.up.stats("gone.bin")["gets"] >= 2
    assert "its spool file is gone: opening it afresh" in m.stderr()
    m.check_clean_exit()

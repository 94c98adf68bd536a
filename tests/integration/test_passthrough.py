"""Kernel passthrough: a complete object that this mount never read through FUSE's page
cache is read by the kernel straight from the spool file, with no request to the daemon.

Shown by freezing the daemon (SIGSTOP) after the open: a passthrough read still returns
every byte; a read that needed the daemon would wait for it. Passthrough needs root and
Linux 6.9 or later; elsewhere these tests skip."""

import gzip
import os
import signal
import subprocess
import tempfile
import threading

import pytest

from conftest import SLOW, read_file
from helpers import expected, flight_records, metric, wait_until

MiB = 1 << 20


def why_no_passthrough():
    """Why this machine cannot pass through, or None. Told from the machine alone, so that a
    daemon that fails to turn passthrough on fails these tests instead of skipping them."""
    major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    if os.geteuid() != 0 or (major, minor) < (6, 9):
        return "FUSE passthrough needs root and Linux >= 6.9"
    try:
        with gzip.open("/proc/config.gz", "rt") as f:
            if "CONFIG_FUSE_PASSTHROUGH=y" not in f.read():
                return "the kernel is built without CONFIG_FUSE_PASSTHROUGH"
    except OSError:
        pass  # no config to read: assume the default (y)
    # The spool must not be on a stacked filesystem (the daemon asks for a depth of 1).
    if subprocess.run(["stat", "-f", "-c", "%T", tempfile.gettempdir()], capture_output=True,
                      text=True).stdout.strip() == "overlayfs":
        return "the temporary directory is on overlayfs"
    return None


pytestmark = pytest.mark.skipif(why_no_passthrough() is not None,
                                reason=str(why_no_passthrough()))


def kept_cache(store, mount, tmp_path, path):
    """A cache directory holding path complete, left by a mount that has gone."""
    url = store.write()
    cache = tmp_path / "cache"
    m = mount(url, "--cache-dir", str(cache), "--keep-cache", name="first")
    assert read_file(m.p(path)) == expected(store, path)
    wait_until(lambda: flight_records(m).get(path, {}).get("durable"),
               lambda: flight_records(m))
    m.check_clean_exit()
    return url, cache


def read_while_frozen(m, path):
    """Opens path, freezes the daemon, reads it whole; (bytes, error) or raises on a hang."""
    result = {}
    with open(m.p(path), "rb", buffering=0) as f:
        serving = m.serving_pid()
        os.kill(serving, signal.SIGSTOP)
        try:
            def run():
                try:
                    result["data"] = f.read()
                except OSError as e:
                    result["error"] = e
            reader = threading.Thread(target=run, daemon=True)
            reader.start()
            reader.join(10 * SLOW)
            hung = reader.is_alive()
        finally:
            os.kill(serving, signal.SIGCONT)
        reader.join(30 * SLOW)
    assert not hung, "the read waited for the frozen daemon: not passthrough"
    assert "error" not in result, result.get("error")
    return result["data"]


def test_a_kept_object_is_read_by_the_kernel_without_the_daemon(store, mount, tmp_path):
    a = store.add("dir/a.bin", 6 * MiB + 123)
    url, cache = kept_cache(store, mount, tmp_path, a)
    gets = store.up.stats(a)["gets"]

    m = mount(url, "--cache-dir", str(cache), "--keep-cache")
    # The very first open of the mount: it waits for the transfer thread to take the
    # cached object up rather than open it through the page cache.
    assert read_while_frozen(m, a) == expected(store, a)
    assert read_while_frozen(m, a) == expected(store, a)
    assert metric(m, "passthrough_opens_total") == 2
    assert store.up.stats(a)["gets"] == gets


def test_no_passthrough_reads_through_the_daemon(store, mount, tmp_path):
    a = store.add("a.bin", 3 * MiB)
    url, cache = kept_cache(store, mount, tmp_path, a)
    m = mount(url, "--cache-dir", str(cache), "--keep-cache", "--no-passthrough")
    assert read_file(m.p(a)) == expected(store, a)
    assert metric(m, "passthrough_opens_total") == 0


def test_opens_follow_the_page_cache_while_a_handle_reads_through_it(store, mount, tmp_path):
    """The kernel fails an open (EIO) that mixes passthrough with page-cache files of one
    inode: while a handle opened during the download is open, later opens go through the
    page cache too, also once the object is complete; after it closes, they pass through."""
    a = store.add("a.bin", 4 * MiB)  # below the sparse size: the open starts the download
    url = store.write()
    store.up.fault(a, gate=True)
    m = mount(url, "--cache-dir", str(tmp_path / "cache"))
    with open(m.p(a), "rb", buffering=0) as early:
        store.up.wait_for(lambda s: s["gated"] >= 1, timeout=20 * SLOW, path=a)
        store.up.clear(a)
        store.up.release(a)
        wait_until(lambda: flight_records(m).get(a, {}).get("state") == "complete",
                   lambda: flight_records(m))
        for _ in range(3):
            assert read_file(m.p(a)) == expected(store, a)
        assert early.read() == expected(store, a)
        assert metric(m, "passthrough_opens_total") == 0
    # The kernel sends RELEASE after close() has returned: until the daemon has seen the
    # page-cache handles go, an open still goes through the page cache.
    wait_until(lambda: flight_records(m)[a]["handles"] == 0, lambda: flight_records(m)[a])
    assert read_file(m.p(a)) == expected(store, a)
    assert metric(m, "passthrough_opens_total") == 1


def test_another_mounts_download_is_read_by_the_kernel(store, mount, tmp_path):
    """Two live mounts share a cache directory: once the first has the object recorded
    complete, the second mount's very first open of it is passthrough."""
    a = store.add("a.bin", 5 * MiB)
    url = store.write()
    cache = str(tmp_path / "cache")
    first = mount(url, "--cache-dir", cache, name="first")
    second = mount(url, "--cache-dir", cache, name="second")
    assert read_file(first.p(a)) == expected(store, a)
    wait_until(lambda: flight_records(first).get(a, {}).get("durable"),
               lambda: flight_records(first))
    assert read_while_frozen(second, a) == expected(store, a)
    assert metric(second, "passthrough_opens_total") == 1
    assert store.up.stats(a)["gets"] >= 1 and metric(second, "upstream_requests_total") == 0


def cached_mib(path):
    """MiB of path in the page cache (of the FUSE file: this opens it, through the cache
    while another handle is open that way)."""
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", path],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split()[0]) / MiB


def test_pages_far_behind_a_sequential_reader_are_dropped(store, mount, tmp_path):
    """While one handle reads a large object through FUSE's page cache, what it has left
    64 MiB behind is dropped (so the passthrough open after it has little to drop); a
    second reader then gets the dropped bytes right, from the spool."""
    a = store.add("big.bin", 192 * MiB)
    m = mount(store.write(), "--cache-dir", str(tmp_path / "cache"))
    want = expected(store, a)
    with open(m.p(a), "rb", buffering=0) as lead:
        got = bytearray()
        while True:
            b = lead.read(MiB)
            if not b:
                break
            got += b
        assert got == want
        # The drops run on the daemon's own thread: wait for them to land.
        wait_until(lambda: cached_mib(m.p(a)) <= 96 + 1, lambda: "%.1f MiB of 192 still "
                   "cached" % cached_mib(m.p(a)))
        # Still open: this one goes through the page cache too, and misses what was dropped.
        assert read_file(m.p(a)) == want
        wait_until(lambda: metric(m, "page_cache_drops_pending") == 0, lambda: "drops pending")
        behind = metric(m, "page_cache_dropped_bytes_total")
        assert 96 * MiB <= behind <= 128 * MiB
    assert metric(m, "passthrough_opens_total") == 0
    # The last handle reading the complete object through the page cache is gone: the rest
    # of its pages are dropped now, not by the next open.
    wait_until(lambda: metric(m, "page_cache_dropped_bytes_total") == behind + 192 * MiB,
               lambda: "dropped %d bytes" % metric(m, "page_cache_dropped_bytes_total"))
    # No handle is open through the page cache now: the next open passes through.
    assert read_file(m.p(a)) == want
    assert metric(m, "passthrough_opens_total") == 1
    assert store.up.stats(a)["gets"] >= 1 and metric(m, "upstream_bytes_total") == 192 * MiB


def test_pages_of_sparse_or_shared_reads_are_kept(store, mount, tmp_path):
    """Jumps start a new sequential run, so a handle that reads here and there keeps its
    pages (it may come back to them); and while two handles share the page cache, neither
    drops what the other may still have a request pending in, until both are closed."""
    a = store.add("big.bin", 192 * MiB)
    b = store.add("shared.bin", 192 * MiB)
    m = mount(store.write(), "--cache-dir", str(tmp_path / "cache"))
    want = expected(store, a)
    fd = os.open(m.p(a), os.O_RDONLY)
    try:
        for at in (0, 40, 80, 120, 160, 190):
            assert os.pread(fd, MiB, at * MiB) == want[at * MiB:(at + 1) * MiB]
        assert os.pread(fd, MiB, 10 * MiB) == want[10 * MiB:11 * MiB]
        assert metric(m, "page_cache_dropped_bytes_total") == 0
    finally:
        os.close(fd)
    # Its download goes on in the background: released after it ended, it drops all of it.
    wait_until(lambda: flight_records(m)[a]["state"] == "complete" and
               flight_records(m)[a]["handles"] == 0, lambda: flight_records(m)[a])
    wait_until(lambda: metric(m, "page_cache_drops_pending") == 0, lambda: "drops pending")
    assert metric(m, "page_cache_dropped_bytes_total") in (0, 192 * MiB)
    before = metric(m, "page_cache_dropped_bytes_total")

    want = expected(store, b)
    with open(m.p(b), "rb", buffering=0) as one, open(m.p(b), "rb", buffering=0) as two:
        got_one, got_two = bytearray(), bytearray()
        while len(got_one) < len(want):
            got_one += one.read(MiB)
            got_two += two.read(MiB)
        assert got_one == want and got_two == want
        assert metric(m, "page_cache_dropped_bytes_total") == before
        one.close()
        wait_until(lambda: flight_records(m)[b]["handles"] == 1, lambda: flight_records(m)[b])
        assert metric(m, "page_cache_dropped_bytes_total") == before
    wait_until(lambda: metric(m, "page_cache_dropped_bytes_total") == before + 192 * MiB,
               lambda: "dropped %d bytes" % metric(m, "page_cache_dropped_bytes_total"))


def test_handles_closed_together_drop_the_pages_once(store, mount, tmp_path):
    """Two handles that read a complete object through the page cache, closed at the same
    moment: whichever release is the last one drops the object's pages, and only it (both
    releases used to be able to see no handle left, and drop, and count, twice)."""
    a = store.add("pair.bin", 128 * MiB)
    m = mount(store.write(), "--cache-dir", str(tmp_path / "cache"))
    want = expected(store, a)
    fds = [os.open(m.p(a), os.O_RDONLY), os.open(m.p(a), os.O_RDONLY)]
    closed = set()
    try:
        for fd in fds:
            got = bytearray()
            while len(got) < len(want):
                got += os.read(fd, MiB)
            assert got == want
        assert metric(m, "page_cache_dropped_bytes_total") == 0
        wait_until(lambda: flight_records(m)[a]["state"] == "complete",
                   lambda: flight_records(m)[a])
        together = threading.Barrier(len(fds))

        def close(fd):
            together.wait()
            os.close(fd)
            closed.add(fd)
        closers = [threading.Thread(target=close, args=(fd,)) for fd in fds]
        for t in closers:
            t.start()
        for t in closers:
            t.join()
    finally:
        for fd in set(fds) - closed:
            os.close(fd)
    wait_until(lambda: flight_records(m)[a]["handles"] == 0, lambda: flight_records(m)[a])
    wait_until(lambda: metric(m, "page_cache_drops_pending") == 0, lambda: "drops pending")
    assert metric(m, "page_cache_dropped_bytes_total") == 128 * MiB

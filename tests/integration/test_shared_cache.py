"""Two mounts sharing one cache directory: one upstream fetch per object between them, the
second mount's readers served from the first one's spool as it grows, a killed downloader
handed over, and clean-up left to the last mount out."""

import hashlib
import os
import threading

from conftest import SLOW, read_file
from helpers import expected, flight_records, wait_until

MiB = 1 << 20


class Reader(threading.Thread):
    """Reads one file whole in the background; .data or .error afterwards."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.path, self.data, self.error = path, None, None
        self.start()

    def run(self):
        try:
            self.data = read_file(self.path)
        except OSError as e:
            self.error = e

    def result(self, timeout=60):
        self.join(timeout * SLOW)
        assert not self.is_alive(), "reader of %s hung" % self.path
        assert self.error is None, self.error
        return self.data


def spool_of(cache, store, path):
    key = "sha256:" + store.sha256(path)
    return cache / "spool" / (hashlib.sha256(key.encode()).hexdigest() + ".spool")


def shared_mounts(mount, url, cache, *extra):
    m1 = mount(url, "--cache-dir", str(cache), *extra, name="mnt1")
    m2 = mount(url, "--cache-dir", str(cache), *extra, name="mnt2")
    return m1, m2


def test_a_cold_object_read_through_two_mounts_is_fetched_once(store, mount, tmp_path):
    a = store.add("a.bin", 24 * MiB)
    url = store.write()
    m1, m2 = shared_mounts(mount, url, tmp_path / "cache")
    store.up.fault(a, gate=True)
    r1 = Reader(m1.p(a))
    store.up.wait_for(lambda s: s["gated"] >= 1, timeout=20 * SLOW, path=a)
    r2 = Reader(m2.p(a))
    wait_until(lambda: "another mount of the cache is downloading it" in m2.stderr(),
             "the second mount did not defer to the first one's download")
    store.up.release(a)
    assert r1.result() == expected(store, a)
    assert r2.result() == expected(store, a)
    st = store.up.stats(a)
    # every byte sent once (a download runs as several ranged requests, one mount's)
    assert st["bytes"] <= 24 * MiB + MiB, st


def test_the_second_mount_reads_while_the_first_downloads(store, mount, tmp_path):
    """A reader in the other mount waits for its own bytes, not for the whole object."""
    size = 32 * MiB
    a = store.add("a.bin", size, hashed=False)
    url = store.write()
    m1, m2 = shared_mounts(mount, url, tmp_path / "cache", "--max-transfers", "1")
    # The first response stops at 2 MiB until cleared: the second mount's first MiB is there
    # to read, the rest of the object is not, whatever the machine's speed. (At 4 MiB/s
    # alone, "before half the object was sent" was a 4 s window for the second mount's open,
    # lease, and the first mount's noticing its watcher and recording.)
    store.up.fault(a, rate=4 * MiB, stall_at=2 * MiB)
    r1 = Reader(m1.p(a))
    store.up.wait_for(lambda s: s["bytes"] > 0, timeout=20 * SLOW, path=a)
    with open(m2.p(a), "rb", buffering=0) as f:
        first = f.read(MiB)
    sent = store.up.stats(a)["bytes"]
    assert first == expected(store, a)[:MiB]
    assert sent < size // 2, "the second mount waited for %d of %d bytes" % (sent, size)
    store.up.clear(a)
    assert r1.result() == expected(store, a)
    assert store.up.stats(a)["bytes"] <= size + MiB


def test_a_killed_downloader_hands_the_download_over(store, mount, tmp_path):
    size = 24 * MiB
    a = store.add("a.bin", size)
    url = store.write()
    m1, m2 = shared_mounts(mount, url, tmp_path / "cache")
    # m1 must still be downloading when it is killed. Its three pieces at 8 MiB/s each end
    # about 1 s after the start, and before the kill come m2's open, m1 noticing its watcher
    # and recording (an fdatasync), m2 adopting that: on a loaded machine that took longer,
    # m1 finished, and nothing was taken over. The response that reaches byte 20 MiB stops
    # there until cleared, so m1's download cannot end on its own.
    store.up.fault(a, rate=8 * MiB, stall_at=20 * MiB)
    r1 = Reader(m1.p(a))
    store.up.wait_for(lambda s: s["bytes"] >= 4 * MiB, timeout=20 * SLOW, path=a)
    r2 = Reader(m2.p(a))
    wait_until(lambda: "another mount of the cache is downloading it" in m2.stderr(),
             "the second mount did not defer to the first one's download")
    # the other mount has seen some of the killed one's recorded progress
    wait_until(lambda: flight_records(m2).get(a, {}).get("local", 0) > 0,
               lambda: flight_records(m2))
    m1.kill()
    r1.join(10 * SLOW)
    asked_before = len(store.up.stats(a)["ranges"])
    store.up.clear(a)
    assert r2.result() == expected(store, a)
    assert "took over the download from another mount" in m2.stderr()
    st = store.up.stats(a)
    # resumed from what the killed mount recorded, not refetched from the start
    assert st["bytes"] < 2 * size - 2 * MiB, st
    resumed = st["ranges"][asked_before:]
    assert resumed and all(r and not r.startswith("bytes=0-") for r in resumed), st


def test_the_last_mount_out_cleans_up(store, mount, tmp_path):
    a = store.add("a.bin", 2 * MiB)
    url = store.write()
    cache = tmp_path / "cache"
    m1, m2 = shared_mounts(mount, url, cache)
    assert read_file(m1.p(a)) == expected(store, a)
    assert read_file(m2.p(a)) == expected(store, a)
    assert store.up.stats(a)["gets"] == 1
    m1.check_clean_exit()
    # the other mount still uses the spool and the index
    assert os.listdir(cache / "spool")
    assert read_file(m2.p(a)) == expected(store, a)
    m2.check_clean_exit()
    # empty; the directory itself stays: the mount that created it was not the last
    assert os.listdir(cache) == []


def test_eviction_spares_an_object_another_mount_reads(store, mount, tmp_path):
    a, b, c = (store.add(n, 4 * MiB) for n in ("a.bin", "b.bin", "c.bin"))
    url = store.write()
    m1, m2 = shared_mounts(mount, url, tmp_path / "cache", "--cache-max-size", "6M")
    with open(m2.p(a), "rb") as held:  # a stays open in the second mount
        assert held.read() == expected(store, a)
        for p in (b, c):  # each pushes the cache over its limit in the first mount
            assert read_file(m1.p(p)) == expected(store, p)
        assert os.path.exists(spool_of(tmp_path / "cache", store, a)), \
            "an object in use by another mount was evicted"
        held.seek(0)
        assert held.read() == expected(store, a)
    assert read_file(m2.p(a)) == expected(store, a)
    assert store.up.stats(a)["gets"] == 1


def test_a_sparse_download_goes_whole_once_another_mount_watches(store, mount, tmp_path):
    size = 32 * MiB
    a = store.add("a.bin", size)
    url = store.write()
    m1, m2 = shared_mounts(mount, url, tmp_path / "cache")
    with open(m1.p(a), "rb", buffering=0) as f:
        # a sparse reader: the first mount holds the download but fetches only this
        assert os.pread(f.fileno(), 4096, 20 * MiB) == expected(store, a)[20 * MiB:20 * MiB + 4096]
        assert store.up.stats(a)["bytes"] < 2 * MiB
        # the second mount can only wait for the first one's download: it must go whole
        assert Reader(m2.p(a)).result() == expected(store, a)
    st = store.up.stats(a)
    assert st["bytes"] <= size + MiB, st


def spool_fds(m, cache):
    """How many spool files of cache the daemon of m holds open (not the spool directory
    itself, which it holds for the mount's life, nor the unnamed files it made ahead for
    objects to come: fetch/engine/spool_reserve.h)."""
    n = 0
    serving = m.serving_pid()
    for fd in os.listdir("/proc/%d/fd" % serving):
        try:
            t = os.readlink("/proc/%d/fd/%s" % (serving, fd))
        except OSError:
            continue
        ahead = t.startswith(str(cache / "spool") + "/#") and t.endswith(" (deleted)")
        n += t.startswith(str(cache / "spool") + "/") and not ahead
    return n


def test_a_reopened_spool_is_never_another_mounts_new_file(store, mount, tmp_path):
    """An idle complete spool's fd is closed, and checked when opened again by inode only:
    another mount that started the object afresh (an unversioned object is not reused)
    made a new file, zero-filled, which ext4 gave the same inode number, and this mount
    served its zeros as the object."""
    a = store.add("a.bin", 4 * MiB, hashed=False)
    cache = tmp_path / "cache"
    m1, m2 = shared_mounts(mount, store.write(), cache)
    assert read_file(m1.p(a)) == expected(store, a)
    wait_until(lambda: flight_records(m1).get(a, {}).get("durable"), lambda: flight_records(m1))
    wait_until(lambda: spool_fds(m1, cache) == 0, lambda: spool_fds(m1, cache))
    store.up.fault(a, gate=True)
    r2 = Reader(m2.p(a))  # starts afresh: a new spool file under the same name
    try:
        store.up.wait_for(lambda s: s["gated"] >= 1, timeout=20 * SLOW, path=a)
        r1 = Reader(m1.p(a))
        wait_until(lambda: flight_records(m1).get(a, {}).get("waiting_reads", 0) > 0 or
                   not r1.is_alive(), lambda: flight_records(m1))
    finally:
        store.up.clear(a)
    assert r1.result() == expected(store, a), "m1 served another file's bytes"
    assert r2.result() == expected(store, a)


def test_a_reopened_idle_spool_is_marked_in_use_again(store, mount, tmp_path):
    """Another mount's eviction deletes only spools no mount has open: a spool this mount
    closed while idle, then opened again for a reader, must show as in use again."""
    a, b = store.add("a.bin", 4 * MiB), store.add("b.bin", 4 * MiB)
    url = store.write()
    cache = tmp_path / "cache"
    m1 = mount(url, "--cache-dir", str(cache), name="mnt1")
    assert read_file(m1.p(a)) == expected(store, a)
    wait_until(lambda: flight_records(m1).get(a, {}).get("durable"), lambda: flight_records(m1))
    wait_until(lambda: spool_fds(m1, cache) == 0, lambda: spool_fds(m1, cache))
    with open(m1.p(a), "rb") as held:
        m2 = mount(url, "--cache-dir", str(cache), "--cache-max-size", "5M", name="mnt2")
        assert read_file(m2.p(b)) == expected(store, b)  # room for b: a must be spared
        assert spool_of(cache, store, a).exists(), "a spool in use was evicted"
        assert held.read() == expected(store, a)


def test_mounts_that_find_their_idle_spool_replaced_take_the_new_one(store, mount, tmp_path):
    """A mount whose idle spool was gone or replaced took it for a failed download: it
    deleted the file under its name (the other mount's good copy), marked the key failed
    and fetched again; the other mount then did the same, read after read."""
    a = store.add("a.bin", 3 * MiB)
    cache = tmp_path / "cache"
    m1, m2 = shared_mounts(mount, store.write(), cache)
    # Idle: no handle holds the spool (it may linger open: fetch/engine/spool_linger.c).
    def idle(m):
        return flight_records(m).get(a, {}).get("handles") == 0

    for m in (m1, m2):
        assert read_file(m.p(a)) == expected(store, a)
        wait_until(lambda: flight_records(m).get(a, {}).get("durable") and idle(m),
                   lambda: flight_records(m))
    os.unlink(spool_of(cache, store, a))  # a tmp cleaner
    gets = store.up.stats(a)["gets"]
    for m in (m1, m2, m1, m2, m1):
        with open(m.p(a), "rb") as f:  # pages the kernel kept must not hide the reopen
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        assert read_file(m.p(a)) == expected(store, a)
        wait_until(lambda: idle(m), lambda: flight_records(m))
    assert store.up.stats(a)["gets"] == gets + 1, "fetched again read after read"

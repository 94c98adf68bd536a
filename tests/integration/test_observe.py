"""/.spoolfs/stats, /.spoolfs/flights and `spoolfs status`: what operators see."""

import json
import os
import subprocess
import threading

import pytest

from conftest import SLOW, SPOOLFS, read_file
from helpers import expected, wait_until

MiB = 1 << 20


def metrics(m):
    out = {}
    with open(m.p(".spoolfs/stats")) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            name, value = line.split()
            out[name] = float(value)
    return out


def flights(m):
    with open(m.p(".spoolfs/flights")) as f:
        return [json.loads(line) for line in f if line.strip()]


def test_stats_file_counts_requests_hits_and_bytes(store, mount):
    store.add("dir/a.bin", 3 * MiB)
    m = mount(store.write())
    assert ".spoolfs" not in os.listdir(m.path)  # reachable by path, never listed
    # ...but it lists its own files, as `ls` would show them (it listed nothing).
    assert sorted(os.listdir(m.p(".spoolfs"))) == ["flights", "stats"]
    ls = subprocess.run(["ls", "-la", m.p(".spoolfs")], capture_output=True, text=True)
    assert ls.returncode == 0 and " stats" in ls.stdout and " .." in ls.stdout, ls
    before = metrics(m)
    assert before["spoolfs_upstream_requests_total"] == 0
    assert before["spoolfs_flights_in_progress"] == 0
    read_file(m.p("dir/a.bin"))
    read_file(m.p("dir/a.bin"))
    # The kernel sends RELEASE after close() has returned: "handles" is 0 only once the
    # daemon has seen it.
    wait_until(lambda: flights(m)[0]["handles"] == 0, lambda: flights(m))
    after = metrics(m)
    assert after["spoolfs_upstream_requests_total"] == store.up.stats("dir/a.bin")["gets"]
    assert after["spoolfs_upstream_bytes_total"] == 3 * MiB
    # Stored raw: what came on the wire is what the spool got.
    assert after["spoolfs_upstream_delivered_bytes_total"] == 3 * MiB
    assert after["spoolfs_cache_misses_total"] == 1
    assert after["spoolfs_cache_hits_total"] >= 1
    assert after["spoolfs_bytes_local"] == 3 * MiB
    assert after["spoolfs_flights_complete"] == 1
    fl = flights(m)
    assert fl == [{"name": "dir/a.bin", "size": 3 * MiB, "written": 3 * MiB, "local": 3 * MiB,
                   "state": "complete", "handles": 0, "waiting_reads": 0,
                   "durable": False, "access": "whole", "speculative": False,
                   "opened": True, "wire": 3 * MiB, "compressed": False}]


def test_status_shows_a_download_in_progress(store, mount):
    size = 32 * MiB
    path = store.add("slow/big.bin", size)
    m = mount(store.write())
    # The download must still be running, bytes flowing, when `status` takes its second
    # snapshot. The rate is per response and the object goes as 4 pieces at once: at 4 MiB/s
    # each it ended about 2 s after it began, while `status` (a sanitizer build starting,
    # two snapshots 0.5 s apart) could come later than that on a loaded machine. At 1 MiB/s
    # each bytes flow for 8 s, and the response that reaches the last byte stops short of it
    # until cleared, so the object cannot complete before `status` has looked.
    store.up.fault(path, rate=MiB, stall_at=size - 1)
    result = {}
    t = threading.Thread(target=lambda: result.update(data=read_file(m.p(path))))
    t.start()
    try:
        store.up.wait_for(lambda s: s["bytes"] >= 2 * MiB, timeout=30 * SLOW, path=path)
        out = subprocess.run([SPOOLFS, "status", m.path, "--interval", "0.5"],
                             capture_output=True, text=True, timeout=30 * SLOW)
        assert out.returncode == 0, out.stderr
        line = next(l for l in out.stdout.splitlines() if l.startswith("slow/big.bin"))
        assert "active" in line and "MiB/s" in line and "[" in line, out.stdout
        assert "totals: 1 objects (1 downloading)" in out.stdout
    finally:
        store.up.clear(path)
        t.join()
    with open(os.path.join(store.root, path), "rb") as f:
        assert result.get("data") == f.read()
    out = subprocess.run([SPOOLFS, "status", m.path, "--interval", "0.1"],
                         capture_output=True, text=True, timeout=30 * SLOW)
    assert out.returncode == 0, out.stderr
    assert "100%" in out.stdout and "complete" in out.stdout
    # stored raw: the bytes on the wire are the bytes delivered, and no line says otherwise
    assert "on the wire:" not in out.stdout, out.stdout


def test_status_of_a_plain_directory_fails_clearly(tmp_path):
    out = subprocess.run([SPOOLFS, "status", str(tmp_path), "--interval", "0.1"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "is not a spoolfs mount" in out.stderr
    for bad in ("0", "abc", "-1", "inf", "1e-12"):
        out = subprocess.run([SPOOLFS, "status", str(tmp_path), "--interval", bad],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 2 and "--interval takes a number of seconds" in out.stderr, \
            out.stderr


def status_once(m):
    out = subprocess.run([SPOOLFS, "status", m.path, "--interval", "0.1"],
                         capture_output=True, text=True, errors="replace", timeout=30 * SLOW)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.slow  # 4-13 s plain: the plain pass only (pytest.ini)
def test_status_lists_every_object_however_many(store, mount):
    """`status` kept only its first 4,096 rows, so the totals of a busy mount were wrong."""
    names = ["many/%04d.bin" % i for i in range(4200)]
    for n in names:
        store.add(n, 16, hashed=False)  # hashed, all 4,200 are one object
    m = mount(store.write())
    for n in names:
        with open(m.p(n), "rb") as f:
            f.read()
    assert "totals: 4200 objects" in status_once(m)


def test_status_shows_names_a_terminal_can_take(store, mount):
    """A key may hold any byte: `status` printed them raw, so a name with an escape
    sequence drove the operator's terminal, and multi-byte names broke the columns."""
    hostile = store.add("esc\x1b[31mred\x07\u009b.bin", 16, hashed=False)  # BEL, then CSI
    wide = store.add("\u00e9t\u00e9/" + "\u00fc" * 50 + "-tail.bin", 16, hashed=False)
    m = mount(store.write())
    for n in (hostile, wide):
        with open(m.p(n), "rb") as f:
            f.read()
    out = status_once(m)
    assert "\x1b" not in out and "\x07" not in out and "\u009b" not in out, repr(out)
    assert "esc?[31mred??.bin" in out, out
    rows = [l for l in out.splitlines() if l.endswith("complete")]
    assert len(rows) == 2, out
    # A long name keeps its end, and every row's columns line up in characters.
    assert any(l.startswith("~") and "-tail.bin " in l for l in rows), out
    assert len({len(l) for l in rows}) == 1, out
    header = out.splitlines()[0]
    assert header.index("OPEN") + 4 == rows[0].index(" complete") - 1, out


def test_status_of_a_mount_whose_daemon_died_says_so(store, mount):
    store.add("a.bin", 16)
    m = mount(store.write())
    m.kill_daemons()
    out = subprocess.run([SPOOLFS, "status", m.path, "--interval", "0.1"],
                         capture_output=True, text=True, timeout=30 * SLOW)
    m.kill()
    assert out.returncode != 0
    assert "daemon" in out.stderr and "gone" in out.stderr and "fusermount3 -u" in out.stderr, \
        out.stderr


def test_status_does_not_count_an_object_nobody_reads_as_downloading(store, mount, tmp_path):
    """After an eviction, an object read again from the kernel's cache made a flight that
    fetched nothing, since no read reached it: it showed as downloading for good."""
    names = [store.add("e/%d.bin" % i, 10 * MiB) for i in range(3)]
    m = mount(store.write(), "--cache-dir", str(tmp_path / "cache"), "--cache-max-size", "25M")
    for n in names + names[:1]:  # the third evicts the first, then the first again
        assert read_file(m.p(n)) == expected(store, n)
    wait_until(lambda: all(f["handles"] == 0 for f in flights(m)), lambda: flights(m))
    out = status_once(m)
    assert "(0 downloading)" in out, out

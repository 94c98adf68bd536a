"""/.spoolfs/stats, /.spoolfs/flights and `spoolfs status`: what operators see."""

import json
import os
import subprocess
import threading

from conftest import SLOW, SPOOLFS, read_file
from helpers import wait_until

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
    assert after["spoolfs_cache_misses_total"] == 1
    assert after["spoolfs_cache_hits_total"] >= 1
    assert after["spoolfs_bytes_local"] == 3 * MiB
    assert after["spoolfs_flights_complete"] == 1
    fl = flights(m)
    assert fl == [{"name": "dir/a.bin", "size": 3 * MiB, "written": 3 * MiB, "local": 3 * MiB,
                   "state": "complete", "handles": 0, "waiting_reads": 0,
                   "durable": False, "access": "whole"}]


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


def test_status_of_a_plain_directory_fails_clearly(tmp_path):
    out = subprocess.run([SPOOLFS, "status", str(tmp_path), "--interval", "0.1"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "is not a spoolfs mount" in out.stderr

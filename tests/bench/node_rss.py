#!/usr/bin/python3
"""The memory of a node-level mount (deploy/kubernetes, doc/kubernetes.md), to size the
DaemonSet's resources: one mount with the ConfigMap's options (allow_other, a named
--cache-dir kept) of a version 1 manifest of N small files plus one 1 GiB object with a
sha256, as root:

    python3 tests/bench/node_rss.py            # N=100000, SIZE=1G
    N=1000000 SIZE=4G python3 tests/bench/node_rss.py

It prints the RSS (VmRSS) and peak (VmHWM) of the supervisor and of the serving process
after the mount, after a `find` over the tree, and during and after a cold read of the
large object (RSS sampled every 50 ms during it), and the cache directory's size. What a
cgroup also charges to the pod, the spool file's page cache, is not in these figures.
Figures are printed, never asserted.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "upstream"))
from client import Upstream  # noqa: E402
import mkstore  # noqa: E402
from benchlib import is_mounted  # noqa: E402

SPOOLFS = os.environ.get("SPOOLFS_BIN", os.path.join(ROOT, "build", "spoolfs"))
N = int(os.environ.get("N", "100000"))
SIZE = os.environ.get("SIZE", "1G")


def status_kb(pid, field):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def processes(sup):
    """The supervisor and its serving process (doc/survive.md)."""
    try:
        with open("/proc/%d/task/%d/children" % (sup, sup)) as f:
            return [sup] + [int(c) for c in f.read().split()]
    except OSError:
        return [sup]


def show(what, pids):
    parts = ["%s %d: rss %.1f MiB, peak %.1f MiB" % (
        "supervisor" if i == 0 else "serving", pid, status_kb(pid, "VmRSS") / 1024,
        status_kb(pid, "VmHWM") / 1024) for i, pid in enumerate(pids)]
    total = sum(status_kb(p, "VmRSS") for p in pids) / 1024
    print("%-24s %s; together %.1f MiB" % (what, "; ".join(parts), total), flush=True)


def main():
    work = tempfile.mkdtemp(prefix="node-rss-", dir="/var/tmp")
    store, mnt, cache = (os.path.join(work, d) for d in ("store", "mnt", "cache"))
    manifest = mkstore.make_store(store, ["big.bin:%s" % SIZE])
    manifest["files"] += [{"path": "p%03d/d%05d/f%07d.txt" % (i // 100000, i // 1000, i),
                           "size": 1 + i % 40} for i in range(N)]
    with open(os.path.join(store, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    up = Upstream(store)
    os.makedirs(mnt)
    proc = subprocess.Popen([SPOOLFS, "-f", up.url("manifest.json"), mnt, "-o", "allow_other",
                             "--cache-dir", cache, "--keep-cache"],
                            stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not is_mounted(mnt):
            assert proc.poll() is None, "spoolfs exited"
            time.sleep(0.01)
        os.listdir(mnt)
        pids = processes(proc.pid)
        show("mounted", pids)
        t = time.monotonic()
        subprocess.run(["find", mnt], stdout=subprocess.DEVNULL, check=True)
        print("find: %.2f s" % (time.monotonic() - t))
        show("after find", pids)

        peak, done = [0], threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], sum(status_kb(p, "VmRSS") for p in pids))
                time.sleep(0.05)

        sampler = threading.Thread(target=sample)
        sampler.start()
        t = time.monotonic()
        subprocess.run(["cat", os.path.join(mnt, "big.bin")], stdout=subprocess.DEVNULL, check=True)
        done.set()
        sampler.join()
        print("cold read of %s: %.2f s; RSS together at most %.1f MiB while it ran"
              % (SIZE, time.monotonic() - t, peak[0] / 1024))
        show("after the read", pids)
        du = subprocess.run(["du", "-sm", cache], capture_output=True, text=True).stdout.split()[0]
        print("cache directory: %s MiB" % du)
    finally:
        subprocess.run(["fusermount3", "-u", mnt])
        proc.wait(60)
        up.stop()
        shutil.rmtree(work)


if __name__ == "__main__":
    main()

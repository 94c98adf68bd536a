#!/usr/bin/python3
"""Mount time of a --cache-dir --keep-cache mount (doc/cache-dir.md, "Kept namespaces"):
from the daemon's start to the mount showing in /proc/self/mountinfo (polled every ms), of
a published store's manifest served by tests/upstream/upstream.py with DELAY_MS (default 10)
per request. Per round and build, interleaved: a first mount into an empty cache directory
(which, with kept namespaces, also writes the copy), then a second mount of that directory
(which starts from it). A benchmark: nothing is asserted.

  STORE=DIR/with/manifest.json SPOOLFS_BIN=build/spoolfs SPOOLFS_BASE_BIN=other/spoolfs \\
      RUNS=11 python3 tests/bench/kept_mount.py

STORE: a directory `spoolfs publish` wrote (e.g. the aws tree of a KEEP=1 run of
real_programs.py: WORK/store/aws). SPOOLFS_BASE_BIN: optional, another build (main before
the change). Prints medians (min-max) in ms.
"""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "upstream"))
from client import Upstream  # noqa: E402


def mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def mount_ms(binary, url, mnt, cache):
    """Milliseconds from the daemon's start to its mount; unmounts it after."""
    t0 = time.monotonic()
    proc = subprocess.Popen([binary, "-f", url, mnt, "--cache-dir", cache, "--keep-cache"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    while not mounted(mnt):
        if proc.poll() is not None:
            raise SystemExit("%s exited %d before mounting" % (binary, proc.returncode))
        time.sleep(0.001)
    ms = (time.monotonic() - t0) * 1000
    subprocess.run(["fusermount3", "-u", mnt], check=True)
    proc.wait(60)
    return ms


def main():
    store = os.environ.get("STORE")
    if not store or not os.path.exists(os.path.join(store, "manifest.json")):
        raise SystemExit("STORE=DIR: a directory holding a published manifest.json")
    builds = {"new": os.environ.get("SPOOLFS_BIN", os.path.join(ROOT, "build", "spoolfs"))}
    if os.environ.get("SPOOLFS_BASE_BIN"):
        builds["base"] = os.environ["SPOOLFS_BASE_BIN"]
    runs = int(os.environ.get("RUNS", "11"))
    work = tempfile.mkdtemp(prefix="spoolfs-kept.", dir=os.environ.get("TMPDIR", "/var/tmp"))
    up = Upstream(store, delay_ms=float(os.environ.get("DELAY_MS", "10")))
    times = {}
    try:
        url = up.url("manifest.json")
        mnt = os.path.join(work, "mnt")
        os.makedirs(mnt)
        for run in range(runs):
            for name, binary in builds.items():
                cache = os.path.join(work, "cache")
                shutil.rmtree(cache, ignore_errors=True)
                first = mount_ms(binary, url, mnt, cache)
                second = mount_ms(binary, url, mnt, cache)
                times.setdefault((name, "first"), []).append(first)
                times.setdefault((name, "second"), []).append(second)
                print("run %d %s: first %.1f ms, second %.1f ms" % (run + 1, name, first, second),
                      flush=True)
    finally:
        up.stop()
        shutil.rmtree(work, ignore_errors=True)
    for (name, which), t in sorted(times.items()):
        print("%-5s %-6s %.1f ms (%.1f-%.1f), %d runs" % (name, which, statistics.median(t),
                                                        min(t), max(t), len(t)))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Warm reads through --writable's overlay beside the plain mount (doc/writable.md).

    /usr/bin/python3 tests/bench/writable_reads.py BIN

Publishes N small files (default 2,000, 1-4 KiB, in packs) and one large file (BIG_MIB,
default 256) with BIN's `spoolfs publish`, serves them with tests/upstream/upstream.py on
127.0.0.1, and for each way of mounting (root: plain, and --writable through the kernel's
overlayfs; nobody: plain, and --writable through fuse-overlayfs, the second FUSE hop) mounts
fresh, reads everything once (cold), then times RUNS (default 5) warm passes: open, read
and close every small file, and read the large file in 1 MiB reads. Prints the median and
the least of each. Run as root. A benchmark: never asserts timings.
"""
import os
import pwd
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "upstream"))
from client import Upstream  # noqa: E402

N = int(os.environ.get("N", "2000"))
RUNS = int(os.environ.get("RUNS", "5"))
BIG_MIB = int(os.environ.get("BIG_MIB", "256"))
USER = "nobody"

PASS = r"""
import os, sys, time
small = [l.rstrip("\n") for l in open(sys.argv[2])]
t = time.monotonic()
for rel in small:
    with open(os.path.join(sys.argv[1], rel), "rb", buffering=0) as f:
        while f.read(1 << 16):
            pass
t_small = time.monotonic() - t
t = time.monotonic()
with open(os.path.join(sys.argv[1], "big.bin"), "rb", buffering=0) as f:
    while f.read(1 << 20):
        pass
print(t_small, time.monotonic() - t)
"""


def as_user(user, cmd):
    if user == "root":
        return cmd
    pw = pwd.getpwnam(user)
    return ["setpriv", "--reuid=%d" % pw.pw_uid, "--regid=%d" % pw.pw_gid, "--clear-groups"] + cmd


def main():
    binary = os.path.abspath(sys.argv[1])
    work = tempfile.mkdtemp(prefix="spoolfs-bench-writable-", dir="/tmp")
    os.chmod(work, 0o755)
    src, out = os.path.join(work, "src"), os.path.join(work, "out")
    rng = random.Random(1)
    names = []
    for i in range(N):
        rel = "d%02d/f%05d.txt" % (i // 100, i)
        os.makedirs(os.path.join(src, os.path.dirname(rel)), exist_ok=True)
        with open(os.path.join(src, rel), "wb") as f:
            f.write(os.urandom(rng.randint(1024, 4096)))
        names.append(rel)
    with open(os.path.join(src, "big.bin"), "wb") as f:
        for _ in range(BIG_MIB):
            f.write(os.urandom(1 << 20))
    subprocess.run([binary, "publish", src, out], check=True, capture_output=True)
    shutil.rmtree(src)
    listing = os.path.join(work, "small.txt")
    with open(listing, "w") as f:
        f.write("\n".join(names) + "\n")
    up = Upstream(out)
    results = {}
    try:
        for user, writable in (("root", False), ("root", True), (USER, False), (USER, True)):
            label = "%s, %s" % (user, ("overlayfs" if user == "root" else "fuse-overlayfs")
                                if writable else "plain")
            base = tempfile.mkdtemp(prefix="run-", dir=work)
            pw = pwd.getpwnam(user)
            os.chown(base, pw.pw_uid, pw.pw_gid)
            mnt = os.path.join(base, "mnt")
            env = dict(os.environ, TMPDIR=base)
            subprocess.run(as_user(user, ["mkdir", mnt, os.path.join(base, "rw")]), check=True)
            cmd = [binary, up.url("manifest.json"), mnt]
            if writable:
                cmd += ["--writable", os.path.join(base, "rw")]
            subprocess.run(as_user(user, cmd), check=True, env=env, capture_output=True)
            try:
                passes = []
                for i in range(RUNS + 1):  # the first is cold
                    r = subprocess.run(as_user(user, [sys.executable, "-c", PASS, mnt, listing]),
                                       check=True, capture_output=True)
                    if i:
                        passes.append([float(x) for x in r.stdout.split()])
                results[label] = passes
            finally:
                subprocess.run(as_user(user, ["fusermount3", "-u", mnt]), capture_output=True)
                deadline = time.monotonic() + 30
                while any(base in line for line in open("/proc/self/mountinfo")) and \
                        time.monotonic() < deadline:
                    time.sleep(0.05)
    finally:
        up.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("warm passes (%d): %d small files (us per file), %d MiB file (MiB/s); median (best)"
          % (RUNS, N, BIG_MIB))
    for label, passes in results.items():
        small = [p[0] / N * 1e6 for p in passes]
        big = [BIG_MIB / p[1] for p in passes]
        print("%-26s %7.1f (%6.1f) us   %7.0f (%6.0f) MiB/s" % (
            label, statistics.median(small), min(small), statistics.median(big), max(big)))


if __name__ == "__main__":
    main()

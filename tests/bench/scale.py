#!/usr/bin/python3
"""Scale: how a published tree of N small files mounts, walks and weighs, with nested
manifests (spoolfs publish's default) beside one single manifest of the same tree.

    N=100000 python3 tests/bench/scale.py      # also N=1000000 (a million files: minutes)
    NEST_OVER=10000 N=1000000 python3 tests/bench/scale.py   # another --nest-over
    KEEP=/var/tmp/scale-1m N=1000000 python3 tests/bench/scale.py  # publish once, reuse
    KEEP=/var/tmp/scale-1m SPOOLFS_BIN=/other/spoolfs ... # the same trees, another build

A third layout is a version 1 manifest of the same names (about 64 bytes an entry, the
shape of the issue's 66 MB manifest of 1,000,000 entries). For each layout it prints: publish time, top manifest size, mount time (exec to mounted)
with the daemon's CPU time and peak RSS (VmHWM) then, `find` time over the whole tree (which
loads every nested manifest) with the daemon's CPU time for it, and the peak RSS after the
find. On a busy machine the CPU times are the steadier figures. With a supervisor
(doc/survive.md) "the daemon" after the mount is the serving process (its PID from
/.spoolfs/stats), and the last figure is the peak RSS over the mount's whole life and
every process of it (getrusage at exit: across the supervisor's exec, so the load is in). Times are printed, never asserted. The tree: N files of 1-40
bytes in directories of 1,000, 100 directories to a parent.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "upstream"))
from client import Upstream  # noqa: E402
from benchlib import is_mounted  # noqa: E402  (run as a script: its folder is on sys.path)

SPOOLFS = os.environ.get("SPOOLFS_BIN", os.path.join(ROOT, "build", "spoolfs"))
N = int(os.environ.get("N", "100000"))
NEST_OVER = os.environ.get("NEST_OVER")  # publish's --nest-over for the nested layout
KEEP = os.environ.get("KEEP")  # a directory kept for the next run: the trees published once


def make_tree(src, n):
    for i in range(n):
        d = os.path.join(src, "p%03d" % (i // 100000), "d%05d" % (i // 1000))
        if i % 1000 == 0:
            os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "f%07d.txt" % i), "wb") as f:
            f.write(b"%d\n" % i * (1 + i % 5))


def write_v1_manifest(out, n):
    """A version 1 manifest of the same names (no digests, no URLs: find reads no content)."""
    os.makedirs(out)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        f.write('{"version":1,"files":[\n')
        for i in range(n):
            f.write('%s{"path":"p%03d/d%05d/f%07d.txt","size":%d,"mtime":1700000000}\n'
                    % ("," if i else "", i // 100000, i // 1000, i, len(b"%d\n" % i) * (1 + i % 5)))
        f.write("]}\n")


def hwm_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def cpu_s(pid):
    """The daemon's CPU time so far (user + system), steadier than wall time on a busy box."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def serving_pid(mnt, pid):
    """The process serving the mount: the one /.spoolfs/stats names (a supervisor's
    child), else pid (a build without a supervisor)."""
    with open(os.path.join(mnt, ".spoolfs", "stats")) as f:
        for line in f:
            if line.startswith("spoolfs_serving_pid"):
                return int(line.split()[-1])
    return pid


def wait_maxrss(proc, timeout=60):
    """Reaps proc -> its peak RSS in KiB over its life and its children's (getrusage's
    maxrss, which an exec keeps)."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return ru.ru_maxrss
        if time.monotonic() > deadline:
            proc.kill()
        time.sleep(0.01)


def measure(label, out, work):
    mnt = os.path.join(work, "mnt-" + label)
    os.makedirs(mnt)
    up = Upstream(out)
    proc = None
    try:
        t0 = time.monotonic()
        proc = subprocess.Popen([SPOOLFS, "-f", up.url("manifest.json"), mnt,
                                 "--log-level", "warn"], stdin=subprocess.DEVNULL)
        while not is_mounted(mnt):
            if proc.poll() is not None:
                raise RuntimeError("spoolfs exited with %d" % proc.returncode)
            time.sleep(0.005)
        mount_s = time.monotonic() - t0
        cpu_mounted = cpu_s(proc.pid)  # the load: an exec keeps the task's times
        serving = serving_pid(mnt, proc.pid)
        # The serving child inherited what was loaded; the supervisor's exec dropped it.
        rss_mounted = hwm_kb(serving) / 1024
        cpu_before = cpu_s(serving)
        t0 = time.monotonic()
        found = subprocess.run(["find", mnt], capture_output=True, check=True).stdout.count(b"\n")
        find_s = time.monotonic() - t0
        rss = hwm_kb(serving) / 1024
        cpu_found = cpu_s(serving) - cpu_before
        gets = up.stats()["total_gets"]
    finally:
        subprocess.run(["fusermount3", "-u", mnt], capture_output=True)
        life_rss = wait_maxrss(proc) / 1024 if proc else 0
        up.stop()
    top = os.path.getsize(os.path.join(out, "manifest.json"))
    print("%-16s top manifest %8.1f KiB  mount %6.2f s (CPU %5.2f s, peak RSS %6.1f MiB)"
          "  find %6.2f s (%d names, %d requests; daemon CPU %5.2f s)  peak RSS %6.1f MiB"
          " (whole life %6.1f MiB)"
          % (label, top / 1024, mount_s, cpu_mounted, rss_mounted, find_s, found, gets,
             cpu_found, rss, life_rss))
    sys.stdout.flush()


def main():
    if KEEP:
        work = KEEP
        os.makedirs(work, exist_ok=True)
        for old in os.listdir(work):
            if old.startswith("mnt-"):
                os.rmdir(os.path.join(work, old))
    else:
        work = tempfile.mkdtemp(prefix="spoolfs-scale-", dir="/var/tmp")
    try:
        src = os.path.join(work, "src")
        if not os.path.exists(os.path.join(work, "src.done")):
            shutil.rmtree(src, ignore_errors=True)
            t0 = time.monotonic()
            make_tree(src, N)
            open(os.path.join(work, "src.done"), "w").close()
            print("scale: %d files made in %.1f s" % (N, time.monotonic() - t0))
        # The single manifest: version 1, no digests (about 64 bytes an entry).
        v1 = os.path.join(work, "out-v1-manifest")
        if not os.path.exists(v1 + ".done"):
            shutil.rmtree(v1, ignore_errors=True)
            write_v1_manifest(v1, N)
            open(v1 + ".done", "w").close()
        measure("v1-manifest", v1, work)
        nested_args = ["--nest-over", NEST_OVER] if NEST_OVER else []
        for label, args in (("nested", nested_args), ("one manifest", ["--nest-over", "0"])):
            out = os.path.join(work, "out-" + label.replace(" ", "-"))
            if not os.path.exists(out + ".done"):
                shutil.rmtree(out, ignore_errors=True)
                t0 = time.monotonic()
                subprocess.run([SPOOLFS, "publish", src, out] + args, check=True,
                               stdout=subprocess.DEVNULL)
                open(out + ".done", "w").close()
                print("%-16s published in %.1f s" % (label, time.monotonic() - t0))
            measure(label.replace(" ", "-"), out, work)
    finally:
        if not KEEP:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

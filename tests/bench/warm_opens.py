#!/usr/bin/env python3
"""A warm mount opening thousands of small files: the per-open cost, by request type.

    /usr/bin/python3 tests/bench/warm_opens.py BIN [BIN...]      # e.g. a build before and after

Publishes a tree of N small files (default 10,000, 100 per directory, 100 B to 4 KiB:
they go into packs) with the first BIN's `spoolfs publish`, serves it with
tests/upstream/upstream.py on 127.0.0.1, and for each BIN in turn, RUNS times (default 3,
binaries alternating so that they share the machine's mood): mounts it fresh, reads every
file once (cold: the packs come), then times two warm passes that open, read and close
every file, summing the time spent in each call (open is the daemon's OPEN; read and close
are mostly the kernel's: members are read through the page cache), and the daemon's CPU
time over those passes (less shaken by a busy machine than the wall clock). Prints the
median and the least microseconds per file of each. Env: N, RUNS, WORKDIR (default /var/tmp), MOUNT_ARGS (more
mount options, e.g. "--prefetch-requests 0": the opens alone, without the walk's prefetch). A benchmark: never
asserts timings; exits non-zero only when something does not work (wrong bytes, a mount).
"""
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N = int(os.environ.get("N", "10000"))
RUNS = int(os.environ.get("RUNS", "3"))
MOUNT_ARGS = os.environ.get("MOUNT_ARGS", "").split()


def make_tree(src):
    rng = random.Random(1)
    block = os.urandom(1 << 16)
    files = []
    for i in range(N):
        d = os.path.join(src, "d%03d" % (i // 100))
        if i % 100 == 0:
            os.makedirs(d)
        size = rng.randint(100, 4096)
        start = rng.randint(0, len(block) - size)
        rel = os.path.join("d%03d" % (i // 100), "f%05d" % i)
        with open(os.path.join(src, rel), "wb") as f:
            f.write(block[start:start + size])
        files.append((rel, block[start:start + size]))
    return files


def start_upstream(root, work):
    out = open(os.path.join(work, "upstream.out"), "w+")
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests/upstream/upstream.py"),
                             "--root", root, "--port", "0"], stdout=out,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        out.seek(0)
        for line in out:
            if line.startswith("PORT "):
                return proc, "http://127.0.0.1:%d" % int(line.split()[1])
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("upstream printed no PORT line")


def cpu_us(pid):
    """User and system CPU microseconds of pid and its children (the serving process)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    pids = [pid]
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            pids += [int(p) for p in f.read().split()]
    except OSError:
        pass
    for p in pids:
        try:
            with open("/proc/%d/stat" % p) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except OSError:
            pass
    return total * 1e6 / tick


def mounted(mnt):
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == mnt for line in f)


def one_run(binary, url, mnt, files, work):
    log = open(os.path.join(work, "daemon.log"), "w")
    proc = subprocess.Popen([binary, "-f", url + "/manifest.json", mnt] + MOUNT_ARGS, stdout=log,
                            stderr=log, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not mounted(mnt):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("%s did not mount" % binary)
            time.sleep(0.01)
        for rel, data in files:  # cold: the packs come
            with open(os.path.join(mnt, rel), "rb") as f:
                if f.read() != data:
                    raise SystemExit("%s: wrong bytes" % rel)
        t = {"open": 0.0, "read": 0.0, "close": 0.0}
        clock = time.perf_counter
        cpu0 = cpu_us(proc.pid)
        for _ in range(2):
            for rel, data in files:
                path = os.path.join(mnt, rel)
                t0 = clock()
                fd = os.open(path, os.O_RDONLY)
                t1 = clock()
                got = os.read(fd, 8192)
                t2 = clock()
                os.close(fd)
                t3 = clock()
                t["open"] += t1 - t0
                t["read"] += t2 - t1
                t["close"] += t3 - t2
                if len(got) != len(data):
                    raise SystemExit("%s: short read" % rel)
        r = {k: v * 1e6 / (2 * len(files)) for k, v in t.items()}
        r["daemon cpu"] = (cpu_us(proc.pid) - cpu0) / (2 * len(files))
        print("  %s: %s" % (binary, " ".join("%s %.1f" % kv for kv in r.items())),
              file=sys.stderr)
        return r
    finally:
        if mounted(mnt):
            subprocess.call(["fusermount3", "-u", mnt])
            if mounted(mnt):
                subprocess.call(["fusermount3", "-uz", mnt])
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main():
    bins = [os.path.abspath(b) for b in sys.argv[1:]]
    if not bins:
        raise SystemExit(__doc__)
    work = tempfile.mkdtemp(prefix="spoolfs-bench-warm.", dir=os.environ.get("WORKDIR",
                                                                              "/var/tmp"))
    up = None
    try:
        src, out, mnt = (os.path.join(work, x) for x in ("src", "out", "mnt"))
        os.mkdir(mnt)
        files = make_tree(src)
        subprocess.check_call([bins[0], "publish", src, out], stdout=subprocess.DEVNULL)
        up, url = start_upstream(out, work)
        res = {b: [] for b in bins}
        for _ in range(RUNS):
            for b in bins:
                res[b].append(one_run(b, url, mnt, files, work))
        keys = ("open", "read", "close", "daemon cpu")
        print("us per file over 2 warm passes of %d files, %d runs: median (min)" % (N, RUNS))
        print("%-32s" % "binary" + "".join("%16s" % k for k in keys))
        for b in bins:
            print("%-32s" % b[-32:] + "".join(
                "%16s" % ("%.1f (%.1f)" % (statistics.median(r[k] for r in res[b]),
                                           min(r[k] for r in res[b]))) for k in keys))
    finally:
        if up:
            up.kill()
            up.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

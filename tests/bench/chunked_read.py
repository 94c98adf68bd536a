#!/usr/bin/python3
"""Verified cold reads: chunk hashes beside a whole-object sha256, no hash at all, and the
same fetch-and-verify done by standard tools (a sibling of cold_read.sh; issue 23).

  /usr/bin/python3 tests/bench/chunked_read.py            # 1 GiB, 3 runs
  SIZE=64M RUNS=1 /usr/bin/python3 tests/bench/chunked_read.py

Env: SIZE (default 1G), RUNS (default 3), CHUNK (bytes, default 262144), SPOOLFS_BIN
(default build/spoolfs), SPARSE_READS (default 200).

One store, three manifests of the same object: with chunk hashes (what `spoolfs publish`
writes, made here by tests/upstream/chunklist.py), with its sha256 only, with no hash.
Each run reads the object once through a fresh mount of each (`dd bs=1M`), then `curl` and
`curl | openssl dgst -sha256` of its URL, in turn. Printed: wall seconds (median and
min-max), ratios to curl and to the unverified read, the daemon's CPU seconds per GiB by
thread (from /proc/PID/task/*/stat) and the reader's, the upstream server's (it shares the cores here), the issue's target (the chunked read
within 1.1x of max(unverified wall, (daemon + reader CPU) / cores)), and the sparse
amplification of SPARSE_READS random 4 KiB reads with chunk hashes. A benchmark: nothing
is asserted; it exits 1 only when something does not work (a mount, wrong bytes).
"""

import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "upstream"))
import chunklist  # noqa: E402
import mkstore  # noqa: E402
from client import Upstream  # noqa: E402
from benchlib import is_mounted  # noqa: E402  (run as a script: its folder is on sys.path)

SPOOLFS = os.environ.get("SPOOLFS_BIN", os.path.join(ROOT, "build", "spoolfs"))
SIZE = mkstore.parse_size(os.environ.get("SIZE", "1G"))
RUNS = int(os.environ.get("RUNS", "3"))
CHUNK = int(os.environ.get("CHUNK", str(256 * 1024)))
SPARSE_READS = int(os.environ.get("SPARSE_READS", "200"))
TICK = os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count() or 1
GiB = 1 << 30


def thread_cpu(pid):
    """CPU seconds of each of pid's threads, by name (numbers cut: the pool's threads add)."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")].rstrip("0123456789")
        fields = stat[stat.rindex(")") + 2:].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / TICK
    return out


class Mount:
    def __init__(self, url, work, name):
        self.path = os.path.join(work, name)
        os.makedirs(self.path, exist_ok=True)
        self.log = open(os.path.join(work, name + ".log"), "wb")
        self.proc = subprocess.Popen([SPOOLFS, "-f", url, self.path], stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not is_mounted(self.path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("spoolfs did not mount: " + name)
            time.sleep(0.01)

    def close(self):
        subprocess.run(["fusermount3", "-u", self.path], check=False)
        rc = self.proc.wait(30)
        self.log.close()
        if rc != 0:
            raise RuntimeError("spoolfs exited with %d" % rc)


def timed(cmd, shell=False):
    """Wall seconds and the children's CPU seconds of running cmd."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    subprocess.run(cmd, shell=shell, check=True, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def read_through(url, work, name, want_sha, up_pid):
    m = Mount(url, work, name)
    try:
        path = os.path.join(m.path, "obj")
        up_before = sum(thread_cpu(up_pid).values())
        wall, reader_cpu = timed(["dd", "if=" + path, "of=/dev/null", "bs=1M", "status=none"])
        threads = thread_cpu(m.proc.pid)
        threads["(upstream server)"] = sum(thread_cpu(up_pid).values()) - up_before
        got = subprocess.run(["openssl", "dgst", "-sha256", "-r", path], check=True,
                             capture_output=True).stdout.split()[0].decode()
        if got != want_sha:
            raise RuntimeError("%s: wrong bytes" % name)
    finally:
        m.close()
    return wall, reader_cpu, threads


def sparse_amplification(up, url, work):
    m = Mount(url, work, "sparse")
    rng = random.Random(23)
    try:
        up.reset()
        path = os.path.join(m.path, "obj")
        with open(path, "rb", buffering=0) as f:
            for _ in range(SPARSE_READS):
                os.pread(f.fileno(), 4096, rng.randrange(CHUNK, SIZE - 4096) // 4096 * 4096)
        sent = up.stats("obj")["bytes"]
    finally:
        m.close()
    return sent / (SPARSE_READS * 4096)


def fmt(values):
    med = statistics.median(values)
    if len(values) == 1:
        return med, "%.3f" % med
    return med, "%.3f (%.3f-%.3f)" % (med, min(values), max(values))


def main():
    if not os.path.exists(SPOOLFS):
        sys.exit("no %s: build first" % SPOOLFS)
    work = tempfile.mkdtemp(prefix="spoolfs-chunked-")
    up = None
    try:
        store = os.path.join(work, "store")
        manifest = mkstore.make_store(store, ["obj:%d" % SIZE])
        want_sha = manifest["files"][0]["sha256"]
        with open(os.path.join(store, "hash.json"), "w") as f:
            json.dump(manifest, f)
        none = {"version": 1, "files": [{"path": "obj", "size": SIZE}]}
        with open(os.path.join(store, "none.json"), "w") as f:
            json.dump(none, f)
        chunklist.add_chunks(store, manifest, chunk_size=CHUNK)
        os.replace(os.path.join(store, "manifest.json"), os.path.join(store, "chunks.json"))
        up = Upstream(store)
        obj_url = up.url("obj")
        kinds = [("chunks", "chunk hashes"), ("hash", "sha256 only"), ("none", "no hash")]
        wall = {k: [] for k, _ in kinds + [("curl", ""), ("curl_openssl", "")]}
        cpu = {k: [] for k, _ in kinds}
        threads = {k: {} for k, _ in kinds}
        for run in range(RUNS):
            for kind, _ in kinds:
                w, reader, th = read_through(up.url(kind + ".json"), work,
                                             "%s%d" % (kind, run), want_sha, up.proc.pid)
                wall[kind].append(w)
                # the target counts the daemon and the reader, not the upstream
                cpu[kind].append(reader + sum(v for n, v in th.items() if n[0] != "("))
                for name, s in th.items():
                    threads[kind].setdefault(name, []).append(s)
                threads[kind].setdefault("(reader dd)", []).append(reader)
            wall["curl"].append(timed(["curl", "-sf", "-o", "/dev/null", obj_url])[0])
            w, _ = timed("curl -sf %s | openssl dgst -sha256 >/dev/null" % obj_url, shell=True)
            wall["curl_openssl"].append(w)
        amp = sparse_amplification(up, up.url("chunks.json"), work)

        gib = SIZE / GiB
        curl_med = statistics.median(wall["curl"])
        none_med = statistics.median(wall["none"])
        print("verified cold read: object %.0f MiB, chunks of %d KiB, %d run(s), %d cores; "
              "wall seconds, median (min-max)" % (SIZE / (1 << 20), CHUNK >> 10, RUNS, CORES))
        rows = [("spoolfs, chunk hashes", "chunks"), ("spoolfs, sha256 only", "hash"),
                ("spoolfs, no hash", "none"), ("curl", "curl"),
                ("curl | openssl dgst -sha256", "curl_openssl")]
        print("%-30s %-24s %8s %10s" % ("read", "wall s", "vs curl", "vs no hash"))
        for label, key in rows:
            med, txt = fmt(wall[key])
            print("%-30s %-24s %8.2f %10.2f" % (label, txt, med / curl_med, med / none_med))
        for kind, label in kinds:
            per = ", ".join("%s %.2f" % (n, statistics.median(v) / gib)
                            for n, v in sorted(threads[kind].items()) if max(v) > 0)
            print("CPU s/GiB, %s: %s" % (label, per))
        cpu_med = statistics.median(cpu["chunks"])
        target = max(none_med, cpu_med / CORES)
        chunk_med = statistics.median(wall["chunks"])
        print("target: chunk-verified %.3f s within 1.1x of max(unverified %.3f s, "
              "CPU %.3f s / %d cores) = %.3f s: ratio %.2f" % (
                  chunk_med, none_med, cpu_med, CORES, target, chunk_med / target))
        print("sparse: %d random 4 KiB reads with chunk hashes fetched %.1fx the bytes asked"
              % (SPARSE_READS, amp))
        return 0
    finally:
        if up:
            up.stop()
        for name in os.listdir(work):
            p = os.path.join(work, name)
            if os.path.isdir(p) and is_mounted(p):
                subprocess.run(["fusermount3", "-uz", p], check=False)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

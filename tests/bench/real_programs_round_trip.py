#!/usr/bin/python3
"""What one synchronous FUSE request costs a program here: `real_programs.py --round-trip`.

bench_fuse_round_trip (fuse_round_trip.c) stat()s RT_CALLS (default 5000) distinct names
that do not exist in one directory, one LOOKUP each on a FUSE mount, with 0 or 200 us of
busy work between two calls, on:
  spoolfs         a warm mount (a --cache-dir --keep-cache one earlier mount filled) of a
                  small published tree served by upstream.py on 127.0.0.1 (a lookup of a
                  name the manifest lacks fetches nothing)
  fuse-overlayfs  lowerdir= the same tree on local disk: a FUSE filesystem with no network
                  (left out with a note when it is not installed)
  local disk      the tree itself: the kernel's own lookup
in three placements: both unpinned; the daemon and the program on CPU 0 ("one CPU"); the
daemon on CPU 1 and the program on CPU 0 ("two CPUs"). The daemon starts under taskset,
so all its processes and threads inherit the CPU. Each run mounts afresh per system and
placement, and the runs interleave (RT_RUNS, default 3). Prints microseconds per stat() (the
mean over a run's calls, gaps not counted): medians (min-max) of the runs. A benchmark:
timings are never asserted; exit status 1 when a mount or a stat() does not work.
"""

import json
import os
import statistics
import subprocess

import peers
import real_programs as rp

GAPS_US = (0, 200)
# name, the daemon's CPU, the program's CPU (None: unpinned): as PIN= places them
PLACEMENTS = tuple((name,) + rp.PINS[pin] for name, pin in (
    ("unpinned", ""), ("one CPU", "one"), ("two CPUs", "two")))
SYSTEMS = ("spoolfs", "fuse-overlayfs", "local disk")
TREE_FILES = 20


def binary(spoolfs):
    """bench_fuse_round_trip beside spoolfs when that is a build tree's, else built in
    build-bench (as peers.sh finds bench_readers)."""
    b = os.path.join(os.path.dirname(os.path.abspath(spoolfs)), "tests", "bench_fuse_round_trip")
    if os.access(b, os.X_OK):
        return b
    d = os.path.join(rp.ROOT, "build-bench")
    rp.log("building %s/tests/bench_fuse_round_trip" % d)
    rp.sh(["cmake", "-S", rp.ROOT, "-B", d, "-DCMAKE_BUILD_TYPE=RelWithDebInfo"])
    rp.sh(["cmake", "--build", d, "-j2", "--target", "bench_fuse_round_trip"])
    return os.path.join(d, "tests", "bench_fuse_round_trip")


def settings():
    """RT_CALLS and RT_RUNS; SystemExit with a message on a bad one."""
    try:
        calls = int(os.environ.get("RT_CALLS", "5000"))
        runs = int(os.environ.get("RT_RUNS", "3"))
    except ValueError as e:
        raise SystemExit("RT_CALLS and RT_RUNS are numbers: %s" % e)
    if calls < 1 or runs < 1:
        raise SystemExit("RT_CALLS and RT_RUNS must be at least 1")
    return calls, runs


class RoundTrip:
    def __init__(self, bench):
        self.b = bench
        self.calls, self.runs = settings()
        self.bin = binary(bench.spoolfs)
        self.us = {}  # (system, placement, gap) -> [mean microseconds per call, one per run]
        cpus = os.sched_getaffinity(0)
        self.placements = []
        for p in PLACEMENTS:
            if all(c is None or c in cpus for c in p[1:]):
                self.placements.append(p)
            else:
                bench.notes.append("%s not measured: this process may run on CPUs %s only"
                                   % (p[0], sorted(cpus)))
        self.systems = [s for s in SYSTEMS if s != "fuse-overlayfs" or not bench.overlay.missing()]
        if "fuse-overlayfs" not in self.systems:
            bench.notes.append("fuse-overlayfs not measured: %s" % bench.overlay.missing())

    def setup(self):
        """A small tree, published; its upstream; a warm cache directory."""
        w = self.b.work
        self.tree = os.path.join(w, "trees", "rt")
        os.makedirs(os.path.join(self.tree, "d"))
        for i in range(TREE_FILES):
            with open(os.path.join(self.tree, "d", "f%02d" % i), "w") as f:
                f.write("file %d\n" % i)
        store = os.path.join(w, "store")
        os.makedirs(store)
        rp.sh([self.b.spoolfs, "publish", self.tree, os.path.join(store, "rt")])
        self.srv = peers.Server(w, "upstream.rt", [
            rp.PYTHON, os.path.join(rp.ROOT, "tests", "upstream", "upstream.py"), "--root", store,
            "--delay-ms", "0"])
        self.warm = os.path.join(w, "warm.rt")
        os.makedirs(self.warm)
        m = self.mount(None, "spoolfs", "rt.fill")
        try:
            for name in sorted(os.listdir(os.path.join(m.mnt, "d"))):
                with open(os.path.join(m.mnt, "d", name), "rb") as f:
                    f.read()
        finally:
            self.unmounted(m, "rt.fill")

    def mount(self, cpu, system, tag):
        if system == "spoolfs":
            # .system: the daemon unpinned by PIN, pinned here as the placement says
            return peers.Mount(rp.Pinned(self.b.system.system, cpu), self.b.work, tag,
                               "rt/manifest", shared_cache=self.warm, durable=True,
                               extra_args=["--keep-cache"], server=self.srv)
        return peers.Mount(rp.Pinned(self.b.overlay.system, cpu), self.b.work, tag, self.tree)

    @staticmethod
    def unmounted(m, tag):
        rc = m.unmount()
        if rc != 0:
            raise RuntimeError("%s: %s exited %s: %s" % (tag, m.system.name, rc, m.log_tail()))

    def stats(self, d, cpu, gap):
        """Mean microseconds per stat() of a missing name in d, the program on cpu."""
        argv = [] if cpu is None else ["taskset", "-c", str(cpu)]
        p = subprocess.run(argv + [self.bin, d, str(self.calls), str(gap)], capture_output=True,
                           timeout=600)
        if p.returncode != 0:
            raise RuntimeError("bench_fuse_round_trip on %s exited %d: %s" % (
                d, p.returncode, p.stderr.decode(errors="replace").strip()[-300:]))
        return json.loads(p.stdout)["mean_us"]

    def measure(self, system, placement, run):
        name, daemon_cpu, prog_cpu = placement
        tag = "rt.%s.%s.%d" % (system.split()[0], name.replace(" ", "-"), run)
        if system == "local disk":
            if daemon_cpu != prog_cpu:
                return  # no daemon: the same as one CPU
            for gap in GAPS_US:
                self.us.setdefault((system, name, gap), []).append(
                    self.stats(os.path.join(self.tree, "d"), prog_cpu, gap))
            return
        m = self.mount(daemon_cpu, system, tag)
        try:
            for gap in GAPS_US:
                self.us.setdefault((system, name, gap), []).append(
                    self.stats(os.path.join(m.mnt, "d"), prog_cpu, gap))
        finally:
            self.unmounted(m, tag)

    def run(self):
        b = self.b
        try:
            self.setup()
            for run in range(1, self.runs + 1):
                for placement in self.placements:
                    for system in self.systems:
                        self.measure(system, placement, run)
                rp.log("run %d: %s" % (run, ", ".join(
                    "%s %s gap %d: %.1f" % (k[0], k[1], k[2], v[-1])
                    for k, v in self.us.items() if len(v) == run)))
        except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as e:
            b.problems.append(str(e))
        finally:
            if getattr(self, "srv", None):
                self.srv.stop()
        self.report()
        for n in b.notes:
            rp.log("NOTE: %s" % n)
        for p in b.problems:
            rp.log("PROBLEM: %s" % p)
        return 1 if b.problems else 0

    def report(self):
        print("\nFUSE round trip: microseconds per stat() of a name that does not exist (one "
              "LOOKUP on a mount), the mean of %d calls; medians (min-max) of %d run(s)"
              % (self.calls, self.runs))
        print("one CPU: daemon and program on CPU 0; two CPUs: daemon on CPU 1, program on "
              "CPU 0; gap: busy microseconds between two calls; load average at the end: %s"
              % " ".join(open("/proc/loadavg").read().split()[:3]))
        cols = [(p[0], g) for p in self.placements for g in GAPS_US]
        rows = [["system"] + ["%s, gap %d" % c for c in cols]]
        for s in self.systems:
            row = [s]
            for name, gap in cols:
                us = self.us.get((s, name, gap))
                row.append("%.1f (%.1f-%.1f)" % (statistics.median(us), min(us), max(us))
                           if us else "-")
            rows.append(row)
        rp.print_table(rows)


def round_trip(bench):
    return RoundTrip(bench).run()

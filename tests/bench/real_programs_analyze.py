#!/usr/bin/python3
"""Where a real program's time goes on a spoolfs mount: `real_programs.py --analyze`.

For one program (ANALYZE_PROGRAM, default aws) on one network (ANALYZE_NET, default lat)
of real_programs.py, runs local, first, warm and second (ANALYZE_RUNS times each,
default 3, interleaved) and prints, per variant:
  - the program's syscalls on the tree by type, from `strace -f -T -y` (count, total
    seconds, and the time above local disk): what each kind of FUSE request costs the
    program, mount time aside; strace slows every syscall alike, so compare differences;
  - the daemon's FUSE requests by opcode (one more run under `spoolfs -d`, counts only);
  - the daemon's counters (/.spoolfs/stats at the program's exit) and its
    --metrics-file histograms: reads parked and how long they waited;
and, for the second run: the files whose open and reads took over WAIT_MS (default 2) ms
in all (waits on a flight: speculative or the reader's own), where each sits in the
prefetch list and in its pack, the packs fetched whole for a member, and how the list's
order compares with the order the second run opened files in.
"""

import collections
import json
import os
import re
import statistics
import time

import peers
import real_programs as rp

SYSCALL = re.compile(r"^(\d+) +(?:<\.\.\. (\w+) resumed>(.*)|(\w+)\((.*))$")
DURATION = re.compile(r"<(\d+\.\d+)>$")
FDPATH = re.compile(r"<(/[^>]*)>")
PATH_ARG = re.compile(r'"(/[^"]*)"')
TRACED = ("openat,newfstatat,statx,stat,lstat,access,readlink,getdents64,read,pread64,close,"
          "fstat,lseek,ioctl,mmap")
SLOW_S = 0.001  # a syscall this long waited for more than a FUSE round trip


def parse_strace(path, root):
    """For the syscalls on paths under root: {type: [count, seconds, slow count, slow
    seconds]} (type: the syscall, "+ENOENT" when it failed so), and {relative path:
    seconds in its openat and reads}."""
    by_type = collections.defaultdict(lambda: [0, 0.0, 0, 0.0])
    by_path = collections.defaultdict(float)
    pending = {}  # pid -> (name, first part) of an unfinished syscall
    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        m = SYSCALL.match(line)
        if not m:
            continue
        pid = m.group(1)
        if m.group(2):  # resumed
            name, first = pending.pop(pid, (m.group(2), ""))
            text = first + m.group(3)
        else:
            name, text = m.group(4), m.group(5)
            if text.endswith("<unfinished ...>"):
                pending[pid] = (name, text[:-len("<unfinished ...>")])
                continue
        d = DURATION.search(text)
        if not d:
            continue
        where = PATH_ARG.search(text) or FDPATH.search(text)
        if not where or not (where.group(1) + "/").startswith(root + "/"):
            continue
        rel = os.path.relpath(where.group(1), root)
        secs = float(d.group(1))
        kind = name + ("+ENOENT" if " = -1 ENOENT" in text else "")
        t = by_type[kind]
        t[0] += 1
        t[1] += secs
        if secs >= SLOW_S:
            t[2] += 1
            t[3] += secs
        if name in ("openat", "read", "pread64", "getdents64"):
            by_path[rel] += secs
    return by_type, by_path


def stats_text(text):
    """Prometheus text as {name: value}, labels dropped and their series summed."""
    out = collections.defaultdict(float)
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            try:
                out[re.sub(r"\{.*\}", "", k)] += float(v)
            except ValueError:
                pass
    return out


class Analysis:
    def __init__(self, bench):
        self.b = bench
        self.prog_name = os.environ.get("ANALYZE_PROGRAM", "aws")
        self.net = os.environ.get("ANALYZE_NET", "lat")
        self.runs = int(os.environ.get("ANALYZE_RUNS", "3"))
        self.wait_ms = float(os.environ.get("WAIT_MS", "2"))
        self.rows = collections.defaultdict(list)  # variant -> [per-run dicts]

    def traced(self, variant, run):
        """Runs one variant under strace; returns its figures."""
        b, prog, net = self.b, self.prog, self.net
        tag = "an.%s.%d" % (variant, run)
        trace = os.path.join(b.work, "strace." + tag)
        wrap = ["strace", "-f", "-T", "-y", "-qq", "-e", "trace=" + TRACED, "-o", trace]
        record = os.path.join(b.work, "reads.an.%d" % run)
        out = {}
        srv = b.servers[net]
        srv.reset()
        t0 = time.monotonic()
        if variant == "local":
            prog.run(prog.tree, tag, wrap)
            root = prog.tree
        else:
            extra, cache = {
                "first": (["--record-reads", record], None),
                "warm": (["--keep-cache"], b.warm_dir(net, prog)),
                "second": (["--prefetch-list", record,
                            "--record-reads", record + ".second"], None)}[variant]
            metrics = os.path.join(b.work, "metrics.%s.prom" % tag)
            m = peers.Mount(b.system, b.work, tag, "%s/manifest" % prog.name, shared_cache=cache,
                            durable=cache is not None,
                            extra_args=extra + ["--metrics-file", metrics],
                            server=srv)
            try:
                out["mount_s"] = m.mount_s
                prog.run(m.mnt, tag, wrap)
                out["stats"] = stats_text(open(os.path.join(m.mnt, ".spoolfs", "stats")).read())
                flights = []
                for line in open(os.path.join(m.mnt, ".spoolfs", "flights")):
                    if line.strip():
                        flights.append(json.loads(line))
                out["flights"] = flights
            finally:
                m.unmount()
            out["metrics"] = stats_text(open(metrics).read()) if os.path.exists(metrics) else {}
            root = m.mnt
        out["wall"] = time.monotonic() - t0
        st = srv.ctl("stats")
        out["gets"], out["bytes"] = st["total_gets"], st["total_bytes"]
        out["paths"] = {p: (s["gets"], s["bytes"], s["ranges"]) for p, s in st["paths"].items()}
        out["by_type"], out["by_path"] = parse_strace(trace, root)
        os.unlink(trace)
        return out

    def fuse_ops(self, variant):
        """FUSE requests by opcode in one run under `spoolfs -d` (counts only)."""
        b, prog = self.b, self.prog
        tag = "an.d.%s" % variant
        record = os.path.join(b.work, "reads.an.d")
        extra, cache = {
            "first": (["--record-reads", record], None),
            "warm": (["--keep-cache"], b.warm_dir(self.net, prog)),
            "second": (["--prefetch-list", record], None)}[variant]
        m = peers.Mount(b.system, b.work, tag, "%s/manifest" % prog.name, shared_cache=cache,
                        durable=cache is not None, extra_args=extra + ["-d"],
                        server=b.servers[self.net])
        try:
            prog.run(m.mnt, tag)
        finally:
            m.unmount()
        ops = collections.Counter(re.findall(r"opcode: (\w+)", open(m.logpath, errors="replace").read()))
        return ops

    def run(self):
        b = self.b
        b.c["programs"] = [self.prog_name]
        b.c["nets"] = [self.net]
        b.setup()
        self.prog = b.progs[0]
        self.manifest = json.load(open(os.path.join(b.work, "store", self.prog.name,
                                                    "manifest.json")))
        for run in range(1, self.runs + 1):
            for v in ("local", "first", "warm", "second"):
                r = self.traced(v, run)
                self.rows[v].append(r)
                rp.log("analyze run %d %s: %.2f s" % (run, v, r["wall"]))
        self.ops = {v: self.fuse_ops(v) for v in ("first", "warm", "second")}
        for s in b.servers.values():
            s.stop()
        self.report()
        return 0

    # --- the report
    def med(self, v, f):
        return statistics.median(f(r) for r in self.rows[v])

    def report(self):
        p = self.prog
        print("\nwhere the time goes: %s (`%s`), %s, medians of %d runs under strace -f -T"
              % (p.name, p.cmd, "%g ms per request" % self.b.c["delay_ms"] +
                 (", capped" if self.net == "cap" else ""), self.runs))
        variants = ("local", "first", "warm", "second")
        print("wall s (strace slows it):  " + "  ".join(
            "%s %.2f" % (v, self.med(v, lambda r: r["wall"])) for v in variants))
        print("mount s:  " + "  ".join("%s %.3f" % (v, self.med(v, lambda r: r["mount_s"]))
                                       for v in variants[1:]))
        print("upstream GETs / MB:  " + "  ".join(
            "%s %d / %.1f" % (v, self.med(v, lambda r: r["gets"]), self.med(v, lambda r: r["bytes"]) / 1e6)
            for v in variants[1:]))
        types = sorted({t for v in variants for r in self.rows[v] for t in r["by_type"]})
        print("\nsyscalls on the tree: count, seconds; of those, slower than %g ms: count, "
              "seconds (medians of runs)" % (SLOW_S * 1000))
        print("%-20s" % "syscall" + "".join("%28s" % v for v in variants))
        for t in types:
            cells = []
            for v in variants:
                f = [self.med(v, lambda r: r["by_type"].get(t, [0, 0, 0, 0])[i]) for i in range(4)]
                cells.append("%28s" % ("%d, %.3f; %d, %.3f" % tuple(f)))
            print("%-20s" % t + "".join(cells))
        total = {v: self.med(v, lambda r: sum(x[1] for x in r["by_type"].values()))
                 for v in variants}
        print("%-20s" % "all" + "".join("%28s" % ("%.3f" % total[v]) for v in variants))
        print("\nFUSE requests by opcode (one run under -d):")
        ops = sorted({o for c in self.ops.values() for o in c})
        for o in ops:
            print("  %-14s" % o + "  ".join("%s %5d" % (v, self.ops[v].get(o, 0))
                                              for v in ("first", "warm", "second")))
        keys = ("spoolfs_cache_hits_total", "spoolfs_cache_misses_total",
                "spoolfs_coalesced_opens_total", "spoolfs_coalesced_waits_total",
                "spoolfs_passthrough_opens_total", "spoolfs_speculative_flights_total",
                "spoolfs_speculative_unread_bytes", "spoolfs_prefetch_walks_total",
                "spoolfs_prefetch_walk_started_total", "spoolfs_prefetch_walk_hits_total",
                "spoolfs_read_wait_seconds_count", "spoolfs_read_wait_seconds_sum",
                "spoolfs_open_first_byte_seconds_count", "spoolfs_open_first_byte_seconds_sum")
        print("\ndaemon counters at the program's exit (median of runs):")
        for k in keys:
            vals = []
            for v in variants[1:]:
                src = "metrics" if k.endswith(("_count", "_sum")) else "stats"
                vals.append("%s %s" % (v, "%g" % self.med(v, lambda r: r[src].get(k, 0))))
            print("  %-40s %s" % (k, "  ".join(vals)))
        self.report_second()

    def report_second(self):
        files = {e["path"]: e for e in self.manifest["entries"] if e.get("type", "file") == "file"}
        packs = {pk["sha256"]: pk for pk in self.manifest["packs"]}
        members = collections.defaultdict(list)
        for e in files.values():
            if "pack" in e:
                members[e["pack"]].append(e)
        run = self.rows["second"][-1]
        warm = self.rows["warm"][-1]
        record = os.path.join(self.b.work, "reads.an.%d" % self.runs)
        lst = [ln.rstrip("\n") for ln in open(record) if ln.strip()]
        pos = {x: i for i, x in enumerate(lst)}
        second_order = [ln.rstrip("\n") for ln in open(record + ".second") if ln.strip()]
        print("\nsecond run (--prefetch-list of %d paths), last of %d runs:" % (len(lst), self.runs))
        waited = []
        for rel, secs in run["by_path"].items():
            extra = secs - warm["by_path"].get(rel, 0.0)
            if extra * 1000 >= self.wait_ms:
                waited.append((extra, rel))
        waited.sort(reverse=True)
        for kind, keep in (("files", lambda r: r in files), ("directories", lambda r: r not in files)):
            these = [(w, r) for w, r in waited if keep(r)]
            print("  %s whose opens, reads or listings took >= %g ms more than warm: %d, "
                  "%.3f s in all" % (kind, self.wait_ms, len(these), sum(w for w, _ in these)))
            for w, rel in these[:10]:
                e = files.get(rel)
                where = "directory" if e is None else (
                    "pack member at %d of %d B" % (e["offset"], packs[e["pack"]]["size"])
                    if "pack" in e else "own object, %d B" % e["size"])
                print("    %6.1f ms  list #%s  %s  (%s)" % (w * 1000, pos.get(rel, "-"), rel, where))
        idx = sorted(pos[r] for _, r in waited if r in pos)
        if idx:
            print("  list positions of the files that waited: median #%d, first #%d, last #%d"
                  % (statistics.median(idx), idx[0], idx[-1]))
        # packs: fetched whole or ranged, bytes against the members the program read
        read_set = set(second_order)
        url_pack = {pk["url"]: pk for pk in packs.values()}
        whole = ranged = pbytes = used = 0
        for path, (gets, nbytes, ranges) in run["paths"].items():
            pk = url_pack.get(path[len(self.prog.name) + 1:])
            if not pk:
                continue
            pbytes += nbytes
            if any(r for r in ranges):
                ranged += 1
            else:
                whole += 1
            used += sum(e["size"] for e in members[pk["sha256"]] if e["path"] in read_set)
        print("  packs fetched: %d whole, %d with ranges; %.1f MB of packs for %.1f MB of "
              "members read" % (whole, ranged, pbytes / 1e6, used / 1e6))
        # order: the list (the first run's first opens) against this run's first opens
        common = [x for x in second_order if x in pos]
        disp = [abs(pos[x] - i) for i, x in enumerate(common)]
        agree = total = 0
        ranks = [pos[x] for x in common]
        for i in range(len(ranks)):
            for j in range(i + 1, min(len(ranks), i + 200)):
                total += 1
                agree += ranks[i] < ranks[j]
        print("  order: %d of this run's %d first opens are on the list; displacement median "
              "%d, max %d; pairs within 200 opens in the list's order: %.1f%%"
              % (len(common), len(second_order), statistics.median(disp) if disp else 0,
                 max(disp, default=0), 100.0 * agree / total if total else 100))
        pack_of = [files.get(x, {}).get("pack") for x in lst]
        switches = sum(1 for a, b in zip(pack_of, pack_of[1:]) if a != b)
        distinct = len({x for x in pack_of if x})
        print("  the list touches %d packs and %d own objects; it moves to another object "
              "%d times (%d would be one visit per object)"
              % (distinct, sum(1 for x in pack_of if x is None), switches,
                 distinct + sum(1 for x in pack_of if x is None) - 1))


def analyze(bench):
    return Analysis(bench).run()

#!/usr/bin/python3
"""Real programs from a spoolfs mount (issue "first run"): programs nobody here wrote, each
run from a tree made by `spoolfs publish`, against the same command on the same tree on
local disk and against the archive route CI jobs use today (download one .tar.zst of the
tree, extract it, run).

  python3 tests/bench/real_programs.py [--install]        # RUNS=7, both networks
  RUNS=3 PROGRAMS=aws NETS=lat python3 tests/bench/real_programs.py   # a quick run
  python3 tests/bench/real_programs.py --analyze          # where the time goes (strace)
  python3 tests/bench/real_programs.py --round-trip       # what one FUSE request costs

Programs (PROGRAMS, default aws,npm,cc):
  aws  Debian's awscli (AWS CLI v2): the files `dpkg -L` lists under dist-packages for
       awscli and its python3-* dependencies, compiled (__pycache__, as Debian's postinst
       does); run `python3 -S TREE/aws ec2 describe-instances --generate-cli-skeleton` with
       PYTHONPATH=TREE/dist-packages (-S: nothing from the local dist-packages).
  npm  the machine's npm (/usr/lib/node_modules/npm; Debian's npm package lives in
       /usr/share/nodejs instead, and the one used is named in the output): run
       `node TREE/bin/npm-cli.js help install` (npm runs man on TREE's man page).
  cc   a compiler with a sysroot: /usr/include published; this repository's own daemon
       sources (util index fetch publish fs, 90-odd .c files, at HEAD, on local disk)
       compiled with `gcc -O0 -c -nostdinc` against TREE (gcc's own headers stay local),
       two at a time as `make -j2` would.
Variants, one after another within each run (interleaved, so load drifts hit all alike):
  local    the tree on local disk, page cache warm (the setup ran the program once from
           it, and every run reads it again), as in the issue's figures
  floor    the same tree through a FUSE filesystem with no network at all: a fresh
           `fuse-overlayfs -o lowerdir=TREE` mount (lowerdir alone: read-only), the
           figure from its start to the program's exit; what any FUSE mount costs this
           program on this machine (left out with a note when fuse-overlayfs is missing)
  archive  curl the tree's .tar.zst from the same upstream | zstd -d | tar -x, then run
  order    first run with a read order in the manifest: a fresh mount, empty cache, of a
           second manifest of the same objects (`publish --manifest manifest-order
           --read-order`) whose order one earlier mount of the plain manifest recorded
           (`--record-reads`, made once in the setup)
  first    a fresh mount, empty session cache, --record-reads
  warm     a fresh mount of a --cache-dir --keep-cache that an earlier mount filled
  second   a fresh mount, empty cache, --prefetch-list of this run's `first` record
Every spoolfs (and floor) figure counts from the daemon's start to the program's exit
(mount time included, and logged after each run; unmount not). Networks (NETS, default lat,cap):
tests/upstream/upstream.py on 127.0.0.1 with DELAY_MS (default 10) per request; "cap"
also with --total-rate CAP_MIB (default 100) MiB/s for all responses together. Output:
medians (min-max) of RUNS (default 7) runs, and ratios to local. Each program's output
is checked against the local run's (exit status and a hash of stdout; cc: the objects'
bytes).

Env: RUNS, PROGRAMS, NETS, DELAY_MS, CAP_MIB, SPOOLFS_BIN (default build-bench/spoolfs,
built), SPOOLFS_BASE_BIN (another build, e.g. main before a change: each mounted variant
runs with it too, right after, as "VARIANT, base"), KEEP=1 (keep the work dir), TMPDIR
(where the work dir goes; default /var/tmp),
ONLY (the variants to run, e.g. ONLY=local,floor,warm), PIN=one (each daemon and the
program on CPU 0) or PIN=two (each daemon on CPU 1, the program on CPU 0): on a VM a
FUSE round trip between two CPUs can cost ten times one on one CPU (--round-trip).
--round-trip: stat()s of names that do not exist (one LOOKUP each) on a warm spoolfs
mount, a fuse-overlayfs mount and local disk, with the daemon and the program unpinned,
on one CPU and on two (real_programs_round_trip.py; RT_RUNS default 3, RT_CALLS).
A benchmark, not a test: timings are never asserted. A program not installed is left out
with a note. Exit status 1 when something does not work (a mount fails, a program fails
or prints other bytes than from local disk), 2 on a bad setting.
"""

import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import benchlib  # noqa: E402  (is_mounted)
import peers  # noqa: E402  (Server, Mount, Spoolfs: the upstream and mount plumbing)

PYTHON = "/usr/bin/python3"
MiB = 1 << 20
AWS_DEPS = ("awscli python3-awscrt python3-cffi-backend python3-colorama python3-cryptography "
            "python3-dateutil python3-distro python3-docutils python3-jmespath "
            "python3-prompt-toolkit python3-pyasn1 python3-roman python3-ruamel.yaml "
            "python3-ruamel.yaml.clib python3-six python3-urllib3 python3-wcwidth").split()
DIST = "/usr/lib/python3/dist-packages"
NPM_DIRS = ("/usr/lib/node_modules/npm", "/usr/share/nodejs/npm")
CC_DIRS = ("util", "index", "fetch", "publish", "fs")
# name, column title
VARIANTS = (("local", "local disk"), ("floor", "FUSE floor: fuse-overlayfs over local disk"),
            ("archive", "download + extract + run"),
            ("order", "first run, read order"), ("first", "spoolfs first run"),
            ("warm", "spoolfs warm"), ("second", "second run, --prefetch-list"))
MOUNTED = ("order", "first", "warm", "second")


def variants():
    """VARIANTS, and with SPOOLFS_BASE_BIN each mounted one again with that build."""
    if not os.environ.get("SPOOLFS_BASE_BIN"):
        return VARIANTS
    out = []
    for v, title in VARIANTS:
        out.append((v, title))
        if v in MOUNTED:
            out.append((v + ".base", title + ", base"))
    return tuple(out)


if os.environ.get("ONLY"):
    VARIANTS = tuple(v for v in VARIANTS if v[0] in os.environ["ONLY"].split(","))


def log(msg):
    sys.stderr.write("[real] %s\n" % msg)
    sys.stderr.flush()


def sh(argv, **kw):
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    p = subprocess.run(argv, **kw)
    if p.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (" ".join(argv[:3]), p.returncode,
                                                 (p.stderr or b"").decode(errors="replace")[-500:]))
    return p.stdout


# --------------------------------------------------------------------------- programs
class Program:
    """One real program: its tree (made once under WORK/trees), how to run it from a root
    (the tree on disk, extracted, or a mount) and a digest of what it produced."""

    name = "?"

    def __init__(self, work):
        self.work = work
        self.tree = os.path.join(work, "trees", self.name)
        self.home = os.path.join(work, "home")
        os.makedirs(self.home, exist_ok=True)
        os.makedirs(os.path.dirname(self.tree), exist_ok=True)

    def env(self, root):
        return {"PATH": "/usr/bin:/bin", "HOME": self.home, "LC_ALL": "C.UTF-8",
                "TMPDIR": os.path.join(self.work, "tmp")}

    def run(self, root, tag, wrap=()):
        """Runs the program from root (under wrap, e.g. strace); returns a digest of its
        result."""
        p = subprocess.run(list(wrap) + self.argv(root, tag), capture_output=True,
                           env=self.env(root), cwd=self.work, timeout=600)
        if p.returncode != 0:
            raise RuntimeError("%s from %s exited %d: %s" % (
                self.name, root, p.returncode, p.stderr.decode(errors="replace")[-400:]))
        return hashlib.sha256(p.stdout).hexdigest()


class Aws(Program):
    name = "aws"
    title = "AWS CLI v2 (Debian awscli)"
    cmd = "aws ec2 describe-instances --generate-cli-skeleton"

    def missing(self):
        return None if os.path.exists(DIST + "/awscli") else "awscli is not installed (--install)"

    def make(self):
        files = []
        for line in sh(["dpkg", "-L"] + AWS_DEPS).decode().splitlines():
            if line.startswith(DIST + "/") and os.path.isfile(line) and not os.path.islink(line):
                files.append(os.path.relpath(line, os.path.dirname(DIST)))
        dst = self.tree
        os.makedirs(dst)
        lst = os.path.join(self.work, "aws.files")
        with open(lst, "w") as f:
            f.write("\n".join(sorted(set(files))) + "\n")
        # tar keeps the mtimes, which the .pyc files below are checked against.
        tar = subprocess.Popen(["tar", "-C", os.path.dirname(DIST), "-cf", "-", "-T", lst],
                               stdout=subprocess.PIPE)
        sh(["tar", "-C", dst, "-xf", "-"], stdin=tar.stdout)
        if tar.wait() != 0:
            raise RuntimeError("tar of the awscli files failed")
        shutil.copy2("/usr/bin/aws", os.path.join(dst, "aws"))
        sh([PYTHON, "-m", "compileall", "-q", os.path.join(dst, "dist-packages")])
        return "awscli %s and %d python3-* packages it needs: %d files of `dpkg -L`" % (
            sh(["dpkg-query", "-W", "-f", "${Version}", "awscli"]).decode(),
            len(AWS_DEPS) - 1, len(files))

    def argv(self, root, tag):
        return [PYTHON, "-S", os.path.join(root, "aws"), "ec2", "describe-instances",
                "--generate-cli-skeleton"]

    def env(self, root):
        return {**super().env(root), "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONPATH": "%s/dist-packages" % root}


class Npm(Program):
    name = "npm"
    title = "npm's own CLI"
    cmd = "npm help install"

    def src(self):
        return next((d for d in NPM_DIRS if os.path.exists(d + "/bin/npm-cli.js")), None)

    def missing(self):
        return None if self.src() else "no npm in %s" % " or ".join(NPM_DIRS)

    def make(self):
        sh(["cp", "-a", self.src(), self.tree])
        ver = json.load(open(os.path.join(self.tree, "package.json")))["version"]
        return "npm %s from %s, node %s" % (ver, self.src(),
                                            sh(["node", "--version"]).decode().strip())

    def argv(self, root, tag):
        return ["node", os.path.join(root, "bin", "npm-cli.js"), "help", "install"]

    def env(self, root):
        return {**super().env(root), "MANWIDTH": "80", "npm_config_update_notifier": "false",
                "npm_config_cache": os.path.join(self.work, "npm-cache"),
                "npm_config_logs_max": "0"}


class Cc(Program):
    name = "cc"
    title = "gcc with a sysroot (/usr/include)"
    cmd = "gcc -O0 -c, 2 at a time"

    def missing(self):
        return None if shutil.which("gcc") else "no gcc"

    def make(self):
        os.makedirs(self.tree)
        sh(["cp", "-a", "/usr/include", os.path.join(self.tree, "include")])
        # The sources: this repository's daemon at HEAD, on local disk (not published).
        src = os.path.join(self.work, "cc-src")
        os.makedirs(src)
        # daemon/ for its headers only (fs/session.h includes daemon/options.h).
        arch = subprocess.Popen(["git", "-C", ROOT, "archive", "HEAD"] + list(CC_DIRS)
                                + ["daemon"], stdout=subprocess.PIPE)
        sh(["tar", "-C", src, "-xf", "-"], stdin=arch.stdout)
        if arch.wait() != 0:
            raise RuntimeError("git archive failed")
        self.sources = sorted(os.path.relpath(os.path.join(d, f), src)
                              for top in CC_DIRS for d, _, fs in os.walk(os.path.join(src, top))
                              for f in fs if f.endswith(".c"))
        self.make_driver()
        head = sh(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]).decode().strip()
        gcc = sh(["gcc", "-dumpfullversion"]).decode().strip()
        return "gcc %s compiling %d .c files of spoolfs at %s against /usr/include (%d files)" % (
            gcc, len(self.sources), head,
            sum(len(fs) for _, _, fs in os.walk(os.path.join(self.tree, "include"))))

    def argv(self, root, tag):
        out = os.path.join(self.work, "obj." + tag)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        self._out = out
        # One object per source, named after its path; -P2 as make -j2 on 2 cores.
        return ["xargs", "-a", self.list, "-P2", "-n1", self.one, os.path.join(root, "include"),
                out]

    def make_driver(self):
        """cc1.sh INCLUDE OUT SOURCE: compiles one source of cc-src against INCLUDE."""
        self.one = os.path.join(self.work, "cc1.sh")
        with open(self.one, "w") as f:
            f.write("""#!/bin/sh
inc=$1 out=$2 src=$3
cd %s || exit 1
exec gcc -std=c11 -D_GNU_SOURCE -DFUSE_USE_VERSION=312 -DSPOOLFS_VERSION='"0"' \\
	-nostdinc -isystem %s -isystem "$inc/x86_64-linux-gnu" -isystem "$inc" \\
	-I"$inc/fuse3" -I"$inc/yajl" -I. -O0 -c "$src" -o "$out/$(echo "$src" | tr / _).o"
""" % (os.path.join(self.work, "cc-src"),
                sh(["gcc", "-print-file-name=include"]).decode().strip()))
        os.chmod(self.one, 0o755)
        self.list = os.path.join(self.work, "cc.sources")
        with open(self.list, "w") as f:
            f.write("\n".join(self.sources) + "\n")

    def run(self, root, tag, wrap=()):
        super().run(root, tag, wrap)
        h = hashlib.sha256()
        for name in sorted(os.listdir(self._out)):
            with open(os.path.join(self._out, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
        return h.hexdigest()


PROGRAMS = {c.name: c for c in (Aws, Npm, Cc)}


class Overlay(peers.System):
    """fuse-overlayfs over a tree on local disk: a FUSE filesystem with no network, whose
    every answer is a syscall on local disk. With lowerdir alone it needs no upper or work
    dir and mounts read-only. Its defaults keep entries and attributes in the kernel's
    caches for 10^9 s (timeout=), as spoolfs keeps its snapshot's for a year, and serve
    requests on one thread."""

    name = "fuse-overlayfs"
    mount_timeout = 30

    def missing(self):
        return None if shutil.which("fuse-overlayfs") else "fuse-overlayfs is not installed"

    def argv(self, what, mnt, cache, durable=False, server=None):
        # what: the tree's path, which lowerdir= would split at ':' (and -o at ',').
        if ":" in what or "," in what:
            raise RuntimeError("fuse-overlayfs cannot take %s as lowerdir" % what)
        return ["fuse-overlayfs", "-f", "-o", "lowerdir=" + what, mnt]


class Pinned(peers.System):
    """system, its daemon started under `taskset -c cpu` (cpu None: as it is): every
    process and thread it starts inherits the CPU."""

    def __init__(self, system, cpu):
        super().__init__(system.b)
        self.system, self.cpu = system, cpu
        self.name, self.mount_timeout = system.name, system.mount_timeout

    def argv(self, *args, **kw):
        argv = self.system.argv(*args, **kw)
        return argv if self.cpu is None else ["taskset", "-c", str(self.cpu)] + argv

    def env(self, cache):
        return self.system.env(cache)

    def missing(self):
        return self.system.missing()


# PIN: the daemon's CPU, the program's
PINS = {"": (None, None), "one": (0, 0), "two": (1, 0)}


# --------------------------------------------------------------------------- the bench
def config():
    """The settings from the environment; SystemExit with a message on a bad one."""
    try:
        c = {"runs": int(os.environ.get("RUNS", "7")),
             "programs": os.environ.get("PROGRAMS", "aws,npm,cc").split(","),
             "nets": os.environ.get("NETS", "lat,cap").split(","),
             "delay_ms": float(os.environ.get("DELAY_MS", "10")),
             "cap_mib": float(os.environ.get("CAP_MIB", "100")),
             "pin": os.environ.get("PIN", "")}
    except ValueError as e:
        raise SystemExit("RUNS, DELAY_MS and CAP_MIB are numbers: %s" % e)
    if c["delay_ms"] < 0 or c["cap_mib"] <= 0:
        raise SystemExit("DELAY_MS must be 0 or more and CAP_MIB more than 0")
    for p in c["programs"]:
        if p not in PROGRAMS:
            raise SystemExit("PROGRAMS: unknown program %r (have %s)" % (p, ",".join(PROGRAMS)))
    if not any(v == "local" for v, _ in VARIANTS):
        raise SystemExit("ONLY: the variants must include local (the runs are checked against it)")
    for n in c["nets"]:
        if n not in ("lat", "cap"):
            raise SystemExit("NETS: unknown network %r (have lat,cap)" % n)
    if c["runs"] < 1:
        raise SystemExit("RUNS must be at least 1")
    if c["pin"] not in PINS:
        raise SystemExit("PIN: one or two, not %r" % c["pin"])
    if any(cpu is not None and cpu not in os.sched_getaffinity(0) for cpu in PINS[c["pin"]]):
        raise SystemExit("PIN=%s: this process may run on CPUs %s only"
                         % (c["pin"], sorted(os.sched_getaffinity(0))))
    return c


class Bench:
    def __init__(self, work, spoolfs):
        self.work, self.spoolfs = work, spoolfs
        self.variants = variants()
        self.c = config()
        self.times = {}  # (net, program, variant) -> [seconds]
        self.mount_s = None  # the last mount's seconds from start to mounted: logged per run
        self.upstream = {}  # (net, program, variant) -> [(GETs, body bytes)]
        self.problems = []  # something did not work: exit 1
        self.notes = []  # a program is not installed: said, exit 0
        self.progs = []
        self.servers = {}
        self.http = None  # peers.Spoolfs reads the upstream of a mount from here
        daemon_cpu, prog_cpu = PINS[self.c["pin"]]
        self.system = Pinned(peers.Spoolfs(self), daemon_cpu)
        self.overlay = Pinned(Overlay(self), daemon_cpu)
        self.wrap = [] if prog_cpu is None else ["taskset", "-c", str(prog_cpu)]
        os.makedirs(os.path.join(work, "tmp"))

    def setup(self):
        why = self.overlay.missing()
        if why and any(v == "floor" for v, _ in self.variants):  # said, as a missing program
            self.notes.append("floor not run: %s" % why)
            self.variants = tuple(v for v in self.variants if v[0] != "floor")
        store = os.path.join(self.work, "store")
        os.makedirs(store)
        for name in self.c["programs"]:
            prog = PROGRAMS[name](self.work)
            why = prog.missing()
            if why:  # as peers.sh's missing peers: said, and left out
                self.notes.append("%s not run: %s" % (name, why))
                continue
            log("%s: making the tree" % name)
            prog.about = prog.make()
            log("%s: publishing; archiving as .tar.zst" % name)
            out = sh([self.spoolfs, "publish", prog.tree, os.path.join(store, name)],
                     stderr=subprocess.STDOUT).decode().strip().splitlines()[-1]
            prog.published = out.split(": ", 1)[-1].split("; wrote")[0]
            tar = subprocess.Popen(["tar", "-C", prog.tree, "-cf", "-", "."],
                                   stdout=subprocess.PIPE)
            with open(os.path.join(store, name + ".tar.zst"), "wb") as f:
                sh(["zstd", "-q", "-3", "-T0", "-c"], stdin=tar.stdout, stdout=f)
            if tar.wait() != 0:
                raise RuntimeError("tar of %s failed" % prog.tree)
            prog.archive_bytes = os.path.getsize(os.path.join(store, name + ".tar.zst"))
            prog.expect = prog.run(prog.tree, "expect")
            self.progs.append(prog)
        self.start_servers(store)
        for prog in self.progs:
            self.publish_order(store, prog)

    def publish_order(self, store, prog):
        """The tree again as manifest-order.json beside manifest.json (the same objects),
        with the read order of one earlier mount of manifest.json: what a job's first
        run on a fresh machine finds when the publisher recorded it elsewhere."""
        net = next(iter(self.servers))
        record = os.path.join(self.work, "order.%s" % prog.name)
        log("%s: recording a read order on one mount; publishing it" % prog.name)
        self.mounted(net, prog, "%s.%s.record" % (prog.name, net), ["--record-reads", record])
        sh([self.spoolfs, "publish", prog.tree, os.path.join(store, prog.name), "--manifest",
            "manifest-order.json", "--read-order", record], stderr=subprocess.STDOUT)

    def start_servers(self, store):
        for net in self.c["nets"]:
            argv = [PYTHON, os.path.join(ROOT, "tests", "upstream", "upstream.py"), "--root",
                    store, "--delay-ms", str(self.c["delay_ms"])]
            if net == "cap":
                argv += ["--total-rate", str(int(self.c["cap_mib"] * MiB))]
            self.servers[net] = peers.Server(self.work, "upstream." + net, argv)

    def check(self, prog, digest, what):
        if digest != prog.expect:
            raise RuntimeError("%s: %s gave other output than from local disk" % (prog.name, what))

    def mounted(self, net, prog, tag, extra=(), cache=None, manifest="manifest"):
        """A fresh mount of prog's manifest from net's upstream runs prog: returns the
        seconds from the daemon's start to the program's exit."""
        return self.timed_mount(self.system, "%s/%s" % (prog.name, manifest), prog, tag,
                                shared_cache=cache, durable=cache is not None,
                                extra_args=extra, server=self.servers[net])

    def floor(self, net, prog, tag):
        """prog from a fresh fuse-overlayfs mount of its tree on local disk."""
        return self.timed_mount(self.overlay, prog.tree, prog, tag)

    def timed_mount(self, system, what, prog, tag, **kw):
        """The seconds from system's start (mounting what) to prog's exit from the mount.
        peers.Mount lists the mount in work/mounts before it waits: cleanup() finds it."""
        t0 = time.monotonic()
        m = peers.Mount(system, self.work, tag, what, **kw)
        self.mount_s = m.mount_s
        try:
            digest = prog.run(m.mnt, tag, self.wrap)
            t = time.monotonic() - t0
        finally:
            rc = m.unmount()
        if rc != 0:
            raise RuntimeError("%s: %s exited %s: %s" % (tag, system.name, rc, m.log_tail()))
        self.check(prog, digest, tag)
        return t

    def archive(self, net, prog, tag):
        dst = os.path.join(self.work, "x." + tag)
        os.makedirs(dst)
        url = "%s/%s.tar.zst" % (self.servers[net].base, prog.name)
        t0 = time.monotonic()
        sh(["bash", "-o", "pipefail", "-c", "curl -sf --noproxy '*' %s | zstd -d -q | tar -x -C %s"
            % (url, dst)])
        digest = prog.run(dst, tag, self.wrap)
        t = time.monotonic() - t0
        shutil.rmtree(dst)
        self.check(prog, digest, tag)
        return t

    def local(self, net, prog, tag):
        t0 = time.monotonic()
        digest = prog.run(prog.tree, tag, self.wrap)
        t = time.monotonic() - t0
        self.check(prog, digest, tag)
        return t

    def variant(self, v, net, prog, run, build=""):
        """The seconds of variant v."""
        tag = "%s.%s.%s%s.%d" % (prog.name, net, v, build, run)
        record = os.path.join(self.work, "reads.%s.%s.%d%s" % (prog.name, net, run, build))
        if v == "local":
            return self.local(net, prog, tag)
        if v == "floor":
            return self.floor(net, prog, tag)
        if v == "archive":
            return self.archive(net, prog, tag)
        if v == "order":
            return self.mounted(net, prog, tag, manifest="manifest-order")
        if v == "first":
            return self.mounted(net, prog, tag, ["--record-reads", record])
        if v == "warm":
            return self.mounted(net, prog, tag, ["--keep-cache"], self.warm_dir(net, prog))
        if v == "second":
            return self.mounted(net, prog, tag, ["--prefetch-list", record])
        raise ValueError(v)

    def with_build(self, v, net, prog, run):
        """Variant v, or "V.base": V with SPOOLFS_BASE_BIN (the record a base second run
        reads is its own base first run's)."""
        if not v.endswith(".base"):
            return self.variant(v, net, prog, run)
        own = self.spoolfs
        self.spoolfs = os.environ["SPOOLFS_BASE_BIN"]
        try:
            return self.variant(v[:-5], net, prog, run, ".base")
        finally:
            self.spoolfs = own

    def warm_dir(self, net, prog):
        """A --cache-dir that one mount filled with what prog reads (kept)."""
        d = os.path.join(self.work, "warm.%s.%s" % (prog.name, net))
        if not os.path.isdir(d):
            os.makedirs(d)
            self.mounted(net, prog, "%s.%s.fill" % (prog.name, net), ["--keep-cache"], d)
        return d

    def run(self):
        try:
            self.setup()
            for net in self.servers:
                for prog in self.progs:
                    self.warm_dir(net, prog)
            for run in range(1, self.c["runs"] + 1):
                for net, srv in self.servers.items():
                    for prog in self.progs:
                        line = []
                        for v, _ in self.variants:
                            srv.reset()
                            self.mount_s = None
                            t = self.with_build(v, net, prog, run)
                            st = srv.ctl("stats")
                            self.times.setdefault((net, prog.name, v), []).append(t)
                            self.upstream.setdefault((net, prog.name, v), []).append(
                                (st["total_gets"], st["total_bytes"]))
                            line.append("%s %.2f" % (v, t) if self.mount_s is None else
                                        "%s %.2f (mount %.2f)" % (v, t, self.mount_s))
                        log("run %d %s %s: %s" % (run, net, prog.name, ", ".join(line)))
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            self.problems.append(str(e))
        finally:
            for s in self.servers.values():
                s.stop()
        self.report()
        for n in self.notes:
            log("NOTE: %s" % n)
        for p in self.problems:
            log("PROBLEM: %s" % p)
        return 1 if self.problems else 0

    # --- the table
    def report(self):
        c = self.c
        print("\nreal programs from spoolfs: medians of %d run(s) (min-max), wall seconds, and "
              "ratio to local disk" % c["runs"])
        print("local disk: page cache warm; spoolfs and FUSE floor figures include the mount; "
              "upstream tests/upstream/upstream.py on 127.0.0.1, %g ms per request"
              % c["delay_ms"])
        if c["pin"]:
            print("PIN=%s: the daemons on CPU %d, the program (every variant) on CPU %d"
                  % ((c["pin"],) + PINS[c["pin"]]))
        for prog in self.progs:
            print("  %s: %s; `%s`; published: %s; archive %.1f MiB" % (
                prog.name, prog.about, prog.cmd, prog.published, prog.archive_bytes / MiB))
        for net in self.servers:
            print("\nnetwork: %g ms per request, %s" % (
                c["delay_ms"], "upstream capped at %g MiB/s for all responses together"
                % c["cap_mib"] if net == "cap" else "loopback (no cap)"))
            head = ["program"] + [title for _, title in self.variants]
            rows = [head]
            for prog in self.progs:
                loc = self.times.get((net, prog.name, "local"))
                base = statistics.median(loc) if loc else None
                row, up = [prog.name], [""]
                for v, _ in self.variants:
                    ts = self.times.get((net, prog.name, v))
                    if not ts:
                        row.append("n/a")
                        up.append("")
                        continue
                    med = statistics.median(ts)
                    cell = "%.2f (%.2f-%.2f)" % (med, min(ts), max(ts))
                    if base and v != "local":
                        cell += " %.2fx" % (med / base)
                    row.append(cell)
                    gets = statistics.median(g for g, _ in self.upstream[(net, prog.name, v)])
                    mb = statistics.median(b for _, b in self.upstream[(net, prog.name, v)])
                    up.append("%d GETs, %.1f MB" % (gets, mb / 1e6) if gets else "")
                rows += [row, up]
            print_table(rows)


def print_table(rows):
    """rows[0] the heads; the first column left-aligned, the others right-aligned."""
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, r in enumerate(rows):
        print("  ".join(x.ljust(w[j]) if j == 0 else x.rjust(w[j])
                        for j, x in enumerate(r)).rstrip())
        if i == 0:
            print("  ".join("-" * x for x in w))


# --------------------------------------------------------------------------- main
def install():
    want = [p for p, ok in (("awscli", os.path.exists(DIST + "/awscli")),
                            ("zstd", shutil.which("zstd")), ("strace", shutil.which("strace")))
            if not ok]
    if want:
        log("apt-get install %s" % " ".join(want))
        subprocess.run(["apt-get", "install", "-y"] + want, check=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def build():
    b = os.environ.get("SPOOLFS_BIN")
    if b:
        return b
    # Our own optimised build dir: others rebuild build/ concurrently.
    d = os.path.join(ROOT, "build-bench")
    log("building %s/spoolfs" % d)
    sh(["cmake", "-S", ROOT, "-B", d, "-DCMAKE_BUILD_TYPE=RelWithDebInfo"])
    sh(["cmake", "--build", d, "-j2", "--target", "spoolfs"])
    return os.path.join(d, "spoolfs")


def cleanup(work):
    """Unmounts whatever is still mounted under work (peers.Mount lists each in
    work/mounts before waiting for it), stops what it started, removes work."""
    still = False
    if os.path.exists(os.path.join(work, "mounts")):
        for line in open(os.path.join(work, "mounts")):
            pid, mnt = line.split(None, 1)
            mnt = mnt.strip()
            if benchlib.is_mounted(mnt):
                subprocess.call(["fusermount3", "-u", mnt], stderr=subprocess.DEVNULL)
                if benchlib.is_mounted(mnt):
                    subprocess.call(["fusermount3", "-uz", mnt], stderr=subprocess.DEVNULL)
            still = still or benchlib.is_mounted(mnt)
    if os.path.exists(os.path.join(work, "pids")):
        for line in open(os.path.join(work, "pids")):
            try:
                os.kill(int(line), signal.SIGTERM)
            except (ProcessLookupError, ValueError):
                pass
    if still:
        log("WARNING: a mount under %s is still there; leaving it" % work)
    elif os.environ.get("KEEP") == "1":
        log("kept %s" % work)
    else:
        shutil.rmtree(work, ignore_errors=True)


def main(argv):
    args = argv[1:]
    for a in args:
        if a not in ("--install", "--analyze", "--round-trip"):
            sys.stderr.write(__doc__)
            return 2
    if "--install" in args:
        install()
    try:
        config()  # a bad setting fails here, before anything is built or made
        if os.environ.get("PIN") and ("--analyze" in args or "--round-trip" in args):
            raise SystemExit("PIN is for the timed runs: --analyze runs unpinned, and "
                             "--round-trip measures every placement itself")
        if "--round-trip" in args:
            import real_programs_round_trip
            real_programs_round_trip.settings()
    except SystemExit as e:
        sys.stderr.write("real_programs.py: %s\n" % e)
        return 2
    for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
        os.environ.pop(k, None)
    spoolfs = build()
    work = tempfile.mkdtemp(prefix="spoolfs-real.", dir=os.environ.get("TMPDIR", "/var/tmp"))
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    log("work dir %s; spoolfs %s" % (work, spoolfs))
    try:
        if "--analyze" in args:
            import real_programs_analyze
            return real_programs_analyze.analyze(Bench(work, spoolfs))
        if "--round-trip" in args:
            import real_programs_round_trip
            return real_programs_round_trip.round_trip(Bench(work, spoolfs))
        return Bench(work, spoolfs).run()
    finally:
        cleanup(work)


if __name__ == "__main__":
    sys.exit(main(sys.argv))

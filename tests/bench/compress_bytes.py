#!/usr/bin/python3
"""Bytes of a compressed publish (issue 37's byte targets; doc/benchmarks.md "Publish:
compression").

  /usr/bin/python3 tests/bench/compress_bytes.py                  # dist-packages
  TREE=/some/tree LEVELS=1,3,6,9 /usr/bin/python3 tests/bench/compress_bytes.py
  MOUNT=0 /usr/bin/python3 tests/bench/compress_bytes.py          # publish part only

Env: TREE (default /usr/lib/python3/dist-packages), LEVELS (comma-separated zstd levels to
publish at besides --no-compress; default: the default level only), PACK_FRAMES (frame
sizes in KiB to weigh for packs, default 256,1024,4096), MOUNT (1: also read the tree
through a mount, default 1), JOBS (publish -j, default: the CPUs), SPOOLFS_BIN.

Printed:
- per level: publish wall and CPU seconds (user + system) and the store's bytes against
  the raw publish's (target: store bytes / raw bytes <= 0.3 at the default level);
- for packs: the bytes their frames would take at 256 KiB, 1 MiB and 4 MiB frames (the
  raw packs of the --no-compress publish, compressed here with python's zstandard at the
  default level), and the members' mean wait: the stored bytes of the frames before a
  member's last byte, which a reader of that member waits for;
- `tar -C TREE -cf - . | zstd -3 | wc -c`;
- with MOUNT=1, the bytes a full read of the tree through a mount of the compressed
  publish moved (the test upstream's byte counter) against that archive (target <= 1.25x).
  The mount reads version 3 only once the branches zsrc and zeng are merged.
A benchmark: nothing is asserted; it exits 1 only when something does not work.
"""

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "upstream"))
from client import Upstream  # noqa: E402
from benchlib import is_mounted  # noqa: E402  (run as a script: its folder is on sys.path)

SPOOLFS = os.environ.get("SPOOLFS_BIN", os.path.join(ROOT, "build", "spoolfs"))
TREE = os.environ.get("TREE", "/usr/lib/python3/dist-packages")
LEVELS = [x for x in os.environ.get("LEVELS", "").split(",") if x]
PACK_FRAMES = [int(x) << 10 for x in os.environ.get("PACK_FRAMES", "256,1024,4096").split(",")]
MOUNT = os.environ.get("MOUNT", "1") == "1"
JOBS = os.environ.get("JOBS")
DEFAULT_LEVEL = 6
MiB = 1 << 20


def du(path):
    """Bytes of the regular files under path."""
    n = 0
    for d, _, files in os.walk(path):
        for f in files:
            st = os.lstat(os.path.join(d, f))
            n += st.st_size if not os.path.islink(os.path.join(d, f)) else 0
    return n


def publish(out, *args):
    cmd = [SPOOLFS, "publish", TREE, out] + list(args) + (["-j", JOBS] if JOBS else [])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise RuntimeError("publish failed: " + r.stderr)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, du(os.path.join(out, "objects"))


def pack_frames(raw_out):
    """Stored bytes of the raw publish's packs in frames of each size in PACK_FRAMES, and the
    mean stored bytes a member's reader waits for (the frames up to its last byte)."""
    import zstandard
    with open(os.path.join(raw_out, "manifest.json")) as f:
        man = json.load(f)
    members = {}
    for e in man["entries"]:
        if "pack" in e:
            members.setdefault(e["pack"], []).append(e["offset"] + e["size"])
    cctx = zstandard.ZstdCompressor(level=DEFAULT_LEVEL, write_checksum=False)
    out = {}
    for frame in PACK_FRAMES:
        total = waited = n = 0
        for p in man["packs"]:
            with open(os.path.join(raw_out, p["url"]), "rb") as f:
                data = f.read()
            ends, at = [], 0
            for k in range(0, len(data), frame):
                at += len(cctx.compress(data[k:k + frame]))
                ends.append(at)
            total += at
            for end in members.get(p["sha256"], []):
                waited += ends[(end - 1) // frame]
                n += 1
        out[frame] = (total, waited / max(n, 1))
    return out


def tar_zstd():
    r = subprocess.run("tar -C '%s' -cf - . | zstd -3 -T1 | wc -c" % TREE, shell=True,
                       capture_output=True, text=True, check=True)
    return int(r.stdout.strip())


def read_through_mount(store, work):
    """Bytes the upstream sent for a full read of the tree through a fresh mount."""
    up = Upstream(store)
    mnt = os.path.join(work, "mnt")
    os.makedirs(mnt, exist_ok=True)
    log = open(os.path.join(work, "mount.log"), "wb")
    proc = subprocess.Popen([SPOOLFS, "-f", up.url("manifest.json"), mnt], stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not is_mounted(mnt):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("spoolfs did not mount (see %s/mount.log)" % work)
            time.sleep(0.01)
        up.reset()
        subprocess.run("tar -C '%s' -cf - . | wc -c >/dev/null" % mnt, shell=True, check=True)
        return up.stats()["total_bytes"]
    finally:
        subprocess.run(["fusermount3", "-u", mnt], check=False)
        proc.wait(30)
        log.close()
        up.stop()


def main():
    if not os.path.exists(SPOOLFS):
        sys.exit("no %s: build first" % SPOOLFS)
    work = tempfile.mkdtemp(prefix="spoolfs-compress-")
    try:
        raw_out = os.path.join(work, "raw")
        raw_wall, raw_cpu, raw_bytes = publish(raw_out, "--no-compress")
        print("tree %s: %.1f MiB in objects uncompressed, publish %.1f s (CPU %.1f s)" %
              (TREE, raw_bytes / MiB, raw_wall, raw_cpu))
        print("%-8s %10s %8s %12s %8s" % ("level", "publish s", "CPU s", "store MiB", "ratio"))
        levels = LEVELS + [str(DEFAULT_LEVEL)] * (str(DEFAULT_LEVEL) not in LEVELS)
        for level in levels:
            out = os.path.join(work, "z" + level)
            wall, cpu, n = publish(out, "--compress-level", level)
            print("%-8s %10.1f %8.1f %12.1f %8.3f" % (level, wall, cpu, n / MiB, n / raw_bytes))
            if level != str(DEFAULT_LEVEL):
                shutil.rmtree(out)
        frames = pack_frames(raw_out)
        raw_packs = sum(p["size"] for p in json.load(
            open(os.path.join(raw_out, "manifest.json")))["packs"])
        print("packs: %.1f MiB raw; at level %d, in frames of:" % (raw_packs / MiB,
                                                                  DEFAULT_LEVEL))
        for frame, (total, wait) in sorted(frames.items()):
            print("  %5d KiB: %.2f MiB stored (%.3f), a member waits for %.0f KiB on average"
                  % (frame >> 10, total / MiB, total / raw_packs, wait / 1024))
        archive = tar_zstd()
        print("tar | zstd -3: %.1f MiB" % (archive / MiB))
        if MOUNT:
            moved = read_through_mount(os.path.join(work, "z%d" % DEFAULT_LEVEL), work)
            print("full read through a mount moved %.1f MiB: %.2fx tar | zstd -3 (target "
                  "<= 1.25)" % (moved / MiB, moved / archive))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

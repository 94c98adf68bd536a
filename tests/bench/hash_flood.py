#!/usr/bin/python3
"""Hash flooding benchmark (see hash_flood.sh): mount time of a manifest whose paths were
chosen to pile up in the path table's probe chains under the old unkeyed hash (FNV-1a),
against a manifest of as many random paths of the same length and shape.

  hash_flood.py SPOOLFS_BIN WORKDIR N RUNS

Prints one line per manifest (median and min-max of RUNS mounts) and the ratio. A benchmark:
times are printed, never asserted. Exits 1 only when a mount does not work.

How the crafted paths are found. The table puts a path in slot FNV-1a(path) mod 2^k, k
growing with the table, and probes linearly, so paths whose slots fall in one short window
make one chain: each insert then walks all the paths before it. FNV-1a's low b bits depend
only on the low b bits of its state, so work modulo 2^B (B = 21, tables up to 2 million
slots), and ask for bits 8..B-1 of the hash to be FIXED (the low 8 bits free: a window of
256 slots at every table size). A step (x ^ c) * P is invertible mod 2^B, so for each of
the 256 targets and each two-character suffix the state the prefix must leave is computed
backwards; a random prefix's state is then looked up in that table (meet in the middle),
about one hit per two prefixes.
"""

import json
import os
import random
import signal
import statistics
import string
import subprocess
import sys
import time

from benchlib import is_mounted  # run as a script: its folder is on sys.path

FNV_OFFSET = 1469598103934665603
FNV_PRIME = 1099511628211
B = 21
MASK = (1 << B) - 1
FIXED = 0x1A5B  # bits 8..20 of every crafted path's old hash
ALPHABET = string.ascii_letters + string.digits + "-_"  # 64 characters
PREFIX_LEN = 10


def fnv_low(data, h=FNV_OFFSET):
    for c in data:
        h = ((h ^ c) * FNV_PRIME) & MASK
    return h


def crafted_paths(n, seed=1):
    inv = pow(FNV_PRIME, -1, 1 << B)
    need = {}  # state a prefix must leave -> suffix
    for low in range(256):
        target = (FIXED << 8 | low) & MASK
        for c1 in ALPHABET.encode():
            # Before c2: y with (y ^ c2) * P == target, i.e. y = (target * inv) ^ c2
            for c2 in ALPHABET.encode():
                y = ((target * inv) & MASK) ^ c2
                x = ((y * inv) & MASK) ^ c1
                need.setdefault(x, bytes((c1, c2)))
    rng = random.Random(seed)
    out, seen = [], set()
    while len(out) < n:
        prefix = "".join(rng.choice(ALPHABET) for _ in range(PREFIX_LEN)).encode()
        suffix = need.get(fnv_low(b"f" + prefix))
        if suffix is None:
            continue
        path = (b"f" + prefix + suffix).decode()
        if path not in seen:
            seen.add(path)
            out.append(path)
    return out


def random_paths(n, seed=2):
    """As many paths, of the same length, in the order drawn (as the crafted ones are: sorted
    names would insert into sqlite's name index faster)."""
    rng = random.Random(seed)
    out, seen = [], set()
    while len(out) < n:
        path = "f" + "".join(rng.choice(ALPHABET) for _ in range(PREFIX_LEN + 2))
        if path not in seen:
            seen.add(path)
            out.append(path)
    return out


def write_manifest(path, names):
    files = [{"path": p, "size": 1, "url": "objects/x"} for p in names]
    with open(path, "w") as f:
        json.dump({"version": 1, "files": files}, f)


def mount_seconds(spoolfs, manifest, mnt, log_path):
    """Seconds from exec to the mount being up; unmounts and waits for a clean exit."""
    os.makedirs(mnt, exist_ok=True)
    with open(log_path, "wb") as log:
        t0 = time.monotonic()
        proc = subprocess.Popen([spoolfs, "-f", manifest, mnt], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            while not is_mounted(mnt):
                if proc.poll() is not None:
                    raise RuntimeError("spoolfs exited with %d before mounting (see %s)"
                                       % (proc.returncode, log_path))
                time.sleep(0.005)
            elapsed = time.monotonic() - t0
            subprocess.run(["fusermount3", "-u", mnt], check=True)
            rc = proc.wait(60)
            if rc != 0:
                raise RuntimeError("spoolfs exited with %d (see %s)" % (rc, log_path))
            return elapsed
        finally:
            if proc.poll() is None:
                subprocess.run(["fusermount3", "-u", "-z", mnt], stderr=subprocess.DEVNULL)
                proc.send_signal(signal.SIGTERM)
                proc.wait(10)


def main(argv):
    spoolfs, work, n, runs = argv[1], argv[2], int(argv[3]), int(argv[4])
    os.makedirs(work, exist_ok=True)
    t = time.monotonic()
    crafted = crafted_paths(n)
    print("[flood] %d crafted paths in %.1f s (old hash bits 8-20 all 0x%x)"
          % (n, time.monotonic() - t, FIXED), file=sys.stderr)
    manifests = {"random": os.path.join(work, "random.json"),
                 "crafted": os.path.join(work, "crafted.json")}
    write_manifest(manifests["random"], random_paths(n))
    write_manifest(manifests["crafted"], crafted)
    times = {}
    mnt = os.path.join(work, "mnt")
    for r in range(runs):
        for name, manifest in manifests.items():
            times.setdefault(name, []).append(
                mount_seconds(spoolfs, manifest, mnt, os.path.join(work, name + ".log")))
            print("[flood] run %d %s: %.2f s" % (r + 1, name, times[name][-1]), file=sys.stderr)
    print("%-8s %8s  %s (%d paths, %d runs, %s)" % ("manifest", "median", "min-max", n, runs,
                                                  spoolfs))
    for name in manifests:
        v = times[name]
        print("%-8s %7.2fs  %.2f-%.2f" % (name, statistics.median(v), min(v), max(v)))
    print("ratio crafted/random: %.2fx"
          % (statistics.median(times["crafted"]) / statistics.median(times["random"])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

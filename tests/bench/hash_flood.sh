#!/usr/bin/env bash
# Hash flooding benchmark: does a manifest crafted against the path table mount as fast as
# a random one? See hash_flood.py for how its paths are chosen (they collide under the old
# unkeyed FNV-1a; with the keyed hash, util/hash.h, they are as good as random).
#
#   bash tests/bench/hash_flood.sh                 # 131072 paths, 3 runs
#   N=20000 RUNS=1 bash tests/bench/hash_flood.sh  # quick form
#
# Env: N (paths, default 131072), RUNS (default 3), SPOOLFS_BIN (default build/spoolfs,
# built if missing), KEEP=1 (keep the work directory).
# A benchmark, not a test: it prints the ratio and never asserts it. Exit status 1 only
# when a mount does not work. Needs root (or fuse access), fusermount3, python3.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PYTHON=/usr/bin/python3
[ -x "$PYTHON" ] || PYTHON=$(command -v python3)
N=${N:-131072}
RUNS=${RUNS:-3}
BIN=${SPOOLFS_BIN:-$ROOT/build/spoolfs}
if [ ! -x "$BIN" ]; then
	cmake -S "$ROOT" -B "$ROOT/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build "$ROOT/build" -j2 >/dev/null
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/spoolfs-flood.XXXXXX")
cleanup() {
	fusermount3 -u -z "$WORK/mnt" 2>/dev/null || true
	[ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT
"$PYTHON" "$ROOT/tests/bench/hash_flood.py" "$BIN" "$WORK" "$N" "$RUNS"

#!/usr/bin/env bash
# `spoolfs publish` against `openssl dgst -sha256` over the same files one after another.
#
#   bash tests/bench/publish.sh                       # 1 GiB file + 10,000 small files, 3 runs
#   SIZE=64M N=500 RUNS=1 bash tests/bench/publish.sh  # quick form (keeps the script working)
#
# Env: SIZE (the large file, default 1G), N (small files, default 10000, 100 per directory,
# 100 bytes to 16 KiB each), RUNS (default 3; medians are printed), JOBS (spoolfs publish -j,
# default: its own default, the CPUs), SPOOLFS_BIN (default build/spoolfs, an optimised
# build), WORKDIR (default /var/tmp: the tree and the output need about 2 x SIZE).
#
# Measured in the same run, page cache warm for both (every file is read once first):
#   openssl  one `openssl dgst -sha256` process over every file in turn (xargs), as the
#            baseline of hashing the bytes once with the CPU's SHA instructions
#   publish  `spoolfs publish SRC OUT` into an empty OUT: hashes, copies into objects,
#            fsyncs them, writes the manifest
#   again    the same publish into the same OUT (nothing new to write)
# and prints publish/openssl as a ratio. A benchmark, not a test: the ratio is printed,
# never asserted. It exits non-zero only when something does not work (a publish fails).
set -euo pipefail
export LC_ALL=C

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PYTHON=/usr/bin/python3
[ -x "$PYTHON" ] || PYTHON=$(command -v python3)
SIZE=${SIZE:-1G}
N=${N:-10000}
RUNS=${RUNS:-3}
JOBS=${JOBS:-}
WORK=""

log() { printf '[bench] %s\n' "$*" >&2; }
die() {
	log "FATAL: $*"
	exit 1
}
cleanup() { [ -z "$WORK" ] || rm -rf "$WORK"; }
trap cleanup EXIT

now_us() { local t=$EPOCHREALTIME; echo "${t/./}"; } # µs as an integer: no float math

median() { # numbers as arguments
	printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

secs() { awk -v us="$1" 'BEGIN { printf "%.2f", us / 1e6 }'; }

SPOOLFS=${SPOOLFS_BIN:-$ROOT/build/spoolfs}
[ -x "$SPOOLFS" ] || die "no spoolfs binary at $SPOOLFS: build it (doc/testing.md) or set SPOOLFS_BIN"
command -v openssl >/dev/null || die "openssl is needed for the baseline"

WORK=$(mktemp -d "${WORKDIR:-/var/tmp}/spoolfs-bench-publish.XXXXXX")
log "generating $SIZE + $N small files in $WORK/src"
mkdir "$WORK/src"
head -c "$SIZE" /dev/urandom >"$WORK/src/large.bin"
"$PYTHON" - "$WORK/src" "$N" <<'EOF'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(1)
block = os.urandom(1 << 20)
for i in range(n):
    d = os.path.join(root, "small", "d%03d" % (i // 100))
    if i % 100 == 0:
        os.makedirs(d, exist_ok=True)
    size = rng.randint(100, 16 * 1024)
    start = rng.randint(0, len(block) - size)
    with open(os.path.join(d, "f%05d" % i), "wb") as f:
        f.write(block[start:start + size])
EOF
find "$WORK/src" -type f -print0 | sort -z >"$WORK/files"
BYTES=$(du -sb "$WORK/src" | cut -f1)
log "warming the page cache"
xargs -0 cat <"$WORK/files" >/dev/null
sync

ssl=() pub=() again=()
for run in $(seq "$RUNS"); do
	t0=$(now_us)
	xargs -0 openssl dgst -sha256 <"$WORK/files" >/dev/null
	t1=$(now_us)
	ssl+=($((t1 - t0)))

	rm -rf "$WORK/out"
	sync # the last run's objects are not this run's writeback
	t0=$(now_us)
	"$SPOOLFS" publish "$WORK/src" "$WORK/out" ${JOBS:+-j "$JOBS"} >"$WORK/log" 2>&1 ||
		die "publish failed: $(cat "$WORK/log")"
	t1=$(now_us)
	pub+=($((t1 - t0)))

	t0=$(now_us)
	"$SPOOLFS" publish "$WORK/src" "$WORK/out" ${JOBS:+-j "$JOBS"} >"$WORK/log" 2>&1 ||
		die "re-publish failed: $(cat "$WORK/log")"
	t1=$(now_us)
	again+=($((t1 - t0)))
	log "run $run: openssl $(secs "${ssl[-1]}") s, publish $(secs "${pub[-1]}") s," \
		"again $(secs "${again[-1]}") s"
done

s=$(median "${ssl[@]}") p=$(median "${pub[@]}") a=$(median "${again[@]}")
printf '\npublish of %s (%s bytes: %s + %s small files), %s CPUs, median of %s runs\n' \
	"$WORK/src" "$BYTES" "$SIZE" "$N" "$(nproc)" "$RUNS"
printf '  %-44s %8s s\n' "openssl dgst -sha256, one file after another" "$(secs "$s")"
printf '  %-44s %8s s   ratio %s\n' "spoolfs publish into an empty OUT" "$(secs "$p")" \
	"$(awk -v p="$p" -v s="$s" 'BEGIN { printf "%.2f", p / s }')"
printf '  %-44s %8s s   ratio %s\n' "spoolfs publish again (nothing new)" "$(secs "$a")" \
	"$(awk -v p="$a" -v s="$s" 'BEGIN { printf "%.2f", p / s }')"

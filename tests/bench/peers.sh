#!/usr/bin/env bash
# spoolfs side by side with its peers (issue 5): one command, one table.
#
#   bash tests/bench/peers.sh             # full sizes, RUNS=3 (tens of minutes)
#   bash tests/bench/peers.sh --install   # first apt-get install the peers that are missing
#   SCALE=small bash tests/bench/peers.sh # CI smoke run: tiny objects, 1 run, < 2 minutes
#
# Sets up tests/upstream/upstream.py (--index: HTML directory listings for crawling peers)
# on 127.0.0.1 over a generated store (fixed SEED), plus tests/upstream/s3_upstream.py
# over the same store for s3fs; mounts spoolfs and each installed peer (rclone mount of an
# http remote, httpdirfs, s3fs) with their documented fast read-only settings (see the
# comments in tests/bench/peers.py), runs workloads W1-W6 of issue 5 on a fresh mount
# each, and prints one table: median, min-max and ratio to the baseline measured in the
# same run. A peer that cannot run a workload shows n/a and why.
#
# Env: SCALE (full|small), RUNS, PEERS (default spoolfs,rclone,httpdirfs,s3fs),
# WORKLOADS (default W1,W2,W2cap,W4,W5,W7; W3 runs with W2, W6 with each),
# OP_TIMEOUT (s per measured operation), SEED, SPOOLFS_BIN (default: built in build-bench/),
# W1_SIZE, W2_SIZE, CAP_SIZE, W5_FILES, W5_DIRS, W7_FILES, KEEP=1 (keep the work dir),
# SPOOLFS_BASE_BIN (another spoolfs build, run as the system "spoolfs-base" when PEERS
# names it: a before-and-after in the same run).
# W7 (issue 22): a cold tree of 1,000 files of 1-3 KiB in 10 directories, every request
# delayed 10 ms, read in sorted order; baselines: sequential GETs on 1 connection, 32
# parallel connections, over HTTP and over the S3 API; spoolfs cold (v1 manifest) and its
# second run (--prefetch-list of the first run's --record-reads, and the record kept in an
# emptied --keep-cache dir), and cold from the S3 bucket; rclone (HTTP listings), s3fs.
# A benchmark, not a test: timings are never asserted. Exit status 1 only when something
# does not work (a mount fails, wrong or short bytes, a daemon exits non-zero).
# Needs root (or fuse access), fusermount3, curl, python3.
set -euo pipefail
export LC_ALL=C
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PYTHON=/usr/bin/python3
[ -x "$PYTHON" ] || PYTHON=$(command -v python3)
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy

log() { printf '[peers] %s\n' "$*" >&2; }
die() {
	log "FATAL: $*"
	exit 1
}

INSTALL=0
for a in "$@"; do
	case $a in
	--install) INSTALL=1 ;;
	-h | --help)
		sed -n '2,29p' "$0"
		exit 0
		;;
	*) die "unknown argument $a (try --help)" ;;
	esac
done

if [ "$INSTALL" = 1 ]; then
	want=()
	for p in rclone s3fs httpdirfs; do
		command -v "$p" >/dev/null && continue
		# Only ask apt for a package it knows (a name with a candidate version). The
		# output is captured first: with pipefail, grep -q quitting early made apt-cache's
		# SIGPIPE fail the test, and peers were skipped as unknown at random.
		policy=$(apt-cache policy "$p" 2>/dev/null || true)
		if grep -q 'Candidate: [0-9]' <<<"$policy"; then
			want+=("$p")
		else
			log "no Debian package $p here; it will show as n/a"
		fi
	done
	if [ "${#want[@]}" -gt 0 ]; then
		log "installing ${want[*]}"
		DEBIAN_FRONTEND=noninteractive apt-get install -y "${want[@]}" >&2 ||
			die "apt-get install ${want[*]} failed"
	fi
fi

command -v fusermount3 >/dev/null || die "fusermount3 not found"
command -v curl >/dev/null || die "curl not found"

if [ -n "${SPOOLFS_BIN:-}" ]; then
	SPOOLFS=$SPOOLFS_BIN
else
	# Our own optimised build dir: others rebuild build/ concurrently, and -O0 skews timings.
	SPOOLFS="$ROOT/build-bench/spoolfs"
	log "building $SPOOLFS"
	cmake -S "$ROOT" -B "$ROOT/build-bench" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build "$ROOT/build-bench" -j"$(nproc)" --target spoolfs >/dev/null
fi
[ -x "$SPOOLFS" ] || die "no spoolfs binary at $SPOOLFS"
# W1's readers are threads of a small C program (Python's threads skewed first bytes),
# built next to the spoolfs binary when that is a build tree's.
BENCH_READERS="$(dirname "$SPOOLFS")/tests/bench_readers"
if [ ! -x "$BENCH_READERS" ]; then
	cmake -S "$ROOT" -B "$ROOT/build-bench" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
		cmake --build "$ROOT/build-bench" -j"$(nproc)" --target bench_readers >/dev/null ||
		die "cannot build bench_readers"
	BENCH_READERS="$ROOT/build-bench/tests/bench_readers"
fi
export BENCH_READERS

WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/spoolfs-peers.XXXXXX")

is_mounted() { "$PYTHON" "$ROOT/tests/bench/benchlib.py" mounted "$1"; }

# Every exit path: unmount whatever peers.py mounted (it lists "pid mountpoint" in
# WORK/mounts before waiting for the mount), stop the daemons and upstreams, remove WORK.
cleanup() {
	local rc=$? pid mnt
	trap - EXIT INT TERM
	set +e
	if [ -n "${PY_PID:-}" ] && kill -0 "$PY_PID" 2>/dev/null; then
		kill -TERM "$PY_PID" 2>/dev/null
		sleep 1
	fi
	if [ -f "$WORK/mounts" ]; then
		while read -r pid mnt; do
			if is_mounted "$mnt"; then
				fusermount3 -u "$mnt" 2>/dev/null || fusermount3 -uz "$mnt" 2>/dev/null ||
					umount -l "$mnt" 2>/dev/null
			fi
			if kill -0 "$pid" 2>/dev/null; then
				sleep 0.5
				kill -TERM "$pid" 2>/dev/null
				sleep 0.5
				kill -KILL "$pid" 2>/dev/null
			fi
		done <"$WORK/mounts"
	fi
	if [ -f "$WORK/pids" ]; then
		while read -r pid; do kill -TERM "$pid" 2>/dev/null; done <"$WORK/pids"
	fi
	wait 2>/dev/null
	local still=0
	if [ -f "$WORK/mounts" ]; then
		while read -r pid mnt; do is_mounted "$mnt" && still=1; done <"$WORK/mounts"
	fi
	if [ "$still" = 1 ]; then
		log "WARNING: a mount under $WORK is still there; leaving $WORK"
	elif [ "${KEEP:-0}" = 1 ]; then
		log "kept $WORK"
	else
		rm -rf "$WORK"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log "work dir $WORK; spoolfs $SPOOLFS ($("$SPOOLFS" --version 2>&1 | head -1))"
"$PYTHON" "$ROOT/tests/bench/peers.py" run "$WORK" "$SPOOLFS" &
PY_PID=$!
wait "$PY_PID"

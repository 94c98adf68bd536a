#!/usr/bin/env bash
# Cold/warm sequential-read benchmark for spoolfs against the project's test upstream.
#
#   bash tests/bench/cold_read.sh                   # 1 GiB object, 3 runs
#   SIZE=64M RUNS=1 bash tests/bench/cold_read.sh   # quick form (CI keeps the script working)
#
# Env: SIZE (mkstore size, default 1G), RUNS (default 3), SPOOLFS_BIN (default build/spoolfs,
# built if missing), RSS_LIMIT_MIB (default 64), KEEP_LOGS=1 (copy daemon logs to ./bench-logs).
#
# Measures, RUNS times each (median and min-max are printed):
#   cold read  `dd bs=1M` through a fresh mount with a fresh cache dir, vs `curl` of the URL
#   warm read  the same file again on that mount, vs `dd` of the local store file
# and the daemon's peak RSS (max of VmHWM at the end and VmRSS sampled every 50 ms).
#
# A benchmark, not a test: slow timings or RSS over the limit are reported, never fatal.
# It exits non-zero only when something does not work (mount fails, a short read, the
# daemon exits non-zero after unmount, or logs warnings/errors), after printing the table.
# Needs root (or fuse access), fusermount3, curl, /usr/bin/python3.
set -euo pipefail
export LC_ALL=C # decimal point in $EPOCHREALTIME and dd's output

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BENCH="$ROOT/tests/bench"
PYTHON=/usr/bin/python3
[ -x "$PYTHON" ] || PYTHON=$(command -v python3)
SIZE=${SIZE:-1G}
RUNS=${RUNS:-3}
RSS_LIMIT_MIB=${RSS_LIMIT_MIB:-64}
OBJ=obj
# No proxy may sit between us and 127.0.0.1 (curl and libcurl in the daemon honour these).
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy

# State the cleanup trap needs; empty means "not started".
WORK="" UP_PID="" DAEMON_PID="" SAMPLER_PID="" MNT=""
PROBLEMS=() # functional problems found; reported at the end, make the exit status 1

log() { printf '[bench] %s\n' "$*" >&2; }
die() {
	log "FATAL: $*"
	exit 1
}

is_mounted() { "$PYTHON" "$BENCH/benchlib.py" mounted "$1"; }

alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

wait_gone() { # pid timeout_s: poll, because `wait` cannot time out
	local pid=$1 deadline=$((SECONDS + $2))
	while alive "$pid"; do
		[ "$SECONDS" -lt "$deadline" ] || return 1
		sleep 0.05
	done
}

stop_sampler() {
	if alive "$SAMPLER_PID"; then
		kill -TERM "$SAMPLER_PID" 2>/dev/null || true
		wait "$SAMPLER_PID" 2>/dev/null || true
	fi
	SAMPLER_PID=""
}

# Runs on every exit path (error, Ctrl-C, TERM): nothing may stay mounted or running,
# and the temp dir (GiBs) must go. Escalates: unmount, lazy unmount, TERM, KILL.
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	set +e
	stop_sampler
	if [ -n "$MNT" ] && is_mounted "$MNT"; then
		fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -uz "$MNT" 2>/dev/null ||
			umount -l "$MNT" 2>/dev/null
	fi
	if alive "$DAEMON_PID"; then
		wait_gone "$DAEMON_PID" 5 || kill -TERM "$DAEMON_PID" 2>/dev/null
		wait_gone "$DAEMON_PID" 3 || kill -KILL "$DAEMON_PID" 2>/dev/null
	fi
	if alive "$UP_PID"; then
		kill -TERM "$UP_PID" 2>/dev/null
		wait_gone "$UP_PID" 5 || kill -KILL "$UP_PID" 2>/dev/null
	fi
	wait 2>/dev/null
	if [ -n "$WORK" ] && [ -d "$WORK" ]; then
		# Never rm -rf through a mount that is somehow still there.
		if [ -n "$MNT" ] && is_mounted "$MNT"; then
			log "WARNING: $MNT still mounted; leaving $WORK"
		else
			rm -rf "$WORK"
		fi
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

now_us() { local t=$EPOCHREALTIME; echo "${t/./}"; } # µs as an integer: no float math

record() { echo "$1 $2" >>"$WORK/results"; }

# dd the file and check the byte count: a short read would otherwise look like a fast one.
read_file() { # path
	local out bytes
	if ! out=$(dd if="$1" of=/dev/null bs=1M 2>&1); then
		die "dd of $1 failed: $out"
	fi
	bytes=$(awk '/bytes/ { print $1 }' <<<"$out" | tail -1)
	[ "$bytes" = "$SIZE_BYTES" ] || die "dd of $1 read ${bytes:-?} bytes, want $SIZE_BYTES"
}

timed() { # measure cmd...: run cmd, record its wall time in µs
	local m=$1 t0 t1
	shift
	t0=$(now_us)
	"$@"
	t1=$(now_us)
	record "time_us.$m" $((t1 - t0))
}

build_spoolfs() {
	if [ -n "${SPOOLFS_BIN:-}" ]; then
		SPOOLFS=$SPOOLFS_BIN
		[ -x "$SPOOLFS" ] || die "SPOOLFS_BIN=$SPOOLFS is not executable"
		return
	fi
	SPOOLFS="$ROOT/build/spoolfs"
	if [ ! -x "$SPOOLFS" ]; then
		log "building $SPOOLFS"
		# Optimised like tests/run-all.sh's plain build: a -O0 binary would skew timings.
		cmake -S "$ROOT" -B "$ROOT/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
		cmake --build "$ROOT/build" -j"$(nproc)" >/dev/null
	fi
	[ -x "$SPOOLFS" ] || die "no spoolfs binary at $SPOOLFS"
}

make_store() {
	log "generating a $SIZE object (with sha256) in $WORK/store"
	"$PYTHON" "$ROOT/tests/upstream/mkstore.py" --root "$WORK/store" "$OBJ:$SIZE"
	SIZE_BYTES=$(stat -c %s "$WORK/store/$OBJ")
}

start_upstream() {
	"$PYTHON" "$ROOT/tests/upstream/upstream.py" --root "$WORK/store" --host 127.0.0.1 \
		--port 0 >"$WORK/upstream.out" 2>"$WORK/upstream.log" </dev/null &
	UP_PID=$!
	local deadline=$((SECONDS + 10)) line=""
	until line=$(grep -m1 '^PORT ' "$WORK/upstream.out" 2>/dev/null); do
		alive "$UP_PID" || die "upstream exited: $(cat "$WORK/upstream.log")"
		[ "$SECONDS" -lt "$deadline" ] || die "upstream printed no PORT line in 10 s"
		sleep 0.05
	done
	BASE="http://127.0.0.1:${line#PORT }"
	log "upstream at $BASE (pid $UP_PID)"
}

curl_get() {
	local code
	code=$(curl -s --noproxy '*' -o /dev/null -w '%{http_code} %{size_download}' "$BASE/$OBJ")
	[ "$code" = "200 $SIZE_BYTES" ] || die "curl $BASE/$OBJ: got '$code', want '200 $SIZE_BYTES'"
}

mount_spoolfs() { # run: a fresh mount and a fresh cache dir, so the next read is cold
	local cache="$WORK/cache.$1" deadline
	DAEMON_LOG="$WORK/daemon.$1.log"
	"$SPOOLFS" -f "$BASE/manifest.json" "$MNT" --cache-dir "$cache" \
		</dev/null >"$DAEMON_LOG" 2>&1 &
	DAEMON_PID=$!
	deadline=$((SECONDS + 20))
	until is_mounted "$MNT"; do
		alive "$DAEMON_PID" || die "spoolfs exited before mounting: $(cat "$DAEMON_LOG")"
		[ "$SECONDS" -lt "$deadline" ] || die "spoolfs did not mount in 20 s: $(cat "$DAEMON_LOG")"
		sleep 0.01
	done
}

unmount_spoolfs() { # run
	local rc=0
	fusermount3 -u "$MNT" || die "fusermount3 -u $MNT failed"
	wait_gone "$DAEMON_PID" 30 || die "spoolfs still running 30 s after unmount"
	wait "$DAEMON_PID" || rc=$?
	[ "$rc" -eq 0 ] || PROBLEMS+=("run $1: spoolfs exited with status $rc after unmount")
	DAEMON_PID=""
	# A cache dir we passed is ours to remove (spoolfs only removes its default one).
	rm -rf "$WORK/cache.$1"
	if grep -qiE 'warn|error|fail|sanitizer' "$DAEMON_LOG"; then
		PROBLEMS+=("run $1: daemon log has $(grep -ciE 'warn|error|fail|sanitizer' \
			"$DAEMON_LOG") warning/error line(s), e.g.: $(grep -iE 'warn|error|fail|sanitizer' \
			"$DAEMON_LOG" | head -3 | tr '\n' '|')")
	fi
	if [ "${KEEP_LOGS:-0}" = 1 ]; then
		mkdir -p bench-logs && cp "$DAEMON_LOG" bench-logs/
	fi
}

upstream_bytes_since_reset() { # measure: what the upstream served since the last reset
	record "up_bytes.$1" "$("$PYTHON" "$BENCH/benchlib.py" upbytes "$BASE" "$OBJ")"
	"$PYTHON" "$BENCH/benchlib.py" upreset "$BASE"
}

spoolfs_run() { # run
	local run=$1 hwm max_rss _
	mount_spoolfs "$run"
	"$PYTHON" "$BENCH/benchlib.py" sample "$DAEMON_PID" "$WORK/rss.$run" 0.05 &
	SAMPLER_PID=$!
	"$PYTHON" "$BENCH/benchlib.py" upreset "$BASE"

	timed spool_cold read_file "$MNT/$OBJ"
	upstream_bytes_since_reset spool_cold
	timed spool_warm read_file "$MNT/$OBJ"
	upstream_bytes_since_reset spool_warm

	# VmHWM catches a peak between two samples; read it while the daemon is still up.
	hwm=$("$PYTHON" "$BENCH/benchlib.py" status "$DAEMON_PID" VmHWM)
	stop_sampler
	read -r max_rss _ _ <"$WORK/rss.$run"
	record sampled_kb "$max_rss"
	record hwm_kb "$hwm"
	record peak_kb $((hwm > max_rss ? hwm : max_rss))
	unmount_spoolfs "$run"
}

main() {
	[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer"
	command -v fusermount3 >/dev/null || die "fusermount3 not found"
	command -v curl >/dev/null || die "curl not found"
	build_spoolfs
	WORK=$(mktemp -d "${TMPDIR:-/tmp}/spoolfs-bench.XXXXXX")
	MNT="$WORK/mnt"
	mkdir "$MNT"
	: >"$WORK/results"
	make_store
	start_upstream

	local i
	for ((i = 1; i <= RUNS; i++)); do
		log "run $i/$RUNS: curl baseline"
		timed curl curl_get
	done
	"$PYTHON" "$BENCH/benchlib.py" upreset "$BASE"
	for ((i = 1; i <= RUNS; i++)); do
		log "run $i/$RUNS: spoolfs cold + warm read (fresh mount)"
		spoolfs_run "$i"
	done
	for ((i = 1; i <= RUNS; i++)); do
		log "run $i/$RUNS: local file baseline"
		timed local read_file "$WORK/store/$OBJ"
	done

	echo "spoolfs: $SPOOLFS"
	"$PYTHON" "$BENCH/benchlib.py" report "$WORK/results" "$SIZE_BYTES" "$RSS_LIMIT_MIB"
	if [ "${#PROBLEMS[@]}" -gt 0 ]; then
		printf 'PROBLEM: %s\n' "${PROBLEMS[@]}"
		return 1
	fi
}

main "$@"

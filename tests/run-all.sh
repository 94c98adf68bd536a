#!/usr/bin/env bash
# The whole test suite: unit tests (cmocka) and real-mount integration tests (pytest,
# against the project's test upstream on 127.0.0.1), built three ways: plain, with
# ASan+UBSan, and with TSan. Run as root on Debian 12 (FUSE mounts need it).
#
#   bash tests/run-all.sh            # everything
#   VARIANTS=plain bash tests/run-all.sh   # one build only
#   PYTEST_ADDOPTS=--durations=40 bash tests/run-all.sh   # pytest options for every pytest run
#
# Budget: under 20 minutes on 2 cores. The plain build runs every test; the sanitizer
# builds run the unit tests and the integration tests marked neither slow (pytest.ini: long
# scenarios, such as stall and connect timeouts or thousands of objects, whose code the
# faster tests also run) nor nosan (command-line parsing, docs, packaging, YAML, scripts
# around spoolfs: nothing a sanitizer would see that other tests do not show it), with
# SPOOLFS_TEST_SLOWDOWN. Each step prints its elapsed seconds; the last line is
# "N passed, N failed, N skipped".
set -uo pipefail
# Ctrl-C stops the whole run, not only the step it came in (bash runs this once the
# step's processes have ended, and they unmount what they mounted).
trap 'echo "run-all: interrupted" >&2; exit 130' INT TERM
cd "$(dirname "$0")/.." || exit 1
bash tests/deps.sh || exit 1

variants=${VARIANTS:-"plain asan tsan"}
python=/usr/bin/python3
total_passed=0
total_failed=0
total_skipped=0
failed_steps=()
run_start=$SECONDS
step_start=$SECONDS

step() { # name ("" for none): ends the step before, printing its seconds; starts this one
	if [ -n "${step_name:-}" ]; then
		echo "=== $step_name: $((SECONDS - step_start)) s"
	fi
	step_name=$1
	step_start=$SECONDS
	if [ -n "$step_name" ]; then
		echo "=== $step_name"
	fi
}

build() { # name sanitize
	local dir=build
	[ "$1" = plain ] || dir=build-$1
	cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPOOLFS_SANITIZE="$2" >/dev/null &&
		cmake --build "$dir" -j"$(nproc)" >/dev/null || return 1
	echo "$dir"
}

count() { # log -> adds pytest's "N passed" / "N failed" / "N skipped" to the totals
	local p f k summary
	# Only pytest's summary line: a test's own output may say "2 failed" too.
	summary=$(grep -E '^=*[ ]*[0-9]+ (passed|failed|skipped|errors?|deselected)' "$1" | tail -1)
	p=$(grep -Eo '[0-9]+ passed' <<<"$summary" | grep -Eo '[0-9]+' || true)
	f=$(grep -Eo '[0-9]+ (failed|errors?)' <<<"$summary" | awk '{s += $1} END {print s + 0}')
	k=$(grep -Eo '[0-9]+ skipped' <<<"$summary" | grep -Eo '[0-9]+' || true)
	total_passed=$((total_passed + ${p:-0}))
	total_failed=$((total_failed + ${f:-0}))
	total_skipped=$((total_skipped + ${k:-0}))
}

for v in $variants; do
	case $v in
	plain) san="" slow=1 select=() ;;
	asan) san="address,undefined" slow=2 select=(-m "not slow and not nosan") ;;
	tsan) san="thread" slow=3 select=(-m "not slow and not nosan") ;;
	*) echo "unknown variant $v" >&2; exit 2 ;;
	esac
	step "$v: build"
	dir=$(build "$v" "$san") || { failed_steps+=("$v build"); total_failed=$((total_failed + 1)); continue; }
	step "$v: unit tests"
	log=$(mktemp)
	export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
	export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
	export LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp
	# The suites share nothing (each makes its own temporary directories and ports): one
	# per core at once; the sanitizer builds' suites wait on their own threads much of the time.
	if (cd "$dir" && ctest --output-on-failure -j"$(nproc)" 2>&1) | tee "$log"; then :; else failed_steps+=("$v unit"); fi
	p=$(grep -Eo '[0-9]+ tests passed|tests passed, [0-9]+ tests failed out of [0-9]+' "$log" | tail -1)
	n=$(grep -Eo 'out of [0-9]+' "$log" | grep -Eo '[0-9]+' | tail -1)
	nf=$(grep -Eo '[0-9]+ tests failed' "$log" | grep -Eo '[0-9]+' | tail -1)
	# ctest lists the tests it skipped (exit code SKIP_RETURN_CODE) as "N - name (Skipped)".
	ns=$(grep -cE '^[[:space:]]*[0-9]+ - .*\(Skipped\)$' "$log" || true)
	total_passed=$((total_passed + ${n:-0} - ${nf:-0} - ${ns:-0}))
	total_failed=$((total_failed + ${nf:-0}))
	total_skipped=$((total_skipped + ${ns:-0}))
	step "$v: integration tests"
	suites="tests/integration"
	[ "$v" = plain ] && suites="tests/upstream tests/s3 tests/integration"
	# The credentials' long read (test_s3_creds.py) is 256 MiB plain, 64 MiB under the
	# sanitizers: still a real read spanning several credential expiries.
	creds_mib=256
	[ "$v" = plain ] || creds_mib=64
	if SPOOLFS_BIN="$PWD/$dir/spoolfs" SPOOLFS_TEST_SLOWDOWN=$slow \
		SPOOLFS_TEST_CREDS_READ_MIB=$creds_mib $python -m pytest -q -p no:cacheprovider "${select[@]}" $suites 2>&1 | tee "$log"; then :; else
		failed_steps+=("$v integration")
	fi
	count "$log"
	rm -f "$log"
	if [ "$v" = plain ]; then
		# Keeps the benchmark working; its timings are printed, never asserted.
		step "$v: benchmark smoke run"
		if SPOOLFS_BIN="$PWD/$dir/spoolfs" SIZE=64M RUNS=1 bash tests/bench/cold_read.sh; then
			total_passed=$((total_passed + 1))
		else
			failed_steps+=("benchmark")
			total_failed=$((total_failed + 1))
		fi
		# The side-by-side benchmark, spoolfs only, small sizes: keeps it (and its C reader
		# crowd) working and fails when a workload gets an error, a short read or a block
		# whose (index, offset) stamp is not where it belongs.
		# W7's tree at 100 files, not 300: its baselines are sequential GETs 10 ms apart
		# (two of them, HTTP and S3), about 6 s of the run's 27 at 300.
		step "$v: peers benchmark smoke run"
		if SPOOLFS_BIN="$PWD/$dir/spoolfs" SCALE=small PEERS=spoolfs RUNS=1 W7_FILES=100 \
			bash tests/bench/peers.sh; then
			total_passed=$((total_passed + 1))
		else
			failed_steps+=("peers benchmark")
			total_failed=$((total_failed + 1))
		fi
		# Keeps the hash flooding benchmark working (a crafted manifest against a random
		# one); small, and its ratio is printed, never asserted.
		step "$v: hash flooding benchmark smoke run"
		if SPOOLFS_BIN="$PWD/$dir/spoolfs" N=20000 RUNS=1 bash tests/bench/hash_flood.sh; then
			total_passed=$((total_passed + 1))
		else
			failed_steps+=("hash flooding benchmark")
			total_failed=$((total_failed + 1))
		fi
		# Keeps the publish benchmark working; its ratio is printed, never asserted.
		step "$v: publish benchmark smoke run"
		if SPOOLFS_BIN="$PWD/$dir/spoolfs" SIZE=64M N=500 RUNS=1 bash tests/bench/publish.sh; then
			total_passed=$((total_passed + 1))
		else
			failed_steps+=("publish benchmark")
			total_failed=$((total_failed + 1))
		fi
		# Keeps the real-programs benchmark working: npm alone (about 15 s), one run,
		# loopback; it fails when a mount fails or npm prints other bytes than from disk.
		# The FUSE floor (fuse-overlayfs over the tree, when installed) adds under a second.
		step "$v: real programs benchmark smoke run"
		if SPOOLFS_BIN="$PWD/$dir/spoolfs" RUNS=1 PROGRAMS=npm NETS=lat \
			$python tests/bench/real_programs.py; then
			total_passed=$((total_passed + 1))
		else
			failed_steps+=("real programs benchmark")
			total_failed=$((total_failed + 1))
		fi
		# Regressions in the parsers of untrusted input surface here; longer runs: run.sh.
		step "fuzz: ${FUZZ_SECONDS:-15} s per target"
		if FUZZ_SECONDS=${FUZZ_SECONDS:-15} bash tests/fuzz/run.sh; then
			total_passed=$((total_passed + 1))
		else
			failed_steps+=("fuzz")
			total_failed=$((total_failed + 1))
		fi
	fi
done
step ""
echo "=== all: $((SECONDS - run_start)) s"

echo
if ((${#failed_steps[@]})); then
	echo "failed: ${failed_steps[*]}"
fi
echo "$total_passed passed, $total_failed failed, $total_skipped skipped"
((${#failed_steps[@]} == 0 && total_failed == 0))

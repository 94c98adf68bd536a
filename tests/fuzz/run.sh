#!/usr/bin/env bash
# libFuzzer targets for spoolfs' parsers of untrusted input:
#   fuzz_manifest       manifest JSON -> source_manifest_load (validation, URL resolution)
#   fuzz_content_range  Content-Range values and raw response headers (fetch/http/http.h)
#   fuzz_segment        path segment sanitisation (index_check_segment)
#   fuzz_symlinks       manifest symlinks (symlink_resolve.h) against openat2(RESOLVE_BENEATH)
#   fuzz_unframe        one stored zstd frame of a compressed object (zframe_decode)
#
# Builds them with clang, ASan+UBSan and libFuzzer into build-fuzz/ and runs each for
# FUZZ_SECONDS (default 30), starting from the seeds in tests/fuzz/corpus/<target>/. New
# inputs go to build-fuzz/corpus/<target>/ (the seeds stay untouched); a crash leaves its
# reproducer in build-fuzz/artifacts/ and makes this script exit non-zero.
#
# Targets run side by side, one per core (FUZZ_PARALLEL, default nproc / FUZZ_JOBS): each
# still gets FUZZ_SECONDS of a core of its own, the run takes fewer wall seconds.
#
#   bash tests/fuzz/run.sh                         # the short CI run: 30 s per target
#   FUZZ_SECONDS=3600 FUZZ_JOBS=2 bash tests/fuzz/run.sh    # the longer run: 1 h per target
#   bash tests/fuzz/run.sh fuzz_segment            # one target
#   build-fuzz/tests/fuzz/fuzz_manifest build-fuzz/artifacts/crash-...   # replay a crash
set -uo pipefail
cd "$(dirname "$0")/../.."
seconds=${FUZZ_SECONDS:-30}
jobs=${FUZZ_JOBS:-1}
build=${FUZZ_BUILD_DIR:-build-fuzz}
targets=("$@")
((${#targets[@]})) || targets=(fuzz_manifest fuzz_content_range fuzz_segment fuzz_s3_list fuzz_symlinks fuzz_unframe)

CC=${CC:-clang} cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPOOLFS_FUZZ=ON \
	-DSPOOLFS_SANITIZE=address,undefined >/dev/null &&
	cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >/dev/null || {
	echo "fuzz: build failed (needs clang: CC=clang)" >&2
	exit 2
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
# With -jobs (even -jobs=1), libFuzzer fuzzes in child processes that write fuzz-N.log in
# the working directory: two targets at once would share those files. Hence one job runs in
# process (no -jobs), and targets run side by side only then.
parallel=${FUZZ_PARALLEL:-$(($(nproc) / jobs))}
((jobs == 1 && parallel > 1)) || parallel=1
job_args=()
((jobs == 1)) || job_args=(-jobs="$jobs" -workers="$jobs")
mkdir -p "$build/artifacts"
failed=()
start() { # target: starts its run in the background; its pid in pids[target]
	local t=$1 corpus="$build/corpus/$1"
	mkdir -p "$corpus"
	echo "=== $t: ${seconds}s"
	"$build/tests/fuzz/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
		"${job_args[@]}" -print_final_stats=1 \
		-artifact_prefix="$build/artifacts/$t-" "$corpus" "tests/fuzz/corpus/$t" \
		>"$build/$t.log" 2>&1 &
	pids[$t]=$!
}
finish() { # target: waits for its run and reports it
	local t=$1 log="$build/$1.log"
	if wait "${pids[$t]}"; then
		echo "=== $t:" "$(grep -E '^(Done|stat::number_of_executed_units)' "$log" | tail -2 | tr '\n' ' ')"
	else
		failed+=("$t")
		tail -40 "$log"
		echo "fuzz: $t FAILED; reproducer(s):" "$build/artifacts/$t-"* >&2
	fi
	# with -jobs, libFuzzer writes fuzz-N.log per job in the working directory
	((jobs == 1)) || rm -f fuzz-[0-9]*.log
}
declare -A pids
for ((i = 0; i < ${#targets[@]}; i += parallel)); do
	batch=("${targets[@]:i:parallel}")
	for t in "${batch[@]}"; do start "$t"; done
	for t in "${batch[@]}"; do finish "$t"; done
done
if ((${#failed[@]})); then
	echo "fuzz: failed: ${failed[*]}" >&2
	exit 1
fi
echo "fuzz: ${#targets[@]} target(s) ran ${seconds}s each, no crash"

#!/usr/bin/env bash
# libFuzzer targets for spoolfs' parsers of untrusted input:
#   fuzz_manifest       manifest JSON -> source_manifest_load (validation, URL resolution)
#   fuzz_content_range  Content-Range values and raw response headers (fetch/http/http.h)
#   fuzz_segment        path segment sanitisation (index_check_segment)
#   fuzz_symlinks       manifest symlinks (symlink_resolve.h) against openat2(RESOLVE_BENEATH)
#   fuzz_unframe        one stored zstd frame of a compressed object (unframe_decode)
#
# Builds them with clang, ASan+UBSan and libFuzzer into build-fuzz/ and runs each for
# FUZZ_SECONDS (default 30), starting from the seeds in tests/fuzz/corpus/<target>/. New
# inputs go to build-fuzz/corpus/<target>/ (the seeds stay untouched); a crash leaves its
# reproducer in build-fuzz/artifacts/ and makes this script exit non-zero.
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
mkdir -p "$build/artifacts"
failed=()
for t in "${targets[@]}"; do
	corpus="$build/corpus/$t"
	mkdir -p "$corpus"
	echo "=== $t: ${seconds}s"
	log="$build/$t.log"
	if "$build/tests/fuzz/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
		-jobs="$jobs" -workers="$jobs" -print_final_stats=1 \
		-artifact_prefix="$build/artifacts/$t-" "$corpus" "tests/fuzz/corpus/$t" >"$log" 2>&1; then
		grep -E '^(Done|stat::number_of_executed_units)' "$log" | tail -2
	else
		failed+=("$t")
		tail -40 "$log"
		echo "fuzz: $t FAILED; reproducer(s):" "$build/artifacts/$t-"* >&2
	fi
	# with -jobs, libFuzzer writes fuzz-N.log per job in the working directory
	rm -f fuzz-[0-9]*.log
done
if ((${#failed[@]})); then
	echo "fuzz: failed: ${failed[*]}" >&2
	exit 1
fi
echo "fuzz: ${#targets[@]} target(s) ran ${seconds}s each, no crash"

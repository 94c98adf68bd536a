#!/usr/bin/env bash
# `spoolfs publish SRC s3://...` against `spoolfs publish SRC OUT` + `aws s3 sync OUT s3://...`
# into the project's S3 test server on 127.0.0.1 (tests/upstream/s3_upstream.py, verifying
# every signature), and a re-publish of the unchanged tree both ways.
#
#   bash tests/bench/publish_s3.sh                         # 256 MiB file + 2,000 small files
#   SIZE=32M N=200 bash tests/bench/publish_s3.sh          # quick form
#
# Env: SIZE (the large file, default 256M), N (small files, default 2000, 100 bytes to 16 KiB),
# UPLOADS (spoolfs --uploads, default its own), SPOOLFS_BIN (default build/spoolfs), WORKDIR
# (default /var/tmp). Needs the AWS CLI (Debian: apt-get install awscli). The test server is
# one Python process: it, not either client, bounds the rate; the numbers compare the
# clients' request counts and overheads on one machine, not a real store's throughput.
# A benchmark, not a test: timings are printed, never asserted.
set -euo pipefail
export LC_ALL=C

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PYTHON=/usr/bin/python3
SIZE=${SIZE:-256M}
N=${N:-2000}
WORK=""
SERVER=""

log() { printf '[bench] %s\n' "$*" >&2; }
die() {
	log "FATAL: $*"
	exit 1
}
cleanup() {
	[ -z "$SERVER" ] || kill "$SERVER" 2>/dev/null || true
	[ -z "$WORK" ] || rm -rf "$WORK"
}
trap cleanup EXIT

now_us() { local t=$EPOCHREALTIME; echo "${t/./}"; }
secs() { awk -v us="$1" 'BEGIN { printf "%.2f", us / 1e6 }'; }
timed() { # label command...: runs it quietly, prints its seconds
	local t0 t1 f
	f=$WORK/$(printf '%s' "$1" | tr -c 'a-zA-Z0-9' '_')
	t0=$(now_us)
	"${@:2}" >"$f.out" 2>"$f.err" || die "$1 failed: $(tail -3 "$f.err")"
	t1=$(now_us)
	printf '%-28s %8s s\n' "$1" "$(secs $((t1 - t0)))"
}
puts() { curl -s "http://127.0.0.1:$PORT/_ctl/stats" | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["total_puts"])'; }

SPOOLFS=${SPOOLFS_BIN:-$ROOT/build/spoolfs}
[ -x "$SPOOLFS" ] || die "no spoolfs binary at $SPOOLFS (doc/testing.md) or set SPOOLFS_BIN"
AWS=/usr/bin/aws # Debian's, as the brief of this benchmark says; else the PATH's
[ -x "$AWS" ] || AWS=$(command -v aws) || die "the AWS CLI is needed for the baseline (apt-get install awscli)"

WORK=$(mktemp -d "${WORKDIR:-/var/tmp}/spoolfs-bench-publish-s3.XXXXXX")
log "generating $SIZE + $N small files in $WORK/src"
mkdir "$WORK/src" "$WORK/s3" "$WORK/s3/bench"
head -c "$SIZE" /dev/urandom >"$WORK/src/large.bin"
"$PYTHON" - "$WORK/src" "$N" <<'EOF'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(1)
block = os.urandom(1 << 20)
for i in range(n):
    d = os.path.join(root, "d%03d" % (i // 100))
    os.makedirs(d, exist_ok=True)
    size = rng.randint(100, 16 << 10)
    off = rng.randint(0, len(block) - size)
    with open(os.path.join(d, "f%05d" % i), "wb") as f:
        f.write(block[off:off + size])
EOF

export AWS_ACCESS_KEY_ID=AKIDBENCH0001 AWS_SECRET_ACCESS_KEY=benchSecret0123456789 AWS_REGION=us-east-1
export AWS_EC2_METADATA_DISABLED=true AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
"$PYTHON" "$ROOT/tests/upstream/s3_upstream.py" --root "$WORK/s3" \
	--verify-sigv4 "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" >"$WORK/server.out" 2>&1 &
SERVER=$!
for _ in $(seq 100); do grep -q '^PORT' "$WORK/server.out" 2>/dev/null && break; sleep 0.1; done
PORT=$(awk '/^PORT/ { print $2; exit }' "$WORK/server.out")
[ -n "$PORT" ] || die "the S3 test server did not start"
EP=http://127.0.0.1:$PORT
UP=()
[ -z "${UPLOADS:-}" ] || UP=(--uploads "$UPLOADS")

log "spoolfs $("$SPOOLFS" --version 2>/dev/null | head -1 || true); $("$AWS" --version 2>&1)"
timed "spoolfs publish s3://" "$SPOOLFS" publish "$WORK/src" s3://bench/a --endpoint "$EP" "${UP[@]}"
p1=$(puts)
timed "again (unchanged)" "$SPOOLFS" publish "$WORK/src" s3://bench/a --endpoint "$EP" "${UP[@]}"
p2=$(puts)
timed "spoolfs publish OUT_DIR" "$SPOOLFS" publish "$WORK/src" "$WORK/out"
timed "aws s3 sync (objects)" "$AWS" s3 sync "$WORK/out" s3://bench/b --endpoint-url "$EP" \
	--exclude manifest.json --only-show-errors
timed "aws s3 cp (manifest)" "$AWS" s3 cp "$WORK/out/manifest.json" s3://bench/b/ \
	--endpoint-url "$EP" --cache-control no-cache --only-show-errors
p3=$(puts)
timed "aws s3 sync again" "$AWS" s3 sync "$WORK/out" s3://bench/b --endpoint-url "$EP" \
	--exclude manifest.json --only-show-errors
p4=$(puts)
printf 'PUTs: spoolfs %s then %s again; aws %s then %s again\n' "$p1" $((p2 - p1)) \
	$((p3 - p2)) $((p4 - p3))
printf 'auth failures at the server: %s\n' "$(curl -s "$EP/_ctl/stats" |
	"$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["auth_failures"])')"

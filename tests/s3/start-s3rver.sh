#!/usr/bin/env bash
# Start the pinned s3rver (tests/s3/package.json) on 127.0.0.1 for spoolfs tests.
#
#   tests/s3/start-s3rver.sh [--port N] [--dir DIR] [--bucket NAME]... [--install-only]
#
# Installs s3rver into tests/s3/node_modules first if it is missing or not the
# pinned version (npm ci from the committed lockfile; needs node and npm, and
# the machine's configured npm registry). --port 0 (default) picks a free port.
# Without --dir a temporary directory is used and removed on exit. Prints
# "PORT <n>" on stdout when ready; SIGTERM/SIGINT stop s3rver and exit 0.
# Set S3RVER_VERBOSE=1 for s3rver's request log on stdout.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
port=0
dir=
install_only=0
buckets=()
while (($#)); do
	case $1 in
	--port) port=$2; shift 2 ;;
	--dir) dir=$2; shift 2 ;;
	--bucket) buckets+=("$2"); shift 2 ;;
	--install-only) install_only=1; shift ;;
	-h | --help) sed -n '2,11p' "$0"; exit 0 ;;
	*) echo "start-s3rver: unknown argument $1" >&2; exit 2 ;;
	esac
done

command -v node >/dev/null || { echo "start-s3rver: node is not installed" >&2; exit 3; }

want=$(node -p "require('$here/package.json').dependencies.s3rver")
have=$(node -p "try { require('$here/node_modules/s3rver/package.json').version } catch (e) { '' }")
if [[ $have != "$want" ]]; then
	command -v npm >/dev/null || { echo "start-s3rver: npm is not installed" >&2; exit 3; }
	# One installer at a time (parallel test runs share tests/s3/node_modules).
	exec 9>"$here/.install.lock"
	flock 9
	have=$(node -p "try { require('$here/node_modules/s3rver/package.json').version } catch (e) { '' }")
	if [[ $have != "$want" ]]; then
		echo "start-s3rver: installing s3rver $want into $here/node_modules" >&2
		t0=$(date +%s)
		(cd "$here" && npm ci --no-audit --no-fund --loglevel=error >&2)
		echo "start-s3rver: installed in $(($(date +%s) - t0))s" >&2
	fi
	flock -u 9
	exec 9>&-
fi
((install_only)) && exit 0

made_dir=0
if [[ -z $dir ]]; then
	dir=$(mktemp -d "${TMPDIR:-/tmp}/s3rver.XXXXXX")
	made_dir=1
fi
mkdir -p "$dir"

child=
# shellcheck disable=SC2317  # invoked from traps
cleanup() {
	if [[ -n $child ]] && kill -0 "$child" 2>/dev/null; then
		kill -TERM "$child" 2>/dev/null || true
		wait "$child" 2>/dev/null || true
	fi
	((made_dir)) && rm -rf "$dir"
	return 0
}
trap 'cleanup; exit 0' TERM INT
trap cleanup EXIT

# node prints "PORT <n>" itself; bash stays to clean up on signals.
node "$here/run-s3rver.js" "$dir" "$port" "${buckets[@]}" &
child=$!
set +e
wait "$child"
rc=$?
set -e
child=
exit "$rc"

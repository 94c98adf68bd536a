#!/usr/bin/env bash
# The action's first step: refuses a runner whose libfuse is too old before anything is
# installed, and names the cache keys and directories the later steps use.
#   build-key    the built binary: this action's commit and the runner's OS and machine
#   record-key   this run's record of the files the job opened (keys are immutable: the
#                run id and attempt make each run's its own)
#   record-prefix  restores the newest record of earlier runs of the same job and source
set -euo pipefail
# shellcheck source=action/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[ -n "${INPUT_SOURCE:-}" ] || die "the source input is empty: give a manifest URL or path, or s3://BUCKET/PREFIX"
[ -n "${RUNNER_TEMP:-}" ] || die "RUNNER_TEMP is not set: run this as a step of a GitHub Actions job"
case "${INPUT_WRITABLE:-}" in *$'\n'*) die "writable: one path, or true" ;; esac

if [ -z "${INPUT_SPOOLFS:-}" ] && [ -r /etc/os-release ]; then
	os_id=$(. /etc/os-release && echo "${ID:-linux}")
	os_version=$(. /etc/os-release && echo "${VERSION_ID:-0}")
	[ "$os_id" != ubuntu ] || at_least "$os_version" 24.04 ||
		fuse_too_old "this runner is Ubuntu $os_version, whose libfuse is older"
fi
check_fuse "" # what the build or the package will link

# The commit the action runs from: a checkout's own, the ref when it is a commit, else (a
# tag or branch, which may move) the sha256 of the action's files.
commit=$(git -C "$GITHUB_ACTION_PATH" rev-parse HEAD 2>/dev/null || true)
if [ -z "$commit" ]; then
	case "${ACTION_REF:-}" in
	[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]*) commit=$ACTION_REF ;;
	*) commit=tree-$(cd "$GITHUB_ACTION_PATH" &&
		find . -name .git -prune -o -type f -print | LC_ALL=C sort |
		xargs -d '\n' sha256sum | sha256sum | cut -c1-40) ;;
	esac
fi
os=$(. /etc/os-release 2>/dev/null && echo "${ID:-linux}-${VERSION_ID:-0}")
output build-key "spoolfs-build-$(key_part "$commit")-$(key_part "$os")-$(uname -m)"
output install-dir "$RUNNER_TEMP/spoolfs-install"

job=${INPUT_CACHE_KEY:-${GITHUB_WORKFLOW:-workflow}-${GITHUB_JOB:-job}}
# (The record's paths are the mount's own: where it is mounted does not matter.)
source_hash=$(printf '%s\n' "$INPUT_SOURCE" | sha256sum | cut -c1-16)
prefix="spoolfs-reads-$(key_part "$job")-$source_hash-"
output record-prefix "$prefix"
output record-key "$prefix${GITHUB_RUN_ID:-0}-${GITHUB_RUN_ATTEMPT:-1}"
output record-dir "$RUNNER_TEMP/spoolfs-record"

#!/usr/bin/env bash
# Mounts the source (output path) as the runner's user, or through sudo as root with --uid
# when that user cannot mount FUSE itself, with the last run's record as --prefetch-list
# and this run's recorded for the next. Tells the finish step, through GITHUB_ENV, what to
# report, unmount and save.
set -euo pipefail
# shellcheck source=action/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The finish step unmounts the one mount this job's environment names.
if [ -n "${SPOOLFS_ACTION_MOUNT:-}" ] && mountpoint -q "$SPOOLFS_ACTION_MOUNT"; then
	die "this job has mounted with the spoolfs action already (on $SPOOLFS_ACTION_MOUNT): one mount per job, which the finish step reports and unmounts"
fi
mnt=${INPUT_PATH:-$RUNNER_TEMP/spoolfs}
state=$RUNNER_TEMP/spoolfs-action
mkdir -p "$mnt" "$state" "$RECORD_DIR"
mnt=$(cd "$mnt" && pwd -P)
[ -z "$(ls -A "$mnt")" ] || die "path: $mnt is not empty; give an empty directory"

args=(--log-file "$state/spoolfs.log" --metrics-file "$state/metrics.prom"
	--record-reads "$RECORD_DIR/reads")
# The record actions/cache restored is the list; the new one is written in its place.
rm -f "$state/prefetch-list"
if [ -s "$RECORD_DIR/reads" ]; then
	mv "$RECORD_DIR/reads" "$state/prefetch-list"
	args+=(--prefetch-list "$state/prefetch-list")
	echo "spoolfs: prefetching the $(wc -l <"$state/prefetch-list") files the last run opened"
fi
[ -z "${INPUT_ROLE_ARN:-}" ] || args+=(--role-arn "$INPUT_ROLE_ARN")
[ -z "${INPUT_REGION:-}" ] || args+=(--region "$INPUT_REGION")

# writable: an overlay on the mount (spoolfs --writable DIR). Until the daemon has the
# option the input fails here; once it does, this block passes it on unchanged.
case "${INPUT_WRITABLE:-}" in
"" | false) ;;
*)
	upper=$INPUT_WRITABLE
	[ "$upper" != true ] || upper=$RUNNER_TEMP/spoolfs-writable
	"$SPOOLFS" --help 2>&1 | grep -q -- '--writable' ||
		die "writable: this spoolfs ($("$SPOOLFS" --version 2>&1 | head -n1)) has no --writable (an overlay on the mount) yet; leave the input empty for a read-only mount"
	mkdir -p "$upper"
	args+=(--writable "$upper")
	;;
esac
# Extra options, split on white space (no quoting: an option's value has none).
read -r -a extra <<<"${INPUT_OPTIONS:-}"

# A user mounts through the setuid fusermount3; without it, root mounts with the files
# shown as the user's.
run=()
if [ "$(id -u)" != 0 ] && { [ ! -u "$(command -v fusermount3 || echo /nonexistent)" ] ||
	[ ! -w /dev/fuse ]; }; then
	sudo -n true 2>/dev/null || die "cannot mount: fusermount3 is not setuid root or /dev/fuse is not writable for $(id -un), and sudo asks for a password"
	run=(sudo -n --preserve-env)
	args+=(-o allow_other --uid "$(id -u)" --gid "$(id -g)")
	export_env SPOOLFS_ACTION_SUDO 1
fi

"${run[@]}" "$SPOOLFS" "${args[@]}" "${extra[@]}" "$INPUT_SOURCE" "$mnt" ||
	die "mounting $INPUT_SOURCE on $mnt failed (the line above says why)"
echo "spoolfs: $INPUT_SOURCE mounted on $mnt"
output path "$mnt"
export_env SPOOLFS_ACTION_MOUNT "$mnt"
export_env SPOOLFS_ACTION_BIN "$SPOOLFS"
export_env SPOOLFS_ACTION_STATE "$state"
export_env SPOOLFS_ACTION_RECORD_DIR "$RECORD_DIR"
export_env SPOOLFS_ACTION_RECORD_KEY "$RECORD_KEY"

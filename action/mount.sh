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

# A user mounts through the setuid fusermount3; without it, root mounts with the files
# shown as the user's.
run=() daemon_state=$state
if [ "$(id -u)" != 0 ] && { [ ! -u "$(command -v fusermount3 || echo /nonexistent)" ] ||
	[ ! -w /dev/fuse ]; }; then
	sudo -n true 2>/dev/null || die "cannot mount: fusermount3 is not setuid root or /dev/fuse is not writable for $(id -un), and sudo asks for a password"
	# Root, and only what spoolfs reads: no GITHUB_TOKEN or runner token goes with it.
	keep=$(compgen -e | grep -E '^(AWS_[A-Z_]*|SPOOLFS_[A-Z_]*|(https?|all|no)_proxy|(HTTPS?|ALL|NO)_PROXY|CURL_CA_BUNDLE|SSL_CERT_(FILE|DIR))$' |
		paste -sd, -) || true
	run=(sudo -n ${keep:+"--preserve-env=$keep"})
	# Root writes its log, metrics and record only where no one else can change what the
	# names lead to (util/trusted_path.h): not in the runner's RUNNER_TEMP, but in a
	# directory of root's in /tmp. The finish step copies them back and removes it.
	daemon_state=$(sudo -n mktemp -d /tmp/spoolfs-action.XXXXXX) ||
		die "cannot make root's state directory in /tmp"
	sudo -n chmod 0755 "$daemon_state"
	export_env SPOOLFS_ACTION_SUDO 1
	export_env SPOOLFS_ACTION_DAEMON_STATE "$daemon_state"
fi

record=$RECORD_DIR/reads
[ "$daemon_state" = "$state" ] || record=$daemon_state/reads
args=(--log-file "$daemon_state/spoolfs.log" --metrics-file "$daemon_state/metrics.prom"
	--record-reads "$record")
# The record actions/cache restored is the list; the new one is written in its place.
rm -f "$state/prefetch-list"
if [ -s "$RECORD_DIR/reads" ]; then
	mv "$RECORD_DIR/reads" "$state/prefetch-list"
	if [ "$daemon_state" = "$state" ]; then
		args+=(--prefetch-list "$state/prefetch-list")
	else
		# A copy of root's for root to read.
		sudo -n cp "$state/prefetch-list" "$daemon_state/prefetch-list"
		args+=(--prefetch-list "$daemon_state/prefetch-list")
	fi
	echo "spoolfs: prefetching the $(wc -l <"$state/prefetch-list") files the last run opened"
fi
[ -z "${INPUT_ROLE_ARN:-}" ] || args+=(--role-arn "$INPUT_ROLE_ARN")
[ -z "${INPUT_REGION:-}" ] || args+=(--region "$INPUT_REGION")

# writable: an overlay on the mount (spoolfs --writable DIR, doc/writable.md). true: a
# directory of the job's, or of root's in root's state directory when root mounts (root
# writes only where no one else can change what the path leads to; DIR/upper is made the
# runner user's, who writes into the tree).
case "${INPUT_WRITABLE:-}" in
"" | false) ;;
*)
	upper=$INPUT_WRITABLE
	if [ "$upper" = true ]; then
		upper=$RUNNER_TEMP/spoolfs-writable
		[ "$daemon_state" = "$state" ] || upper=$daemon_state/writable
	fi
	"$SPOOLFS" --help 2>&1 | grep -q -- '--writable' ||
		die "writable: this spoolfs ($("$SPOOLFS" --version 2>&1 | head -n1)) has no --writable (an overlay on the mount); leave the input empty for a read-only mount"
	"${run[@]}" mkdir -p "$upper"
	args+=(--writable "$upper")
	;;
esac
# Extra options, split on white space (no quoting: an option's value has none).
read -r -a extra <<<"${INPUT_OPTIONS:-}"

# allow_other: the daemon is root's, and without it the kernel lets only root in; --uid and
# --gid show the files as the runner user's (see doc/github-action.md).
[ ${#run[@]} -eq 0 ] || args+=(-o allow_other --uid "$(id -u)" --gid "$(id -g)")

"${run[@]}" "$SPOOLFS" "${args[@]}" "${extra[@]}" "$INPUT_SOURCE" "$mnt" ||
	die "mounting $INPUT_SOURCE on $mnt failed (the line above says why)"
echo "spoolfs: $INPUT_SOURCE mounted on $mnt"
output path "$mnt"
export_env SPOOLFS_ACTION_MOUNT "$mnt"
export_env SPOOLFS_ACTION_BIN "$SPOOLFS"
export_env SPOOLFS_ACTION_STATE "$state"
export_env SPOOLFS_ACTION_RECORD_DIR "$RECORD_DIR"
export_env SPOOLFS_ACTION_RECORD_KEY "$RECORD_KEY"

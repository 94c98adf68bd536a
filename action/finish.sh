#!/usr/bin/env bash
# The job's last spoolfs step (if: always()): writes the mount's totals into the job
# summary while it is still up, unmounts, waits for the daemon to exit (it writes the
# record of what the job opened, and its last metrics, at unmount) and tells the cache step
# whether there is a record to save (output record).
set -euo pipefail
# shellcheck source=action/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Root's state directory (the sudo route), removed whatever happened.
daemon_state=${SPOOLFS_ACTION_DAEMON_STATE:-}
cleanup() {
	[ -z "$daemon_state" ] || sudo -n rm -rf -- "$daemon_state" || true
}
trap cleanup EXIT

mnt=${SPOOLFS_ACTION_MOUNT:-}
if [ -z "$mnt" ]; then
	echo "spoolfs: nothing was mounted by the spoolfs action in this job"
	output record false
	exit 0
fi
bin=$SPOOLFS_ACTION_BIN
state=$SPOOLFS_ACTION_STATE
record=$SPOOLFS_ACTION_RECORD_DIR/reads
sudo=()
[ -z "${SPOOLFS_ACTION_SUDO:-}" ] || sudo=(sudo -n)

# sample NAME FILE: the value of a sample in Prometheus text (any labels), empty if none.
sample() {
	awk -v n="$1" '$1 == n || index($1, n "{") == 1 { v = $2 } END { if (v != "") print v }' \
		"$2" 2>/dev/null || true
}

status="" pids=() mounted=false
if mountpoint -q "$mnt"; then
	mounted=true
	status=$("$bin" status "$mnt" 2>&1) || echo "spoolfs: $status" >&2
	for p in supervisor serving; do
		pid=$(sample "spoolfs_${p}_pid" "$mnt/.spoolfs/stats")
		[ -z "$pid" ] || [ "$pid" = 0 ] || pids+=("${pid%.*}")
	done
	# A writable mount through fuse-overlayfs shows no /.spoolfs: status found the mount
	# beneath and names its processes.
	[ ${#pids[@]} -gt 0 ] || read -r -a pids < <(sed -n \
		's/^processes: serving PID \([0-9]*\), supervisor PID \([0-9]*\);.*/\1 \2/p' <<<"$status")
	if ! "${sudo[@]}" fusermount3 -u "$mnt"; then
		echo "::warning title=spoolfs::$mnt is busy (a process still has a file open there); detaching it lazily"
		"${sudo[@]}" fusermount3 -u -z "$mnt" || true
	fi
	# The record is written as the daemon exits: wait for it, boundedly.
	for _ in $(seq 600); do
		alive=false
		for pid in "${pids[@]}"; do
			grep -qs spoolfs "/proc/$pid/comm" && alive=true
		done
		$alive || break
		sleep 0.1
	done
	$alive && echo "::warning title=spoolfs::the daemon had not exited 60 s after the unmount; its record may be missing"
else
	echo "::warning title=spoolfs::$mnt was no longer mounted (the daemon died, or a step unmounted it)"
fi

# Root wrote its metrics and record in its own directory: the runner's copies, for the
# summary and the cache step (sudo cat: root's files, read as root, written as the user).
# shellcheck disable=SC2024 # the redirects are the user's on purpose: the copies are its
if [ -n "$daemon_state" ]; then
	sudo -n cat "$daemon_state/metrics.prom" >"$state/metrics.prom" 2>/dev/null ||
		rm -f "$state/metrics.prom"
	if sudo -n test -s "$daemon_state/reads"; then
		sudo -n cat "$daemon_state/reads" >"$record"
	fi
fi

# The job summary: the status's totals, and the time readers waited for bytes (from the
# metrics file, final once the daemon is gone).
totals=$(sed -n 's/^totals: //p' <<<"$status")
waited=$(sample spoolfs_read_wait_seconds_sum "$state/metrics.prom")
waits=$(sample spoolfs_read_wait_seconds_count "$state/metrics.prom")
{
	echo "### spoolfs: \`$mnt\`"
	echo
	if [ -n "$totals" ]; then
		echo "| | |"
		echo "| --- | --- |"
		sed -n 's/^\([0-9]*\) objects.*/| objects | \1 |/p' <<<"$totals"
		sed -n 's/.*upstream \([0-9]*\) requests over [0-9]* connections ([^)]*), \([^;]*\);.*/| bytes fetched | \2 in \1 requests |/p' <<<"$totals"
		sed -n 's/.*opens: \([0-9]*\) local, \([0-9]*\) started, \([0-9]*\) joined.*/| cache hits | \1 (opens of objects already local; \2 started a download, \3 joined one) |/p' <<<"$totals"
		[ -z "$waited" ] || printf '| time waited | %.3f s over %d reads that waited for their bytes |\n' "$waited" "${waits:-0}"
		sed -n 's/.*; \([0-9]*\) retries, \([0-9]*\) failures.*/| retries, failures | \1, \2 |/p' <<<"$totals"
		echo
		echo '```'
		grep -E '^(totals|prefetch|prefetch list|processes):' <<<"$status" || true
		echo '```'
	elif $mounted; then
		echo "spoolfs status failed: see the step's log."
	else
		echo "The mount was gone before the job's end: see the step's log."
	fi
} >>"$GITHUB_STEP_SUMMARY"

if [ -r "$state/spoolfs.log" ] || [ -n "$daemon_state" ]; then
	echo "::group::spoolfs log"
	"${sudo[@]}" cat "${daemon_state:-$state}/spoolfs.log" || true
	echo "::endgroup::"
fi

if [ -s "$record" ]; then
	echo "spoolfs: the record of the $(wc -l <"$record") files this job opened goes to the cache as $SPOOLFS_ACTION_RECORD_KEY"
	output record true
else
	echo "spoolfs: no record to keep (no file was opened, or the daemon did not write it)"
	output record false
fi

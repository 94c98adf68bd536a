#!/usr/bin/env bash
# spoolfs-entrypoint: the node-level spoolfs container's main process (deploy/kubernetes,
# doc/kubernetes.md). Settings come from the environment (the ConfigMap and Secret):
#
#   SPOOLFS_SOURCE        required: a manifest URL or path, or s3://BUCKET/PREFIX
#   SPOOLFS_MOUNTPOINT    where to mount (default /srv/spoolfs/store): below the hostPath
#                         volume that has Bidirectional propagation, so the node sees it
#   SPOOLFS_OPTIONS       spoolfs options, split at spaces (as spoolfs@.service's OPTIONS)
#   SPOOLFS_STOP_TIMEOUT  seconds a stop waits for the daemon after the unmount (default 60)
#   SPOOLFS_RUN_DIR       where the daemon's pid is kept (default /run/spoolfs-entrypoint)
#   SPOOLFS_BIN           the spoolfs binary (default: spoolfs in PATH)
#   AWS_*, https_proxy... read by spoolfs itself, never put on its command line
#
#   spoolfs-entrypoint        mount (spoolfs -f) and serve; SIGTERM or SIGINT unmounts, waits
#                             for the daemon to exit (it writes its record and last metrics
#                             as it goes) and exits with the daemon's status
#   spoolfs-entrypoint stop   the same unmount and wait, from another process: the preStop
#   spoolfs-entrypoint ready  exit 0 once the mount answers: the readiness probe
set -euo pipefail

prog=spoolfs-entrypoint
say() { echo "$prog: $*" >&2; }
die() {
	say "$*"
	exit 2
}

mnt=${SPOOLFS_MOUNTPOINT:-/srv/spoolfs/store}
run_dir=${SPOOLFS_RUN_DIR:-/run/spoolfs-entrypoint}
bin=${SPOOLFS_BIN:-spoolfs}
timeout=${SPOOLFS_STOP_TIMEOUT:-60}
case $mnt in
/*) ;;
*) die "SPOOLFS_MOUNTPOINT must be an absolute path, not \"$mnt\"" ;;
esac
case $timeout in
'' | *[!0-9]*) die "SPOOLFS_STOP_TIMEOUT must be a whole number of seconds, not \"$timeout\"" ;;
esac

# Something is mounted on the mount point (findmnt reads this namespace's mount table; it
# also sees a dead FUSE mount, which stat cannot).
mounted() { findmnt -rn --mountpoint "$mnt" >/dev/null 2>&1; }

# The one unmount, for SIGTERM and for the preStop. A plain unmount lets the daemon finish
# cleanly; when a job still has a file open it is refused (EBUSY), and the mount is then
# detached lazily: jobs see it go at once, the daemon serves the open files until they are
# closed and then exits.
unmount() {
	mounted || return 0
	fusermount3 -u "$mnt" 2>/dev/null && return 0
	mounted || return 0
	say "$mnt is busy (a job still has a file open there): detaching it lazily"
	fusermount3 -u -z "$mnt"
}

daemon_pid() { cat "$run_dir/pid" 2>/dev/null || true; }

# alive PID: the daemon has not exited (a zombie waiting for its parent counts as gone; one
# stopped by a tracer, state "t", as LeakSanitizer does at exit, has not).
alive() {
	local state
	state=$(sed -n 's/^State:[[:space:]]*\([A-Za-z]\).*/\1/p' "/proc/$1/status" 2>/dev/null) || return 1
	[ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

# The preStop, and SIGTERM's: unmount, then wait for the daemon to exit, boundedly: SIGTERM
# after SPOOLFS_STOP_TIMEOUT (reads of a lazily detached mount's open files then fail, but
# for what the kernel has cached), SIGKILL 10 s later.
stop() {
	local pid i
	pid=$(daemon_pid)
	unmount
	[ -n "$pid" ] || return 0
	for ((i = 0; i < timeout * 10; i++)); do
		alive "$pid" || return 0
		sleep 0.1
	done
	say "the daemon had not exited ${timeout} s after the unmount: stopping it"
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 100; i++)); do
		alive "$pid" || return 0
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
}

# The mount answers: an open always reaches the daemon, where a stat may be answered from
# the kernel's attribute cache even on a dead mount.
ready() { mounted && head -c 1 "$mnt/.spoolfs/stats" >/dev/null 2>&1; }

serve() {
	local source=${SPOOLFS_SOURCE:-} pid rc watchdog=""
	[ -n "$source" ] || die "SPOOLFS_SOURCE is not set: a manifest URL or path, or s3://BUCKET/PREFIX"
	mkdir -p "$run_dir" "$mnt"
	# A dead mount a killed pod left there ("Transport endpoint is not connected") is
	# cleared by spoolfs itself, and a live one (the systemd unit, an old pod still
	# stopping) refused: fs/mountinfo.c.
	local -a opts=()
	# SPOOLFS_OPTIONS is split at spaces, with no globbing.
	set -f
	# shellcheck disable=SC2206
	opts=(${SPOOLFS_OPTIONS:-})
	set +f

	stopping=0 interrupted=0
	on_signal() {
		interrupted=1
		[ "$stopping" = 0 ] || return 0
		stopping=1
		say "stopping: unmounting $mnt"
		# The preStop's own steps, beside the wait below: a job holding a file open keeps
		# a lazily detached mount's daemon up until it closes it, or until the timeout.
		stop &
		watchdog=$!
	}
	trap on_signal TERM INT

	"$bin" -f "${opts[@]}" "$source" "$mnt" </dev/null &
	pid=$!
	echo "$pid" >"$run_dir/pid"
	# wait returns early when a trapped signal arrives: wait again until the daemon exits,
	# so the container ends only once its record and metrics are written.
	while :; do
		interrupted=0
		rc=0
		wait "$pid" || rc=$?
		[ "$interrupted" = 1 ] || break
	done
	[ -z "$watchdog" ] || kill "$watchdog" 2>/dev/null || true
	rm -f "$run_dir/pid"
	if [ "$rc" = 0 ]; then
		say "the daemon exited cleanly"
	else
		say "the daemon exited with status $rc"
	fi
	return "$rc"
}

case ${1:-serve} in
serve) serve ;;
stop) stop ;;
ready) ready ;;
*) die "usage: $prog [serve|stop|ready]" ;;
esac

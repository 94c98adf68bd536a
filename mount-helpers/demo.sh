#!/usr/bin/env bash
# The main job, end to end on one machine (Debian 12, as root):
# installs what is missing, builds spoolfs, starts an example store (the project's test
# upstream) on 127.0.0.1, mounts it, lists it and reads from it. The mount stays up at
# /run/spoolfs-demo/mnt so you can look around; `bash mount-helpers/demo.sh stop` unmounts,
# stops the store and removes everything the demo made.
#
# Where things live, and why: the state (PIDs, the store's port and log, the mount point)
# is in /run/spoolfs-demo, a directory only root can write (made 0700; the demo refuses one
# it did not make that way), so `stop` never acts on a PID or a path someone else planted,
# as it could in a fixed /tmp directory. The example store's 80 MB and the mount's spool
# go in a fresh `mktemp -d` directory under /var/tmp (not /run, often a small tmpfs), whose
# path is recorded in the state directory.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
state=/run/spoolfs-demo
mnt=$state/mnt

die() {
	echo "demo: $*" >&2
	exit 1
}

[ "$(id -u)" = 0 ] || die "run as root (FUSE mounts and $state need it)"

# The state directory is ours when it is a real directory (not a symlink), owned by root,
# mode 0700. /run is writable by root only, so once checked it cannot be swapped.
check_state() {
	[ -L "$state" ] && die "$state is a symlink: not touching it"
	[ -d "$state" ] || die "$state is not a directory: not touching it"
	[ "$(stat -c '%u %a' "$state")" = "0 700" ] ||
		die "$state is not root's with mode 0700: not touching it (remove it yourself)"
}

# Whether PID $1 is still the process recorded, told by a word its command line must hold:
# a recycled PID is never signalled or waited for.
is_ours() { # pid word
	# The process may exit between the test and the read (tr: read error: No such process).
	{ tr '\0' ' ' <"/proc/$1/cmdline"; } 2>/dev/null | grep -qF -- "$2"
}

wait_gone() { # pid word
	for _ in $(seq 300); do
		is_ours "$1" "$2" || return 0
		sleep 0.1
	done
	echo "demo: process $1 did not exit" >&2
	return 1
}

stop() {
	[ -e "$state" ] || [ -L "$state" ] || return 0
	check_state
	local work="" pid
	[ -f "$state/work" ] && work=$(cat "$state/work")
	if grep -qs " $mnt " /proc/self/mountinfo; then
		if fusermount3 -u "$mnt"; then
			echo "unmounted $mnt"
		else
			# Something still has a file open on it: detach it now; the daemon exits
			# once the last user is gone.
			fusermount3 -u -z "$mnt" && echo "detached $mnt (still in use: lazy unmount)"
		fi
	fi
	# The daemon removes its spool when it exits: wait for that before removing its parent.
	if [ -f "$state/spoolfs.pid" ]; then
		pid=$(cat "$state/spoolfs.pid")
		is_ours "$pid" "$mnt" && wait_gone "$pid" "$mnt"
	fi
	if [ -f "$state/upstream.pid" ]; then
		pid=$(cat "$state/upstream.pid")
		if [ -n "$work" ] && is_ours "$pid" "$work/store"; then
			kill "$pid" && echo "stopped the example store"
			wait_gone "$pid" "$work/store"
		fi
	fi
	case $work in
	/var/tmp/spoolfs-demo.??????)
		if [ -d "$work" ] && [ ! -L "$work" ]; then
			rm -rf -- "$work" && echo "removed $work"
		fi
		;;
	"") ;;
	*) die "$state/work names '$work', not a demo directory: not removing it" ;;
	esac
	if grep -qs " $mnt " /proc/self/mountinfo; then
		die "$mnt is still mounted: keeping $state"
	fi
	rm -rf -- "$state" && echo "removed $state"
}

if [ "${1:-}" = stop ]; then
	stop
	exit 0
fi
[ $# -eq 0 ] || die "usage: bash mount-helpers/demo.sh [stop]"

bash tests/deps.sh build # what the demo needs; the test suite installs the rest
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
echo "built $repo/build/spoolfs"

stop # a previous demo's mount, store and files
mkdir -m 0700 "$state"
check_state
mkdir "$mnt"
work=$(mktemp -d /var/tmp/spoolfs-demo.XXXXXX)
echo "$work" >"$state/work"
store=$work/store
mkdir "$store"

# Example objects: a toolchain-sized archive, a model shard, and a small text file.
/usr/bin/python3 tests/upstream/mkstore.py --root "$store" \
	toolchains/gcc-12.tar:64M models/shard-00001.bin:16M >/dev/null
echo "hello from spoolfs" >"$store/README.txt"
/usr/bin/python3 - "$store" <<'PY'
import hashlib, json, os, sys
root = sys.argv[1]
path = os.path.join(root, "manifest.json")
m = json.load(open(path))
data = open(os.path.join(root, "README.txt"), "rb").read()
m["files"].append({"path": "README.txt", "size": len(data),
                   "sha256": hashlib.sha256(data).hexdigest()})
json.dump(m, open(path, "w"), indent=1)
PY

/usr/bin/python3 tests/upstream/upstream.py --root "$store" --port 0 \
	>"$state/upstream.port" 2>"$state/upstream.log" &
echo $! >"$state/upstream.pid"
for _ in $(seq 100); do
	[ -s "$state/upstream.port" ] && break
	sleep 0.05
done
port=$(awk '/^PORT/ {print $2}' "$state/upstream.port")
[ -n "$port" ] || die "the example store did not start: see $state/upstream.log"
url=http://127.0.0.1:$port/manifest.json
echo "example store: $url"

# spoolfs is not installed: every command printed here names the binary the demo built.
spoolfs=$repo/build/spoolfs
# TMPDIR puts the mount's session cache (the spool) inside the demo's directory, so even
# a daemon that was killed leaves nothing behind after `stop`.
TMPDIR=$work build/spoolfs "$url" "$mnt"
echo "mounted: $spoolfs $url $mnt"
# spoolfs has daemonised once the mount is ready: note its PID so `stop` can wait for it.
for p in /proc/[0-9]*; do
	case $({ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null) in
	"build/spoolfs "*" $mnt ")
		echo "${p#/proc/}" >"$state/spoolfs.pid"
		break
		;;
	esac
done
echo
echo "\$ ls -lR $mnt"
ls -lR "$mnt"
echo
echo "\$ cat $mnt/README.txt"
cat "$mnt/README.txt"
echo
echo "\$ sha256sum $mnt/toolchains/gcc-12.tar   # read through the mount, verified on the way"
sha256sum "$mnt/toolchains/gcc-12.tar"
echo "\$ getfattr -d $mnt/toolchains/gcc-12.tar   # sha256 from the manifest, bytes local now"
getfattr --absolute-names -d "$mnt/toolchains/gcc-12.tar"
echo "\$ $spoolfs status $mnt"
build/spoolfs status "$mnt" --interval 0.2
echo "the store counted (the manifest too): $(curl -s "http://127.0.0.1:$port/_ctl/stats" | /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["total_gets"], "GETs,", d["total_bytes"], "bytes")')"
echo
echo "The mount stays up (the daemon logs to syslog, e.g. journalctl -t spoolfs). Watch it with"
echo "  $spoolfs status $mnt --watch"
echo "(spoolfs is not installed: README.md's \`spoolfs ...\` commands are $spoolfs here)."
echo "Unmount, stop the store and remove the demo's files with:"
echo "  bash mount-helpers/demo.sh stop"

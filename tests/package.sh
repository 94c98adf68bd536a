#!/usr/bin/env bash
# The Debian package, as an operator uses it (run as root on a throwaway machine: it
# installs and removes a system package). Builds build-pkg/spoolfs_<version>_<arch>.deb,
# checks it with lintian, installs it with apt, mounts the example store with
# `mount -t fuse.spoolfs` and `mount -t spoolfs` through the installed files only, reads
# every file, unmounts, removes the package and checks it left nothing behind.
# `.ci/run` runs it before the suite; on a developer machine run it in a VM or container.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
[ "$(id -u)" = 0 ] || { echo "package: run as root" >&2; exit 2; }
if dpkg-query -W -f='${Status}' spoolfs 2>/dev/null | grep -q "install ok installed"; then
	echo "package: a spoolfs package is installed already: not replacing it" >&2
	exit 2
fi

work=$(mktemp -d /var/tmp/spoolfs-package.XXXXXX)
upstream_pid=
installed=0
cleanup() {
	for m in "$work/mnt1" "$work/mnt2"; do
		mountpoint -q "$m" 2>/dev/null && umount "$m" 2>/dev/null
	done
	[ -n "$upstream_pid" ] && kill "$upstream_pid" 2>/dev/null && wait "$upstream_pid" 2>/dev/null
	((installed)) && apt-get -o DPkg::Lock::Timeout=600 remove -y -qq spoolfs >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT

echo "package: build"
# What the package holds only (the binary, the compressed docs): the unit tests are the
# suite's, built three times by run-all already. cpack would build them all before
# installing, unless install does not depend on "all".
cmake -S . -B build-pkg -DCMAKE_BUILD_TYPE=Release -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON >/dev/null
cmake --build build-pkg -j"$(nproc)" --target spoolfs pkgdoc >/dev/null
rm -f build-pkg/spoolfs_*.deb
(cd build-pkg && cpack -G DEB >/dev/null)
deb=$(ls build-pkg/spoolfs_*.deb)
echo "package: $deb"
dpkg-deb -f "$deb" Depends

echo "package: lintian"
lintian --fail-on error --allow-root "$deb"

echo "package: install"
apt-get -o DPkg::Lock::Timeout=600 install -y -qq "./$deb" >/dev/null
installed=1
[ "$(command -v spoolfs)" = /usr/bin/spoolfs ] ||
	{ echo "package: 'spoolfs' is $(command -v spoolfs), not the package's" >&2; exit 1; }
spoolfs --version
[ -e /usr/share/man/man1/spoolfs.1.gz ] || { echo "package: no man page" >&2; exit 1; }

echo "package: mount"
python3 tests/upstream/mkstore.py --root "$work/store" big.bin:3M dir/small.txt:1000 >/dev/null
python3 tests/upstream/upstream.py --root "$work/store" >"$work/port" 2>"$work/upstream.log" &
upstream_pid=$!
for _ in $(seq 100); do grep -q '^PORT' "$work/port" 2>/dev/null && break; sleep 0.1; done
port=$(awk '/^PORT/ {print $2}' "$work/port")
url=http://127.0.0.1:$port/manifest.json
mkdir -p "$work/mnt1" "$work/mnt2"
# The two ways mount(8) reaches the package's files: fuse3's mount.fuse3 running
# /usr/bin/spoolfs, and the package's /sbin/mount.spoolfs.
mount -t fuse.spoolfs "$url" "$work/mnt1" -o "log_level=warn"
mount -t spoolfs "$url" "$work/mnt2"
for m in "$work/mnt1" "$work/mnt2"; do
	cmp "$m/big.bin" "$work/store/big.bin"
	cmp "$m/dir/small.txt" "$work/store/dir/small.txt"
	umount "$m"
done
echo "package: read both mounts"

echo "package: remove"
files=$(dpkg -L spoolfs | while read -r f; do [ -d "$f" ] || echo "$f"; done)
apt-get -o DPkg::Lock::Timeout=600 remove -y -qq spoolfs >/dev/null
installed=0
left=$(for f in $files; do [ -e "$f" ] && echo "$f"; done || true)
[ -z "$left" ] || { echo "package: left behind: $left" >&2; exit 1; }
# umount returns once the kernel lets go; the daemon exits just after. (Matching the
# mount points only: the test upstream's arguments name $work too.)
for _ in $(seq 100); do pgrep -f -- "$work/mnt" >/dev/null || break; sleep 0.1; done
if pgrep -af -- "$work/mnt" >&2; then
	echo "package: a spoolfs process is left" >&2
	exit 1
fi
echo "package: ok"

#!/usr/bin/env bash
# The main job, end to end on one machine (Debian 12, as root):
# installs what is missing, builds spoolfs, starts an example store (the project's test
# upstream) on 127.0.0.1, mounts it, lists it and reads from it. The mount stays up so you
# can look around; `bash mount-helpers/demo.sh stop` unmounts and stops the store.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
demo=${SPOOLFS_DEMO_DIR:-/tmp/spoolfs-demo}
mnt=$demo/mnt

stop() {
	if grep -qs " $mnt " /proc/self/mountinfo; then
		fusermount3 -u "$mnt" && echo "unmounted $mnt"
	fi
	if [ -f "$demo/upstream.pid" ]; then
		kill "$(cat "$demo/upstream.pid")" 2>/dev/null && echo "stopped the example store"
		rm -f "$demo/upstream.pid"
	fi
}

if [ "${1:-}" = stop ]; then
	stop
	exit 0
fi

bash tests/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
echo "built $repo/build/spoolfs"

stop # a previous demo's mount and store
mkdir -p "$demo/store" "$mnt"
# Example objects: a toolchain-sized archive, a model shard, and a small text file.
/usr/bin/python3 tests/upstream/mkstore.py --root "$demo/store" \
	toolchains/gcc-12.tar:64M models/shard-00001.bin:16M >/dev/null
echo "hello from spoolfs" >"$demo/store/README.txt"
/usr/bin/python3 - "$demo/store" <<'PY'
import hashlib, json, os, sys
root = sys.argv[1]
path = os.path.join(root, "manifest.json")
m = json.load(open(path))
data = open(os.path.join(root, "README.txt"), "rb").read()
m["files"].append({"path": "README.txt", "size": len(data),
                   "sha256": hashlib.sha256(data).hexdigest()})
json.dump(m, open(path, "w"), indent=1)
PY

/usr/bin/python3 tests/upstream/upstream.py --root "$demo/store" --port 0 \
	>"$demo/upstream.port" 2>"$demo/upstream.log" &
echo $! >"$demo/upstream.pid"
for _ in $(seq 100); do
	[ -s "$demo/upstream.port" ] && break
	sleep 0.05
done
port=$(awk '/^PORT/ {print $2}' "$demo/upstream.port")
url=http://127.0.0.1:$port/manifest.json
echo "example store: $url"

build/spoolfs "$url" "$mnt"
echo "mounted: spoolfs $url $mnt"
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
echo "\$ spoolfs status $mnt"
build/spoolfs status "$mnt" --interval 0.2
echo "the store counted (the manifest too): $(curl -s "http://127.0.0.1:$port/_ctl/stats" | /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["total_gets"], "GETs,", d["total_bytes"], "bytes")')"
echo
echo "The mount stays up. Unmount and stop the store with:"
echo "  bash mount-helpers/demo.sh stop      (or: fusermount3 -u $mnt)"

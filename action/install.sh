#!/usr/bin/env bash
# Puts a spoolfs on the runner and names it (output bin): the one the spoolfs input names;
# else the .deb the deb input names; else the binary built from this action's sources,
# restored by actions/cache into INSTALL_DIR or built now with the runner's own libraries.
set -euo pipefail
# shellcheck source=action/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

sudo=()
[ "$(id -u)" = 0 ] || sudo=(sudo -n)
apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300)
# What building needs; installing the -dev packages also brings the runtime libraries,
# whose names change between releases (Ubuntu 24.04's libcurl4t64).
build_packages=(build-essential cmake pkg-config fuse3 libfuse3-dev libcurl4-openssl-dev
	libssl-dev libsqlite3-dev libexpat1-dev libyajl-dev libzstd-dev libsystemd-dev libcmocka-dev)

# Asks apt only for what is not installed already (a runner image has most of it).
apt_install() {
	local missing=() p
	for p in "$@"; do
		case "$p" in
		/* | ./*) missing+=("$p") ;;
		*) dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			missing+=("$p") ;;
		esac
	done
	[ ${#missing[@]} -gt 0 ] || return 0
	echo "spoolfs: installing ${missing[*]}"
	"${apt[@]}" update -qq
	"${apt[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

if [ -n "${INPUT_SPOOLFS:-}" ]; then
	bin=$INPUT_SPOOLFS
elif [ -n "${INPUT_DEB:-}" ]; then
	deb=$RUNNER_TEMP/spoolfs.deb
	curl -fsSL --retry 3 -o "$deb" "$INPUT_DEB" || die "deb: cannot download $INPUT_DEB"
	apt_install "$deb"
	bin=$(command -v spoolfs) || die "deb: $INPUT_DEB installed no spoolfs"
else
	bin=$INSTALL_DIR/bin/spoolfs
	if [ ! -x "$bin" ]; then
		echo "spoolfs: building from $GITHUB_ACTION_PATH (cached for later runs)"
		apt_install "${build_packages[@]}"
		cmake -S "$GITHUB_ACTION_PATH" -B "$RUNNER_TEMP/spoolfs-build" -DCMAKE_BUILD_TYPE=Release >/dev/null
		cmake --build "$RUNNER_TEMP/spoolfs-build" --target spoolfs -j"$(nproc)" >/dev/null
		install -D -m 0755 "$RUNNER_TEMP/spoolfs-build/spoolfs" "$bin"
	elif ldd "$bin" | grep -q 'not found' || ! command -v fusermount3 >/dev/null; then
		# A restored binary on a fresh runner: the libraries it was built with.
		apt_install "${build_packages[@]}"
	fi
fi
[ -x "$bin" ] || die "no spoolfs at $bin"
check_fuse "$bin"
"$bin" --version
output bin "$bin"

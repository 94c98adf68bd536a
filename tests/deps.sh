#!/usr/bin/env bash
# Installs what spoolfs needs on Debian 12 (run as root):
#   bash tests/deps.sh         everything the test suite needs (tests/run-all.sh, .ci/run)
#   bash tests/deps.sh build   building it, and the demo (mount-helpers/demo.sh): no more
# Idempotent: asks apt only when something is missing.
set -euo pipefail

case ${1:-all} in
build | all) ;;
*)
	echo "usage: bash tests/deps.sh [build]" >&2
	exit 2
	;;
esac

# Building (cmake configures the unit tests too: cmocka), and the demo: its example store
# is the test upstream (python3), it reads attributes (attr) and the store's counters (curl).
packages=(
	build-essential cmake pkg-config
	libfuse3-dev fuse3 libcurl4-openssl-dev libssl-dev libsqlite3-dev libexpat1-dev libyajl-dev
	libzstd-dev
	libcmocka-dev libsystemd-dev python3 curl ca-certificates attr
)
# The suite besides: sanitizer and fuzz builds, format checks, pytest, TLS certificates,
# proxies and HTTP caches of its own on 127.0.0.1, package checks, the metrics file's parser.
if [ "${1:-all}" = all ]; then
	packages+=(clang clang-format python3-pytest python3-yaml openssl tinyproxy lintian
		python3-prometheus-client nginx squid python3-zstandard fuse-overlayfs strace)
fi

# A CI machine just after boot often has another apt (unattended-upgrades) holding the
# dpkg lock: wait for it rather than fail at once.
apt=(apt-get -o DPkg::Lock::Timeout=600)

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing+=("$p")
done
if ((${#missing[@]})); then
	echo "deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	"${apt[@]}" update -qq
	"${apt[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	# The fleet-cache tests run nginx and squid of their own on 127.0.0.1; the services
	# the packages just started (port 80, 3128) are not wanted on a test machine.
	for svc in nginx squid; do
		[[ " ${missing[*]} " == *" $svc "* ]] && systemctl disable --now "$svc" >/dev/null 2>&1 || true
	done
fi
# s3rver (the S3 API tests) runs on Node.js; a machine that has node already keeps its own.
if [ "${1:-all}" = all ] && { ! command -v node >/dev/null || ! command -v npm >/dev/null; }; then
	echo "deps: installing nodejs npm"
	"${apt[@]}" update -qq
	"${apt[@]}" install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
[ -e /dev/fuse ] || { echo "deps: /dev/fuse is missing: FUSE cannot mount here" >&2; exit 1; }

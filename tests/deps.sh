#!/usr/bin/env bash
# Installs what building, testing and the demo need on Debian 12 (run as root).
# Idempotent: asks apt only when something is missing.
set -euo pipefail

packages=(
	build-essential cmake pkg-config clang clang-format
	libfuse3-dev fuse3 libcurl4-openssl-dev libssl-dev libsqlite3-dev libexpat1-dev libyajl-dev
	libcmocka-dev libsystemd-dev python3 python3-pytest python3-yaml curl ca-certificates openssl tinyproxy attr
	lintian python3-prometheus-client nginx squid
)

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
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	echo "deps: installing nodejs npm"
	"${apt[@]}" update -qq
	"${apt[@]}" install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
[ -e /dev/fuse ] || { echo "deps: /dev/fuse is missing: FUSE cannot mount here" >&2; exit 1; }

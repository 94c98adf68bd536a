# shellcheck shell=bash
# Shared by the action's scripts (sourced, never run): how a step talks to the runner, and
# the libfuse check. The runner reads what a step appends to the files GITHUB_OUTPUT and
# GITHUB_ENV once the step ends; a value with a newline would start another entry, so none
# is written.

die() {
	echo "::error title=spoolfs::$*"
	echo "spoolfs action: $*" >&2
	exit 1
}

# put FILE NAME VALUE: one NAME=VALUE entry for the runner.
put() {
	case "$3" in *$'\n'*) die "$2: a value with a newline" ;; esac
	echo "$2=$3" >>"$1"
}

output() { put "$GITHUB_OUTPUT" "$1" "$2"; }
export_env() { put "$GITHUB_ENV" "$1" "$2"; }

# The version of the libfuse 3 that spoolfs is or will be linked with, as X.Y.Z; empty when
# nothing says. With a binary ($1), the library it loads; else the -dev package's, the
# installed library's, or what apt would install.
fuse_version() {
	local lib="" v=""
	if [ -n "${1:-}" ]; then
		lib=$(ldd "$1" 2>/dev/null | sed -n 's/^[[:space:]]*libfuse3\.so\.[0-9]* => \([^ ]*\) .*/\1/p')
	else
		v=$(pkg-config --modversion fuse3 2>/dev/null || true)
		[ -n "$v" ] || lib=$(ldconfig -p 2>/dev/null |
			sed -n 's/^[[:space:]]*libfuse3\.so\.3 (.*) => //p' | head -n1)
	fi
	# The library's real file is named for its version: libfuse3.so.3.14.0.
	[ -n "$lib" ] && v=$(readlink -f "$lib" | sed -n 's/.*libfuse3\.so\.//p')
	[ -n "$v" ] || [ -n "${1:-}" ] ||
		v=$(apt-cache policy libfuse3-4 libfuse3-3 2>/dev/null |
			sed -n 's/^[[:space:]]*Candidate: \([0-9][0-9.]*\).*/\1/p' | head -n1)
	echo "$v"
}

# fuse_too_old WHY: the one message for a runner whose libfuse is older than 3.14.
fuse_too_old() {
	die "spoolfs needs libfuse 3.14 or newer (its supervisor keeps the mount open through libfuse's custom-io hook, added in 3.14); $1. Ubuntu 22.04 ships 3.10: use runs-on: ubuntu-24.04."
}

# at_least VERSION MINIMUM: true when VERSION is MINIMUM or newer.
at_least() {
	[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]
}

# Fails unless libfuse is 3.14 or newer (or cannot be told: the build then says what).
check_fuse() {
	local v
	v=$(fuse_version "${1:-}")
	[ -z "$v" ] || at_least "$v" 3.14 || fuse_too_old "this runner has libfuse $v"
}

# A cache key part: what actions/cache accepts (no commas), readable, bounded.
key_part() {
	printf '%s' "$1" | tr -c 'A-Za-z0-9._-' '_' | cut -c1-100
}

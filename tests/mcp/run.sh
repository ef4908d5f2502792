#!/bin/sh
# Runs tests/mcp/e2e.py against a custodian binary.
#
# usage: tests/mcp/run.sh PYTHON CUSTODIAN
#
# The server's cleanup deletes (as root, in CI) inside the test's workspace.
# So, as root, the test runs in a private mount namespace where every mount
# but its scratch directory (and the cgroup v2 hierarchy, for the cgroup
# containment tier) is read-only; e2e.py checks that before it starts.
set -eu
py=$1
exe=$(realpath "$2")
here=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/custodian-mcp-e2e.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
export CUSTODIAN_TEST_SCRATCH="$scratch" TMPDIR="$scratch"
if [ "$(id -u)" != 0 ]; then
  exec "$py" "$here/e2e.py" "$exe"
fi
if ! unshare -m --propagation private true; then
  echo "running as root and cannot create a mount namespace (unshare -m): refusing to run a deleting test" >&2
  exit 1
fi
# The cgroup v2 hierarchy stays writable (the cgroup containment tier).
keep=$(awk '{ for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2") { print $5; exit } break } }' /proc/self/mountinfo)
export CUSTODIAN_TEST_KEEP="$keep"
# Same remount script as tests/support/sandbox.rs.
unshare -m --propagation private sh -c '
set -e
mount --bind "$1" "$1"
for m in $(awk "{print \$5}" /proc/self/mountinfo | sort -u); do
  case "$m" in "$1"|"$2") ;; *) mount -o remount,bind,ro "$m" 2>/dev/null || true ;; esac
done
shift 2
exec "$@"
' sh "$scratch" "$keep" "$py" "$here/e2e.py" "$exe"

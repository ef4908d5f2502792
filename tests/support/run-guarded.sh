#!/bin/sh
# Runs a command that deletes (as root) inside a private mount namespace where
# every mount but a fresh scratch directory (its TMPDIR), the cgroup v2
# hierarchy and /proc (no deletable file; isolated launches map their user
# namespace's ids through it) is read-only, after checking that; unprivileged, it runs directly
# with the scratch as its TMPDIR. The same remount as tests/support/sandbox.rs;
# used by .ci/run for the agent example and by tests/mcp/run.sh.
#
# usage: tests/support/run-guarded.sh COMMAND [ARG...]
set -eu
scratch=$(mktemp -d "${TMPDIR:-/tmp}/custodian-guarded.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
export CUSTODIAN_TEST_SCRATCH="$scratch" TMPDIR="$scratch"
if [ "$(id -u)" != 0 ]; then
  "$@"
  exit
fi
if ! unshare -m --propagation private true; then
  echo "running as root and cannot create a mount namespace (unshare -m): refusing to run a deleting command" >&2
  exit 1
fi
keep=$(awk '{ for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2") { print $5; exit } break } }' /proc/self/mountinfo)
export CUSTODIAN_TEST_KEEP="$keep"
unshare -m --propagation private sh -c '
set -e
mount --bind "$1" "$1"
for m in $(awk "{print \$5}" /proc/self/mountinfo | sort -u); do
  case "$m" in "$1"|"$2"|/proc) ;; *) mount -o remount,bind,ro "$m" 2>/dev/null || true ;; esac
done
# Check: of mounts stacked on one point the last listed is the visible one;
# every visible mount but the scratch (and beneath it) and the kept one is
# read-only.
writable=$(awk -v s="$1" -v k="$2" "
  { opts[\$5] = \$6 }
  END {
    for (m in opts) {
      if (m == s || index(m, s \"/\") == 1 || (k != \"\" && m == k) || m == \"/proc\") continue
      if (\",\" opts[m] \",\" !~ /,ro,/) print m
    }
  }" /proc/self/mountinfo)
if [ -n "$writable" ]; then
  echo "refusing to run: writable mounts besides the scratch: $writable" >&2
  exit 1
fi
shift 2
exec "$@"
' sh "$scratch" "$keep" "$@"

#!/bin/sh
# Runs tests/mcp/e2e.py against a custodian binary.
#
# usage: tests/mcp/run.sh PYTHON CUSTODIAN
#
# The server's cleanup deletes (as root, in CI) inside the test's workspace.
# So it runs through tests/support/run-guarded.sh: as root, in a private
# mount namespace where every mount but its scratch directory (and the
# cgroup v2 hierarchy, for the cgroup containment tier) is read-only;
# e2e.py checks that again before it starts.
set -eu
py=$1
exe=$(realpath "$2")
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../support/run-guarded.sh" "$py" "$here/e2e.py" "$exe"

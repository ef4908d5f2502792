#!/bin/sh
# Runs tests/mcp/e2e.mjs (the TypeScript MCP SDK as the client) against a
# custodian binary.
#
# usage: tests/mcp/run-ts.sh SDK_DIR CUSTODIAN
#
# SDK_DIR holds the node_modules installed from tests/mcp/package.json
# (.ci/run: `npm ci` into target/mcp-node). As tests/mcp/run.sh, it runs
# through tests/support/run-guarded.sh.
set -eu
sdk=$(realpath "$1")
exe=$(realpath "$2")
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../support/run-guarded.sh" node "$here/e2e.mjs" "$sdk" "$exe"

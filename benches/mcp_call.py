"""MCP tool-call latency: `custodian mcp` against a naive FastMCP-style
server (the Python SDK's `MCPServer`, whose tool calls `subprocess.run`).

    target/mcp-venv/bin/python benches/mcp_call.py target/x86_64-unknown-linux-gnu/release/custodian [N]

Both servers are driven by the same raw JSON-RPC client over stdio, calls
interleaved one by one (custodian, naive, custodian, …) so that load on a
shared machine hits both alike. Each call runs `/bin/true`; the time is
from writing the request to reading its response. Prints p50, p90 and p99
of each and the p50 ratio. Run by hand (recorded in docs/performance.md),
never by CI. The venv is .ci/run's (tests/mcp/requirements.txt).

`MCP_BENCH_ARGS` adds arguments to `custodian mcp` (e.g. `--confine
workspace-write`); `MCP_BENCH_AGAINST=PATH` compares against another
custodian binary (another build, the same arguments) instead of the naive
server.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

NAIVE = r'''
import subprocess
from mcp.server.mcpserver import MCPServer

server = MCPServer("naive")

@server.tool()
def process_run(executable: str, argv: list[str] | None = None) -> dict:
    """Run a process and return its exit code and output."""
    p = subprocess.run([executable, *(argv or [])], capture_output=True, timeout=30)
    return {"exit_code": p.returncode, "stdout": p.stdout.decode(errors="replace"),
            "stderr": p.stderr.decode(errors="replace")}

server.run()
'''


class Server:
    def __init__(self, argv, env=None):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, env=env)
        self.next_id = 0
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "bench", "version": "1"}})
        self.notify("notifications/initialized")

    def send(self, msg):
        self.p.stdin.write((json.dumps(msg) + "\n").encode())
        self.p.stdin.flush()

    def notify(self, method):
        self.send({"jsonrpc": "2.0", "method": method})

    def request(self, method, params):
        self.next_id += 1
        rid = self.next_id
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        while True:
            m = json.loads(self.p.stdout.readline())
            if m.get("id") == rid and "method" not in m:
                return m

    def call_true(self):
        start = time.perf_counter()
        r = self.request("tools/call", {"name": "process_run",
                                        "arguments": {"executable": "/bin/true"}})
        took = time.perf_counter() - start
        assert "result" in r and not r["result"].get("isError"), r
        return took

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main():
    exe = os.path.abspath(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    with tempfile.TemporaryDirectory(prefix="custodian-mcp-bench-") as root:
        ws = os.path.join(root, "ws")
        os.makedirs(ws)
        naive_py = os.path.join(root, "naive.py")
        with open(naive_py, "w") as f:
            f.write(NAIVE)
        extra = os.environ.get("MCP_BENCH_ARGS", "").split()
        ours = Server([exe, "mcp", "--workspace", ws, *extra])
        against = os.environ.get("MCP_BENCH_AGAINST")
        if against:
            other = os.path.join(root, "ws-other")
            os.makedirs(other)
            naive = Server([os.path.abspath(against), "mcp", "--workspace", other, *extra])
        else:
            naive = Server([sys.executable, naive_py])
        for _ in range(50):  # warm up both
            ours.call_true()
            naive.call_true()
        a, b = [], []
        for _ in range(n):
            a.append(ours.call_true())
            b.append(naive.call_true())
        ours.close()
        naive.close()
    other = "MCP_BENCH_AGAINST" if os.environ.get("MCP_BENCH_AGAINST") else "naive MCPServer + subprocess.run"
    for name, xs in (("custodian mcp", a), (other, b)):
        print(f"{name:34} p50 {pct(xs, .5) * 1e3:6.2f} ms  p90 {pct(xs, .9) * 1e3:6.2f} ms"
              f"  p99 {pct(xs, .99) * 1e3:6.2f} ms  mean {statistics.mean(xs) * 1e3:6.2f} ms")
    print(f"p50 ratio custodian / {'other' if os.environ.get('MCP_BENCH_AGAINST') else 'naive'}: "
          f"{pct(a, .5) / pct(b, .5):.3f}x  (n = {n} each, interleaved)")


if __name__ == "__main__":
    main()

//! Output latency through `custodian mcp` against a raw pipe, in the same
//! run: how long a line the child writes takes to reach the reader.
//!
//! The child is the same Python ticker every time: every 20 ms it prints
//! `time.monotonic_ns()` (`CLOCK_MONOTONIC`, one clock for every process of
//! the machine) and flushes. The reader takes the same clock when the line
//! reaches it; the difference is the line's latency. Three readers, one
//! after the other, `MCP_ROUNDS` lines each (default 300):
//!
//! 1. **raw pipe**: the ticker spawned by `std` with stdout piped, read line
//!    by line;
//! 2. **`process_read`**: a `process_start` session of the ticker read by
//!    `process_read` long polls (`wait_ms` 5000), one after the other, over
//!    the server's stdio (JSON-RPC lines, as an MCP client does);
//! 3. **progress**: a `process_run` of the ticker with a progress token,
//!    its lines taken from the progress notifications'
//!    `_meta["custodian/output"]`.
//!
//! p50 and p90 of each, and the MCP readers' p50 minus the raw pipe's.
//!
//! Run: `cargo bench -p custodian --bench mcp_session`

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use serde_json::{Value, json};

const TICKER: &str = "import sys, time\n\
n = int(sys.argv[1])\n\
for _ in range(n):\n    time.sleep(0.02)\n    print(time.monotonic_ns(), flush=True)\n";

fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn rounds() -> usize {
    std::env::var("MCP_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(300)
}

/// Latencies of the timestamped lines in `text`, taken now.
fn latencies(text: &str, out: &mut Vec<Duration>) {
    let now = now_ns();
    for line in text.lines() {
        if let Ok(ts) = line.trim().parse::<u64>() {
            out.push(Duration::from_nanos(now.saturating_sub(ts)));
        }
    }
}

fn raw_pipe(n: usize) -> Vec<Duration> {
    let mut child = Command::new("python3")
        .args(["-u", "-c", TICKER, &n.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lat = Vec::with_capacity(n);
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        latencies(&line.unwrap(), &mut lat);
    }
    child.wait().unwrap();
    lat
}

/// A `custodian mcp` server over stdio.
struct Server {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: Receiver<Value>,
    next_id: u64,
}

impl Server {
    fn start(workspace: &std::path::Path) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_custodian"))
            .args(["mcp", "--workspace"])
            .arg(workspace)
            .args(["--progress-every", "60s"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take().unwrap();
        let mut s = Server {
            child,
            stdin,
            lines,
            next_id: 1,
        };
        s.call_raw(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "1"}}),
        );
        s.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        s
    }

    fn send(&mut self, v: &Value) {
        writeln!(self.stdin, "{v}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn send_call(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    fn call_raw(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_call(method, params);
        loop {
            let v = self.lines.recv_timeout(Duration::from_secs(60)).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    }

    fn tool(&mut self, name: &str, arguments: Value) -> Value {
        let r = self.call_raw("tools/call", json!({"name": name, "arguments": arguments}));
        r["result"]["structuredContent"].clone()
    }

    fn close(mut self) {
        drop(self.stdin);
        let _ = self.child.wait();
    }
}

fn process_read(server: &mut Server, n: usize) -> Vec<Duration> {
    let started = server.tool(
        "process_start",
        json!({"executable": "python3", "argv": ["-u", "-c", TICKER, n.to_string()]}),
    );
    let sid = started["session_id"].as_str().unwrap().to_owned();
    let mut lat = Vec::with_capacity(n);
    let mut offset = 0;
    loop {
        let r = server.tool(
            "process_read",
            json!({"session_id": sid, "stdout_offset": offset, "wait_ms": 5000}),
        );
        latencies(r["stdout"]["text"].as_str().unwrap_or_default(), &mut lat);
        offset = r["next"]["stdout"].as_u64().unwrap();
        if r["ended"] == true {
            break;
        }
    }
    lat
}

fn progress(server: &mut Server, n: usize) -> Vec<Duration> {
    let id = server.send_call(
        "tools/call",
        json!({"name": "process_run",
               "arguments": {"executable": "python3", "argv": ["-u", "-c", TICKER, n.to_string()],
                             "timeout_ms": 600_000},
               "_meta": {"progressToken": "bench"}}),
    );
    let mut lat = Vec::with_capacity(n);
    loop {
        let v = server.lines.recv_timeout(Duration::from_secs(60)).unwrap();
        if v["id"] == id {
            break;
        }
        let text = &v["params"]["_meta"]["custodian/output"]["stdout"]["text"];
        latencies(text.as_str().unwrap_or_default(), &mut lat);
    }
    lat
}

fn report(name: &str, mut lat: Vec<Duration>, base: Option<Duration>) -> Duration {
    lat.sort();
    let pct = |p: usize| lat[(lat.len() * p / 100).min(lat.len() - 1)];
    let (p50, p90) = (pct(50), pct(90));
    let over = base.map_or(String::new(), |b| {
        format!(
            ", +{:.0} µs over the raw pipe's p50",
            (p50.as_secs_f64() - b.as_secs_f64()) * 1e6
        )
    });
    println!(
        "{name:<14} {:>5} lines  p50 {:>7.0} µs  p90 {:>7.0} µs{over}",
        lat.len(),
        p50.as_secs_f64() * 1e6,
        p90.as_secs_f64() * 1e6,
    );
    p50
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n = rounds();
    let dir = tempfile::tempdir().unwrap();
    let base = report("raw pipe", raw_pipe(n), None);
    let mut server = Server::start(dir.path());
    report("process_read", process_read(&mut server, n), Some(base));
    report("progress", progress(&mut server, n), Some(base));
    server.close();
}

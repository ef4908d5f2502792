//! A raw JSON-RPC client of `custodian mcp`: one server process on pipes,
//! its stdout and stderr read on the side.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};
use serde_json::{Value, json};

/// Far above any answer on a loaded machine.
pub const GENEROUS: Duration = Duration::from_secs(20);

pub struct Server {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Value>,
    stderr_lines: Receiver<String>,
    stderr: Option<JoinHandle<String>>,
}

impl Server {
    /// `custodian mcp --workspace WS ARGS`.
    pub fn start(workspace: &Path, args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_custodian"))
            .arg("mcp")
            .arg("--workspace")
            .arg(workspace)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not JSON on stdout ({e}): {line}"));
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        let stderr = child.stderr.take().unwrap();
        let (etx, stderr_lines) = channel();
        let stderr = std::thread::spawn(move || {
            let mut all = String::new();
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                all.push_str(&line);
                all.push('\n');
                let _ = etx.send(line);
            }
            all
        });
        Server {
            stdin: child.stdin.take(),
            child,
            lines,
            stderr_lines,
            stderr: Some(stderr),
        }
    }

    pub fn send(&mut self, msg: &Value) {
        self.send_raw(&msg.to_string());
    }

    pub fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// The next message from the server.
    pub fn next(&self) -> Value {
        self.lines
            .recv_timeout(GENEROUS)
            .unwrap_or_else(|e| panic!("no message from the server: {e}"))
    }

    /// The response to request `id` (notifications in between are skipped).
    pub fn response(&self, id: &Value) -> Value {
        loop {
            let m = self.next();
            if m.get("method").is_none() && m.get("id") == Some(id) {
                return m;
            }
        }
    }

    pub fn request(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.response(&id)
    }

    pub fn initialize(&mut self) {
        let r = self.request(
            json!(0),
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "custodian-tests", "version": "1"}
            }),
        );
        assert!(r["result"]["serverInfo"]["name"] == "custodian", "{r}");
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    /// Sends a `process_run` call without waiting for its result.
    pub fn call_run(&mut self, id: Value, executable: &str, argv: &[&str]) {
        self.send(&json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "process_run", "arguments": {"executable": executable, "argv": argv}}
        }));
    }

    /// Closes the server's stdin (a client's clean close).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    pub fn signal(&self, sig: Signal) {
        let pid = Pid::from_raw(i32::try_from(self.child.id()).unwrap()).unwrap();
        kill_process(pid, sig).unwrap();
    }

    /// Waits for a stderr line holding `needle`.
    pub fn wait_for_stderr(&self, needle: &str) {
        loop {
            match self.stderr_lines.recv_timeout(GENEROUS) {
                Ok(l) if l.contains(needle) => return,
                Ok(_) => {}
                Err(e) => panic!("no stderr line with {needle:?}: {e}"),
            }
        }
    }

    /// Waits for the server to exit: its code and all of its stderr.
    pub fn wait(&mut self) -> (Option<i32>, String) {
        self.stdin = None;
        let deadline = Instant::now() + GENEROUS;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let stderr = self
                    .stderr
                    .take()
                    .map(|h| h.join().unwrap())
                    .unwrap_or_default();
                return (status.code(), stderr);
            }
            assert!(Instant::now() < deadline, "the server did not exit");
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The cgroup v2 directory `pid` is in, if the unified hierarchy is mounted.
pub fn cgroup_of(pid: u32) -> Option<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let rel = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    let h = custodian::contain::Hierarchy::discover().ok()?;
    Some(h.mount.join(rel.trim_start_matches('/')))
}

/// The entries of `dir` (empty if it does not exist).
pub fn entries(dir: &Path) -> Vec<String> {
    match std::fs::read_dir(dir) {
        Ok(d) => d
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// A server whose stdout the caller reads itself and can close (a client
/// that dies closes both of its pipe ends).
pub fn start_bare(workspace: &Path) -> (Child, ChildStdin, BufReader<std::process::ChildStdout>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_custodian"))
        .arg("mcp")
        .arg("--workspace")
        .arg(workspace)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    (child, stdin, stdout)
}

//! The node under load of open requests: a real `custodian node --socket`
//! (the release binary), driven over its socket.
//!
//! 1. Launch latency against the node's size: `run_process` of `/bin/true`
//!    in one request, round trip from the frame sent to the answer read,
//!    with 10 other requests open and with 5,000 (each open request holds
//!    descriptors: its job directory and its journal, so the node's table
//!    grows past 10,000). The two sizes alternate, `NODE_BENCH_ROUNDS`
//!    rounds of `NODE_BENCH_LAUNCHES` launches each, and the ratio is of
//!    the medians of the rounds' p50s. Goal: ≤ 1.2×.
//! 2. Node CPU per full request, one at a time: `open_workspace`, three
//!    `write_artifact`s, `run_process` of `/bin/true`, `cleanup_workspace`;
//!    the node's own user + system time (`/proc/<pid>/stat`, without its
//!    children's) per request, next to the same work done by hand in this
//!    process (the facade bench's anchor: `create_dir`, three `write`s,
//!    `Command::output` of `/bin/true`, `remove_dir_all`) and this
//!    process's CPU for it.
//!
//! Run: `cargo bench --bench node_open_requests` (`NODE_BENCH_OPEN` changes
//! 5,000, `NODE_BENCH_FULL` the 1,000 full requests). Everything it
//! creates lives in a temporary directory of its own; the node is killed
//! and its workspace removed at the end.

// `getrusage` in the shared CPU helpers.
#![allow(unsafe_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "support/cpu.rs"]
#[allow(dead_code)] // `cpu_children` is not used here
mod cpu;

const BIN: &str = env!("CARGO_BIN_EXE_custodian");

fn env_or(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One connection: a frame out, its answer in.
struct Conn {
    read: BufReader<UnixStream>,
    write: UnixStream,
    seq: u64,
}

impl Conn {
    fn connect(socket: &Path) -> Conn {
        let s = UnixStream::connect(socket).expect("connect to the node");
        Conn {
            read: BufReader::new(s.try_clone().unwrap()),
            write: s,
            seq: 0,
        }
    }

    fn send(&mut self, body: &str) {
        self.seq += 1;
        let line = format!("{{\"v\":1,\"seq\":{},{body}}}\n", self.seq);
        self.write.write_all(line.as_bytes()).unwrap();
    }

    fn answer(&mut self) -> serde_json::Value {
        let mut line = String::new();
        let n = self.read.read_line(&mut line).unwrap();
        assert!(n > 0, "the node closed the connection");
        serde_json::from_str(&line).expect("one JSON answer")
    }

    /// Sends `body` and checks that the answer is `want` (see [`kind`]).
    fn call(&mut self, body: &str, want: &str) {
        self.send(body);
        let a = self.answer();
        assert_eq!(kind(&a), want, "{body} answered {a}");
    }

    /// Opens (or cleans) `ids` in batches, so that neither side's socket
    /// buffer fills while the other is not reading.
    fn each(&mut self, op: &str, ids: &[String], want: &str) {
        for batch in ids.chunks(100) {
            for id in batch {
                self.send(&format!("\"op\":\"{op}\",\"request_id\":\"{id}\""));
            }
            for _ in batch {
                let a = self.answer();
                assert_eq!(kind(&a), want, "{op} answered {a}");
            }
        }
    }
}

/// An answer's `result`, or a cleanup's `status`.
fn kind(a: &serde_json::Value) -> &str {
    match a["result"].as_str() {
        Some("cleanup") => a["status"].as_str().unwrap_or("?"),
        Some(r) => r,
        None => "?",
    }
}

fn open(id: &str) -> String {
    format!("\"op\":\"open_workspace\",\"request_id\":\"{id}\"")
}

fn run_true(id: &str) -> String {
    format!(
        "\"op\":\"run_process\",\"request_id\":\"{id}\",\"executable\":\"/bin/true\",\"argv\":[],\"timeout_ms\":10000"
    )
}

fn write(id: &str, n: usize) -> String {
    format!(
        "\"op\":\"write_artifact\",\"request_id\":\"{id}\",\"name\":\"a{n}.txt\",\"contents\":\"artifact {n}\""
    )
}

fn cleanup(id: &str) -> String {
    format!("\"op\":\"cleanup_workspace\",\"request_id\":\"{id}\"")
}

/// The node's own CPU time so far (user + system, not its children's).
fn node_cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // `/proc` counts in USER_HZ, 100 per second on Linux.
    Duration::from_millis(ticks * 10)
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `launches` sequential `/bin/true` runs in request `id`; their p50.
fn launch_p50(c: &mut Conn, id: &str, launches: usize) -> Duration {
    let mut v = Vec::with_capacity(launches);
    for _ in 0..launches {
        let t = Instant::now();
        c.call(&run_true(id), "process_finished");
        v.push(t.elapsed());
    }
    p50(v)
}

struct Node(Child);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let open_n = env_or("NODE_BENCH_OPEN", 5_000);
    let rounds = env_or("NODE_BENCH_ROUNDS", 5);
    let launches = env_or("NODE_BENCH_LAUNCHES", 200);
    let full = env_or("NODE_BENCH_FULL", 1_000);

    // Each open request holds descriptors: raise the limit the node
    // inherits to the hard limit.
    let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum;
    let _ = rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: hard,
            maximum: hard,
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let socket = dir.path().join("node.sock");
    let big = (open_n * 2).to_string();
    let node = Node(
        Command::new(BIN)
            .args(["node", "--workspace"])
            .arg(&ws)
            .arg("--socket")
            .arg(&socket)
            .args([
                "--max-requests",
                &big,
                "--max-requests-per-connection",
                &big,
            ])
            .args(["--idle-timeout", "1h"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn custodian node"),
    );
    let pid = node.0.id();
    for _ in 0..500 {
        if UnixStream::connect(&socket).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut c = Conn::connect(&socket);
    println!(
        "node_open_requests: {BIN}; nproc={}, load {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );

    // 1. Launch latency at 10 and at `open_n` open requests, alternating.
    c.call(&open("bench"), "workspace_opened");
    let few: Vec<String> = (0..10).map(|i| format!("few-{i}")).collect();
    c.each("open_workspace", &few, "workspace_opened");
    let many: Vec<String> = (10..open_n).map(|i| format!("many-{i}")).collect();
    launch_p50(&mut c, "bench", 20); // warm-up
    let (mut small, mut large) = (Vec::new(), Vec::new());
    let (mut small_fds, mut large_fds) = (0, 0);
    for round in 0..rounds {
        small_fds = fds(pid);
        small.push(launch_p50(&mut c, "bench", launches).as_secs_f64() * 1e6);
        let t = Instant::now();
        let ids: Vec<String> = many.iter().map(|m| format!("{m}-{round}")).collect();
        c.each("open_workspace", &ids, "workspace_opened");
        let opened = t.elapsed();
        large_fds = fds(pid);
        large.push(launch_p50(&mut c, "bench", launches).as_secs_f64() * 1e6);
        let t = Instant::now();
        c.each("cleanup_workspace", &ids, "cleaned");
        println!(
            "round {round}: p50 {:.0} µs at {} open ({} fds), {:.0} µs at {} open ({} fds); \
             opening {} took {:.0} ms, cleaning them {:.0} ms",
            small[round],
            few.len() + 1,
            small_fds,
            large[round],
            open_n,
            large_fds,
            ids.len(),
            opened.as_secs_f64() * 1e3,
            t.elapsed().as_secs_f64() * 1e3
        );
    }
    let (s, l) = (median(small), median(large));
    println!(
        "launch p50 (median of {rounds} rounds × {launches}): {s:.0} µs with {} open ({small_fds} fds), \
         {l:.0} µs with {open_n} open ({large_fds} fds): {:.3}× (goal ≤ 1.2×)",
        few.len() + 1,
        l / s
    );
    c.each("cleanup_workspace", &few, "cleaned");
    c.call(&cleanup("bench"), "cleaned");

    // 2. Node CPU per full request, and the anchor by hand.
    let node_before = node_cpu(pid);
    let t = Instant::now();
    for i in 0..full {
        let id = format!("full-{i}");
        c.call(&open(&id), "workspace_opened");
        for n in 0..3 {
            c.call(&write(&id, n), "artifact_written");
        }
        c.call(&run_true(&id), "process_finished");
        c.call(&cleanup(&id), "cleaned");
    }
    let node_wall = t.elapsed();
    let node_cpu_used = node_cpu(pid) - node_before;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let scratch = dir.path().join("anchor");
    std::fs::create_dir(&scratch).unwrap();
    let me_before = cpu::cpu_self();
    let t = Instant::now();
    rt.block_on(async {
        for i in 0..full {
            let job = scratch.join(format!("full-{i}"));
            tokio::fs::create_dir(&job).await.unwrap();
            for n in 0..3 {
                tokio::fs::write(job.join(format!("a{n}.txt")), format!("artifact {n}"))
                    .await
                    .unwrap();
            }
            let out = tokio::process::Command::new("/bin/true")
                .output()
                .await
                .unwrap();
            assert!(out.status.success());
            tokio::fs::remove_dir_all(&job).await.unwrap();
        }
    });
    let anchor_wall = t.elapsed();
    let anchor_cpu = cpu::cpu_self() - me_before;
    let per = |d: Duration| d.as_secs_f64() * 1e6 / full as f64;
    println!(
        "full request, one at a time ({full}): node cpu {:.0} µs/request (wall {:.0} µs); \
         anchor by hand cpu {:.0} µs/request (wall {:.0} µs): node cpu {:.2}× the anchor's",
        per(node_cpu_used),
        per(node_wall),
        per(anchor_cpu),
        per(anchor_wall),
        node_cpu_used.as_secs_f64() / anchor_cpu.as_secs_f64()
    );
    drop(c);
    drop(node);
}

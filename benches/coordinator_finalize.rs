//! Coordinator finalization: throughput and per-request cost of driving a
//! request from start to its published completion, with a no-op workspace
//! lifecycle, at 1, 100 and 10 000 concurrent requests on a 2-worker tokio
//! runtime; then the same with the cleanup going through the wire client to
//! a node handler over an in-memory duplex.
//!
//! Every request opens its workspace (so the one cleanup runs), reports a
//! success and is awaited by its caller. The anchor, measured in the same
//! run, is the bare tokio floor of the same shape: a task per request that
//! spawns the three action tasks the coordinator spawns and completes a
//! oneshot.
//!
//! Per request the table gives the wall time (the latency at 1 in flight,
//! the inverse throughput above) and the CPU time this process spent
//! (read from its CPU clock, all threads), each against the anchor's, as
//! medians over seven interleaved blocks; the coordinator's overhead is the
//! median of the per-block CPU differences to the anchor.
//!
//! Run: `cargo bench --bench coordinator_finalize` (prints a table);
//! `COORD_BENCH_WORKERS` changes the worker count from 2.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use custodian::error::SafeCode;
use custodian::machine::request::{Candidate, FinalResult};
use custodian::request::{
    Coordinator, ProcessControl, RequestId, RequestLimits, TerminalSink, TerminalWriteError,
    WorkspaceLifecycle,
};
use custodian::wire::{
    CleanupVerdict, Node, NodeConfig, NodeWorkspace, ProcessSummary, RunSpec, WireClient,
};

struct NoopLifecycle;
impl WorkspaceLifecycle for NoopLifecycle {
    async fn cleanup_workspace(&self, _: &RequestId) -> CleanupVerdict {
        CleanupVerdict::Cleaned
    }
}

struct NoopProcesses;
impl ProcessControl for NoopProcesses {
    async fn cancel_processes(&self, _: &RequestId) {}
}

struct AckSink;
impl TerminalSink for AckSink {
    async fn write_terminal(
        &self,
        _: &RequestId,
        _: &FinalResult,
    ) -> Result<(), TerminalWriteError> {
        Ok(())
    }
}

struct NoopNode;
impl NodeWorkspace for NoopNode {
    type Held = ();
    async fn open(&self, _: &RequestId) -> Result<(), SafeCode> {
        Ok(())
    }
    async fn write_artifact(
        &self,
        _: &RequestId,
        _: &(),
        _: &str,
        c: &[u8],
    ) -> Result<u64, SafeCode> {
        Ok(c.len() as u64)
    }
    async fn run(&self, _: &RequestId, _: &(), _: RunSpec) -> Result<ProcessSummary, SafeCode> {
        Err(SafeCode::new("unsupported"))
    }
    async fn cancel(&self, _: &RequestId, _: Option<&()>) -> u32 {
        0
    }
    async fn cleanup(&self, _: &RequestId) -> CleanupVerdict {
        CleanupVerdict::Cleaned
    }
}

/// Fresh ids for one round: a node refuses to reopen an id it has cleaned,
/// so no id repeats within a run.
fn ids(n: usize, round: usize) -> Vec<RequestId> {
    static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    (0..n)
        .map(|i| RequestId::new(&format!("r{run}-{round}-{i}")).unwrap())
        .collect()
}

/// Wall and CPU time of one measured run.
#[derive(Clone, Copy)]
struct Cost {
    wall: Duration,
    cpu: Duration,
}

fn cpu_now() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

fn measure(rt: &tokio::runtime::Runtime, run: impl std::future::Future<Output = Duration>) -> Cost {
    let cpu = cpu_now();
    let wall = rt.block_on(run);
    Cost {
        wall,
        cpu: cpu_now() - cpu,
    }
}

/// Runs `total` requests, `concurrency` at a time; returns the wall time.
async fn drive<L: WorkspaceLifecycle, P: ProcessControl>(
    co: &Coordinator<L, P, AckSink>,
    wire: Option<&WireClient>,
    concurrency: usize,
    total: usize,
) -> Duration {
    let rounds = total / concurrency;
    let mut all = Vec::with_capacity(rounds);
    for round in 0..rounds {
        all.push(ids(concurrency, round));
    }
    let start = Instant::now();
    for batch in all {
        let mut tasks = Vec::with_capacity(concurrency);
        for id in batch {
            let co = co.clone();
            let wire = wire.cloned();
            tasks.push(tokio::spawn(async move {
                let h = co.start(id);
                h.workspace_opening().await.unwrap();
                if let Some(w) = &wire {
                    w.open_workspace(h.id()).await.unwrap();
                }
                h.candidate(Candidate::Success);
                black_box(h.finished().await)
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    }
    start.elapsed()
}

/// The tokio floor of the same shape, with no machine, log or hooks.
async fn anchor(concurrency: usize, total: usize) -> Duration {
    let rounds = total / concurrency;
    let start = Instant::now();
    for _ in 0..rounds {
        let mut tasks = Vec::with_capacity(concurrency);
        for _ in 0..concurrency {
            tasks.push(tokio::spawn(async move {
                let (tx, rx) = tokio::sync::oneshot::channel::<u64>();
                tokio::spawn(async move {
                    let a = tokio::spawn(async { 1u64 });
                    let b = tokio::spawn(async { 2u64 });
                    let c = tokio::spawn(async { 3u64 });
                    let s = a.await.unwrap() + b.await.unwrap() + c.await.unwrap();
                    let _ = tx.send(s);
                });
                black_box(rx.await.unwrap())
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    }
    start.elapsed()
}

/// Costs per request of one path over the blocks of a size.
#[derive(Default)]
struct Samples {
    wall: Vec<f64>,
    cpu: Vec<f64>,
}

impl Samples {
    fn push(&mut self, c: Cost, requests: usize) {
        self.wall.push(c.wall.as_secs_f64() * 1e6 / requests as f64);
        self.cpu.push(c.cpu.as_secs_f64() * 1e6 / requests as f64);
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn row(label: &str, concurrency: usize, total: usize, c: &Samples, anchor: &Samples) {
    let (wall, cpu) = (median(&c.wall), median(&c.cpu));
    // The overhead is the median of the per-block differences: each block
    // of the path ran right after its anchor block.
    let diffs: Vec<f64> = c.cpu.iter().zip(&anchor.cpu).map(|(c, a)| c - a).collect();
    println!(
        "{label:<8} {concurrency:>11} {total:>9} {:>11.0} {wall:>10.2} {:>10.2} {cpu:>10.2} {:>10.2} {:>10.2}",
        1e6 / wall,
        median(&anchor.wall),
        median(&anchor.cpu),
        median(&diffs),
    );
}

fn main() {
    let workers = std::env::var("COORD_BENCH_WORKERS")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(2);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap();
    let limits = RequestLimits::default();
    let direct = Coordinator::new(
        Arc::new(NoopLifecycle),
        Arc::new(NoopProcesses),
        Arc::new(AckSink),
        limits,
    );
    let (wire_co, client) = rt.block_on(async {
        let node = Node::new(
            NoopNode,
            NodeConfig {
                max_in_flight: 20_000,
                // Up to 10,000 requests open at once on this one connection.
                max_open_requests: 20_000,
                max_open_per_connection: 20_000,
                ..NodeConfig::default()
            },
        );
        let (edge, node_io) = tokio::io::duplex(1 << 20);
        tokio::spawn(async move { node.serve_to_end(node_io).await });
        let client = WireClient::new(edge, custodian::wire::DEFAULT_MAX_FRAME);
        let co = Coordinator::new(
            Arc::new(client.clone()),
            Arc::new(NoopProcesses),
            Arc::new(AckSink),
            limits,
        );
        (co, client)
    });
    println!("{workers} worker threads; times in µs per request");
    println!(
        "{:<8} {:>11} {:>9} {:>11} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "path",
        "concurrency",
        "requests",
        "requests/s",
        "wall",
        "anchor",
        "cpu",
        "anchor",
        "overhead"
    );
    // Each size runs BLOCKS rounds of anchor, direct and wire blocks in
    // turn, so that drift in the machine's load hits all three alike; the
    // table gives medians over the blocks.
    const BLOCKS: usize = 7;
    for (concurrency, block) in [(1, 4_000), (100, 20_000), (10_000, 20_000)] {
        // Warm up allocators and the runtime once per size.
        rt.block_on(drive(&direct, None, concurrency, concurrency.max(1000)));
        let (mut a, mut d, mut w) = (Samples::default(), Samples::default(), Samples::default());
        for _ in 0..BLOCKS {
            a.push(measure(&rt, anchor(concurrency, block)), block);
            d.push(
                measure(&rt, drive(&direct, None, concurrency, block)),
                block,
            );
            w.push(
                measure(&rt, drive(&wire_co, Some(&client), concurrency, block)),
                block,
            );
        }
        row("direct", concurrency, block * BLOCKS, &d, &a);
        row("wire", concurrency, block * BLOCKS, &w, &a);
    }
}

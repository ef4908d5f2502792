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
//! Run: `cargo bench --bench coordinator_finalize` (prints a table).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use custodian::coordinator::{
    Coordinator, Limits, ProcessControl, RequestId, TerminalSink, TerminalWriteError,
    WorkspaceLifecycle,
};
use custodian::error::SafeCode;
use custodian::machine::request::{Candidate, CleanupResult, FinalResult};
use custodian::wire::{
    CleanupVerdict, Node, NodeConfig, NodeWorkspace, ProcessSummary, RunSpec, WireClient,
};

struct NoopLifecycle;
impl WorkspaceLifecycle for NoopLifecycle {
    async fn cleanup_workspace(&self, _: &RequestId) -> CleanupResult {
        CleanupResult::Ok
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
    async fn open(&self, _: &RequestId) -> Result<(), SafeCode> {
        Ok(())
    }
    async fn write_artifact(&self, _: &RequestId, _: &str, c: &[u8]) -> Result<u64, SafeCode> {
        Ok(c.len() as u64)
    }
    async fn run(&self, _: &RequestId, _: RunSpec) -> Result<ProcessSummary, SafeCode> {
        Err(SafeCode::new("unsupported"))
    }
    async fn cancel(&self, _: &RequestId) -> u32 {
        0
    }
    async fn cleanup(&self, _: &RequestId) -> CleanupVerdict {
        CleanupVerdict::Cleaned
    }
}

fn ids(n: usize, round: usize) -> Vec<RequestId> {
    (0..n)
        .map(|i| RequestId::new(&format!("r{round}-{i}")).unwrap())
        .collect()
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
                if let Some(w) = &wire {
                    w.open_workspace(h.id()).await.unwrap();
                }
                h.workspace_opened().await.unwrap();
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

fn row(label: &str, concurrency: usize, total: usize, wall: Duration, anchor: Duration) {
    let per = wall.as_secs_f64() * 1e6 / total as f64;
    let per_anchor = anchor.as_secs_f64() * 1e6 / total as f64;
    println!(
        "{label:<10} {concurrency:>11} {total:>9} {:>12.0} {per:>12.2} {:>12.2} {:>14.2}",
        total as f64 / wall.as_secs_f64(),
        // Two worker threads: CPU time spent per request.
        per * 2.0,
        per_anchor,
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
    let limits = Limits::default();
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
    println!(
        "{:<10} {:>11} {:>9} {:>12} {:>12} {:>12} {:>14}",
        "path",
        "concurrency",
        "requests",
        "requests/s",
        "wall µs/req",
        "cpu µs/req",
        "anchor µs/req"
    );
    for (concurrency, total) in [(1, 20_000), (100, 100_000), (10_000, 100_000)] {
        // Warm up allocators and the runtime once per size.
        rt.block_on(drive(&direct, None, concurrency, concurrency.max(1000)));
        let a = rt.block_on(anchor(concurrency, total));
        let d = rt.block_on(drive(&direct, None, concurrency, total));
        row("direct", concurrency, total, d, a);
        let w = rt.block_on(drive(&wire_co, Some(&client), concurrency, total));
        row("wire", concurrency, total, w, a);
    }
}

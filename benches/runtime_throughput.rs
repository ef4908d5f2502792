//! The embedder's facade end to end: requests per second through
//! `custodian::Runtime`, each request opening its job namespace, writing
//! three small artifacts, running `/bin/true` as a governed process,
//! reporting success and being cleaned up, at 1, 100 and 1 000 requests in
//! flight on a 2-worker tokio runtime.
//!
//! The anchor, measured in the same run, is the same work done by hand with
//! std + tokio and no guarantees: `create_dir`, three `write`s,
//! `Command::output` of `/bin/true`, `remove_dir_all` (tokio's `fs` and
//! `process`). The facade also runs the same requests with
//! `Containment::Group` (no cgroup per process or request), to separate the
//! cgroup tier's cost from the rest.
//!
//! Each size runs BLOCKS rounds of an anchor block and the facade blocks in
//! turn, so that drift in the machine's load hits all alike; the table gives
//! medians over the blocks of the wall time per request (its inverse is the
//! throughput) and of this process's CPU time per request (all threads;
//! children's CPU is not included).
//!
//! Run: `cargo bench --bench runtime_throughput` (prints a table);
//! `RUNTIME_BENCH_WORKERS` changes the worker count from 2,
//! `RUNTIME_BENCH_BLOCKS` the rounds from 5; `RUNTIME_BENCH_ONLY` set to
//! `anchor`, `facade` or `group` runs only that path (for profiling) and
//! `RUNTIME_BENCH_SIZES` (e.g. `100`) only those in-flight counts.
//! Everything it creates lives in a temporary directory of its own.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use custodian::prelude::*;

static NEXT: AtomicUsize = AtomicUsize::new(0);

fn fresh_id() -> RequestId {
    RequestId::new(&format!("r{}", NEXT.fetch_add(1, Ordering::Relaxed))).unwrap()
}

fn cpu_now() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Wall and CPU time of one block.
#[derive(Clone, Copy)]
struct Cost {
    wall: Duration,
    cpu: Duration,
}

fn measure(rt: &tokio::runtime::Runtime, run: impl std::future::Future<Output = ()>) -> Cost {
    let cpu = cpu_now();
    let start = Instant::now();
    rt.block_on(run);
    Cost {
        wall: start.elapsed(),
        cpu: cpu_now() - cpu,
    }
}

const ARTIFACTS: [&str; 3] = ["a.txt", "b.txt", "c.txt"];
const CONTENTS: &[u8] = b"a small artifact\n";

/// One request through the facade; panics unless it succeeded clean.
async fn facade_request(runtime: Runtime) {
    let request = runtime.start(fresh_id()).unwrap();
    let executor = request.executor();
    executor.open_workspace().await.unwrap();
    for name in ARTIFACTS {
        executor.write_artifact(name, CONTENTS).await.unwrap();
    }
    let ev = executor
        .run(Invocation::validate(InvocationSpec::new("/bin/true")).unwrap())
        .await
        .unwrap();
    assert_eq!(ev.exit_code, Some(0));
    executor.succeed();
    let c = request.finished().await;
    assert_eq!(c.result.status(), RequestStatus::Succeeded);
    assert_eq!(c.cleanup.map(|r| r.counts.files_removed), Some(3));
}

/// The same work by hand: no inventory, no journal, no containment, no
/// verdict, no coordinator.
async fn anchor_request(base: PathBuf) {
    let dir = base.join(format!("a{}", NEXT.fetch_add(1, Ordering::Relaxed)));
    tokio::fs::create_dir(&dir).await.unwrap();
    for name in ARTIFACTS {
        tokio::fs::write(dir.join(name), CONTENTS).await.unwrap();
    }
    let out = tokio::process::Command::new("/bin/true")
        .current_dir(&base)
        .output()
        .await
        .unwrap();
    assert!(out.status.success());
    tokio::fs::remove_dir_all(&dir).await.unwrap();
}

/// Runs `total` requests of `one`, `concurrency` at a time.
async fn drive<F, Fut>(concurrency: usize, total: usize, one: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    for _ in 0..total / concurrency {
        let tasks: Vec<_> = (0..concurrency).map(|_| tokio::spawn(one())).collect();
        for t in tasks {
            t.await.unwrap();
        }
    }
}

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

/// The median, or NaN for no samples (a path left out by `RUNTIME_BENCH_ONLY`).
fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn row(label: &str, concurrency: usize, total: usize, s: &Samples, anchor: &Samples) {
    let wall = median(&s.wall);
    // The ratio of each block to the anchor block run just before it.
    let ratios: Vec<f64> = s
        .wall
        .iter()
        .zip(&anchor.wall)
        .map(|(w, a)| a / w)
        .collect();
    println!(
        "{label:<14} {concurrency:>11} {total:>9} {:>11.0} {wall:>10.0} {:>10.0} {:>8.2}",
        1e6 / wall,
        median(&s.cpu),
        median(&ratios),
    );
}

fn runtime_at(root: &Path, containment: Containment) -> Runtime {
    std::fs::create_dir_all(root).unwrap();
    Runtime::open(RuntimeConfig::new(root).with_containment(containment)).unwrap()
}

fn main() {
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let workers = env("RUNTIME_BENCH_WORKERS", 2);
    let only = std::env::var("RUNTIME_BENCH_ONLY").ok();
    let runs = |path: &str| only.as_deref().is_none_or(|o| o == path);
    let sizes: Option<Vec<usize>> = std::env::var("RUNTIME_BENCH_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect());
    let blocks = env("RUNTIME_BENCH_BLOCKS", 5);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let anchor_base = scratch.path().join("anchor");
    std::fs::create_dir(&anchor_base).unwrap();
    let (auto, group) = rt.block_on(async {
        (
            runtime_at(&scratch.path().join("auto"), Containment::Auto),
            runtime_at(&scratch.path().join("group"), Containment::Group),
        )
    });
    println!(
        "{workers} worker threads; wall and cpu in µs per request; vs anchor = path req/s ÷ anchor req/s (per block, median)"
    );
    println!(
        "{:<14} {:>11} {:>9} {:>11} {:>10} {:>10} {:>8}",
        "path", "concurrency", "requests", "requests/s", "wall", "cpu", "vs anchor"
    );
    for (concurrency, block) in [(1, 60), (100, 500), (1_000, 1_000)] {
        if sizes.as_ref().is_some_and(|s| !s.contains(&concurrency)) {
            continue;
        }
        // Warm up: the cgroup base, allocators, the blocking pool.
        if runs("facade") || runs("group") {
            rt.block_on(drive(concurrency, concurrency, || {
                facade_request(auto.clone())
            }));
        }
        let (mut a, mut f, mut g) = (Samples::default(), Samples::default(), Samples::default());
        for _ in 0..blocks {
            let base = anchor_base.clone();
            if runs("anchor") {
                a.push(
                    measure(
                        &rt,
                        drive(concurrency, block, || anchor_request(base.clone())),
                    ),
                    block,
                );
            }
            if runs("facade") {
                f.push(
                    measure(
                        &rt,
                        drive(concurrency, block, || facade_request(auto.clone())),
                    ),
                    block,
                );
            }
            if runs("group") {
                g.push(
                    measure(
                        &rt,
                        drive(concurrency, block, || facade_request(group.clone())),
                    ),
                    block,
                );
            }
        }
        let total = block * blocks;
        for (label, path, s) in [
            ("anchor", "anchor", &a),
            ("facade", "facade", &f),
            ("facade (group)", "group", &g),
        ] {
            if runs(path) {
                row(label, concurrency, total, s, &a);
            }
        }
    }
    rt.block_on(async {
        auto.shutdown().await;
        group.shutdown().await;
    });
}

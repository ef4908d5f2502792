//! `write_artifact` throughput: 4 KiB artifacts written through the node's
//! workspace adapter (`WorkspaceNode::write_artifact`: create the registered
//! file with `O_CREAT | O_EXCL`, write it), 2,000 per round into one job.
//!
//! The ownership journal adds two appends per artifact (intent, identity).
//! Its cost is measured by running this same bench on the commit before the
//! journal and on the current one (see `docs/performance.md`).
//!
//! ```text
//! cargo bench --bench workspace_write
//! ```
//!
//! `WORKSPACE_BENCH_DIR` chooses the filesystem (default: the temp dir);
//! `WORKSPACE_BENCH_ROUNDS` the number of rounds (default 9).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use custodian::process::LaunchOptions;
use custodian::request::RequestId;
use custodian::wire::{NodeWorkspace, WorkspaceNode};
use custodian::workspace::{Workspace, WorkspaceConfig};

const ARTIFACTS: usize = 2_000;
const SIZE: usize = 4096;

fn base() -> PathBuf {
    std::env::var_os("WORKSPACE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

fn main() {
    let rounds: usize = std::env::var("WORKSPACE_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(9);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let tmp = tempfile::tempdir_in(base()).unwrap();
    let root = tmp.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let ws = Workspace::open(&root, WorkspaceConfig::default()).unwrap();
    let node = WorkspaceNode::new(ws, LaunchOptions::new(&root), Duration::from_secs(10));
    let payload = vec![b'x'; SIZE];
    let mut times = Vec::new();
    for round in 0..rounds {
        let id = RequestId::new(&format!("bench-{round}")).unwrap();
        let took = rt.block_on(async {
            let scope = node.open(&id).await.unwrap();
            let start = Instant::now();
            for i in 0..ARTIFACTS {
                node.write_artifact(&id, &scope, &format!("a{i:05}"), &payload)
                    .await
                    .unwrap();
            }
            let took = start.elapsed();
            node.cleanup(&id).await;
            took
        });
        times.push(took);
    }
    times.sort();
    let median = times[times.len() / 2];
    let per_s = ARTIFACTS as f64 / median.as_secs_f64();
    println!(
        "write_artifact 4 KiB x {ARTIFACTS}: median {:.1} ms over {rounds} rounds, {per_s:.0} artifacts/s ({:.1} us each)",
        median.as_secs_f64() * 1e3,
        median.as_secs_f64() * 1e6 / ARTIFACTS as f64
    );
}

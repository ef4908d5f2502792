//! Workspace cleanup against `rm -rf` and `std::fs::remove_dir_all`.
//!
//! 10,000 registered files in 100 registered directories (100 each), removed
//! by custodian's verified, descriptor-relative cleanup; an identical plain
//! tree removed by `rm -rf` and by `std::fs::remove_dir_all`, in the same run
//! and on the same filesystem. Prints a table of medians and the ratios.
//!
//! ```text
//! cargo bench --bench workspace_cleanup                 # compare (default)
//! cargo bench --bench workspace_cleanup -- custodian-build   # for strace: build only
//! cargo bench --bench workspace_cleanup -- custodian          # for strace: build + cleanup
//! cargo bench --bench workspace_cleanup -- std                # for strace: build + remove_dir_all
//! ```
//!
//! `WORKSPACE_BENCH_DIR` chooses the filesystem (default: the temp dir);
//! `WORKSPACE_BENCH_ROUNDS` the number of rounds (default 7).

// `getrusage(RUSAGE_CHILDREN)` for the CPU time of `rm -rf`.
#![allow(unsafe_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use custodian::workspace::{Job, Workspace, WorkspaceConfig};

#[path = "support/cpu.rs"]
mod cpu;
use cpu::{cpu_children, cpu_self};

const DIRS: usize = 100;
const FILES_PER_DIR: usize = 100;

fn base() -> PathBuf {
    std::env::var_os("WORKSPACE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

fn build_job(job: &Job) {
    let root = job.root().unwrap();
    for d in 0..DIRS {
        let dir = root.create_dir(&format!("dir{d:03}")).unwrap();
        for f in 0..FILES_PER_DIR {
            dir.create_file(&format!("file{f:03}.txt")).unwrap();
        }
    }
}

fn build_plain(at: &Path) {
    fs::create_dir(at).unwrap();
    for d in 0..DIRS {
        let dir = at.join(format!("dir{d:03}"));
        fs::create_dir(&dir).unwrap();
        for f in 0..FILES_PER_DIR {
            fs::File::create(dir.join(format!("file{f:03}.txt"))).unwrap();
        }
    }
}

/// Wall and CPU time of one removal.
#[derive(Clone, Copy)]
struct Took {
    wall: Duration,
    cpu: Duration,
}

fn sync_fs() {
    // Same dirty state before every timed removal.
    rustix::fs::sync();
}

fn custodian_round(rt: &tokio::runtime::Runtime, ws: &Workspace, id: &str) -> Took {
    let job = ws.open_request(id).unwrap();
    build_job(&job);
    sync_fs();
    let c = cpu_self();
    let t = Instant::now();
    let r = rt.block_on(job.cleanup());
    let wall = t.elapsed();
    let cpu = cpu_self() - c;
    assert!(r.is_clean(), "{r:?}");
    assert_eq!(r.counts.files_removed as usize, DIRS * FILES_PER_DIR);
    Took { wall, cpu }
}

fn rm_rf_round(at: &Path) -> Took {
    build_plain(at);
    sync_fs();
    let c = cpu_children();
    let t = Instant::now();
    let ok = Command::new("rm")
        .arg("-rf")
        .arg(at)
        .status()
        .unwrap()
        .success();
    let wall = t.elapsed();
    let cpu = cpu_children() - c;
    assert!(ok && !at.exists());
    Took { wall, cpu }
}

fn std_round(at: &Path) -> Took {
    build_plain(at);
    sync_fs();
    let c = cpu_self();
    let t = Instant::now();
    fs::remove_dir_all(at).unwrap();
    let wall = t.elapsed();
    Took {
        wall,
        cpu: cpu_self() - c,
    }
}

/// `/proc/loadavg`'s three averages: wall ratios mean little on a busy
/// machine, so the table says how busy it was.
fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Medians of the wall and of the CPU times.
fn median(v: &[Took]) -> Took {
    let mid = |mut d: Vec<Duration>| {
        d.sort();
        d[d.len() / 2]
    };
    Took {
        wall: mid(v.iter().map(|t| t.wall).collect()),
        cpu: mid(v.iter().map(|t| t.cpu).collect()),
    }
}

fn main() {
    let mode = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_else(|| "compare".into());
    let tmp = tempfile::tempdir_in(base()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let ws = Workspace::open(tmp.path(), WorkspaceConfig::default()).unwrap();
    match mode.as_str() {
        "custodian-build" => {
            let job = ws.open_request("bench").unwrap();
            build_job(&job);
        }
        "custodian" => {
            custodian_round(&rt, &ws, "bench");
        }
        "std" => {
            std_round(&tmp.path().join("plain"));
        }
        "compare" => {
            let load_before = loadavg();
            let rounds: usize = std::env::var("WORKSPACE_BENCH_ROUNDS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(7);
            let (mut c, mut r, mut s) = (Vec::new(), Vec::new(), Vec::new());
            for i in 0..rounds {
                // Interleaved so drift on a shared machine hits all three.
                c.push(custodian_round(&rt, &ws, &format!("bench-{i}")));
                r.push(rm_rf_round(&tmp.path().join(format!("rm-{i}"))));
                s.push(std_round(&tmp.path().join(format!("std-{i}"))));
            }
            let (c, r, s) = (median(&c), median(&r), median(&s));
            let n = (DIRS * FILES_PER_DIR + DIRS + 1) as f64;
            println!(
                "workspace cleanup: {DIRS} dirs x {FILES_PER_DIR} files in {}, {rounds} rounds, median",
                base().display()
            );
            println!(
                "load average (1/5/15 min) before: {load_before}, after: {}",
                loadavg()
            );
            println!(
                "{:<32} {:>10} {:>12} {:>10} {:>8} {:>10}",
                "remover", "wall ms", "us/artifact", "vs rm -rf", "cpu ms", "vs rm -rf"
            );
            for (name, d) in [
                ("custodian cleanup (verified)", c),
                ("rm -rf (incl. fork+exec)", r),
                ("std::fs::remove_dir_all", s),
            ] {
                println!(
                    "{:<32} {:>10.2} {:>12.2} {:>9.2}x {:>8.1} {:>9.2}x",
                    name,
                    d.wall.as_secs_f64() * 1e3,
                    d.wall.as_secs_f64() * 1e6 / n,
                    d.wall.as_secs_f64() / r.wall.as_secs_f64(),
                    d.cpu.as_secs_f64() * 1e3,
                    d.cpu.as_secs_f64() / r.cpu.as_secs_f64()
                );
            }
        }
        other => {
            eprintln!("unknown mode {other:?}: compare | custodian | custodian-build | std");
            std::process::exit(2);
        }
    }
}

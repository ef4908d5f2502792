//! Launch cost against the size of the launching process's descriptor
//! table: `/bin/true` through custodian and through
//! `tokio::process::Command::output()`, each from a table of a few
//! descriptors and from one of `CUSTODIAN_BENCH_FDS` (default 5000) open
//! descriptors, in alternating blocks of rounds (the large table is opened
//! before its block and closed after it; that time is not measured), and
//! custodian from the large table with its hand-off turned off (the plain
//! copy it saves).
//!
//! Run: `cargo bench -p custodian --bench process_fd_table`
//!
//! A fork or `posix_spawn` copies the whole table into the child and the
//! child's `execve` closes it again; custodian's spawner hands a child from a
//! large table a small one of its own (`CLONE_FILES`, then the child's first
//! system call unshares a copy of only a few low slots). The goal (issue:
//! the node at 5,000 open requests): custodian's launch from the large
//! table at most 1.2× its launch from the small one, in the same run.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use custodian::contain::Containment;
use custodian::process::{Invocation, InvocationSpec, LaunchOptions};

const ROUNDS: usize = 300;

fn p(v: &mut [Duration], q: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 * q) as usize).min(v.len() - 1)]
}

fn custodian_once(rt: &tokio::runtime::Runtime, opts: &LaunchOptions) -> Duration {
    let inv = Invocation::validate(InvocationSpec::new("/bin/true")).unwrap();
    let t = Instant::now();
    let ev = rt.block_on(async {
        custodian::process::launch(inv, opts)
            .unwrap()
            .settled()
            .await
    });
    let took = t.elapsed();
    assert_eq!(ev.exit_code, Some(0));
    took
}

fn tokio_once(rt: &tokio::runtime::Runtime) -> Duration {
    let t = Instant::now();
    let out = rt
        .block_on(async { tokio::process::Command::new("/bin/true").output().await })
        .unwrap();
    let took = t.elapsed();
    assert!(out.status.success());
    took
}

fn open_many(n: usize) -> Vec<OwnedFd> {
    (0..n)
        .map(|_| {
            rustix::fs::open(
                "/dev/null",
                rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .unwrap()
        })
        .collect()
}

fn main() {
    let fds: usize = std::env::var("CUSTODIAN_BENCH_FDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    // Room for the large table.
    let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let want = (fds as u64 + 256).min(lim.maximum.unwrap_or(u64::MAX));
    rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: Some(want),
            maximum: lim.maximum,
        },
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // `auto`: the cgroup tier where a cgroup can be made (root, or a
    // delegated hierarchy), else the pid-namespace tier: both start the
    // child with the clone3 spawner, whose hand-off this measures. (The
    // group tier starts it with std's `posix_spawn`, which copies the
    // table like tokio's.)
    let dir = tempfile::tempdir().unwrap();
    let opts = LaunchOptions::new(dir.path()).with_containment(Containment::Auto);
    let mut rows: [(&str, Vec<Duration>); 5] = [
        ("custodian, small table", Vec::new()),
        ("custodian, large table", Vec::new()),
        ("tokio output, small table", Vec::new()),
        ("tokio output, large table", Vec::new()),
        ("custodian, large, no hand-off", Vec::new()),
    ];
    for _ in 0..20 {
        custodian_once(&rt, &opts);
        tokio_once(&rt);
    }
    // Blocks of rounds alternate between the two tables (opening and
    // closing thousands of descriptors disturbs the caches: per block, not
    // per launch); within a round the spawners rotate.
    let blocks = 6;
    let per_block = ROUNDS / (blocks / 2);
    for block in 0..blocks {
        let large = block % 2 == 1;
        let held = if large { open_many(fds) } else { Vec::new() };
        let base = usize::from(large);
        for round in 0..per_block {
            for k in 0..3 {
                match (round + k) % 3 {
                    0 => rows[base].1.push(custodian_once(&rt, &opts)),
                    1 => rows[base + 2].1.push(tokio_once(&rt)),
                    _ if large => {
                        // The plain copy the hand-off saves.
                        custodian::__bench::set_fd_handoff(false);
                        rows[4].1.push(custodian_once(&rt, &opts));
                        custodian::__bench::set_fd_handoff(true);
                    }
                    _ => {}
                }
            }
        }
        drop(held);
    }
    println!("launch + settle of /bin/true, {ROUNDS} rounds, large table = {fds} open descriptors");
    println!("{:<28} {:>10} {:>10} {:>10}", "", "p50", "p90", "p99");
    let mut p50 = [Duration::ZERO; 5];
    for (i, (name, v)) in rows.iter_mut().enumerate() {
        p50[i] = p(v, 0.5);
        println!(
            "{name:<28} {:>8.0}µs {:>8.0}µs {:>8.0}µs",
            p50[i].as_secs_f64() * 1e6,
            p(v, 0.9).as_secs_f64() * 1e6,
            p(v, 0.99).as_secs_f64() * 1e6
        );
    }
    println!(
        "p50 large/small: custodian {:.2}x (goal <= 1.20x), without the hand-off {:.2}x, tokio {:.2}x",
        p50[1].as_secs_f64() / p50[0].as_secs_f64(),
        p50[4].as_secs_f64() / p50[0].as_secs_f64(),
        p50[3].as_secs_f64() / p50[2].as_secs_f64()
    );
}

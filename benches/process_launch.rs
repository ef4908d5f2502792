//! Launch cost: 200 rounds of `/bin/true` through custodian vs
//! `tokio::process::Command::output()` vs `std::process::Command::output()`,
//! then the same while this process holds ~2 GiB of touched memory, against
//! a spawner that is forced onto std's fork path.
//!
//! Run: `cargo bench -p custodian --bench process_launch`
//! (`CUSTODIAN_BENCH_HOLD_MIB` overrides the held memory, default 2048).
//!
//! The fork-path anchor: std uses `posix_spawn` (vfork-like, cost
//! independent of the parent's size) unless the command needs something it
//! cannot express. A `pre_exec` hook is one such thing, but needs `unsafe`;
//! setting `PATH` in the child's environment while naming the program
//! without a slash is another (std must then search the *child's* PATH
//! itself after `fork`), and takes no `unsafe`. Both force `fork`, whose
//! cost grows with the parent's page tables.

use std::time::{Duration, Instant};

use custodian::process::{Invocation, InvocationSpec, LaunchOptions};

const N: usize = 200;

fn stats(mut v: Vec<Duration>) -> (Duration, Duration, Duration) {
    v.sort();
    let total: Duration = v.iter().sum();
    (total, v[v.len() / 2], v[v.len() * 95 / 100])
}

/// Runs every spawner once per round, `N` rounds, so that drift in the
/// machine's load hits all of them alike; returns each one's samples.
fn interleaved(spawners: &mut [&mut dyn FnMut()]) -> Vec<Vec<Duration>> {
    for f in spawners.iter_mut() {
        f(); // warm-up
    }
    let mut samples = vec![Vec::with_capacity(N); spawners.len()];
    for round in 0..N {
        // Rotate the starting spawner so none always runs first.
        for k in 0..spawners.len() {
            let i = (round + k) % spawners.len();
            let t = Instant::now();
            (spawners[i])();
            samples[i].push(t.elapsed());
        }
    }
    samples
}

struct Row {
    name: &'static str,
    samples: Vec<Duration>,
}

fn print(title: &str, rows: &[Row], anchor: &str) {
    let anchor_total = stats(
        rows.iter()
            .find(|r| r.name == anchor)
            .expect("anchor row")
            .samples
            .clone(),
    )
    .0;
    println!("\n{title} ({N} sequential launches of /bin/true)");
    println!(
        "{:<34} {:>10} {:>10} {:>10} {:>12}",
        "spawner", "total ms", "p50 us", "p95 us", "vs anchor"
    );
    for r in rows {
        let (total, p50, p95) = stats(r.samples.clone());
        println!(
            "{:<34} {:>10.1} {:>10.0} {:>10.0} {:>11.3}x",
            r.name,
            total.as_secs_f64() * 1e3,
            p50.as_secs_f64() * 1e6,
            p95.as_secs_f64() * 1e6,
            total.as_secs_f64() / anchor_total.as_secs_f64()
        );
    }
}

/// One launch through custodian, recording the breakdown.
fn custodian_once(rt: &tokio::runtime::Runtime, opts: &LaunchOptions, parts: &mut Breakdown) {
    let inv = Invocation::validate(InvocationSpec::new("/bin/true")).unwrap();
    let ev = rt.block_on(async {
        let t = Instant::now();
        let running = custodian::process::launch(inv, opts).unwrap();
        parts.launch.push(t.elapsed().as_secs_f64() * 1e6);
        running.settled().await
    });
    assert_eq!(ev.exit_code, Some(0));
    let exit = ev.timings.root_exit_us.unwrap();
    parts.exit.push(exit as f64);
    parts.settle.push((ev.timings.settled_us - exit) as f64);
}

#[derive(Default)]
struct Breakdown {
    launch: Vec<f64>,
    exit: Vec<f64>,
    settle: Vec<f64>,
}

impl Breakdown {
    fn print(mut self) {
        let p50 = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "custodian breakdown p50: launch() {:.0} us, start→root exit {:.0} us, root exit→settled {:.0} us",
            p50(&mut self.launch),
            p50(&mut self.exit),
            p50(&mut self.settle)
        );
    }
}

fn tokio_once(rt: &tokio::runtime::Runtime) {
    // `output()` spawns eagerly: call it inside the runtime.
    let out = rt
        .block_on(async { tokio::process::Command::new("/bin/true").output().await })
        .unwrap();
    assert!(out.status.success());
}

fn std_once() {
    let out = std::process::Command::new("/bin/true").output().unwrap();
    assert!(out.status.success());
}

fn fork_once() {
    let out = std::process::Command::new("true")
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    assert!(out.status.success());
}

fn measure(rt: &tokio::runtime::Runtime, opts: &LaunchOptions) -> Vec<Row> {
    let mut parts = Breakdown::default();
    let samples = interleaved(&mut [
        &mut || custodian_once(rt, opts, &mut parts),
        &mut || tokio_once(rt),
        &mut std_once,
        &mut fork_once,
    ]);
    parts.print();
    let names = [
        "custodian::process::run",
        "tokio Command::output",
        "std Command::output",
        "std, forced fork (PATH + bare name)",
    ];
    names
        .into_iter()
        .zip(samples)
        .map(|(name, samples)| Row { name, samples })
        .collect()
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing
    // useful either: this is a plain main.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let opts = LaunchOptions::new(std::env::temp_dir());

    let processes = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
            })
            .count()
        })
        .unwrap_or(0);
    println!("{processes} processes on the machine (the group probe scans them all)");
    let rows = measure(&rt, &opts);
    print("Small parent", &rows, "tokio Command::output");

    let mib: usize = std::env::var("CUSTODIAN_BENCH_HOLD_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2048);
    let mut held = vec![0u8; mib << 20];
    // Touch every page so it is resident and mapped in the page tables.
    for page in held.chunks_mut(4096) {
        page[0] = 1;
    }
    let rows = measure(&rt, &opts);
    print(
        &format!("Parent holding {mib} MiB of touched memory"),
        &rows,
        "std, forced fork (PATH + bare name)",
    );
    println!(
        "(held checksum {})",
        held.iter().step_by(4096).map(|&b| b as u64).sum::<u64>()
    );
}

//! Deadline → settled latency, read from the evidence's own monotonic
//! timings: for a TERM-respecting child, settled − timeout; for a
//! TERM-ignoring one, settled − (timeout + grace), i.e. the time spent
//! beyond the grace. Goal: ≤ 5 ms p50.
//!
//! Run: `cargo bench -p custodian --bench process_deadline`

use std::time::Duration;

use custodian::contain::Containment;
use custodian::process::invocation::Tunables;
use custodian::process::{Invocation, InvocationSpec, LaunchOptions};

const N: usize = 30;
const TIMEOUT: Duration = Duration::from_millis(50);
const GRACE: Duration = Duration::from_millis(100);

fn pct(v: &mut [f64], p: usize) -> f64 {
    v.sort_by(f64::total_cmp);
    v[(v.len() - 1) * p / 100]
}

fn measure(
    rt: &tokio::runtime::Runtime,
    opts: &LaunchOptions,
    args: &[&str],
    expect_kill: bool,
) -> (Vec<f64>, Vec<f64>) {
    let mut beyond = Vec::new();
    let mut term_lag = Vec::new();
    for _ in 0..N {
        let spec = InvocationSpec::new(args[0])
            .with_args(args[1..].iter().copied())
            .with_timeout(TIMEOUT)
            .with_tunables(Tunables {
                grace: GRACE,
                drain: Duration::from_millis(100),
                hard_margin: Duration::from_millis(500),
            });
        let ev = rt
            .block_on(custodian::process::run(
                Invocation::validate(spec).unwrap(),
                opts,
            ))
            .unwrap();
        assert_eq!(ev.timings.kill_sent_us.is_some(), expect_kill);
        let deadline_us = TIMEOUT.as_micros() as f64;
        let target = if expect_kill {
            deadline_us + GRACE.as_micros() as f64
        } else {
            deadline_us
        };
        beyond.push((ev.timings.settled_us as f64 - target) / 1e3);
        term_lag.push((ev.timings.term_sent_us.unwrap() as f64 - deadline_us) / 1e3);
    }
    (beyond, term_lag)
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!("deadline → settled, {N} runs each, timeout {TIMEOUT:?}, grace {GRACE:?} (ms)");
    println!(
        "load average: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    for containment in [Containment::Auto, Containment::Group] {
        let opts = LaunchOptions::new(std::env::temp_dir()).with_containment(containment);
        let tier = rt
            .block_on(custodian::process::run(
                Invocation::validate(InvocationSpec::new("/bin/true")).unwrap(),
                &opts,
            ))
            .unwrap()
            .descendants
            .tier;
        println!("\ncontainment {containment:?}: tier {tier:?}");
        table(&rt, &opts);
    }
}

fn table(rt: &tokio::runtime::Runtime, opts: &LaunchOptions) {
    println!(
        "{:<44} {:>8} {:>8} {:>8} {:>14}",
        "child", "p50", "p95", "max", "TERM lag p50"
    );
    for (name, args, kill) in [
        (
            "TERM-respecting (sleep 30), settled−deadline",
            &["sleep", "30"][..],
            false,
        ),
        (
            "TERM-ignoring, settled−(deadline+grace)",
            &["sh", "-c", "trap '' TERM; exec sleep 30"][..],
            true,
        ),
    ] {
        let (mut b, mut lag) = measure(rt, opts, args, kill);
        println!(
            "{:<44} {:>8.2} {:>8.2} {:>8.2} {:>14.2}",
            name,
            pct(&mut b, 50),
            pct(&mut b, 95),
            pct(&mut b, 100),
            pct(&mut lag, 50)
        );
    }
}

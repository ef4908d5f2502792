//! 1 GiB flood through a 1 MiB budget: capture throughput vs a raw pipe
//! drain of the same bytes, peak RSS, and `tokio` `output()` (which holds
//! everything) as the reference.
//!
//! Every measurement runs in a fresh child process (this binary re-executed
//! with `--measure MODE`), so its peak RSS (`VmHWM`) belongs to that mode
//! alone. The bytes come from another re-execution (`--generate N`) writing
//! a text pattern with multi-byte characters, so generator cost is equal
//! across modes.
//!
//! Modes:
//! - `raw`: read the pipe into a 64 KiB buffer and drop it;
//! - `capture`: the same reads fed through `StreamCapture::push`
//!   (passthrough redactor, 1 MiB budget), then finished into evidence
//!   form;
//! - `capture_redact`: the same with one 16-byte secret to redact;
//! - `tokio_raw`: a raw drain like `raw`, but with tokio's async pipe
//!   (the I/O path custodian's driver uses);
//! - `custodian`: the whole governed launcher, `custodian::process::run`
//!   with a 1 MiB stdout budget (spawn, driver, capture, evidence);
//! - `tokio_output`: `tokio::process::Command::output()`.
//!
//! `cargo bench --bench process_flood`; `FLOOD_MIB` (default 1024) and
//! `FLOOD_REPS` (default 5) scale it down for a quick run.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use custodian::process::LaunchOptions;
use custodian::process::capture::{StreamCapture, StreamEnd};
use custodian::process::env::{Redactor, SecretValue, Secrets};
use custodian::process::evidence::ProcessStatus;
use custodian::process::invocation::{Invocation, InvocationSpec, OutputBudget};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

const BUDGET: usize = 1 << 20;
const READ_BUF: usize = 64 * 1024;

fn flood_bytes() -> u64 {
    std::env::var("FLOOD_MIB")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(1024)
        << 20
}

fn generate(total: u64) {
    let line = "flood line with ünïcödé → and plain ascii text 0123456789\n".as_bytes();
    let mut block = Vec::with_capacity(1 << 20);
    while block.len() + line.len() <= 1 << 20 {
        block.extend_from_slice(line);
    }
    let mut out = std::io::stdout().lock();
    let mut left = total;
    while left > 0 {
        let n = (block.len() as u64).min(left) as usize;
        if out.write_all(&block[..n]).is_err() {
            return;
        }
        left -= n as u64;
    }
}

fn generator(total: u64) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("own path"));
    cmd.arg("--generate").arg(total.to_string());
    cmd
}

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Nanoseconds this process has spent on a CPU (first field of
/// `/proc/self/schedstat`): the reader's own cost, less sensitive to other
/// load on a shared machine than wall time.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn measure(mode: &str) {
    let total = flood_bytes();
    let cpu_start = cpu_ns();
    let start;
    let mut got: u64 = 0;
    let mut kept: u64 = 0;
    if mode == "tokio_output" {
        let rt = runtime();
        let mut cmd = tokio::process::Command::from(generator(total));
        start = Instant::now();
        let out = rt.block_on(async { cmd.output().await }).expect("output");
        got = out.stdout.len() as u64;
        kept = got;
    } else if mode == "tokio_raw" {
        let rt = runtime();
        let mut cmd = tokio::process::Command::from(generator(total));
        cmd.stdout(Stdio::piped());
        start = Instant::now();
        got = rt.block_on(async {
            use tokio::io::AsyncReadExt;
            let mut child = cmd.spawn().expect("spawn generator");
            let mut pipe = child.stdout.take().expect("stdout");
            let mut buf = vec![0u8; READ_BUF];
            let mut got = 0u64;
            loop {
                match pipe.read(&mut buf).await.expect("read") {
                    0 => break,
                    n => got += n as u64,
                }
            }
            child.wait().await.expect("wait");
            got
        });
    } else if mode == "custodian" {
        let rt = runtime();
        let exe = std::env::current_exe().expect("own path");
        let spec = InvocationSpec::new(exe.to_string_lossy())
            .with_args(["--generate".to_owned(), total.to_string()])
            .with_timeout(Duration::from_secs(600))
            .with_budget(OutputBudget {
                stdout: BUDGET,
                stderr: BUDGET,
            });
        let inv = Invocation::validate(spec).expect("valid");
        let options = LaunchOptions::new(std::env::temp_dir());
        start = Instant::now();
        let evidence = rt
            .block_on(async { custodian::process::run(inv, &options).await })
            .expect("launch");
        assert_eq!(
            evidence.status,
            ProcessStatus::Exited,
            "{}",
            evidence.to_json()
        );
        got = evidence.stdout.bytes_read;
        kept = evidence.stdout.bytes_kept;
        assert!(kept <= BUDGET as u64);
    } else {
        start = Instant::now();
        let mut child = generator(total)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn generator");
        let mut pipe = child.stdout.take().expect("stdout");
        let mut buf = vec![0u8; READ_BUF];
        let redactor = match mode {
            "capture_redact" => Secrets::new(vec![SecretValue::new("s3cr3t-t0ken-xyz")]).redactor(),
            _ => Redactor::passthrough(),
        };
        let mut capture = (mode != "raw").then(|| StreamCapture::new(BUDGET, redactor));
        loop {
            let n = match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => panic!("read: {e}"),
            };
            got += n as u64;
            if let Some(c) = capture.as_mut() {
                c.push(&buf[..n]);
            }
        }
        if let Some(c) = capture {
            let s = c.finish(StreamEnd::Closed);
            assert_eq!(s.bytes_read, total);
            assert!(s.bytes_kept <= BUDGET as u64);
            kept = s.bytes_kept;
        }
        child.wait().expect("wait");
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = cpu_ns().saturating_sub(cpu_start) as f64 / 1e9;
    assert_eq!(got, total, "short read");
    println!("{got} {secs} {} {kept} {cpu}", peak_rss_kib());
}

struct Sample {
    secs: f64,
    cpu: f64,
    hwm_kib: u64,
    kept: u64,
}

fn run_once(mode: &str) -> Sample {
    let out = Command::new(std::env::current_exe().expect("own path"))
        .args(["--measure", mode])
        .stderr(Stdio::inherit())
        .output()
        .expect("measure");
    assert!(out.status.success(), "{mode} failed");
    let text = String::from_utf8_lossy(&out.stdout);
    let f: Vec<&str> = text.split_whitespace().collect();
    Sample {
        secs: f[1].parse().expect("secs"),
        hwm_kib: f[2].parse().expect("hwm"),
        kept: f[3].parse().expect("kept"),
        cpu: f[4].parse().expect("cpu"),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--generate") {
        generate(args[i + 1].parse().expect("byte count"));
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--measure") {
        measure(&args[i + 1]);
        return;
    }
    let total = flood_bytes();
    let reps: usize = std::env::var("FLOOD_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let mib = total as f64 / f64::from(1u32 << 20);
    println!(
        "flood: {mib:.0} MiB, budget {} KiB, read buffer {} KiB, {reps} interleaved rounds, medians (tokio_output: 1 run)",
        BUDGET >> 10,
        READ_BUF >> 10
    );
    println!(
        "{:<15} {:>8} {:>7} {:>11} {:>8} {:>12} {:>9} {:>9}",
        "mode", "wall s", "MiB/s", "wall vs raw", "cpu s", "cpu vs raw", "peak MiB", "kept KiB"
    );
    // Rounds interleave the modes so that every mode sees the same
    // background load; ratios are taken within a round, then the median.
    let modes = ["raw", "capture", "capture_redact", "tokio_raw", "custodian"];
    let mut rounds: Vec<Vec<Sample>> = Vec::new();
    for _ in 0..reps {
        rounds.push(modes.iter().map(|m| run_once(m)).collect());
    }
    for (i, mode) in modes.iter().enumerate() {
        let col = |f: &dyn Fn(&Sample) -> f64| median(rounds.iter().map(|r| f(&r[i])).collect());
        let secs = col(&|s| s.secs);
        let cpu = col(&|s| s.cpu);
        let ratio = median(rounds.iter().map(|r| r[0].secs / r[i].secs).collect());
        let cpu_ratio = median(rounds.iter().map(|r| r[0].cpu / r[i].cpu).collect());
        let hwm = rounds.iter().map(|r| r[i].hwm_kib).max().unwrap_or(0);
        print_row(
            mode,
            secs,
            mib,
            ratio,
            cpu,
            cpu_ratio,
            hwm,
            rounds[0][i].kept,
        );
    }
    let t = run_once("tokio_output");
    let raw_secs = median(rounds.iter().map(|r| r[0].secs).collect());
    let raw_cpu = median(rounds.iter().map(|r| r[0].cpu).collect());
    print_row(
        "tokio_output",
        t.secs,
        mib,
        raw_secs / t.secs,
        t.cpu,
        raw_cpu / t.cpu,
        t.hwm_kib,
        t.kept,
    );
    println!(
        "goals: capture >= 0.80x raw throughput; capture peak RSS <= {} MiB (2 x budget + 16 MiB)",
        2 * (BUDGET >> 20) + 16
    );
}

#[allow(clippy::too_many_arguments)]
fn print_row(
    mode: &str,
    secs: f64,
    mib: f64,
    ratio: f64,
    cpu: f64,
    cpu_ratio: f64,
    hwm_kib: u64,
    kept: u64,
) {
    println!(
        "{:<15} {:>8.3} {:>7.0} {:>10.2}x {:>8.3} {:>11.2}x {:>9.1} {:>9}",
        mode,
        secs,
        mib / secs,
        ratio,
        cpu,
        cpu_ratio,
        hwm_kib as f64 / 1024.0,
        kept >> 10
    );
}

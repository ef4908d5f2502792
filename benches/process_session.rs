//! Sessions against a raw pipe, in the same run:
//!
//! 1. **Output latency**: a line written to `cat`'s stdin until it is read
//!    back from its stdout, p50 and p90 over `SESSION_ROUNDS` round trips
//!    (default 1 000): through a session (`write_stdin`, then `read` with a
//!    wait) and through a raw pipe pair to a `cat` spawned by `std`
//!    (blocking write, blocking read), interleaved in blocks of 50.
//! 2. **Streamed output**: `head -c 1G /dev/zero` drained through a
//!    session's output stream (chunks of at most 256 KiB, the default 256 KiB buffers)
//!    and through a raw pipe read in 64 KiB, alternating, `SESSION_STREAMS`
//!    times each (default 3); MB/s, and this process's peak RSS (`VmHWM`)
//!    after the raw drains and after the session drains.
//! 3. **Idle sessions**: 64 `cat` sessions of one request left idle for
//!    10 s: the CPU this process spent meanwhile (user + system, as a share
//!    of one core), and what its RSS grew by when they started.
//!
//! Run: `cargo bench -p custodian --bench process_session`

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use custodian::process::session::{self, Offsets, OutputEvent, SessionOptions};
use custodian::process::{Invocation, InvocationSpec, LaunchOptions};

fn inv(program: &str, args: &[&str]) -> Invocation {
    Invocation::validate(
        InvocationSpec::new(program)
            .with_args(args.iter().copied())
            .with_timeout(Duration::from_secs(600)),
    )
    .unwrap()
}

fn pct(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

fn env_or(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let opts = LaunchOptions::new(dir.path());
    let rounds = env_or("SESSION_ROUNDS", 1000);
    let streams = env_or("SESSION_STREAMS", 3);

    // 1. Latency.
    let s = {
        let _in_runtime = rt.enter();
        session::start(inv("cat", &[]), &opts, SessionOptions::default()).unwrap()
    };
    let mut raw = Command::new("cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut raw_in = raw.stdin.take().unwrap();
    let mut raw_out = raw.stdout.take().unwrap();
    let (mut via_session, mut via_pipe) = (Vec::new(), Vec::new());
    let mut next = Offsets::default();
    let mut buf = [0u8; 64];
    while via_session.len() < rounds {
        for _ in 0..50 {
            let t = Instant::now();
            rt.block_on(async {
                s.write_stdin(b"x\n").await.unwrap();
                let mut got = 0;
                while got < 2 {
                    let out = s.read(next, 64, Duration::from_secs(5)).await;
                    got += out.stdout.data.len();
                    next = out.next();
                }
            });
            via_session.push(t.elapsed());
        }
        for _ in 0..50 {
            let t = Instant::now();
            raw_in.write_all(b"x\n").unwrap();
            let mut got = 0;
            while got < 2 {
                got += raw_out.read(&mut buf).unwrap();
            }
            via_pipe.push(t.elapsed());
        }
    }
    rt.block_on(async {
        s.close_stdin().await;
        s.wait().await;
    });
    drop(raw_in);
    raw.wait().unwrap();
    via_session.sort();
    via_pipe.sort();
    println!("round trip through cat ({rounds} rounds each)");
    for (name, v) in [("session", &via_session), ("raw pipe", &via_pipe)] {
        println!(
            "  {name:<9} p50 {:>7.1} us   p90 {:>7.1} us",
            pct(v, 50).as_secs_f64() * 1e6,
            pct(v, 90).as_secs_f64() * 1e6
        );
    }
    println!(
        "  session - raw pipe: p50 +{:.1} us",
        (pct(&via_session, 50).as_secs_f64() - pct(&via_pipe, 50).as_secs_f64()) * 1e6
    );

    // 2. Streamed output.
    const GIB: u64 = 1 << 30;
    let (mut session_rates, mut raw_rates) = (Vec::new(), Vec::new());
    let (mut hwm_raw, mut hwm_session) = (0, 0);
    for _ in 0..streams {
        let t = Instant::now();
        let mut child = Command::new("head")
            .args(["-c", "1G", "/dev/zero"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = child.stdout.take().unwrap();
        let mut chunk = vec![0u8; 64 * 1024];
        let mut total = 0u64;
        loop {
            let n = out.read(&mut chunk).unwrap();
            if n == 0 {
                break;
            }
            total += n as u64;
        }
        child.wait().unwrap();
        assert_eq!(total, GIB);
        raw_rates.push(GIB as f64 / t.elapsed().as_secs_f64() / 1e6);
        hwm_raw = hwm_raw.max(status_kib("VmHWM:"));

        let t = Instant::now();
        let total = rt.block_on(async {
            let s = session::start(
                inv("head", &["-c", "1G", "/dev/zero"]),
                &opts,
                SessionOptions::default(),
            )
            .unwrap();
            let mut stream = s.output();
            let mut total = 0u64;
            let mut lost = 0u64;
            while let Some(ev) = std::future::poll_fn(|cx| {
                futures_core::Stream::poll_next(std::pin::Pin::new(&mut stream), cx)
            })
            .await
            {
                match ev {
                    OutputEvent::Data { bytes, .. } => total += bytes.len() as u64,
                    OutputEvent::Lost { bytes, .. } => lost += bytes,
                    _ => {}
                }
            }
            s.wait().await;
            total + lost
        });
        assert_eq!(total, GIB);
        session_rates.push(GIB as f64 / t.elapsed().as_secs_f64() / 1e6);
        hwm_session = hwm_session.max(status_kib("VmHWM:"));
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    println!("1 GiB of output ({streams} drains each)");
    println!(
        "  session   {:>7.0} MB/s   raw pipe {:>7.0} MB/s   ratio {:.3}",
        mean(&session_rates),
        mean(&raw_rates),
        mean(&session_rates) / mean(&raw_rates)
    );
    println!(
        "  peak RSS (VmHWM) after the raw drains {} KiB, after the session drains {} KiB",
        hwm_raw, hwm_session
    );

    // 3. 64 idle sessions.
    let before = status_kib("VmRSS:");
    let sessions: Vec<_> = (0..64)
        .map(|_| {
            let _g = rt.enter();
            session::start(inv("cat", &[]), &opts, SessionOptions::default()).unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let grown = status_kib("VmRSS:").saturating_sub(before);
    let (cpu0, t0) = (cpu_time(), Instant::now());
    std::thread::sleep(Duration::from_secs(10));
    let busy = (cpu_time() - cpu0).as_secs_f64() / t0.elapsed().as_secs_f64();
    println!("64 idle sessions");
    println!(
        "  CPU {:.3} % of one core over 10 s; RSS grew {} KiB when they started",
        busy * 100.0,
        grown
    );
    rt.block_on(async {
        for s in &sessions {
            s.close_stdin().await;
        }
        for s in &sessions {
            s.wait().await;
        }
    });
}

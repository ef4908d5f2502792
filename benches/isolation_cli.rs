//! Isolated launches through the CLI next to bubblewrap, and the cost of
//! namespace teardown over many sequential launches.
//!
//! Run: `cargo bench --bench isolation_cli` (as root or any user with
//! unprivileged user namespaces; `bwrap` from Debian's `bubblewrap`).
//!
//! 1. **CLI vs bwrap** (`ISO_CLI_ROUNDS`, default 300): one loop that
//!    alternates `custodian run --confine workspace-write -- /bin/true` and
//!    `bwrap --unshare-all --die-with-parent --cap-drop ALL --ro-bind / /
//!    --dev /dev --proc /proc --tmpfs /tmp /bin/true`, each timed from
//!    spawn to exit; prints both medians and the ratio. custodian runs as
//!    installed, a copy of the binary (as `cargo install`, `install` or a
//!    package manager writes it; bwrap is the package's): the build's own
//!    output file, which the linker wrote through a shared mapping, starts
//!    ≈ 0.2–0.3 ms slower from the page cache than the same bytes copied
//!    (docs/performance-history.md, *An installed binary*). The build's
//!    file is timed in the same loop too, and printed below.
//! 2. **Teardown soak** (`ISO_SOAK`, default 10000): that many sequential
//!    isolated launch + settle of `/bin/true` through the library; prints
//!    p50 and p99 per window of 1000 (a flat p99 means teardown does not
//!    accumulate: network namespaces are released asynchronously by the
//!    kernel), and the mounts and network namespaces of this process and of
//!    the host before and after (none may be left behind). Then the same
//!    again as one request's launches (`custodian::__bench::
//!    share_one_network`), which from the third on run in sandboxes
//!    prepared while the one before ran (`process::spawn`, *A prepared
//!    sandbox*); its counts are taken once the request's options (and the
//!    sandbox prepared for a launch that never came) are gone.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use custodian::confine::Confinement;
use custodian::process::{Invocation, InvocationSpec, LaunchOptions};

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p) as usize]
}

fn timed(cmd: &mut Command) -> Duration {
    let t = Instant::now();
    let st = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    let d = t.elapsed();
    assert!(st.success(), "{cmd:?}: {st}");
    d
}

/// Distinct network namespaces of every process on the host.
fn net_namespaces() -> usize {
    let mut seen = std::collections::BTreeSet::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(l) = std::fs::read_link(e.path().join("ns/net")) {
            seen.insert(l);
        }
    }
    seen.len()
}

fn mounts() -> usize {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

fn cli_vs_bwrap(rounds: usize) {
    let built = env!("CARGO_BIN_EXE_custodian");
    let install = tempfile::tempdir_in("/var/tmp").unwrap();
    let bin = install.path().join("custodian");
    std::fs::copy(built, &bin).unwrap();
    let ws = tempfile::tempdir_in("/var/tmp").unwrap();
    let have_bwrap = Command::new("bwrap").arg("--version").output().is_ok();
    let mut ours = Vec::with_capacity(rounds);
    let mut as_built = Vec::with_capacity(rounds);
    let mut theirs = Vec::with_capacity(rounds);
    let run = ["run", "--confine", "workspace-write", "--", "/bin/true"];
    for _ in 0..rounds {
        ours.push(timed(Command::new(&bin).current_dir(ws.path()).args(run)));
        as_built.push(timed(Command::new(built).current_dir(ws.path()).args(run)));
        if have_bwrap {
            theirs.push(timed(Command::new("bwrap").args([
                "--unshare-all",
                "--die-with-parent",
                "--cap-drop",
                "ALL",
                "--ro-bind",
                "/",
                "/",
                "--dev",
                "/dev",
                "--proc",
                "/proc",
                "--tmpfs",
                "/tmp",
                "/bin/true",
            ])));
        }
    }
    let o = pct(&mut ours, 0.5);
    let a = pct(&mut as_built, 0.5);
    println!("CLI, {rounds} rounds interleaved");
    println!(
        "  custodian run --confine workspace-write  p50 {:>8.2} ms",
        o.as_secs_f64() * 1e3
    );
    println!(
        "  the same, the build's output file        p50 {:>8.2} ms",
        a.as_secs_f64() * 1e3
    );
    if have_bwrap {
        let b = pct(&mut theirs, 0.5);
        println!(
            "  bwrap --unshare-all …                    p50 {:>8.2} ms",
            b.as_secs_f64() * 1e3
        );
        println!(
            "  ratio custodian / bwrap: {:.3}x (the build's output file: {:.3}x)",
            o.as_secs_f64() / b.as_secs_f64(),
            a.as_secs_f64() / b.as_secs_f64()
        );
    } else {
        println!("  (no bwrap here: install Debian's bubblewrap to compare)");
    }
}

fn soak(n: usize, in_request: bool) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ws = tempfile::tempdir_in("/var/tmp").unwrap();
    let mut opts = LaunchOptions::new(ws.path());
    if in_request {
        custodian::__bench::share_one_network(&mut opts);
    }
    let (mounts0, nets0) = (mounts(), net_namespaces());
    let prepared0 = custodian::__bench::prepared_launches();
    let mut window = Vec::with_capacity(1000);
    println!(
        "teardown soak: {n} sequential isolated launches of /bin/true{}",
        if in_request { ", one request's" } else { "" }
    );
    println!("  window      p50 us     p99 us");
    for i in 0..n {
        let inv = Invocation::validate(
            InvocationSpec::new("/bin/true").with_confinement(Confinement::workspace_write()),
        )
        .unwrap();
        let t = Instant::now();
        let ev = rt.block_on(async { custodian::process::run(inv, &opts).await.unwrap() });
        window.push(t.elapsed());
        assert_eq!(ev.exit_code, Some(0), "{ev:?}");
        if window.len() == 1000 || i + 1 == n {
            let p50 = pct(&mut window, 0.5);
            let p99 = pct(&mut window, 0.99);
            println!(
                "  {:>6}  {:>10}  {:>10}",
                i + 1,
                p50.as_micros(),
                p99.as_micros()
            );
            window.clear();
        }
    }
    let prepared = custodian::__bench::prepared_launches() - prepared0;
    drop(opts);
    if in_request {
        println!("  launches in a prepared sandbox: {prepared}");
    }
    // Give the kernel's asynchronous network-namespace cleanup a moment.
    std::thread::sleep(Duration::from_secs(2));
    println!(
        "  mounts of this process: {mounts0} before, {} after; network namespaces on the host: {nets0} before, {} after",
        mounts(),
        net_namespaces()
    );
}

fn main() {
    cli_vs_bwrap(env_usize("ISO_CLI_ROUNDS", 300));
    soak(env_usize("ISO_SOAK", 10_000), false);
    soak(env_usize("ISO_SOAK", 10_000), true);
}

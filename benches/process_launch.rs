//! Launch cost: 200 rounds of `/bin/true` through custodian vs
//! `tokio::process::Command::output()` vs `std::process::Command::output()`,
//! then the same while this process holds ~2 GiB of touched memory, against
//! a spawner that is forced onto std's fork path.
//!
//! Run: `cargo bench -p custodian --bench process_launch`
//! (`CUSTODIAN_BENCH_HOLD_MIB` overrides the held memory, default 2048;
//! `CUSTODIAN_BENCH_EXTRA_PROCS=1000` starts that many idle `sleep`s first,
//! to show which spawners' cost grows with the host's process count).
//!
//! The small-parent table is measured twice: as is (each standalone launch
//! makes and removes its cgroup, and the base with it), and with a
//! `SpareKeeper` held (an empty cgroup serves the next launch).
//!
//! On Linux x86-64 it also measures the clone3 spawner alone
//! (`process::spawn`, through `custodian::__bench`): without a cgroup, into
//! a cgroup made for each launch (`mkdir`, spawn, reap, `rmdir`), and into
//! one reused cgroup (checked `populated 0` before each reuse), which is
//! what a pool of pre-made cgroups would cost.
//!
//! The fork-path anchor: std uses `posix_spawn` (vfork-like, cost
//! independent of the parent's size) unless the command needs something it
//! cannot express. A `pre_exec` hook is one such thing, but needs `unsafe`;
//! setting `PATH` in the child's environment while naming the program
//! without a slash is another (std must then search the *child's* PATH
//! itself after `fork`), and takes no `unsafe`. Both force `fork`, whose
//! cost grows with the parent's page tables.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use custodian::contain::Containment;
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
    parts.tier.get_or_insert(ev.descendants.tier);
    let exit = ev.timings.root_exit_us.unwrap();
    parts.exit.push(exit as f64);
    parts.settle.push((ev.timings.settled_us - exit) as f64);
}

#[derive(Default)]
struct Breakdown {
    tier: Option<custodian::process::evidence::ContainmentTier>,
    launch: Vec<f64>,
    exit: Vec<f64>,
    settle: Vec<f64>,
}

impl Breakdown {
    fn print(mut self, name: &str) {
        let p50 = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "{name} (tier {:?}) breakdown p50: launch() {:.0} us, start→root exit {:.0} us, root exit→settled {:.0} us",
            self.tier,
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

/// A cgroup directory of this bench's own under this process's cgroup in
/// the unified hierarchy; its children are the per-launch cgroups. Removed
/// (after `cgroup.kill`) on drop.
struct BenchCgroup {
    dir: PathBuf,
    seq: u64,
    reused: Option<(PathBuf, std::os::fd::OwnedFd)>,
}

impl BenchCgroup {
    fn new() -> Option<BenchCgroup> {
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        if !custodian::__bench::raw_spawn_supported() {
            println!("clone3 spawner unavailable: its rows are skipped");
            return None;
        }
        #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
        return None;
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let mount = mountinfo.lines().find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            (post.split(' ').next() == Some("cgroup2")).then(|| pre.split(' ').nth(4))?
        })?;
        let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let own = cgroups.lines().find_map(|l| l.strip_prefix("0::"))?;
        let dir = Path::new(mount)
            .join(own.trim_start_matches('/'))
            .join(format!("custodian-bench-{}", std::process::id()));
        if let Err(e) = std::fs::create_dir(&dir) {
            println!(
                "no writable cgroup v2 ({}: {e}): cgroup rows skipped",
                dir.display()
            );
            return None;
        }
        let mut me = BenchCgroup {
            dir,
            seq: 0,
            reused: None,
        };
        let reused = me.dir.join("reused");
        std::fs::create_dir(&reused).ok()?;
        me.reused = Some((reused.clone(), open_dir(&reused)));
        Some(me)
    }

    /// mkdir, spawn into it, reap, rmdir.
    fn fresh_once(&mut self) {
        self.seq += 1;
        let path = self.dir.join(format!("p{}", self.seq));
        std::fs::create_dir(&path).unwrap();
        let fd = open_dir(&path);
        raw_once(Some(&fd));
        drop(fd);
        // The child was reaped, so the cgroup is empty.
        std::fs::remove_dir(&path).unwrap();
    }

    /// Spawn into the same cgroup again, after checking that it is empty.
    fn reused_once(&mut self) {
        let (path, fd) = self.reused.as_ref().unwrap();
        let events = std::fs::read_to_string(path.join("cgroup.events")).unwrap();
        assert!(events.contains("populated 0"));
        raw_once(Some(fd));
    }
}

impl Drop for BenchCgroup {
    fn drop(&mut self) {
        if let Some((path, fd)) = self.reused.take() {
            drop(fd);
            let _ = std::fs::write(path.join("cgroup.kill"), "1");
            let _ = std::fs::remove_dir(&path);
        }
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            println!("leftover cgroup {}: {e}", self.dir.display());
        }
    }
}

fn open_dir(path: &Path) -> std::os::fd::OwnedFd {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::DIRECTORY.bits() as i32)
        .open(path)
        .unwrap()
        .into()
}

fn raw_once(cgroup: Option<&std::os::fd::OwnedFd>) {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        use std::os::fd::AsFd;
        let code = custodian::__bench::raw_output(c"/bin/true", cgroup.map(|c| c.as_fd())).unwrap();
        assert_eq!(code, 0);
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    let _ = cgroup;
}

fn measure(rt: &tokio::runtime::Runtime, cg: Option<&mut BenchCgroup>) -> Vec<Row> {
    let auto = LaunchOptions::new(std::env::temp_dir());
    let group = LaunchOptions::new(std::env::temp_dir()).with_containment(Containment::Group);
    let (mut parts, mut group_parts) = (Breakdown::default(), Breakdown::default());
    let mut names = vec![
        "custodian run, auto (cgroup) tier",
        "custodian run, group tier",
        "tokio Command::output",
        "std Command::output",
        "std, forced fork (PATH + bare name)",
    ];
    let samples = if let Some(cg) = cg {
        names.extend([
            "clone3 spawner, no cgroup",
            "clone3 spawner, fresh cgroup",
            "clone3 spawner, reused cgroup",
        ]);
        let cg = std::cell::RefCell::new(cg);
        interleaved(&mut [
            &mut || custodian_once(rt, &auto, &mut parts),
            &mut || custodian_once(rt, &group, &mut group_parts),
            &mut || tokio_once(rt),
            &mut std_once,
            &mut fork_once,
            &mut || raw_once(None),
            &mut || cg.borrow_mut().fresh_once(),
            &mut || cg.borrow_mut().reused_once(),
        ])
    } else {
        interleaved(&mut [
            &mut || custodian_once(rt, &auto, &mut parts),
            &mut || custodian_once(rt, &group, &mut group_parts),
            &mut || tokio_once(rt),
            &mut std_once,
            &mut fork_once,
        ])
    };
    parts.print("custodian auto");
    group_parts.print("custodian group");
    names
        .into_iter()
        .zip(samples)
        .map(|(name, samples)| Row { name, samples })
        .collect()
}

/// Idle processes started to grow the host's process table; killed and
/// reaped on drop.
struct Crowd(Vec<std::process::Child>);

impl Crowd {
    fn new(n: usize) -> Crowd {
        let kids = (0..n)
            .map(|_| {
                std::process::Command::new("/bin/sleep")
                    .arg("3600")
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        Crowd(kids)
    }
}

impl Drop for Crowd {
    fn drop(&mut self) {
        for k in &mut self.0 {
            let _ = k.kill();
        }
        for k in &mut self.0 {
            let _ = k.wait();
        }
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_owned()
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing
    // useful either: this is a plain main.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    let extra: usize = std::env::var("CUSTODIAN_BENCH_EXTRA_PROCS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let _crowd = Crowd::new(extra);
    let mut cg = BenchCgroup::new();

    let processes = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
            })
            .count()
        })
        .unwrap_or(0);
    println!(
        "{processes} processes on the machine ({extra} started by the bench; the group probe scans them all)"
    );
    println!("load average before: {}", loadavg());
    let rows = measure(&rt, cg.as_mut());
    print("Small parent", &rows, "tokio Command::output");
    println!("load average after: {}", loadavg());
    {
        // What an embedder that launches again and again gets: with a
        // keeper held, a standalone launch's empty cgroup serves the next.
        let _keeper = custodian::contain::SpareKeeper::new();
        let rows = measure(&rt, cg.as_mut());
        print(
            "Small parent, a SpareKeeper held",
            &rows,
            "tokio Command::output",
        );
        println!("load average after: {}", loadavg());
    }

    let mib: usize = std::env::var("CUSTODIAN_BENCH_HOLD_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2048);
    let mut held = vec![0u8; mib << 20];
    // Touch every page so it is resident and mapped in the page tables.
    for page in held.chunks_mut(4096) {
        page[0] = 1;
    }
    let rows = measure(&rt, cg.as_mut());
    print(
        &format!("Parent holding {mib} MiB of touched memory"),
        &rows,
        "std, forced fork (PATH + bare name)",
    );
    println!("load average after: {}", loadavg());
    println!(
        "(held checksum {})",
        held.iter().step_by(4096).map(|&b| b as u64).sum::<u64>()
    );
}

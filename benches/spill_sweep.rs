//! Spill sweep benchmark: 100,000 files in 1,000 session directories, half
//! expired, swept by custodian, by `find -delete` plus an empty-directory
//! prune, and by `systemd-tmpfiles --clean`, in the same run; then syscall
//! counts per deleted and per kept file from `strace -c -f`.
//!
//! Run: `cargo bench --bench spill_sweep` (set `SPILL_BENCH_FILES` /
//! `SPILL_BENCH_SESSIONS` to change the size, `SPILL_BENCH_REPS` for the
//! repetitions, `SPILL_BENCH_DIR` for the filesystem, `SPILL_BENCH_NO_STRACE`
//! to skip the syscall counts). Results go in
//! `docs/performance.md`.

// `getrusage(RUSAGE_CHILDREN)` for the CPU time of `find`.
#![allow(unsafe_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use custodian::spill::{SweepPlan, TracingSink, sweep_spill_roots};
use filetime::FileTime;

#[path = "support/cpu.rs"]
mod cpu;
use cpu::{cpu_children, cpu_self};

const DAY: Duration = Duration::from_secs(86_400);
const PERIOD_DAYS: u32 = 30;

fn env_or(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Builds `sessions` session dirs holding `files` spill files in total;
/// `expired(i)` decides which are 40 days old (the rest are fresh).
fn build(root: &Path, files: usize, sessions: usize, expired: impl Fn(usize) -> bool) {
    build_with(root, files, sessions, expired, true);
}

/// [`build`], with (`marked`) or without the store's ownership mark:
/// `systemd-tmpfiles` never ages out a file with the sticky bit set.
fn build_with(
    root: &Path,
    files: usize,
    sessions: usize,
    expired: impl Fn(usize) -> bool,
    marked: bool,
) {
    let (dir_mode, file_mode) = if marked {
        (0o1700, 0o1600)
    } else {
        (0o700, 0o600)
    };
    let _ = fs::remove_dir_all(root);
    fs::create_dir_all(root).unwrap();
    let per = files / sessions;
    let old = FileTime::from_system_time(SystemTime::now() - 40 * DAY);
    let mut n = 0;
    for s in 0..sessions {
        let d = root.join(format!("session-{s:04}"));
        // Modes as the store creates them: the sticky bit is its mark.
        std::os::unix::fs::DirBuilderExt::mode(&mut fs::DirBuilder::new(), dir_mode)
            .create(&d)
            .unwrap();
        for _ in 0..per {
            let f = d.join(format!("{n:032x}.spill"));
            let mut file = std::os::unix::fs::OpenOptionsExt::mode(
                fs::OpenOptions::new().write(true).create_new(true),
                file_mode,
            )
            .open(&f)
            .unwrap();
            std::io::Write::write_all(&mut file, b"spilled tool result").unwrap();
            if expired(n) {
                filetime::set_file_mtime(&f, old).unwrap();
            }
            n += 1;
        }
    }
    // Flush the creation work so it does not bleed into the timed sweep.
    Command::new("sync").status().ok();
}

fn count(root: &Path) -> (usize, usize) {
    let mut dirs = 0;
    let mut files = 0;
    for e in fs::read_dir(root).unwrap().flatten() {
        dirs += 1;
        files += fs::read_dir(e.path()).unwrap().count();
    }
    (dirs, files)
}

fn plan(root: &Path) -> SweepPlan {
    let mut p = SweepPlan::new(SystemTime::now() - PERIOD_DAYS * DAY);
    p.configured_roots = vec![root.to_owned()];
    p
}

/// Wall and CPU time of one sweep.
type Took = (Duration, Duration);

fn time_custodian(root: &Path) -> Took {
    let c = cpu_self();
    let t = Instant::now();
    let r = sweep_spill_roots(&plan(root), &TracingSink);
    let d = t.elapsed();
    let cpu = cpu_self() - c;
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    (d, cpu)
}

fn time_find(root: &Path) -> Took {
    let c = cpu_children();
    let t = Instant::now();
    let ok = Command::new("find")
        .arg(root)
        .args(["-mindepth", "2", "-type", "f", "-mtime"])
        .arg(format!("+{PERIOD_DAYS}"))
        .arg("-delete")
        .status()
        .unwrap()
        .success()
        && Command::new("find")
            .arg(root)
            .args(["-mindepth", "1", "-type", "d", "-empty", "-delete"])
            .status()
            .unwrap()
            .success();
    let d = t.elapsed();
    assert!(ok);
    (d, cpu_children() - c)
}

fn time_tmpfiles(root: &Path, conf: &Path) -> Option<Duration> {
    // `e`: clean the contents of an existing directory by age; `m:` ages by
    // mtime only (by default atime and ctime would also have to be old).
    fs::write(
        conf,
        format!("e {} - - - m:{PERIOD_DAYS}d\n", root.display()),
    )
    .unwrap();
    let t = Instant::now();
    let st = Command::new("systemd-tmpfiles")
        .arg("--clean")
        .arg(conf)
        .status()
        .ok()?;
    let d = t.elapsed();
    st.success().then_some(d)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Total syscalls of one `--sweep-only ROOT` child under `strace -c -f`.
fn strace_total(root: &Path, out: &Path) -> Option<u64> {
    let exe = std::env::current_exe().unwrap();
    let st = Command::new("strace")
        .args(["-c", "-f", "-o"])
        .arg(out)
        .arg(&exe)
        .arg("--sweep-only")
        .arg(root)
        .status()
        .ok()?;
    if !st.success() {
        return None;
    }
    let text = fs::read_to_string(out).ok()?;
    // The summary's last line: "100.00  <secs> <usecs/call> <calls> <errors> total".
    let line = text
        .lines()
        .rev()
        .find(|l| l.trim_end().ends_with("total"))?;
    let cols: Vec<&str> = line.split_whitespace().collect();
    cols.get(3)?.parse().ok()
}

fn machine() -> String {
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("nproc={nproc}, cpu={cpu}")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 3 && args[1] == "--sweep-only" {
        let r = sweep_spill_roots(&plan(Path::new(&args[2])), &TracingSink);
        eprintln!("deleted {} kept {}", r.files_deleted, r.files_kept);
        return;
    }
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let files = env_or("SPILL_BENCH_FILES", 100_000);
    let sessions = env_or("SPILL_BENCH_SESSIONS", 1_000);
    let reps = env_or("SPILL_BENCH_REPS", 3);
    // `SPILL_BENCH_DIR` picks the filesystem (default: the OS temp dir).
    let parent = std::env::var_os("SPILL_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let base = tempfile::Builder::new()
        .prefix("spill-bench-")
        .tempdir_in(parent)
        .unwrap();
    let root: PathBuf = base.path().join("root");
    let half = |i: usize| i % 2 == 0;
    println!(
        "spill_sweep: {files} files in {sessions} session dirs, half expired; {}",
        machine()
    );

    let (mut ours, mut find, mut tmpfiles) = (Vec::new(), Vec::new(), Vec::new());
    let conf = base.path().join("bench.conf");
    for _ in 0..reps {
        build(&root, files, sessions, half);
        ours.push(time_custodian(&root));
        assert_eq!(count(&root), (sessions, files / 2));
        build(&root, files, sessions, half);
        find.push(time_find(&root));
        assert_eq!(count(&root), (sessions, files / 2));
        build_with(&root, files, sessions, half, false);
        if let Some(d) = time_tmpfiles(&root, &conf) {
            tmpfiles.push(d);
            let (_, left) = count(&root);
            assert_eq!(left, files / 2, "tmpfiles rule is not equivalent");
        }
    }
    let ours_cpu = median(ours.iter().map(|t| t.1).collect());
    let find_cpu = median(find.iter().map(|t| t.1).collect());
    let ours_m = median(ours.into_iter().map(|t| t.0).collect());
    let find_m = median(find.into_iter().map(|t| t.0).collect());
    println!(
        "custodian sweep      : {:>9.1} ms (median of {reps}), cpu {:.1} ms",
        ours_m.as_secs_f64() * 1e3,
        ours_cpu.as_secs_f64() * 1e3
    );
    println!(
        "find -delete + prune : {:>9.1} ms  ratio custodian/find = {:.2}, cpu {:.1} ms, ratio {:.2}",
        find_m.as_secs_f64() * 1e3,
        ours_m.as_secs_f64() / find_m.as_secs_f64(),
        find_cpu.as_secs_f64() * 1e3,
        ours_cpu.as_secs_f64() / find_cpu.as_secs_f64()
    );
    if tmpfiles.is_empty() {
        println!("systemd-tmpfiles     : unavailable");
    } else {
        let t = median(tmpfiles);
        println!(
            "systemd-tmpfiles     : {:>9.1} ms  ratio custodian/tmpfiles = {:.2}",
            t.as_secs_f64() * 1e3,
            ours_m.as_secs_f64() / t.as_secs_f64()
        );
    }

    if std::env::var_os("SPILL_BENCH_NO_STRACE").is_some() {
        return;
    }
    // Syscalls: an empty root gives the process baseline to subtract.
    let out = base.path().join("strace.txt");
    fs::create_dir_all(base.path().join("empty")).unwrap();
    let Some(baseline) = strace_total(&base.path().join("empty"), &out) else {
        println!("strace unavailable: syscall counts not measured");
        return;
    };
    build(&root, files, sessions, |_| true);
    let all_deleted = strace_total(&root, &out).unwrap() - baseline;
    build(&root, files, sessions, |_| false);
    let all_kept = strace_total(&root, &out).unwrap() - baseline;
    build(&root, files, sessions, half);
    let mixed = strace_total(&root, &out).unwrap() - baseline;
    let f = files as f64;
    println!("strace -c -f (minus a {baseline}-call empty-root baseline):");
    println!(
        "  all expired: {all_deleted} calls = {:.3} per deleted file (goal <= 2.2)",
        all_deleted as f64 / f
    );
    println!(
        "  all fresh  : {all_kept} calls = {:.3} per kept file (goal <= 1.2)",
        all_kept as f64 / f
    );
    println!(
        "  half/half  : {mixed} calls = {:.3} per file",
        mixed as f64 / f
    );
    let _ = fs::remove_dir_all(&root);
}

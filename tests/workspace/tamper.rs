//! A racer exchanging registered entries with outside files, directories and
//! symlinks (`renameat2(RENAME_EXCHANGE)`, in a loop) while the cleanup
//! runs, thousands of trials, on tmpfs and on a loop-mounted ext4: no
//! outside inode is ever destroyed, and a trial the racer won never ends
//! `cleaned`; once anything was removed it ends `tampered`.
//!
//! The cleanup deletes, so as root each body runs in a private mount
//! namespace where only its scratch directory is writable (`sandbox`).

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use custodian::workspace::{CleanupCode, CleanupStatus, WorkspaceConfig};
use rustix::fs::{CWD, Mode, OFlags, RenameFlags};

use crate::Fixture;
use crate::sandbox;

const TRIALS_TMPFS: usize = 2000;
const TRIALS_EXT4: usize = 1000;

/// `open(path, O_PATH | O_NOFOLLOW)`: pins the inode itself, whatever it is.
fn pin(p: &Path) -> OwnedFd {
    rustix::fs::open(
        p,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap_or_else(|e| panic!("pin {p:?}: {e}"))
}

fn nlink(fd: &OwnedFd) -> u64 {
    rustix::fs::fstat(fd).unwrap().st_nlink
}

fn ino_at(p: &Path) -> Option<u64> {
    rustix::fs::lstat(p).ok().map(|s| s.st_ino)
}

#[derive(Default, Debug)]
struct Tally {
    trials: usize,
    swaps: u64,
    won: usize,
    cleaned: usize,
    tampered: usize,
    other: std::collections::BTreeMap<String, usize>,
}

fn run_trials(base: &Path, label: &str, trials: usize) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut t = Tally::default();
    for trial in 0..trials {
        let fx = Fixture::with_config_in(WorkspaceConfig::default(), base);
        let out = fx.tmp.path().join("outside");
        let job = fx.ws.open_request("race").unwrap();
        let d = job.create_dir("d").unwrap();
        for i in 0..4 {
            d.create_file(&format!("f{i}")).unwrap();
        }
        let e = d.create_dir("e").unwrap();
        e.create_file("g").unwrap();
        // Every other trial with a tree big enough for the cleanup's second
        // thread (it takes whole directories: `d` and `e` may go to either).
        if trial % 2 == 1 {
            for i in 0..64 {
                d.create_file(&format!("h{i}")).unwrap();
            }
        }
        drop((d, e));
        for i in 0..3 {
            job.create_file(&format!("t{i}")).unwrap();
        }
        let jd = fx.job_dir("race");
        let registered: Vec<PathBuf> = [
            "d/f0", "d/f1", "d/f2", "d/f3", "d/e/g", "d/e", "d", "t0", "t1", "t2",
        ]
        .iter()
        .map(|r| jd.join(r))
        .collect();
        // Outside: files, a full directory, an empty one, a symlink.
        let mut outside = vec![out.join("keep.txt")];
        for i in 0..3 {
            let p = out.join(format!("o{i}"));
            std::fs::write(&p, format!("user {i}")).unwrap();
            outside.push(p);
        }
        std::fs::create_dir(out.join("full")).unwrap();
        std::fs::write(out.join("full/x"), b"x").unwrap();
        std::fs::create_dir(out.join("empty")).unwrap();
        std::os::unix::fs::symlink(out.join("o0"), out.join("link")).unwrap();
        for n in ["full", "full/x", "empty", "link"] {
            outside.push(out.join(n));
        }
        for n in ["result.txt", "src", "src/main.rs"] {
            outside.push(fx.root().join(n));
        }
        let outside_pins: Vec<(PathBuf, u64, OwnedFd)> = outside
            .iter()
            .map(|p| (p.clone(), ino_at(p).unwrap(), pin(p)))
            .collect();
        let reg_pins: Vec<OwnedFd> = registered.iter().map(|p| pin(p)).collect();

        // Pairs the racer exchanges: registered files with outside files,
        // a symlink and a directory; registered directories with outside
        // directories.
        let pairs: Vec<(PathBuf, PathBuf)> = vec![
            (jd.join("t0"), out.join("o0")),
            (jd.join("d/f1"), out.join("o1")),
            (jd.join("t1"), out.join("link")),
            (jd.join("d/e/g"), out.join("o2")),
            (jd.join("d/e"), out.join("empty")),
            (jd.join("d"), out.join("full")),
            (jd.join("t2"), out.join("empty")),
        ];
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicU64::new(0));
        let racer = {
            let (stop, swaps) = (stop.clone(), swaps.clone());
            let offset = trial;
            std::thread::spawn(move || {
                let mut k = offset;
                while !stop.load(Ordering::Relaxed) {
                    let (a, b) = &pairs[k % pairs.len()];
                    k += 1;
                    if rustix::fs::renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE).is_ok() {
                        swaps.fetch_add(1, Ordering::Relaxed);
                        // Sometimes leave it swapped, sometimes swap back at
                        // once: both orders must be caught.
                        if k % 3 != 0 {
                            std::thread::yield_now();
                            let _ =
                                rustix::fs::renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE);
                        }
                    }
                }
            })
        };
        let r = rt.block_on(job.cleanup());
        stop.store(true, Ordering::Relaxed);
        racer.join().unwrap();
        t.trials += 1;
        t.swaps += swaps.load(Ordering::Relaxed);

        // No outside inode is ever destroyed.
        for (p, _, fd) in &outside_pins {
            assert!(
                nlink(fd) > 0,
                "{label} trial {trial}: outside {p:?} destroyed: {r:?}"
            );
        }
        let displaced = outside_pins
            .iter()
            .any(|(p, ino, _)| ino_at(p) != Some(*ino));
        let survived = reg_pins.iter().any(|fd| nlink(fd) > 0);
        let won = displaced || survived;
        match r.status {
            CleanupStatus::Cleaned => {
                assert!(!won, "{label} trial {trial}: racer won but cleaned: {r:?}");
                t.cleaned += 1;
            }
            _ if r.code == Some(CleanupCode::Tampered) => t.tampered += 1,
            _ => {
                assert_eq!(r.status, CleanupStatus::Failed, "{r:?}");
                *t.other.entry(format!("{:?}", r.code)).or_default() += 1;
            }
        }
        if won {
            t.won += 1;
            assert_eq!(
                r.status,
                CleanupStatus::Failed,
                "{label} trial {trial}: {r:?}"
            );
            let removed = r.counts.files_removed + r.counts.dirs_removed;
            assert!(
                removed == 0 || r.code == Some(CleanupCode::Tampered),
                "{label} trial {trial}: the racer won after removal began, not tampered: {r:?}"
            );
        }
    }
    eprintln!(
        "{label}: {} trials, {} exchanges, racer won {}, cleaned {}, tampered {}, other failures {:?}",
        t.trials, t.swaps, t.won, t.cleaned, t.tampered, t.other
    );
    assert!(t.swaps > 0, "{label}: the racer never exchanged anything");
}

#[test]
fn exchange_racer_never_costs_an_outside_inode_tmpfs() {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        eprintln!("no /dev/shm: using the temp dir, which may not be tmpfs");
        std::env::temp_dir()
    };
    if let Some(out) = sandbox::run_guarded("tamper::exchange_racer_tmpfs_body", &base) {
        eprint!(
            "{}",
            out.lines()
                .filter(|l| l.contains("trials"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        eprintln!();
    }
}

#[test]
#[ignore = "run by exchange_racer_never_costs_an_outside_inode_tmpfs, in a mount namespace as root"]
fn exchange_racer_tmpfs_body() {
    let scratch = sandbox::scratch();
    run_trials(&scratch, "tmpfs", TRIALS_TMPFS);
}

#[test]
fn exchange_racer_never_costs_an_outside_inode_ext4() {
    if !sandbox::is_root() {
        skipped!("a loop-mounted ext4 needs root");
        return;
    }
    if let Some(out) =
        sandbox::run_guarded("tamper::exchange_racer_ext4_body", &std::env::temp_dir())
    {
        eprint!(
            "{}",
            out.lines()
                .filter(|l| l.contains("trials") || l.contains("skipped"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        eprintln!();
    }
}

#[test]
#[ignore = "run by exchange_racer_never_costs_an_outside_inode_ext4, in a mount namespace as root"]
fn exchange_racer_ext4_body() {
    let scratch = sandbox::scratch();
    let Some(ext4) = sandbox::ext4_in(&scratch) else {
        return;
    };
    run_trials(&ext4, "ext4", TRIALS_EXT4);
}

//! The exchange racer against the sweep: spill files and session dirs
//! exchanged (`renameat2(RENAME_EXCHANGE)`, in a loop) with a user's old
//! files, a full and an empty directory and a symlink while the sweep runs,
//! thousands of trials on tmpfs and on a loop-mounted ext4. No outside inode
//! is ever destroyed, and the report never claims a deletion or a prune that
//! did not destroy the store's own inode.
//!
//! The sweep deletes, so as root each body runs in a private mount namespace
//! where only its scratch directory is writable (`sandbox`).

use std::fs;
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use custodian::spill::{TracingSink, sweep_spill_roots};
use rustix::fs::{CWD, Mode, OFlags, RenameFlags};

use crate::sandbox;
use crate::{Fx, file_at, fresh, mkdir, old, plan_for, spill_name};

const TRIALS_TMPFS: usize = 2000;
const TRIALS_EXT4: usize = 1000;

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

fn run_trials(base: &Path, label: &str, trials: usize) {
    let (mut swaps_total, mut won, mut tampered_warnings, mut deleted, mut pruned) =
        (0u64, 0usize, 0usize, 0u64, 0u64);
    for trial in 0..trials {
        let fx = Fx {
            dir: tempfile::Builder::new()
                .prefix("spill-race-")
                .tempdir_in(base)
                .unwrap(),
        };
        fs::set_permissions(fx.path(), fs::Permissions::from_mode(0o700)).unwrap();
        let root = fx.mkdir("root");
        let (s0, s1) = (root.join("s0"), root.join("s1"));
        mkdir(&s0);
        mkdir(&s1);
        let mut spills = Vec::new();
        for i in 0..4 {
            let p = s0.join(spill_name(i));
            file_at(&p, "expired", old());
            spills.push(p);
        }
        for i in 4..7 {
            let p = s1.join(spill_name(i));
            file_at(&p, "expired", old());
            spills.push(p);
        }
        file_at(&s1.join(spill_name(9)), "fresh", fresh());
        // The user's data: old files (as old as any expired spill), a full
        // and an empty directory, a symlink.
        let v = fx.path().join("victim");
        fs::create_dir(&v).unwrap();
        let mut outside = Vec::new();
        for i in 0..3 {
            let p = v.join(format!("v{i}"));
            fs::write(&p, format!("user {i}")).unwrap();
            filetime::set_file_mtime(&p, filetime::FileTime::from_system_time(old())).unwrap();
            outside.push(p);
        }
        fs::create_dir(v.join("full")).unwrap();
        fs::write(v.join("full/x"), b"x").unwrap();
        fs::create_dir(v.join("empty")).unwrap();
        std::os::unix::fs::symlink(v.join("v0"), v.join("link")).unwrap();
        for n in ["full", "full/x", "empty", "link"] {
            outside.push(v.join(n));
        }
        let outside_pins: Vec<(PathBuf, u64, OwnedFd)> = outside
            .iter()
            .map(|p| (p.clone(), ino_at(p).unwrap(), pin(p)))
            .collect();
        let spill_pins: Vec<OwnedFd> = spills.iter().map(|p| pin(p)).collect();
        let session_pins = [pin(&s0), pin(&s1)];

        let pairs: Vec<(PathBuf, PathBuf)> = vec![
            (spills[0].clone(), v.join("v0")),
            (spills[5].clone(), v.join("v1")),
            (spills[2].clone(), v.join("link")),
            (spills[3].clone(), v.join("v2")),
            (s0.clone(), v.join("empty")),
            (s1.clone(), v.join("full")),
        ];
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicU64::new(0));
        let racer = {
            let (stop, swaps) = (stop.clone(), swaps.clone());
            std::thread::spawn(move || {
                let mut k = trial;
                while !stop.load(Ordering::Relaxed) {
                    let (a, b) = &pairs[k % pairs.len()];
                    k += 1;
                    if rustix::fs::renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE).is_ok() {
                        swaps.fetch_add(1, Ordering::Relaxed);
                        if k % 3 != 0 {
                            std::thread::yield_now();
                            let _ =
                                rustix::fs::renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE);
                        }
                    }
                }
            })
        };
        let r = sweep_spill_roots(&plan_for(&[&root]), &TracingSink);
        stop.store(true, Ordering::Relaxed);
        racer.join().unwrap();
        swaps_total += swaps.load(Ordering::Relaxed);

        for (p, _, fd) in &outside_pins {
            assert!(
                nlink(fd) > 0,
                "{label} trial {trial}: outside {p:?} destroyed: {r:?}"
            );
        }
        let destroyed = spill_pins.iter().filter(|fd| nlink(fd) == 0).count() as u64;
        assert_eq!(
            destroyed, r.files_deleted,
            "{label} trial {trial}: reported deletions are exactly the store's inodes destroyed"
        );
        let dirs_destroyed = session_pins.iter().filter(|fd| nlink(fd) == 0).count() as u64;
        assert_eq!(
            dirs_destroyed, r.dirs_pruned,
            "{label} trial {trial}: {r:?}"
        );
        deleted += r.files_deleted;
        pruned += r.dirs_pruned;
        let displaced = outside_pins
            .iter()
            .any(|(p, ino, _)| ino_at(p) != Some(*ino));
        if displaced || destroyed < 7 {
            won += 1;
        }
        tampered_warnings += r.warnings.iter().filter(|w| w.code == "tampered").count();
        // The sweep's quarantine never outlives the sweep unless it keeps
        // something foreign, which it then reported.
        let leftovers = fs::read_dir(&root)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".sweep-"))
            .count();
        assert!(
            leftovers == 0 || r.warnings.iter().any(|w| w.code == "tampered"),
            "{label} trial {trial}: {r:?}"
        );
    }
    eprintln!(
        "{label}: {trials} trials, {swaps_total} exchanges, racer disturbed {won}, \
         files deleted {deleted}, dirs pruned {pruned}, tampered warnings {tampered_warnings}"
    );
    assert!(
        swaps_total > 0,
        "{label}: the racer never exchanged anything"
    );
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
        for l in out.lines().filter(|l| l.contains("trials")) {
            eprintln!("{l}");
        }
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
        for l in out
            .lines()
            .filter(|l| l.contains("trials") || l.contains("skipped"))
        {
            eprintln!("{l}");
        }
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

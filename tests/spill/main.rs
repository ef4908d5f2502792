//! Integration tests of the spill store, its sweep and its service, on the
//! real filesystem. Mount and chown tests need root; they skip (printing
//! why) where the host refuses.

#[macro_use]
#[path = "../support/skip.rs"]
mod skip;
mod attacks;
mod cli;
mod guarded;
mod rules;
#[path = "../support/sandbox.rs"]
mod sandbox;
mod service;
mod signals;
mod store;
mod tamper;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use custodian::spill::{Discovery, SpillWarning, SweepPlan, WarningSink};
use filetime::FileTime;

pub(crate) const DAY: Duration = Duration::from_secs(86_400);

/// A private temp dir (mode 0700) that serves as the OS temp dir for
/// discovery, so no test touches the real `/tmp`'s other entries.
pub(crate) struct Fx {
    pub(crate) dir: tempfile::TempDir,
}

impl Fx {
    pub(crate) fn new() -> Self {
        if std::env::var_os(sandbox::SCRATCH_ENV).is_some() {
            // In the namespace (as root): check before anything is deleted.
            sandbox::scratch();
        }
        let dir = tempfile::Builder::new()
            .prefix("spill-test-")
            .tempdir()
            .unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
        Fx { dir }
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A directory `name` (mode 0700) inside the fixture.
    pub(crate) fn mkdir(&self, name: &str) -> PathBuf {
        let p = self.path().join(name);
        mkdir(&p);
        p
    }

    pub(crate) fn discovery(&self) -> Discovery {
        Discovery {
            temp_dir: self.path().to_owned(),
            prefix: "custodian-spill-".into(),
        }
    }
}

/// A directory as the store makes its session directories: `0700` plus the
/// sticky bit, the store's ownership mark (a root may carry it too).
pub(crate) fn mkdir(p: &Path) {
    fs::create_dir_all(p).unwrap();
    fs::set_permissions(p, fs::Permissions::from_mode(0o1700)).unwrap();
}

/// A directory made by hand (`mkdir`, mode `0700`): no ownership mark.
pub(crate) fn mkdir_by_hand(p: &Path) {
    fs::create_dir_all(p).unwrap();
    fs::set_permissions(p, fs::Permissions::from_mode(0o700)).unwrap();
}

/// A valid spill file name derived from `i`.
pub(crate) fn spill_name(i: u64) -> String {
    format!("{i:032x}.spill")
}

/// Writes `content` at `path` as the store writes a spill file (mode
/// `0600` plus the sticky bit, the store's mark) and sets its mtime.
pub(crate) fn file_at(path: &Path, content: &str, mtime: SystemTime) {
    fs::write(path, content).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o1600)).unwrap();
    filetime::set_file_mtime(path, FileTime::from_system_time(mtime)).unwrap();
}

/// A fixed cutoff with a non-zero nanosecond part.
pub(crate) fn cutoff() -> SystemTime {
    UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789)
}

pub(crate) fn old() -> SystemTime {
    cutoff() - DAY
}

pub(crate) fn fresh() -> SystemTime {
    cutoff() + DAY
}

pub(crate) fn plan_for(roots: &[&Path]) -> SweepPlan {
    let mut p = SweepPlan::new(cutoff());
    p.configured_roots = roots.iter().map(|r| r.to_path_buf()).collect();
    p
}

/// A sink that records every warning.
#[derive(Default)]
pub(crate) struct Recorder(pub(crate) Mutex<Vec<SpillWarning>>);

impl WarningSink for Recorder {
    fn warn(&self, w: &SpillWarning) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        self.0.lock().unwrap().push(w.clone());
        Ok(())
    }
}

impl Recorder {
    pub(crate) fn codes(&self) -> Vec<&'static str> {
        self.0.lock().unwrap().iter().map(|w| w.code).collect()
    }
}

/// Every path under `root` with its content (files) or `<dir>`/`<link>`,
/// for before/after comparisons.
pub(crate) fn snapshot(root: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    fn walk(p: &Path, out: &mut Vec<(PathBuf, String)>) {
        let Ok(rd) = fs::read_dir(p) else { return };
        for e in rd.flatten() {
            let path = e.path();
            let ft = e.file_type().unwrap();
            if ft.is_symlink() {
                out.push((
                    path.clone(),
                    format!("<link {:?}>", fs::read_link(&path).ok()),
                ));
            } else if ft.is_dir() {
                out.push((path.clone(), "<dir>".into()));
                walk(&path, out);
            } else if ft.is_file() {
                let m = fs::metadata(&path).unwrap();
                let c = fs::read(&path).unwrap_or_default();
                out.push((
                    path.clone(),
                    format!("{} {:?}", String::from_utf8_lossy(&c), m.modified().ok()),
                ));
            } else {
                out.push((path.clone(), "<special>".into()));
            }
        }
    }
    walk(root, &mut out);
    out.sort();
    out
}

pub(crate) fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Unmounts (lazily) on drop, so a failing test never leaves a mount.
pub(crate) struct MountGuard(pub(crate) PathBuf);

impl Drop for MountGuard {
    fn drop(&mut self) {
        let _ = rustix::mount::unmount(&self.0, rustix::mount::UnmountFlags::DETACH);
    }
}

pub(crate) fn bind_mount(src: &Path, dst: &Path) -> Option<MountGuard> {
    match rustix::mount::mount_bind(src, dst) {
        Ok(()) => Some(MountGuard(dst.to_owned())),
        Err(e) => {
            eprintln!("SKIP: cannot bind-mount on this host ({e}); needs root/CAP_SYS_ADMIN");
            None
        }
    }
}

pub(crate) fn tmpfs_mount(dst: &Path) -> Option<MountGuard> {
    match rustix::mount::mount(
        "tmpfs",
        dst,
        "tmpfs",
        rustix::mount::MountFlags::empty(),
        c"size=4m,mode=0700",
    ) {
        Ok(()) => Some(MountGuard(dst.to_owned())),
        Err(e) => {
            eprintln!("SKIP: cannot mount tmpfs on this host ({e}); needs root/CAP_SYS_ADMIN");
            None
        }
    }
}

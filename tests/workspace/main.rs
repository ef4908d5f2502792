//! Integration tests of request workspaces: real filesystem, real processes,
//! real mounts where the host allows them.

#![allow(missing_docs)]

#[macro_use]
#[path = "../support/skip.rs"]
mod skip;
mod attacks;
mod barriers;
mod basics;
mod containment;
mod full_disk;
mod guarded;
mod journal;
mod mounts;
mod procs;
mod races;
#[path = "../support/sandbox.rs"]
mod sandbox;
mod tamper;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use custodian::workspace::{CleanupStatus, Job, Workspace, WorkspaceConfig};

/// A temporary directory holding a workspace root `ws/` and an `outside/`
/// directory of user data that no cleanup may ever touch.
pub struct Fixture {
    pub tmp: tempfile::TempDir,
    pub ws: Workspace,
}

impl Default for Fixture {
    fn default() -> Self {
        Self::with_config(WorkspaceConfig::default())
    }
}

impl Fixture {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_config(config: WorkspaceConfig) -> Self {
        Self::build(config, sandbox::tempdir())
    }

    /// A fixture in a temporary directory beneath `dir`.
    pub fn with_config_in(config: WorkspaceConfig, dir: &Path) -> Self {
        Self::build(config, tempfile::tempdir_in(dir).expect("tempdir"))
    }

    /// A fixture on tmpfs when `/dev/shm` is one (cheap metadata for big
    /// trees), else in the default temporary directory.
    pub fn on_tmpfs() -> Self {
        let tmp = match std::env::var_os(sandbox::SCRATCH_ENV) {
            Some(_) => tempfile::tempdir_in(sandbox::scratch_as_run()),
            None => {
                assert!(
                    !sandbox::is_root(),
                    "a deleting body runs as root only by run_guarded"
                );
                tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir())
            }
        };
        Self::build(WorkspaceConfig::default(), tmp.expect("tempdir"))
    }

    fn build(config: WorkspaceConfig, tmp: tempfile::TempDir) -> Self {
        fs::create_dir(tmp.path().join("ws")).unwrap();
        fs::create_dir(tmp.path().join("outside")).unwrap();
        fs::write(tmp.path().join("outside/keep.txt"), b"outside data").unwrap();
        fs::write(tmp.path().join("ws/result.txt"), b"user result").unwrap();
        fs::create_dir(tmp.path().join("ws/src")).unwrap();
        fs::write(tmp.path().join("ws/src/main.rs"), b"fn main() {}").unwrap();
        // The request layer's barriers: its cgroups are revived by a reclaim.
        let ws = custodian::request::open_workspace(tmp.path().join("ws"), config)
            .expect("open workspace");
        Fixture { tmp, ws }
    }

    pub fn root(&self) -> PathBuf {
        self.tmp.path().join("ws")
    }

    /// A node dying and another starting on the same root: this fixture's
    /// workspace goes first, and its ownership lock with it, as a killed
    /// process's would (every `Job` and clone of it must be dropped
    /// already; a task of the old owner that is still finishing is waited
    /// for, like `custodian node --lock-wait`); then the root is opened
    /// again and the new owner returned.
    pub fn restart(&mut self) -> Workspace {
        self.restart_with(|root| {
            custodian::request::open_workspace(root, WorkspaceConfig::default())
        })
    }

    /// [`Fixture::restart`], the root opened again by `open`.
    pub fn restart_with(
        &mut self,
        open: impl Fn(&Path) -> Result<Workspace, custodian::workspace::WorkspaceError>,
    ) -> Workspace {
        let park = sandbox::tempdir();
        let parked = Workspace::open(park.path(), WorkspaceConfig::default()).expect("park");
        drop(std::mem::replace(&mut self.ws, parked));
        // A cleanup task of the old owner may still be finishing.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        self.ws = loop {
            match open(&self.root()) {
                Err(custodian::workspace::WorkspaceError::Locked)
                    if std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                other => break other.expect("reopen workspace"),
            }
        };
        self.ws.clone()
    }

    pub fn job_dir(&self, id: &str) -> PathBuf {
        self.root().join(".custodian/job").join(id)
    }

    pub fn snapshot(&self) -> BTreeMap<PathBuf, String> {
        snapshot(self.tmp.path())
    }
}

/// Every entry below `root` (not following symlinks) with its type, inode
/// and, for files, contents; for links, the target. The contents of the
/// workspace's ownership journals (`.custodian/journal/`) are left out: the
/// workspace appends to them and removes a clean request's; the journal
/// tests check them. So are the empty quarantines kept for reuse
/// (`.custodian/quarantine/.spare-<n>`), but not anything inside them.
pub fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        if dir.ends_with(".custodian/journal") {
            continue;
        }
        let Ok(rd) = fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(m) = fs::symlink_metadata(&p) else {
                continue;
            };
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            let ft = m.file_type();
            let desc = if ft.is_symlink() {
                format!("link {:?}", fs::read_link(&p).unwrap())
            } else if ft.is_dir() {
                stack.push(p.clone());
                if dir.ends_with(".custodian/quarantine")
                    && e.file_name().to_string_lossy().starts_with(".spare-")
                {
                    // An empty quarantine kept for the next cleanup: what
                    // it holds is still listed.
                    continue;
                }
                format!("dir {}", m.ino())
            } else if ft.is_file() {
                format!("file {} {:?}", m.ino(), fs::read(&p).unwrap_or_default())
            } else if ft.is_fifo() {
                format!("fifo {}", m.ino())
            } else {
                format!("special {}", m.ino())
            };
            out.insert(rel, desc);
        }
    }
    out
}

/// The workspace-relative paths (below `tmp`) of everything `job` registered.
pub fn inventoried(fx: &Fixture, job: &Job) -> BTreeSet<PathBuf> {
    let inv = job.inventory();
    let base = PathBuf::from("ws/.custodian/job").join(job.id().as_str());
    (0..inv.len() as u32)
        .map(|i| {
            let rel = inv.relative_path(i);
            if rel.is_empty() {
                base.clone()
            } else {
                base.join(rel)
            }
        })
        .collect::<BTreeSet<_>>()
        .into_iter()
        .inspect(|p| {
            assert!(
                fx.tmp.path().join(p).exists(),
                "{p:?} registered but absent"
            )
        })
        .collect()
}

/// Asserts that exactly `gone` disappeared between `before` and `after`, and
/// everything else is unchanged.
pub fn assert_only_removed(
    before: &BTreeMap<PathBuf, String>,
    after: &BTreeMap<PathBuf, String>,
    gone: &BTreeSet<PathBuf>,
) {
    for (p, d) in before {
        if gone.contains(p) {
            assert!(!after.contains_key(p), "{p:?} should have been removed");
        } else {
            assert_eq!(after.get(p), Some(d), "{p:?} changed or vanished");
        }
    }
    for p in after.keys() {
        assert!(before.contains_key(p), "{p:?} appeared");
    }
}

/// Asserts that nothing changed between two snapshots.
pub fn assert_unchanged(before: &BTreeMap<PathBuf, String>, after: &BTreeMap<PathBuf, String>) {
    assert_only_removed(before, after, &BTreeSet::new());
}

pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

pub fn assert_failed(
    r: &custodian::workspace::CleanupResult,
    code: custodian::workspace::CleanupCode,
) {
    assert_eq!(r.status, CleanupStatus::Failed, "{r:?}");
    assert_eq!(r.code, Some(code), "{r:?}");
}

/// A job with some nested registered artifacts: `a/`, `a/b/`, `a/b/out.json`,
/// `a/log.txt`, `top.txt`.
pub fn populate(job: &Job) {
    use std::io::Write;
    job.create_file("a/b/out.json")
        .unwrap()
        .write_all(b"{\"ok\":true}")
        .unwrap();
    job.create_file("a/log.txt")
        .unwrap()
        .write_all(b"log")
        .unwrap();
    job.create_file("top.txt")
        .unwrap()
        .write_all(b"top")
        .unwrap();
}

//! Random create / register / tamper / cleanup sequences against a real
//! workspace in a temporary directory. Oracle, after every step: nothing
//! outside the job tree changed (user files, a sibling request's job, an
//! `outside/` directory that tampering points symlinks and hard links at);
//! after a clean cleanup the job directory is gone.
//!
//! Tampering happens only inside the job tree and only with names the
//! target picks, and all paths live under the iteration's own temp dir, so
//! the target can never delete anything outside it.
#![no_main]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use arbitrary::Arbitrary;
use custodian::workspace::{ArtifactDir, CleanupStatus, Workspace, WorkspaceConfig};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Tamper {
    /// An unregistered file in a registered directory.
    StrayFile,
    /// A registered entry renamed away and a symlink to `outside/` put in its place.
    Symlink,
    /// A registered file deleted and recreated under the same name.
    ReplaceInode,
    /// A unix socket in a registered directory.
    Socket,
    /// A registered file deleted.
    Remove,
    /// A registered file replaced by a hard link to a user file.
    HardLinkUser,
    /// A registered directory renamed within the job tree.
    RenameDir,
}

#[derive(Arbitrary, Debug)]
enum Op {
    CreateDir { parent: u8, name: u8 },
    CreateFile { parent: u8, name: u8 },
    CreatePath { a: u8, b: u8 },
    Tamper { what: Tamper, target: u8 },
    Cleanup,
}

fn rt() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    })
}

/// Everything below `root` except the subtree `skip`: type, inode, bytes.
fn snapshot(root: &Path, skip: &Path) -> BTreeMap<PathBuf, (u32, u64, u64, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        // The workspace's ownership journals: it appends to them and removes
        // a clean request's (the journal's own tests check them).
        if dir.ends_with(".custodian/journal") {
            continue;
        }
        for e in fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p == skip {
                continue;
            }
            let m = fs::symlink_metadata(&p).unwrap();
            let bytes = if m.is_file() {
                fs::read(&p).unwrap()
            } else {
                Vec::new()
            };
            if m.is_dir() {
                stack.push(p.clone());
            }
            // Empty quarantines kept for the next cleanup come and go (what
            // they hold is still listed), and with them the quarantine
            // root's link count.
            if dir.ends_with(".custodian/quarantine")
                && e.file_name().to_string_lossy().starts_with(".spare-")
            {
                continue;
            }
            let nlink = if p.ends_with(".custodian/quarantine") {
                0
            } else {
                m.nlink()
            };
            out.insert(p, (m.mode(), m.ino(), nlink, bytes));
        }
    }
    out
}

fuzz_target!(|ops: Vec<Op>| {
    let tmp = tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap();
    let root = tmp.path().join("ws");
    let outside = tmp.path().join("outside");
    fs::create_dir_all(&root).unwrap();
    fs::create_dir_all(&outside).unwrap();
    fs::write(root.join("user.txt"), b"user").unwrap();
    for i in 0..4 {
        fs::write(outside.join(format!("n{i}")), format!("outside {i}")).unwrap();
    }
    let ws = Workspace::open(&root, WorkspaceConfig::default()).unwrap();
    let sibling = ws.open_request("sib").unwrap();
    sibling.create_file("n0").unwrap();
    let job = ws.open_request("f").unwrap();
    let job_dir = root.join(".custodian/job/f");
    let mut dirs: Vec<(ArtifactDir, PathBuf)> = vec![(job.root().unwrap(), job_dir.clone())];
    let mut files: Vec<PathBuf> = Vec::new();
    let mut tampered = 0u32;
    let before = snapshot(tmp.path(), &job_dir);

    for op in ops.into_iter().take(64) {
        match op {
            Op::CreateDir { parent, name } => {
                let (d, p) = &dirs[parent as usize % dirs.len()];
                let n = format!("n{}", name % 4);
                if let Ok(h) = d.create_dir(&n) {
                    let p = p.join(&n);
                    dirs.push((h, p));
                }
            }
            Op::CreateFile { parent, name } => {
                let (d, p) = &dirs[parent as usize % dirs.len()];
                let n = format!("n{}", name % 4);
                if d.create_file(&n).is_ok() {
                    files.push(p.join(n));
                }
            }
            Op::CreatePath { a, b } => {
                let rel = format!("n{}/n{}", a % 4, b % 4);
                if job.create_file(&rel).is_ok() {
                    files.push(job_dir.join(rel));
                }
            }
            Op::Tamper { what, target } => {
                tampered += 1;
                let file =
                    (!files.is_empty()).then(|| files[target as usize % files.len()].clone());
                let dir = dirs[target as usize % dirs.len()].1.clone();
                // Every tamper stays inside the job tree (`dir`/`file` are
                // registered paths under `job_dir`).
                if !dir.starts_with(&job_dir) {
                    continue;
                }
                let _ = match (what, file) {
                    (Tamper::StrayFile, _) => fs::write(dir.join(format!("stray{tampered}")), b"s"),
                    (Tamper::Symlink, Some(f)) => {
                        fs::rename(&f, job_dir.join(format!("moved{tampered}")))
                            .and_then(|()| std::os::unix::fs::symlink(&outside, &f))
                    }
                    (Tamper::Symlink, None) if dir != job_dir => {
                        fs::rename(&dir, job_dir.join(format!("moved{tampered}")))
                            .and_then(|()| std::os::unix::fs::symlink(&outside, &dir))
                    }
                    (Tamper::ReplaceInode, Some(f)) => {
                        fs::remove_file(&f).and_then(|()| fs::write(&f, b"impostor"))
                    }
                    (Tamper::Socket, _) => {
                        std::os::unix::net::UnixListener::bind(dir.join(format!("sock{tampered}")))
                            .map(drop)
                    }
                    (Tamper::Remove, Some(f)) => fs::remove_file(&f),
                    (Tamper::HardLinkUser, Some(f)) => {
                        fs::remove_file(&f).and_then(|()| fs::hard_link(root.join("user.txt"), &f))
                    }
                    (Tamper::RenameDir, _) if dir != job_dir => {
                        fs::rename(&dir, job_dir.join(format!("renamed{tampered}")))
                    }
                    _ => Ok(()),
                };
            }
            Op::Cleanup => break,
        }
        // Tampering with hard links changes the user's link count; compare
        // everything else.
        let now = snapshot(tmp.path(), &job_dir);
        assert_same(&before, &now);
    }
    let r = rt().block_on(job.cleanup());
    let after = snapshot(tmp.path(), &job_dir);
    assert_same(&before, &after);
    if r.status == CleanupStatus::Cleaned {
        assert!(!job_dir.exists(), "{r:?}");
    } else {
        assert!(job_dir.exists() || r.counts.dirs_removed > 0, "{r:?}");
    }
    assert!(rt().block_on(sibling.cleanup()).is_clean());
    drop(dirs);
});

fn assert_same(
    before: &BTreeMap<PathBuf, (u32, u64, u64, Vec<u8>)>,
    now: &BTreeMap<PathBuf, (u32, u64, u64, Vec<u8>)>,
) {
    assert_eq!(
        before.len(),
        now.len(),
        "entries appeared or vanished outside the job"
    );
    for (p, (mode, ino, _nlink, bytes)) in before {
        let (m2, i2, _, b2) = now.get(p).unwrap_or_else(|| panic!("{p:?} vanished"));
        assert_eq!((mode, ino, bytes), (m2, i2, b2), "{p:?} changed");
    }
}

//! Mounts inside the job tree: a tmpfs and a bind mount of the same
//! filesystem. Needs root; skipped with a printed reason otherwise.

use std::fs;
use std::path::{Path, PathBuf};

use custodian::workspace::CleanupCode;
use rustix::mount::{MountFlags, UnmountFlags};

use crate::{Fixture, assert_failed, is_root, populate};

/// Unmounts on drop so a failing test never leaves a mount behind.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = rustix::mount::unmount(&self.0, UnmountFlags::DETACH);
    }
}

fn mount_tmpfs(at: &Path) -> Option<Mounted> {
    if !is_root() {
        skipped!("mounting tmpfs needs root");
        return None;
    }
    match rustix::mount::mount(
        "custodian-test",
        at,
        "tmpfs",
        MountFlags::empty(),
        Some(c"size=1m"),
    ) {
        Ok(()) => Some(Mounted(at.to_path_buf())),
        Err(e) => {
            skipped!("cannot mount tmpfs here: {e}");
            None
        }
    }
}

fn bind(from: &Path, at: &Path) -> Option<Mounted> {
    if !is_root() {
        skipped!("bind mounts need root");
        return None;
    }
    match rustix::mount::mount_bind(from, at) {
        Ok(()) => Some(Mounted(at.to_path_buf())),
        Err(e) => {
            skipped!("cannot bind mount here: {e}");
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::mounts_in_a_private_mount_namespace"]
async fn a_tmpfs_mounted_on_a_registered_directory_fails_closed() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("tmpfs").unwrap();
    populate(&job);
    let b = fx.job_dir("tmpfs").join("a/b");
    let Some(m) = mount_tmpfs(&b) else { return };
    fs::write(b.join("out.json"), b"on the tmpfs").unwrap();
    let r = job.cleanup().await;
    assert_failed(&r, CleanupCode::MountBoundary);
    assert_eq!(r.counts.files_removed + r.counts.dirs_removed, 0, "{r:?}");
    assert_eq!(fs::read(b.join("out.json")).unwrap(), b"on the tmpfs");
    drop(m);
    // Under the mount, the registered tree is preserved too.
    assert_eq!(fs::read(b.join("out.json")).unwrap(), b"{\"ok\":true}");
    assert!(fx.job_dir("tmpfs").join("top.txt").is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::mounts_in_a_private_mount_namespace"]
async fn a_bind_mount_of_the_same_filesystem_fails_closed() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("bind").unwrap();
    populate(&job);
    // The user's own directory, same device as the workspace, bound onto a
    // registered directory: device numbers match, the mount does not.
    let user_dir = fx.root().join("src");
    fs::write(user_dir.join("out.json"), b"user file").unwrap();
    let b = fx.job_dir("bind").join("a/b");
    let Some(m) = bind(&user_dir, &b) else { return };
    let r = job.cleanup().await;
    assert_failed(&r, CleanupCode::MountBoundary);
    drop(m);
    assert_eq!(fs::read(user_dir.join("out.json")).unwrap(), b"user file");
    assert_eq!(fs::read(user_dir.join("main.rs")).unwrap(), b"fn main() {}");
    assert_eq!(fs::read(b.join("out.json")).unwrap(), b"{\"ok\":true}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::mounts_in_a_private_mount_namespace"]
async fn a_bind_mount_on_an_unregistered_name_fails_closed() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("bind2").unwrap();
    populate(&job);
    let at = fx.job_dir("bind2").join("a/extra");
    fs::create_dir(&at).unwrap();
    let Some(m) = bind(&fx.tmp.path().join("outside"), &at) else {
        return;
    };
    let r = job.cleanup().await;
    assert_failed(&r, CleanupCode::MountBoundary);
    drop(m);
    assert_eq!(
        fs::read(fx.tmp.path().join("outside/keep.txt")).unwrap(),
        b"outside data"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::mounts_in_a_private_mount_namespace"]
async fn artifacts_are_never_created_across_a_mount() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("mk").unwrap();
    job.create_dir("d").unwrap();
    let d = fx.job_dir("mk").join("d");
    let Some(_m) = mount_tmpfs(&d) else { return };
    // The path walk re-verifies the registered parent and refuses the mount.
    let e = job.create_file("d/x").unwrap_err();
    assert!(
        matches!(
            e,
            custodian::workspace::WorkspaceError::Untrusted {
                code: CleanupCode::MountBoundary,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(!d.join("x").exists());
}

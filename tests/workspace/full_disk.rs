//! A workspace on a filesystem out of inodes (issue 25: every cleanup
//! answered `io_error`, cached as final, and a restarted node answered
//! `job_not_owned`: 27 of 27 jobs were left for good).
//!
//! Each body mounts a tmpfs with a small `nr_inodes` inside its scratch
//! directory (as root the module runs in a private mount namespace,
//! `guarded::full_disk_in_a_private_mount_namespace`), opens requests that
//! create files, then fills every inode left with files outside the
//! workspace, and ends the requests.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use custodian::workspace::journal;
use custodian::workspace::{CleanupCode, CleanupStatus, WorkspaceConfig};
use rustix::mount::{MountFlags, UnmountFlags};

use crate::{Fixture, assert_failed, is_root, populate, sandbox};

/// The jobs of the scenario.
const JOBS: usize = 27;

/// Unmounts on drop so a failing test never leaves a mount behind.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = rustix::mount::unmount(&self.0, UnmountFlags::DETACH);
    }
}

/// A tmpfs of `inodes` inodes at `at`, or `None` (printed) where it cannot
/// be mounted.
fn tmpfs_of(at: &Path, inodes: u32) -> Option<Mounted> {
    if !is_root() {
        skipped!("mounting tmpfs needs root");
        return None;
    }
    let opts = std::ffi::CString::new(format!("size=16m,nr_inodes={inodes},mode=0700")).unwrap();
    match rustix::mount::mount(
        "custodian-full",
        at,
        "tmpfs",
        MountFlags::empty(),
        Some(opts.as_c_str()),
    ) {
        Ok(()) => Some(Mounted(at.to_path_buf())),
        Err(e) => {
            skipped!("cannot mount tmpfs here: {e}");
            None
        }
    }
}

/// Files outside the workspace that hold every free inode.
struct Filler {
    dir: PathBuf,
    files: Vec<PathBuf>,
}

impl Filler {
    fn new(dir: PathBuf) -> Self {
        fs::create_dir(&dir).unwrap();
        Filler {
            dir,
            files: Vec::new(),
        }
    }

    /// Creates files until the filesystem has no inode left, and checks
    /// that not even a directory can be made now.
    fn fill(&mut self) {
        loop {
            let p = self.dir.join(format!("f{}", self.files.len()));
            match fs::write(&p, b"") {
                Ok(()) => self.files.push(p),
                Err(e) if e.raw_os_error() == Some(libc_enospc()) => break,
                Err(e) => panic!("filling {p:?}: {e}"),
            }
        }
        let probe = self.dir.join("probe");
        let e = fs::create_dir(&probe).expect_err("the filesystem still has an inode");
        assert_eq!(e.raw_os_error(), Some(libc_enospc()), "{e}");
    }

    /// Frees `n` inodes.
    fn free(&mut self, n: usize) {
        for _ in 0..n {
            let p = self.files.pop().expect("a filler file");
            fs::remove_file(p).unwrap();
        }
    }
}

fn libc_enospc() -> i32 {
    rustix::io::Errno::NOSPC.raw_os_error()
}

/// Moves the quarantines reserved for the open requests out of the
/// quarantine root (as an operator might): their inodes stay taken.
fn take_reservations(qroot: &Path, to: &Path) {
    let reserved = names(qroot);
    assert!(!reserved.is_empty());
    for n in reserved {
        assert!(n.starts_with(".spare-"), "{n}");
        fs::rename(qroot.join(&n), to.join(format!("taken{n}"))).unwrap();
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = match fs::read_dir(dir) {
        Ok(rd) => rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("{dir:?}: {e}"),
    };
    v.sort();
    v
}

/// Nothing of any request is left: no job directory, no journal but the
/// emptied spares, no quarantine but the empty spares.
fn assert_nothing_left(root: &Path) {
    let internal = root.join(".custodian");
    assert_eq!(names(&internal.join("job")), Vec::<String>::new());
    for dir in ["journal", "quarantine"] {
        for n in names(&internal.join(dir)) {
            assert!(n.starts_with(".spare-"), "{dir}/{n} left");
            let p = internal.join(dir).join(&n);
            if p.is_dir() {
                assert_eq!(names(&p), Vec::<String>::new(), "{dir}/{n} holds something");
            } else {
                assert_eq!(fs::metadata(&p).unwrap().len(), 0, "{dir}/{n} not emptied");
            }
        }
    }
}

/// The scenario: 27 requests that created files, ended once every
/// inode is taken. Each cleanup runs without a new inode (its quarantine
/// was reserved when the request opened) and ends `cleaned`; nothing of
/// any request is left; the user's files and the filler are untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes and mounts: run by guarded::full_disk_in_a_private_mount_namespace"]
async fn requests_ended_with_no_inode_left_are_all_cleaned() {
    let scratch = sandbox::tempdir();
    let Some(_mounted) = tmpfs_of(scratch.path(), 600) else {
        return;
    };
    let fx = Fixture::with_config_in(WorkspaceConfig::default(), scratch.path());
    let jobs: Vec<_> = (0..JOBS)
        .map(|i| {
            let job = fx.ws.open_request(&format!("job-{i}")).unwrap();
            populate(&job);
            job
        })
        .collect();
    let mut filler = Filler::new(scratch.path().join("filler"));
    filler.fill();
    let outside = fx.snapshot();
    let mut cleaned = 0;
    for job in &jobs {
        let r = job.cleanup().await;
        assert_eq!(r.status, CleanupStatus::Cleaned, "{}: {r:?}", job.id());
        assert_eq!((r.counts.files_removed, r.counts.dirs_removed), (3, 3));
        cleaned += 1;
    }
    println!("{cleaned} of {JOBS} jobs cleaned with no inode left");
    drop(jobs);
    assert_nothing_left(&fx.root());
    let after = fx.snapshot();
    for (p, d) in &outside {
        if !p.starts_with("ws/.custodian") {
            assert_eq!(after.get(p), Some(d), "{p:?} changed");
        }
    }
    // The filesystem is still full: the cleanups freed exactly their own
    // inodes (kept spares aside), nobody else's.
    assert_eq!(
        names(&scratch.path().join("filler")).len(),
        filler.files.len()
    );
}

/// A cleanup that could not run — its reserved quarantine is gone (an
/// operator moved it away) and there is no inode to make another — answers
/// `no_space`, which is not cached: a second call runs it again (still
/// `no_space`), and once an inode is free the next call cleans. A second
/// request in the same state is left when the runtime goes away; the
/// restarted runtime's reclaim cannot run either while the disk is full
/// (`no_space`, not filed), and reclaims it once inodes are freed. Nothing
/// leaks for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes and mounts: run by guarded::full_disk_in_a_private_mount_namespace"]
async fn a_cleanup_that_could_not_run_is_run_again_and_reclaimed_after_restart() {
    let scratch = sandbox::tempdir();
    let Some(_mounted) = tmpfs_of(scratch.path(), 200) else {
        return;
    };
    let mut fx = Fixture::with_config_in(WorkspaceConfig::default(), scratch.path());
    let qroot = fx.root().join(".custodian/quarantine");
    let first = fx.ws.open_request("first").unwrap();
    populate(&first);
    let second = fx.ws.open_request("second").unwrap();
    populate(&second);
    // Both reservations taken away by hand (moved, so their inodes stay
    // taken), then every inode taken.
    let mut filler = Filler::new(scratch.path().join("filler"));
    take_reservations(&qroot, &filler.dir);
    filler.fill();

    let r = first.cleanup().await;
    assert_failed(&r, CleanupCode::NoSpace);
    assert!(r.is_transient(), "{r:?}");
    assert_eq!(r.safe_code().unwrap().as_str(), "no_space");
    assert_eq!(
        fx.ws.cleanup_result(first.id()),
        None,
        "a transient result was cached"
    );
    // Run again, not answered from a cache: still no inode.
    let again = fx.ws.cleanup("first").await.unwrap();
    assert_failed(&again, CleanupCode::NoSpace);
    assert!(fx.job_dir("first").join("a/b/out.json").is_file());
    filler.free(1);
    let r = fx.ws.cleanup("first").await.unwrap();
    assert_eq!(r.status, CleanupStatus::Cleaned, "{r:?}");
    assert_eq!((r.counts.files_removed, r.counts.dirs_removed), (3, 3));
    assert!(!fx.job_dir("first").exists());
    // Now final: cached like any result that ran.
    assert_eq!(fx.ws.cleanup_result(first.id()), Some(r));
    drop(first);

    // The second: could not run, then the runtime goes away.
    filler.fill();
    let r = second.cleanup().await;
    assert_failed(&r, CleanupCode::NoSpace);
    drop(second);
    let ws = fx.restart();
    // The old runtime's drop freed what it held (its kept spare): take it.
    filler.fill();
    let reclaimed = ws.reclaim().await;
    let codes: Vec<_> = reclaimed
        .iter()
        .map(|(id, r)| (id.as_str(), r.code))
        .collect();
    assert_eq!(
        codes,
        [("second", Some(CleanupCode::NoSpace))],
        "{reclaimed:?}"
    );
    assert_eq!(ws.cleanup_result(&reclaimed[0].0), None);
    assert!(fx.job_dir("second").join("top.txt").is_file());
    filler.free(1);
    let r = ws.cleanup("second").await.unwrap();
    assert_eq!(r.status, CleanupStatus::Reclaimed, "{r:?}");
    assert!(!fx.job_dir("second").exists());
    drop(ws);
    fx.restart();
    assert_nothing_left(&fx.root());
}

/// The journal of a request whose cleanup could not run holds no verdict,
/// so a restart with inodes to spare reclaims it — by its reclaim, or by a
/// cleanup of the id asked for first (before, the verdict `io_error` was
/// journalled and the restarted node answered `job_not_owned` for ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes and mounts: run by guarded::full_disk_in_a_private_mount_namespace"]
async fn a_restart_reclaims_a_request_whose_cleanup_could_not_run() {
    let scratch = sandbox::tempdir();
    let Some(_mounted) = tmpfs_of(scratch.path(), 200) else {
        return;
    };
    let mut fx = Fixture::with_config_in(WorkspaceConfig::default(), scratch.path());
    let qroot = fx.root().join(".custodian/quarantine");
    let jobs = ["left", "asked"].map(|id| {
        let job = fx.ws.open_request(id).unwrap();
        populate(&job);
        job
    });
    let mut filler = Filler::new(scratch.path().join("filler"));
    take_reservations(&qroot, &filler.dir);
    filler.fill();
    for job in &jobs {
        assert_failed(&job.cleanup().await, CleanupCode::NoSpace);
        // Whole, and without a verdict: not a record a restart skips.
        let bytes = fs::read(fx.root().join(".custodian/journal").join(job.id().as_str())).unwrap();
        let read = journal::read(&bytes);
        assert_eq!(read.tail, journal::Tail::Clean, "{:?}", job.id());
        let rep = journal::replay(&read).unwrap();
        assert!(rep.cleanup_started && rep.verdict.is_none(), "{rep:?}");
    }
    drop(jobs);
    filler.free(filler.files.len());
    let ws = fx.restart();
    // Asked for before the start's reclaim reached it: replayed on demand.
    let r = ws.cleanup("asked").await.unwrap();
    assert_eq!(r.status, CleanupStatus::Reclaimed, "{r:?}");
    assert!(!fx.job_dir("asked").exists());
    let reclaimed = ws.reclaim().await;
    let ids: Vec<_> = reclaimed
        .iter()
        .map(|(id, r)| (id.as_str(), r.status))
        .collect();
    assert_eq!(ids, [("left", CleanupStatus::Reclaimed)], "{reclaimed:?}");
    assert!(!fx.job_dir("left").exists());
    drop(ws);
    fx.restart();
    assert_nothing_left(&fx.root());
}

/// Through the node (the wire's exactly-once cleanup on top of the
/// workspace's): a `cleanup_workspace` that could not run answers
/// `failed / no_space`, and the node does not keep it as the request's
/// verdict: the next `cleanup_workspace` of the id runs again (not
/// `cached`) and cleans once an inode is free, and the node's shutdown runs
/// the cleanup of a request still held that way. Opens stay refused
/// meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes and mounts: run by guarded::full_disk_in_a_private_mount_namespace"]
async fn through_the_node_a_cleanup_that_could_not_run_is_run_again() {
    use custodian::process::LaunchOptions;
    use custodian::request::RequestId;
    use custodian::wire::{
        CleanupStatus as WireStatus, Node, NodeConfig, WireClient, WorkspaceNode,
    };

    let scratch = sandbox::tempdir();
    let Some(_mounted) = tmpfs_of(scratch.path(), 200) else {
        return;
    };
    let fx = Fixture::with_config_in(WorkspaceConfig::default(), scratch.path());
    let qroot = fx.root().join(".custodian/quarantine");
    let adapter = WorkspaceNode::new(
        fx.ws.clone(),
        LaunchOptions::new(fx.root()),
        std::time::Duration::from_secs(30),
    );
    let node = Node::new(adapter, NodeConfig::default());
    let (edge, node_side) = tokio::io::duplex(1 << 16);
    let serving = {
        let node = std::sync::Arc::clone(&node);
        tokio::spawn(async move { node.serve(node_side).await })
    };
    let client = WireClient::new(edge, 1 << 20);
    let (first, second) = (
        RequestId::new("first").unwrap(),
        RequestId::new("second").unwrap(),
    );
    for id in [&first, &second] {
        assert!(!client.open_workspace(id).await.unwrap());
        client.write_artifact(id, "out.json", "{}").await.unwrap();
    }
    let mut filler = Filler::new(scratch.path().join("filler"));
    take_reservations(&qroot, &filler.dir);
    filler.fill();

    let r = client.cleanup_workspace(&first).await.unwrap();
    assert_eq!(r.status, WireStatus::Failed, "{r:?}");
    assert_eq!(
        r.code.as_ref().map(|c| c.as_str()),
        Some("no_space"),
        "{r:?}"
    );
    // Closed to work, not cleaned: an open is refused, the job is whole.
    assert!(client.open_workspace(&first).await.is_err());
    assert!(fx.job_dir("first").join("out.json").is_file());
    // Run again, not answered from the node's memory: still no inode.
    let again = client.cleanup_workspace(&first).await.unwrap();
    assert_eq!(
        (again.status, again.cached),
        (WireStatus::Failed, false),
        "{again:?}"
    );
    filler.free(1);
    let r = client.cleanup_workspace(&first).await.unwrap();
    assert_eq!((r.status, r.cached), (WireStatus::Cleaned, false), "{r:?}");
    assert!(!fx.job_dir("first").exists());
    // Now final: a duplicate gets it from the node's memory.
    let dup = client.cleanup_workspace(&first).await.unwrap();
    assert_eq!(
        (dup.status, dup.cached),
        (WireStatus::Cleaned, true),
        "{dup:?}"
    );

    // The second could not run either; the node's shutdown runs it again.
    filler.fill();
    let r = client.cleanup_workspace(&second).await.unwrap();
    assert_eq!(r.status, WireStatus::Failed, "{r:?}");
    assert_eq!(node.open_requests(), vec![second.clone()]);
    filler.free(1);
    let closed = node.close().await;
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert_eq!(closed[0].status, WireStatus::Cleaned, "{closed:?}");
    assert!(!fx.job_dir("second").exists());
    drop(client);
    let _ = serving.await;
}

//! The coordinator with the real workspace runtime as its lifecycle. Its
//! cleanups remove job directories as root: the tests run in a private
//! mount namespace where only their scratch directory is writable
//! (`with_workspace_in_a_private_mount_namespace`), checked by each
//! body's temp dir first.

use std::sync::Arc;

use custodian::machine::request::{Candidate, CleanupReport, RequestStatus};
use custodian::request::{Coordinator, RequestLimits};
use custodian::workspace::{Workspace, WorkspaceConfig};

use crate::support::{Gate, Processes, Sink, check_log, id};

#[tokio::test]
#[ignore = "deletes: run by with_workspace_in_a_private_mount_namespace"]
async fn a_success_removes_the_job_and_keeps_the_users_files() {
    let dir = crate::sandbox::tempdir();
    std::fs::write(dir.path().join("user.txt"), "mine").unwrap();
    let ws = Workspace::open(dir.path(), WorkspaceConfig::default()).unwrap();
    let co = Coordinator::new(
        Arc::new(ws.clone()),
        Processes::new(Gate::open_always()),
        Sink::new(Gate::open_always()),
        RequestLimits::default(),
    );
    let h = co.start(id("real-1"));
    h.workspace_opening().await.unwrap();
    let job = ws.open_request("real-1").unwrap();
    std::io::Write::write_all(&mut job.create_file("out/result.json").unwrap(), b"{}").unwrap();
    let job_dir = dir.path().join(".custodian/job/real-1");
    assert!(job_dir.join("out/result.json").is_file());
    h.candidate(Candidate::Success);
    h.candidate(Candidate::CallerCancel);
    let c = h.finished().await;
    assert_eq!(
        (c.result.status(), c.result.cleanup()),
        (RequestStatus::Succeeded, CleanupReport::Cleaned)
    );
    assert!(!job_dir.exists());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("user.txt")).unwrap(),
        "mine"
    );
    check_log(&h.log(), "real workspace");
}

#[tokio::test]
#[ignore = "deletes: run by with_workspace_in_a_private_mount_namespace"]
async fn an_unregistered_file_fails_the_success_closed_and_is_kept() {
    let dir = crate::sandbox::tempdir();
    let ws = Workspace::open(dir.path(), WorkspaceConfig::default()).unwrap();
    let co = Coordinator::new(
        Arc::new(ws.clone()),
        Processes::new(Gate::open_always()),
        Sink::new(Gate::open_always()),
        RequestLimits::default(),
    );
    let h = co.start(id("real-2"));
    h.workspace_opening().await.unwrap();
    let _job = ws.open_request("real-2").unwrap();
    // Planted behind the inventory's back.
    let planted = dir.path().join(".custodian/job/real-2/planted.txt");
    std::fs::write(&planted, "suspect").unwrap();
    h.candidate(Candidate::Success);
    let c = h.finished().await;
    assert_eq!(
        c.result.status(),
        RequestStatus::Failed,
        "success + cleanup failure = failed"
    );
    let CleanupReport::Failed { code } = c.result.cleanup() else {
        panic!("{c:?}")
    };
    assert_eq!(code.as_str(), "unregistered_entry");
    assert!(planted.is_file(), "the suspect is kept for inspection");
}

//! The node path of the cgroup tier: a request whose process left a
//! silent `setsid` descendant writing into the job namespace is cleaned
//! with that descendant dead before the first file is removed.
//!
//! Cleanup deletes as root, so the body runs in a private mount namespace
//! where every visible mount is read-only except its scratch directory and
//! the cgroup v2 hierarchy, and checks that first.

use std::time::Duration;

use custodian::contain::{Hierarchy, request_cgroup};
use custodian::process::LaunchOptions;
use custodian::request::RequestId;
use custodian::wire::{CleanupVerdict, NodeWorkspace, RunSpec, WorkspaceNode};
use custodian::workspace::{Workspace, WorkspaceConfig};

const INNER: &str = "containment::node_cleans_a_request_whose_setsid_writer_is_dead_first_inner";

/// Whether `pid` is a live (non-zombie) process.
pub(crate) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !matches!(
            s.rfind(')')
                .and_then(|i| s[i + 1..].trim_start().chars().next()),
            Some('Z' | 'X') | None
        )
    })
}

#[test]
fn node_cleans_a_request_whose_setsid_writer_is_dead_first() {
    let Ok(h) = Hierarchy::discover() else {
        skipped!("no cgroup v2 mounted");
        return;
    };
    if request_cgroup().map(|cg| cg.remove()).is_err() {
        skipped!("no writable cgroup v2 here");
        return;
    }
    crate::sandbox::run_guarded_keeping(INNER, &std::env::temp_dir(), Some(&h.mount));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by node_cleans_a_request_whose_setsid_writer_is_dead_first in a mount namespace"]
async fn node_cleans_a_request_whose_setsid_writer_is_dead_first_inner() {
    let h = Hierarchy::discover().unwrap();
    let scratch = crate::sandbox::scratch_keeping(Some(&h.mount));

    let root = scratch.join("ws");
    std::fs::create_dir(&root).unwrap();
    let ws = Workspace::open(&root, WorkspaceConfig::default()).unwrap();
    let node = WorkspaceNode::new(ws, LaunchOptions::new(&root), Duration::from_secs(20));
    let id = RequestId::new("node-escape").unwrap();
    let scope = node.open(&id).await.unwrap();
    node.write_artifact(&id, &scope, "log", b"").await.unwrap();
    let log = root.join(".custodian/job/node-escape/log");
    assert!(log.is_file());
    let ticks = scratch.join("ticks");
    // The root exits at once; its descendant leaves the session, closes its
    // stdio and keeps appending to a job file and to a file outside.
    let script = "setsid sh -c 'exec </dev/null >/dev/null 2>&1; \
                  while :; do echo x >> \"$0\"; echo x >> \"$1\"; sleep 0.005; done' \"$0\" \"$1\" & \
                  echo $!; sleep 0.2";
    let spec = RunSpec {
        executable: "/bin/sh".into(),
        argv: vec![
            "-c".into(),
            script.into(),
            log.display().to_string(),
            ticks.display().to_string(),
        ],
        env: Default::default(),
        cwd: None,
        timeout_ms: Some(20_000),
        confinement: None,
    };
    let summary = node.run(&id, &scope, spec).await.unwrap();
    let writer: u32 = summary.stdout.trim().parse().unwrap();
    assert!(
        std::fs::metadata(&ticks).is_ok_and(|m| m.len() > 0),
        "the writer never wrote"
    );
    // The cgroup tier saw the writer, killed it with the cgroup and says so.
    assert_eq!(summary.descendants.as_str(), "terminated", "{summary:?}");
    assert!(
        !alive(writer),
        "the setsid writer {writer} survived the run"
    );

    assert_eq!(node.cancel(&id, Some(&scope)).await, 0);
    assert_eq!(node.cleanup(&id).await, CleanupVerdict::Cleaned);
    let ticks_after = std::fs::metadata(&ticks).unwrap().len();
    assert!(!root.join(".custodian/job/node-escape").exists());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        std::fs::metadata(&ticks).unwrap().len(),
        ticks_after,
        "written after cleanup"
    );
}

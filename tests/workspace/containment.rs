//! The request's cgroup: cleanup kills it and sees it empty before the
//! first file is removed, so no process of the request, not even one that
//! left its process group, can write once removal starts.
//!
//! The cleanup runs as root, so the test body runs in a private mount
//! namespace where every mount is read-only except its scratch directory
//! and the cgroup v2 hierarchy (which it must write to create cgroups), and
//! checks that before it starts.

use std::time::Duration;

use custodian::contain::{Hierarchy, request_cgroup};
use custodian::process::invocation::Tunables;
use custodian::process::{Invocation, InvocationSpec, LaunchOptions};
use custodian::workspace::{CleanupCode, CleanupStatus, WorkspaceConfig};

use crate::{Fixture, assert_failed};

const INNER: &str = "containment::request_cgroup_kills_a_setsid_writer_before_removal_inner";

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !matches!(
            s.rfind(')')
                .and_then(|i| s[i + 1..].trim_start().chars().next()),
            Some('Z' | 'X') | None
        )
    })
}

/// Runs `inner` in a mount namespace that keeps the cgroup v2 hierarchy
/// writable, or says why it cannot.
fn run_with_cgroups(inner: &str) {
    let cgroup_ok = request_cgroup().map(|cg| cg.remove()).is_ok();
    let Ok(h) = Hierarchy::discover() else {
        eprintln!("skipped: no cgroup v2 mounted");
        return;
    };
    if !cgroup_ok {
        eprintln!("skipped: no writable cgroup v2 here");
        return;
    }
    crate::sandbox::run_guarded_keeping(inner, &std::env::temp_dir(), Some(&h.mount));
}

#[test]
fn request_cgroup_kills_a_setsid_writer_before_removal() {
    run_with_cgroups(INNER);
}

#[tokio::test]
#[ignore = "run by request_cgroup_kills_a_setsid_writer_before_removal in a mount namespace"]
async fn request_cgroup_kills_a_setsid_writer_before_removal_inner() {
    let h = Hierarchy::discover().unwrap();
    let scratch = crate::sandbox::scratch_keeping(Some(&h.mount));

    // The cleanup bound is far shorter than the process's grace: cleanup
    // goes on while the root still ignores TERM, and only the request's
    // cgroup can stop the writer in time.
    let config = WorkspaceConfig {
        cleanup_bound: Duration::from_millis(300),
        ..WorkspaceConfig::default()
    };
    let fx = Fixture::with_config_in(config, &scratch);
    let job = fx.ws.open_request("req-escape").unwrap();
    drop(job.create_file("log").unwrap());
    let log = fx.job_dir("req-escape").join("log");
    let ticks = fx.tmp.path().join("outside/ticks");
    let script = "setsid sh -c 'while :; do echo x >> \"$0\"; echo x >> \"$1\"; sleep 0.005; done' \
                  \"$0\" \"$1\" </dev/null >/dev/null 2>&1 & echo $!; trap '' TERM; exec sleep 30";
    let inv = Invocation::validate(
        InvocationSpec::new("sh")
            .with_args([
                "-c".to_owned(),
                script.to_owned(),
                log.display().to_string(),
                ticks.display().to_string(),
            ])
            .with_timeout(Duration::from_secs(20))
            .with_tunables(Tunables {
                grace: Duration::from_secs(5),
                drain: Duration::from_millis(200),
                hard_margin: Duration::from_secs(1),
            }),
    )
    .unwrap();
    let running = job.launch(inv, &LaunchOptions::new(fx.root())).unwrap();
    // The writer is running.
    let mut writing = false;
    for _ in 0..200 {
        if std::fs::metadata(&log).is_ok_and(|m| m.len() > 10) {
            writing = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(writing, "the writer never wrote");

    let result = job.cleanup().await;
    let ticks_at_cleanup = std::fs::metadata(&ticks).unwrap().len();
    // The root had not settled within the bound: reported, as before; but
    // every file was removed and the job directory is gone, because the
    // writer was dead before the first removal (alive, it would have
    // recreated `log` and the job directory could not have been removed).
    assert_failed(&result, CleanupCode::ProcessBoundExceeded);
    assert!(result.counts.files_removed >= 1, "{result:?}");
    assert!(!fx.job_dir("req-escape").exists(), "{result:?}");
    // Nothing new after cleanup.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(std::fs::metadata(&ticks).unwrap().len(), ticks_at_cleanup);
    let ev = running.settled().await;
    let writer: u32 = ev.stdout.text.trim().parse().unwrap();
    assert!(!alive(writer), "the setsid writer {writer} survived");
}

const REUSE_INNER: &str =
    "containment::a_cleaned_requests_cgroup_serves_the_next_request_a_failed_ones_does_not_inner";

#[test]
fn a_cleaned_requests_cgroup_serves_the_next_request_a_failed_ones_does_not() {
    run_with_cgroups(REUSE_INNER);
}

/// Runs `cat /proc/self/cgroup` in `job` and returns the process's cgroup
/// path (relative to the mount) and its evidence's `cgroup_removal`.
async fn own_cgroup(job: &custodian::workspace::Job, root: &std::path::Path) -> (String, String) {
    let inv = Invocation::validate(
        InvocationSpec::new("cat")
            .with_args(["/proc/self/cgroup".to_owned()])
            .with_timeout(Duration::from_secs(10)),
    )
    .unwrap();
    let ev = job
        .launch(inv, &LaunchOptions::new(root))
        .unwrap()
        .settled()
        .await;
    assert_eq!(ev.exit_code, Some(0), "{ev:?}");
    let path = ev
        .stdout
        .text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .expect("a cgroup v2 line")
        .to_owned();
    let json = serde_json::to_value(&*ev).unwrap();
    let removal = json["descendants"]["cgroup_removal"]
        .as_str()
        .unwrap_or("null")
        .to_owned();
    (path, removal)
}

/// The request cgroup's path: the process's cgroup without its last
/// component.
fn parent_of(path: &str) -> &str {
    &path[..path.rfind('/').unwrap()]
}

#[tokio::test]
#[ignore = "run by a_cleaned_requests_cgroup_serves_the_next_request_a_failed_ones_does_not in a mount namespace"]
async fn a_cleaned_requests_cgroup_serves_the_next_request_a_failed_ones_does_not_inner() {
    let h = Hierarchy::discover().unwrap();
    let scratch = crate::sandbox::scratch_keeping(Some(&h.mount));
    let exists = |path: &str| h.mount.join(path.trim_start_matches('/')).is_dir();
    let fx = Fixture::with_config_in(WorkspaceConfig::default(), &scratch);

    // One request, two processes in turn: the second reuses the first's
    // process cgroup, which its evidence says was kept, not removed.
    let a = fx.ws.open_request("req-a").unwrap();
    let (a1, removal) = own_cgroup(&a, &fx.root()).await;
    assert_eq!(removal, "kept_empty");
    let (a2, _) = own_cgroup(&a, &fx.root()).await;
    assert_eq!(a1, a2, "the empty process cgroup was not reused");
    assert!(exists(&a1), "a kept cgroup is still there: {a1}");
    assert_eq!(a.cleanup().await.status, CleanupStatus::Cleaned);

    // The next request gets the cleaned request's cgroup.
    let b = fx.ws.open_request("req-b").unwrap();
    let (b1, _) = own_cgroup(&b, &fx.root()).await;
    assert_eq!(
        parent_of(&b1),
        parent_of(&a1),
        "the request cgroup was not reused"
    );
    assert_eq!(b.cleanup().await.status, CleanupStatus::Cleaned);

    // A request whose cleanup fails closed: its cgroup is removed, and the
    // next request gets another.
    let c = fx.ws.open_request("req-c").unwrap();
    let (c1, _) = own_cgroup(&c, &fx.root()).await;
    assert_eq!(parent_of(&c1), parent_of(&a1));
    std::fs::write(fx.job_dir("req-c").join("stray"), b"not registered").unwrap();
    let result = c.cleanup().await;
    assert_eq!(result.status, CleanupStatus::Failed, "{result:?}");
    assert!(
        !exists(parent_of(&c1)),
        "a failed request's cgroup was kept: {c1}"
    );
    let d = fx.ws.open_request("req-d").unwrap();
    let (d1, _) = own_cgroup(&d, &fx.root()).await;
    assert_ne!(parent_of(&d1), parent_of(&c1));
    assert!(exists(&d1));
    assert_eq!(d.cleanup().await.status, CleanupStatus::Cleaned);

    // A request cgroup once killed (`Job::kill_processes`, as a node's
    // cancel does) is never reused: this kernel kills at once a process
    // cloned into a cgroup whose kill count differs from its parent's.
    let e = fx.ws.open_request("req-e").unwrap();
    let (e1, _) = own_cgroup(&e, &fx.root()).await;
    assert!(e.kill_processes().await);
    let (e2, removal) = own_cgroup(&e, &fx.root()).await;
    assert_ne!(e2, e1, "a killed cgroup served again");
    assert_eq!(removal, "removed");
    assert_eq!(e.cleanup().await.status, CleanupStatus::Cleaned);
    let f = fx.ws.open_request("req-f").unwrap();
    let (f1, _) = own_cgroup(&f, &fx.root()).await;
    assert_ne!(
        parent_of(&f1),
        parent_of(&e1),
        "a killed request cgroup served again"
    );
    assert_eq!(f.cleanup().await.status, CleanupStatus::Cleaned);
    drop((e, f));

    // Closing the workspace removes what it kept, and the base with it.
    drop((a, b, c, d));
    drop(fx);
    let base = &d1[..d1[1..].find('/').unwrap() + 1];
    assert!(
        !exists(parent_of(&d1)),
        "a spare outlived the workspace: {d1}"
    );
    assert!(!exists(base), "the base outlived the workspace: {base}");
}

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
use custodian::workspace::{CleanupCode, WorkspaceConfig};

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

#[test]
fn request_cgroup_kills_a_setsid_writer_before_removal() {
    let cgroup_ok = request_cgroup().map(|cg| cg.remove()).is_ok();
    let Ok(h) = Hierarchy::discover() else {
        eprintln!("skipped: no cgroup v2 mounted");
        return;
    };
    if !cgroup_ok {
        eprintln!("skipped: no writable cgroup v2 here");
        return;
    }
    crate::sandbox::run_guarded_keeping(INNER, &std::env::temp_dir(), Some(&h.mount));
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

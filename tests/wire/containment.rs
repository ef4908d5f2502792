//! The node path of the cgroup tier: a request whose process left a
//! silent `setsid` descendant writing into the job namespace is cleaned
//! with that descendant dead before the first file is removed.
//!
//! Cleanup deletes as root, so the body runs in a private mount namespace
//! where every visible mount is read-only except its scratch directory and
//! the cgroup v2 hierarchy, and checks that first.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use custodian::contain::{Hierarchy, request_cgroup};
use custodian::coordinator::RequestId;
use custodian::process::LaunchOptions;
use custodian::wire::{CleanupVerdict, NodeWorkspace, RunSpec, WorkspaceNode};
use custodian::workspace::{Workspace, WorkspaceConfig};

const INNER: &str = "containment::node_cleans_a_request_whose_setsid_writer_is_dead_first_inner";
const SCRATCH_ENV: &str = "CUSTODIAN_TEST_SCRATCH";

/// Remounts every mount read-only except `$1` (the scratch dir, bound onto
/// itself) and `$2` (the cgroup v2 mount), then runs the rest.
const NAMESPACE_SCRIPT: &str = r#"
set -e
mount --bind "$1" "$1"
for m in $(awk '{print $5}' /proc/self/mountinfo | sort -u); do
  case "$m" in "$1"|"$2") ;; *) mount -o remount,bind,ro "$m" 2>/dev/null || true ;; esac
done
shift 2
exec "$@"
"#;

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !matches!(
            s.rfind(')')
                .and_then(|i| s[i + 1..].trim_start().chars().next()),
            Some('Z' | 'X') | None
        )
    })
}

/// Every visible mount but `scratch` and `cgroup` is read-only.
fn only_scratch_writable(scratch: &Path, cgroup: &Path) -> Result<(), String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
    let mut visible = std::collections::BTreeMap::new();
    for line in info.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        visible.insert(f[4].to_owned(), f[5].to_owned());
    }
    for (mount, opts) in visible {
        let m = Path::new(&mount);
        if m != scratch && m != cgroup && !opts.split(',').any(|o| o == "ro") {
            return Err(format!("{mount} is writable"));
        }
    }
    Ok(())
}

#[test]
fn node_cleans_a_request_whose_setsid_writer_is_dead_first() {
    let Ok(h) = Hierarchy::discover() else {
        eprintln!("skipped: no cgroup v2 mounted");
        return;
    };
    if request_cgroup().map(|cg| cg.remove()).is_err() {
        eprintln!("skipped: no writable cgroup v2 here");
        return;
    }
    let probe = Command::new("unshare")
        .args(["-m", "--propagation", "private", "true"])
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        eprintln!("skipped: cannot create a mount namespace (unshare -m)");
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let out = Command::new("unshare")
        .args([
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            NAMESPACE_SCRIPT,
            "sh",
        ])
        .arg(scratch.path())
        .arg(&h.mount)
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            INNER,
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SCRATCH_ENV, scratch.path())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("1 passed"),
        "the inner test did not run: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by node_cleans_a_request_whose_setsid_writer_is_dead_first in a mount namespace"]
async fn node_cleans_a_request_whose_setsid_writer_is_dead_first_inner() {
    let scratch = PathBuf::from(std::env::var_os(SCRATCH_ENV).expect("run by the outer test"));
    let h = Hierarchy::discover().unwrap();
    only_scratch_writable(&scratch, &h.mount).unwrap();

    let root = scratch.join("ws");
    std::fs::create_dir(&root).unwrap();
    let ws = Workspace::open(&root, WorkspaceConfig::default()).unwrap();
    let node = WorkspaceNode::new(ws, LaunchOptions::new(&root), Duration::from_secs(20));
    let id = RequestId::new("node-escape").unwrap();
    node.open(&id).await.unwrap();
    node.write_artifact(&id, "log", b"").await.unwrap();
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
    let summary = node.run(&id, spec).await.unwrap();
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

    assert_eq!(node.cancel(&id).await, 0);
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

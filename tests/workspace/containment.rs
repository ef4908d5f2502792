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
use custodian::request::launch;
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
        skipped!("no cgroup v2 mounted");
        return;
    };
    if !cgroup_ok {
        skipped!("no writable cgroup v2 here");
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
    let config = WorkspaceConfig::default().with_cleanup_bound(Duration::from_millis(300));
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
    let running = launch(&job, inv, &LaunchOptions::new(fx.root())).unwrap();
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
    let ev = launch(job, inv, &LaunchOptions::new(root))
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

    // A request cgroup once killed (`request::kill_processes`, as a node's
    // cancel does) is never reused: this kernel kills at once a process
    // cloned into a cgroup whose kill count differs from its parent's.
    let e = fx.ws.open_request("req-e").unwrap();
    let (e1, _) = own_cgroup(&e, &fx.root()).await;
    assert!(custodian::request::kill_processes(&e).await);
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

    // Closing the workspace removes what it kept, and the base with it,
    // while every handle of it still lives (a node exits right after its
    // close, before its runtime drops the last clone).
    let base = &f1[..f1[1..].find('/').unwrap() + 1];
    assert!(exists(parent_of(&f1)), "the spare is kept while open: {f1}");
    let held = fx.ws.clone();
    fx.ws.close().await;
    assert!(
        !exists(parent_of(&f1)),
        "a spare outlived the workspace's close: {f1}"
    );
    assert!(
        !exists(base),
        "the base outlived the workspace's close: {base}"
    );
    drop((a, b, c, d, e, f, held));
    drop(fx);
    assert!(!exists(base), "the base came back: {base}");
}

/// Runs `sh -c script args…` in `job` (unconfined: it may write cgroupfs as
/// root) and returns its evidence.
async fn run_sh(
    job: &custodian::workspace::Job,
    root: &std::path::Path,
    script: &str,
    args: &[&str],
) -> std::sync::Arc<custodian::process::Evidence> {
    let inv = Invocation::validate(
        InvocationSpec::new("sh")
            .with_args(
                ["-c", script]
                    .iter()
                    .chain(args)
                    .map(|s| (*s).to_owned())
                    .collect::<Vec<_>>(),
            )
            .with_timeout(Duration::from_secs(20)),
    )
    .unwrap();
    launch(job, inv, &LaunchOptions::new(root))
        .unwrap()
        .settled()
        .await
}

/// Prints the process's own cgroup path (relative to the mount) as its
/// first stdout line.
const SELF_CGROUP: &str = "sed -n 's/^0:://p' /proc/self/cgroup";

fn first_line(ev: &custodian::process::Evidence) -> String {
    ev.stdout.text.lines().next().unwrap_or("").to_owned()
}

const POISON_INNER: &str =
    "containment::a_kept_cgroup_a_tool_poisoned_is_never_handed_out_again_inner";

/// WC-29: a tool writes the attributes of its own request cgroup and of
/// its process cgroup, and makes a child cgroup in one: none of them serves
/// again, and the next request and process are contained in fresh cgroups.
#[test]
fn a_kept_cgroup_a_tool_poisoned_is_never_handed_out_again() {
    if !crate::is_root() {
        skipped!("writing a cgroup's attributes as a tool needs root here");
        return;
    }
    run_with_cgroups(POISON_INNER);
}

#[tokio::test]
#[ignore = "run by a_kept_cgroup_a_tool_poisoned_is_never_handed_out_again in a mount namespace"]
async fn a_kept_cgroup_a_tool_poisoned_is_never_handed_out_again_inner() {
    let h = Hierarchy::discover().unwrap();
    let scratch = crate::sandbox::scratch_keeping(Some(&h.mount));
    let mount = h.mount.display().to_string();
    let exists = |path: &str| h.mount.join(path.trim_start_matches('/')).is_dir();
    let fx = Fixture::with_config_in(WorkspaceConfig::default(), &scratch);

    // Request A's tool: `cgroup.max.descendants = 0` on its request cgroup
    // (the next request could then make no process cgroup in it), and a
    // child cgroup in its own process cgroup.
    let a = fx.ws.open_request("req-poison-a").unwrap();
    let ev = run_sh(
        &a,
        &fx.root(),
        &format!(
            "cg=$({SELF_CGROUP}); echo \"$cg\"; mkdir \"$0$cg/stray\" && \
             echo 0 > \"$0$(dirname \"$cg\")/cgroup.max.descendants\" && echo poisoned"
        ),
        &[&mount],
    )
    .await;
    assert!(ev.stdout.text.contains("poisoned"), "{ev:?}");
    let a1 = first_line(&ev);
    assert_eq!(a.cleanup().await.status, CleanupStatus::Cleaned);

    // Request B: two processes at once, both in the cgroup tier, in a
    // request cgroup that is not A's; A's poisoned one is gone.
    let b = fx.ws.open_request("req-poison-b").unwrap();
    let root = fx.root();
    let slow = format!("{SELF_CGROUP}; sleep 0.5");
    let hold = run_sh(&b, &root, &slow, &[]);
    let other = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        run_sh(&b, &root, SELF_CGROUP, &[]).await
    };
    let (b1, b2) = tokio::join!(hold, other);
    for ev in [&b1, &b2] {
        let json = serde_json::to_value(&**ev).unwrap();
        assert_eq!(json["descendants"]["tier"], "cgroup", "{json}");
        assert_eq!(
            parent_of(&first_line(ev)),
            parent_of(&first_line(&b1)),
            "{json}"
        );
    }
    assert_ne!(
        parent_of(&first_line(&b1)),
        parent_of(&a1),
        "the poisoned request cgroup served again"
    );
    assert!(
        !exists(parent_of(&a1)),
        "the poisoned request cgroup was not removed"
    );

    // A process cgroup its tool changed (`cgroup.max.depth = 0`) is not the
    // next process's, within the same request.
    let ev = run_sh(
        &b,
        &fx.root(),
        &format!("cg=$({SELF_CGROUP}); echo \"$cg\"; echo 0 > \"$0$cg/cgroup.max.depth\""),
        &[&mount],
    )
    .await;
    let changed = first_line(&ev);
    let next = run_sh(&b, &fx.root(), SELF_CGROUP, &[]).await;
    assert_ne!(
        first_line(&next),
        changed,
        "a changed process cgroup served again"
    );
    assert!(
        !exists(&changed),
        "the changed process cgroup was not removed"
    );
    assert_eq!(b.cleanup().await.status, CleanupStatus::Cleaned);
    drop((a, b));
    drop(fx);
}

const HIJACK_INNER: &str =
    "containment::a_process_moved_into_a_kept_cgroup_is_neither_shared_nor_killed_inner";

/// WC-29: a tool of one request moves a process of its own into the empty
/// request cgroup that custodian keeps for the next request; the next
/// request is contained in a fresh cgroup, and neither shares the
/// hijacker's cgroup nor kills it.
#[test]
fn a_process_moved_into_a_kept_cgroup_is_neither_shared_nor_killed() {
    if !crate::is_root() {
        skipped!("moving a process between cgroups as a tool needs root here");
        return;
    }
    run_with_cgroups(HIJACK_INNER);
}

#[tokio::test]
#[ignore = "run by a_process_moved_into_a_kept_cgroup_is_neither_shared_nor_killed in a mount namespace"]
async fn a_process_moved_into_a_kept_cgroup_is_neither_shared_nor_killed_inner() {
    let h = Hierarchy::discover().unwrap();
    let scratch = crate::sandbox::scratch_keeping(Some(&h.mount));
    let mount = h.mount.display().to_string();
    let fx = Fixture::with_config_in(WorkspaceConfig::default(), &scratch);

    // Request A ends clean: its request cgroup (and its process cgroup
    // beneath) is kept, empty, for the next request.
    let a = fx.ws.open_request("req-kept").unwrap();
    let hijacker_req = fx.ws.open_request("req-hijack").unwrap();
    let a1 = first_line(&*run_sh(&a, &fx.root(), SELF_CGROUP, &[]).await);
    let h1 = first_line(&*run_sh(&hijacker_req, &fx.root(), SELF_CGROUP, &[]).await);
    assert_ne!(parent_of(&a1), parent_of(&h1));
    assert_eq!(a.cleanup().await.status, CleanupStatus::Cleaned);

    // The hijacker: a process of request H writes its own pid into the
    // kept process cgroup of A, and lives on there.
    let target = format!("{mount}{a1}/cgroup.procs");
    let ev = run_sh(
        &hijacker_req,
        &fx.root(),
        "sh -c 'echo $$ > \"$1\" && exec sleep 60' hijacker \"$0\" </dev/null >/dev/null 2>&1 & \
         echo $!; sleep 0.3",
        &[&target],
    )
    .await;
    let hijacker: u32 = first_line(&ev).parse().expect("the hijacker's pid");
    let inside = std::fs::read_to_string(format!("/proc/{hijacker}/cgroup")).unwrap_or_default();
    assert!(
        inside.trim_end().ends_with(&a1),
        "the hijack did not happen: {inside:?} vs {a1}"
    );

    // Request B: contained, in a cgroup of its own, not the hijacked one.
    let b = fx.ws.open_request("req-next").unwrap();
    let ev = run_sh(&b, &fx.root(), SELF_CGROUP, &[]).await;
    let json = serde_json::to_value(&*ev).unwrap();
    assert_eq!(json["descendants"]["tier"], "cgroup", "{json}");
    let b1 = first_line(&ev);
    assert_ne!(
        parent_of(&b1),
        parent_of(&a1),
        "the hijacked cgroup served again"
    );
    assert_eq!(b.cleanup().await.status, CleanupStatus::Cleaned);
    // B's settlement and cleanup killed nothing of the hijacker, and the
    // cgroup it sits in was left where it is.
    assert!(
        alive(hijacker),
        "another request's cleanup killed {hijacker}"
    );
    assert!(h.mount.join(a1.trim_start_matches('/')).is_dir());

    // Tidy up what the attack left: the hijacker, then its cgroups.
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &hijacker.to_string()])
        .status();
    for _ in 0..500 {
        if !alive(hijacker) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let left = h.mount.join(a1.trim_start_matches('/'));
    for _ in 0..100 {
        if std::fs::remove_dir(&left).is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = std::fs::remove_dir(left.parent().unwrap());
    assert_eq!(hijacker_req.cleanup().await.status, CleanupStatus::Cleaned);
    drop((a, b, hijacker_req));
    drop(fx);
}

const FORGED_INNER: &str =
    "containment::a_forged_journal_naming_a_foreign_cgroup_is_reported_never_killed_inner";

/// WC-30: journals forged to name cgroups that custodian did not make (one
/// of another name, one under a base whose pid is alive, one of
/// custodian's shape whose id is not the journalled one), each with a live
/// process: the reclaim reports `cgroup_not_owned` and keeps the job; every
/// process survives and every cgroup stays.
#[test]
fn a_forged_journal_naming_a_foreign_cgroup_is_reported_never_killed() {
    run_with_cgroups(FORGED_INNER);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by a_forged_journal_naming_a_foreign_cgroup_is_reported_never_killed in a mount namespace"]
async fn a_forged_journal_naming_a_foreign_cgroup_is_reported_never_killed_inner() {
    use custodian::workspace::journal::{self, Record};
    let h = Hierarchy::discover().unwrap();
    let scratch = crate::sandbox::scratch_keeping(Some(&h.mount));
    // A pid that no process has now: a reaped child's.
    let dead = {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        pid
    };
    // One victim per case: a sleeping process in a cgroup the test made
    // beside where custodian puts its bases.
    let mut victims = Vec::new();
    let tag = std::process::id();
    for case in 0..3 {
        let child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let (base, name, id) = match case {
            0 => (format!("victim-{tag}"), "r1".to_owned(), None),
            // Named as a base of a custodian process, but that pid is alive
            // (the victim itself).
            1 => (format!("custodian-{}", child.id()), "r1".to_owned(), None),
            // Of custodian's shape under a dead pid, but not the cgroup the
            // journal recorded.
            _ => (format!("custodian-{dead}"), "r1".to_owned(), Some(1)),
        };
        let dir = h.own.join(&base).join(&name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cgroup.procs"), child.id().to_string()).unwrap();
        victims.push((child, dir, base, name, id));
    }

    let mut fx = Fixture::with_config_in(WorkspaceConfig::default(), &scratch);
    for (i, (_, _, base, name, id)) in victims.iter().enumerate() {
        let rid = format!("forged-{i}");
        let job = fx.ws.open_request(&rid).unwrap();
        drop(job.create_file("out.txt").unwrap());
        drop(job);
        let path = fx.root().join(".custodian/journal").join(&rid);
        let mut bytes = std::fs::read(&path).unwrap();
        // The request layer's barrier record: the base's and the cgroup's
        // names (a `u16` length each, little-endian), then the id.
        let mut record = Vec::new();
        for b in [base.as_bytes(), name.as_bytes()] {
            record.extend_from_slice(&(b.len() as u16).to_le_bytes());
            record.extend_from_slice(b);
        }
        if let Some(id) = id {
            record.extend_from_slice(&u64::to_le_bytes(*id));
        }
        journal::encode(&Record::Barrier { record }, &mut bytes);
        std::fs::write(&path, &bytes).unwrap();
    }
    let ws = fx.restart();
    let mut results = ws.reclaim().await;
    results.sort_by(|x, y| x.0.as_str().cmp(y.0.as_str()));
    assert_eq!(results.len(), victims.len(), "{results:?}");
    let mut failures = Vec::new();
    for ((rid, r), (child, dir, ..)) in results.iter().zip(&victims) {
        let pid = &child.id();
        if r.status != CleanupStatus::Failed || r.code != Some(CleanupCode::CgroupNotOwned) {
            failures.push(format!("{rid}: {r:?}"));
        }
        if !alive(*pid) {
            failures.push(format!("{rid}: the victim {pid} was killed"));
        }
        if !dir.is_dir() {
            failures.push(format!("{rid}: the foreign cgroup {dir:?} was removed"));
        }
        if !fx.job_dir(rid.as_str()).join("out.txt").is_file() {
            failures.push(format!("{rid}: the job was not kept"));
        }
    }
    // Tidy up whatever happened, then judge.
    for (child, dir, ..) in &mut victims {
        let _ = child.kill();
        let _ = child.wait();
        for _ in 0..500 {
            if std::fs::remove_dir(&*dir).is_ok() || !dir.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = std::fs::remove_dir(dir.parent().unwrap());
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

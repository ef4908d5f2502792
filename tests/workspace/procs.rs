//! Processes of a request: cancelled and settled before any removal.
//!
//! Real processes go through the governed launcher (`request::launch`),
//! behind the request layer's barrier. `Groups` is a second, counting
//! implementation of the workspace's `Barrier` seam, over children leading
//! their own process groups (`GroupChild`: std `Command` +
//! `process_group(0)`, `killpg` through rustix): TERM, a grace, then KILL;
//! tests use it where they need to count `cancel` calls.
//!
//! The cleanups remove files as root: the tests run in a private mount
//! namespace where only their scratch and the cgroup v2 hierarchy (the
//! launcher's `Auto` containment creates request cgroups there) are
//! writable (`guarded`), checked by each fixture first.

use std::fs;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use custodian::process::invocation::Tunables;
use custodian::process::{Invocation, InvocationSpec, LaunchOptions, Running};
use custodian::request::{LaunchError, launch};
use custodian::workspace::{
    Barrier, CleanupCode, CleanupStatus, Job, StopFuture, Stopped, WorkspaceConfig, WorkspaceError,
};
use rustix::process::{Pid, Signal};

use crate::{Fixture, assert_failed, assert_only_removed, inventoried, populate};

pub struct GroupChild {
    pgid: i32,
    leader: Mutex<Child>,
    grace: Duration,
    pub cancels: AtomicU32,
}

impl GroupChild {
    pub fn spawn(script: &str, cwd: &std::path::Path, grace: Duration) -> Arc<Self> {
        let leader = Command::new("/bin/sh")
            .arg("-c")
            .arg(script)
            .current_dir(cwd)
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("spawn sh");
        Arc::new(GroupChild {
            pgid: leader.id() as i32,
            leader: Mutex::new(leader),
            grace,
            cancels: AtomicU32::new(0),
        })
    }

    pub fn pgid(&self) -> i32 {
        self.pgid
    }

    fn reap(&self) {
        let _ = self.leader.lock().unwrap().try_wait();
    }
}

/// Live (non-zombie) members of process group `pgid`, from /proc.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() > 2 && f[2] == pgid.to_string() && f[0] != "Z" && f[0] != "X" {
            out.push(pid);
        }
    }
    out
}

fn killpg(pgid: i32, sig: Signal) {
    if let Some(p) = Pid::from_raw(pgid) {
        let _ = rustix::process::kill_process_group(p, sig);
    }
}

impl GroupChild {
    pub fn cancel(&self) {
        if self.cancels.fetch_add(1, Ordering::SeqCst) > 0 {
            return;
        }
        killpg(self.pgid, Signal::TERM);
        let (pgid, grace) = (self.pgid, self.grace);
        std::thread::spawn(move || {
            std::thread::sleep(grace);
            if !group_members(pgid).is_empty() {
                killpg(pgid, Signal::KILL);
            }
        });
    }

    pub async fn settled(&self) {
        loop {
            self.reap();
            if group_members(self.pgid).is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn is_settled(&self) -> bool {
        self.reap();
        group_members(self.pgid).is_empty()
    }
}

/// A request's barrier over `GroupChild`ren: the stop closes it, cancels
/// each child still running (TERM, grace, KILL) and waits for all, at most
/// the bound.
#[derive(Default)]
pub struct Groups {
    children: Mutex<(bool, Vec<Arc<GroupChild>>)>,
}

impl Barrier for Groups {
    fn stop(&self, bound: Duration) -> StopFuture<'_> {
        Box::pin(async move {
            let list = {
                let mut c = self.children.lock().unwrap();
                c.0 = true;
                c.1.clone()
            };
            let cancelled = list.iter().filter(|c| !c.is_settled()).count() as u32;
            for c in &list {
                c.cancel();
            }
            let all = async {
                for c in &list {
                    c.settled().await;
                }
            };
            let unsettled = match tokio::time::timeout(bound, all).await {
                Ok(()) => 0,
                Err(_) => list.iter().filter(|c| !c.is_settled()).count() as u32,
            };
            Stopped::new(cancelled, unsettled)
        })
    }
}

/// Puts `child` behind `job`'s barrier (a `Groups`); refused, and the child
/// cancelled at once, once the request's cleanup took the barrier or stopped
/// it.
pub fn track(job: &Job, child: Arc<GroupChild>) -> Result<(), WorkspaceError> {
    let barrier = match job.barrier_or_insert(|| Arc::new(Groups::default())) {
        Ok(barrier) => barrier,
        Err(e) => {
            child.cancel();
            return Err(e);
        }
    };
    let mut c = barrier.children.lock().unwrap();
    if c.0 {
        drop(c);
        child.cancel();
        return Err(WorkspaceError::RequestClosed {
            request: job.id().clone(),
        });
    }
    c.1.push(child);
    Ok(())
}

impl Drop for GroupChild {
    fn drop(&mut self) {
        killpg(self.pgid, Signal::KILL);
        let _ = self.leader.lock().unwrap().wait();
    }
}

async fn wait_until(mut f: impl FnMut() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("condition never became true");
}

/// Launches `/bin/sh -c script` through the governed launcher, for `job`.
fn launch_sh(
    fx: &Fixture,
    job: &custodian::workspace::Job,
    script: &str,
    grace: Duration,
) -> Running {
    let spec = InvocationSpec::new("/bin/sh")
        .with_args(["-c", script])
        .with_timeout(Duration::from_secs(120))
        .with_tunables(Tunables {
            grace,
            ..Tunables::default()
        });
    let inv = Invocation::validate(spec).unwrap();
    launch(job, inv, &LaunchOptions::new(fx.root())).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::procs_in_a_private_mount_namespace"]
async fn an_active_child_is_terminated_before_anything_is_removed() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("active").unwrap();
    populate(&job);
    let witness = fx.tmp.path().join("outside/witness");
    // On TERM the child reports whether the request's files still exist.
    let script = format!(
        "trap 'if [ -e {job}/top.txt ]; then echo present > {w}; else echo gone > {w}; fi; exit 0' TERM; \
         echo up > {w}.up; while :; do sleep 0.05; done",
        job = fx.job_dir("active").display(),
        w = witness.display()
    );
    let running = launch_sh(&fx, &job, &script, Duration::from_secs(5));
    // The shell creates `.up` before `echo` writes into it: wait for the
    // content, or the snapshot below can catch the empty file.
    wait_until(|| fs::read_to_string(witness.with_extension("up")).is_ok_and(|s| s == "up\n"))
        .await;
    let before = fx.snapshot();
    let gone = inventoried(&fx, &job);
    let r = job.cleanup().await;
    assert_eq!(r.status, CleanupStatus::Cleaned, "{r:?}");
    assert_eq!(
        (r.counts.processes_cancelled, r.counts.processes_unsettled),
        (1, 0)
    );
    assert_eq!(fs::read_to_string(&witness).unwrap(), "present\n");
    let evidence = running
        .try_settled()
        .expect("settled before cleanup returned");
    assert_eq!(evidence.exit_code, Some(0), "the trap ran and exited");
    assert!(group_members(running.pgid() as i32).is_empty());
    let mut after = fx.snapshot();
    after.remove(std::path::Path::new("outside/witness"));
    assert_only_removed(&before, &after, &gone);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::procs_in_a_private_mount_namespace"]
async fn a_process_that_settled_before_cleanup_is_not_counted_as_cancelled() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("settled").unwrap();
    populate(&job);
    let done = launch_sh(&fx, &job, "exit 0", Duration::from_secs(5));
    let evidence = done.settled().await;
    assert_eq!(evidence.exit_code, Some(0));
    let running = launch_sh(
        &fx,
        &job,
        "while :; do sleep 0.05; done",
        Duration::from_secs(5),
    );
    let r = job.cleanup().await;
    assert!(r.is_clean(), "{r:?}");
    // Two launched, one still running: one cancelled.
    assert_eq!(
        (r.counts.processes_cancelled, r.counts.processes_unsettled),
        (1, 0),
        "{r:?}"
    );
    assert!(running.try_settled().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::procs_in_a_private_mount_namespace"]
async fn helper_process_descendants_are_all_gone_after_cleanup() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("desc").unwrap();
    populate(&job);
    let running = launch_sh(
        &fx,
        &job,
        "sleep 1000 & sleep 1000 & (sleep 1000 & wait) & wait",
        Duration::from_millis(500),
    );
    let pgid = running.pgid() as i32;
    wait_until(|| group_members(pgid).len() >= 5).await;
    let members = group_members(pgid);
    let r = job.cleanup().await;
    assert!(r.is_clean(), "{r:?}");
    assert_eq!(r.counts.processes_cancelled, 1);
    assert!(group_members(pgid).is_empty());
    for pid in members {
        let state = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let alive = state
            .rsplit_once(')')
            .map(|(_, r)| !r.trim_start().starts_with('Z'))
            .unwrap_or(false);
        assert!(!alive, "descendant {pid} survived: {state}");
    }
    let evidence = running
        .try_settled()
        .expect("settled before cleanup returned");
    println!("descendants: {:?}", evidence.descendants);
    assert!(!fx.job_dir("desc").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::procs_in_a_private_mount_namespace"]
async fn a_cleanup_that_exceeds_its_bound_reports_it() {
    let fx = Fixture::with_config(
        WorkspaceConfig::default().with_cleanup_bound(Duration::from_millis(300)),
    );
    let job = fx.ws.open_request("slow").unwrap();
    populate(&job);
    // Ignores TERM, and the grace before KILL is far beyond the bound.
    let ready = fx.tmp.path().join("outside/ready");
    let script = format!(
        "trap '' TERM; echo up > {}; while :; do sleep 0.05; done",
        ready.display()
    );
    let running = launch_sh(&fx, &job, &script, Duration::from_secs(30));
    // Only once the trap is installed does TERM get ignored.
    wait_until(|| ready.exists()).await;
    let r = job.cleanup().await;
    assert_failed(&r, CleanupCode::ProcessBoundExceeded);
    assert_eq!(
        (r.counts.processes_cancelled, r.counts.processes_unsettled),
        (1, 1)
    );
    // The child outlived the bound (`processes_unsettled` above); in the
    // cgroup tier the request's cgroup was then killed and seen empty
    // before the filesystem part ran, so it may have settled by now.
    // The filesystem part still ran, fail-closed as always.
    assert_eq!(r.counts.files_removed, 3);
    killpg(running.pgid() as i32, Signal::KILL);
    let _ = running.settled().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::procs_in_a_private_mount_namespace"]
async fn a_launch_after_cleanup_started_is_refused() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("closed").unwrap();
    assert!(job.cleanup().await.is_clean());
    let inv = Invocation::validate(InvocationSpec::new("/bin/true")).unwrap();
    let e = launch(&job, inv, &LaunchOptions::new(fx.root())).unwrap_err();
    assert!(
        matches!(
            e,
            LaunchError::Workspace(WorkspaceError::RequestClosed { .. })
        ),
        "{e:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::procs_in_a_private_mount_namespace"]
async fn a_launch_with_its_cwd_in_the_internal_namespace_is_refused() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("cwd").unwrap();
    let inv = Invocation::validate(InvocationSpec::new("/bin/true").with_cwd(".custodian/job/cwd"))
        .unwrap();
    let e = launch(&job, inv, &LaunchOptions::new(fx.root())).unwrap_err();
    assert!(
        matches!(e, LaunchError::Workspace(WorkspaceError::InternalPath(_))),
        "{e:?}"
    );
    assert!(job.cleanup().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::procs_in_a_private_mount_namespace"]
async fn a_process_tracked_after_cleanup_started_is_cancelled_at_once() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("late").unwrap();
    assert!(job.cleanup().await.is_clean());
    let child = GroupChild::spawn("sleep 1000", &fx.root(), Duration::from_millis(200));
    let e = track(&job, child.clone()).unwrap_err();
    assert!(matches!(e, WorkspaceError::RequestClosed { .. }));
    assert_eq!(child.cancels.load(Ordering::SeqCst), 1);
    child.settled().await;
    assert!(group_members(child.pgid()).is_empty());
}

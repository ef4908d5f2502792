//! Races: duplicate and concurrent cleanups, cancel and close racing
//! cleanup, a racer swapping directories for symlinks, and depth.

use std::fs;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Waker};
use std::time::Duration;

use custodian::workspace::{CleanupStatus, WorkspaceError};

use crate::procs::{GroupChild, group_members, track};
use crate::{Fixture, assert_only_removed, inventoried, populate, snapshot};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::races_in_a_private_mount_namespace"]
async fn duplicate_and_concurrent_cleanup_calls_get_one_result() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("dup").unwrap();
    populate(&job);
    let child = GroupChild::spawn("sleep 1000", &fx.root(), Duration::from_millis(200));
    track(&job, child.clone()).unwrap();
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..16 {
        let ws = fx.ws.clone();
        let job = job.clone();
        calls.spawn(async move {
            if i % 2 == 0 {
                job.cleanup().await
            } else {
                ws.cleanup("dup").await.unwrap()
            }
        });
    }
    // One caller goes away at once; the work must not care.
    let dropped = tokio::spawn({
        let job = job.clone();
        async move { job.cleanup().await }
    });
    dropped.abort();
    let mut results = Vec::new();
    while let Some(r) = calls.join_next().await {
        results.push(r.unwrap());
    }
    let first = results[0].clone();
    assert_eq!(first.status, CleanupStatus::Cleaned, "{first:?}");
    assert_eq!(first.counts.files_removed, 3);
    assert!(results.iter().all(|r| *r == first));
    // Late duplicates get the same result too.
    assert_eq!(job.cleanup().await, first);
    assert_eq!(fx.ws.cleanup("dup").await.unwrap(), first);
    assert_eq!(child.cancels.load(Ordering::SeqCst), 1, "one cleanup ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::races_in_a_private_mount_namespace"]
async fn the_work_finishes_when_every_caller_goes_away() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("orphan").unwrap();
    populate(&job);
    let caller = tokio::spawn({
        let job = job.clone();
        async move { job.cleanup().await }
    });
    tokio::task::yield_now().await;
    caller.abort();
    let r = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if !fx.job_dir("orphan").exists() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // Either the abort came after the election (the work ran to the end), or
    // before it (nothing started): then a new caller starts it now.
    if r.is_err() {
        assert!(job.cleanup().await.is_clean());
    }
    assert!(!fx.job_dir("orphan").exists());
    assert!(job.cleanup().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::races_in_a_private_mount_namespace"]
async fn cleanup_racing_cancel_and_runtime_close_removes_only_inventoried_paths() {
    for round in 0..5 {
        let fx = Fixture::new();
        let job = fx.ws.open_request("race").unwrap();
        let other = fx.ws.open_request("other").unwrap();
        populate(&job);
        populate(&other);
        let child = GroupChild::spawn("sleep 1000 & wait", &fx.root(), Duration::from_millis(200));
        track(&job, child.clone()).unwrap();
        let before = fx.snapshot();
        let mut gone = inventoried(&fx, &job);
        gone.extend(inventoried(&fx, &other));
        let cancel = {
            let child = child.clone();
            tokio::spawn(async move { child.cancel() })
        };
        let close = tokio::spawn({
            let ws = fx.ws.clone();
            async move { ws.close().await }
        });
        let direct = tokio::spawn({
            let job = job.clone();
            async move { job.cleanup().await }
        });
        let by_id = tokio::spawn({
            let ws = fx.ws.clone();
            async move { ws.cleanup("race").await.unwrap() }
        });
        cancel.await.unwrap();
        let closed = close.await.unwrap();
        let (a, b) = (direct.await.unwrap(), by_id.await.unwrap());
        assert_eq!(a, b, "round {round}");
        assert!(a.is_clean(), "round {round}: {a:?}");
        for (id, r) in &closed {
            assert!(r.is_clean(), "{id}: {r:?}");
            if id.as_str() == "race" {
                assert_eq!(*r, a);
            }
        }
        assert!(group_members(child.pgid()).is_empty());
        assert_only_removed(&before, &fx.snapshot(), &gone);
        assert!(matches!(
            fx.ws.open_request("new"),
            Err(WorkspaceError::Closed)
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::races_in_a_private_mount_namespace"]
async fn closing_the_runtime_cleans_every_active_request() {
    let fx = Fixture::new();
    let mut gone = std::collections::BTreeSet::new();
    for id in ["c1", "c2", "c3"] {
        let job = fx.ws.open_request(id).unwrap();
        populate(&job);
        gone.extend(inventoried(&fx, &job));
    }
    let before = fx.snapshot();
    let mut closed = fx.ws.close().await;
    closed.sort_by(|a, b| a.0.cmp(&b.0));
    let ids: Vec<_> = closed
        .iter()
        .map(|(id, _)| id.as_str().to_owned())
        .collect();
    assert_eq!(ids, ["c1", "c2", "c3"]);
    assert!(closed.iter().all(|(_, r)| r.is_clean()));
    assert_only_removed(&before, &fx.snapshot(), &gone);
    assert!(fx.ws.active_requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::races_in_a_private_mount_namespace"]
async fn a_racer_swapping_a_registered_directory_for_a_symlink_changes_nothing_outside() {
    for round in 0..20 {
        let fx = Fixture::new();
        let job = fx.ws.open_request("swap").unwrap();
        let dir = job.create_dir("victim").unwrap();
        // The outside directory holds the very names the job registered.
        let outside = fx.tmp.path().join("outside");
        for i in 0..40 {
            dir.create_file(&format!("f{i}")).unwrap();
            fs::write(outside.join(format!("f{i}")), format!("user {i}")).unwrap();
        }
        drop(dir);
        let before_outside = snapshot(&outside);
        let before_user = snapshot(&fx.root().join("src"));
        let stop = Arc::new(AtomicBool::new(false));
        let racer = {
            let stop = stop.clone();
            let victim = fx.job_dir("swap").join("victim");
            let parked = fx.job_dir("swap").join("parked");
            let outside = outside.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if fs::rename(&victim, &parked).is_ok() {
                        let _ = std::os::unix::fs::symlink(&outside, &victim);
                        std::thread::yield_now();
                        let _ = fs::remove_file(&victim);
                        let _ = fs::rename(&parked, &victim);
                    }
                }
            })
        };
        let r = job.cleanup().await;
        stop.store(true, Ordering::Relaxed);
        racer.join().unwrap();
        assert_eq!(snapshot(&outside), before_outside, "round {round}: {r:?}");
        assert_eq!(snapshot(&fx.root().join("src")), before_user);
        assert_eq!(
            fs::read(fx.root().join("result.txt")).unwrap(),
            b"user result"
        );
    }
}

#[test]
#[ignore = "deletes: run by guarded::races_in_a_private_mount_namespace"]
fn a_deep_registered_tree_is_removed_without_exhausting_descriptors() {
    const DEPTH: usize = 2000;
    const FD_LIMIT: u64 = 64;
    if std::env::var_os("CUSTODIAN_DEEP_TREE_CHILD").is_none() {
        // Re-run this very test in a child process whose descriptor limit is
        // far below the tree's depth.
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "races::a_deep_registered_tree_is_removed_without_exhausting_descriptors",
                "--include-ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("CUSTODIAN_DEEP_TREE_CHILD", "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
        assert!(stdout.contains("deep tree removed"), "{stdout}\n{stderr}");
        return;
    }
    rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: Some(FD_LIMIT),
            maximum: None,
        },
    )
    .or_else(|_| {
        let max = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum;
        rustix::process::setrlimit(
            rustix::process::Resource::Nofile,
            rustix::process::Rlimit {
                current: Some(FD_LIMIT),
                maximum: max,
            },
        )
    })
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let fx = Fixture::on_tmpfs();
        let job = fx.ws.open_request("deep").unwrap();
        let mut dir = job.root().unwrap();
        for i in 0..DEPTH {
            dir.create_file("leaf").unwrap();
            dir = dir.create_dir(&format!("d{}", i % 10)).unwrap();
        }
        drop(dir);
        assert_eq!(job.artifact_count(), 1 + 2 * DEPTH);
        let r = job.cleanup().await;
        assert!(r.is_clean(), "{r:?}");
        assert_eq!(r.counts.dirs_removed as usize, DEPTH + 1);
        assert_eq!(r.counts.files_removed as usize, DEPTH);
        assert!(!fx.job_dir("deep").exists());
        println!("deep tree removed");
    });
}

/// A cleanup of an id the workspace holds nothing for fences the id before
/// it looks: an open between the cleanup's start and its filed result is
/// refused, and no job directory outlives the `already_gone` report. Opens
/// used to be refused only once the result was filed, so an open landing
/// after the cleanup's gone check created a job that the cleanup reported
/// gone. On a current-thread runtime the cleanup is entered (its future
/// polled once) while its task has not run; the task's own steps (look up,
/// gone check, file) have no await point between them and are covered by
/// the loom model `holdings.rs` on the same primitive.
#[tokio::test(flavor = "current_thread")]
#[ignore = "deletes: run by guarded::races_in_a_private_mount_namespace"]
async fn an_open_after_a_cleanup_of_the_id_started_is_refused() {
    let fx = Fixture::new();
    let mut cleanup = std::pin::pin!(fx.ws.cleanup("late"));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(
        cleanup.as_mut().poll(&mut cx).is_pending(),
        "the cleanup's task cannot have run yet"
    );
    let refused = fx.ws.open_request("late");
    assert!(
        matches!(refused, Err(WorkspaceError::AlreadyCleaned { .. })),
        "{refused:?}"
    );
    assert!(!fx.job_dir("late").exists());
    let result = cleanup.await.unwrap();
    assert_eq!(result.status, CleanupStatus::AlreadyGone, "{result:?}");
    assert!(!fx.job_dir("late").exists());
    assert!(fx.ws.active_requests().is_empty());
    // Still refused while the result is cached.
    assert!(matches!(
        fx.ws.open_request("late"),
        Err(WorkspaceError::AlreadyCleaned { .. })
    ));
}

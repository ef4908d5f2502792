//! The workspace's barrier seam: whatever could write into a job stands
//! behind the request's `Barrier`, and every cleanup of the job (a caller's,
//! the close's, a reclaim's) stops it first, once, and removes nothing
//! unless it stopped. A barrier journalled by a run that died is revived
//! through the workspace's `Revival`, or the job is kept.
//!
//! The barriers here are scripted: each records how often it was stopped,
//! whether the job's files were still there when it was, and what its
//! cleanup told it at the end.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use custodian::workspace::{
    Barrier, CleanupCode, CleanupStatus, Revival, StopFuture, Stopped, Workspace, WorkspaceConfig,
    WorkspaceError,
};

use crate::{Fixture, assert_failed, assert_only_removed, assert_unchanged, inventoried, populate};

/// A barrier that answers `answer` and records its calls. `watch` is a file
/// of the job the stop looks for.
#[derive(Debug)]
struct Scripted {
    answer: Stopped,
    watch: PathBuf,
    stops: AtomicU32,
    present_at_stop: Mutex<Vec<bool>>,
    finished: Mutex<Vec<bool>>,
}

impl Scripted {
    fn new(answer: Stopped, watch: PathBuf) -> Arc<Self> {
        Arc::new(Scripted {
            answer,
            watch,
            stops: AtomicU32::new(0),
            present_at_stop: Mutex::new(Vec::new()),
            finished: Mutex::new(Vec::new()),
        })
    }

    fn stops(&self) -> u32 {
        self.stops.load(Ordering::SeqCst)
    }
}

impl Barrier for Scripted {
    fn stop(&self, _bound: Duration) -> StopFuture<'_> {
        Box::pin(async move {
            self.stops.fetch_add(1, Ordering::SeqCst);
            self.present_at_stop
                .lock()
                .unwrap()
                .push(self.watch.exists());
            // A stop takes a while: a removal that did not wait for it
            // would be seen above on the next attempt, or in the snapshot.
            tokio::time::sleep(Duration::from_millis(20)).await;
            self.answer
        })
    }

    fn finished(&self, retired: bool) {
        self.finished.lock().unwrap().push(retired);
    }
}

/// Another kind of barrier.
#[derive(Debug)]
struct Other;

impl Barrier for Other {
    fn stop(&self, _bound: Duration) -> StopFuture<'_> {
        Box::pin(async { Stopped::default() })
    }
}

/// The workspace's side, scripted: revives every record as `barrier` (or
/// refuses it with `refuse`), and records what it was asked and told.
struct ScriptedRevival {
    barrier: Arc<Scripted>,
    refuse: Option<CleanupCode>,
    revived: Mutex<Vec<Vec<u8>>>,
    reclaimed: AtomicU32,
    closed: AtomicU32,
}

impl Revival for ScriptedRevival {
    fn revive(&self, record: &[u8]) -> Result<Option<Arc<dyn Barrier>>, CleanupCode> {
        self.revived.lock().unwrap().push(record.to_vec());
        match self.refuse {
            Some(code) => Err(code),
            None => Ok(Some(self.barrier.clone())),
        }
    }

    fn reclaimed(&self) {
        self.reclaimed.fetch_add(1, Ordering::SeqCst);
    }

    fn closed(&self) {
        self.closed.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::barriers_in_a_private_mount_namespace"]
async fn each_cleanup_path_stops_the_barrier_once_before_any_file_goes() {
    for path in ["job", "id", "close"] {
        let fx = Fixture::new();
        let job = fx.ws.open_request("barrierd").unwrap();
        populate(&job);
        let barrier = Scripted::new(
            Stopped::new(2, 0),
            fx.job_dir("barrierd").join("a/b/out.json"),
        );
        let put = job.barrier_or_insert(|| barrier.clone()).unwrap();
        assert!(Arc::ptr_eq(&put, &barrier));
        // Asked again, the same barrier: one per request.
        let again = job.barrier_or_insert(|| Scripted::new(Stopped::default(), PathBuf::new()));
        assert!(Arc::ptr_eq(&again.unwrap(), &barrier), "{path}");
        let before = fx.snapshot();
        let gone = inventoried(&fx, &job);
        let result = match path {
            "job" => job.cleanup().await,
            "id" => fx.ws.cleanup("barrierd").await.unwrap(),
            _ => fx.ws.close().await.pop().unwrap().1,
        };
        assert_eq!(result.status, CleanupStatus::Cleaned, "{path}: {result:?}");
        assert_eq!(
            (
                result.counts.processes_cancelled,
                result.counts.processes_unsettled
            ),
            (2, 0),
            "{path}: the barrier's counts are the result's"
        );
        assert_eq!(barrier.stops(), 1, "{path}");
        assert_eq!(*barrier.present_at_stop.lock().unwrap(), [true], "{path}");
        assert_eq!(*barrier.finished.lock().unwrap(), [true], "{path}: retired");
        assert_only_removed(&before, &fx.snapshot(), &gone);
        // A duplicate cleanup stops nothing again.
        assert_eq!(job.cleanup().await, result, "{path}");
        assert_eq!(barrier.stops(), 1, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::barriers_in_a_private_mount_namespace"]
async fn a_barrier_that_does_not_stop_keeps_every_file() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("stuck").unwrap();
    populate(&job);
    let barrier = Scripted::new(
        Stopped::new(1, 1).refused(CleanupCode::ProcessBoundExceeded),
        fx.job_dir("stuck").join("top.txt"),
    );
    job.barrier_or_insert(|| barrier.clone()).unwrap();
    let before = fx.snapshot();
    let result = job.cleanup().await;
    assert_failed(&result, CleanupCode::ProcessBoundExceeded);
    assert_eq!(result.counts.files_removed + result.counts.dirs_removed, 0);
    assert_unchanged(&before, &fx.snapshot());
    assert_eq!(barrier.stops(), 1);
    assert_eq!(*barrier.finished.lock().unwrap(), [false], "not retired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::barriers_in_a_private_mount_namespace"]
async fn a_failed_cleanup_tells_its_barrier_the_journal_still_names_it() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("stray").unwrap();
    populate(&job);
    let barrier = Scripted::new(Stopped::default(), PathBuf::new());
    job.barrier_or_insert(|| barrier.clone()).unwrap();
    std::fs::write(fx.job_dir("stray").join("stray"), b"not registered").unwrap();
    let result = job.cleanup().await;
    assert_failed(&result, CleanupCode::UnregisteredEntry);
    assert_eq!(*barrier.finished.lock().unwrap(), [false]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::barriers_in_a_private_mount_namespace"]
async fn a_barrier_is_refused_once_the_cleanup_took_it_and_one_kind_per_request() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("kinds").unwrap();
    // The request layer's cancel on a job it launched nothing for: nothing
    // to kill, and no barrier put on the job.
    assert!(custodian::request::kill_processes(&job).await);
    assert!(job.barrier::<Other>().is_none());
    let other = job.barrier_or_insert(|| Arc::new(Other)).unwrap();
    assert!(Arc::ptr_eq(&job.barrier::<Other>().unwrap(), &other));
    assert!(job.barrier::<Scripted>().is_none(), "another kind");
    let e = job
        .barrier_or_insert(|| Scripted::new(Stopped::default(), PathBuf::new()))
        .unwrap_err();
    assert!(matches!(e, WorkspaceError::BarrierTaken { .. }), "{e:?}");
    assert!(job.cleanup().await.is_clean());

    let late = fx.ws.open_request("late").unwrap();
    assert!(late.cleanup().await.is_clean());
    let e = late.barrier_or_insert(|| Arc::new(Other)).unwrap_err();
    assert!(matches!(e, WorkspaceError::RequestClosed { .. }), "{e:?}");
    let e = late.journal_barrier(b"late").unwrap_err();
    assert!(matches!(e, WorkspaceError::RequestClosed { .. }), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::barriers_in_a_private_mount_namespace"]
async fn a_barrier_record_is_bounded_and_journalled_once() {
    let fx = Fixture::new();
    let job = fx.ws.open_request("records").unwrap();
    let long = vec![7u8; custodian::workspace::journal::MAX_BARRIER + 1];
    let e = job.journal_barrier(&long).unwrap_err();
    assert!(matches!(e, WorkspaceError::BarrierRecord { .. }), "{e:?}");
    job.journal_barrier(&long[1..]).unwrap();
    let e = job.journal_barrier(b"second").unwrap_err();
    assert!(matches!(e, WorkspaceError::BarrierRecord { .. }), "{e:?}");
    // The journal holds the one record, whole.
    let bytes = std::fs::read(fx.root().join(".custodian/journal/records")).unwrap();
    let read = custodian::workspace::journal::read(&bytes);
    let replay = custodian::workspace::journal::replay(&read).unwrap();
    assert_eq!(replay.barrier.as_deref(), Some(&long[1..]));
    assert!(job.cleanup().await.is_clean());
}

/// A run that died with a barrierd request: the restart's reclaim hands the
/// record to its `Revival`, stops the revived barrier while every file is
/// still there, then removes what the journal proves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::barriers_in_a_private_mount_namespace"]
async fn a_journalled_barrier_is_revived_and_stopped_before_the_reclaim_removes_anything() {
    let mut fx = Fixture::new();
    let job = fx.ws.open_request("dead").unwrap();
    job.journal_barrier(b"the dead run's barrier").unwrap();
    populate(&job);
    let gone = inventoried(&fx, &job);
    let before = fx.snapshot();
    drop(job);
    let barriers = Arc::new(ScriptedRevival {
        barrier: Scripted::new(Stopped::new(0, 0), fx.job_dir("dead").join("top.txt")),
        refuse: None,
        revived: Mutex::new(Vec::new()),
        reclaimed: AtomicU32::new(0),
        closed: AtomicU32::new(0),
    });
    let given: Arc<dyn Revival> = barriers.clone();
    let ws = fx.restart_with(|root| {
        Workspace::open_with(root, WorkspaceConfig::default(), Some(given.clone()))
    });
    let results = ws.reclaim().await;
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0].1.status, CleanupStatus::Reclaimed, "{results:?}");
    assert_eq!(
        *barriers.revived.lock().unwrap(),
        [b"the dead run's barrier".to_vec()]
    );
    assert_eq!(barriers.barrier.stops(), 1);
    assert_eq!(*barriers.barrier.present_at_stop.lock().unwrap(), [true]);
    assert_eq!(*barriers.barrier.finished.lock().unwrap(), [true]);
    assert_eq!(barriers.reclaimed.load(Ordering::SeqCst), 1);
    assert_only_removed(&before, &fx.snapshot(), &gone);
    assert_eq!(barriers.closed.load(Ordering::SeqCst), 0);
    ws.close().await;
    assert_eq!(barriers.closed.load(Ordering::SeqCst), 1);
}

/// A barrier the restart cannot honour — refused by its `Revival`, or with no
/// `Revival` to revive it — keeps the whole job: what it names may still
/// write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::barriers_in_a_private_mount_namespace"]
async fn a_journalled_barrier_that_cannot_be_revived_keeps_the_job() {
    for refused in [true, false] {
        let mut fx = Fixture::new();
        let job = fx.ws.open_request("kept").unwrap();
        job.journal_barrier(b"forged").unwrap();
        populate(&job);
        drop(job);
        let before = fx.snapshot();
        let barriers = Arc::new(ScriptedRevival {
            barrier: Scripted::new(Stopped::default(), PathBuf::new()),
            refuse: Some(CleanupCode::CgroupNotOwned),
            revived: Mutex::new(Vec::new()),
            reclaimed: AtomicU32::new(0),
            closed: AtomicU32::new(0),
        });
        let given: Arc<dyn Revival> = barriers.clone();
        let ws = fx.restart_with(|root| {
            let barriers = refused.then(|| given.clone());
            Workspace::open_with(root, WorkspaceConfig::default(), barriers)
        });
        let results = ws.reclaim().await;
        assert_eq!(results.len(), 1, "{results:?}");
        let code = if refused {
            CleanupCode::CgroupNotOwned
        } else {
            CleanupCode::ProcessBoundExceeded
        };
        assert_failed(&results[0].1, code);
        assert_eq!(barriers.revived.lock().unwrap().len(), usize::from(refused));
        assert_eq!(barriers.barrier.stops(), 0);
        assert_unchanged(&before, &fx.snapshot());
        assert!(fx.job_dir("kept").join("top.txt").is_file());
    }
}

//! What an embedder relies on from the facade's documentation alone.

use std::time::Duration;

use custodian::prelude::*;
use custodian::workspace::WorkspaceError;

use super::{inv, scratch, spill_in};

/// `Runtime::open` right after `shutdown().await` used to fail `Locked`
/// (here 12 of the 20 rounds that drop every handle first, all 20 that keep
/// them): the workspace's lock lived as long as any clone of the workspace,
/// and each request's coordinator task holds one until the last handle of
/// its request is gone and the task has run once more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn a_runtime_opens_again_as_soon_as_shutdown_returned() {
    let dir = tempfile::tempdir_in(scratch()).unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let config = || RuntimeConfig::new(&root).with_spill(spill_in(dir.path()));
    let (mut dropped, mut held) = (0, 0);
    let mut runtime = Runtime::open(config()).unwrap();
    for i in 0..40 {
        let request = runtime
            .start(RequestId::new(&format!("again-{i}")).unwrap())
            .unwrap();
        let executor = request.executor();
        executor.open_workspace().await.unwrap();
        executor.write_artifact("a.txt", b"x").await.unwrap();
        executor.run(inv("true", &[])).await.unwrap();
        executor.succeed();
        let c = tokio::time::timeout(Duration::from_secs(20), request.finished())
            .await
            .unwrap();
        assert!(c.cleanup.unwrap().is_clean());
        runtime.shutdown().await;
        // Even rounds let go of every handle first; odd ones keep them all.
        let mut kept = Some((request, executor, runtime));
        if i % 2 == 0 {
            kept = None;
        }
        runtime = match Runtime::open(config()) {
            Ok(again) => again,
            Err(RuntimeError::Workspace(WorkspaceError::Locked)) => {
                *if kept.is_none() {
                    &mut dropped
                } else {
                    &mut held
                } += 1;
                drop(kept.take());
                // Let the previous owner go before the next round.
                tokio::time::sleep(Duration::from_millis(200)).await;
                Runtime::open(config()).unwrap()
            }
            Err(e) => panic!("{e}"),
        };
        if let Some((old_request, old_executor, _old)) = kept {
            // The old handles refuse to touch the namespace.
            assert!(old_request.try_finished().is_some());
            assert!(matches!(
                old_executor.write_artifact("late.txt", b"x").await,
                Err(RuntimeError::Workspace(_))
            ));
        }
    }
    runtime.shutdown().await;
    assert_eq!(
        (dropped, held),
        (0, 0),
        "opens right after shutdown refused as locked (of 20 each: handles dropped, handles held)"
    );
}

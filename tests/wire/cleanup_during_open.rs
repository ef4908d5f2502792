//! A cleanup (and its duplicates) asked for, without a cancel, while the
//! node is still opening the request's job: the cleanup waits for the open,
//! runs once, removes the job the open created, and exactly one answer is
//! the first asker's. (`node_handler.rs` has the same race with a cancel.)

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use custodian::request::RequestId;
use custodian::wire::{CleanupStatus, Node, NodeConfig, Operation, Response};

use crate::fake_node::FakeNode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleanup_during_the_open_waits_for_it_and_removes_the_job_once() {
    let fake = FakeNode::new();
    fake.open_gated.store(true, Ordering::SeqCst);
    let node = Node::new(fake, NodeConfig::default());
    let r = RequestId::new("cleanup-during-open").unwrap();
    let open = tokio::spawn({
        let (node, r) = (Arc::clone(&node), r.clone());
        async move {
            node.handle(Operation::OpenWorkspace { request_id: r })
                .await
        }
    });
    while node.workspace().calls(&r).open == 0 {
        tokio::task::yield_now().await;
    }
    let cleanups: Vec<_> = (0..3)
        .map(|_| {
            let (node, r) = (Arc::clone(&node), r.clone());
            tokio::spawn(async move { node.cleanup(r).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        node.workspace().calls(&r).cleanup,
        0,
        "a cleanup ran while the open was still creating the job"
    );
    assert!(cleanups.iter().all(|c| !c.is_finished()));

    node.workspace().open_gate.add_permits(1);
    let answer = open.await.unwrap();
    assert!(
        matches!(answer, Response::Error { ref code, .. } if code.as_str() == "request_closed"),
        "the open raced a cleanup and must be answered closed: {answer:?}"
    );
    let mut first = 0;
    for cleanup in cleanups {
        let report = cleanup.await.unwrap();
        assert_eq!(report.status, CleanupStatus::Cleaned, "{report:?}");
        first += usize::from(!report.cached);
    }
    assert_eq!(first, 1, "exactly one answer is the first asker's");
    let calls = node.workspace().calls(&r);
    assert_eq!((calls.open, calls.cleanup), (1, 1));
    assert!(node.open_requests().is_empty());
    let again = node
        .handle(Operation::OpenWorkspace { request_id: r })
        .await;
    assert!(
        matches!(again, Response::Error { ref code, .. } if code.as_str() == "request_closed"),
        "{again:?}"
    );
}

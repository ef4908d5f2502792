//! A cleanup (and its duplicate) asked for while the node is still opening
//! the request's job: the cleanup waits for the open, runs once, and removes
//! the job the open created.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use custodian::coordinator::RequestId;
use custodian::error::SafeCode;
use custodian::wire::{
    CleanupStatus, CleanupVerdict, Node, NodeConfig, NodeWorkspace, ProcessSummary, Request,
    Response, RunSpec,
};
use tokio::sync::Semaphore;

use crate::fake_node::FakeNode;

/// The counting fake, with opens held until `gate` gives a permit.
struct GatedOpen {
    fake: FakeNode,
    gate: Semaphore,
    opening: AtomicBool,
}

impl NodeWorkspace for GatedOpen {
    async fn open(&self, request: &RequestId) -> Result<(), SafeCode> {
        self.opening.store(true, Ordering::SeqCst);
        self.gate.acquire().await.expect("gate open").forget();
        self.fake.open(request).await
    }

    async fn write_artifact(
        &self,
        request: &RequestId,
        name: &str,
        contents: &[u8],
    ) -> Result<u64, SafeCode> {
        self.fake.write_artifact(request, name, contents).await
    }

    async fn run(&self, request: &RequestId, spec: RunSpec) -> Result<ProcessSummary, SafeCode> {
        self.fake.run(request, spec).await
    }

    async fn cancel(&self, request: &RequestId) -> u32 {
        self.fake.cancel(request).await
    }

    async fn cleanup(&self, request: &RequestId) -> CleanupVerdict {
        self.fake.cleanup(request).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleanup_during_the_open_waits_for_it_and_removes_the_job_once() {
    let node = Node::new(
        GatedOpen {
            fake: FakeNode::new(),
            gate: Semaphore::new(0),
            opening: AtomicBool::new(false),
        },
        NodeConfig::default(),
    );
    let r = RequestId::new("cleanup-during-open").unwrap();
    let open = tokio::spawn({
        let (node, r) = (Arc::clone(&node), r.clone());
        async move { node.handle(Request::OpenWorkspace { request_id: r }).await }
    });
    while !node.workspace().opening.load(Ordering::SeqCst) {
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
        node.workspace().fake.calls(&r).cleanup,
        0,
        "a cleanup ran while the open was still creating the job"
    );
    assert!(cleanups.iter().all(|c| !c.is_finished()));

    node.workspace().gate.add_permits(1);
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
    let calls = node.workspace().fake.calls(&r);
    assert_eq!((calls.open, calls.cleanup), (1, 1));
    assert!(node.open_requests().is_empty());
    let again = node.handle(Request::OpenWorkspace { request_id: r }).await;
    assert!(
        matches!(again, Response::Error { ref code, .. } if code.as_str() == "request_closed"),
        "{again:?}"
    );
}

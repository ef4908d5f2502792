//! The coordinator's cleanup going through the real wire client to a real
//! node handler (with a counting fake workspace) over an in-memory duplex.

use std::sync::Arc;
use std::time::Duration;

use custodian::machine::request::{Candidate, CleanupReport, RequestStatus};
use custodian::request::{Coordinator, RequestId, RequestLimits};
use custodian::wire::{CODE_NODE_UNREACHABLE, Node, NodeConfig, WireClient};

use crate::fake_node::FakeNode;
use crate::scenarios::permutations;
use crate::support::{Gate, Sink, check_log, id, settle};

type WireCoordinator = Coordinator<WireClient, WireClient, Sink>;

fn setup(fake: FakeNode) -> (Arc<Node<FakeNode>>, WireClient, WireCoordinator) {
    let node = Node::new(fake, NodeConfig::default());
    let (edge, node_io) = tokio::io::duplex(256 * 1024);
    let n = Arc::clone(&node);
    tokio::spawn(async move { n.serve_to_end(node_io).await });
    let client = WireClient::new(edge, custodian::wire::DEFAULT_MAX_FRAME);
    let co = Coordinator::new(
        Arc::new(client.clone()),
        Arc::new(client.clone()),
        Sink::new(Gate::open_always()),
        RequestLimits::default(),
    );
    (node, client, co)
}

/// The executor's side: announce the workspace to the coordinator, then
/// open it on the node.
async fn open(client: &WireClient, h: &custodian::request::RequestHandle) {
    h.workspace_opening().await.unwrap();
    client.open_workspace(h.id()).await.unwrap();
}

#[tokio::test]
async fn racing_candidates_send_exactly_one_wire_cleanup() {
    let (node, client, co) = setup(FakeNode::gated());
    let cands = [
        Candidate::Success,
        Candidate::CallerCancel,
        Candidate::CallerDisconnect,
        Candidate::TerminalWriteFailed,
    ];
    let orders = permutations(&cands);
    for (n, order) in orders.iter().enumerate() {
        let h = co.start(id(&format!("w{n}")));
        open(&client, &h).await;
        for c in order {
            h.candidate(*c);
            settle().await;
        }
        // The cleanup is parked on the node: nothing may complete.
        settle().await;
        assert!(
            h.try_finished().is_none(),
            "{order:?}: completed before the wire cleanup"
        );
        node.workspace().gate.add_permits(1);
        let c = h.finished().await;
        assert_eq!(c.result.primary(), order[0]);
        assert_eq!(c.result.cleanup(), CleanupReport::Cleaned);
        check_log(&h.log(), &format!("{order:?}"));
        assert_eq!(node.workspace().calls(h.id()).cleanup, 1);
    }
    assert_eq!(
        node.stats().cleanup_requests,
        orders.len() as u64,
        "one wire cleanup per request"
    );
}

#[tokio::test]
async fn an_unopened_request_sends_no_cleanup_message() {
    let (node, _client, co) = setup(FakeNode::new());
    let h = co.start(id("quiet"));
    h.candidate(Candidate::Success);
    h.candidate(Candidate::CallerCancel);
    let c = h.finished().await;
    assert_eq!(c.result.cleanup(), CleanupReport::NotNeeded);
    settle().await;
    assert_eq!(node.stats().cleanup_requests, 0);
    assert_eq!(node.workspace().total_cleanups(), 0);
}

#[tokio::test]
async fn a_remote_cleanup_failure_turns_success_into_failure_with_its_code() {
    let (_node, client, co) = setup(FakeNode::new());
    let h = co.start(id("fail-remote"));
    open(&client, &h).await;
    h.candidate(Candidate::Success);
    let c = h.finished().await;
    assert_eq!(c.result.status(), RequestStatus::Failed);
    let CleanupReport::Failed { code } = c.result.cleanup() else {
        panic!("{c:?}")
    };
    assert_eq!(code.as_str(), "symlink_in_job");
}

#[tokio::test]
async fn a_lost_node_fails_the_cleanup_closed() {
    let node = Node::new(FakeNode::new(), NodeConfig::default());
    let (edge, node_io) = tokio::io::duplex(4096);
    let serving = {
        let n = Arc::clone(&node);
        tokio::spawn(async move { n.serve_to_end(node_io).await })
    };
    let client = WireClient::new(edge, 1 << 20);
    let co = Coordinator::new(
        Arc::new(client.clone()),
        Arc::new(client.clone()),
        Sink::new(Gate::open_always()),
        RequestLimits::default(),
    );
    let h = co.start(id("orphan"));
    open(&client, &h).await;
    serving.abort();
    let _ = serving.await;
    h.candidate(Candidate::CallerCancel);
    let c = h.finished().await;
    assert_eq!(
        c.result.status(),
        RequestStatus::Cancelled,
        "a cancel keeps its category"
    );
    assert_eq!(
        c.result.cleanup(),
        CleanupReport::Failed {
            code: CODE_NODE_UNREACHABLE
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_racing_requests_over_one_connection() {
    let (node, client, co) = setup(FakeNode::new());
    let mut tasks = Vec::new();
    for i in 0..1000u32 {
        let co = co.clone();
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let h = co.start(RequestId::new(&format!("m{i}")).unwrap());
            let opened = i % 3 != 0;
            if opened {
                open(&client, &h).await;
            }
            let a = {
                let h = h.clone();
                tokio::spawn(async move { h.candidate(Candidate::Success) })
            };
            let b = {
                let h = h.clone();
                tokio::spawn(async move { h.candidate(Candidate::CallerCancel) })
            };
            let c = {
                let h = h.clone();
                tokio::spawn(async move { h.candidate(Candidate::Timeout) })
            };
            let _ = tokio::join!(a, b, c);
            let done = tokio::time::timeout(Duration::from_secs(30), h.finished())
                .await
                .expect("completes");
            check_log(&h.log(), &format!("m{i}"));
            (opened, done)
        }));
    }
    let mut opened = 0;
    for t in tasks {
        let (o, done) = t.await.unwrap();
        opened += u64::from(o);
        let expected = if o {
            CleanupReport::Cleaned
        } else {
            CleanupReport::NotNeeded
        };
        assert_eq!(done.result.cleanup(), expected);
    }
    settle().await;
    assert_eq!(node.stats().cleanup_requests, opened);
    assert_eq!(u64::from(node.workspace().total_cleanups()), opened);
}

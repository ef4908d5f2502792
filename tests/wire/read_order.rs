//! A connection's requests are decided in the order the peer sent them.
//!
//! The edge sends a request's `open_workspace` before its cleanup. If the
//! node decided the frames in whatever order their tasks happened to run, a
//! cleanup decided first would answer "already gone" and be forgotten once
//! the node's bounded memory moved on (here: one more finished request with
//! a memory of one), after which the open, decided last, would create a job
//! directory that nobody cleans. Deciding frames as they are read rules that
//! order out; this test sends the three frames back to back, many times, and
//! checks that the open was always decided first (the node ran it: a
//! cleanup decided before it would have fenced it) and every opened job was
//! cleaned.

use std::sync::Arc;

use custodian::request::RequestId;
use custodian::wire::{Node, NodeConfig, Response, ResponseFrame};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::fake_node::FakeNode;

const TRIALS: usize = 2_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_sent_before_its_cleanup_is_never_decided_after_it() {
    let mut leaked = 0;
    let mut reordered = 0;
    let mut open_answers = [0usize; 2];
    for trial in 0..TRIALS {
        let node = Node::new(
            FakeNode::new(),
            NodeConfig {
                cleanup_cache: 1,
                ..NodeConfig::default()
            },
        );
        let (edge, node_io) = tokio::io::duplex(1 << 16);
        let n = Arc::clone(&node);
        let served = tokio::spawn(async move { n.serve_to_end(node_io).await });
        let (r, mut w) = tokio::io::split(edge);
        let a = format!("a{trial}");
        // The open and its cleanup arrive together; the other request's
        // cleanup a moment later, after the node may have decided them.
        let frames = format!(
            "{{\"v\":1,\"seq\":1,\"op\":\"open_workspace\",\"request_id\":\"{a}\"}}\n\
             {{\"v\":1,\"seq\":2,\"op\":\"cleanup_workspace\",\"request_id\":\"{a}\"}}\n"
        );
        w.write_all(frames.as_bytes()).await.unwrap();
        tokio::task::yield_now().await;
        let other = format!(
            "{{\"v\":1,\"seq\":3,\"op\":\"cleanup_workspace\",\"request_id\":\"other{trial}\"}}\n"
        );
        w.write_all(other.as_bytes()).await.unwrap();
        w.shutdown().await.unwrap();
        let mut lines = BufReader::new(r).lines();
        let mut answers = 0;
        while let Some(line) = lines.next_line().await.unwrap() {
            let frame: ResponseFrame = serde_json::from_str(&line).unwrap();
            if frame.seq == Some(1) {
                let opened = matches!(frame.result, Response::WorkspaceOpened { .. });
                open_answers[usize::from(opened)] += 1;
            }
            answers += 1;
        }
        served.await.unwrap().unwrap();
        assert_eq!(answers, 3, "trial {trial}: every frame is answered");
        let calls = node.workspace().calls(&RequestId::new(&a).unwrap());
        if calls.open == 0 {
            reordered += 1;
        }
        if calls.open > calls.cleanup {
            leaked += 1;
        }
        assert!(calls.cleanup <= 1, "trial {trial}: {calls:?}");
    }
    println!(
        "{TRIALS} trials: {reordered} opens decided after their cleanup, {leaked} opened jobs \
         left uncleaned; open answered opened {} / closed {} times",
        open_answers[1], open_answers[0]
    );
    assert_eq!(
        reordered, 0,
        "a cleanup was decided before the open sent first"
    );
    assert_eq!(leaked, 0, "an open was decided after its own cleanup");
}

//! The node handler with a counting fake workspace.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use custodian::request::RequestId;
use custodian::wire::{
    CleanupStatus, Node, NodeConfig, Response, ResponseFrame, RunSpec, WireClient, WireError,
    decode_request,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};

use crate::fake_node::FakeNode;

fn id(s: &str) -> RequestId {
    RequestId::new(s).unwrap()
}

/// A node on a fresh fake whose table remembers `results` finished
/// requests.
fn start_remembering(results: usize) -> (Arc<Node<FakeNode>>, WireClient) {
    let config = NodeConfig {
        cleanup_cache: results,
        ..NodeConfig::default()
    };
    start(FakeNode::new(), config)
}

/// `node`'s shutdown cleans `r`, its one open request, once.
async fn assert_close_cleans_only(node: &Arc<Node<FakeNode>>, r: &RequestId) {
    assert_eq!(node.open_requests(), std::slice::from_ref(r));
    let closed = node.close().await;
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert_eq!(closed[0].status, CleanupStatus::Cleaned, "{closed:?}");
    assert_eq!(node.workspace().calls(r).cleanup, 1);
    assert!(node.open_requests().is_empty());
}

fn start(fake: FakeNode, config: NodeConfig) -> (Arc<Node<FakeNode>>, WireClient) {
    let node = Node::new(fake, config);
    let (edge, node_io) = tokio::io::duplex(64 * 1024);
    let n = Arc::clone(&node);
    tokio::spawn(async move { n.serve_to_end(node_io).await });
    (node, WireClient::new(edge, config.max_frame))
}

/// A raw connection: write lines, read decoded response frames.
struct Raw {
    w: tokio::io::WriteHalf<DuplexStream>,
    r: tokio::io::Lines<BufReader<tokio::io::ReadHalf<DuplexStream>>>,
}

impl Raw {
    fn start(node: &Arc<Node<FakeNode>>) -> Raw {
        let (edge, node_io) = tokio::io::duplex(1 << 20);
        let n = Arc::clone(node);
        tokio::spawn(async move { n.serve_to_end(node_io).await });
        let (r, w) = tokio::io::split(edge);
        Raw {
            w,
            r: BufReader::new(r).lines(),
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.w.write_all(bytes).await.unwrap();
    }

    async fn recv(&mut self) -> ResponseFrame {
        let line = self.r.next_line().await.unwrap().expect("a response line");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }
}

fn error_code(f: &ResponseFrame) -> &str {
    match &f.result {
        Response::Error { code, .. } => code.as_str(),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[tokio::test]
async fn duplicate_cleanup_returns_the_cached_result_and_never_cleans_twice() {
    let (node, client) = start(FakeNode::new(), NodeConfig::default());
    let r = id("dup-1");
    assert!(!client.open_workspace(&r).await.unwrap());
    let first = client.cleanup_workspace(&r).await.unwrap();
    assert_eq!(
        (first.status, first.cached),
        (CleanupStatus::Cleaned, false)
    );
    for _ in 0..3 {
        let again = client.cleanup_workspace(&r).await.unwrap();
        assert_eq!(again.status, CleanupStatus::Cleaned);
        assert!(again.cached);
        assert_eq!(again.request_id, r);
    }
    assert_eq!(node.workspace().calls(&r).cleanup, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_cleanups_elect_one_and_all_see_its_result() {
    let (node, client) = start(FakeNode::gated(), NodeConfig::default());
    let r = id("fail-concurrent");
    client.open_workspace(&r).await.unwrap();
    let mut calls = Vec::new();
    for _ in 0..50 {
        let c = client.clone();
        let r = r.clone();
        calls.push(tokio::spawn(async move {
            c.cleanup_workspace(&r).await.unwrap()
        }));
    }
    // Every call is in flight and waiting on the single gated cleanup.
    while node.workspace().calls(&r).cleanup == 0 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    node.workspace().gate.add_permits(1);
    let mut owners = 0;
    for c in calls {
        let rep = c.await.unwrap();
        assert_eq!(rep.status, CleanupStatus::Failed);
        assert_eq!(rep.code.as_ref().unwrap().as_str(), "symlink_in_job");
        owners += usize::from(!rep.cached);
    }
    assert_eq!(owners, 1, "exactly one answer is the owner's");
    assert_eq!(node.workspace().calls(&r).cleanup, 1);
    assert!(!node.workspace().overlapped.load(Ordering::SeqCst));
}

#[tokio::test]
async fn cleanup_finishes_after_the_caller_goes_away() {
    let fake = FakeNode::gated();
    let (node, client) = start(fake, NodeConfig::default());
    let r = id("abandoned");
    client.open_workspace(&r).await.unwrap();
    let pending = tokio::spawn({
        let c = client.clone();
        let r = r.clone();
        async move { c.cleanup_workspace(&r).await }
    });
    while node.workspace().calls(&r).cleanup == 0 {
        tokio::task::yield_now().await;
    }
    pending.abort();
    drop(client);
    node.workspace().gate.add_permits(1);
    // A fresh connection sees the first cleanup's result, not a second run.
    let (edge, node_io) = tokio::io::duplex(4096);
    let n = Arc::clone(&node);
    tokio::spawn(async move { n.serve_to_end(node_io).await });
    let again = WireClient::new(edge, 1 << 20)
        .cleanup_workspace(&r)
        .await
        .unwrap();
    assert_eq!((again.status, again.cached), (CleanupStatus::Cleaned, true));
    assert_eq!(node.workspace().calls(&r).cleanup, 1);
}

#[tokio::test]
async fn open_is_idempotent_and_closed_requests_accept_no_work() {
    let (node, client) = start(FakeNode::new(), NodeConfig::default());
    let r = id("life");
    let err = client.write_artifact(&r, "a.txt", "x").await.unwrap_err();
    assert!(
        matches!(err, WireError::Refused { ref code } if code.as_str() == "not_open"),
        "{err:?}"
    );
    assert!(!client.open_workspace(&r).await.unwrap());
    assert!(
        client.open_workspace(&r).await.unwrap(),
        "second open reports already_open"
    );
    assert_eq!(node.workspace().calls(&r).open, 1);
    assert_eq!(
        client.write_artifact(&r, "a.txt", "hello").await.unwrap(),
        5
    );
    let spec = RunSpec {
        executable: "/bin/echo".into(),
        argv: vec!["a b".into(), "c".into()],
        env: Default::default(),
        cwd: None,
        timeout_ms: None,
        confinement: None,
    };
    assert_eq!(
        client.run_process(&r, spec.clone()).await.unwrap().stdout,
        "a b c"
    );
    client.cleanup_workspace(&r).await.unwrap();
    for err in [
        client.run_process(&r, spec).await.unwrap_err(),
        client.write_artifact(&r, "b.txt", "x").await.unwrap_err(),
        client.open_workspace(&r).await.unwrap_err(),
    ] {
        assert!(
            matches!(err, WireError::Refused { ref code } if code.as_str() == "request_closed"),
            "{err:?}"
        );
    }
    assert_eq!(node.workspace().calls(&r).run, 1);
}

#[tokio::test]
async fn cleanup_cache_is_bounded_and_eviction_only_asks_the_workspace_again() {
    let (node, client) = start_remembering(2);
    let ids: Vec<_> = (0..3).map(|i| id(&format!("c{i}"))).collect();
    for r in &ids {
        client.open_workspace(r).await.unwrap();
        client.cleanup_workspace(r).await.unwrap();
    }
    // c0 was evicted: the workspace is asked again and reports nothing to do.
    let again = client.cleanup_workspace(&ids[0]).await.unwrap();
    assert_eq!(
        (again.status, again.cached),
        (CleanupStatus::AlreadyGone, false)
    );
    assert_eq!(node.workspace().calls(&ids[0]).cleanup, 2);
    // c2 is still cached.
    assert!(client.cleanup_workspace(&ids[2]).await.unwrap().cached);
    assert_eq!(node.workspace().calls(&ids[2]).cleanup, 1);
}

#[tokio::test]
async fn malformed_frames_get_typed_errors_and_the_node_keeps_serving() {
    let node = Node::new(FakeNode::new(), NodeConfig::default());
    let mut raw = Raw::start(&node);
    let cases: [(&[u8], &str, Option<u64>); 7] = [
        (b"garbage\n", "malformed_frame", None),
        (b"\xff\xfe\x00\n", "malformed_frame", None),
        (b"{\"v\":1,\"seq\":3}\n", "unknown_op", Some(3)),
        (
            b"{\"v\":7,\"seq\":4,\"op\":\"cancel\",\"request_id\":\"r\"}\n",
            "unsupported_version",
            Some(4),
        ),
        (
            b"{\"v\":1,\"seq\":5,\"op\":\"cancel\",\"request_id\":\"a/b\"}\n",
            "invalid_request_id",
            Some(5),
        ),
        (
            b"{\"v\":1,\"seq\":6,\"op\":\"cleanup_workspace\"}\n",
            "invalid_message",
            Some(6),
        ),
        (b"42\n", "invalid_message", None),
    ];
    for (frame, code, seq) in cases {
        raw.send(frame).await;
        let resp = raw.recv().await;
        assert_eq!(
            error_code(&resp),
            code,
            "{}",
            String::from_utf8_lossy(frame)
        );
        assert_eq!(resp.seq, seq);
    }
    raw.send(b"{\"v\":1,\"seq\":9,\"op\":\"open_workspace\",\"request_id\":\"ok\"}\r\n")
        .await;
    let resp = raw.recv().await;
    assert_eq!(resp.seq, Some(9));
    assert!(matches!(
        resp.result,
        Response::WorkspaceOpened {
            already_open: false,
            ..
        }
    ));
    assert_eq!(
        node.workspace().total_cleanups(),
        0,
        "no bad frame triggered work"
    );
}

#[tokio::test]
async fn oversized_frames_are_refused_without_buffering_them() {
    let config = NodeConfig {
        max_frame: 256,
        ..NodeConfig::default()
    };
    let node = Node::new(FakeNode::new(), config);
    let mut raw = Raw::start(&node);
    // 4 MiB of one frame: far more than the limit, streamed in chunks.
    let chunk = vec![b'x'; 64 * 1024];
    let Raw { w, r } = &mut raw;
    let writer = async {
        w.write_all(b"{\"v\":1,\"seq\":1,\"op\":\"write_artifact\",\"contents\":\"")
            .await
            .unwrap();
        for _ in 0..64 {
            w.write_all(&chunk).await.unwrap();
        }
        w.write_all(b"\"}\n{\"v\":1,\"seq\":2,\"op\":\"cancel\",\"request_id\":\"r\"}\n")
            .await
            .unwrap();
    };
    let reader = async {
        let a = r.next_line().await.unwrap().unwrap();
        let b = r.next_line().await.unwrap().unwrap();
        (a, b)
    };
    let (_, (a, b)) = tokio::join!(writer, reader);
    let a: ResponseFrame = serde_json::from_str(&a).unwrap();
    let b: ResponseFrame = serde_json::from_str(&b).unwrap();
    assert_eq!((error_code(&a), a.seq), ("frame_too_large", None));
    assert!(matches!(b.result, Response::Cancelled { .. }), "{b:?}");
}

#[tokio::test]
async fn requests_are_pipelined_and_answered_by_seq() {
    let (node, client) = start(FakeNode::gated(), NodeConfig::default());
    let slow = id("slow");
    client.open_workspace(&slow).await.unwrap();
    let c = client.clone();
    let s = slow.clone();
    let blocked = tokio::spawn(async move { c.cleanup_workspace(&s).await });
    // While the cleanup is parked, other requests on the same connection
    // are answered.
    let other = id("other");
    client.open_workspace(&other).await.unwrap();
    assert_eq!(client.cancel(&other).await.unwrap(), 0);
    assert!(!blocked.is_finished());
    node.workspace().gate.add_permits(1);
    assert_eq!(
        blocked.await.unwrap().unwrap().status,
        CleanupStatus::Cleaned
    );
}

#[tokio::test]
async fn a_closed_connection_fails_calls_instead_of_hanging() {
    let (edge, node_io) = tokio::io::duplex(4096);
    let client = WireClient::new(edge, 1 << 20);
    drop(node_io);
    let err = client.cancel(&id("r")).await.unwrap_err();
    assert!(matches!(err, WireError::Disconnected));
}

#[test]
fn cleanup_report_carries_only_identity_status_and_code() {
    let line = br#"{"v":1,"seq":1,"result":"cleanup","request_id":"r","status":"failed","code":"symlink_in_job","cached":false}"#;
    let f: ResponseFrame = serde_json::from_slice(line).unwrap();
    let Response::Cleanup(rep) = &f.result else {
        panic!()
    };
    let v = serde_json::to_value(rep).unwrap();
    let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
    assert_eq!(keys, ["cached", "code", "request_id", "status"]);
    // A code can never carry a path.
    let bad = br#"{"v":1,"seq":1,"result":"cleanup","request_id":"r","status":"failed","code":"/etc/passwd"}"#;
    assert!(serde_json::from_slice::<ResponseFrame>(bad).is_err());
    // And a request frame is decoded with its request id validated.
    assert!(
        decode_request(br#"{"v":1,"seq":1,"op":"cleanup_workspace","request_id":".."}"#).is_err()
    );
}

#[tokio::test]
async fn a_cancel_or_cleanup_fences_every_later_open() {
    let (node, client) = start(FakeNode::new(), NodeConfig::default());
    // A cancel that overtakes the open: the open is refused, never run.
    let r = id("cancel-first");
    assert_eq!(client.cancel(&r).await.unwrap(), 0);
    let err = client.open_workspace(&r).await.unwrap_err();
    assert!(
        matches!(err, WireError::Refused { ref code } if code.as_str() == "request_closed"),
        "{err:?}"
    );
    assert_eq!(node.workspace().calls(&r).open, 0);
    // A cancel after the open fences writes, and the cleanup still runs once.
    let r = id("cancel-after");
    client.open_workspace(&r).await.unwrap();
    client.cancel(&r).await.unwrap();
    let err = client.write_artifact(&r, "a.txt", "x").await.unwrap_err();
    assert!(matches!(err, WireError::Refused { ref code } if code.as_str() == "request_closed"));
    let rep = client.cleanup_workspace(&r).await.unwrap();
    assert_eq!((rep.status, rep.cached), (CleanupStatus::Cleaned, false));
    assert_eq!(node.workspace().calls(&r).cleanup, 1);
    // A cleanup that overtakes the open: nothing to clean, and the open is
    // refused afterwards.
    let r = id("cleanup-first");
    let rep = client.cleanup_workspace(&r).await.unwrap();
    assert_eq!(rep.status, CleanupStatus::AlreadyGone);
    assert!(client.open_workspace(&r).await.is_err());
    assert_eq!(node.workspace().calls(&r).open, 0);
    // Still held: the request cancelled before any open, whose job the
    // node cannot vouch for (an earlier node may have opened the id); its
    // shutdown cleans it, and finds nothing.
    assert_eq!(node.open_requests(), vec![id("cancel-first")]);
    let closed = node.close().await;
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert_eq!(closed[0].status, CleanupStatus::AlreadyGone, "{closed:?}");
    assert!(node.open_requests().is_empty());
}

/// A cancel and a cleanup land while the open is still running: the open
/// finishes and is answered `request_closed`, and the cleanup waited for it
/// and removes what it created, once.
#[tokio::test]
async fn a_cleanup_during_a_running_open_waits_for_it_and_cleans_once() {
    let fake = FakeNode::new();
    fake.open_gated.store(true, Ordering::SeqCst);
    let (node, client) = start(fake, NodeConfig::default());
    let r = id("slow-open");
    let open = tokio::spawn({
        let (c, r) = (client.clone(), r.clone());
        async move { c.open_workspace(&r).await }
    });
    while node.workspace().calls(&r).open == 0 {
        tokio::task::yield_now().await;
    }
    assert_eq!(client.cancel(&r).await.unwrap(), 0, "nothing runs yet");
    let cleanups: Vec<_> = (0..3)
        .map(|_| {
            let (c, r) = (client.clone(), r.clone());
            tokio::spawn(async move { c.cleanup_workspace(&r).await.unwrap() })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        node.workspace().calls(&r).cleanup,
        0,
        "no cleanup while the open runs"
    );
    node.workspace().open_gate.add_permits(1);
    let err = open.await.unwrap().unwrap_err();
    assert!(
        matches!(err, WireError::Refused { ref code } if code.as_str() == "request_closed"),
        "{err:?}"
    );
    let mut owners = 0;
    for c in cleanups {
        let rep = c.await.unwrap();
        assert_eq!(rep.status, CleanupStatus::Cleaned);
        owners += usize::from(!rep.cached);
    }
    assert_eq!(owners, 1);
    assert_eq!(node.workspace().calls(&r).cleanup, 1);
    assert!(node.open_requests().is_empty());
}

/// The end of a stdio node (`custodian node`): the edge sends an open and
/// closes its side at once. The open was decided when it was read, so it
/// runs; the shutdown's cleanup (`Node::close`, as the command calls it)
/// fences the request and waits for the open, which is then answered
/// `request_closed` (the contract's *Liveness*: a request in flight when
/// the edge goes away may be); the job it created is cleaned exactly once
/// and the answer still reaches the output.
#[tokio::test]
async fn an_open_in_flight_when_the_input_ends_is_answered_request_closed_and_cleaned_once() {
    let fake = FakeNode::new();
    fake.open_gated.store(true, Ordering::SeqCst);
    let node = Node::new(fake, NodeConfig::default());
    let (edge, node_io) = tokio::io::duplex(1 << 16);
    let (r, mut w) = tokio::io::split(edge);
    w.write_all(b"{\"v\":1,\"seq\":1,\"op\":\"open_workspace\",\"request_id\":\"r1\"}\n")
        .await
        .unwrap();
    w.shutdown().await.unwrap();
    // Returns at the end of input, the open still running.
    let drain = node.serve(node_io).await.unwrap();
    let r1 = id("r1");
    while node.workspace().calls(&r1).open == 0 {
        tokio::task::yield_now().await;
    }
    let closing = tokio::spawn({
        let node = Arc::clone(&node);
        async move { node.close().await }
    });
    // The shutdown's cleanup has fenced the request (it waits for the open).
    while !node.open_requests().is_empty() {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        node.workspace().calls(&r1).cleanup,
        0,
        "not during the open"
    );
    node.workspace().open_gate.add_permits(1);
    let reports = closing.await.unwrap();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].status, CleanupStatus::Cleaned);
    drain.wait().await;
    let mut lines = BufReader::new(r).lines();
    let answer: ResponseFrame =
        serde_json::from_str(&lines.next_line().await.unwrap().expect("the open's answer"))
            .unwrap();
    assert_eq!(answer.seq, Some(1));
    assert_eq!(error_code(&answer), "request_closed");
    assert!(lines.next_line().await.unwrap().is_none(), "one answer");
    let calls = node.workspace().calls(&r1);
    assert_eq!((calls.open, calls.cleanup), (1, 1));
}

fn open_frame(seq: u64, r: &str) -> Vec<u8> {
    format!("{{\"v\":1,\"seq\":{seq},\"op\":\"open_workspace\",\"request_id\":\"{r}\"}}\n")
        .into_bytes()
}

/// The wire contract's EW-25: the node's and the connection's bounds on
/// open requests answer `too_many_requests`, the refused open changes
/// nothing (it succeeds later), and cleanups are never refused.
#[tokio::test]
async fn opens_past_the_bounds_are_refused_and_change_nothing() {
    let config = NodeConfig {
        max_open_requests: 3,
        max_open_per_connection: 2,
        ..NodeConfig::default()
    };
    let node = Node::new(FakeNode::new(), config);
    let mut a = Raw::start(&node);
    let mut b = Raw::start(&node);
    async fn ask(c: &mut Raw, line: Vec<u8>) -> ResponseFrame {
        c.send(&line).await;
        c.recv().await
    }
    let opened = |f: &ResponseFrame| matches!(f.result, Response::WorkspaceOpened { .. });
    assert!(opened(&ask(&mut a, open_frame(1, "a1")).await));
    assert!(opened(&ask(&mut a, open_frame(2, "a2")).await));
    // The connection's bound.
    let f = ask(&mut a, open_frame(3, "a3")).await;
    assert_eq!((f.seq, error_code(&f)), (Some(3), "too_many_requests"));
    assert_eq!(node.workspace().calls(&id("a3")).open, 0);
    // A second open of an open request is not a new one.
    let f = ask(&mut a, open_frame(4, "a1")).await;
    assert!(
        matches!(
            f.result,
            Response::WorkspaceOpened {
                already_open: true,
                ..
            }
        ),
        "{f:?}"
    );
    // The node's bound.
    assert!(opened(&ask(&mut b, open_frame(1, "b1")).await));
    let f = ask(&mut b, open_frame(2, "b2")).await;
    assert_eq!(error_code(&f), "too_many_requests");
    assert_eq!(node.open_count(), 3);
    // A cleanup is never refused, and it gives its place back.
    let f = ask(
        &mut b,
        b"{\"v\":1,\"seq\":3,\"op\":\"cleanup_workspace\",\"request_id\":\"a1\"}\n".to_vec(),
    )
    .await;
    assert!(
        matches!(&f.result, Response::Cleanup(c) if c.status == CleanupStatus::Cleaned),
        "{f:?}"
    );
    assert_eq!(node.open_count(), 2);
    assert!(opened(&ask(&mut b, open_frame(4, "b2")).await));
    // The refused `a3` was not fenced: it opens once places are free.
    let f = ask(
        &mut a,
        b"{\"v\":1,\"seq\":5,\"op\":\"cleanup_workspace\",\"request_id\":\"b1\"}\n".to_vec(),
    )
    .await;
    assert!(matches!(f.result, Response::Cleanup(_)), "{f:?}");
    assert!(opened(&ask(&mut a, open_frame(6, "a3")).await));
    assert_eq!(node.workspace().calls(&id("a3")).open, 1);
}

/// The wire contract's EW-28, on paused time: a frame begun and not
/// finished is answered `frame_timeout`, an idle connection
/// `idle_timeout`, each then closed and neither before its deadline; a
/// connection that keeps sending frames is not idle.
#[tokio::test(start_paused = true)]
async fn deadlines_answer_and_close_and_never_fire_early() {
    let config = NodeConfig {
        frame_timeout: Some(Duration::from_secs(2)),
        idle_timeout: Some(Duration::from_secs(10)),
        ..NodeConfig::default()
    };
    let node = Node::new(FakeNode::new(), config);
    let t0 = tokio::time::Instant::now();
    let mut slow = Raw::start(&node);
    slow.send(b"{\"v\":1,").await;
    let f = slow.recv().await;
    let at = t0.elapsed();
    assert_eq!((f.seq, error_code(&f)), (None, "frame_timeout"));
    assert!(
        at >= Duration::from_secs(2) && at <= Duration::from_millis(2600),
        "{at:?}"
    );
    assert!(slow.r.next_line().await.unwrap().is_none(), "not closed");

    let t0 = tokio::time::Instant::now();
    let mut busy = Raw::start(&node);
    let mut idle = Raw::start(&node);
    let idle = tokio::spawn(async move {
        let f = idle.recv().await;
        let at = t0.elapsed();
        let closed = idle.r.next_line().await.unwrap().is_none();
        (f, at, closed)
    });
    for seq in 0..3 {
        tokio::time::sleep(Duration::from_secs(6)).await;
        busy.send(&open_frame(seq, &format!("k{seq}"))).await;
        assert!(matches!(
            busy.recv().await.result,
            Response::WorkspaceOpened { .. }
        ));
    }
    let (f, at, closed) = idle.await.unwrap();
    assert_eq!(error_code(&f), "idle_timeout");
    assert!(
        at >= Duration::from_secs(10) && at <= Duration::from_millis(12_600),
        "{at:?}"
    );
    assert!(closed, "not closed");
    // 18 s in, with a frame every 6 s: still served.
    busy.send(&open_frame(9, "k9")).await;
    assert!(matches!(
        busy.recv().await.result,
        Response::WorkspaceOpened { .. }
    ));
}

/// An open that fails part-way leaves part of its job behind and the node
/// no longer knows what is there; when the node shuts down (`Node::close`,
/// as `custodian node` calls it at the end of its input or on a signal) it
/// still cleans that request, once. Found by the composition model's node
/// shutdown (*a node that exited after its shutdown left no job
/// directory*): `close` used to clean only jobs known to exist.
#[tokio::test]
async fn a_node_shutting_down_cleans_what_a_failed_open_left() {
    let (node, client) = start(FakeNode::new(), NodeConfig::default());
    let r = id("openfail-1");
    assert!(client.open_workspace(&r).await.is_err());
    assert_close_cleans_only(&node, &r).await;
}

/// The same after a cancel, with another request's result filed in a
/// table that remembers one: the cancel of a request whose open failed
/// part-way keeps it in the table (its job may exist), so no eviction can
/// make the node's shutdown forget it. Found by the composition model's
/// 2-request configuration: a cancelled request whose job was unknown was
/// forgettable at once, the other request's result evicted it, and `close`
/// exited leaving the partial job on disk (until the next start's journal
/// reclaim).
#[tokio::test]
async fn a_cancelled_failed_open_is_not_forgotten_before_the_nodes_shutdown_cleans_it() {
    let (node, client) = start_remembering(1);
    let r = id("openfail-2");
    assert!(client.open_workspace(&r).await.is_err());
    client.cancel(&r).await.unwrap();
    // Another request opens and is cleaned: its result is the one the
    // table remembers.
    let other = id("other-2");
    client.open_workspace(&other).await.unwrap();
    client.cleanup_workspace(&other).await.unwrap();
    assert_close_cleans_only(&node, &r).await;
}

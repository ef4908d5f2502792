//! Sessions over the wire: a real [`WorkspaceNode`] served in process over
//! a duplex, driven by the edge's [`WireClient`].
//!
//! Each request's cleanup deletes as root: the bodies run in a private
//! mount namespace (`guarded::sessions_in_a_private_mount_namespace`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use custodian::contain::Containment;
use custodian::process::LaunchOptions;
use custodian::request::RequestId;
use custodian::wire::{
    CleanupStatus, DEFAULT_MAX_FRAME, MAX_READ_BYTES, MAX_SESSIONS_PER_NODE,
    MAX_SESSIONS_PER_REQUEST, Node, NodeConfig, Offsets, Response, ResponseFrame, RunSpec,
    SessionOutput, SessionSignal, StartSpec, WindowSize, WireClient, WireError, WorkspaceNode,
};
use custodian::workspace::{Workspace, WorkspaceConfig};

/// A node on a fresh workspace and an edge connected to it.
struct Harness {
    dir: tempfile::TempDir,
    root: PathBuf,
    client: WireClient,
}

fn harness() -> Harness {
    harness_with(|options| options)
}

/// As [`harness`], the node launching with `launch` applied to its options.
fn harness_with(launch: impl FnOnce(LaunchOptions) -> LaunchOptions) -> Harness {
    let dir = crate::sandbox::tempdir();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let ws = Workspace::open(&root, WorkspaceConfig::default()).unwrap();
    let node = Node::new(
        WorkspaceNode::new(
            ws,
            launch(LaunchOptions::new(&root)),
            Duration::from_secs(120),
        ),
        NodeConfig::default(),
    );
    let (edge, node_io) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move { node.serve_to_end(node_io).await });
    Harness {
        dir,
        root,
        client: WireClient::new(edge, DEFAULT_MAX_FRAME),
    }
}

fn id(s: &str) -> RequestId {
    RequestId::new(s).unwrap()
}

fn spec(executable: &str, argv: &[&str]) -> StartSpec {
    StartSpec::new(RunSpec {
        executable: executable.into(),
        argv: argv.iter().map(|a| (*a).to_owned()).collect(),
        env: Default::default(),
        cwd: None,
        timeout_ms: Some(120_000),
        confinement: None,
    })
}

use crate::containment::alive;

fn refused_code(e: WireError) -> String {
    match e {
        WireError::Refused { code } => code.as_str().to_owned(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Reads `session` until its stdout holds `needle`; its stdout so far.
async fn read_until(
    client: &WireClient,
    request: &RequestId,
    session: &str,
    needle: &str,
) -> (String, SessionOutput) {
    let mut from = Offsets::default();
    let mut stdout = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = client
            .read_output(request, session, from, 4096, Duration::from_secs(2))
            .await
            .unwrap();
        assert_eq!(out.stdout.offset, from.stdout, "nothing skipped");
        stdout.push_str(&out.stdout.text);
        from = out.next;
        if stdout.contains(needle) {
            return (stdout, out);
        }
        assert!(
            !out.ended && Instant::now() < deadline,
            "{needle:?} never came: {stdout:?}"
        );
    }
}

/// Reads `session` until its process settled; the last answer.
async fn read_to_end(client: &WireClient, request: &RequestId, session: &str) -> SessionOutput {
    let mut from = Offsets::default();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = client
            .read_output(
                request,
                session,
                from,
                MAX_READ_BYTES,
                Duration::from_secs(2),
            )
            .await
            .unwrap();
        from = out.next;
        if out.ended {
            return out;
        }
        assert!(Instant::now() < deadline, "never ended");
    }
}

/// A REPL started over the wire keeps its state across writes and reads,
/// is listed with what was written to it (never the text), and dies with
/// its request's cleanup, which answers only once it settled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::sessions_in_a_private_mount_namespace"]
async fn a_repl_is_driven_over_the_wire_and_dies_with_the_cleanup() {
    let h = harness();
    let c = &h.client;
    let req = id("repl");
    c.open_workspace(&req).await.unwrap();
    let repl = c
        .start_process(&req, spec("python3", &["-i", "-q", "-u"]))
        .await
        .unwrap();
    assert_eq!(repl.session_id, "s1");
    assert!(alive(repl.pid));
    assert_eq!(
        c.write_stdin(&req, &repl.session_id, "x = 6\n", false)
            .await
            .unwrap(),
        6
    );
    c.write_stdin(&req, &repl.session_id, "print(x*7)\n", false)
        .await
        .unwrap();
    let (stdout, out) = read_until(c, &req, &repl.session_id, "42\n").await;
    assert!(stdout.starts_with("42"), "{stdout:?}");
    assert!(out.running && out.exit.is_none(), "{out:?}");

    let listed = c.list_processes(&req).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].session_id, repl.session_id);
    assert_eq!(listed[0].pid, repl.pid);
    assert!(listed[0].running);
    assert_eq!(listed[0].bytes_written, 17);
    assert!(listed[0].stdout_bytes >= 3);

    let report = c.cleanup_workspace(&req).await.unwrap();
    assert_eq!(report.status, CleanupStatus::Cleaned, "{report:?}");
    // Answered only once the session settled: dead already, no wait.
    assert!(!alive(repl.pid), "the REPL outlived its request's cleanup");
    assert!(!h.root.join(".custodian/job/repl").exists());
}

/// A cleanup stops every session of its request, one that ignores `TERM`
/// (and its child, which inherits that) through `KILL`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::sessions_in_a_private_mount_namespace"]
async fn cleanup_stops_every_session_even_one_that_ignores_term() {
    let h = harness();
    let c = &h.client;
    let req = id("stubborn");
    c.open_workspace(&req).await.unwrap();
    let plain = c
        .start_process(&req, spec("sleep", &["1000"]))
        .await
        .unwrap();
    let stubborn = c
        .start_process(
            &req,
            spec(
                "/bin/sh",
                &["-c", "trap '' TERM; sleep 1000 & echo $!; wait; wait"],
            ),
        )
        .await
        .unwrap();
    let (stdout, _) = read_until(c, &req, &stubborn.session_id, "\n").await;
    let child: u32 = stdout.trim().parse().unwrap();
    assert!(alive(plain.pid) && alive(stubborn.pid) && alive(child));

    let report = c.cleanup_workspace(&req).await.unwrap();
    assert_eq!(report.status, CleanupStatus::Cleaned, "{report:?}");
    for pid in [plain.pid, stubborn.pid, child] {
        assert!(!alive(pid), "{pid} outlived its request's cleanup");
    }
    // The table went with the request: its operations are refused.
    let e = c.list_processes(&req).await.unwrap_err();
    assert_eq!(refused_code(e), "request_closed");
}

/// An id the request does not hold is `unknown_session`, whether it was
/// never handed out or belongs to another request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::sessions_in_a_private_mount_namespace"]
async fn unknown_and_foreign_session_ids_are_refused_alike() {
    let h = harness();
    let c = &h.client;
    let (a, b) = (id("owner"), id("other"));
    c.open_workspace(&a).await.unwrap();
    c.open_workspace(&b).await.unwrap();
    let cat = c.start_process(&a, spec("cat", &[])).await.unwrap();
    for (req, sid) in [(&b, cat.session_id.as_str()), (&a, "s999"), (&a, "../x")] {
        let read = c
            .read_output(req, sid, Offsets::default(), 16, Duration::ZERO)
            .await
            .unwrap_err();
        assert_eq!(refused_code(read), "unknown_session");
        let write = c.write_stdin(req, sid, "secret\n", true).await.unwrap_err();
        assert_eq!(refused_code(write), "unknown_session");
        let signal = c
            .signal_process(req, sid, SessionSignal::Kill)
            .await
            .unwrap_err();
        assert_eq!(refused_code(signal), "unknown_session");
    }
    assert!(c.list_processes(&b).await.unwrap().is_empty());
    // Nothing reached the owner's session.
    let listed = c.list_processes(&a).await.unwrap();
    assert!(
        listed[0].running && listed[0].bytes_written == 0,
        "{listed:?}"
    );

    for req in [&a, &b] {
        let report = c.cleanup_workspace(req).await.unwrap();
        assert_eq!(report.status, CleanupStatus::Cleaned, "{report:?}");
    }
    assert!(!alive(cat.pid));
}

/// Starts `cat` sessions in `req` until `n` run (a fork that fails `EAGAIN`
/// on a loaded machine is tried again).
async fn start_cats(c: &WireClient, req: &RequestId, n: usize) -> Vec<u32> {
    let mut pids = Vec::new();
    while pids.len() < n {
        match c.start_process(req, spec("cat", &[])).await {
            Ok(s) => pids.push(s.pid),
            Err(WireError::Refused { code }) if code.as_str() == "spawn_failed" => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("start {}: {e:?}", pids.len() + 1),
        }
    }
    pids
}

/// The 17th running session of a request and the 65th of the node are
/// refused `too_many_sessions`; nothing running is evicted, and a settled
/// session frees its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::sessions_in_a_private_mount_namespace"]
async fn the_session_bounds_refuse_the_next_start_and_free_on_settlement() {
    let h = harness();
    let c = &h.client;
    let first = id("bounded-0");
    c.open_workspace(&first).await.unwrap();
    let pids = start_cats(c, &first, MAX_SESSIONS_PER_REQUEST).await;
    let e = c.start_process(&first, spec("cat", &[])).await.unwrap_err();
    assert_eq!(refused_code(e), "too_many_sessions");
    assert!(
        pids.iter().all(|&p| alive(p)),
        "a running session was evicted"
    );

    // A settled session frees its place in the request.
    let listed = c.list_processes(&first).await.unwrap();
    let gone = &listed[0].session_id;
    c.signal_process(&first, gone, SessionSignal::Kill)
        .await
        .unwrap();
    let end = read_to_end(c, &first, gone).await;
    let exit = end.exit.expect("settled");
    assert_eq!(exit.reason.as_str(), "cancelled", "{exit:?}");
    start_cats(c, &first, 1).await;

    // The node's bound: 64 across requests.
    let mut requests = vec![first];
    let mut running = MAX_SESSIONS_PER_REQUEST;
    for r in 1.. {
        if running == MAX_SESSIONS_PER_NODE {
            break;
        }
        let req = id(&format!("bounded-{r}"));
        c.open_workspace(&req).await.unwrap();
        let n = (MAX_SESSIONS_PER_NODE - running).min(MAX_SESSIONS_PER_REQUEST);
        start_cats(c, &req, n).await;
        running += n;
        requests.push(req);
    }
    let last = id("bounded-last");
    c.open_workspace(&last).await.unwrap();
    let e = c.start_process(&last, spec("cat", &[])).await.unwrap_err();
    assert_eq!(refused_code(e), "too_many_sessions");

    // A request's cleanup gives its places back to the node.
    let report = c.cleanup_workspace(&requests[0]).await.unwrap();
    assert_eq!(report.status, CleanupStatus::Cleaned, "{report:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match c.start_process(&last, spec("cat", &[])).await {
            Ok(_) => break,
            Err(e) => {
                assert_eq!(refused_code(e), "too_many_sessions");
                assert!(Instant::now() < deadline, "the cleanup freed no place");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    for req in requests.iter().skip(1).chain([&last]) {
        let report = c.cleanup_workspace(req).await.unwrap();
        assert_eq!(report.status, CleanupStatus::Cleaned, "{report:?}");
    }
}

/// Session operations are admitted like a run: refused `not_open` before
/// the open and `request_closed` once the cleanup started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::sessions_in_a_private_mount_namespace"]
async fn session_operations_outside_an_open_request_are_refused() {
    let h = harness();
    let c = &h.client;
    let req = id("fenced");
    let e = c.start_process(&req, spec("cat", &[])).await.unwrap_err();
    assert_eq!(refused_code(e), "not_open");
    c.open_workspace(&req).await.unwrap();
    let cat = c.start_process(&req, spec("cat", &[])).await.unwrap();
    c.cleanup_workspace(&req).await.unwrap();
    assert!(!alive(cat.pid));
    let sid = cat.session_id.as_str();
    let refusals = [
        c.start_process(&req, spec("cat", &[])).await.map(|_| ()),
        c.read_output(&req, sid, Offsets::default(), 16, Duration::ZERO)
            .await
            .map(|_| ()),
        c.write_stdin(&req, sid, "x", false).await.map(|_| ()),
        c.signal_process(&req, sid, SessionSignal::Interrupt).await,
        c.list_processes(&req).await.map(|_| ()),
    ];
    for r in refusals {
        assert_eq!(refused_code(r.unwrap_err()), "request_closed");
    }
}

/// A read with `wait_ms` returns as soon as output arrives, not at its
/// deadline; with no wait and no output it returns at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::sessions_in_a_private_mount_namespace"]
async fn a_long_poll_returns_when_output_arrives() {
    let h = harness();
    let c = &h.client;
    let req = id("poll");
    c.open_workspace(&req).await.unwrap();
    let s = c
        .start_process(&req, spec("/bin/sh", &["-c", "read x; echo \"got $x\""]))
        .await
        .unwrap();
    let t = Instant::now();
    let out = c
        .read_output(&req, &s.session_id, Offsets::default(), 64, Duration::ZERO)
        .await
        .unwrap();
    assert!(out.stdout.text.is_empty() && out.running, "{out:?}");
    assert!(t.elapsed() < Duration::from_secs(2));

    let reader = {
        let (c, req, sid) = (c.clone(), req.clone(), s.session_id.clone());
        tokio::spawn(async move {
            let t = Instant::now();
            let out = c
                .read_output(&req, &sid, Offsets::default(), 64, Duration::from_secs(25))
                .await
                .unwrap();
            (out, t.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    c.write_stdin(&req, &s.session_id, "hi\n", true)
        .await
        .unwrap();
    let (out, waited) = reader.await.unwrap();
    assert_eq!(out.stdout.text, "got hi\n", "{out:?}");
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(10),
        "returned after {waited:?}"
    );
    let end = read_to_end(c, &req, &s.session_id).await;
    assert_eq!(end.exit.expect("settled").exit_code, Some(0));
    c.cleanup_workspace(&req).await.unwrap();
}

/// However much a read asks for, it returns at most `MAX_READ_BYTES` per
/// stream, so an answer of the worst output (every byte a control byte,
/// escaped to six) stays a frame the edge accepts; binary output is valid
/// JSON text, and reading on from `next` covers every byte exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::sessions_in_a_private_mount_namespace"]
async fn a_big_output_is_read_in_bounded_frames() {
    let h = harness();
    let c = &h.client;
    let req = id("big");
    c.open_workspace(&req).await.unwrap();
    const TOTAL: u64 = 200_000;
    let script =
        format!("head -c {TOTAL} /dev/zero | tr '\\0' '\\1'; head -c {TOTAL} /dev/urandom >&2");
    let mut start = spec("/bin/sh", &["-c", &script]);
    start.buffer_bytes = Some(1 << 20);
    let s = c.start_process(&req, start).await.unwrap();
    let mut from = Offsets::default();
    let mut got = Offsets::default();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = c
            .read_output(&req, &s.session_id, from, u32::MAX, Duration::from_secs(2))
            .await
            .unwrap();
        for (stream, read) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
            assert!(
                read.bytes <= u64::from(MAX_READ_BYTES),
                "{stream}: {} bytes",
                read.bytes
            );
            assert_eq!(read.lost, 0, "{stream}");
        }
        assert!(out.stdout.text.chars().all(|ch| ch == '\u{1}'));
        let frame = serde_json::to_vec(&ResponseFrame {
            v: 1,
            seq: Some(u64::MAX),
            result: Response::Output {
                request_id: req.clone(),
                output: Box::new(out.clone()),
            },
        })
        .unwrap();
        assert!(frame.len() < DEFAULT_MAX_FRAME, "{} bytes", frame.len());
        got.stdout += out.stdout.bytes;
        got.stderr += out.stderr.bytes;
        assert_eq!(out.next.stdout, from.stdout + out.stdout.bytes);
        from = out.next;
        if out.ended {
            break;
        }
        assert!(Instant::now() < deadline, "never ended: {got:?}");
    }
    assert_eq!(
        got,
        Offsets {
            stdout: TOTAL,
            stderr: TOTAL
        }
    );
    c.cleanup_workspace(&req).await.unwrap();
}

/// A terminal session of 80 × 24.
fn terminal(program: &str) -> StartSpec {
    spec("python3", &["-c", program]).with_terminal(WindowSize::new(80, 24))
}

/// A harness's client with request `name` open.
async fn opened<'h>(h: &'h Harness, name: &str) -> (&'h WireClient, RequestId) {
    let req = id(name);
    h.client.open_workspace(&req).await.unwrap();
    (&h.client, req)
}

/// Cleans up `req` and checks that it was cleaned.
async fn cleaned(c: &WireClient, req: &RequestId) {
    let report = c.cleanup_workspace(req).await.unwrap();
    assert_eq!(report.status, CleanupStatus::Cleaned, "{report:?}");
}

/// A program that prompts on `/dev/tty` with echo off (`getpass`, as
/// `sudo`, `ssh` and credential helpers do) is answered through
/// `write_stdin` over the wire, and the answer never shows in its output;
/// the start and the list say the session runs on a terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::sessions_in_a_private_mount_namespace"]
async fn a_terminal_session_answers_a_dev_tty_prompt_with_echo_off() {
    let h = harness();
    let (c, req) = opened(&h, "prompt").await;
    let program = "import getpass; a = getpass.getpass('Password: '); print('got', a[::-1])";
    let s = c.start_process(&req, terminal(program)).await.unwrap();
    assert_eq!(s.terminal, Some(WindowSize::new(80, 24)), "{s:?}");
    let sid = s.session_id.as_str();
    read_until(c, &req, sid, "Password: ").await;
    c.write_stdin(&req, sid, "s3cret\n", false).await.unwrap();
    read_until(c, &req, sid, "got terc3s").await;
    let end = read_to_end(c, &req, sid).await;
    assert_eq!(end.exit.expect("settled").exit_code, Some(0));
    // Echo was off while the prompt read: the answer never showed, in
    // the whole output (a terminal is one stream: stderr stays empty).
    let whole = c
        .read_output(
            &req,
            sid,
            Offsets::default(),
            MAX_READ_BYTES,
            Duration::ZERO,
        )
        .await
        .unwrap();
    assert!(whole.stdout.text.contains("got terc3s"), "{whole:?}");
    assert!(!whole.stdout.text.contains("s3cret"), "echoed: {whole:?}");
    assert_eq!(whole.stderr.bytes, 0, "{whole:?}");

    let listed = c.list_processes(&req).await.unwrap();
    assert!(listed[0].terminal, "{listed:?}");
    assert_eq!(listed[0].bytes_written, 7);
    cleaned(c, &req).await;
}

/// `resize_terminal` reaches the program: its `SIGWINCH` handler sees the
/// new size. Once the session settled a resize is `session_ended`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::sessions_in_a_private_mount_namespace"]
async fn a_resize_reaches_the_program() {
    let h = harness();
    let (c, req) = opened(&h, "resize").await;
    // The handler writes with `os.write`: `print` in a signal handler can
    // raise a reentrancy error.
    let program = "import os, signal\n\
        signal.signal(signal.SIGWINCH, lambda *_: os.write(1, ('size %dx%d\\n' % os.get_terminal_size(0)).encode()))\n\
        print('ready %dx%d' % os.get_terminal_size(0), flush=True)\n\
        input()\n";
    let s = c.start_process(&req, terminal(program)).await.unwrap();
    let sid = s.session_id.as_str();
    read_until(c, &req, sid, "ready 80x24").await;
    for (cols, rows) in [(100, 30), (1000, 1)] {
        let size = WindowSize::new(cols, rows);
        c.resize_terminal(&req, sid, size).await.unwrap();
        read_until(c, &req, sid, &format!("size {cols}x{rows}")).await;
    }
    c.write_stdin(&req, sid, "\n", false).await.unwrap();
    let end = read_to_end(c, &req, sid).await;
    assert_eq!(end.exit.expect("settled").exit_code, Some(0));
    let late = c.resize_terminal(&req, sid, WindowSize::new(90, 20)).await;
    assert_eq!(refused_code(late.unwrap_err()), "session_ended");
    cleaned(c, &req).await;
}

/// A resize of a session on pipes is `not_a_terminal`, of an id the request
/// does not hold `unknown_session`, and a size beyond the wire's bounds
/// (at start or resize) `invalid_terminal_size`, nothing started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::sessions_in_a_private_mount_namespace"]
async fn resizing_a_piped_session_or_out_of_bounds_is_refused() {
    let h = harness();
    let (c, req) = opened(&h, "piped").await;
    let cat = c.start_process(&req, spec("cat", &[])).await.unwrap();
    assert_eq!(cat.terminal, None);
    let sid = cat.session_id.as_str();
    for (session, cols, want) in [
        (sid, 100, "not_a_terminal"),
        ("s999", 100, "unknown_session"),
        (sid, 1001, "invalid_terminal_size"),
    ] {
        let r = c
            .resize_terminal(&req, session, WindowSize::new(cols, 30))
            .await;
        assert_eq!(refused_code(r.unwrap_err()), want, "{session} {cols}");
    }
    let too_tall = spec("cat", &[]).with_terminal(WindowSize::new(80, 1001));
    let r = c.start_process(&req, too_tall).await;
    assert_eq!(refused_code(r.unwrap_err()), "invalid_terminal_size");
    let listed = c.list_processes(&req).await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(!listed[0].terminal && listed[0].running, "{listed:?}");
    cleaned(c, &req).await;
    assert!(!alive(cat.pid));
}

/// A node whose launches run in the group tier refuses a terminal session
/// `terminal_unavailable` before anything runs; a session on pipes still
/// starts there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::sessions_in_a_private_mount_namespace"]
async fn the_group_tier_refuses_a_terminal_session() {
    let h = harness_with(|o| o.with_containment(Containment::Group));
    let (c, req) = opened(&h, "group").await;
    let marker = h.dir.path().join("ran");
    let touch = spec("touch", &[marker.to_str().unwrap()]).with_terminal(WindowSize::new(80, 24));
    let r = c.start_process(&req, touch).await;
    assert_eq!(refused_code(r.unwrap_err()), "terminal_unavailable");
    assert!(!marker.exists(), "nothing ran");
    assert!(c.list_processes(&req).await.unwrap().is_empty());
    let cat = c.start_process(&req, spec("cat", &[])).await.unwrap();
    assert!(alive(cat.pid));
    cleaned(c, &req).await;
}

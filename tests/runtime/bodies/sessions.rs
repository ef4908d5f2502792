//! Sessions of a request (`Executor::start`): they outlive the call that
//! started them, serve the request's next calls, and die with the request,
//! daemonized or not, before its files go.

use std::time::Duration;

use custodian::prelude::*;
use custodian::process::evidence::ProcessStatus;
use custodian::process::session::{Offsets, SessionOptions};
use custodian::runtime::{SessionLimits, SessionRecord};

use super::{PROMPTLY, fixture, inv, job_dir, limits, scratch, spill_in};

/// A runtime's configuration in `dir`: its workspace `dir/ws` (made),
/// its spill store beside it, a 60 s request timeout.
fn config_in(dir: &std::path::Path) -> RuntimeConfig {
    let root = dir.join("ws");
    std::fs::create_dir(&root).unwrap();
    RuntimeConfig::new(&root)
        .with_limits(limits(Duration::from_secs(60)))
        .with_spill(spill_in(dir))
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 2..].starts_with(['Z', 'X'])))
        .is_some_and(|zombie| !zombie)
}

/// Reads the session's stdout until it holds `want`.
async fn read_until(s: &custodian::process::session::Session, want: &str) -> String {
    let mut text = String::new();
    let mut next = Offsets::default();
    let deadline = tokio::time::Instant::now() + PROMPTLY;
    while !text.contains(want) && tokio::time::Instant::now() < deadline {
        let out = s.read(next, 1 << 16, Duration::from_millis(500)).await;
        text.push_str(&String::from_utf8_lossy(&out.stdout.data));
        next = out.next();
        if out.ended {
            break;
        }
    }
    text
}

/// Starts a Python HTTP server as a session of `executor`'s request; the
/// session and its port.
async fn start_server(executor: &Executor) -> (custodian::process::session::Session, u16) {
    let server = executor
        .start(
            inv("python3", &crate::http::PY_SERVER),
            SessionOptions::default(),
        )
        .await
        .unwrap();
    let banner = read_until(&server, "port ").await;
    (server, crate::http::port_in_banner(&banner))
}

/// A server started by one call of the request answers the next call; the
/// request's end stops it, and a daemon it left behind (its own session,
/// stdio closed, reparented away) with it, before the job is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn a_session_serves_the_requests_next_call_and_dies_with_the_request() {
    let fx = fixture(limits(Duration::from_secs(60)));
    let request = fx.runtime.start(RequestId::new("sess-1").unwrap()).unwrap();
    let executor = request.executor();
    executor.open_workspace().await.unwrap();

    // Call 1: a server on loopback, left running.
    let (server, port) = start_server(&executor).await;

    // Call 2: a session whose child daemonizes (its own session, stdio
    // closed); the session's root stays to keep it company.
    let daemonizer = executor
        .start(
            inv(
                "sh",
                &[
                    "-c",
                    "setsid sh -c 'exec sleep 300' </dev/null >/dev/null 2>&1 & echo $!; exec sleep 300",
                ],
            ),
            SessionOptions::default(),
        )
        .await
        .unwrap();
    let daemon_pid: u32 = read_until(&daemonizer, "\n").await.trim().parse().unwrap();
    assert!(alive(daemon_pid), "the daemon runs on after its call");
    // And a terminal session whose child leaves for a session of its own
    // and keeps the terminal open (the master then never reads its end).
    let tty_daemonizer = executor
        .start(
            inv(
                "sh",
                &[
                    "-c",
                    "setsid sh -c 'exec sleep 300' & echo $!; exec sleep 300",
                ],
            ),
            SessionOptions::default()
                .with_terminal(custodian::process::session::WindowSize::default()),
        )
        .await
        .unwrap();
    let tty_daemon_pid: u32 = read_until(&tty_daemonizer, "\n")
        .await
        .trim()
        .parse()
        .unwrap();
    assert!(alive(tty_daemon_pid), "the terminal's daemon runs on");

    // Call 3: the next call of the same request reaches the server.
    let url = format!("http://127.0.0.1:{port}/");
    let fetched = executor
        .run(inv(
            "python3",
            &[
                "-c",
                "import sys,urllib.request; print(urllib.request.urlopen(sys.argv[1]).status)",
                &url,
            ],
        ))
        .await
        .unwrap();
    assert_eq!(
        fetched.stdout.text.trim(),
        "200",
        "{:?}",
        fetched.stderr.text
    );
    assert!(server.status().running);
    let server_pid = server.running().pid();
    let job = job_dir(&fx.runtime, "sess-1");
    assert!(job.exists());

    // The request ends: every process of it stops before its files go.
    executor.succeed();
    let c = tokio::time::timeout(PROMPTLY, request.finished())
        .await
        .unwrap();
    let cleanup = c.cleanup.expect("cleaned");
    assert!(cleanup.is_clean(), "{cleanup:?}");
    assert!(!job.exists());
    let ev = server
        .running()
        .try_settled()
        .expect("settled before the completion");
    assert_eq!(ev.status, ProcessStatus::Cancelled);
    assert!(!alive(server_pid), "the server outlived its request");
    assert!(!alive(daemon_pid), "the daemon outlived its request");
    assert!(
        !alive(tty_daemon_pid),
        "the terminal's daemon outlived its request"
    );
    assert!(tty_daemonizer.running().try_settled().is_some());
    fx.runtime.shutdown().await;
}

/// A REPL keeps its state across the request's calls, read and written
/// through the library.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn a_repl_keeps_its_state_across_calls_and_a_cancel_stops_it() {
    let fx = fixture(limits(Duration::from_secs(60)));
    let request = fx.runtime.start(RequestId::new("sess-2").unwrap()).unwrap();
    let executor = request.executor();
    let repl = executor
        .start(
            inv("python3", &["-i", "-q", "-u"]),
            SessionOptions::default(),
        )
        .await
        .unwrap();
    repl.write_stdin(b"print(6*7)\n").await.unwrap();
    assert!(read_until(&repl, "42").await.contains("42"));
    // The next call finds the same session by its handle.
    let again = custodian::process::session::Session::of(repl.running()).unwrap();
    again.write_stdin(b"x = 5\nprint(x * 2)\n").await.unwrap();
    assert!(read_until(&again, "10").await.contains("10"));

    request.cancel();
    let c = tokio::time::timeout(PROMPTLY, request.finished())
        .await
        .unwrap();
    assert!(c.cleanup.is_none_or(|c| c.is_clean()));
    let ev = repl.running().try_settled().expect("stopped by the cancel");
    assert_eq!(ev.status, ProcessStatus::Cancelled);
    let i = ev.interactions.as_ref().unwrap();
    assert_eq!((i.writes, i.bytes_written), (2, 11 + 19));
    assert!(matches!(
        executor
            .start(inv("cat", &[]), SessionOptions::default())
            .await,
        Err(RuntimeError::Finalizing { .. })
    ));
    fx.runtime.shutdown().await;
}

/// A `cat` session of `executor`'s request. A spawn failed once in CI with
/// `EAGAIN` (a kernel resource briefly short on a loaded host; not seen
/// here in many runs): what this test checks is the bounds, so a start that
/// failed that way is tried again, a few times.
async fn start_retrying(executor: &Executor) -> custodian::process::session::Session {
    let mut tries = 0;
    loop {
        match executor
            .start(inv("cat", &[]), SessionOptions::default())
            .await
        {
            Err(RuntimeError::Process(custodian::process::ProcessError::Spawn {
                source, ..
            })) if source.kind() == std::io::ErrorKind::WouldBlock && tries < 5 => {
                tries += 1;
                eprintln!("a session's spawn failed EAGAIN; trying again ({tries})");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return other.unwrap(),
        }
    }
}

/// A `cat` session of `executor`'s request, started once a bound lets it:
/// the runtime frees a settled session's place once it sees it settled, a
/// moment after its `wait`. `None` if a bound still refuses after a second.
async fn start_once_freed(executor: &Executor) -> Option<custodian::process::session::Session> {
    for _ in 0..50 {
        match executor
            .start(inv("cat", &[]), SessionOptions::default())
            .await
        {
            Ok(s) => return Some(s),
            Err(RuntimeError::TooManySessions { .. }) => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("{e}"),
        }
    }
    None
}

/// The bounds refuse the start past them, typed, and free their places
/// when a session settles; nothing running is evicted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn the_session_bounds_refuse_a_start_and_free_when_a_session_settles() {
    let dir = tempfile::tempdir_in(scratch()).unwrap();
    let config = config_in(dir.path())
        .with_session_limits(SessionLimits::new().with_per_request(2).with_per_runtime(3));
    let runtime = Runtime::open(config).unwrap();
    let a = runtime.start(RequestId::new("bound-a").unwrap()).unwrap();
    let b = runtime.start(RequestId::new("bound-b").unwrap()).unwrap();
    let (ea, eb) = (a.executor(), b.executor());
    let cat = || inv("cat", &[]);
    let a1 = start_retrying(&ea).await;
    let a2 = start_retrying(&ea).await;
    match ea.start(cat(), SessionOptions::default()).await {
        Err(RuntimeError::TooManySessions { limit: 2, per, .. }) => {
            assert_eq!(per, "in the request")
        }
        other => panic!("third session of a request: {other:?}"),
    }
    // A plain launch is not a session: not bounded by them; nor is a
    // streamed run.
    assert!(ea.run(inv("true", &[])).await.is_ok());
    let streamed = ea.launch_streamed(inv("true", &[])).await.unwrap();
    assert_eq!(streamed.wait().await.exit_code, Some(0));
    let _b1 = start_retrying(&eb).await;
    match eb.start(cat(), SessionOptions::default()).await {
        Err(RuntimeError::TooManySessions { limit: 3, per, .. }) => {
            assert_eq!(per, "in the runtime")
        }
        other => panic!("fourth session of the runtime: {other:?}"),
    }
    assert!(
        a1.status().running && a2.status().running,
        "nothing evicted"
    );
    // One settles: its places are free again, in its request first (a
    // settled session counts no more, whatever kind of process it was).
    a1.close_stdin().await;
    a1.wait().await;
    let a3 = start_once_freed(&ea)
        .await
        .expect("a settled session's place in its request was not freed");
    match eb.start(cat(), SessionOptions::default()).await {
        Err(RuntimeError::TooManySessions { limit: 3, .. }) => {}
        other => panic!("the runtime is full again: {other:?}"),
    }
    a3.close_stdin().await;
    a3.wait().await;
    let freed = start_once_freed(&eb).await;
    assert!(freed.is_some(), "a settled session's place was not freed");
    ea.succeed();
    eb.succeed();
    for r in [a, b] {
        let c = tokio::time::timeout(PROMPTLY, r.finished()).await.unwrap();
        // No workspace was opened: nothing to clean, every process stopped.
        assert!(c.cleanup.is_none(), "{:?}", c.cleanup);
        assert_eq!(c.result.status(), RequestStatus::Succeeded);
    }
    // A success does not prove the sessions the executor left running are
    // gone: the completion waited for their stop (no workspace was opened,
    // so no cleanup did it either).
    let freed = freed.unwrap();
    assert!(!a2.status().running, "{:?}", a2.status());
    assert!(!freed.status().running, "{:?}", freed.status());
    runtime.shutdown().await;
}

/// Fetches `url` from a call of `executor`; the status, or the error's
/// name.
async fn fetch(executor: &Executor, url: &str) -> String {
    let ev = executor
        .run(inv("python3", &["-c", crate::http::PY_FETCH, url]))
        .await
        .unwrap();
    format!("{}{}", ev.stdout.text.trim(), ev.stderr.text.trim())
}

/// Isolated with the network off, the processes of one request share the
/// request's network namespace: a server one call started answers the next
/// call of the same request on loopback, and a call of another request
/// (its own namespace) cannot reach it. As root the namespace belongs to
/// the host's user namespace; as an unprivileged user (run so by
/// `a_requests_calls_share_its_loopback_as_an_unprivileged_user`) to a user
/// namespace of the request's, which each launch enters first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn isolated_calls_of_one_request_share_its_loopback_and_no_other_request_does() {
    if custodian::confine::landlock_abi() == 0 {
        skipped!("needs Landlock");
        return;
    }
    let dir = tempfile::tempdir_in(scratch()).unwrap();
    let config =
        config_in(dir.path()).with_confinement(custodian::confine::Confinement::workspace_write());
    let runtime = Runtime::open(config).unwrap();
    let a = runtime.start(RequestId::new("net-a").unwrap()).unwrap();
    let b = runtime.start(RequestId::new("net-b").unwrap()).unwrap();
    a.executor().open_workspace().await.unwrap();
    b.executor().open_workspace().await.unwrap();

    let (server, port) = start_server(&a.executor()).await;
    let url = format!("http://127.0.0.1:{port}/");
    assert_eq!(fetch(&a.executor(), &url).await, "200", "the same request");
    assert_eq!(
        fetch(&b.executor(), &url).await,
        "URLError",
        "another request's loopback is its own"
    );
    // Nor from the host: the namespace is not the host's.
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
    // A tool of the request cannot reconfigure the namespace it shares
    // with the request's other calls (it belongs to the host's user
    // namespace, or the request's; the tool holds no capability in
    // either): its loopback stays up.
    let down = a
        .executor()
        .run(inv(
            "python3",
            &[
                "-c",
                // SIOCSIFFLAGS on `lo` with no flag set: `ip link set lo down`.
                "import fcntl, socket, struct\n\
                 s = socket.socket()\n\
                 fcntl.ioctl(s, 0x8914, struct.pack('16sH14x', b'lo', 0))",
            ],
        ))
        .await
        .unwrap();
    assert_ne!(down.exit_code, Some(0), "{:?}", down.stderr.text);
    assert!(
        down.stderr.text.contains("PermissionError"),
        "refused for want of a capability: {:?}",
        down.stderr.text
    );
    assert_eq!(fetch(&a.executor(), &url).await, "200", "still up");
    let ev = server.running().clone();
    a.executor().succeed();
    b.executor().succeed();
    let _ = tokio::time::timeout(PROMPTLY, a.finished()).await.unwrap();
    let _ = tokio::time::timeout(PROMPTLY, b.finished()).await.unwrap();
    assert!(ev.try_settled().is_some());
    runtime.shutdown().await;
}

/// A session's whole output is recorded in its request's spills as it
/// arrives, up to the cap: the evidence names each stream's record and
/// what the stream wrote past the cap; the records are listed among the
/// request's spills and in its completion and read back as the stream's
/// first bytes, whole (where the evidence keeps a head and a tail, and the
/// buffer the newest bytes); a session that wrote nothing records nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn a_sessions_whole_output_is_recorded_in_its_requests_spills_up_to_the_cap() {
    const CAP: u64 = 1 << 20;
    let dir = tempfile::tempdir_in(scratch()).unwrap();
    let config = config_in(dir.path()).with_session_record(SessionRecord::new().with_cap(CAP));
    let runtime = Runtime::open(config).unwrap();
    let request = runtime.start(RequestId::new("record").unwrap()).unwrap();
    let executor = request.executor();
    executor.open_workspace().await.unwrap();
    // 3,000,000 bytes of numbered lines on stdout: more than the buffer,
    // the capture and the cap.
    let script = "import sys\n\
                  for i in range(300000): sys.stdout.write('%09d\\n' % i)\n\
                  sys.stdout.flush(); sys.stderr.write('done\\n')";
    let session = executor
        .start(inv("python3", &["-c", script]), SessionOptions::default())
        .await
        .unwrap();
    session.close_stdin().await;
    let ev = session.wait().await;
    assert_eq!(ev.exit_code, Some(0), "{:?}", ev.stderr.text);
    assert!(ev.stdout.truncated, "the capture keeps a head and a tail");
    let recorded = ev.recorded.clone().expect("a record");
    let out = recorded.stdout.clone().expect("stdout recorded");
    assert_eq!(
        (out.bytes, out.dropped, out.error.as_deref()),
        (CAP, 3_000_000 - CAP, None)
    );
    let whole: String = (0..300_000).map(|i| format!("{i:09}\n")).collect();
    let read = |locator: &str| {
        let locator = custodian::spill::Locator::parse(locator).unwrap();
        let executor = executor.clone();
        async move { executor.read_spill(&locator).await.unwrap() }
    };
    assert!(
        read(&out.locator).await == whole.as_bytes()[..CAP as usize],
        "the record is the stream's first MiB"
    );
    let err = recorded.stderr.clone().expect("stderr recorded");
    assert_eq!((err.bytes, err.dropped), (5, 0), "{:?}", ev.stderr.text);
    assert_eq!(read(&err.locator).await, b"done\n");
    let listed: Vec<String> = executor.spills().iter().map(ToString::to_string).collect();
    assert!(
        listed.contains(&out.locator) && listed.contains(&err.locator),
        "{listed:?}"
    );

    let quiet = executor
        .start(inv("true", &[]), SessionOptions::default())
        .await
        .unwrap();
    assert!(
        quiet.wait().await.recorded.is_none(),
        "nothing written, nothing recorded"
    );

    executor.succeed();
    let completion = tokio::time::timeout(PROMPTLY, request.finished())
        .await
        .unwrap();
    let spills: Vec<String> = completion.spills.iter().map(ToString::to_string).collect();
    assert!(
        spills.contains(&out.locator) && spills.contains(&err.locator),
        "{spills:?}"
    );
    runtime.shutdown().await;
}

/// A record that cannot be made where it should (the spill session is a
/// symlink to a directory elsewhere) is refused, nothing is written through
/// the link, and the evidence says so: no locator, the kind of refusal,
/// every byte counted as dropped. The session itself runs as any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn a_record_through_a_symlinked_spill_session_is_refused_and_reported() {
    let dir = tempfile::tempdir_in(scratch()).unwrap();
    let config =
        config_in(dir.path()).with_session_record(SessionRecord::new().with_spill_session("trap"));
    let runtime = Runtime::open(config).unwrap();
    let victim = dir.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    std::os::unix::fs::symlink(&victim, dir.path().join("spill").join("trap")).unwrap();
    let request = runtime.start(RequestId::new("trap").unwrap()).unwrap();
    let executor = request.executor();
    executor.open_workspace().await.unwrap();
    let session = executor
        .start(inv("echo", &["twelve bytes"]), SessionOptions::default())
        .await
        .unwrap();
    let ev = session.wait().await;
    assert_eq!(ev.stdout.text, "twelve bytes\n");
    let out = ev
        .recorded
        .clone()
        .and_then(|r| r.stdout)
        .expect("reported");
    assert_eq!(
        (
            out.locator.as_str(),
            out.bytes,
            out.dropped,
            out.error.as_deref()
        ),
        ("", 0, 13, Some("Refused"))
    );
    assert_eq!(
        std::fs::read_dir(&victim).unwrap().count(),
        0,
        "nothing through the link"
    );
    assert!(executor.spills().is_empty());
    executor.succeed();
    let _ = tokio::time::timeout(PROMPTLY, request.finished())
        .await
        .unwrap();
    runtime.shutdown().await;
}

/// A streamed run (`Executor::launch_streamed`): its output is read while
/// it runs, and it is a run in every other way: stdin is `/dev/null`
/// (writes are refused), no interactions in its evidence, one of the
/// request's processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn a_streamed_run_is_read_while_it_runs_and_is_a_run_otherwise() {
    let fx = fixture(limits(Duration::from_secs(60)));
    let request = fx
        .runtime
        .start(RequestId::new("streamed").unwrap())
        .unwrap();
    let executor = request.executor();
    executor.open_workspace().await.unwrap();
    let script = "echo one; while [ ! -e go ]; do sleep 0.01; done; read x; echo \"read:$?\"";
    let run = executor
        .launch_streamed(inv("sh", &["-c", script]))
        .await
        .unwrap();
    let first = read_until(&run, "one\n").await;
    assert_eq!(first, "one\n");
    assert!(run.status().running, "read while it runs");
    assert!(!run.running().is_session());
    assert!(matches!(
        run.write_stdin(b"x\n").await,
        Err(custodian::process::session::SessionError::StdinClosed)
    ));
    // The process runs in the workspace root: `<root>/<internal>/job/<id>`
    // is the job directory.
    let job = job_dir(&fx.runtime, "streamed");
    let root = job.ancestors().nth(3).unwrap();
    std::fs::write(root.join("go"), b"").unwrap();
    let ev = run.wait().await;
    assert_eq!(ev.stdout.text, "one\nread:1\n", "stdin is /dev/null");
    assert!(ev.interactions.is_none(), "a run, not a session");
    executor.succeed();
    let c = tokio::time::timeout(PROMPTLY, request.finished())
        .await
        .unwrap();
    assert!(c.cleanup.expect("cleaned").is_clean());
    fx.runtime.shutdown().await;
}

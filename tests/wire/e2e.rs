//! `custodian node` as a real child process, driven by the edge client and
//! the coordinator over a Unix socket and over stdio.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use custodian::machine::request::{Candidate, CleanupReport, FinalResult};
use custodian::request::{Coordinator, RequestId, RequestLimits, TerminalSink, TerminalWriteError};
use custodian::wire::{CleanupStatus, RunSpec, WireClient};

const BIN: &str = env!("CARGO_BIN_EXE_custodian");

struct AckSink;

impl TerminalSink for AckSink {
    async fn write_terminal(
        &self,
        _: &RequestId,
        _: &FinalResult,
    ) -> Result<(), TerminalWriteError> {
        Ok(())
    }
}

/// A node child on a socket; killed (SIGKILL) if the test panics first.
struct NodeChild {
    child: Option<std::process::Child>,
}

impl NodeChild {
    fn start(workspace: &Path, socket: &Path) -> NodeChild {
        let child = std::process::Command::new(BIN)
            .args(["node", "--workspace"])
            .arg(workspace)
            .arg("--socket")
            .arg(socket)
            .args(["--cleanup-bound", "5s"])
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn custodian node");
        let node = NodeChild { child: Some(child) };
        // The socket file appears at bind(), a moment before listen().
        for _ in 0..500 {
            if std::os::unix::net::UnixStream::connect(socket).is_ok() {
                return node;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the node never created its socket");
    }

    /// SIGTERM, then the exit status.
    fn stop(mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
            rustix::process::Signal::TERM,
        )
        .unwrap();
        child.wait().unwrap()
    }
}

impl Drop for NodeChild {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Whether `pid` is still a live (non-zombie) process.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
            !matches!(state, Some(Some('Z' | 'X')))
        }
    }
}

async fn wait_for_file(path: &Path) -> String {
    for _ in 0..500 {
        if let Ok(s) = std::fs::read_to_string(path) {
            if s.ends_with('\n') {
                return s;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} never appeared", path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::e2e_in_a_private_mount_namespace"]
async fn node_over_a_socket_cleans_a_raced_request_and_keeps_user_files() {
    let dir = crate::sandbox::tempdir();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("before.txt"), "the user's").unwrap();
    let socket = dir.path().join("node.sock");
    let node = NodeChild::start(&ws, &socket);
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the socket is owner-only");

    let stream = tokio::net::UnixStream::connect(&socket).await.unwrap();
    let client = WireClient::new(stream, 1 << 20);
    let co = Coordinator::new(
        Arc::new(client.clone()),
        Arc::new(client.clone()),
        Arc::new(AckSink),
        RequestLimits::default(),
    );
    let id = RequestId::new("e2e-1").unwrap();
    let h = co.start(id.clone());
    h.workspace_opening().await.unwrap();
    assert!(!client.open_workspace(&id).await.unwrap());
    let job = ws.join(".custodian/job/e2e-1");
    assert!(
        job.is_dir(),
        "the job namespace exists while the request runs"
    );
    client
        .write_artifact(&id, "notes/plan.txt", "internal")
        .await
        .unwrap();
    client
        .write_artifact(&id, "scratch.json", "{}")
        .await
        .unwrap();
    assert!(job.join("notes/plan.txt").is_file());

    // A process that writes a user result, leaves a descendant in its group
    // and waits for it.
    let spec = RunSpec {
        executable: "/bin/sh".into(),
        argv: vec![
            "-c".into(),
            "echo kept > result.txt; sleep 300 & echo $! > sleeper.pid.tmp && mv sleeper.pid.tmp sleeper.pid; wait".into(),
        ],
        env: Default::default(),
        cwd: None,
        timeout_ms: Some(60_000),
        confinement: None,
    };
    let run = {
        let client = client.clone();
        let id = id.clone();
        tokio::spawn(async move { client.run_process(&id, spec).await })
    };
    let pid: u32 = wait_for_file(&ws.join("sleeper.pid"))
        .await
        .trim()
        .parse()
        .unwrap();
    assert!(alive(pid), "the descendant runs");

    // Race a cancel with a success.
    let a = {
        let h = h.clone();
        tokio::spawn(async move { h.candidate(Candidate::CallerCancel) })
    };
    let b = {
        let h = h.clone();
        tokio::spawn(async move { h.candidate(Candidate::Success) })
    };
    let _ = tokio::join!(a, b);
    let done = tokio::time::timeout(Duration::from_secs(30), h.finished())
        .await
        .expect("completes");
    assert_eq!(done.result.cleanup(), CleanupReport::Cleaned, "{done:?}");
    assert!(matches!(
        done.result.primary(),
        Candidate::CallerCancel | Candidate::Success
    ));

    let summary = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(summary.reason.as_str(), "cancelled", "{summary:?}");
    for _ in 0..200 {
        if !alive(pid) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!alive(pid), "no process of the request is left");
    assert!(!job.exists(), "the job namespace is gone");
    assert_eq!(
        std::fs::read_to_string(ws.join("result.txt")).unwrap(),
        "kept\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("before.txt")).unwrap(),
        "the user's"
    );
    assert!(ws.join("sleeper.pid").is_file());
    // A duplicate cleanup gets the cached answer.
    let again = client.cleanup_workspace(&id).await.unwrap();
    assert_eq!((again.status, again.cached), (CleanupStatus::Cleaned, true));

    let status = node.stop();
    assert!(status.success(), "{status:?}");
    assert!(!socket.exists(), "the node removes its socket on exit");
}

/// Not a test on its own: the entry point of the peer-uid helper. When
/// `CUSTODIAN_PEER_PROBE` names a socket, connect to it (as whatever uid
/// this process runs as) and print what happened.
#[test]
fn peer_probe_helper() {
    let Ok(path) = std::env::var("CUSTODIAN_PEER_PROBE") else {
        return;
    };
    use std::io::{BufRead, BufReader, Write};
    match std::os::unix::net::UnixStream::connect(&path) {
        Err(e) => println!("PROBE connect_error {:?}", e.kind()),
        Ok(mut s) => {
            let _ = s.write_all(
                b"{\"v\":1,\"seq\":1,\"op\":\"open_workspace\",\"request_id\":\"intruder\"}\n",
            );
            let mut line = String::new();
            let _ = BufReader::new(&s).read_line(&mut line);
            println!("PROBE answer {}", line.trim());
        }
    }
}

/// Runs the helper as uid/gid 65534 against `socket`; returns its PROBE line.
fn probe_as_nobody(exe_dir: &Path, socket: &Path) -> String {
    use std::os::unix::process::CommandExt;
    let exe = exe_dir.join("probe");
    let out = std::process::Command::new(&exe)
        .args([
            "e2e::peer_probe_helper",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("CUSTODIAN_PEER_PROBE", socket)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.find("PROBE ").map(|i| l[i..].to_owned()))
        .unwrap_or_else(|| {
            panic!(
                "no probe output: {stdout} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

#[test]
#[ignore = "deletes: run by guarded::e2e_in_a_private_mount_namespace"]
fn a_peer_of_another_uid_is_refused() {
    if !rustix::process::geteuid().is_root() {
        skipped!("switching to another uid needs root");
        return;
    }
    let dir = crate::sandbox::tempdir();
    // The helper binary and the socket's directory must be reachable by
    // uid 65534 (through the scratch directory too); the socket itself is
    // not.
    if let Some(scratch) = dir.path().parent() {
        std::fs::set_permissions(scratch, std::fs::Permissions::from_mode(0o711)).unwrap();
    }
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::copy(std::env::current_exe().unwrap(), dir.path().join("probe")).unwrap();
    std::fs::set_permissions(
        dir.path().join("probe"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let socket = dir.path().join("node.sock");
    let node = NodeChild::start(&ws, &socket);

    // Layer 1: the 0600 socket refuses the connection itself.
    let first = probe_as_nobody(dir.path(), &socket);
    assert_eq!(first, "PROBE connect_error PermissionDenied");

    // Layer 2: even with the mode widened by mistake, the node checks the
    // peer's credentials and refuses another uid.
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let second = probe_as_nobody(dir.path(), &socket);
    assert!(second.contains("\"code\":\"peer_refused\""), "{second}");
    assert!(
        !ws.join(".custodian/job/intruder").exists(),
        "nothing was opened for the intruder"
    );

    // The owner is still served.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = WireClient::new(
            tokio::net::UnixStream::connect(&socket).await.unwrap(),
            1 << 20,
        );
        let id = RequestId::new("owner").unwrap();
        assert!(!client.open_workspace(&id).await.unwrap());
    });
    assert!(node.stop().success());
    assert!(
        !ws.join(".custodian/job/owner").exists(),
        "shutdown cleaned the open request"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::e2e_in_a_private_mount_namespace"]
async fn node_on_stdio_cleans_what_the_edge_left_open_when_stdin_closes() {
    let dir = crate::sandbox::tempdir();
    let mut child = tokio::process::Command::new(BIN)
        .args(["node", "--workspace"])
        .arg(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let client = WireClient::from_parts(
        child.stdout.take().unwrap(),
        child.stdin.take().unwrap(),
        1 << 20,
    );
    let done = RequestId::new("finished").unwrap();
    let left = RequestId::new("left-open").unwrap();
    client.open_workspace(&done).await.unwrap();
    client.open_workspace(&left).await.unwrap();
    client
        .write_artifact(&left, "a/b/c.txt", "x")
        .await
        .unwrap();
    assert_eq!(
        client.cleanup_workspace(&done).await.unwrap().status,
        CleanupStatus::Cleaned
    );
    assert!(
        dir.path()
            .join(".custodian/job/left-open/a/b/c.txt")
            .is_file()
    );
    drop(client); // closes the node's stdin
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
    assert!(
        !dir.path().join(".custodian/job/left-open").exists(),
        "closed on exit"
    );
}

/// `run_process` with a timeout that would overflow the node's clock gets a
/// typed refusal (`invalid_invocation`) and launches nothing; the node keeps
/// serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::e2e_in_a_private_mount_namespace"]
async fn a_run_process_with_an_overflowing_timeout_is_refused() {
    let dir = crate::sandbox::tempdir();
    let mut child = tokio::process::Command::new(BIN)
        .args(["node", "--workspace"])
        .arg(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let client = WireClient::from_parts(
        child.stdout.take().unwrap(),
        child.stdin.take().unwrap(),
        1 << 20,
    );
    let id = RequestId::new("huge").unwrap();
    client.open_workspace(&id).await.unwrap();
    let marker = dir.path().join("launched");
    let spec = |timeout_ms| RunSpec {
        executable: "/bin/sh".into(),
        argv: vec!["-c".into(), format!("touch '{}'", marker.display())],
        env: Default::default(),
        cwd: None,
        timeout_ms: Some(timeout_ms),
        confinement: None,
    };
    for huge in [u64::MAX, 100 * 365 * 86_400 * 1000] {
        match client.run_process(&id, spec(huge)).await {
            Err(custodian::wire::WireError::Refused { code }) => {
                assert_eq!(code.as_str(), "invalid_invocation")
            }
            other => panic!("{huge} ms: {other:?}"),
        }
    }
    assert!(!marker.exists(), "nothing was launched");
    let ok = client.run_process(&id, spec(10_000)).await.unwrap();
    assert_eq!(ok.reason.as_str(), "exited", "{ok:?}");
    assert!(marker.exists());
    drop(client);
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::e2e_in_a_private_mount_namespace"]
async fn a_confined_run_over_the_wire_writes_only_its_workspace() {
    use custodian::confine::Confinement;
    if custodian::confine::landlock_abi() == 0 {
        skipped!("the kernel has no Landlock");
        return;
    }
    let dir = crate::sandbox::tempdir();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let outside = dir.path().join("outside.txt");
    let socket = dir.path().join("node.sock");
    let node = NodeChild::start(&ws, &socket);
    let stream = tokio::net::UnixStream::connect(&socket).await.unwrap();
    let client = WireClient::new(stream, 1 << 20);
    let id = RequestId::new("confined-1").unwrap();
    client.open_workspace(&id).await.unwrap();
    let spec = |confinement| RunSpec {
        executable: "/bin/sh".into(),
        argv: vec![
            "-c".into(),
            format!("echo in > inside.txt; echo out > '{}'", outside.display()),
        ],
        env: Default::default(),
        cwd: None,
        timeout_ms: Some(20_000),
        confinement,
    };
    let confined = Some(Confinement::workspace_write());
    let summary = client.run_process(&id, spec(confined)).await;
    match summary {
        Ok(s) => {
            // Isolated: the path outside is read-only in the view, or lies
            // in its private /tmp; either way it never reaches the host.
            assert!(ws.join("inside.txt").is_file(), "{s:?}");
            assert!(!outside.exists());
            // The control: unconfined, the same write lands outside.
            client.run_process(&id, spec(None)).await.unwrap();
            assert!(outside.is_file());
        }
        Err(custodian::wire::WireError::Refused { code })
            if code.as_str() == "confinement_spawner_unavailable" =>
        {
            skipped!("the node has no cgroup tier for a confined run");
        }
        Err(e) => panic!("{e:?}"),
    }
    // A strict confinement the kernel cannot enforce runs nothing.
    let mut too_new = Confinement::workspace_write();
    too_new.min_abi = Some(99);
    std::fs::remove_file(ws.join("inside.txt")).ok();
    let err = client
        .run_process(&id, spec(Some(too_new)))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, custodian::wire::WireError::Refused { code } if code.as_str() == "confinement_unsupported"),
        "{err:?}"
    );
    assert!(!ws.join("inside.txt").exists());
    client.cleanup_workspace(&id).await.unwrap();
    node.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::e2e_in_a_private_mount_namespace"]
async fn a_network_allow_run_over_the_wire_reaches_its_hosts_only() {
    use custodian::confine::Confinement;
    if custodian::confine::landlock_abi() == 0 {
        skipped!("the kernel has no Landlock");
        return;
    }
    let allowed = crate::http::http_server("through-the-node-proxy");
    let other = crate::http::http_server("not-for-you");
    let dir = crate::sandbox::tempdir();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let socket = dir.path().join("node.sock");
    let node = NodeChild::start(&ws, &socket);
    let stream = tokio::net::UnixStream::connect(&socket).await.unwrap();
    let client = WireClient::new(stream, 1 << 20);
    let id = RequestId::new("allow-1").unwrap();
    client.open_workspace(&id).await.unwrap();
    // The node's proxy resolves with the system resolver: the allowed
    // "host" is an address. `--noproxy ''` lifts the child's NO_PROXY for
    // loopback (the host's loopback is reached only through the proxy).
    let spec = RunSpec {
        executable: "/bin/sh".into(),
        argv: vec![
            "-c".into(),
            format!(
                "curl -sS --noproxy '' http://127.0.0.1:{allowed}/; echo; \
                 curl -sS --noproxy '' -o /dev/null -w 'other=%{{http_code}}' http://127.0.0.1:{other}/"
            ),
        ],
        env: Default::default(),
        cwd: None,
        timeout_ms: Some(20_000),
        confinement: Some(
            Confinement::workspace_write().with_allow_host(format!("127.0.0.1:{allowed}")),
        ),
    };
    match client.run_process(&id, spec).await {
        Ok(s) => {
            let out = &s.stdout;
            assert!(out.contains("through-the-node-proxy"), "{s:?}");
            assert!(out.contains("other=403"), "{s:?}");
            assert!(!out.contains("not-for-you"), "{s:?}");
            let net = s.network.as_ref().expect("the summary's network");
            assert_eq!(net.requests_allowed, 1, "{net:?}");
            assert_eq!(net.requests_refused, 1, "{net:?}");
        }
        Err(custodian::wire::WireError::Refused { code })
            if code.as_str() == "confinement_spawner_unavailable" =>
        {
            skipped!("the node has no cgroup tier for a confined run");
        }
        Err(e) => panic!("{e:?}"),
    }
    client.cleanup_workspace(&id).await.unwrap();
    node.stop();
}

#[test]
#[ignore = "deletes: run by guarded::e2e_in_a_private_mount_namespace"]
fn a_run_spec_without_confinement_still_parses_and_one_with_it_round_trips() {
    let old: RunSpec = serde_json::from_str(r#"{"executable":"/bin/true"}"#).unwrap();
    assert_eq!(old.confinement, None);
    let new: RunSpec = serde_json::from_str(
        r#"{"executable":"/bin/true","confinement":{"fs":"read-only","network":"off","deny_read":["/root/.ssh"]}}"#,
    )
    .unwrap();
    let c = new.confinement.clone().unwrap();
    assert_eq!(c.fs, custodian::confine::FsMode::ReadOnly);
    assert_eq!(c.deny_read, vec![std::path::PathBuf::from("/root/.ssh")]);
    let back: RunSpec = serde_json::from_str(&serde_json::to_string(&new).unwrap()).unwrap();
    assert_eq!(back, new);
    assert!(
        serde_json::from_str::<RunSpec>(r#"{"executable":"x","confinement":{"fs":"rw"}}"#).is_err()
    );
    let allow: RunSpec = serde_json::from_str(
        r#"{"executable":"/bin/true","confinement":{"fs":"read-only","network":"allow","allow_hosts":["pypi.org"]}}"#,
    )
    .unwrap();
    let c = allow.confinement.clone().unwrap();
    assert_eq!(c.network, custodian::confine::Network::Allow);
    assert_eq!(c.allow_hosts, ["pypi.org"]);
    let back: RunSpec = serde_json::from_str(&serde_json::to_string(&allow).unwrap()).unwrap();
    assert_eq!(back, allow);
}

//! `custodian node` under its host's stop signals: SIGTERM, SIGINT and
//! SIGHUP each end the node (on a socket, its accept loop; on stdio, its one
//! edge's session), cancel the processes of every open request, clean their
//! job directories, remove the socket and exit 0.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use custodian::request::RequestId;
use custodian::wire::{RunSpec, WireClient};
use rustix::process::{Pid, Signal, kill_process};

/// The live processes whose argv holds `marker`.
fn holding(marker: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|raw| raw.split(|&b| b == 0).any(|a| a == marker.as_bytes()))
        })
        .collect()
}

async fn stops_on(sig: Signal, n: u32, stdio: bool) {
    let dir = crate::sandbox::tempdir();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let socket = dir.path().join("node.sock");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_custodian"));
    cmd.args(["node", "--workspace"]).arg(&ws);
    let (mut node, client) = if stdio {
        let mut node = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let to_node = tokio::process::ChildStdin::from_std(node.stdin.take().unwrap()).unwrap();
        let from_node = tokio::process::ChildStdout::from_std(node.stdout.take().unwrap()).unwrap();
        let client = WireClient::new(tokio::io::join(from_node, to_node), 1 << 20);
        (node, client)
    } else {
        let mut node = cmd
            .arg("--socket")
            .arg(&socket)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let stream = loop {
            if let Ok(s) = tokio::net::UnixStream::connect(&socket).await {
                break s;
            }
            if let Some(status) = node.try_wait().unwrap() {
                panic!("the node exited ({status}) before it served");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        (node, WireClient::new(stream, 1 << 20))
    };
    let id = RequestId::new(&format!("signals-{n}")).unwrap();
    assert!(!client.open_workspace(&id).await.unwrap());
    let job = ws.join(".custodian/job").join(id.as_str());
    assert!(job.is_dir());
    // A sleep no other process on the host has.
    let marker = format!("300.{}{n}", std::process::id());
    let spec = RunSpec {
        executable: "/bin/sh".into(),
        argv: vec![
            "-c".into(),
            "sleep \"$1\" & wait".into(),
            "sh".into(),
            marker.clone(),
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
    let started = Instant::now();
    while holding(&marker).len() < 2 {
        assert!(started.elapsed() < Duration::from_secs(10), "never ran");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let at = Instant::now();
    kill_process(Pid::from_raw(node.id() as i32).unwrap(), sig).unwrap();
    let status = tokio::task::spawn_blocking(move || node.wait().unwrap())
        .await
        .unwrap();
    eprintln!(
        "{sig:?} (stdio {stdio}): the node stopped in {:?}",
        at.elapsed()
    );
    assert_eq!(status.code(), Some(0), "{sig:?}: {status:?}");
    let _ = run.await;
    let mut left = holding(&marker);
    for _ in 0..100 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        left = holding(&marker);
    }
    assert!(left.is_empty(), "{sig:?}: left alive: {left:?}");
    assert!(!job.exists(), "{sig:?}: the job directory was left");
    assert!(!Path::new(&socket).exists(), "{sig:?}: the socket was left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::signals_in_a_private_mount_namespace"]
async fn a_socket_node_cleans_up_and_exits_0_on_sigterm_sigint_and_sighup() {
    for (n, sig) in [Signal::HUP, Signal::INT, Signal::TERM]
        .into_iter()
        .enumerate()
    {
        stops_on(sig, n as u32, false).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::signals_in_a_private_mount_namespace"]
async fn a_stdio_node_cleans_up_and_exits_0_on_sigterm_sigint_and_sighup() {
    for (n, sig) in [Signal::HUP, Signal::INT, Signal::TERM]
        .into_iter()
        .enumerate()
    {
        stops_on(sig, 10 + n as u32, true).await;
    }
}

/// A node stopped while a network `allow` process holds a tunnel through
/// its proxy open: the process is stopped, the tunnel closed (the upstream
/// sees its end), the job cleaned, and the node exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::signals_in_a_private_mount_namespace"]
async fn a_node_stopped_with_an_open_tunnel_closes_it_and_exits_0() {
    use std::io::Read;
    if custodian::confine::landlock_abi() == 0 {
        skipped!("the kernel has no Landlock");
        return;
    }
    // An upstream that accepts and then says nothing: the tunnel stays
    // open until one side closes it.
    let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = upstream.local_addr().unwrap().port();
    let (accepted, seen) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = upstream.accept() {
            let _ = accepted.send(());
            let mut rest = Vec::new();
            // Returns once the proxy closed its side.
            let _ = s.read_to_end(&mut rest);
            let _ = accepted.send(());
        }
    });
    let dir = crate::sandbox::tempdir();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let socket = dir.path().join("node.sock");
    let mut node = std::process::Command::new(env!("CARGO_BIN_EXE_custodian"))
        .args(["node", "--workspace"])
        .arg(&ws)
        .arg("--socket")
        .arg(&socket)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let stream = loop {
        if let Ok(s) = tokio::net::UnixStream::connect(&socket).await {
            break s;
        }
        assert!(node.try_wait().unwrap().is_none(), "the node exited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let client = WireClient::new(stream, 1 << 20);
    let id = RequestId::new("signals-tunnel").unwrap();
    client.open_workspace(&id).await.unwrap();
    let job = ws.join(".custodian/job").join(id.as_str());
    let spec = RunSpec {
        executable: "/bin/sh".into(),
        argv: vec![
            "-c".into(),
            format!("curl -sS --noproxy '' -p --max-time 60 http://127.0.0.1:{port}/"),
        ],
        env: Default::default(),
        cwd: None,
        timeout_ms: Some(60_000),
        confinement: Some(
            custodian::confine::Confinement::workspace_write()
                .with_allow_host(format!("127.0.0.1:{port}")),
        ),
    };
    let run = {
        let client = client.clone();
        let id = id.clone();
        tokio::spawn(async move { client.run_process(&id, spec).await })
    };
    // The tunnel is open once the upstream accepted (or the run ended: a
    // host that cannot confine refuses it).
    let opened = tokio::task::spawn_blocking(move || {
        let first = seen.recv_timeout(Duration::from_secs(20)).is_ok();
        (first, seen)
    });
    let (first, seen) = opened.await.unwrap();
    if !first {
        match run.await.unwrap() {
            Err(custodian::wire::WireError::Refused { code })
                if code.as_str().starts_with("confinement_") =>
            {
                skipped!("the node cannot confine here ({code:?})");
                let _ = kill_process(Pid::from_raw(node.id() as i32).unwrap(), Signal::TERM);
                let _ = node.wait();
                return;
            }
            other => panic!("the tunnel never opened: {other:?}"),
        }
    }
    let at = Instant::now();
    kill_process(Pid::from_raw(node.id() as i32).unwrap(), Signal::TERM).unwrap();
    let status = tokio::task::spawn_blocking(move || node.wait().unwrap())
        .await
        .unwrap();
    eprintln!(
        "SIGTERM with an open tunnel: the node stopped in {:?}",
        at.elapsed()
    );
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(
        seen.recv_timeout(Duration::from_secs(5)).is_ok(),
        "the tunnel outlived the node"
    );
    let _ = run.await;
    assert!(!job.exists(), "the job directory was left");
    assert!(!Path::new(&socket).exists(), "the socket was left");
}

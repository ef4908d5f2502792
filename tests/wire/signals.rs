//! `custodian node` under its host's stop signals: SIGTERM, SIGINT and
//! SIGHUP each end the node (on a socket, its accept loop; on stdio, its one
//! edge's session), cancel the processes of every open request, clean their
//! job directories, remove the socket and exit 0.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use custodian::coordinator::RequestId;
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

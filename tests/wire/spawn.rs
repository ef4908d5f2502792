//! `WireClient::spawn_node` with local commands standing in for a
//! transport: a command that cannot start, a transport killed by the edge,
//! and one that exits while something it left behind keeps its stdout open.
//! (`ssh.rs` runs the real thing through sshd.)

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use custodian::request::RequestId;
use custodian::wire::{SpawnError, WireClient, WireError, transport::EXIT_GRACE};

#[tokio::test]
async fn a_command_that_cannot_start_is_a_typed_error() {
    let err = WireClient::spawn_node("/nonexistent/custodian-transport", ["-T"], 1 << 20)
        .map(|_| ())
        .unwrap_err();
    let SpawnError::Start { program, source } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(program, "/nonexistent/custodian-transport");
    assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
    // The program and the OS error, nothing else (no arguments).
    assert!(!err.to_string().contains("-T"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_transport_fails_pending_and_later_calls() {
    let (client, transport) =
        WireClient::spawn_node("/bin/sleep", ["300"], 1 << 20).expect("start sleep");
    let id = RequestId::new("r").unwrap();
    let pending = {
        let client = client.clone();
        let id = id.clone();
        tokio::spawn(async move { client.open_workspace(&id).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(transport.try_status().is_none(), "still running");
    transport.kill();
    let status = tokio::time::timeout(Duration::from_secs(10), transport.wait())
        .await
        .expect("exits")
        .unwrap();
    assert_eq!(status.signal(), Some(9));
    let answer = tokio::time::timeout(Duration::from_secs(10), pending)
        .await
        .expect("the pending call ends")
        .unwrap();
    assert!(matches!(answer, Err(WireError::Disconnected)), "{answer:?}");
    assert!(matches!(
        client.cleanup_workspace(&id).await,
        Err(WireError::Disconnected)
    ));
    assert_eq!(
        transport.try_status().unwrap().unwrap().signal(),
        Some(9),
        "the status stays"
    );
}

/// Regression: a transport command that exits while a descendant holds
/// its stdout open (an ssh multiplexing master, a container shim) must not
/// leave the edge waiting for an answer forever: the exit closes the
/// client after `EXIT_GRACE`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transport_that_exits_while_its_stdout_stays_open_still_disconnects() {
    let dir = tempfile::tempdir().unwrap();
    let holder = dir.path().join("holder.pid");
    let script = format!(
        "sleep 300 & echo $! > {}.tmp && mv {0}.tmp {0}; exit 3",
        holder.display()
    );
    let (client, transport) =
        WireClient::spawn_node("/bin/sh", ["-c", &script], 1 << 20).expect("start sh");
    let id = RequestId::new("r").unwrap();
    let answer = tokio::time::timeout(
        EXIT_GRACE + Duration::from_secs(20),
        client.open_workspace(&id),
    )
    .await;
    let status = transport.wait().await.unwrap();
    let holder_pid: i32 = std::fs::read_to_string(&holder)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(holder_pid).unwrap(),
        rustix::process::Signal::KILL,
    );
    assert_eq!(status.code(), Some(3));
    let answer = answer.expect("the call ended although the pipe stayed open");
    assert!(matches!(answer, Err(WireError::Disconnected)), "{answer:?}");
}

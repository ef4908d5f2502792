//! `custodian node` as a command: its exit codes, its error text, its logs
//! and its one-line JSON output.

use std::io::Write;
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_custodian");

/// Runs `custodian node` with `stdin` as its whole input and `env` added to
/// an environment without either log variable.
fn node(args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("node")
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("CUSTODIAN_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

const OPEN: &[u8] = b"{\"v\":1,\"seq\":1,\"op\":\"open_workspace\",\"request_id\":\"r1\"}\n";

#[test]
#[ignore = "deletes: run by guarded::cli_in_a_private_mount_namespace"]
fn a_missing_workspace_exits_1_with_each_cause_printed_once() {
    let out = node(&["--workspace", "/nonexistent-custodian-node-ws"], b"", &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("custodian node: opening workspace "),
        "{err}"
    );
    // The io::Error's text, once: neither the library's message (which
    // ends with it) nor the chain may repeat it.
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
    assert_eq!(err.matches("(os error 2)").count(), 1, "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
#[ignore = "deletes: run by guarded::cli_in_a_private_mount_namespace"]
fn invalid_arguments_exit_1_and_unparsable_ones_2() {
    let ws = crate::sandbox::tempdir();
    let ws = ws.path().to_str().unwrap();
    let out = node(&["--workspace", ws, "--max-frame", "10"], b"", &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let out = node(&["--workspace", ws, "--process-timeout", "soon"], b"", &[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[test]
#[ignore = "deletes: run by guarded::cli_in_a_private_mount_namespace"]
fn every_response_is_one_compact_json_line() {
    let ws = crate::sandbox::tempdir();
    let input = [
        OPEN,
        b"not json\n",
        b"{\"v\":1,\"seq\":3,\"op\":\"cleanup_workspace\",\"request_id\":\"r1\"}\n",
    ]
    .concat();
    let out = node(&["--workspace", ws.path().to_str().unwrap()], &input, &[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    for line in lines {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        // Compact: no byte beyond what the value needs (keys may be in
        // another order).
        assert_eq!(line.len(), value.to_string().len(), "not compact: {line}");
    }
}

#[test]
#[ignore = "deletes: run by guarded::cli_in_a_private_mount_namespace"]
fn rust_log_sets_the_log_filter_and_custodian_log_overrides_it() {
    let ws = crate::sandbox::tempdir();
    let ws = ws.path().to_str().unwrap();
    // The request is still open when stdin closes: the node cleans it up
    // and logs that at info.
    let logged = |env: &[(&str, &str)]| {
        let out = node(&["--workspace", ws], OPEN, env);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(
            !err.contains('\x1b'),
            "colour codes in a non-terminal log: {err}"
        );
        err.contains("cleaned at shutdown")
    };
    assert!(!logged(&[]), "the default filter is warn");
    assert!(logged(&[("RUST_LOG", "info")]));
    assert!(logged(&[("CUSTODIAN_LOG", "info")]));
    assert!(!logged(&[("RUST_LOG", "info"), ("CUSTODIAN_LOG", "warn")]));
}

#[test]
#[ignore = "deletes: run by guarded::cli_in_a_private_mount_namespace"]
fn help_states_the_output_and_every_exit_code() {
    let out = Command::new(BIN).args(["node", "--help"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("JSON by default"), "{help}");
    for code in [
        "0  served",
        "1  the node could not start",
        "2  the command line",
    ] {
        assert!(help.contains(code), "{code:?} missing from:\n{help}");
    }
}

#[test]
#[ignore = "deletes: run by guarded::cli_in_a_private_mount_namespace"]
fn an_existing_socket_path_is_never_replaced() {
    let dir = crate::sandbox::tempdir();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let taken = dir.path().join("node.sock");
    std::fs::write(&taken, b"someone's file").unwrap();
    let out = node(
        &[
            "--workspace",
            ws.to_str().unwrap(),
            "--socket",
            taken.to_str().unwrap(),
        ],
        b"",
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("already exists; refusing to replace it"),
        "{err}"
    );
    assert_eq!(std::fs::read(&taken).unwrap(), b"someone's file");
}

/// Reads a node's first answer: its `open_workspace` succeeded.
fn assert_opened(node: &mut std::process::Child) {
    let mut line = String::new();
    let stdout = node.stdout.as_mut().unwrap();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
    assert!(line.contains("workspace_opened"), "{line}");
}

/// One owner per workspace: a second node is refused (exit 1) while the
/// first serves, or waits (`--lock-wait`) and serves once the first has
/// exited — never reclaiming the live node's requests.
#[test]
#[ignore = "deletes: run by guarded::cli_in_a_private_mount_namespace"]
fn a_second_node_waits_for_the_first_or_is_refused() {
    let ws = crate::sandbox::tempdir();
    let ws = ws.path().to_str().unwrap();
    let spawn = |extra: &[&str]| {
        Command::new(BIN)
            .args(["node", "--workspace", ws])
            .args(extra)
            .env_remove("RUST_LOG")
            .env_remove("CUSTODIAN_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut first = spawn(&[]);
    let mut first_in = first.stdin.take().unwrap();
    first_in.write_all(OPEN).unwrap();
    assert_opened(&mut first);

    let refused = node(&["--workspace", ws, "--lock-wait", "0s"], OPEN, &[]);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let err = String::from_utf8(refused.stderr).unwrap();
    assert!(err.contains("held open by another owner"), "{err}");
    assert!(refused.stdout.is_empty(), "the refused node answered");
    assert!(
        std::path::Path::new(ws).join(".custodian/job/r1").is_dir(),
        "the live node's job was touched"
    );

    let mut second = spawn(&["--lock-wait", "20s"]);
    let mut second_in = second.stdin.take().unwrap();
    second_in
        .write_all(b"{\"v\":1,\"seq\":1,\"op\":\"open_workspace\",\"request_id\":\"r2\"}\n")
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        second.try_wait().unwrap().is_none(),
        "the second node gave up"
    );
    drop(first_in);
    assert!(first.wait().unwrap().success());
    assert_opened(&mut second);
    drop(second_in);
    assert!(second.wait().unwrap().success());
}

/// An edge that opens a request and closes stdin at once: the node answers
/// the open — `workspace_opened`, or `request_closed` when the shutdown's
/// cleanup fenced it while it ran (the contract's *Liveness*) — cleans the
/// job up before it exits 0, and writes nothing else.
#[test]
#[ignore = "deletes: run by guarded::cli_in_a_private_mount_namespace"]
fn an_open_followed_by_the_end_of_input_is_answered_and_its_job_cleaned() {
    for _ in 0..20 {
        let ws = crate::sandbox::tempdir();
        let out = node(&["--workspace", ws.path().to_str().unwrap()], OPEN, &[]);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{text}");
        let answer: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(answer["seq"], 1, "{answer}");
        let opened = answer["result"] == "workspace_opened";
        let closed = answer["result"] == "error" && answer["code"] == "request_closed";
        assert!(opened || closed, "{answer}");
        assert!(
            !ws.path().join(".custodian/job/r1").exists(),
            "the job outlived the node"
        );
    }
}

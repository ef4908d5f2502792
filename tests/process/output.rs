//! Capture end to end: floods, invalid UTF-8, environment isolation.

use std::time::Duration;

use custodian::process::evidence::ProcessStatus;
use custodian::process::run;

use crate::common::*;

#[test]
fn one_gib_flood_through_a_small_budget_keeps_memory_bounded() {
    // Peak RSS is per process: measure it in a process of its own that
    // does nothing but the flood (this test binary, re-run on one test).
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "output::flood_in_own_process",
            "--ignored",
            "--nocapture",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("1 passed"), "{text}");
}

#[tokio::test]
#[ignore = "run in its own process by one_gib_flood_through_a_small_budget_keeps_memory_bounded"]
async fn flood_in_own_process() {
    let i = custodian::process::Invocation::validate(
        spec("head", &["-c", "1073741824", "/dev/zero"])
            .with_timeout(Duration::from_secs(60))
            .with_budget(budget(64 * 1024, 1024)),
    )
    .unwrap();
    let ev = run(i, &opts()).await.unwrap();
    let peak = vm_hwm();
    println!("flood peak RSS: {peak} bytes");
    assert_eq!(ev.status, ProcessStatus::Exited);
    assert_eq!(ev.stdout.bytes_read, 1 << 30);
    assert!(ev.stdout.truncated);
    assert!(ev.stdout.bytes_kept <= 64 * 1024);
    assert!(ev.stdout.bytes_omitted >= (1 << 30) - 64 * 1024);
    // Holding the flood would take 1 GiB; the whole test process (runtime,
    // test harness, capture buffers) stays far below that.
    assert!(peak < 32 << 20, "peak RSS {peak} bytes");
}

#[tokio::test]
async fn invalid_utf8_is_replaced_and_counted_end_to_end() {
    let ev = run(
        inv("printf", &["a\\377b\\303"], Duration::from_secs(5)),
        &opts(),
    )
    .await
    .unwrap();
    assert_eq!(ev.stdout.text, "a\u{FFFD}b\u{FFFD}");
    assert_eq!(ev.stdout.invalid_utf8_sequences, 2);
    assert!(serde_json::from_str::<serde_json::Value>(&ev.to_json()).is_ok());
}

#[test]
fn the_parent_environment_does_not_leak_into_the_child() {
    // End to end through the CLI: the variable is really in the parent's
    // environment (set without unsafe, on the CLI process).
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_custodian"))
        .args(["run", "--timeout", "5s", "--", "env"])
        .env("CUSTODIAN_LEAK_CANARY_7F3A", "leaked-value-91c2")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let ev: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let child_env = ev["stdout"]["text"].as_str().unwrap();
    assert!(
        child_env.contains("PATH="),
        "baseline PATH missing: {child_env}"
    );
    assert!(!child_env.contains("CUSTODIAN_LEAK_CANARY_7F3A"));
    assert!(!child_env.contains("leaked-value-91c2"));
}

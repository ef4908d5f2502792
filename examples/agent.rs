//! An agent runtime embedding custodian: three concurrent requests, each
//! opening a workspace, writing an artifact, spilling a result and running
//! a governed process, then finishing three ways — success, timeout, and a
//! caller that goes away. At the end it checks that no process and no job
//! directory is left, and exits non-zero otherwise.
//!
//! Run with `cargo run --example agent`. Everything it creates lives in a
//! temporary directory of its own.

use std::time::Duration;

use custodian::prelude::*;

/// What each request's tool runs.
fn tool(program: &str, args: &[&str]) -> Invocation {
    Invocation::validate(InvocationSpec::new(program).with_args(args.iter().copied()))
        .expect("a valid invocation")
}

/// The executor: what an agent's tool call does inside its request.
async fn work(executor: Executor, invocation: Invocation) -> Result<(), RuntimeError> {
    executor.open_workspace().await?;
    executor
        .write_artifact("input/prompt.txt", b"summarize the repo")
        .await?;
    let spilled = executor.spill(vec![b'x'; 64 * 1024]).await?;
    assert_eq!(executor.read_spill(&spilled).await?.len(), 64 * 1024);
    let evidence = executor.run(invocation).await?;
    if evidence.exit_code == Some(0) {
        executor
            .write_artifact("output/result.json", evidence.stdout.text.as_bytes())
            .await?;
        executor.succeed();
    }
    Ok(()) // else the request ended (timeout, disconnect) and stopped it
}

/// The live processes of process group `pgid` (Linux `/proc`).
fn group_alive(pgid: u32) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten().any(|e| {
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        fields.len() > 2 && fields[2] == pgid.to_string() && !matches!(fields[0], "Z" | "X")
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let scratch = tempfile::tempdir()?;
    let root = scratch.path().join("workspace");
    std::fs::create_dir(&root)?;
    let spill = SpillConfig::default().with_root(scratch.path().join("spill"));
    let runtime = Runtime::open(RuntimeConfig::new(&root).with_spill(spill))?;

    // 1. Succeeds.
    let ok = runtime.start(RequestId::new("req-ok")?)?;
    let ok_task = tokio::spawn(work(ok.executor(), tool("echo", &["done"])));

    // 2. Outlives its own one-second limit.
    let short = RequestLimits::new().with_request_timeout(Duration::from_secs(1));
    let slow = runtime.start_with(RequestId::new("req-timeout")?, short)?;
    let slow_task = tokio::spawn(work(slow.executor(), tool("sleep", &["60"])));

    // 3. Its caller goes away while the executor still runs.
    let gone = runtime.start(RequestId::new("req-gone")?)?;
    let gone_executor = gone.executor();
    let gone_observer = gone_executor.observer();
    let gone_task = tokio::spawn(work(gone_executor.clone(), tool("sleep", &["60"])));
    while gone_executor.job().is_none() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(gone);

    let completions = [
        ok.finished().await,
        slow.finished().await,
        gone_observer.finished().await,
    ];
    for task in [ok_task, slow_task, gone_task] {
        task.await??;
    }

    let mut failures = Vec::new();
    let expected = [
        RequestStatus::Succeeded,
        RequestStatus::TimedOut,
        RequestStatus::Cancelled,
    ];
    for (c, want) in completions.iter().zip(expected) {
        let cleanup = c.cleanup.as_ref();
        println!(
            "{}: {:?}, delivery {:?}, cleanup {:?} ({} files removed), processes {:?}",
            c.request_id,
            c.result.status(),
            c.delivery,
            cleanup.map(|r| r.status),
            cleanup.map_or(0, |r| r.counts.files_removed),
            c.processes.iter().map(|p| p.status).collect::<Vec<_>>(),
        );
        if c.result.status() != want || !cleanup.is_some_and(CleanupResult::is_clean) {
            failures.push(format!(
                "{}: not {want:?} with a clean cleanup",
                c.request_id
            ));
        }
        for p in &c.processes {
            if group_alive(p.pid) {
                failures.push(format!(
                    "{}: process group {} is still alive",
                    c.request_id, p.pid
                ));
            }
        }
    }
    for c in &completions {
        if runtime.job_dir(&c.request_id).exists() {
            failures.push(format!("{}: its job directory is left", c.request_id));
        }
    }
    if !runtime.running().is_empty() {
        failures.push(format!("requests still running: {:?}", runtime.running()));
    }
    runtime.shutdown().await;
    if failures.is_empty() {
        println!("ok: no process and no job directory left");
        Ok(())
    } else {
        eprintln!("FAILED: {failures:#?}");
        std::process::exit(1);
    }
}

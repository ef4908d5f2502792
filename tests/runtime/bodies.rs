//! The runtime's bodies, run in a private mount namespace by
//! `runtime_bodies_in_a_private_mount_namespace`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use custodian::prelude::*;
use custodian::process::env::{AsyncSecretResolver, SecretError, SecretFuture, SecretValue};
use custodian::process::invocation::{EnvValue, SecretRef};

use crate::sandbox;

mod embedding;
mod sessions;

/// Waits at most this long for a completion: a request that only ends at
/// its (far longer) timeout fails the test instead of passing late.
const PROMPTLY: Duration = Duration::from_secs(20);

struct Fixture {
    _dir: tempfile::TempDir,
    runtime: Runtime,
}

fn scratch() -> PathBuf {
    let keep = custodian::contain::Hierarchy::discover()
        .ok()
        .map(|h| h.mount);
    sandbox::scratch_keeping(keep.as_deref())
}

fn fixture(limits: RequestLimits) -> Fixture {
    let dir = tempfile::tempdir_in(scratch()).unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let config = RuntimeConfig::new(&root)
        .with_limits(limits)
        .with_spill(spill_in(dir.path()));
    let runtime = Runtime::open(config).unwrap();
    Fixture { _dir: dir, runtime }
}

/// A spill store in `dir/spill`.
fn spill_in(dir: &Path) -> SpillConfig {
    SpillConfig::default().with_root(dir.join("spill"))
}

fn limits(timeout: Duration) -> RequestLimits {
    RequestLimits::new().with_request_timeout(timeout)
}

fn inv(program: &str, args: &[&str]) -> Invocation {
    Invocation::validate(InvocationSpec::new(program).with_args(args.iter().copied())).unwrap()
}

fn job_dir(runtime: &Runtime, id: &str) -> PathBuf {
    runtime.job_dir(&RequestId::new(id).unwrap())
}

/// The live (not zombie) members of process group `pgid`.
fn group_members(pgid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            continue;
        };
        let f: Vec<&str> = rest.split(' ').collect();
        if f.len() > 2 && f[2] == pgid.to_string() && !matches!(f[0], "Z" | "X") {
            out.push(pid);
        }
    }
    out
}

async fn finished(observer: &custodian::request::RequestObserver) -> Completion {
    tokio::time::timeout(PROMPTLY, observer.finished())
        .await
        .expect("the request completed promptly")
}

/// The case: an executor that holds its handle used to hide the
/// caller going away until the request's timeout.
#[tokio::test]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn dropping_every_caller_handle_is_a_disconnect_whatever_the_executor_holds() {
    let fx = fixture(limits(Duration::from_secs(600)));
    let request = fx.runtime.start(RequestId::new("gone-1").unwrap()).unwrap();
    let caller_clone = request.clone();
    let executor = request.executor();
    let observer = executor.observer();
    executor.open_workspace().await.unwrap();
    executor
        .write_artifact("partial.txt", b"half")
        .await
        .unwrap();
    let running = executor.launch(inv("sleep", &["30"])).await.unwrap();
    assert!(job_dir(&fx.runtime, "gone-1").join("partial.txt").is_file());

    drop(request);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        observer.try_finished().is_none(),
        "one caller handle remains"
    );
    drop(caller_clone);

    let c = finished(&observer).await;
    assert_eq!(c.result.status(), RequestStatus::Cancelled);
    assert_eq!(c.delivery, Delivery::CallerGone);
    let cleanup = c.cleanup.expect("the cleanup ran and is reported");
    assert_eq!(cleanup.status, CleanupStatus::Cleaned);
    assert_eq!(cleanup.counts.files_removed, 1);
    assert_eq!(c.processes.len(), 1);
    assert_eq!(c.processes[0].pid, running.pid());
    assert_eq!(c.processes[0].status, Some(ProcessStatus::Cancelled));
    assert!(!job_dir(&fx.runtime, "gone-1").exists());
    assert!(executor.is_cancelled());
    // Still held, the executor can start nothing more.
    assert!(matches!(
        executor.launch(inv("true", &[])).await,
        Err(RuntimeError::Finalizing { .. })
    ));
    assert!(fx.runtime.running().is_empty());
}

#[tokio::test]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn the_request_timeout_stops_its_process_and_cleans_up() {
    let fx = fixture(limits(Duration::from_millis(400)));
    let request = fx.runtime.start(RequestId::new("slow-1").unwrap()).unwrap();
    let executor = request.executor();
    executor.open_workspace().await.unwrap();
    let evidence = executor.run(inv("sleep", &["30"])).await.unwrap();
    // The run returned because the timeout stopped the process.
    assert_eq!(evidence.status, ProcessStatus::Cancelled);
    let c = tokio::time::timeout(PROMPTLY, request.finished())
        .await
        .unwrap();
    assert_eq!(c.result.status(), RequestStatus::TimedOut);
    assert_eq!(c.delivery, Delivery::Acknowledged);
    assert!(c.cleanup.unwrap().is_clean());
    assert_eq!(c.processes[0].status, Some(ProcessStatus::Cancelled));
    assert!(!job_dir(&fx.runtime, "slow-1").exists());
}

/// The facade commits the workspace announcement, then opens the job; a
/// cleanup of the id that runs in between (a cancel's) used to find
/// nothing, report the id gone, and let the open create a job directory
/// nobody cleaned. The workspace now refuses the id once its cleanup
/// started, and the executor answers `Finalizing`, creating nothing. Here
/// the id's cleanup (the call the request's own cleanup makes) runs before
/// the executor's open.
#[tokio::test]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn an_open_after_the_ids_cleanup_started_is_finalizing_and_creates_nothing() {
    let fx = fixture(limits(Duration::from_secs(600)));
    let request = fx
        .runtime
        .start(RequestId::new("late-open").unwrap())
        .unwrap();
    let executor = request.executor();
    let early = fx
        .runtime
        .workspace()
        .unwrap()
        .cleanup("late-open")
        .await
        .unwrap();
    assert_eq!(early.status, CleanupStatus::AlreadyGone);
    let refused = executor.open_workspace().await;
    assert!(
        matches!(refused, Err(RuntimeError::Finalizing { .. })),
        "{refused:?}"
    );
    assert!(executor.job().is_none());
    assert!(!job_dir(&fx.runtime, "late-open").exists());
    request.cancel();
    let c = tokio::time::timeout(PROMPTLY, request.finished())
        .await
        .unwrap();
    assert_eq!(c.result.status(), RequestStatus::Cancelled);
    assert_eq!(
        c.cleanup.expect("announced: cleaned").status,
        CleanupStatus::AlreadyGone
    );
    assert!(!job_dir(&fx.runtime, "late-open").exists());
    assert!(fx.runtime.workspace().unwrap().active_requests().is_empty());
}

#[tokio::test]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn a_caller_cancel_kills_the_whole_process_group() {
    let fx = fixture(limits(Duration::from_secs(600)));
    let request = fx
        .runtime
        .start(RequestId::new("cancel-1").unwrap())
        .unwrap();
    let executor = request.executor();
    executor.open_workspace().await.unwrap();
    // The root waits on two children of its own group.
    let running = executor
        .launch(inv("sh", &["-c", "sleep 30 & sleep 30 & wait"]))
        .await
        .unwrap();
    let pgid = running.pgid();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while group_members(pgid).len() < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the children never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    request.cancel();
    let c = tokio::time::timeout(PROMPTLY, request.finished())
        .await
        .unwrap();
    assert_eq!(c.result.status(), RequestStatus::Cancelled);
    assert_eq!(c.processes[0].status, Some(ProcessStatus::Cancelled));
    assert_eq!(
        group_members(pgid),
        Vec::<u32>::new(),
        "group {pgid} survived"
    );
    assert!(c.cleanup.unwrap().is_clean());
}

#[tokio::test]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn the_completion_carries_the_cleanup_counts_and_every_verdict() {
    let fx = fixture(limits(Duration::from_secs(600)));
    let request = fx.runtime.start(RequestId::new("full-1").unwrap()).unwrap();
    let executor = request.executor();
    executor.open_workspace().await.unwrap();
    for name in ["a.txt", "out/b.txt", "out/c.txt"] {
        executor.write_artifact(name, b"x").await.unwrap();
    }
    let ok = executor.run(inv("true", &[])).await.unwrap();
    let three = executor.run(inv("sh", &["-c", "exit 3"])).await.unwrap();
    let locator = executor.spill(b"a large result".to_vec()).await.unwrap();
    assert_eq!(
        executor.read_spill(&locator).await.unwrap(),
        b"a large result"
    );
    executor.succeed();
    let c = tokio::time::timeout(PROMPTLY, request.finished())
        .await
        .unwrap();
    assert_eq!(c.result.status(), RequestStatus::Succeeded);
    let cleanup = c.cleanup.clone().unwrap();
    assert_eq!(cleanup.status, CleanupStatus::Cleaned);
    assert_eq!(cleanup.code, None);
    // The job directory, `out`, and three files.
    assert_eq!(cleanup.counts.registered, 5);
    assert_eq!(cleanup.counts.files_removed, 3);
    assert_eq!(cleanup.counts.dirs_removed, 2);
    assert_eq!(cleanup.counts.processes_unsettled, 0);
    let exits: Vec<_> = c
        .processes
        .iter()
        .map(|p| (p.status, p.exit_code))
        .collect();
    assert_eq!(
        exits,
        [
            (Some(ProcessStatus::Exited), Some(0)),
            (Some(ProcessStatus::Exited), Some(3))
        ]
    );
    assert_eq!(ok.exit_code, Some(0));
    assert_eq!(three.exit_code, Some(3));
    let json = serde_json::to_string(&c).unwrap();
    assert!(json.contains("\"files_removed\":3"), "{json}");
    // Spills outlive the request; the job does not.
    assert!(fx.runtime.read_spill(&locator).await.is_ok());
    assert!(!job_dir(&fx.runtime, "full-1").exists());
}

/// A secret store that answers only after yielding to the runtime.
struct SlowStore;

impl AsyncSecretResolver for SlowStore {
    fn resolve<'a>(&'a self, reference: &'a SecretRef) -> SecretFuture<'a> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            match reference.as_str() {
                "vault:token" => Ok(SecretValue::new("s3cr3t-value")),
                _ => Err(SecretError::Denied),
            }
        })
    }
}

#[tokio::test]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn secrets_are_resolved_asynchronously_and_never_shown() {
    let dir = tempfile::tempdir_in(scratch()).unwrap();
    let runtime =
        Runtime::open(RuntimeConfig::new(dir.path()).with_secrets(Arc::new(SlowStore))).unwrap();
    let request = runtime.start(RequestId::new("secret-1").unwrap()).unwrap();
    let executor = request.executor();
    let with_secret = |r: &str| {
        Invocation::validate(
            InvocationSpec::new("sh")
                .with_args(["-c", "printf %s \"$TOKEN\""])
                .with_env("TOKEN", EnvValue::Secret(SecretRef::new(r))),
        )
        .unwrap()
    };
    let ev = executor.run(with_secret("vault:token")).await.unwrap();
    assert_eq!(ev.exit_code, Some(0));
    // The child got the value; the evidence shows only the marker.
    assert_eq!(ev.stdout.text, "[REDACTED]");
    assert!(!ev.to_json().contains("s3cr3t"));
    match executor.run(with_secret("vault:other")).await {
        Err(RuntimeError::Env(e)) => assert!(!e.to_string().contains("TOKEN"), "{e}"),
        other => panic!("{other:?}"),
    }
    executor.succeed();
    let c = request.finished().await;
    assert_eq!(c.processes.len(), 1, "the refused launch started nothing");
}

#[tokio::test]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn a_request_id_runs_once_at_a_time_and_limits_are_per_request() {
    let fx = fixture(limits(Duration::from_secs(600)));
    let id = RequestId::new("dup-1").unwrap();
    let first = fx.runtime.start(id.clone()).unwrap();
    assert!(matches!(
        fx.runtime.start(id.clone()),
        Err(RuntimeError::AlreadyRunning { .. })
    ));
    // Another request with a short limit of its own times out; the first,
    // under the runtime's default, does not.
    let short = fx
        .runtime
        .start_with(
            RequestId::new("short-1").unwrap(),
            limits(Duration::from_millis(200)),
        )
        .unwrap();
    let c = tokio::time::timeout(PROMPTLY, short.finished())
        .await
        .unwrap();
    assert_eq!(c.result.status(), RequestStatus::TimedOut);
    assert!(first.try_finished().is_none());
    first.executor().succeed();
    assert_eq!(
        first.finished().await.result.status(),
        RequestStatus::Succeeded
    );
}

#[test]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
fn the_request_span_holds_the_process_spans_and_the_lifecycle_events() {
    let (recorder, seen) = crate::tracing_events::Recorder::new();
    let dir = tempfile::tempdir_in(scratch()).unwrap();
    tracing::subscriber::with_default(recorder, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let runtime = Runtime::open(RuntimeConfig::new(dir.path())).unwrap();
            let request = runtime.start(RequestId::new("traced-1").unwrap()).unwrap();
            let executor = request.executor();
            executor.open_workspace().await.unwrap();
            let inv = Invocation::validate(InvocationSpec::new("true").with_env(
                "API_KEY_NAME",
                EnvValue::Literal("literal-env-value".into()),
            ))
            .unwrap();
            executor.run(inv).await.unwrap();
            executor.succeed();
            request.finished().await;
            // The settle event is logged by its own task: let it run.
            for _ in 0..100 {
                tokio::task::yield_now().await;
            }
        });
    });
    let seen = seen.lock().unwrap();
    let request_span = seen
        .spans
        .iter()
        .find(|s| s.1 == "request")
        .expect("a request span")
        .0;
    let process = seen
        .spans
        .iter()
        .find(|s| s.1 == "process")
        .expect("a process span");
    assert_eq!(
        process.2,
        Some(request_span),
        "the process span nests in the request's"
    );
    let in_span = |span: &str, message: &str| {
        seen.events
            .iter()
            .any(|e| e.0 == Some(span) && e.1.contains(message))
    };
    assert!(in_span("process", "launched"));
    assert!(in_span("process", "settled"));
    assert!(in_span("request", "cleanup started"));
    assert!(in_span("request", "cleanup finished"));
    let fields = seen
        .events
        .iter()
        .map(|e| e.2.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(fields.contains("files_removed"), "{fields}");
    assert!(!fields.contains("API_KEY_NAME"), "{fields}");
    assert!(!fields.contains("literal-env-value"), "{fields}");
}

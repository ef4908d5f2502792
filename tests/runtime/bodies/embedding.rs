//! What an embedder relies on from the facade's documentation alone.

use std::time::Duration;

use custodian::confine::Confinement;
use custodian::prelude::*;
use custodian::workspace::WorkspaceError;

use super::{inv, scratch, spill_in};

/// `Runtime::open` right after `shutdown().await` used to fail `Locked`
/// (here 12 of the 20 rounds that drop every handle first, all 20 that keep
/// them): the workspace's lock lived as long as any clone of the workspace,
/// and each request's coordinator task holds one until the last handle of
/// its request is gone and the task has run once more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn a_runtime_opens_again_as_soon_as_shutdown_returned() {
    let dir = tempfile::tempdir_in(scratch()).unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let config = || RuntimeConfig::new(&root).with_spill(spill_in(dir.path()));
    let (mut dropped, mut held) = (0, 0);
    let mut runtime = Runtime::open(config()).unwrap();
    for i in 0..40 {
        let request = runtime
            .start(RequestId::new(&format!("again-{i}")).unwrap())
            .unwrap();
        let executor = request.executor();
        executor.open_workspace().await.unwrap();
        executor.write_artifact("a.txt", b"x").await.unwrap();
        executor.run(inv("true", &[])).await.unwrap();
        executor.succeed();
        let c = tokio::time::timeout(Duration::from_secs(20), request.finished())
            .await
            .unwrap();
        assert!(c.cleanup.unwrap().is_clean());
        runtime.shutdown().await;
        // Even rounds let go of every handle first; odd ones keep them all.
        let mut kept = Some((request, executor, runtime));
        if i % 2 == 0 {
            kept = None;
        }
        runtime = match Runtime::open(config()) {
            Ok(again) => again,
            Err(RuntimeError::Workspace(WorkspaceError::Locked)) => {
                *if kept.is_none() {
                    &mut dropped
                } else {
                    &mut held
                } += 1;
                drop(kept.take());
                // Let the previous owner go before the next round.
                tokio::time::sleep(Duration::from_millis(200)).await;
                Runtime::open(config()).unwrap()
            }
            Err(e) => panic!("{e}"),
        };
        if let Some((old_request, old_executor, _old)) = kept {
            // The old handles refuse to touch the namespace.
            assert!(old_request.try_finished().is_some());
            assert!(matches!(
                old_executor.write_artifact("late.txt", b"x").await,
                Err(RuntimeError::Workspace(_))
            ));
        }
    }
    runtime.shutdown().await;
    assert_eq!(
        (dropped, held),
        (0, 0),
        "opens right after shutdown refused as locked (of 20 each: handles dropped, handles held)"
    );
}

/// Where artifacts land used to be known only from the layout
/// (`.custodian/job/<id>`, whatever the internal name): the accessor names
/// it, for the configured root and internal name.
#[tokio::test]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn the_job_directory_accessor_names_where_the_artifacts_land() {
    let dir = tempfile::tempdir_in(scratch()).unwrap();
    let config = RuntimeConfig::new(dir.path())
        .with_workspace(WorkspaceConfig::default().with_internal_name("_agent"));
    let runtime = Runtime::open(config).unwrap();
    let id = RequestId::new("where-1").unwrap();
    let request = runtime.start(id.clone()).unwrap();
    let executor = request.executor();
    assert_eq!(executor.job_dir(), None, "nothing is open yet");
    executor.open_workspace().await.unwrap();
    executor
        .write_artifact("out/deep/result.json", b"{\"ok\":true}")
        .await
        .unwrap();
    let job_dir = executor.job_dir().unwrap();
    assert_eq!(job_dir, runtime.job_dir(&id));
    assert_eq!(job_dir, dir.path().join("_agent/job/where-1"));
    assert_eq!(
        std::fs::read(job_dir.join("out/deep/result.json")).unwrap(),
        b"{\"ok\":true}"
    );
    // An unconfined process reads it where the accessor says.
    let cat = inv(
        "cat",
        &[job_dir.join("out/deep/result.json").to_str().unwrap()],
    );
    assert_eq!(
        executor.run(cat).await.unwrap().stdout.text,
        "{\"ok\":true}"
    );
    executor.succeed();
    assert!(request.finished().await.cleanup.unwrap().is_clean());
    assert!(
        !job_dir.exists(),
        "the accessor named the directory cleaned"
    );
    runtime.shutdown().await;
}

/// Runs `sh -c script` through `executor` under `confinement` (`None`: the
/// runtime's default); `None` back, with the reason printed, where this
/// host cannot confine.
async fn confined_sh(
    executor: &Executor,
    script: &str,
    confinement: Option<Confinement>,
) -> Option<std::sync::Arc<Evidence>> {
    use custodian::confine::ConfineError;
    let mut spec = InvocationSpec::new("sh").with_args(["-c", script]);
    if let Some(c) = confinement {
        spec = spec.with_confinement(c);
    }
    match executor.run(Invocation::validate(spec).unwrap()).await {
        Ok(ev) => Some(ev),
        Err(RuntimeError::Process(custodian::process::ProcessError::Confinement(
            e @ (ConfineError::SpawnerUnavailable { .. }
            | ConfineError::IsolationUnavailable { .. }
            | ConfineError::Unsupported(_)),
        ))) => {
            skipped!("this host cannot confine ({e})");
            None
        }
        Err(e) => panic!("launch failed: {e}"),
    }
}

/// Confinement used to be settable per invocation only. The runtime's
/// default confines every process that names none; one that names its own,
/// `none` included, runs under that instead.
#[tokio::test]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn the_runtime_default_confinement_applies_unless_the_invocation_names_one() {
    use custodian::confine::FsMode;
    if custodian::confine::landlock_abi() == 0 {
        skipped!("the kernel has no Landlock");
        return;
    }
    let dir = tempfile::tempdir_in(scratch()).unwrap();
    let root = dir.path().join("ws");
    let outside = dir.path().join("outside");
    std::fs::create_dir(&root).unwrap();
    std::fs::create_dir(&outside).unwrap();
    let config = RuntimeConfig::new(&root).with_confinement(Confinement::workspace_write());
    let runtime = Runtime::open(config).unwrap();
    let request = runtime
        .start(RequestId::new("confined-1").unwrap())
        .unwrap();
    let executor = request.executor();
    executor.open_workspace().await.unwrap();
    let write = |name: &str| {
        format!(
            "echo x > '{}' || echo refused; echo y > {name}.txt && echo inside",
            outside.join(name).display()
        )
    };

    // Unset: the runtime's default, so nothing outside the workspace.
    let Some(ev) = confined_sh(&executor, &write("by-default"), None).await else {
        return;
    };
    assert_eq!(ev.stdout.text, "refused\ninside\n", "{ev:?}");
    assert!(!outside.join("by-default").exists());
    assert!(root.join("by-default.txt").is_file());
    let report = ev.confinement.as_ref().expect("the evidence names it");
    assert_eq!(report.filesystem, FsMode::WorkspaceWrite);

    // Explicitly none: not confined, whatever the default.
    let ev = confined_sh(
        &executor,
        &write("explicit-none"),
        Some(Confinement::none()),
    )
    .await
    .unwrap();
    assert_eq!(ev.stdout.text, "inside\n", "{ev:?}");
    assert!(outside.join("explicit-none").is_file());
    assert!(ev.confinement.is_none(), "{ev:?}");

    // An invocation's own confinement replaces the default, stricter here.
    let ev = confined_sh(
        &executor,
        &write("read-only"),
        Some(Confinement::read_only()),
    )
    .await
    .unwrap();
    assert!(ev.stdout.text.starts_with("refused\n"), "{ev:?}");
    assert!(!ev.stdout.text.contains("inside"), "{ev:?}");
    assert!(!root.join("read-only.txt").exists());
    assert_eq!(
        ev.confinement.as_ref().unwrap().filesystem,
        FsMode::ReadOnly
    );

    executor.succeed();
    assert!(request.finished().await.cleanup.unwrap().is_clean());
    runtime.shutdown().await;

    // The policy decides on the confinement the process will run under:
    // the default satisfies a required one, an explicit none does not.
    let mut policy = custodian::policy::PolicyConfig::allow_executables(["sh"]).unwrap();
    policy.policy.require_confinement = Some(custodian::policy::ConfineLevel::WorkspaceWrite);
    let config = RuntimeConfig::new(&root)
        .with_confinement(Confinement::workspace_write())
        .with_policy(RunPolicy::new(policy));
    let runtime = Runtime::open(config).unwrap();
    let request = runtime
        .start(RequestId::new("confined-2").unwrap())
        .unwrap();
    let executor = request.executor();
    let ev = confined_sh(&executor, "echo ok", None).await.unwrap();
    assert_eq!(ev.stdout.text, "ok\n", "{ev:?}");
    let none = InvocationSpec::new("sh")
        .with_args(["-c", "echo ok"])
        .with_confinement(Confinement::none());
    match executor.run(Invocation::validate(none).unwrap()).await {
        Err(RuntimeError::Denied(d)) => assert_eq!(d.reason.code(), "confinement_required"),
        other => panic!("{other:?}"),
    }
    executor.succeed();
    request.finished().await;
    runtime.shutdown().await;
}

/// A runtime's network `allow` launches go through the proxy it was given
/// (here one that pins `allowed.test` and `denied.test` to loopback): the
/// allowed host is reached, the other refused, and the evidence says so.
#[tokio::test]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn a_runtime_serves_network_allow_through_its_own_proxy() {
    use std::net::{IpAddr, Ipv4Addr};
    if custodian::confine::landlock_abi() == 0 {
        skipped!("the kernel has no Landlock");
        return;
    }
    let port = crate::http::http_server("fetched");
    let dir = tempfile::tempdir_in(scratch()).unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let proxy = custodian::process::NetworkProxy::start(
        custodian::process::ProxyConfig::new()
            .with_host("allowed.test", loopback)
            .with_host("denied.test", loopback),
    )
    .unwrap();
    let config = RuntimeConfig::new(&root)
        .with_confinement(
            Confinement::workspace_write().with_allow_host(format!("allowed.test:{port}")),
        )
        .with_proxy(proxy);
    let runtime = Runtime::open(config).unwrap();
    let request = runtime.start(RequestId::new("allow-1").unwrap()).unwrap();
    let executor = request.executor();
    let script = format!(
        "curl -sS http://allowed.test:{port}/; echo; \
         curl -sS -o /dev/null -w 'denied=%{{http_code}}' http://denied.test:{port}/"
    );
    let Some(ev) = confined_sh(&executor, &script, None).await else {
        return;
    };
    assert_eq!(ev.stdout.text, "fetched\ndenied=403", "{ev:?}");
    let net = ev.network.as_ref().expect("the evidence's network");
    assert_eq!(
        (net.requests_allowed, net.requests_refused),
        (1, 1),
        "{net:?}"
    );
    assert_eq!(net.allowed[0].host, "allowed.test");
    assert_eq!(net.refused[0].host, "denied.test");
    executor.succeed();
    request.finished().await;
    runtime.shutdown().await;
}

/// A default confinement the launcher could never apply is refused when
/// the runtime opens, not at each launch.
#[tokio::test]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn an_invalid_default_confinement_is_refused_at_open() {
    let dir = tempfile::tempdir_in(scratch()).unwrap();
    let config = RuntimeConfig::new(dir.path())
        .with_confinement(Confinement::read_only().with_deny_read("relative/path"));
    assert!(matches!(
        Runtime::open(config),
        Err(RuntimeError::Confinement(_))
    ));
}

/// The completion's schema, `docs/schemas/completion.v1.json`.
fn completion_schema() -> jsonschema::Validator {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/schemas/completion.v1.json"
    ))
    .unwrap();
    jsonschema::validator_for(&serde_json::from_str(&text).unwrap()).unwrap()
}

/// A launch the run policy refused used to leave no trace in the
/// completion; now each is listed, by code, reason and rule only.
#[tokio::test]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn the_completion_lists_each_refused_launch_with_codes_only() {
    let dir = tempfile::tempdir_in(scratch()).unwrap();
    use custodian::policy::config::Rule;
    use custodian::policy::exposure::Selector;
    use custodian::policy::{Pattern, PolicyConfig, Verdict};
    // `true` allowed, `rm` denied by rule 1, anything else to approve.
    let mut config = PolicyConfig::allow_executables(["true"]).unwrap();
    config.policy.default_decision = Verdict::RequireApproval;
    config.policy.rules.push(Rule {
        tool: Selector::parse("process.run").unwrap(),
        decision: Verdict::Deny,
        target: Some(Pattern::parse(r#"{"executable":"rm",*"#).unwrap()),
        confinement: None,
        allow_hosts: Default::default(),
    });
    let policy = RunPolicy::new(config);
    let runtime = Runtime::open(RuntimeConfig::new(dir.path()).with_policy(policy)).unwrap();
    let request = runtime.start(RequestId::new("denied-1").unwrap()).unwrap();
    let executor = request.executor();
    executor.open_workspace().await.unwrap();
    executor.write_artifact("a.txt", b"x").await.unwrap();
    assert_eq!(
        executor.run(inv("true", &[])).await.unwrap().exit_code,
        Some(0)
    );
    assert!(matches!(
        executor.run(inv("rm", &["-rf", "argv-marker"])).await,
        Err(RuntimeError::Denied(_))
    ));
    let with_env = Invocation::validate(InvocationSpec::new("printenv").with_env(
        "ENV_KEY_MARKER",
        custodian::process::invocation::EnvValue::Literal("env-value-marker".into()),
    ))
    .unwrap();
    assert!(matches!(
        executor.run(with_env).await,
        Err(RuntimeError::ApprovalRequired(_))
    ));
    executor.succeed();
    let c = request.finished().await;
    assert_eq!(c.result.status(), RequestStatus::Succeeded);
    assert_eq!(c.processes.len(), 1, "the refused launches started nothing");
    let codes: Vec<_> = c
        .denied
        .iter()
        .map(|d| (d.code.as_str(), d.reason.as_str(), d.rule))
        .collect();
    assert_eq!(
        codes,
        [
            ("policy_denied", "denied_by_rule", Some(1)),
            ("approval_required", "default_decision", None),
        ]
    );
    let json = serde_json::to_value(&c).unwrap();
    let text = json.to_string();
    for marker in [
        "\"rm\"",
        "argv-marker",
        "printenv",
        "ENV_KEY_MARKER",
        "env-value-marker",
    ] {
        assert!(!text.contains(marker), "{marker} in {text}");
    }
    let validator = completion_schema();
    let errors: Vec<String> = validator
        .iter_errors(&json)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?}\n{text}");
    runtime.shutdown().await;
}

/// A successful cleanup is spelled one way in a completion: its merged
/// result used to say `succeeded` where its own detail said `cleaned`.
#[tokio::test]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn a_successful_cleanup_is_spelled_cleaned_throughout_the_completion() {
    let dir = tempfile::tempdir_in(scratch()).unwrap();
    let runtime = Runtime::open(RuntimeConfig::new(dir.path())).unwrap();
    let request = runtime.start(RequestId::new("spelled-1").unwrap()).unwrap();
    let executor = request.executor();
    executor.open_workspace().await.unwrap();
    executor.write_artifact("a.txt", b"x").await.unwrap();
    executor.succeed();
    let c = request.finished().await;
    assert_eq!(
        c.result.cleanup(),
        custodian::machine::request::CleanupReport::Cleaned
    );
    assert_eq!(c.cleanup.as_ref().unwrap().status, CleanupStatus::Cleaned);
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json["result"]["cleanup"]["status"], "cleaned", "{json}");
    assert_eq!(json["cleanup"]["status"], "cleaned", "{json}");
    // `succeeded` is the request's status, never a cleanup's.
    assert_eq!(json["result"]["status"], "succeeded", "{json}");
    assert_eq!(json.to_string().matches("succeeded").count(), 1, "{json}");
    let errors: Vec<String> = completion_schema()
        .iter_errors(&json)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?}\n{json}");
    runtime.shutdown().await;
}

/// A request's spills are part of what it owns: its completion lists each,
/// in order, and a spill once it completed is refused (before, the
/// completion named none, and a late spill was kept in a list nobody
/// read).
#[tokio::test]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn the_completion_lists_every_spill_and_a_later_spill_is_refused() {
    let dir = tempfile::tempdir_in(scratch()).unwrap();
    let runtime =
        Runtime::open(RuntimeConfig::new(dir.path()).with_spill(spill_in(dir.path()))).unwrap();
    let request = runtime.start(RequestId::new("spills-1").unwrap()).unwrap();
    let executor = request.executor();
    let first = executor.spill(b"first result".to_vec()).await.unwrap();
    let second = executor.spill(vec![b'x'; 100_000]).await.unwrap();
    assert_ne!(first, second);
    executor.succeed();
    let c = request.finished().await;
    assert_eq!(c.spills, [first.clone(), second.clone()]);
    assert_eq!(executor.spills(), c.spills);
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json["spills"][0], first.to_string(), "{json}");
    assert_eq!(json["spills"][1], second.to_string(), "{json}");
    let errors: Vec<String> = completion_schema()
        .iter_errors(&json)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?}\n{json}");
    // After the completion nothing more is the request's.
    match executor.spill(b"late".to_vec()).await {
        Err(RuntimeError::Completed { request }) => assert_eq!(request.as_str(), "spills-1"),
        other => panic!("a spill after the completion: {other:?}"),
    }
    assert_eq!(executor.spills(), c.spills);
    // What it spilled outlives it.
    assert_eq!(runtime.read_spill(&first).await.unwrap(), b"first result");
    // A request that spilled nothing lists nothing (the field is absent).
    let quiet = runtime.start(RequestId::new("spills-2").unwrap()).unwrap();
    quiet.executor().succeed();
    let c = quiet.finished().await;
    assert!(c.spills.is_empty());
    assert!(serde_json::to_value(&c).unwrap().get("spills").is_none());
    runtime.shutdown().await;
}

/// An executor that holds the request's stop files a cancelled process's
/// output as the request's: the stop, and so the cleanup and the
/// completion, wait for the hold, and the completion lists the spill.
#[tokio::test]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn a_hold_of_the_stop_lets_a_cancelled_requests_output_be_its_spill() {
    let dir = tempfile::tempdir_in(scratch()).unwrap();
    let runtime =
        Runtime::open(RuntimeConfig::new(dir.path()).with_spill(spill_in(dir.path()))).unwrap();
    let request = runtime.start(RequestId::new("held-1").unwrap()).unwrap();
    let executor = request.executor();
    let hold = executor.hold_stop();
    executor.open_workspace().await.unwrap();
    let running = executor
        .launch(inv("sh", &["-c", "echo partial; exec sleep 30"]))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    request.cancel();
    let evidence = tokio::time::timeout(Duration::from_secs(20), running.settled())
        .await
        .expect("the cancel did not stop the process");
    assert_eq!(evidence.status, ProcessStatus::Cancelled, "{evidence:?}");
    // Settled, but the hold keeps the stop, and so the completion, waiting.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(request.try_finished().is_none(), "completed under a hold");
    let locator = executor
        .spill(evidence.stdout.text.clone().into_bytes())
        .await
        .unwrap();
    drop(hold);
    let c = request.finished().await;
    assert_eq!(c.result.status(), RequestStatus::Cancelled);
    assert_eq!(c.spills, std::slice::from_ref(&locator));
    assert_eq!(c.stop_unconfirmed, None);
    assert_eq!(runtime.read_spill(&locator).await.unwrap(), b"partial\n");
    runtime.shutdown().await;
}

/// The completion's cleanup detail is the one the request's cleanup filed
/// in its scope: it does not depend on the workspace still keeping the
/// result for duplicate callers (here it keeps none).
#[tokio::test]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn the_cleanup_detail_is_the_requests_own_even_when_the_workspace_keeps_none() {
    let dir = tempfile::tempdir_in(scratch()).unwrap();
    let config = RuntimeConfig::new(dir.path())
        .with_workspace(WorkspaceConfig::default().with_result_cache(0));
    let runtime = Runtime::open(config).unwrap();
    let request = runtime.start(RequestId::new("detail-1").unwrap()).unwrap();
    let executor = request.executor();
    executor.open_workspace().await.unwrap();
    executor.write_artifact("a.txt", b"x").await.unwrap();
    executor.succeed();
    let c = request.finished().await;
    let cleanup = c.cleanup.expect("the request's cleanup detail");
    assert_eq!(cleanup.status, CleanupStatus::Cleaned, "{cleanup:?}");
    assert_eq!(cleanup.counts.files_removed, 1, "{cleanup:?}");
    runtime.shutdown().await;
}

/// A runtime without job namespaces (`custodian run`'s) only launches: it
/// makes nothing under its root and takes no lock (a second one opens on
/// the same root), refuses `open_workspace` before the request announces
/// anything, and its request's stop gives a process that ignores `TERM`
/// the runtime's stop grace (200 ms), not the process's own (30 s). The
/// request completes with no cleanup to run.
#[tokio::test]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn a_runtime_without_job_namespaces_launches_stops_and_leaves_its_root_as_it_was() {
    use custodian::process::evidence::ProcessStatus;
    use custodian::process::invocation::Tunables;

    let dir = tempfile::tempdir_in(scratch()).unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let config = || {
        RuntimeConfig::new(&root)
            .without_job_namespaces()
            .with_stop_grace(Duration::from_millis(200))
    };
    let runtime = Runtime::open(config()).unwrap();
    let second = Runtime::open(config()).expect("no lock is taken");
    assert!(runtime.workspace().is_none());

    let request = runtime
        .start(RequestId::new("launch-only").unwrap())
        .unwrap();
    let executor = request.executor();
    assert!(
        matches!(
            executor.open_workspace().await,
            Err(RuntimeError::NoJobNamespaces { .. })
        ),
        "a job namespace was opened"
    );
    let stubborn = Invocation::validate(
        InvocationSpec::new("sh")
            .with_args(["-c", "trap '' TERM; echo ready; exec sleep 60"])
            .with_tunables(Tunables {
                grace: Duration::from_secs(30),
                ..Tunables::default()
            }),
    )
    .unwrap();
    let running = executor.launch_streamed(stubborn).await.unwrap();
    let ready = running
        .read(Default::default(), 64, Duration::from_secs(10))
        .await;
    assert!(ready.stdout.data.starts_with(b"ready"), "{ready:?}");
    request.cancel();
    let c = tokio::time::timeout(Duration::from_secs(20), request.finished())
        .await
        .expect("the request completed");
    let evidence = running.running().settled().await;
    assert_eq!(evidence.status, ProcessStatus::Cancelled);
    let (term, kill) = (
        evidence.timings.term_sent_us.expect("TERM sent"),
        evidence
            .timings
            .kill_sent_us
            .expect("TERM ignored: KILL sent"),
    );
    assert!(
        kill - term < 10_000_000,
        "the stop waited the process's own grace: {} us",
        kill - term
    );
    assert!(c.cleanup.is_none(), "{:?}", c.cleanup);
    assert_eq!(c.processes.len(), 1);

    // A refused open announces nothing: a success has no cleanup to run,
    // and stays a success.
    let request = runtime
        .start(RequestId::new("launch-only-2").unwrap())
        .unwrap();
    let executor = request.executor();
    assert!(executor.open_workspace().await.is_err());
    executor.run(inv("true", &[])).await.unwrap();
    executor.succeed();
    let c = tokio::time::timeout(Duration::from_secs(20), request.finished())
        .await
        .expect("the request completed");
    assert_eq!(
        c.result.status(),
        custodian::machine::request::RequestStatus::Succeeded,
        "{c:?}"
    );
    assert!(c.cleanup.is_none(), "{:?}", c.cleanup);
    assert_eq!(
        std::fs::read_dir(&root).unwrap().count(),
        0,
        "the runtime made something under its root"
    );
    assert!(runtime.shutdown().await.is_empty());
    assert!(second.shutdown().await.is_empty());
}

/// The processes on the host whose network namespace is `ns`.
fn in_network_namespace(ns: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let link = std::fs::read_link(e.path().join("ns/net")).ok()?;
            (link.to_string_lossy() == ns).then_some(pid)
        })
        .collect()
}

/// A request's later isolated launches run in sandboxes prepared while the
/// one before ran (`process::spawn`, *A prepared sandbox*). The
/// one prepared for a launch that never comes goes when the request
/// stops, before its cgroup is looked at: the cleanup is clean and nothing
/// is left in the request's network namespace.
#[tokio::test]
#[ignore = "run by runtime_bodies_in_a_private_mount_namespace"]
async fn a_requests_prepared_sandbox_goes_with_it_and_its_cleanup_is_clean() {
    if custodian::confine::landlock_abi() == 0 {
        skipped!("the kernel has no Landlock");
        return;
    }
    let dir = tempfile::tempdir_in(scratch()).unwrap();
    let runtime = Runtime::open(RuntimeConfig::new(dir.path())).unwrap();
    let request = runtime
        .start(RequestId::new("prepared-1").unwrap())
        .unwrap();
    let executor = request.executor();
    executor.open_workspace().await.unwrap();
    let before = custodian::__bench::prepared_launches();
    // A prepared sandbox is cloned off its launcher's CPU and takes the
    // whole set back at its launch (`process::spawn::Aside`): the tool
    // gets every CPU this process may use.
    let cpus = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Cpus_allowed_list:"))
        .unwrap()
        .to_owned();
    let mut ns = String::new();
    for _ in 0..4 {
        let Some(ev) = confined_sh(
            &executor,
            "readlink /proc/self/ns/net; grep CapEff /proc/self/status; grep Cpus_allowed_list: /proc/self/status",
            Some(Confinement::workspace_write()),
        )
        .await
        else {
            return;
        };
        assert_eq!(ev.exit_code, Some(0), "{ev:?}");
        assert!(
            ev.stdout.text.contains("CapEff:\t0000000000000000"),
            "{ev:?}"
        );
        assert!(
            ev.stdout.text.lines().any(|l| l == cpus),
            "{cpus} not kept: {ev:?}"
        );
        ns = ev.stdout.text.lines().next().unwrap().to_owned();
    }
    assert!(
        custodian::__bench::prepared_launches() - before >= 1,
        "neither the third nor the fourth launch was prepared"
    );
    // The fifth launch's sandbox waits in the request's namespace.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while in_network_namespace(&ns).is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        !in_network_namespace(&ns).is_empty(),
        "nothing waits in {ns}"
    );
    executor.succeed();
    let c = tokio::time::timeout(Duration::from_secs(20), request.finished())
        .await
        .unwrap();
    let cleanup = c.cleanup.clone().unwrap();
    assert!(cleanup.is_clean(), "{c:?}");
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json["result"]["cleanup"]["status"], "cleaned", "{json}");
    assert_eq!(in_network_namespace(&ns), Vec::<u32>::new(), "left in {ns}");
    runtime.shutdown().await;
}

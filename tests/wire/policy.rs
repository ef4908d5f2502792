//! `custodian node --policy`: the node decides `run_process` and
//! `start_process` itself, so it does not have to trust its edge.

use std::process::Stdio;
use std::time::Duration;

use custodian::policy::{Pattern, ProcessTarget, TargetEnvValue};
use custodian::request::RequestId;
use custodian::wire::{RunSpec, StartSpec, WireClient, WireError};

const BIN: &str = env!("CARGO_BIN_EXE_custodian");

fn sh(script_arg: &std::path::Path) -> (String, Vec<String>) {
    (
        "/bin/sh".to_owned(),
        vec![
            "-c".to_owned(),
            "touch \"$0\"".to_owned(),
            script_arg.display().to_string(),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes: run by guarded::policy_in_a_private_mount_namespace"]
async fn a_node_with_a_policy_refuses_what_it_denies_or_has_not_approved() {
    let dir = crate::sandbox::tempdir();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let denied = ws.join("denied");
    let unapproved = ws.join("unapproved");
    let approved = ws.join("approved");

    // The override approves exactly the `approved` invocation, as the node
    // will see it (no cwd, empty overlay).
    let (exe, argv) = sh(&approved);
    let target = ProcessTarget {
        executable: exe.clone(),
        argv: argv.clone(),
        ..ProcessTarget::default()
    }
    .match_target()
    .unwrap();
    let literal = Pattern::exact(&target).toml_literal().unwrap();
    let policy = dir.path().join("node-policy.toml");
    std::fs::write(
        &policy,
        format!(
            "version = 1\n[tools]\nallow = [\"process.run\"]\n[policy]\n\
             default_decision = \"allow\"\noverrides = [{literal}]\n\
             [[policy.rules]]\ntool = \"process.run\"\ndecision = \"deny\"\n\
             target = '*,\"env\":{{*\"LD_PRELOAD\":*'\n"
        ),
    )
    .unwrap();

    let mut child = tokio::process::Command::new(BIN)
        .args(["node", "--workspace"])
        .arg(&ws)
        .arg("--policy")
        .arg(&policy)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let client = WireClient::from_parts(
        child.stdout.take().unwrap(),
        child.stdin.take().unwrap(),
        8 << 20,
    );
    let id = RequestId::new("governed").unwrap();
    client.open_workspace(&id).await.unwrap();

    // Deny: an overlay key, behind a long argument (the rule sees the whole
    // invocation, not the displayed prefix).
    let (exe_d, mut argv_d) = sh(&denied);
    argv_d.push("a".repeat(64 * 1024));
    let spec = RunSpec {
        executable: exe_d,
        argv: argv_d,
        env: [("LD_PRELOAD".to_owned(), "/tmp/evil.so".to_owned())].into(),
        cwd: None,
        timeout_ms: Some(10_000),
        confinement: None,
    };
    // A session is decided as a run is.
    match client
        .start_process(&id, StartSpec::new(spec.clone()))
        .await
    {
        Err(WireError::PolicyRefused { code, reason, .. }) => {
            assert_eq!(code.as_str(), "policy_denied");
            assert_eq!(reason.as_str(), "denied_by_rule");
        }
        other => panic!("{other:?}"),
    }
    match client.run_process(&id, spec).await {
        Err(WireError::PolicyRefused {
            code,
            reason,
            target,
            suggested_override,
        }) => {
            assert_eq!(code.as_str(), "policy_denied");
            assert_eq!(reason.as_str(), "denied_by_rule");
            assert!(target.is_none() && suggested_override.is_none());
        }
        other => panic!("{other:?}"),
    }

    // Untrusted provenance (the node's default) raises the default allow to
    // require_approval: refused, with the target to approve.
    let (exe_u, argv_u) = sh(&unapproved);
    let want = ProcessTarget {
        executable: exe_u.clone(),
        argv: argv_u.clone(),
        env_overlay: vec![("K".into(), TargetEnvValue::Literal("v".into()))],
        ..ProcessTarget::default()
    }
    .match_target()
    .unwrap();
    let spec = RunSpec {
        executable: exe_u,
        argv: argv_u,
        env: [("K".to_owned(), "v".to_owned())].into(),
        cwd: Some("./".into()),
        timeout_ms: Some(10_000),
        confinement: None,
    };
    match client
        .start_process(&id, StartSpec::new(spec.clone()))
        .await
    {
        Err(WireError::PolicyRefused { code, target, .. }) => {
            assert_eq!(code.as_str(), "approval_required");
            assert_eq!(target.as_deref(), Some(want.as_str()));
        }
        other => panic!("{other:?}"),
    }
    match client.run_process(&id, spec).await {
        Err(WireError::PolicyRefused {
            code,
            reason,
            target,
            suggested_override,
        }) => {
            assert_eq!(code.as_str(), "approval_required");
            assert_eq!(reason.as_str(), "untrusted_shell_requires_approval");
            assert_eq!(target.as_deref(), Some(want.as_str()));
            assert_eq!(suggested_override.as_deref(), Some(want.as_str()));
        }
        other => panic!("{other:?}"),
    }

    // The node's own override approves this one exactly.
    let spec = RunSpec {
        executable: exe,
        argv,
        env: Default::default(),
        cwd: None,
        timeout_ms: Some(10_000),
        confinement: None,
    };
    let ok = client.run_process(&id, spec).await.unwrap();
    assert_eq!(ok.reason.as_str(), "exited", "{ok:?}");
    assert!(approved.exists());
    assert!(
        !denied.exists() && !unapproved.exists(),
        "a refused call ran"
    );

    drop(client);
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
}

#[test]
#[ignore = "deletes: run by guarded::policy_in_a_private_mount_namespace"]
fn a_node_refuses_to_start_on_a_bad_policy_file() {
    let dir = crate::sandbox::tempdir();
    let out = std::process::Command::new(BIN)
        .args(["node", "--workspace"])
        .arg(dir.path())
        .args(["--policy", "/dev/zero"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a regular file"));
}

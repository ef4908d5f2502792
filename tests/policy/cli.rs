//! `custodian policy explain`, run as a real binary.

use std::process::{Command, Output};

use serde_json::Value;

fn example(name: &str) -> String {
    format!("{}/docs/examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn explain(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_custodian"))
        .arg("policy")
        .arg("explain")
        .args(args)
        .output()
        .unwrap()
}

fn explain_json(args: &[&str]) -> Value {
    let out = explain(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    one_json_line(&out.stdout)
}

/// The one JSON object in `stdout`, which must be one compact line.
fn one_json_line(stdout: &[u8]) -> Value {
    let text = std::str::from_utf8(stdout).unwrap();
    assert_eq!(text.matches('\n').count(), 1, "not one line: {text}");
    assert!(text.ends_with('\n'), "{text}");
    let value: Value = serde_json::from_str(text).unwrap();
    assert_eq!(
        text.len() - 1,
        value.to_string().len(),
        "not compact: {text}"
    );
    value
}

#[test]
fn explain_prints_target_decision_and_exact_override() {
    let strict = example("policy-strict.toml");
    let v = explain_json(&[
        "--policy",
        &strict,
        "--provenance",
        "untrusted",
        "--cwd",
        "src",
        "--env",
        "PATH=/usr/bin",
        "--",
        "rm",
        "-rf",
        "a b",
    ]);
    assert_eq!(v["schema"], "custodian.policy.explain/1");
    let target =
        r#"{"executable":"rm","argv":["-rf","a b"],"cwd":"src","env":{"PATH":"/usr/bin"}}"#;
    assert_eq!(v["target"], target);
    assert_eq!(v["decision"], "require_approval");
    assert_eq!(v["reason"]["code"], "default_decision");
    assert!(
        v["reason"]["message"]
            .as_str()
            .unwrap()
            .contains("default_decision")
    );
    assert_eq!(v["suggested_override"], target);
    assert_eq!(v["context"]["provenance"], "untrusted");

    // Feeding the suggested override back approves exactly that invocation...
    let approved = explain_json(&[
        "--policy",
        &strict,
        "--cwd",
        "src",
        "--env",
        "PATH=/usr/bin",
        "--approve",
        target,
        "--",
        "rm",
        "-rf",
        "a b",
    ]);
    assert_eq!(approved["decision"], "allow");
    assert_eq!(approved["reason"]["code"], "override");
    assert_eq!(approved["reason"]["exact"], true);
    // ...and not another argv split of the same words.
    let split = explain_json(&[
        "--policy",
        &strict,
        "--cwd",
        "src",
        "--env",
        "PATH=/usr/bin",
        "--approve",
        target,
        "--",
        "rm",
        "-rf",
        "a",
        "b",
    ]);
    assert_eq!(split["decision"], "require_approval");
}

#[test]
fn explain_prints_secret_references_not_values() {
    let v = explain_json(&[
        "--policy",
        &example("policy-strict.toml"),
        "--env-secret",
        "GH_TOKEN=vault:github",
        "--",
        "gh",
        "pr",
        "list",
    ]);
    assert!(
        v["target"]
            .as_str()
            .unwrap()
            .contains(r#""GH_TOKEN":{"secret_ref":"vault:github"}"#)
    );
    assert_eq!(
        v["audit"]["invocation"]["env_overlay"][0][1]["secret_ref"],
        "vault:github"
    );
}

#[test]
fn explain_reports_denials_with_typed_reasons() {
    let strict = example("policy-strict.toml");
    let push = explain_json(&["--policy", &strict, "--", "git", "push", "origin"]);
    assert_eq!(push["decision"], "deny");
    assert_eq!(push["reason"]["code"], "denied_by_rule");
    assert_eq!(push["reason"]["rule"], 0);
    assert!(push["suggested_override"].is_null());

    let shared = explain_json(&["--policy", &strict, "--state-mode", "shared", "--", "ls"]);
    assert_eq!(shared["reason"]["code"], "not_exposed");
    assert_eq!(shared["reason"]["cause"]["code"], "shared_state_mode");

    let malformed = explain_json(&["--policy", &strict, "--cwd", "../up", "--", "ls"]);
    assert_eq!(malformed["decision"], "deny");
    assert_eq!(malformed["reason"]["cause"]["code"], "parent_in_cwd");
    assert!(malformed["target"].is_null() && malformed["suggested_override"].is_null());

    let disabled = explain_json(&[
        "--policy",
        &example("policy-process-run-disabled.toml"),
        "--provenance",
        "trusted",
        "--",
        "true",
    ]);
    assert_eq!(
        disabled["reason"]["cause"]["code"],
        "process_run_not_exactly_allowed"
    );

    let bash = explain_json(&[
        "--policy",
        &example("policy-process-run-disabled.toml"),
        "--tool",
        "tool.exec",
    ]);
    assert_eq!(bash["decision"], "require_approval");
    assert_eq!(bash["reason"]["code"], "untrusted_shell_requires_approval");
    assert!(bash["target"].is_null());
}

#[test]
fn explain_exit_codes_for_bad_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "version = 1\n[tools]\nallow = [\"group:nope\"]\n").unwrap();
    let out = explain(&["--policy", bad.to_str().unwrap(), "--", "ls"]);
    assert_eq!(out.status.code(), Some(65));
    assert!(String::from_utf8_lossy(&out.stderr).contains("tools.allow[0]"));
    assert!(out.stdout.is_empty());

    let missing = dir.path().join("missing.toml");
    let out = explain(&["--policy", missing.to_str().unwrap(), "--", "ls"]);
    assert_eq!(out.status.code(), Some(66));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("(os error 2)").count(), 1, "{stderr}");

    let strict = example("policy-strict.toml");
    let out = explain(&["--policy", &strict, "--approve", "", "--", "ls"]);
    assert_eq!(out.status.code(), Some(64));

    let out = explain(&[
        "--policy",
        &strict,
        "--env",
        "NO_EQUALS_hunter2",
        "--",
        "ls",
    ]);
    assert_eq!(out.status.code(), Some(64));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("hunter2"));
}

fn run_cmd(workspace: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_custodian"))
        .arg("run")
        .arg("--workspace")
        .arg(workspace)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn run_with_policy_launches_only_what_was_approved() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let strict = example("policy-strict.toml");
    let touch = ["--", "touch", "made by custodian"];

    // Default decision: approval required, nothing launched.
    let args: Vec<&str> = ["--policy", strict.as_str()]
        .iter()
        .chain(&touch)
        .copied()
        .collect();
    let out = run_cmd(ws, &args);
    assert_eq!(
        out.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !ws.join("made by custodian").exists(),
        "launched without approval"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["decision"], "require_approval");
    let approval = v["suggested_override"].as_str().unwrap().to_owned();
    // stderr offers the same override as a TOML literal string.
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("policy.overrides: '{approval}'")),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The same approval for a different argv split is not enough.
    let out = run_cmd(
        ws,
        &[
            "--policy",
            &strict,
            "--approve",
            &approval,
            "--",
            "touch",
            "made",
            "by",
            "custodian",
        ],
    );
    assert_eq!(out.status.code(), Some(75));
    assert!(!ws.join("made").exists());

    // Presenting the exact override launches it.
    let args: Vec<&str> = ["--policy", strict.as_str(), "--approve", &approval]
        .iter()
        .chain(&touch)
        .copied()
        .collect();
    let out = run_cmd(ws, &args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let evidence: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(evidence["status"], "exited");
    assert!(ws.join("made by custodian").exists());
}

#[test]
fn run_with_policy_refuses_denied_calls() {
    let dir = tempfile::tempdir().unwrap();
    let strict = example("policy-strict.toml");
    // `git push` is denied by rule 0 even with a catch-all approval; exit 77
    // (not 0 or 71) shows the launcher was never reached.
    let out = run_cmd(
        dir.path(),
        &[
            "--policy",
            &strict,
            "--provenance",
            "trusted",
            "--approve",
            "*",
            "--",
            "git",
            "push",
        ],
    );
    assert_eq!(out.status.code(), Some(77));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["reason"]["code"], "denied_by_rule");

    let disabled = example("policy-process-run-disabled.toml");
    let out = run_cmd(
        dir.path(),
        &[
            "--policy",
            &disabled,
            "--provenance",
            "trusted",
            "--",
            "touch",
            "x",
        ],
    );
    assert_eq!(out.status.code(), Some(77));
    assert!(!dir.path().join("x").exists());
}

#[test]
fn explain_predicts_run_for_every_cwd_spelling() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::create_dir_all(ws.join("a/b")).unwrap();
    let strict = example("policy-strict.toml");
    for (cwd, want) in [
        ("a\\b", Some(r#""cwd":"a/b""#)),
        ("a/./b/", Some(r#""cwd":"a/b""#)),
        ("sub/..", Some(r#""cwd":".""#)),
        ("a/../a/b", Some(r#""cwd":"a/b""#)),
        ("C:x", None),
        ("..", None),
        ("", None),
    ] {
        let explained = explain_json(&["--policy", &strict, "--cwd", cwd, "--", "touch", "f"]);
        let out = run_cmd(ws, &["--policy", &strict, "--cwd", cwd, "--", "touch", "f"]);
        match want {
            Some(cwd_field) => {
                // Same target and verdict: run refuses with the same
                // require_approval decision explain printed.
                assert_eq!(explained["decision"], "require_approval", "{cwd:?}");
                assert!(
                    explained["target"].as_str().unwrap().contains(cwd_field),
                    "{cwd:?}"
                );
                assert_eq!(out.status.code(), Some(75), "{cwd:?}");
                let ran: Value = serde_json::from_slice(&out.stdout).unwrap();
                assert_eq!(ran["target"], explained["target"], "{cwd:?}");
                assert_eq!(ran["decision"], explained["decision"], "{cwd:?}");
            }
            None => {
                // The launcher refuses it (64): explain must deny it too.
                assert_eq!(explained["decision"], "deny", "{cwd:?}");
                assert_eq!(explained["reason"]["code"], "malformed_target", "{cwd:?}");
                assert_eq!(out.status.code(), Some(64), "{cwd:?}");
            }
        }
    }
    assert!(!ws.join("f").exists() && !ws.join("a/b/f").exists());
}

/// Runs `explain` with `policy` and fails the test (instead of hanging) if it
/// does not exit within a generous bound.
fn explain_bounded(policy: &std::path::Path) -> Output {
    use std::time::{Duration, Instant};
    let mut child = Command::new(env!("CARGO_BIN_EXE_custodian"))
        .args(["policy", "explain", "--policy"])
        .arg(policy)
        .args(["--", "true"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("explain hung on {}", policy.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn policy_file_must_be_a_bounded_regular_utf8_file() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("policy.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        skipped!("mkfifo is not available here");
        return;
    }
    // A FIFO with no writer: a blocking open or read would hang forever.
    let out = explain_bounded(&fifo);
    assert_eq!(out.status.code(), Some(66));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not a regular file (a FIFO)"), "{stderr}");
    assert!(out.stdout.is_empty());

    // A device that never ends.
    let out = explain_bounded(std::path::Path::new("/dev/zero"));
    assert_eq!(out.status.code(), Some(66));
    assert!(String::from_utf8_lossy(&out.stderr).contains("character device"));

    let out = explain_bounded(dir.path());
    assert_eq!(out.status.code(), Some(66));

    // A regular file one byte over the bound.
    let big = dir.path().join("big.toml");
    let mut text = b"version = 1\n".to_vec();
    text.resize(1024 * 1024 + 1, b'#');
    std::fs::write(&big, &text).unwrap();
    let out = explain_bounded(&big);
    assert_eq!(out.status.code(), Some(65));
    assert!(String::from_utf8_lossy(&out.stderr).contains("larger than 1048576 bytes"));
    // At the bound it is read (and loads: the rest is a comment).
    text.truncate(1024 * 1024);
    std::fs::write(&big, &text).unwrap();
    assert_eq!(explain_bounded(&big).status.code(), Some(0));

    // Invalid UTF-8: invalid (65), with its location.
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, b"version = 1\n# ok\nab\xffc = 1\n").unwrap();
    let out = explain_bounded(&bad);
    assert_eq!(out.status.code(), Some(65));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("line 3, column 3 (byte offset 19)"),
        "{stderr}"
    );
}

#[test]
fn suggested_override_toml_pastes_back_and_a_decoded_paste_warns() {
    let dir = tempfile::tempdir().unwrap();
    let base = "version = 1\n[tools]\nallow = [\"process.run\"]\n";
    let policy = dir.path().join("p.toml");
    std::fs::write(&policy, base).unwrap();
    let policy = policy.to_str().unwrap();
    let argv = ["ls", "*", "it's"];
    let args = |extra: &[&'static str]| -> Vec<String> {
        let mut v: Vec<String> = vec!["--policy".into(), policy.into()];
        v.extend(extra.iter().map(|s| s.to_string()));
        v.push("--".into());
        v.extend(argv.iter().map(|s| s.to_string()));
        v
    };
    let first = explain(&args(&[]).iter().map(String::as_str).collect::<Vec<_>>());
    let v: Value = serde_json::from_slice(&first.stdout).unwrap();
    assert_eq!(v["decision"], "require_approval");
    let literal = v["suggested_override_toml"].as_str().unwrap().to_owned();
    assert!(literal.starts_with('\'') && literal.ends_with('\''));
    assert!(literal.contains(r"\u002a") && literal.contains(r"\u0027"));

    // Pasted as printed: exact, quiet, and it approves this invocation.
    std::fs::write(
        dir.path().join("p.toml"),
        format!("{base}[policy]\noverrides = [{literal}]\n"),
    )
    .unwrap();
    let out = explain(&args(&[]).iter().map(String::as_str).collect::<Vec<_>>());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["decision"], "allow");
    assert_eq!(v["reason"]["exact"], true);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning"));

    // Pasted into a basic string: `\u002a` decodes to `*`, the override is a
    // broad pattern, and loading warns.
    let inner = &literal[1..literal.len() - 1];
    let basic = format!("\"{}\"", inner.replace('"', "\\\""));
    std::fs::write(
        dir.path().join("p.toml"),
        format!("{base}[policy]\noverrides = [{basic}]\n"),
    )
    .unwrap();
    let out = explain(&args(&[]).iter().map(String::as_str).collect::<Vec<_>>());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("warning: policy.overrides[0]"), "{stderr}");
    assert!(stderr.contains("BROAD"), "{stderr}");
}

/// A policy that requires `workspace-write` or stronger of every
/// `process.run`, and otherwise allows (trusted).
fn confinement_policy(dir: &std::path::Path) -> String {
    let path = dir.join("confined.toml");
    std::fs::write(
        &path,
        "version = 1\n[tools]\nallow = [\"process.run\"]\n[policy]\n\
         default_decision = \"allow\"\nrequire_confinement = \"workspace-write\"\n",
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn explain_and_run_hold_a_process_to_the_confinement_the_policy_requires() {
    let dir = tempfile::tempdir().unwrap();
    let policy = confinement_policy(dir.path());

    // explain: the confinement is part of the target, and decides.
    let plain = explain_json(&["--policy", &policy, "--provenance", "trusted", "--", "true"]);
    assert_eq!(
        plain["target"],
        r#"{"executable":"true","argv":[],"cwd":".","env":{}}"#
    );
    assert_eq!(plain["decision"], "deny");
    assert_eq!(plain["reason"]["code"], "confinement_required");
    let confined = explain_json(&[
        "--policy",
        &policy,
        "--provenance",
        "trusted",
        "--confine",
        "workspace-write",
        "--",
        "true",
    ]);
    assert_eq!(
        confined["target"],
        r#"{"executable":"true","argv":[],"cwd":".","env":{},"confine":{"fs":"workspace-write","network":"off","scoped":true,"allow_read":[],"allow_write":[],"deny_read":[],"enforcement":"strict"}}"#
    );
    assert_eq!(confined["decision"], "allow", "{confined}");
    let network_on = explain_json(&[
        "--policy",
        &policy,
        "--provenance",
        "trusted",
        "--confine",
        "workspace-write",
        "--network",
        "on",
        "--",
        "true",
    ]);
    assert_eq!(network_on["decision"], "deny");

    // run: the unconfined call is refused before anything starts.
    let marker = dir.path().join("ran");
    let sh = format!("touch '{}'", marker.display());
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_custodian"))
            .arg("run")
            .args(["--policy", &policy, "--provenance", "trusted"])
            .args(["--workspace", dir.path().to_str().unwrap()])
            .args(extra)
            .args(["--", "/bin/sh", "-c", &sh])
            .output()
            .unwrap()
    };
    let refused = run(&[]);
    assert_eq!(refused.status.code(), Some(77), "{refused:?}");
    assert!(!marker.exists(), "a refused call ran");

    // The confined call runs (where this host can confine at all).
    let ran = run(&["--confine", "workspace-write"]);
    let stdout = String::from_utf8_lossy(&ran.stdout);
    if ran.status.code() == Some(71)
        && (stdout.contains("confinement_spawner_unavailable")
            || stdout.contains("confinement_unsupported"))
    {
        skipped!("the confined run: this host cannot confine ({stdout})");
        return;
    }
    assert_eq!(ran.status.code(), Some(0), "{ran:?}");
    assert!(marker.exists(), "the confined call did not run: {stdout}");
}

#[test]
fn explain_shows_an_allow_list_and_the_policy_grants_only_the_hosts_it_names() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("granted.toml");
    std::fs::write(
        &path,
        "version = 1\n[tools]\nallow = [\"process.run\"]\n[policy]\n\
         default_decision = \"allow\"\nrequire_confinement = \"workspace-write\"\n\
         allow_hosts = [\"pypi.org\", \"*.pythonhosted.org\"]\n",
    )
    .unwrap();
    let policy = path.to_str().unwrap();
    let explain_hosts = |hosts: &[&str]| {
        let mut args = vec![
            "--policy",
            policy,
            "--provenance",
            "trusted",
            "--confine",
            "workspace-write",
        ];
        for h in hosts {
            args.extend(["--allow-host", h]);
        }
        args.extend(["--", "pip", "install", "x"]);
        explain_json(&args)
    };
    let granted = explain_hosts(&["files.pythonhosted.org", "PyPI.org"]);
    assert_eq!(
        granted["target"],
        r#"{"executable":"pip","argv":["install","x"],"cwd":".","env":{},"confine":{"fs":"workspace-write","network":"allow","allow_hosts":["files.pythonhosted.org","pypi.org"],"scoped":true,"allow_read":[],"allow_write":[],"deny_read":[],"enforcement":"strict"}}"#
    );
    assert_eq!(granted["decision"], "allow", "{granted}");
    let wider = explain_hosts(&["pypi.org", "evil.test"]);
    assert_eq!(wider["decision"], "deny", "{wider}");
    assert_eq!(wider["reason"]["code"], "confinement_required");
    assert!(
        wider["reason"]["message"]
            .as_str()
            .unwrap()
            .contains("policy.allow_hosts"),
        "{wider}"
    );
    // A malformed pattern is a usage error, named.
    let bad = explain(&[
        "--policy",
        policy,
        "--confine",
        "read-only",
        "--allow-host",
        "a..b",
        "--",
        "true",
    ]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stdout).contains("a..b")
            || String::from_utf8_lossy(&bad.stderr).contains("a..b"),
        "{bad:?}"
    );
}

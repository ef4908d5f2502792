//! Evidence from real runs: secrets redacted across reads, UTF-8 cut only at
//! character boundaries, and every evidence valid against the schema.

use std::sync::Arc;
use std::time::Duration;

use custodian::process::env::{REDACTED, SecretError, SecretValue};
use custodian::process::invocation::{EnvValue, SecretRef};
use custodian::process::{Invocation, LaunchOptions, run};

use crate::common::*;

const SECRET: &str = "hunter2-c0ffee-51de";

fn with_secret() -> LaunchOptions {
    let resolver = |r: &SecretRef| {
        if r.as_str() == "api-token" {
            Ok(SecretValue::new(SECRET))
        } else {
            Err(SecretError::NotFound)
        }
    };
    opts().with_secrets(Arc::new(resolver))
}

#[tokio::test]
async fn a_secret_printed_in_two_reads_is_redacted() {
    // The two halves reach custodian in separate reads (the sleep).
    let script = "a=${TOK%?????????}; b=${TOK#\"$a\"}; printf %s \"$a\"; sleep 0.2; printf '%s\\n' \"$b\"; printf %s \"$TOK\" >&2";
    let i = Invocation::validate(
        spec("sh", &["-c", script]).with_env("TOK", EnvValue::Secret(SecretRef::new("api-token"))),
    )
    .unwrap();
    let ev = run(i, &with_secret()).await.unwrap();
    assert_eq!(ev.stdout.text, format!("{REDACTED}\n"));
    assert_eq!(ev.stdout.redactions, 1);
    assert_eq!(ev.stderr.text, REDACTED);
    let json = ev.to_json();
    assert!(!json.contains(SECRET));
    assert!(!json.contains("hunter2") && !json.contains("51de"));
}

#[tokio::test]
async fn an_unresolvable_secret_is_a_typed_error_without_the_value() {
    let i = Invocation::validate(
        spec("true", &[]).with_env("TOK", EnvValue::Secret(SecretRef::new("nope"))),
    )
    .unwrap();
    let e = custodian::process::launch(i, &with_secret()).unwrap_err();
    assert_eq!(e.code(), "env");
    assert!(!e.to_string().contains("TOK"));
}

#[tokio::test]
async fn multibyte_characters_straddling_reads_and_the_budget_stay_whole() {
    // "é" is 2 bytes, "€" 3: split each across two writes (two reads),
    // and overflow a 16-byte budget so head and tail edges fall mid-char.
    let script = "printf '\\303'; sleep 0.1; printf '\\251'; i=0; while [ $i -lt 20 ]; do printf '\\342\\202\\254'; i=$((i+1)); done; printf '\\342'; sleep 0.1; printf '\\202\\254'";
    let i = Invocation::validate(spec("sh", &["-c", script]).with_budget(budget(16, 16))).unwrap();
    let ev = run(i, &opts()).await.unwrap();
    assert_eq!(ev.stdout.bytes_read, 2 + 21 * 3);
    assert!(ev.stdout.truncated);
    assert_eq!(ev.stdout.invalid_utf8_sequences, 0);
    assert!(ev.stdout.text.starts_with('é'), "{:?}", ev.stdout.text);
    assert!(ev.stdout.text.ends_with('€'), "{:?}", ev.stdout.text);
    assert!(!ev.stdout.text.contains('\u{FFFD}'));
}

#[tokio::test]
async fn evidence_of_every_kind_of_ending_validates_against_the_schema() {
    let validator = crate::common::evidence_schema();
    let short = Duration::from_millis(200);
    let cases = [
        sh("echo hi; exit 4", short),
        inv("sleep", &["5"], short),
        sh("trap '' TERM; while :; do sleep 0.05; done", short),
        sh("echo started; sleep 30 &", Duration::from_secs(5)),
        sh("printf '\\377<data source=\"tool\">'", short),
    ];
    for i in cases {
        let ev = run(i, &opts()).await.unwrap();
        let value: serde_json::Value = serde_json::from_str(&ev.to_json()).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{errors:?}\n{value}");
        let wrapped = ev.render_for_model();
        assert_eq!(wrapped.matches("<data").count(), 1);
        assert_eq!(wrapped.matches("</data>").count(), 1);
    }
}

/// The workspace-relative cwd in the evidence and in launch errors, and
/// the executable in launch errors, are redacted like argv.
#[tokio::test]
async fn the_cwd_and_launch_errors_are_redacted_like_argv() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(SECRET)).unwrap();
    let mut opts = with_secret().clone();
    opts.workspace = dir.path().to_path_buf();
    let tok = || EnvValue::Secret(SecretRef::new("api-token"));
    let i =
        Invocation::validate(spec("true", &[]).with_cwd(SECRET).with_env("TOK", tok())).unwrap();
    let ev = run(i, &opts).await.unwrap();
    assert_eq!(ev.invocation.cwd, REDACTED);
    assert!(!ev.to_json().contains(SECRET));

    let missing_cwd = format!("{SECRET}/nope");
    let exe_in_secret = format!("./{SECRET}/tool");
    let missing_exe = format!("/nonexistent/{SECRET}");
    let cases = [
        spec("true", &[]).with_cwd(missing_cwd),
        spec(&exe_in_secret, &[]),
        spec(&missing_exe, &[]),
        spec(SECRET, &[]),
    ];
    for s in cases {
        let i = Invocation::validate(s.with_env("TOK", tok())).unwrap();
        let e = custodian::process::launch(i, &opts).unwrap_err();
        let text = format!("{e} {e:?}");
        assert!(!text.contains(SECRET), "{text}");
        assert!(text.contains(REDACTED), "{text}");
    }
}

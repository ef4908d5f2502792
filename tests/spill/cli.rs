//! The `custodian spill` command line, run as the real binary.

use std::fs;
use std::process::{Command, Output, Stdio};
use std::time::SystemTime;

use filetime::FileTime;

use crate::*;

fn custodian(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_custodian"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn spill_path(root: &std::path::Path, loc: &str) -> std::path::PathBuf {
    let f: Vec<&str> = loc.split(':').collect();
    root.join(f[3]).join(format!("{}.spill", f[4]))
}

/// Boots the service through a real config file and the CLI binary, then
/// observes expiry and pruning.
#[test]
#[ignore = "deletes: run by guarded::cli_in_a_private_mount_namespace"]
fn boots_through_config_file_and_cli_then_expires_and_prunes() {
    let fx = Fx::new();
    let root = fx.path().join("root");
    let cfg = fx.path().join("custodian.toml");
    fs::write(
        &cfg,
        format!(
            "root = {:?}\ncleanup_period_days = 7\ntemp_dir = {:?}\n",
            root.to_str().unwrap(),
            fx.path().to_str().unwrap()
        ),
    )
    .unwrap();
    let input = fx.path().join("in.txt");
    fs::write(&input, "expiring result").unwrap();
    let cfg_s = cfg.to_str().unwrap();
    let w1 = custodian(&[
        "spill",
        "write",
        "--config",
        cfg_s,
        "--session",
        "old",
        input.to_str().unwrap(),
    ]);
    assert!(
        w1.status.success(),
        "{}",
        String::from_utf8_lossy(&w1.stderr)
    );
    let old_loc = String::from_utf8(w1.stdout).unwrap().trim().to_owned();
    fs::write(&input, "fresh result").unwrap();
    let w2 = custodian(&[
        "spill",
        "write",
        "--config",
        cfg_s,
        "--session",
        "new",
        input.to_str().unwrap(),
    ]);
    let new_loc = String::from_utf8(w2.stdout).unwrap().trim().to_owned();
    let old_file = spill_path(&root, &old_loc);
    filetime::set_file_mtime(
        &old_file,
        FileTime::from_system_time(SystemTime::now() - 8 * DAY),
    )
    .unwrap();
    let prior = fx.mkdir("custodian-spill-prior");
    mkdir(&prior.join("x"));

    let out = custodian(&["spill", "sweep", "--config", cfg_s, "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["schema"], "custodian.spill.sweep_report/1");
    assert_eq!(report["files_deleted"], 1);
    assert_eq!(report["files_kept"], 1);
    assert_eq!(report["dirs_pruned"], 2, "{report}");
    assert_eq!(report["roots_removed"], 1);
    assert!(!old_file.exists());
    assert!(!root.join("old").exists());
    assert!(!prior.exists());

    let r = custodian(&["spill", "read", "--config", cfg_s, &new_loc]);
    assert!(r.status.success());
    assert_eq!(r.stdout, b"fresh result");
    let r = custodian(&["spill", "read", "--config", cfg_s, &old_loc]);
    assert_eq!(r.status.code(), Some(66), "an expired locator is gone");
}

#[test]
#[ignore = "deletes: run by guarded::cli_in_a_private_mount_namespace"]
fn exit_codes_are_distinct_and_errors_clear() {
    let fx = Fx::new();
    let root = fx.path().join("root");
    let rs = root.to_str().unwrap();
    let out = custodian(&["spill", "read", "--root", rs, "cspill:1:nothex:s:x"]);
    assert_eq!(out.status.code(), Some(65));
    assert!(String::from_utf8_lossy(&out.stderr).contains("root tag"));

    let bad = fx.path().join("bad.toml");
    fs::write(&bad, "cleanup_period_days = 1.5\n").unwrap();
    let out = custodian(&["spill", "sweep", "--config", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(78));
    assert!(String::from_utf8_lossy(&out.stderr).contains("whole number of days"));

    let out = custodian(&[
        "spill",
        "write",
        "--root",
        rs,
        "--session",
        "../etc",
        "/dev/null",
    ]);
    assert_eq!(out.status.code(), Some(65));

    let a = custodian(&[
        "spill",
        "write",
        "--root",
        rs,
        "--session",
        "s",
        "/dev/null",
    ]);
    let other = fx.path().join("other");
    let _ = custodian(&[
        "spill",
        "write",
        "--root",
        other.to_str().unwrap(),
        "--session",
        "s",
        "/dev/null",
    ]);
    let loc = String::from_utf8(a.stdout).unwrap().trim().to_owned();
    let out = custodian(&["spill", "read", "--root", other.to_str().unwrap(), &loc]);
    assert_eq!(out.status.code(), Some(77), "foreign root");

    let out = custodian(&[
        "spill",
        "write",
        "--root",
        rs,
        "--session",
        "s",
        "/nonexistent/input",
    ]);
    assert_eq!(out.status.code(), Some(66));

    // A sweep that met a problem still completes, with exit code 1.
    let missing = fx.path().join("missing");
    let out = custodian(&[
        "spill",
        "sweep",
        "--root",
        rs,
        "--root",
        missing.to_str().unwrap(),
        "--no-discover",
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    let out = custodian(&["spill", "sweep", "--root", rs, "--period-days", "-1"]);
    assert_eq!(out.status.code(), Some(2), "clap usage error");
}

#[test]
#[ignore = "deletes: run by guarded::cli_in_a_private_mount_namespace"]
fn dry_run_and_default_root_round_trip() {
    let fx = Fx::new();
    let tmp = fx.path().to_str().unwrap();
    let w = Command::new(env!("CARGO_BIN_EXE_custodian"))
        .args(["spill", "write", "--temp-dir", tmp, "--session", "s", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(b"from stdin")?;
            c.wait_with_output()
        })
        .unwrap();
    assert!(w.status.success());
    let loc = String::from_utf8(w.stdout).unwrap().trim().to_owned();
    // No --root: the reader finds the default root by the locator's tag.
    let r = custodian(&["spill", "read", "--temp-dir", tmp, &loc]);
    assert_eq!(r.stdout, b"from stdin");
    let roots: Vec<_> = fs::read_dir(fx.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(roots.len(), 1);
    let f = spill_path(&roots[0], &loc);
    filetime::set_file_mtime(&f, FileTime::from_system_time(SystemTime::now() - 40 * DAY)).unwrap();
    let out = custodian(&["spill", "sweep", "--temp-dir", tmp, "--dry-run"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("would delete: "), "{text}");
    assert!(f.exists());
    let out = custodian(&[
        "spill",
        "sweep",
        "--temp-dir",
        tmp,
        "--no-discover",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["roots_scanned"], 0);
    assert!(f.exists());
    let out = custodian(&["spill", "sweep", "--temp-dir", tmp, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["files_deleted"], 1);
    assert!(!roots[0].exists(), "emptied prior default root removed");
}

/// The one JSON object in `stdout`, which must be one compact line.
fn one_json_line(stdout: &[u8]) -> serde_json::Value {
    let text = std::str::from_utf8(stdout).unwrap();
    assert_eq!(text.matches('\n').count(), 1, "not one line: {text}");
    assert!(text.ends_with('\n'), "{text}");
    let value: serde_json::Value = serde_json::from_str(text).unwrap();
    assert_eq!(
        text.len() - 1,
        value.to_string().len(),
        "not compact: {text}"
    );
    value
}

/// Deletes nothing: no root, discovery off, or cleanup disabled.
#[test]
fn sweep_json_is_one_compact_line() {
    let tmp = tempfile::tempdir().unwrap();
    let tmp = tmp.path().to_str().unwrap();
    let out = custodian(&[
        "spill",
        "sweep",
        "--temp-dir",
        tmp,
        "--no-discover",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(one_json_line(&out.stdout)["roots_scanned"], 0);
    let out = custodian(&[
        "spill",
        "sweep",
        "--temp-dir",
        tmp,
        "--period-days",
        "0",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(one_json_line(&out.stdout)["disabled"], true);
}

#[test]
fn an_error_names_each_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let missing = missing.to_str().unwrap();
    for (args, code) in [
        (&["spill", "sweep", "--config", missing][..], 78),
        (
            &[
                "spill",
                "write",
                "--root",
                missing,
                "--session",
                "s",
                missing,
            ],
            66,
        ),
    ] {
        let out = custodian(args);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {out:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.starts_with("custodian spill: "), "{err}");
        assert_eq!(err.matches("(os error 2)").count(), 1, "{err}");
    }
}

//! Launch failures are typed errors and launch nothing.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use custodian::process::{Invocation, LaunchOptions, ProcessError, launch};

use crate::common::*;

#[tokio::test]
async fn missing_executable_is_not_found() {
    let e = launch(
        inv("custodian-no-such-tool", &[], Duration::from_secs(1)),
        &opts(),
    )
    .unwrap_err();
    assert!(
        matches!(e, ProcessError::NotFound { ref name } if name == "custodian-no-such-tool"),
        "{e:?}"
    );
    assert_eq!(e.code(), "not_found");
}

/// A path that names nothing is `not_found`, one that names something that
/// cannot be executed is `not_executable`, and every message shows the path
/// as the caller gave it (regression: a missing absolute path came out as
/// `not_executable`).
#[tokio::test]
async fn launch_failures_are_classified_by_what_the_path_names() {
    let dir = tempfile::tempdir().unwrap();
    let ws = LaunchOptions::new(dir.path());
    std::fs::create_dir(dir.path().join("a_dir")).unwrap();
    std::fs::write(dir.path().join("plain"), "x").unwrap();
    std::fs::write(dir.path().join("no_interp"), "#!/nonexistent/interp\n").unwrap();
    std::fs::set_permissions(
        dir.path().join("no_interp"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(dir.path().join("garbage"), [0u8, 1, 2, 3]).unwrap();
    std::fs::set_permissions(
        dir.path().join("garbage"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let cases = [
        ("/nonexistent/tool", "not_found"),
        ("./missing", "not_found"),
        ("plain/below-a-file", "not_found"),
        ("./a_dir", "not_executable"),
        ("./plain", "not_executable"),
        ("./no_interp", "not_executable"),
        ("./garbage", "not_executable"),
        ("custodian-no-such-tool", "not_found"),
    ];
    for (exe, code) in cases {
        let e = launch(inv(exe, &[], Duration::from_secs(1)), &ws).unwrap_err();
        assert_eq!(e.code(), code, "{exe}: {e:?}");
        let msg = e.to_string();
        assert!(msg.contains(&format!("{exe:?}")), "{exe}: {msg}");
        assert!(
            !msg.contains(dir.path().to_str().unwrap()),
            "{exe}: the message names the resolved path: {msg}"
        );
    }
}

#[tokio::test]
async fn non_executable_file_is_not_executable() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("script");
    std::fs::write(&file, "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = launch(
        inv(file.to_str().unwrap(), &[], Duration::from_secs(1)),
        &LaunchOptions::new(dir.path()),
    )
    .unwrap_err();
    assert!(matches!(e, ProcessError::NotExecutable { .. }), "{e:?}");
    assert_eq!(e.code(), "not_executable");
}

#[tokio::test]
async fn missing_cwd_is_bad_cwd() {
    let dir = tempfile::tempdir().unwrap();
    let i = Invocation::validate(spec("true", &[]).with_cwd("no/such/dir")).unwrap();
    let e = launch(i, &LaunchOptions::new(dir.path())).unwrap_err();
    match e {
        ProcessError::BadCwd { ref cwd, kind } => {
            assert_eq!(cwd, "no/such/dir");
            assert_eq!(kind, std::io::ErrorKind::NotFound);
        }
        other => panic!("{other:?}"),
    }
    std::fs::write(dir.path().join("file"), "").unwrap();
    let i = Invocation::validate(spec("true", &[]).with_cwd("file")).unwrap();
    let e = launch(i, &LaunchOptions::new(dir.path())).unwrap_err();
    assert_eq!(e.code(), "bad_cwd");
}

#[tokio::test]
async fn cwd_is_workspace_relative() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let i = Invocation::validate(spec("pwd", &[]).with_cwd("sub")).unwrap();
    let ev = custodian::process::run(i, &LaunchOptions::new(dir.path()))
        .await
        .unwrap();
    assert_eq!(
        ev.stdout.text.trim(),
        dir.path().join("sub").to_str().unwrap()
    );
    assert_eq!(ev.invocation.cwd, "sub");
}

#[test]
fn launch_outside_a_runtime_is_a_typed_error() {
    let e = launch(inv("true", &[], Duration::from_secs(1)), &opts()).unwrap_err();
    assert!(matches!(e, ProcessError::NoRuntime));
}

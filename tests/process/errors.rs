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
    let e = launch(
        inv("/nonexistent/tool", &[], Duration::from_secs(1)),
        &opts(),
    )
    .unwrap_err();
    assert!(matches!(e, ProcessError::NotExecutable { .. }), "{e:?}");
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

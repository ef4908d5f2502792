//! The workspace root given twice (to the workspace and in a launch's
//! options) is cross-checked: a job launches only with options naming its
//! own workspace's root, compared by identity.

use custodian::process::{Invocation, InvocationSpec, LaunchOptions};
use custodian::request::{LaunchError, launch};
use custodian::workspace::{Workspace, WorkspaceConfig, WorkspaceError};

#[tokio::test]
async fn a_job_refuses_launch_options_naming_another_root() {
    let dir = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let ws = Workspace::open(dir.path(), WorkspaceConfig::default()).unwrap();
    let job = ws.open_request("root-1").unwrap();
    let inv = || Invocation::validate(InvocationSpec::new("true")).unwrap();
    assert!(matches!(
        launch(&job, inv(), &LaunchOptions::new(other.path())),
        Err(LaunchError::Workspace(WorkspaceError::RootMismatch))
    ));
    // Another spelling of the same directory is the same root.
    let spelled = dir.path().join(".custodian").join("..");
    let running = launch(&job, inv(), &LaunchOptions::new(spelled)).unwrap();
    assert_eq!(running.settled().await.exit_code, Some(0));
    // Nothing is removed here: the job is left to the temp dir.
}

/// A refused launch says who refused it: the request (`workspace_error`,
/// whatever the workspace's reason) or the launcher (its own code).
#[tokio::test]
async fn a_refused_launch_names_who_refused_it() {
    let dir = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let ws = Workspace::open(dir.path(), WorkspaceConfig::default()).unwrap();
    let job = ws.open_request("root-2").unwrap();
    let inv = |program: &str| Invocation::validate(InvocationSpec::new(program)).unwrap();
    let refused = launch(&job, inv("true"), &LaunchOptions::new(other.path())).unwrap_err();
    assert_eq!(refused.code(), "workspace_error", "{refused:?}");
    let missing = launch(
        &job,
        inv("custodian-test-no-such-program"),
        &LaunchOptions::new(dir.path()),
    )
    .unwrap_err();
    assert!(matches!(missing, LaunchError::Process(_)), "{missing:?}");
    assert_eq!(missing.code(), "not_found", "{missing:?}");
    // Nothing is removed here: the job is left to the temp dir.
}

//! A request's processes: the governed launcher run for a request's job.
//!
//! A process launched for a request is tracked in its job's process list
//! and, where cgroups can be made, started inside the request's cgroup, so
//! that the request's cleanup stops it (and everything it forked) before
//! any file is removed. [`launch`] joins the two mechanisms that know
//! nothing of each other: `workspace` (the job: filesystem, inventory,
//! request cgroup, the list cleanup stops) and `process` (the launcher).
//!
//! This module sits above the mechanisms (see `docs/architecture.md`, *The
//! layers*); the runtime's `Executor` and the wire's `WorkspaceNode` launch
//! through it.
//!
//! ```no_run
//! use custodian::process::{Invocation, InvocationSpec, LaunchOptions};
//! use custodian::workspace::{Workspace, WorkspaceConfig};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let ws = Workspace::open("/srv/agent", WorkspaceConfig::default())?;
//! let job = ws.open_request("req-1")?;
//! let inv = Invocation::validate(InvocationSpec::new("make"))?;
//! let running = custodian::request::launch(&job, inv, &LaunchOptions::new("/srv/agent"))?;
//! let evidence = running.settled().await;
//! let cleanup = ws.cleanup("req-1").await?;
//! # let _ = (evidence, cleanup);
//! # Ok(()) }
//! ```

pub(crate) mod scope;

use crate::process::{Invocation, LaunchOptions, ProcessError, Running};
use crate::workspace::{Job, RequestProcess, SettledFuture, WorkspaceError};

/// Why a launch for a request did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// The request refused it: another workspace root, a working directory
    /// in the internal namespace, cleanup already started, or the request
    /// cgroup could not be journalled.
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    /// The launcher refused to start the process.
    #[error(transparent)]
    Process(#[from] ProcessError),
}

impl LaunchError {
    /// A stable code: the launcher's own (`not_found`, `bad_cwd`, …), or
    /// `workspace_error` for a refusal of the request.
    pub fn code(&self) -> &'static str {
        match self {
            LaunchError::Process(e) => e.code(),
            LaunchError::Workspace(_) => "workspace_error",
        }
    }
}

/// Launches `invocation` through the governed launcher for `job`'s request
/// and tracks its process group for the request's cleanup
/// ([`Job::track_launch`]: under the request's process lock, inside the
/// request's cgroup where the cgroup tier may be used).
///
/// # Errors
///
/// [`LaunchError::Workspace`] with [`WorkspaceError::RootMismatch`] if
/// `options.workspace` is not the job's workspace root,
/// [`WorkspaceError::InternalPath`] if the invocation's cwd is in the
/// internal namespace, [`WorkspaceError::RequestClosed`] once cleanup
/// started; [`LaunchError::Process`] if the launcher refuses.
pub fn launch(
    job: &Job,
    invocation: Invocation,
    options: &LaunchOptions,
) -> Result<Running, LaunchError> {
    launch_with(job, invocation, options.clone())
}

/// [`launch`] with options the caller gives up (no copy of the baseline
/// environment is made).
pub(crate) fn launch_with(
    job: &Job,
    invocation: Invocation,
    #[cfg_attr(not(target_os = "linux"), allow(unused_mut))] mut options: LaunchOptions,
) -> Result<Running, LaunchError> {
    let workspace = options.workspace.clone();
    let cwd = invocation.cwd().map(|c| c.as_str().to_owned());
    let launched = job.track_launch(
        &workspace,
        cwd.as_deref(),
        options.containment,
        move |parent| {
            options.cgroup_parent = parent;
            crate::process::launch(invocation, &options)
        },
    )?;
    Ok(launched?)
}

impl RequestProcess for Running {
    fn cancel(&self) {
        Running::cancel(self);
    }

    fn settled(&self) -> SettledFuture<'_> {
        Box::pin(async move {
            // The evidence belongs to whoever launched the process; cleanup
            // only needs to know the group has settled.
            let _evidence = Running::settled(self).await;
        })
    }

    fn is_settled(&self) -> bool {
        self.try_settled().is_some()
    }
}

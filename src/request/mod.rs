//! The one owner of a request: the actor that drives it through
//! [`machine::request`], and the scope that holds what it owns.
//!
//! - [`Coordinator`] runs one actor per request ([`Coordinator::start`]):
//!   every terminal candidate, deadline, disconnect and action answer is a
//!   step of the request machine, and the actions the step returns are
//!   executed as returned (*The coordinator* below).
//! - A request's scope (crate-internal) holds its job, its processes, its
//!   spills, its shared network namespace and its cleanup's result, keyed
//!   by [`RequestId`] in one table per runtime or node.
//! - [`launch`] starts a process for a request's job: tracked for the
//!   request's cleanup and, where cgroups can be made, inside the request's
//!   cgroup (*A request's processes* below).
//!
//! This module is the orchestration layer: above the mechanisms
//! (`process`, `spill`, `workspace`), below the facade (`runtime`) and the
//! edges (see `docs/architecture.md`, *The layers*).
//!
//! # The coordinator
//!
//! Every request gets one actor task ([`Coordinator::start`]). Each input —
//! a terminal candidate reported through a [`RequestHandle`], the request
//! deadline, a caller disconnect, or the answer of an action — is committed
//! through [`step`](crate::machine::request::step) from the request's
//! committed [`State`](crate::machine::request::State), recorded in the
//! request's event log ([`TransitionRecord`]: before, event, after, actions) under the
//! same lock, and the actions the step returned are executed exactly as
//! returned:
//!
//! - `CancelProcesses` → [`ProcessControl::cancel_processes`], answered with
//!   `ExecutionStopped`;
//! - `StartCleanup` → [`WorkspaceLifecycle::cleanup_workspace`] (issued once,
//!   because the machine issues it once), answered with `CleanupFinished`;
//! - `WriteTerminal` → [`TerminalSink::write_terminal`], answered with
//!   `EndpointAcknowledged` or a `TerminalWriteFailed` candidate;
//! - `Publish` → the request's settle-once cell, answered with `Published`.
//!
//! The runtime never decides anything on its own: which cleanup runs, when,
//! and which result is final are the machine's decisions. The actor commits
//! every input but one: [`RequestHandle::workspace_opening`] commits
//! `WorkspaceOpening` itself when nothing its caller sent earlier is still
//! queued, because that event never has an action to execute; the shared
//! lock keeps the log one sequence either way.
//!
//! An action's hook is polled once where the action is executed; if it is
//! not ready at once, it goes on in its own task, bounded by the request's
//! frozen deadlines ([`RequestLimits`]), and reports back through a channel. Either
//! way its answer is committed after the external inputs already queued. A
//! missed deadline or a panicking hook becomes a typed answer, so no request
//! can hang.
//!
//! A workspace is *announced* before it is opened
//! ([`RequestHandle::workspace_opening`]): the request knows of every
//! workspace that may exist, so every terminal path cleans it, whatever
//! order a cancel, the executor's stop and the open's answer arrive in. The
//! first candidate's `CancelProcesses` reaches the edge-side executor
//! through [`RequestHandle::cancelled`] before the [`ProcessControl`] hook
//! runs; if that hook misses the frozen cleanup deadline or panics, the
//! cleanup runs anyway and the [`Completion`] says the stop was not
//! confirmed (`stop_unconfirmed`).
//!
//! Waiters ([`RequestHandle::finished`]) read the settle-once cell: early or
//! late, they all observe the same [`Completion`]. Dropping a waiter's
//! future changes nothing; dropping every handle before the request ended
//! is a caller disconnect (cancel and cleanup still run, nothing is
//! written).
//!
//! # A request's processes
//!
//! A process launched for a request is listed in the request's barrier
//! (`barrier.rs`) and, where cgroups can be made, started inside the
//! request's cgroup (made at the first such launch, and journalled in the
//! job before anything starts in it). The barrier is put on the request's
//! job, and the workspace stops it before it removes any file, whoever
//! cleans the job: so the request's processes, and everything they forked,
//! are gone first. [`launch`] joins the two mechanisms that know nothing of
//! each other: `workspace` (the job: filesystem, inventory, journal, the
//! barrier it stops) and `process` (the launcher). A workspace opened with
//! [`open_workspace`] also revives the request cgroup a dead run
//! journalled, so that its reclaim kills what is left in it first.
//!
//! The runtime's `Executor` and the wire's `WorkspaceNode` launch through
//! a request's scope, which holds the same barrier.
//!
//! ```no_run
//! use custodian::process::{Invocation, InvocationSpec, LaunchOptions};
//! use custodian::workspace::WorkspaceConfig;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let ws = custodian::request::open_workspace("/srv/agent", WorkspaceConfig::default())?;
//! let job = ws.open_request("req-1")?;
//! let inv = Invocation::validate(InvocationSpec::new("make"))?;
//! let running = custodian::request::launch(&job, inv, &LaunchOptions::new("/srv/agent"))?;
//! let evidence = running.settled().await;
//! let cleanup = ws.cleanup("req-1").await?;
//! # let _ = (evidence, cleanup);
//! # Ok(()) }
//! ```
//!
//! [`machine::request`]: crate::machine::request

mod barrier;
mod driver;
mod hooks;
pub(crate) mod scope;

pub use scope::StopHold;

pub use crate::id::{RequestId, RequestIdError};
pub use driver::{
    CODE_CANCEL_ABORTED, CODE_CANCEL_DEADLINE_EXCEEDED, CODE_CLEANUP_ABORTED,
    CODE_CLEANUP_DEADLINE_EXCEEDED, Coordinator, Effects, ExecutorHandle, OpenRefused,
    RequestHandle, RequestLimits, RequestObserver, TransitionRecord,
};
pub(crate) use hooks::cleanup_error_code;
pub use hooks::{
    Acknowledge, CODE_APPROVAL_DECLINED, CODE_APPROVAL_REQUIRED, CODE_NO_WORKSPACE_LIFECYCLE,
    CODE_POLICY_DENIED, Completion, DeniedLaunch, NoProcesses, NoWorkspace, ProcessControl,
    ProcessVerdict, TerminalSink, TerminalWriteError, WorkspaceLifecycle,
};

use crate::process::{Invocation, LaunchOptions, ProcessError, Running};
use std::path::Path;
use std::sync::Arc;

use crate::workspace::{Job, Workspace, WorkspaceConfig, WorkspaceError};
use barrier::{CgroupRevival, RequestBarrier};
use scope::ScopeLaunchError;

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

/// Launches `invocation` through the governed launcher for `job`'s request,
/// listed in the request's barrier (which the job's cleanup stops before any
/// file is removed) under the barrier's lock, inside the request's cgroup
/// where the cgroup tier may be used.
///
/// # Errors
///
/// [`LaunchError::Workspace`] with [`WorkspaceError::RootMismatch`] if
/// `options.workspace` is not the job's workspace root,
/// [`WorkspaceError::InternalPath`] if the invocation's cwd is in the
/// internal namespace, [`WorkspaceError::RequestClosed`] once cleanup
/// started, [`WorkspaceError::BarrierTaken`] if something else put another
/// kind of barrier on the job; [`LaunchError::Process`] if the launcher
/// refuses.
pub fn launch(
    job: &Job,
    invocation: Invocation,
    options: &LaunchOptions,
) -> Result<Running, LaunchError> {
    let barrier = job.barrier_or_insert(|| Arc::new(RequestBarrier::default()))?;
    match barrier.launch(Some(job), invocation, options.clone(), || false, usize::MAX) {
        Ok(running) => Ok(running),
        Err(ScopeLaunchError::Launch(e)) => Err(e),
        Err(ScopeLaunchError::Closed) => {
            Err(LaunchError::Workspace(WorkspaceError::RequestClosed {
                request: job.id().clone(),
            }))
        }
        Err(ScopeLaunchError::SessionsFull { .. }) => {
            unreachable!("no bound on sessions here")
        }
    }
}

/// Kills everything in the request cgroup of `job` (`cgroup.kill`) and
/// waits, at most the workspace's cleanup bound (at least a second), until
/// it is empty: a cancel's last step, for whatever outlived its process's
/// settlement. Returns whether it was seen empty (`true` too when the
/// request has no cgroup). Later launches of the request get a cgroup of
/// their own; the request cgroup is removed by the job's cleanup.
pub async fn kill_processes(job: &Job) -> bool {
    let bound = job.workspace().config().cleanup_bound;
    match job.barrier::<RequestBarrier>() {
        Some(barrier) => barrier.kill_cgroup(bound).await,
        // Nothing launched through this layer: no request cgroup to kill.
        None => true,
    }
}

/// Opens the workspace at `root` for requests that launch processes
/// ([`Workspace::open_with`] with the request layer's revival): its reclaim
/// kills what is left in the request cgroup a dead run journalled before
/// any of that job's files go, and keeps emptied request cgroups for the
/// next requests until it is closed.
///
/// # Errors
///
/// As [`Workspace::open`].
pub fn open_workspace(
    root: impl AsRef<Path>,
    config: WorkspaceConfig,
) -> Result<Workspace, WorkspaceError> {
    Workspace::open_with(root, config, Some(Arc::new(CgroupRevival::new())))
}

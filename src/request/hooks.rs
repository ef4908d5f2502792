//! The seams between the coordinator and the world: the workspace
//! lifecycle, process control, and the endpoint's terminal sink.
//!
//! Every hook is polled once where the coordinator issues its action, inside
//! the request's actor task: an answer ready at once is taken without a task
//! of its own. A hook must therefore not block the thread (run blocking work
//! on `spawn_blocking`, as the workspace runtime does); one that is not
//! ready at once goes on in its own task.

use std::future::Future;

use super::RequestId;
use crate::error::SafeCode;
use crate::machine::request::{CleanupVerdict, Delivery, FinalResult};

/// The optional workspace lifecycle of a request's executor.
///
/// Implemented by the workspace runtime (through an adapter) and by the
/// edge's wire client. The coordinator calls [`cleanup_workspace`] at most
/// once per request, and only if the request announced a workspace
/// ([`RequestHandle::workspace_opening`](super::RequestHandle::workspace_opening),
/// committed before the open is asked for); a request that never announced
/// one completes without any call. The call must be idempotent: the
/// announced open may never have happened (refused, or its answer lost).
///
/// A call that does not answer at once runs in its own task, and the
/// coordinator waits for it only up to the request's frozen cleanup
/// deadline; past that it records `cleanup_deadline_exceeded` and lets the
/// task finish in the background.
///
/// [`cleanup_workspace`]: WorkspaceLifecycle::cleanup_workspace
pub trait WorkspaceLifecycle: Send + Sync + 'static {
    /// Removes everything the request owns (its processes and registered
    /// artifacts) and reports how that went, as a safe code on failure.
    fn cleanup_workspace(&self, request: &RequestId)
    -> impl Future<Output = CleanupVerdict> + Send;

    /// The detail of the request's cleanup (status, counts, safe code) for
    /// its [`Completion`], if this lifecycle keeps one. Called once, when
    /// the request completes and only if the cleanup was started; it must
    /// neither block nor panic. The default keeps none.
    fn cleanup_detail(&self, _request: &RequestId) -> Option<crate::workspace::CleanupResult> {
        None
    }
}

/// Stops the executor and every process a request launched.
pub trait ProcessControl: Send + Sync + 'static {
    /// Cancels the request's executor and processes; resolves once they can
    /// no longer touch the workspace. Called at most once per request.
    fn cancel_processes(&self, request: &RequestId) -> impl Future<Output = ()> + Send;

    /// The verdict of every process the request launched, for its
    /// [`Completion`]. Called exactly once per request, when it completes
    /// (after its cleanup): an implementation may forget the request
    /// afterwards. It must neither block nor panic. The default reports
    /// none.
    fn process_verdicts(&self, _request: &RequestId) -> Vec<ProcessVerdict> {
        Vec::new()
    }

    /// Every launch of the request its policy refused, in order, for its
    /// [`Completion`]. Called once per request, when it completes, just
    /// before [`ProcessControl::process_verdicts`]; it must neither block
    /// nor panic. The default reports none.
    fn denied_launches(&self, _request: &RequestId) -> Vec<DeniedLaunch> {
        Vec::new()
    }

    /// Every result the request spilled, in order, for its [`Completion`].
    /// Called once per request, when it completes, just before
    /// [`ProcessControl::denied_launches`]: an implementation refuses any
    /// later spill of the request, so the completion lists every spill
    /// its request made. It must neither block nor panic. The default
    /// reports none.
    fn spills(&self, _request: &RequestId) -> Vec<crate::spill::Locator> {
        Vec::new()
    }
}

/// What became of one process a request launched, as its [`Completion`]
/// reports it: the safe fields of its [`Evidence`], never its output,
/// argv or environment.
///
/// [`Evidence`]: crate::process::Evidence
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ProcessVerdict {
    /// The root's pid (also its process group id).
    pub pid: u32,
    /// How it ended; `None` if it had not settled when the request
    /// completed (the cleanup then reports it unsettled and fails closed).
    pub status: Option<crate::process::evidence::ProcessStatus>,
    /// The root's exit code, if it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended the root, if one did.
    pub signal: Option<i32>,
    /// What is known about its descendants (`None` if not settled).
    pub descendants: Option<crate::process::evidence::DescendantVerdict>,
    /// The containment tier it ran in (`None` if not settled).
    pub tier: Option<crate::process::evidence::ContainmentTier>,
}

impl ProcessVerdict {
    /// The verdict of a settled process's evidence.
    pub fn from_evidence(pid: u32, ev: &crate::process::Evidence) -> Self {
        ProcessVerdict {
            pid,
            status: Some(ev.status),
            exit_code: ev.exit_code,
            signal: ev.signal,
            descendants: Some(ev.descendants.verdict),
            tier: Some(ev.descendants.tier),
        }
    }

    /// The verdict of `process` as it stands: its evidence's once settled,
    /// else [`ProcessVerdict::unsettled`].
    pub fn of(process: &crate::process::Running) -> Self {
        match process.try_settled() {
            Some(ev) => ProcessVerdict::from_evidence(process.pid(), &ev),
            None => ProcessVerdict::unsettled(process.pid()),
        }
    }

    /// The verdict of a process that had not settled.
    pub fn unsettled(pid: u32) -> Self {
        ProcessVerdict {
            pid,
            status: None,
            exit_code: None,
            signal: None,
            descendants: None,
            tier: None,
        }
    }
}

/// A launch the run policy refused, as a request's [`Completion`] reports
/// it: codes only, never the executable, its argv or its environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DeniedLaunch {
    /// [`CODE_POLICY_DENIED`], [`CODE_APPROVAL_REQUIRED`] or
    /// [`CODE_APPROVAL_DECLINED`].
    pub code: SafeCode,
    /// The policy reason's code (`denied_by_rule`, `default_decision`,
    /// `not_exposed`, `untrusted_shell_requires_approval`, …; see
    /// [`Reason::code`](crate::policy::Reason::code)).
    pub reason: SafeCode,
    /// The index into the policy's `policy.rules` of the rule that decided,
    /// if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<usize>,
}

impl DeniedLaunch {
    /// A refusal with `code`, decided by the policy for `reason`.
    pub const fn new(code: SafeCode, reason: &crate::policy::Reason) -> Self {
        DeniedLaunch {
            code,
            reason: SafeCode::new(reason.code()),
            rule: reason.rule(),
        }
    }
}

/// The code of a launch the run policy denied.
pub const CODE_POLICY_DENIED: SafeCode = SafeCode::new("policy_denied");
/// The code of a launch the run policy requires an approval for.
pub const CODE_APPROVAL_REQUIRED: SafeCode = SafeCode::new("approval_required");
/// The code of a launch whose approval was asked for and not given (the
/// user declined, or the client could not answer).
pub const CODE_APPROVAL_DECLINED: SafeCode = SafeCode::new("approval_declined");

/// The endpoint that receives a request's terminal result.
pub trait TerminalSink: Send + Sync + 'static {
    /// Writes the terminal result to the caller and resolves once the
    /// endpoint acknowledged it.
    ///
    /// # Errors
    ///
    /// [`TerminalWriteError`] when the write failed; the coordinator then
    /// records a `terminal_write_failed` candidate and still completes.
    fn write_terminal(
        &self,
        request: &RequestId,
        result: &FinalResult,
    ) -> impl Future<Output = Result<(), TerminalWriteError>> + Send;
}

/// A terminal write that failed; carries only a safe code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("writing the terminal result failed: {code}")]
pub struct TerminalWriteError {
    /// Why, safely.
    pub code: SafeCode,
}

/// A lifecycle for executors that never open a workspace. Its cleanup is
/// never called by a correct runtime; if a request nevertheless announces a
/// workspace, cleanup fails with `no_workspace_lifecycle` rather
/// than pretending the workspace was cleaned.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoWorkspace;

/// The code of a workspace reported as opened with no lifecycle to clean it.
pub const CODE_NO_WORKSPACE_LIFECYCLE: SafeCode = SafeCode::new("no_workspace_lifecycle");

impl WorkspaceLifecycle for NoWorkspace {
    async fn cleanup_workspace(&self, _request: &RequestId) -> CleanupVerdict {
        CleanupVerdict::Failed(CODE_NO_WORKSPACE_LIFECYCLE)
    }
}

/// A terminal sink that acknowledges every write at once: for a caller
/// that reads the request's [`Completion`] itself (the runtime's
/// `Request::finished`, `custodian run`, which writes its evidence once the
/// request completed).
#[derive(Clone, Copy, Debug, Default)]
pub struct Acknowledge;

impl TerminalSink for Acknowledge {
    async fn write_terminal(
        &self,
        _request: &RequestId,
        _result: &FinalResult,
    ) -> Result<(), TerminalWriteError> {
        Ok(())
    }
}

/// Process control for executors with nothing to cancel.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProcesses;

impl ProcessControl for NoProcesses {
    async fn cancel_processes(&self, _request: &RequestId) {}
}

/// What every waiter of a request observes once it completed.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Completion {
    /// The request.
    pub request_id: RequestId,
    /// The merged final result.
    pub result: FinalResult,
    /// How the terminal reached (or did not reach) the caller.
    pub delivery: Delivery,
    /// Why the executor's stop was not confirmed before the cleanup ran, if
    /// it was not: `cancel_deadline_exceeded` (the cancel hook did not answer
    /// by the frozen cleanup deadline) or `cancel_aborted` (it panicked).
    /// The cleanup ran either way.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_unconfirmed: Option<SafeCode>,
    /// The detail of the workspace cleanup (status, counts, safe code; never
    /// a path), when one ran and the lifecycle keeps it
    /// ([`WorkspaceLifecycle::cleanup_detail`]). `result.cleanup` is the
    /// merged summary either way.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cleanup: Option<crate::workspace::CleanupResult>,
    /// Each process the request launched, in launch order
    /// ([`ProcessControl::process_verdicts`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<ProcessVerdict>,
    /// Each launch the run policy refused, in order
    /// ([`ProcessControl::denied_launches`]): nothing was started for them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub denied: Vec<DeniedLaunch>,
    /// Each result the request spilled, in order
    /// ([`ProcessControl::spills`]); a locator names where the bytes are,
    /// never what they hold.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub spills: Vec<crate::spill::Locator>,
}

/// The workspace runtime is a lifecycle: its cleanup is already elected once
/// per request; a clean or already-gone job is `Ok`, a fail-closed cleanup
/// carries its safe code.
impl WorkspaceLifecycle for crate::workspace::Workspace {
    async fn cleanup_workspace(&self, request: &RequestId) -> CleanupVerdict {
        match self.cleanup(request.as_str()).await {
            Ok(r) => r.verdict(),
            Err(e) => CleanupVerdict::Failed(cleanup_error_code(&e)),
        }
    }

    fn cleanup_detail(&self, request: &RequestId) -> Option<crate::workspace::CleanupResult> {
        self.cleanup_result(request)
    }
}

/// The code of a cleanup the workspace refused to run: `workspace_closed`
/// once [`Workspace::close`](crate::workspace::Workspace::close) released
/// it (the result was no longer cached), else `invalid_request_id`.
pub(crate) fn cleanup_error_code(e: &crate::workspace::WorkspaceError) -> SafeCode {
    match e {
        crate::workspace::WorkspaceError::Closed => SafeCode::new("workspace_closed"),
        _ => SafeCode::new("invalid_request_id"),
    }
}

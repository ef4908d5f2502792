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
use crate::machine::request::{CleanupResult, Delivery, FinalResult};

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
    fn cleanup_workspace(&self, request: &RequestId) -> impl Future<Output = CleanupResult> + Send;
}

/// Stops the executor and every process a request launched.
pub trait ProcessControl: Send + Sync + 'static {
    /// Cancels the request's executor and processes; resolves once they can
    /// no longer touch the workspace. Called at most once per request.
    fn cancel_processes(&self, request: &RequestId) -> impl Future<Output = ()> + Send;
}

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
    async fn cleanup_workspace(&self, _request: &RequestId) -> CleanupResult {
        CleanupResult::Failed(CODE_NO_WORKSPACE_LIFECYCLE)
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
}

/// The workspace runtime is a lifecycle: its cleanup is already elected once
/// per request; a clean or already-gone job is `Ok`, a fail-closed cleanup
/// carries its safe code.
impl WorkspaceLifecycle for crate::workspace::Workspace {
    async fn cleanup_workspace(&self, request: &RequestId) -> CleanupResult {
        match self.cleanup(request.as_str()).await {
            Ok(r) if r.status == crate::workspace::CleanupStatus::Failed => {
                CleanupResult::Failed(r.safe_code().unwrap_or(CODE_WORKSPACE_CLEANUP_FAILED))
            }
            Ok(_) => CleanupResult::Ok,
            Err(_) => CleanupResult::Failed(SafeCode::new("invalid_request_id")),
        }
    }
}

/// The code of a failed workspace cleanup that named no reason.
pub const CODE_WORKSPACE_CLEANUP_FAILED: SafeCode = SafeCode::new("workspace_cleanup_failed");

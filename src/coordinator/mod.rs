//! Drives each request end to end through [`machine::request`].
//!
//! # Theory of operation
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
//! [`machine::request`]: crate::machine::request

mod driver;
mod hooks;

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

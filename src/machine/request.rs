//! The request machine: `Open → Finalizing → Cleaning → Writing → Acknowledged → Completed`.
//!
//! # Theory of operation
//!
//! A request runs until the first *terminal candidate* arrives: the
//! executor's success or error, the request timeout, a caller cancel, a caller
//! disconnect, or a failed write to the caller. Candidates race and repeat;
//! the first one fixes the [primary outcome](State::primary) for good and every
//! later one is only [recorded](State::duplicates).
//!
//! From there the request *finalizes*:
//!
//! 1. **Finalizing** — the primary outcome is fixed and
//!    [`Action::CancelProcesses`] has been issued. The machine waits for
//!    [`Event::ExecutionStopped`] so that cleanup never races an executor that
//!    can still create files, and so that no request completes before every
//!    process it launched settled. A success or an executor error waits too:
//!    it proves the executor returned, not that a process it started (a
//!    session, left running on purpose) is gone.
//! 2. **Cleaning** — if a workspace was announced ([`Event::WorkspaceOpening`],
//!    committed *before* the executor asks for it, so it may or may not
//!    exist), [`Action::StartCleanup`] is issued exactly once and the machine
//!    waits for [`Event::CleanupFinished`]; the cleanup is idempotent, so a
//!    workspace whose open never happened is simply found gone. If none was
//!    announced, cleanup is recorded as [`CleanupReport::NotNeeded`] and this
//!    phase is skipped.
//! 3. **Writing** — the outcome and the cleanup result are merged into the
//!    [`FinalResult`] ([`FinalResult::merge`]: success + cleanup failure is a
//!    failure; a failure or cancel keeps its category and carries the safe
//!    cleanup code), and [`Action::WriteTerminal`] asks the runtime to send
//!    it to the caller. A caller that has disconnected gets nothing written:
//!    this phase is skipped.
//! 4. **Acknowledged** — the endpoint acknowledged the terminal (or the write
//!    failed, or the caller was gone): delivery is settled and
//!    [`Action::Publish`] hands the final result to every waiter, once.
//! 5. **Completed** — the runtime confirmed the publication
//!    ([`Event::Published`]). Completed is absorbing: the result never
//!    changes, and later events are only recorded.
//!
//! [`step`] is pure: it never reads a clock (`now` is an input, recorded in
//! the [`Timeline`]) and never acts; it returns the next [`State`] and the
//! [`Action`]s the runtime must perform, in order. Events that make no sense
//! in the current phase (a cleanup result nobody asked for, an
//! acknowledgement without a write) change nothing but a counter
//! ([`State::unexpected`]).
//!
//! # Contract with the runtime
//!
//! - Feed every event through [`step`], one at a time, and execute the
//!   returned actions in order before feeding the next event.
//! - Commit [`Event::WorkspaceOpening`] *before* asking anything to open the
//!   workspace, and open it only if the machine accepted the announcement
//!   ([`accepts_workspace`] on the state it was committed in: the request is
//!   open or finalizing). Then whatever happens next — a cancel, a timeout,
//!   a lost open answer — the request's one cleanup covers the workspace.
//!   An announcement in any later phase is refused
//!   ([`State::open_refused`]): cleanup was already started or decided "not
//!   needed", so the workspace must not be opened at all.
//! - Answer [`Action::CancelProcesses`] with [`Event::ExecutionStopped`] once
//!   the executor can no longer touch the workspace and every process the
//!   request launched settled, [`Action::StartCleanup`]
//!   with exactly one [`Event::CleanupFinished`], [`Action::WriteTerminal`]
//!   with [`Event::EndpointAcknowledged`] or
//!   [`Candidate::TerminalWriteFailed`], and [`Action::Publish`] with
//!   [`Event::Published`].
//!
//! # Examples
//!
//! ```
//! use std::time::Instant;
//! use custodian::machine::request::{step, Action, Candidate, CleanupVerdict, Event, Phase, State, RequestStatus};
//!
//! let t = Instant::now();
//! let s = State::new(t);
//! let s = step(&s, Event::WorkspaceOpening, t).next;
//! let tr = step(&s, Event::Candidate(Candidate::Success), t);
//! assert_eq!(tr.actions, [Action::CancelProcesses]);
//! let tr = step(&tr.next, Event::ExecutionStopped, t);
//! assert_eq!(tr.actions, [Action::StartCleanup]);
//! let tr = step(&tr.next, Event::CleanupFinished(CleanupVerdict::Cleaned), t);
//! let Action::WriteTerminal(result) = tr.actions[0] else { unreachable!() };
//! assert_eq!(result.status(), RequestStatus::Succeeded);
//! let tr = step(&tr.next, Event::EndpointAcknowledged, t);
//! assert_eq!(tr.actions, [Action::Publish(result)]);
//! let done = step(&tr.next, Event::Published, t).next;
//! assert!(matches!(done.phase(), Phase::Completed { .. }));
//! ```

use std::time::Instant;

use serde::Serialize;

pub use super::cleanup::CleanupVerdict;
use crate::error::SafeCode;

/// Safe code of a request that ended because the request deadline passed.
pub const CODE_REQUEST_TIMEOUT: SafeCode = SafeCode::new("request_timeout");
/// Safe code of a request the caller cancelled.
pub const CODE_CALLER_CANCELLED: SafeCode = SafeCode::new("caller_cancelled");
/// Safe code of a request whose caller disconnected.
pub const CODE_CALLER_DISCONNECTED: SafeCode = SafeCode::new("caller_disconnected");
/// Safe code of a request that ended because a write to the caller failed.
pub const CODE_TERMINAL_WRITE_FAILED: SafeCode = SafeCode::new("terminal_write_failed");
/// Safe code of a successful request turned into a failure by its cleanup.
pub const CODE_CLEANUP_FAILED: SafeCode = SafeCode::new("cleanup_failed");

/// A terminal candidate: something that can end a request.
///
/// Candidates race; the first one to reach [`step`] becomes the primary
/// outcome, later ones (of any kind, the same kind included) are recorded as
/// duplicates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Candidate {
    /// The executor returned a result.
    Success,
    /// The executor returned an error, described by a safe code.
    ExecutorError {
        /// What went wrong, safe for the wire.
        code: SafeCode,
    },
    /// The request deadline passed.
    Timeout,
    /// The caller asked to cancel.
    CallerCancel,
    /// The caller went away; nothing can be written to it any more.
    CallerDisconnect,
    /// Writing to the caller failed.
    TerminalWriteFailed,
}

impl Candidate {
    /// The kind of this candidate, without its data.
    pub const fn kind(self) -> CandidateKind {
        match self {
            Candidate::Success => CandidateKind::Success,
            Candidate::ExecutorError { .. } => CandidateKind::ExecutorError,
            Candidate::Timeout => CandidateKind::Timeout,
            Candidate::CallerCancel => CandidateKind::CallerCancel,
            Candidate::CallerDisconnect => CandidateKind::CallerDisconnect,
            Candidate::TerminalWriteFailed => CandidateKind::TerminalWriteFailed,
        }
    }

    /// The status this candidate gives a request whose cleanup did not fail.
    pub const fn status(self) -> RequestStatus {
        match self {
            Candidate::Success => RequestStatus::Succeeded,
            Candidate::ExecutorError { .. } | Candidate::TerminalWriteFailed => {
                RequestStatus::Failed
            }
            Candidate::Timeout => RequestStatus::TimedOut,
            Candidate::CallerCancel | Candidate::CallerDisconnect => RequestStatus::Cancelled,
        }
    }
}

/// The kind of a [`Candidate`], without its data; indexes [`Duplicates`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CandidateKind {
    /// [`Candidate::Success`].
    Success,
    /// [`Candidate::ExecutorError`].
    ExecutorError,
    /// [`Candidate::Timeout`].
    Timeout,
    /// [`Candidate::CallerCancel`].
    CallerCancel,
    /// [`Candidate::CallerDisconnect`].
    CallerDisconnect,
    /// [`Candidate::TerminalWriteFailed`].
    TerminalWriteFailed,
}

impl CandidateKind {
    /// Every kind, in declaration order.
    pub const ALL: [CandidateKind; 6] = [
        CandidateKind::Success,
        CandidateKind::ExecutorError,
        CandidateKind::Timeout,
        CandidateKind::CallerCancel,
        CandidateKind::CallerDisconnect,
        CandidateKind::TerminalWriteFailed,
    ];
}

/// The final category of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestStatus {
    /// The executor succeeded and the cleanup (if any) succeeded.
    Succeeded,
    /// The executor failed, the terminal write failed, or a success's
    /// cleanup failed.
    Failed,
    /// The request deadline passed first.
    TimedOut,
    /// The caller cancelled or disconnected first.
    Cancelled,
}

/// The cleanup part of a [`FinalResult`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum CleanupReport {
    /// No workspace was announced, so nothing was cleaned.
    NotNeeded,
    /// The workspace cleanup ran and nothing of the request remains
    /// (`"cleaned"`, the spelling of a successful cleanup everywhere: the
    /// cleanup's own detail then says `cleaned`, `already_gone` or
    /// `reclaimed`).
    Cleaned,
    /// The workspace cleanup ran and failed closed.
    Failed {
        /// Why, safely.
        code: SafeCode,
    },
}

impl From<CleanupVerdict> for CleanupReport {
    /// Every clean verdict (`cleaned`, `already_gone`, `reclaimed`) is
    /// [`CleanupReport::Cleaned`]: nothing of the request remains.
    fn from(v: CleanupVerdict) -> Self {
        match v.code() {
            None => CleanupReport::Cleaned,
            Some(code) => CleanupReport::Failed { code },
        }
    }
}

/// The one result a request ends with; every waiter observes the same value.
///
/// Serialized as
/// `{"status":"failed","primary":{"kind":"success"},"cleanup":{"status":"failed","code":"symlink_in_job"},"error_code":"cleanup_failed"}`
/// (`error_code` is absent on success).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct FinalResult {
    status: RequestStatus,
    primary: Candidate,
    cleanup: CleanupReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    error_code: Option<SafeCode>,
}

impl FinalResult {
    /// Merges the primary outcome with the cleanup report.
    ///
    /// A success whose cleanup failed becomes [`RequestStatus::Failed`] with
    /// [`CODE_CLEANUP_FAILED`]; any other outcome keeps its status and code,
    /// the cleanup's own code travelling in [`cleanup`](Self::cleanup) as
    /// evidence.
    pub const fn merge(primary: Candidate, cleanup: CleanupReport) -> Self {
        let cleanup_failed = matches!(cleanup, CleanupReport::Failed { .. });
        let (status, error_code) = match primary {
            Candidate::Success if cleanup_failed => {
                (RequestStatus::Failed, Some(CODE_CLEANUP_FAILED))
            }
            Candidate::Success => (RequestStatus::Succeeded, None),
            Candidate::ExecutorError { code } => (RequestStatus::Failed, Some(code)),
            Candidate::Timeout => (RequestStatus::TimedOut, Some(CODE_REQUEST_TIMEOUT)),
            Candidate::CallerCancel => (RequestStatus::Cancelled, Some(CODE_CALLER_CANCELLED)),
            Candidate::CallerDisconnect => {
                (RequestStatus::Cancelled, Some(CODE_CALLER_DISCONNECTED))
            }
            Candidate::TerminalWriteFailed => {
                (RequestStatus::Failed, Some(CODE_TERMINAL_WRITE_FAILED))
            }
        };
        FinalResult {
            status,
            primary,
            cleanup,
            error_code,
        }
    }

    /// The request's final category.
    pub const fn status(&self) -> RequestStatus {
        self.status
    }

    /// The candidate that arrived first.
    pub const fn primary(&self) -> Candidate {
        self.primary
    }

    /// What the cleanup did.
    pub const fn cleanup(&self) -> CleanupReport {
        self.cleanup
    }

    /// Why the request did not succeed, if it did not.
    pub const fn error_code(&self) -> Option<SafeCode> {
        self.error_code
    }
}

/// How the terminal result reached (or did not reach) the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// The endpoint acknowledged the terminal result.
    Acknowledged,
    /// Writing the terminal result failed.
    WriteFailed,
    /// The caller was gone; nothing was written, or the write was never
    /// acknowledged.
    CallerGone,
}

/// Where a request is in its lifecycle; see the [module docs](self).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// Running; no terminal candidate yet.
    Open,
    /// The primary outcome is fixed; waiting for the executor to stop.
    Finalizing {
        /// The first candidate.
        primary: Candidate,
    },
    /// The workspace cleanup is running.
    Cleaning {
        /// The first candidate.
        primary: Candidate,
    },
    /// The terminal result was handed to the endpoint; waiting for its
    /// acknowledgement.
    Writing {
        /// The merged final result.
        result: FinalResult,
    },
    /// Delivery is settled; the final result is being published.
    Acknowledged {
        /// The merged final result.
        result: FinalResult,
        /// How delivery settled.
        delivery: Delivery,
    },
    /// Absorbing: the final result is published and never changes.
    Completed {
        /// The merged final result.
        result: FinalResult,
        /// How delivery settled.
        delivery: Delivery,
    },
}

impl Phase {
    /// The phase's name as the lifecycle spells it: `open`, `finalizing`,
    /// `cleaning`, `writing`, `acknowledged`, `completed`.
    pub const fn name(&self) -> &'static str {
        match self {
            Phase::Open => "open",
            Phase::Finalizing { .. } => "finalizing",
            Phase::Cleaning { .. } => "cleaning",
            Phase::Writing { .. } => "writing",
            Phase::Acknowledged { .. } => "acknowledged",
            Phase::Completed { .. } => "completed",
        }
    }
}

/// Candidates that arrived after the primary one, counted per kind
/// (saturating).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Duplicates([u32; 6]);

impl Duplicates {
    /// How many candidates of `kind` arrived after the primary one.
    pub const fn count(&self, kind: CandidateKind) -> u32 {
        self.0[kind as usize]
    }

    /// How many candidates arrived after the primary one, all kinds.
    pub fn total(&self) -> u64 {
        self.0.iter().map(|&n| u64::from(n)).sum()
    }

    fn record(&mut self, kind: CandidateKind) {
        let n = &mut self.0[kind as usize];
        *n = n.saturating_add(1);
    }
}

/// When the request passed its milestones, as the runtime's `now` said.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Timeline {
    /// When the request was opened ([`State::new`]).
    pub opened_at: Instant,
    /// When the primary outcome was fixed.
    pub decided_at: Option<Instant>,
    /// When the request completed.
    pub completed_at: Option<Instant>,
}

/// The whole state of one request. Build it with [`State::new`] and advance
/// it only with [`step`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct State {
    phase: Phase,
    workspace: bool,
    open_refused: bool,
    caller_gone: bool,
    duplicates: Duplicates,
    unexpected: u32,
    timeline: Timeline,
}

impl State {
    /// A freshly opened request.
    pub const fn new(now: Instant) -> Self {
        State {
            phase: Phase::Open,
            workspace: false,
            open_refused: false,
            caller_gone: false,
            duplicates: Duplicates([0; 6]),
            unexpected: 0,
            timeline: Timeline {
                opened_at: now,
                decided_at: None,
                completed_at: None,
            },
        }
    }

    /// The lifecycle phase and the data it carries.
    pub const fn phase(&self) -> Phase {
        self.phase
    }

    /// The first candidate, once one arrived.
    pub const fn primary(&self) -> Option<Candidate> {
        match self.phase {
            Phase::Open => None,
            Phase::Finalizing { primary } | Phase::Cleaning { primary } => Some(primary),
            Phase::Writing { result }
            | Phase::Acknowledged { result, .. }
            | Phase::Completed { result, .. } => Some(result.primary),
        }
    }

    /// The final result, once cleanup has finished (or was not needed).
    pub const fn result(&self) -> Option<FinalResult> {
        match self.phase {
            Phase::Open | Phase::Finalizing { .. } | Phase::Cleaning { .. } => None,
            Phase::Writing { result }
            | Phase::Acknowledged { result, .. }
            | Phase::Completed { result, .. } => Some(result),
        }
    }

    /// Whether the request reached [`Phase::Completed`].
    pub const fn is_completed(&self) -> bool {
        matches!(self.phase, Phase::Completed { .. })
    }

    /// Whether a workspace was announced ([`Event::WorkspaceOpening`])
    /// while the request could still clean it: from then on, the request's
    /// cleanup covers it whether or not its open happened.
    pub const fn workspace_announced(&self) -> bool {
        self.workspace
    }

    /// Whether an [`Event::WorkspaceOpening`] arrived once the cleanup had
    /// started or been decided "not needed" and was refused: the runtime
    /// must not open that workspace.
    pub const fn open_refused(&self) -> bool {
        self.open_refused
    }

    /// Whether a [`Candidate::CallerDisconnect`] arrived (first or later).
    pub const fn caller_gone(&self) -> bool {
        self.caller_gone
    }

    /// Candidates recorded after the primary one.
    pub const fn duplicates(&self) -> Duplicates {
        self.duplicates
    }

    /// How many events arrived that mean nothing in the phase they arrived
    /// in (saturating); they changed nothing else.
    pub const fn unexpected(&self) -> u32 {
        self.unexpected
    }

    /// When the request passed its milestones.
    pub const fn timeline(&self) -> Timeline {
        self.timeline
    }
}

/// An input to the request machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Event {
    /// A terminal candidate; may arrive repeatedly, in any phase.
    Candidate(Candidate),
    /// The executor is about to open the request's workspace. Committed
    /// before the open is asked for, so the request knows of every
    /// workspace that may exist; accepted only while [`accepts_workspace`].
    WorkspaceOpening,
    /// The executor has stopped and can no longer touch the workspace, and
    /// every process the request launched settled.
    ExecutionStopped,
    /// The cleanup started by [`Action::StartCleanup`] finished.
    CleanupFinished(CleanupVerdict),
    /// The endpoint acknowledged the terminal result.
    EndpointAcknowledged,
    /// The runtime has published the result of [`Action::Publish`] to every
    /// waiter.
    Published,
}

/// What the runtime must do; returned by [`step`], never performed by it.
#[must_use = "an action the runtime must perform"]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    /// Cancel the executor and every process the request launched; answer
    /// with [`Event::ExecutionStopped`]. Idempotent.
    CancelProcesses,
    /// Run the workspace cleanup, once; answer with
    /// [`Event::CleanupFinished`].
    StartCleanup,
    /// Send this terminal result to the caller; answer with
    /// [`Event::EndpointAcknowledged`] or [`Candidate::TerminalWriteFailed`].
    WriteTerminal(FinalResult),
    /// Make this final result visible to every waiter; answer with
    /// [`Event::Published`].
    Publish(FinalResult),
}

/// The outcome of one [`step`]: the next state and the actions to perform,
/// in order.
#[must_use = "the next state must be stored and the actions performed"]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The state after the event.
    pub next: State,
    /// What the runtime must do, in order (at most two).
    pub actions: Vec<Action>,
}

/// Advances `state` by `event` at time `now`. Pure: no clock, no I/O.
///
/// See the [module docs](self) for the lifecycle and the runtime's side of
/// the contract.
pub fn step(state: &State, event: Event, now: Instant) -> Transition {
    let mut next = *state;
    let mut actions = Vec::new();
    match event {
        Event::Candidate(c) => on_candidate(&mut next, c, now, &mut actions),
        Event::WorkspaceOpening => {
            if accepts_workspace(state) {
                next.workspace = true;
            } else {
                next.open_refused = true;
            }
        }
        Event::ExecutionStopped => match next.phase {
            Phase::Finalizing { primary } => executor_done(&mut next, primary, &mut actions),
            // Stopping before any candidate means the runtime lost the
            // executor's result; it must report one first.
            Phase::Open => next.unexpected = next.unexpected.saturating_add(1),
            // Already known: a success or executor error proved it.
            Phase::Cleaning { .. }
            | Phase::Writing { .. }
            | Phase::Acknowledged { .. }
            | Phase::Completed { .. } => {}
        },
        Event::CleanupFinished(r) => match next.phase {
            Phase::Cleaning { primary } => cleanup_done(&mut next, primary, r.into(), &mut actions),
            Phase::Open
            | Phase::Finalizing { .. }
            | Phase::Writing { .. }
            | Phase::Acknowledged { .. }
            | Phase::Completed { .. } => next.unexpected = next.unexpected.saturating_add(1),
        },
        Event::EndpointAcknowledged => match next.phase {
            Phase::Writing { result } => {
                deliver(&mut next, result, Delivery::Acknowledged, &mut actions)
            }
            Phase::Open
            | Phase::Finalizing { .. }
            | Phase::Cleaning { .. }
            | Phase::Acknowledged { .. }
            | Phase::Completed { .. } => next.unexpected = next.unexpected.saturating_add(1),
        },
        Event::Published => match next.phase {
            Phase::Acknowledged { result, delivery } => {
                next.phase = Phase::Completed { result, delivery };
                next.timeline.completed_at = Some(now);
            }
            Phase::Open
            | Phase::Finalizing { .. }
            | Phase::Cleaning { .. }
            | Phase::Writing { .. }
            | Phase::Completed { .. } => next.unexpected = next.unexpected.saturating_add(1),
        },
    }
    Transition { next, actions }
}

fn on_candidate(next: &mut State, c: Candidate, now: Instant, actions: &mut Vec<Action>) {
    if c == Candidate::CallerDisconnect {
        next.caller_gone = true;
    }
    match next.phase {
        Phase::Open => {
            next.timeline.decided_at = Some(now);
            actions.push(Action::CancelProcesses);
            // Even a success waits for the answer: the executor returned,
            // but a process it started (a session) may still run, and no
            // request completes before every process of it settled.
            next.phase = Phase::Finalizing { primary: c };
        }
        Phase::Finalizing { .. } => {
            next.duplicates.record(c.kind());
        }
        Phase::Writing { result } => {
            next.duplicates.record(c.kind());
            match c {
                Candidate::CallerDisconnect => deliver(next, result, Delivery::CallerGone, actions),
                Candidate::TerminalWriteFailed => {
                    deliver(next, result, Delivery::WriteFailed, actions)
                }
                Candidate::Success
                | Candidate::ExecutorError { .. }
                | Candidate::Timeout
                | Candidate::CallerCancel => {}
            }
        }
        Phase::Cleaning { .. } | Phase::Acknowledged { .. } | Phase::Completed { .. } => {
            next.duplicates.record(c.kind());
        }
    }
}

/// Whether a [`Event::WorkspaceOpening`] committed in `state` is accepted:
/// only while the request is open or finalizing, i.e. before its cleanup
/// has started or been decided "not needed". A runtime opens the workspace
/// only after an accepted announcement.
pub const fn accepts_workspace(state: &State) -> bool {
    match state.phase {
        Phase::Open | Phase::Finalizing { .. } => true,
        Phase::Cleaning { .. }
        | Phase::Writing { .. }
        | Phase::Acknowledged { .. }
        | Phase::Completed { .. } => false,
    }
}

/// The executor can no longer touch the workspace: clean it, or skip.
fn executor_done(next: &mut State, primary: Candidate, actions: &mut Vec<Action>) {
    if next.workspace {
        next.phase = Phase::Cleaning { primary };
        actions.push(Action::StartCleanup);
    } else {
        cleanup_done(next, primary, CleanupReport::NotNeeded, actions);
    }
}

/// Cleanup is settled: merge, then write the terminal unless the caller is
/// gone.
fn cleanup_done(
    next: &mut State,
    primary: Candidate,
    cleanup: CleanupReport,
    actions: &mut Vec<Action>,
) {
    let result = FinalResult::merge(primary, cleanup);
    if next.caller_gone {
        deliver(next, result, Delivery::CallerGone, actions);
    } else {
        next.phase = Phase::Writing { result };
        actions.push(Action::WriteTerminal(result));
    }
}

fn deliver(next: &mut State, result: FinalResult, delivery: Delivery, actions: &mut Vec<Action>) {
    next.phase = Phase::Acknowledged { result, delivery };
    actions.push(Action::Publish(result));
}

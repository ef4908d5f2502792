//! The request model: the real [`custodian::machine::request::step`] driven
//! by an adversarial environment.
//!
//! The environment fires every terminal candidate once (success twice: the
//! duplicate callback), announces the workspace once — while the executor
//! runs, or *after* it stopped or returned (a stray executor: the late-open
//! race) — and opens it only if the machine accepted the announcement,
//! answers each action the machine returns (stop after cancel, cleanup ok or
//! failed after start, acknowledgement after a write, confirmation after a
//! publish), and lets `waiters` interchangeable waiters subscribe at any
//! moment and observe the published result once there is one. The checker
//! explores every interleaving of those events.
//!
//! Publication goes through the real [`SettleOnce`]: each `Publish` action
//! settles a cell rebuilt from the state (the state must be a plain value),
//! and a waiter observes what that cell yields; the property then compares
//! the observation with the machine's own result, so a machine that
//! published something other than its result would be caught.
//!
//! The environment records what the machine made it do (how many cleanups,
//! writes and publications, and whether any came too early) so the
//! properties can be stated over plain state.

use std::fmt;
use std::time::Instant;

use custodian::error::SafeCode;
use custodian::machine::request::{
    self, Action, Candidate, CleanupReport, CleanupVerdict, Delivery, Event, FinalResult, Phase,
    RequestStatus,
};
use custodian::sync::SettleOnce;
use stateright::{Model, Property};

const EXEC_CODE: SafeCode = SafeCode::new("executor_failed");
const CLEAN_CODE: SafeCode = SafeCode::new("symlink_in_job");

/// The seam the model is generic over: the real step function, or a broken
/// variant that wraps it.
pub trait RequestStep: Send + Sync + 'static {
    /// A short name for reports.
    fn name(&self) -> &'static str;
    /// The property this variant is meant to break (`None` for the real
    /// machine).
    fn breaks(&self) -> Option<&'static str>;
    /// One step of the machine.
    fn step(&self, state: &request::State, event: Event, now: Instant) -> request::Transition;
    /// Whether a workspace announced in `state` is accepted (the
    /// environment opens it only then).
    fn accepts_workspace(&self, state: &request::State) -> bool {
        request::accepts_workspace(state)
    }
}

/// The real machine, unaltered.
#[derive(Clone, Copy, Debug, Default)]
pub struct Real;

impl RequestStep for Real {
    fn name(&self) -> &'static str {
        "request"
    }
    fn breaks(&self) -> Option<&'static str> {
        None
    }
    fn step(&self, state: &request::State, event: Event, now: Instant) -> request::Transition {
        request::step(state, event, now)
    }
}

/// Deliberately broken variants of the request machine, each wrapping the
/// real step function and altering one decision.
pub mod broken {
    use super::*;

    /// Starts cleanup again when a duplicate candidate arrives during
    /// cleanup — the bug of a cleanup owner that is not elected once.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct DoubleCleanup;

    impl RequestStep for DoubleCleanup {
        fn name(&self) -> &'static str {
            "request/broken/double-cleanup"
        }
        fn breaks(&self) -> Option<&'static str> {
            Some(AT_MOST_ONE_CLEANUP)
        }
        fn step(&self, state: &request::State, event: Event, now: Instant) -> request::Transition {
            let mut tr = request::step(state, event, now);
            if matches!(state.phase(), Phase::Cleaning { .. })
                && matches!(event, Event::Candidate(_))
            {
                tr.actions.push(Action::StartCleanup);
            }
            tr
        }
    }

    /// Skips waiting for the cleanup: pretends it succeeded the moment it is
    /// started, so the result is written and published while cleanup has not
    /// even run.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct CompleteBeforeCleanup;

    impl RequestStep for CompleteBeforeCleanup {
        fn name(&self) -> &'static str {
            "request/broken/complete-before-cleanup"
        }
        fn breaks(&self) -> Option<&'static str> {
            Some(COMPLETED_ONLY_AFTER_CLEANUP)
        }
        fn step(&self, state: &request::State, event: Event, now: Instant) -> request::Transition {
            let mut tr = request::step(state, event, now);
            if let Some(i) = tr.actions.iter().position(|a| *a == Action::StartCleanup) {
                let _skipped = tr.actions.remove(i);
                let skip = request::step(
                    &tr.next,
                    Event::CleanupFinished(CleanupVerdict::Cleaned),
                    now,
                );
                tr.next = skip.next;
                tr.actions.extend(skip.actions);
            }
            tr
        }
    }

    /// Starts the cleanup as soon as the request finalizes with a workspace,
    /// without waiting for the executor to stop — the bug of a runtime that
    /// synthesizes the stop (or skips it) while the executor can still
    /// write into the workspace.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct CleanupBeforeStop;

    impl RequestStep for CleanupBeforeStop {
        fn name(&self) -> &'static str {
            "request/broken/cleanup-before-stop"
        }
        fn breaks(&self) -> Option<&'static str> {
            Some(CLEANUP_AFTER_STOP)
        }
        fn step(&self, state: &request::State, event: Event, now: Instant) -> request::Transition {
            let mut tr = request::step(state, event, now);
            if matches!(tr.next.phase(), Phase::Finalizing { .. }) && tr.next.workspace_announced()
            {
                let skip = request::step(&tr.next, Event::ExecutionStopped, now);
                tr.next = skip.next;
                tr.actions.extend(skip.actions);
            }
            tr
        }
    }

    /// Takes a success or an executor error as proof that the request's
    /// processes stopped and goes on at once — the machine before sessions,
    /// when a success skipped the wait for `ExecutionStopped`: a process
    /// the executor left running (a session) outlived the completion.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct SuccessSkipsStop;

    impl RequestStep for SuccessSkipsStop {
        fn name(&self) -> &'static str {
            "request/broken/success-skips-stop"
        }
        fn breaks(&self) -> Option<&'static str> {
            Some(PUBLISHED_AFTER_STOP)
        }
        fn step(&self, state: &request::State, event: Event, now: Instant) -> request::Transition {
            let mut tr = request::step(state, event, now);
            let returned = matches!(
                event,
                Event::Candidate(Candidate::Success | Candidate::ExecutorError { .. })
            );
            if returned && matches!(tr.next.phase(), Phase::Finalizing { .. }) {
                let skip = request::step(&tr.next, Event::ExecutionStopped, now);
                tr.next = skip.next;
                tr.actions.extend(skip.actions);
            }
            tr
        }
    }

    /// Accepts a workspace announced after the cleanup was decided, without
    /// cleaning it — the old contract, where a workspace reported opened
    /// after a workspace-less finalization was only flagged (`LateOpen`).
    #[derive(Clone, Copy, Debug, Default)]
    pub struct AcceptLateOpen;

    impl RequestStep for AcceptLateOpen {
        fn name(&self) -> &'static str {
            "request/broken/accept-late-open"
        }
        fn breaks(&self) -> Option<&'static str> {
            Some(OPENED_IS_CLEANED)
        }
        fn step(&self, state: &request::State, event: Event, now: Instant) -> request::Transition {
            if event == Event::WorkspaceOpening && !request::accepts_workspace(state) {
                return request::Transition {
                    next: *state,
                    actions: Vec::new(),
                };
            }
            request::step(state, event, now)
        }
        fn accepts_workspace(&self, _: &request::State) -> bool {
            true
        }
    }

    /// Publishes a result that is not the machine's: the cleanup evidence is
    /// dropped from what waiters receive.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct PublishNotTheResult;

    impl RequestStep for PublishNotTheResult {
        fn name(&self) -> &'static str {
            "request/broken/publish-not-the-result"
        }
        fn breaks(&self) -> Option<&'static str> {
            Some(WAITERS_SEE_THE_RESULT)
        }
        fn step(&self, state: &request::State, event: Event, now: Instant) -> request::Transition {
            let mut tr = request::step(state, event, now);
            for a in &mut tr.actions {
                if let Action::Publish(r) = a {
                    *r = FinalResult::merge(r.primary(), CleanupReport::NotNeeded);
                }
            }
            tr
        }
    }

    /// Reads a failed cleanup as a successful one, so a success survives its
    /// cleanup failure.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct SuccessDespiteCleanupFailure;

    impl RequestStep for SuccessDespiteCleanupFailure {
        fn name(&self) -> &'static str {
            "request/broken/success-despite-cleanup-failure"
        }
        fn breaks(&self) -> Option<&'static str> {
            Some(CLEANUP_FAILURE_NEVER_SUCCEEDS)
        }
        fn step(&self, state: &request::State, event: Event, now: Instant) -> request::Transition {
            let event = match event {
                Event::CleanupFinished(CleanupVerdict::Failed(_)) => {
                    Event::CleanupFinished(CleanupVerdict::Cleaned)
                }
                e => e,
            };
            request::step(state, event, now)
        }
    }

    /// Publishes again when a duplicate candidate arrives after completion —
    /// the bug of a late duplicate re-running the finalization.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct RepublishOnDuplicate;

    impl RequestStep for RepublishOnDuplicate {
        fn name(&self) -> &'static str {
            "request/broken/republish-on-duplicate"
        }
        fn breaks(&self) -> Option<&'static str> {
            Some(PUBLISHED_AT_MOST_ONCE)
        }
        fn step(&self, state: &request::State, event: Event, now: Instant) -> request::Transition {
            let mut tr = request::step(state, event, now);
            if let (Phase::Completed { result, .. }, Event::Candidate(_)) = (state.phase(), event) {
                tr.actions.push(Action::Publish(result));
            }
            tr
        }
    }
}

/// The terminal candidates the environment fires, each once; bit `i` of
/// [`Sys::fired`] records `CANDIDATES[i]`. Index 1 is the duplicate success
/// callback, enabled only after the first success (index 0).
pub const CANDIDATES: [Candidate; 7] = [
    Candidate::Success,
    Candidate::Success,
    Candidate::ExecutorError { code: EXEC_CODE },
    Candidate::Timeout,
    Candidate::CallerCancel,
    Candidate::CallerDisconnect,
    Candidate::TerminalWriteFailed,
];

/// When a waiter subscribed, relative to the request's lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum When {
    /// Before any candidate.
    Before,
    /// While finalizing (candidate arrived, not completed yet).
    During,
    /// After completion.
    After,
}

/// One waiter: a caller of `wait()` on the request's final result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Waiter {
    /// Not subscribed yet.
    Idle,
    /// Subscribed, result not yet observed.
    Subscribed(When),
    /// Observed this result.
    Observed(When, FinalResult),
}

/// The checked system: the machine's state plus the environment's record.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Sys {
    /// The real machine state.
    pub machine: request::State,
    /// Bit `i` set: `CANDIDATES[i]` has fired.
    pub fired: u8,
    /// The first candidate fired (the oracle for the primary outcome).
    pub first: Option<Candidate>,
    /// The environment announced the workspace (accepted or not).
    pub ws_announced: bool,
    /// The announcement was accepted and the environment opened the
    /// workspace.
    pub ws_opened: bool,
    /// ... after the executor had stopped or returned, and was refused.
    pub open_after_stop_refused: bool,
    /// A cleanup started before the environment reported the request's
    /// processes stopped (a success or an error proves the executor
    /// returned, not that a process it started settled).
    pub cleanup_before_stop: bool,
    /// A result was published before the processes were reported stopped.
    pub published_before_stop: bool,
    /// ... while the machine was already finalizing (the race).
    pub ws_opened_while_finalizing: bool,
    /// The machine asked to cancel processes.
    pub cancel_requested: bool,
    /// The environment reported the executor stopped.
    pub stopped: bool,
    /// Cleanups the machine started.
    pub cleanups: u8,
    /// What the (single) cleanup reported, once it finished.
    pub cleanup: Option<CleanupVerdict>,
    /// Terminal writes the machine asked for.
    pub writes: u8,
    /// A write was asked for after the caller disconnected.
    pub wrote_to_gone_caller: bool,
    /// The endpoint acknowledged.
    pub acked: bool,
    /// Publications the machine asked for.
    pub publishes: u8,
    /// The first published result (the settle-once cell waiters read).
    pub published: Option<FinalResult>,
    /// Something was written or published while cleanup was still owed.
    pub early: bool,
    /// The environment confirmed the publication.
    pub confirmed: bool,
    /// The result the machine held when it first reached `Completed`.
    pub completed: Option<FinalResult>,
    /// A candidate fired after completion.
    pub dup_after_completion: bool,
    /// The waiters, kept sorted by the symmetry representative.
    pub waiters: Vec<Waiter>,
}

/// An environment event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Act {
    /// Fire `CANDIDATES[i]`.
    Candidate(usize),
    /// The executor announced the workspace it is about to open.
    WorkspaceOpening,
    /// A stray executor announces (and would open) the workspace after it
    /// was reported stopped or returned.
    OpenAfterStop,
    /// The executor stopped (after the machine asked to cancel).
    ExecutionStopped,
    /// The cleanup finished with this result.
    CleanupFinished(CleanupVerdict),
    /// The endpoint acknowledged the terminal.
    EndpointAcknowledged,
    /// The runtime confirmed the publication.
    Published,
    /// Waiter `i` subscribes.
    Subscribe(usize),
    /// Waiter `i` observes the published result.
    Observe(usize),
}

/// The request model over a step function `S`.
pub struct RequestModel<S> {
    /// The step function explored.
    pub step: S,
    /// How many interchangeable waiters.
    pub waiters: usize,
    now: Instant,
}

impl<S: RequestStep> RequestModel<S> {
    /// A model of `step` with `waiters` waiters.
    pub fn new(step: S, waiters: usize) -> Self {
        RequestModel {
            step,
            waiters,
            now: Instant::now(),
        }
    }
}

impl<S> fmt::Debug for RequestModel<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RequestModel {{ waiters: {} }}", self.waiters)
    }
}

/// The symmetry representative: waiters are interchangeable, so sort them.
pub fn representative(s: &Sys) -> Sys {
    let mut r = s.clone();
    r.waiters.sort();
    r
}

impl Sys {
    /// Whether cleanup is owed and has not finished.
    fn cleanup_owed(&self) -> bool {
        self.ws_opened && self.cleanup.is_none()
    }

    /// Whether the executor may still act (open the workspace).
    fn executor_alive(&self) -> bool {
        // Bits 0, 1 (success), 2 (executor error): the executor returned.
        !self.stopped && self.fired & 0b111 == 0
    }

    /// The cleanup as the final result must report it.
    fn expected_cleanup(&self) -> Option<CleanupReport> {
        match (self.ws_opened, self.cleanup) {
            (false, _) => Some(CleanupReport::NotNeeded),
            (true, Some(r)) => Some(r.into()),
            (true, None) => None,
        }
    }
}

impl<S: RequestStep> Model for RequestModel<S> {
    type State = Sys;
    type Action = Act;

    fn init_states(&self) -> Vec<Sys> {
        vec![Sys {
            machine: request::State::new(self.now),
            fired: 0,
            first: None,
            ws_announced: false,
            ws_opened: false,
            open_after_stop_refused: false,
            cleanup_before_stop: false,
            published_before_stop: false,
            ws_opened_while_finalizing: false,
            cancel_requested: false,
            stopped: false,
            cleanups: 0,
            cleanup: None,
            writes: 0,
            wrote_to_gone_caller: false,
            acked: false,
            publishes: 0,
            published: None,
            early: false,
            confirmed: false,
            completed: None,
            dup_after_completion: false,
            waiters: vec![Waiter::Idle; self.waiters],
        }]
    }

    fn actions(&self, s: &Sys, out: &mut Vec<Act>) {
        for i in 0..CANDIDATES.len() {
            // The duplicate success only after the first one.
            if s.fired & (1 << i) == 0 && (i != 1 || s.fired & 1 != 0) {
                out.push(Act::Candidate(i));
            }
        }
        if !s.ws_announced {
            out.push(if s.executor_alive() {
                Act::WorkspaceOpening
            } else {
                Act::OpenAfterStop
            });
        }
        if s.cancel_requested && !s.stopped {
            out.push(Act::ExecutionStopped);
        }
        if s.cleanups > 0 && s.cleanup.is_none() {
            out.push(Act::CleanupFinished(CleanupVerdict::Cleaned));
            out.push(Act::CleanupFinished(CleanupVerdict::Failed(CLEAN_CODE)));
        }
        if s.writes > 0 && !s.acked {
            out.push(Act::EndpointAcknowledged);
        }
        if s.publishes > 0 && !s.confirmed {
            out.push(Act::Published);
        }
        for (i, w) in s.waiters.iter().enumerate() {
            match w {
                Waiter::Idle => out.push(Act::Subscribe(i)),
                Waiter::Subscribed(_) if s.published.is_some() => out.push(Act::Observe(i)),
                Waiter::Subscribed(_) | Waiter::Observed(..) => {}
            }
        }
    }

    fn next_state(&self, s: &Sys, act: Act) -> Option<Sys> {
        let mut n = s.clone();
        let event = match act {
            Act::Candidate(i) => {
                n.fired |= 1 << i;
                let c = CANDIDATES[i];
                n.first.get_or_insert(c);
                if s.machine.is_completed() {
                    n.dup_after_completion = true;
                }
                Event::Candidate(c)
            }
            Act::WorkspaceOpening | Act::OpenAfterStop => {
                // The environment opens only after an accepted announcement.
                n.ws_announced = true;
                n.ws_opened = self.step.accepts_workspace(&s.machine);
                n.ws_opened_while_finalizing =
                    n.ws_opened && matches!(s.machine.phase(), Phase::Finalizing { .. });
                n.open_after_stop_refused = act == Act::OpenAfterStop && !n.ws_opened;
                Event::WorkspaceOpening
            }
            Act::ExecutionStopped => {
                n.stopped = true;
                Event::ExecutionStopped
            }
            Act::CleanupFinished(r) => {
                n.cleanup = Some(r);
                Event::CleanupFinished(r)
            }
            Act::EndpointAcknowledged => {
                n.acked = true;
                Event::EndpointAcknowledged
            }
            Act::Published => {
                n.confirmed = true;
                Event::Published
            }
            Act::Subscribe(i) => {
                let when = match s.machine.phase() {
                    Phase::Open => When::Before,
                    Phase::Completed { .. } => When::After,
                    _ => When::During,
                };
                n.waiters[i] = Waiter::Subscribed(when);
                return Some(n);
            }
            Act::Observe(i) => {
                let Waiter::Subscribed(when) = s.waiters[i] else {
                    return None;
                };
                // The waiter reads the real settle-once cell.
                n.waiters[i] = Waiter::Observed(when, cell(s.published).get()?);
                return Some(n);
            }
        };
        let tr = self.step.step(&s.machine, event, self.now);
        n.machine = tr.next;
        for a in tr.actions {
            match a {
                Action::CancelProcesses => n.cancel_requested = true,
                Action::StartCleanup => {
                    n.cleanups = n.cleanups.saturating_add(1);
                    n.cleanup_before_stop |= !n.stopped;
                }
                Action::WriteTerminal(_) => {
                    n.writes = n.writes.saturating_add(1);
                    n.early |= n.cleanup_owed();
                    n.wrote_to_gone_caller |= n.fired & (1 << 5) != 0;
                }
                Action::Publish(r) => {
                    n.publishes = n.publishes.saturating_add(1);
                    n.published_before_stop |= !n.stopped;
                    n.early |= n.cleanup_owed();
                    // The runtime settles the request's cell: the first
                    // publication wins, as the real primitive decides.
                    let c = cell(n.published);
                    let _refused_if_second = c.settle(r);
                    n.published = c.get();
                }
            }
        }
        if n.machine.is_completed() && n.completed.is_none() {
            n.completed = n.machine.result();
        }
        Some(n)
    }

    fn format_action(&self, act: &Act) -> String {
        crate::explain::request_action(act)
    }

    fn format_step(&self, last: &Sys, act: Act) -> Option<String> {
        self.next_state(last, act)
            .map(|next| crate::explain::request_state(&next))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut p = vec![
            Property::always(AT_MOST_ONE_CLEANUP, |_, s: &Sys| s.cleanups <= 1),
            Property::always("cleanup only for an opened workspace", |_, s: &Sys| {
                s.cleanups == 0 || s.ws_opened
            }),
            Property::always(PUBLISHED_AT_MOST_ONCE, |_, s: &Sys| s.publishes <= 1),
            Property::always("terminal written at most once", |_, s: &Sys| s.writes <= 1),
            Property::always(
                "nothing written or published before cleanup finished",
                |_, s: &Sys| !s.early,
            ),
            Property::always(COMPLETED_ONLY_AFTER_CLEANUP, |_, s: &Sys| {
                !s.machine.is_completed() || !s.cleanup_owed()
            }),
            Property::always(
                "completed only after publishing, with the published result",
                |_, s: &Sys| {
                    !s.machine.is_completed()
                        || (s.published.is_some() && s.machine.result() == s.published)
                },
            ),
            Property::always(
                "completed is absorbing and its result never changes",
                |_, s: &Sys| match s.completed {
                    None => true,
                    Some(r) => s.machine.is_completed() && s.machine.result() == Some(r),
                },
            ),
            Property::always(CLEANUP_FAILURE_NEVER_SUCCEEDS, |_, s: &Sys| {
                !matches!(s.cleanup, Some(CleanupVerdict::Failed(_)))
                    || s.published
                        .is_none_or(|r| r.status() != RequestStatus::Succeeded)
            }),
            Property::always(
                "published result is the first candidate or its cleanup-failure conversion",
                |_, s: &Sys| match s.published {
                    None => true,
                    Some(r) => {
                        let Some(first) = s.first else { return false };
                        let converted = first == Candidate::Success
                            && matches!(r.cleanup(), CleanupReport::Failed { .. });
                        let status = if converted {
                            RequestStatus::Failed
                        } else {
                            first.status()
                        };
                        r.primary() == first
                            && r.status() == status
                            && s.expected_cleanup() == Some(r.cleanup())
                    }
                },
            ),
            Property::always(WAITERS_SEE_THE_RESULT, |_, s: &Sys| {
                s.waiters.iter().all(|w| match w {
                    Waiter::Observed(_, r) => s.machine.result() == Some(*r),
                    Waiter::Idle | Waiter::Subscribed(_) => true,
                })
            }),
            Property::always(CLEANUP_AFTER_STOP, |_, s: &Sys| !s.cleanup_before_stop),
            Property::always(PUBLISHED_AFTER_STOP, |_, s: &Sys| !s.published_before_stop),
            Property::always(OPENED_IS_CLEANED, |_, s: &Sys| {
                !s.machine.is_completed() || !s.ws_opened || s.cleanup.is_some()
            }),
            Property::always("a candidate always cancels the processes", |_, s: &Sys| {
                s.first.is_none() || s.cancel_requested
            }),
            Property::always(
                "nothing is written to a disconnected caller",
                |_, s: &Sys| !s.wrote_to_gone_caller,
            ),
            Property::always(SETTLES, |m: &Self, s: &Sys| {
                let mut acts = Vec::new();
                m.actions(s, &mut acts);
                !acts.is_empty()
                    || (s.machine.is_completed()
                        && !s.cleanup_owed()
                        && s.cleanups == u8::from(s.ws_opened)
                        && s.waiters.iter().all(|w| matches!(w, Waiter::Observed(..))))
            }),
        ];
        for (name, c) in [
            ("success can win", Candidate::Success),
            (
                "executor error can win",
                Candidate::ExecutorError { code: EXEC_CODE },
            ),
            ("timeout can win", Candidate::Timeout),
            ("caller cancel can win", Candidate::CallerCancel),
            ("caller disconnect can win", Candidate::CallerDisconnect),
            (
                "terminal write failure can win",
                Candidate::TerminalWriteFailed,
            ),
        ] {
            p.push(Property::sometimes(name, win_fn(c)));
        }
        p.extend([
            Property::sometimes("cleanup failure converts a success", |_, s: &Sys| {
                s.published.is_some_and(|r| {
                    r.primary() == Candidate::Success && r.status() == RequestStatus::Failed
                })
            }),
            Property::sometimes(
                "a cancel keeps its category with a cleanup code",
                |_, s: &Sys| {
                    s.published.is_some_and(|r| {
                        r.status() == RequestStatus::Cancelled
                            && matches!(r.cleanup(), CleanupReport::Failed { .. })
                    })
                },
            ),
            Property::sometimes("a duplicate arrives after completion", |_, s: &Sys| {
                s.dup_after_completion
            }),
            Property::sometimes(
                "a waiter subscribing after completion observes",
                |_, s: &Sys| {
                    s.waiters
                        .iter()
                        .any(|w| matches!(w, Waiter::Observed(When::After, _)))
                },
            ),
            Property::sometimes(
                "a waiter subscribing before any candidate observes",
                |_, s: &Sys| {
                    s.waiters
                        .iter()
                        .any(|w| matches!(w, Waiter::Observed(When::Before, _)))
                },
            ),
            Property::sometimes(
                "a workspace opened while finalizing is cleaned",
                |_, s: &Sys| s.ws_opened_while_finalizing && s.cleanup.is_some(),
            ),
            Property::sometimes(
                "the caller disconnects while the terminal is written",
                |_, s: &Sys| {
                    s.writes > 0
                        && matches!(
                            s.machine.phase(),
                            Phase::Completed {
                                delivery: Delivery::CallerGone,
                                ..
                            }
                        )
                },
            ),
            Property::sometimes("an open after the stop is refused", |_, s: &Sys| {
                s.open_after_stop_refused && s.machine.is_completed()
            }),
            Property::sometimes("no workspace, no cleanup", |_, s: &Sys| {
                s.machine.is_completed()
                    && s.published
                        .is_some_and(|r| r.cleanup() == CleanupReport::NotNeeded)
            }),
        ]);
        p
    }
}

/// Property names shared with the broken variants' expectations.
pub const AT_MOST_ONE_CLEANUP: &str = "at most one cleanup";
/// See [`AT_MOST_ONE_CLEANUP`].
pub const PUBLISHED_AT_MOST_ONCE: &str = "published at most once";
/// See [`AT_MOST_ONE_CLEANUP`].
pub const COMPLETED_ONLY_AFTER_CLEANUP: &str = "completed only after cleanup finished";
/// See [`AT_MOST_ONE_CLEANUP`].
pub const CLEANUP_FAILURE_NEVER_SUCCEEDS: &str = "cleanup failure never yields success";
/// See [`AT_MOST_ONE_CLEANUP`].
pub const SETTLES: &str = "no enabled action implies fully settled";
/// See [`AT_MOST_ONE_CLEANUP`].
pub const CLEANUP_AFTER_STOP: &str = "cleanup starts only after the processes stopped";
/// See [`AT_MOST_ONE_CLEANUP`].
pub const PUBLISHED_AFTER_STOP: &str =
    "no result is published before every process of the request stopped";
/// See [`AT_MOST_ONE_CLEANUP`].
pub const OPENED_IS_CLEANED: &str = "an opened workspace is cleaned before completion";
/// See [`AT_MOST_ONE_CLEANUP`].
pub const WAITERS_SEE_THE_RESULT: &str = "every waiter observes the machine's result";

/// A real settle-once cell holding what the state says was settled.
fn cell(settled: Option<FinalResult>) -> SettleOnce<FinalResult> {
    let c = SettleOnce::new();
    if let Some(r) = settled {
        let _first = c.settle(r);
    }
    c
}

fn win_fn<S: RequestStep>(c: Candidate) -> fn(&RequestModel<S>, &Sys) -> bool {
    // Property conditions are plain fn pointers, so each candidate gets its
    // own non-capturing closure.
    match c {
        Candidate::Success => |_, s| won(s, Candidate::Success),
        Candidate::ExecutorError { .. } => {
            |_, s| won(s, Candidate::ExecutorError { code: EXEC_CODE })
        }
        Candidate::Timeout => |_, s| won(s, Candidate::Timeout),
        Candidate::CallerCancel => |_, s| won(s, Candidate::CallerCancel),
        Candidate::CallerDisconnect => |_, s| won(s, Candidate::CallerDisconnect),
        Candidate::TerminalWriteFailed => |_, s| won(s, Candidate::TerminalWriteFailed),
    }
}

fn won(s: &Sys, c: Candidate) -> bool {
    s.machine.is_completed() && s.published.is_some_and(|r| r.primary() == c)
}

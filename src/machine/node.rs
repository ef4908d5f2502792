//! The node's per-request decisions: which open, write, run, cancel or
//! cleanup a node may perform for one request now.
//!
//! # Theory of operation
//!
//! A node keeps one small [`State`] per request id. It has two halves:
//!
//! - [`JobState`] — what the node knows about the request's job namespace on
//!   disk: [`Absent`](JobState::Absent) (never opened by this node),
//!   [`Opening`](JobState::Opening) (the open is running), [`Present`](JobState::Present),
//!   or [`Unknown`](JobState::Unknown) (the node restarted, or an open failed:
//!   only the workspace can tell whether a job directory exists).
//! - [`Fence`] — whether the request still accepts work:
//!   [`Accepting`](Fence::Accepting), [`Cancelled`](Fence::Cancelled) (a
//!   cancel arrived), [`Cleaning`](Fence::Cleaning) (a cleanup was asked for),
//!   [`Retry`](Fence::Retry) (the cleanup could not run: the machine was out
//!   of inodes, descriptors or memory) or [`Cleaned`](Fence::Cleaned)
//!   (absorbing, with the cleanup's verdict).
//!
//! Once the fence has left `Accepting` it never returns: an open, a write or
//! a run that arrives after a cancel or a cleanup is refused, whatever order
//! the network delivered them in. That is what closes the late-open race: an
//! open cannot land after the request's cleanup was decided and leave a job
//! directory nobody removes.
//!
//! Cleanup is decided here exactly once per request: the first
//! [`Input::Cleanup`] returns [`Action::StartCleanup`] (or, if the job is
//! still being opened, returns it when the open finishes, so a cleanup never
//! races the open that creates what it removes); every later one waits for
//! that cleanup's verdict or receives it from the state. A cleanup that
//! could not run ([`Input::CleanupCouldNotRun`]) decided nothing: its
//! waiters get its answer, and the next [`Input::Cleanup`] starts it again.
//! So at most one cleanup runs at a time, and none starts once one reached a
//! verdict. A cleanup for a
//! request this node never opened answers
//! [`CleanupVerdict::AlreadyGone`] at once without touching the workspace,
//! and still fences every later open.
//!
//! [`step`] is pure: no clock, no I/O, no locks. The node's I/O shell
//! (`wire::Node`) feeds it every message and the answer of every action it
//! performs, under its table lock, and performs the returned actions in
//! order.
//!
//! # Contract with the shell
//!
//! - Start unseen requests at [`State::new`] (this node's memory covers the
//!   request's whole life) or [`State::after_restart`] (it may not: a job
//!   directory may remain from an earlier run of the node).
//! - Answer [`Action::Open`] with exactly one [`Input::OpenFinished`];
//!   [`Action::StartCleanup`] with exactly one [`Input::CleanupFinished`]
//!   or, when the cleanup could not run at all, [`Input::CleanupCouldNotRun`].
//!   A failed open must leave nothing behind that the workspace's cleanup
//!   would not find.
//! - [`Action::Reply`] answers the message just stepped;
//!   [`Action::AwaitCleanup`] means "answer with the verdict of the cleanup
//!   already started or pending".
//!
//! # Examples
//!
//! ```
//! use custodian::machine::node::{step, Action, CleanupVerdict, Input, Reply, State};
//!
//! let s = State::new();
//! let t = step(&s, Input::Open);
//! assert_eq!(t.actions, [Action::Open]);
//! // A cancel lands while the open runs: the open's answer is a refusal,
//! // and the job it created is still cleaned.
//! let t = step(&t.next, Input::Cancel);
//! let t = step(&t.next, Input::OpenFinished { ok: true });
//! assert_eq!(t.actions, [Action::Reply(Reply::Closed)]);
//! let t = step(&t.next, Input::Cleanup);
//! assert_eq!(t.actions, [Action::StartCleanup, Action::AwaitCleanup]);
//! let t = step(&t.next, Input::CleanupFinished(CleanupVerdict::Cleaned));
//! // A duplicate cleanup gets the first verdict, never a second removal.
//! let t = step(&t.next, Input::Cleanup);
//! assert_eq!(t.actions, [Action::Reply(Reply::Cleanup { verdict: CleanupVerdict::Cleaned, cached: true })]);
//! ```

pub use super::cleanup::CleanupVerdict;

/// What the node knows about the request's job namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum JobState {
    /// This node never opened it (and its memory covers the request's life).
    Absent,
    /// The open is running.
    Opening,
    /// The job namespace exists.
    Present,
    /// The node cannot tell (it restarted, or an open failed): the
    /// workspace's idempotent cleanup finds out.
    Unknown,
}

/// Whether the request still accepts work on this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fence {
    /// Open, write and run are allowed.
    Accepting,
    /// A cancel arrived: no new open, write or run.
    Cancelled,
    /// A cleanup was asked for (it runs, or waits for a running open).
    Cleaning,
    /// The last cleanup could not run (the machine was out of inodes,
    /// descriptors or memory; nothing suspicious was found, nothing was
    /// decided): closed to work like `Cancelled`, and the next cleanup
    /// runs again.
    Retry,
    /// Absorbing: the cleanup finished with this verdict.
    Cleaned(CleanupVerdict),
}

/// The per-request state on one node. Advance it only with [`step`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct State {
    job: JobState,
    fence: Fence,
    /// Cleanups started: 0 or 1, more only after cleanups that could not
    /// run (kept so that properties can count).
    cleanups: u8,
}

impl Default for State {
    fn default() -> Self {
        State::new()
    }
}

impl State {
    /// A request this node has never seen, and whose whole life the node's
    /// memory covers.
    pub const fn new() -> Self {
        State {
            job: JobState::Absent,
            fence: Fence::Accepting,
            cleanups: 0,
        }
    }

    /// A request as a node that restarted sees it: a job directory may
    /// remain from before, and any fence was lost with the node's memory.
    pub const fn after_restart() -> Self {
        State {
            job: JobState::Unknown,
            fence: Fence::Accepting,
            cleanups: 0,
        }
    }

    /// What the node knows about the job namespace.
    pub const fn job(&self) -> JobState {
        self.job
    }

    /// Whether the request still accepts work.
    pub const fn fence(&self) -> Fence {
        self.fence
    }

    /// How many cleanups this state started: at most one, but for the
    /// ones that could not run ([`Input::CleanupCouldNotRun`]), each
    /// followed by a retry.
    pub const fn cleanups_started(&self) -> u8 {
        self.cleanups
    }

    /// Whether the request accepts new work (opens, writes, runs).
    pub const fn accepting(&self) -> bool {
        matches!(self.fence, Fence::Accepting)
    }

    /// Whether the request is open and accepting work.
    pub const fn is_open(&self) -> bool {
        matches!(self.job, JobState::Present) && self.accepting()
    }

    /// The cleanup's verdict, once it finished.
    pub const fn cleaned(&self) -> Option<CleanupVerdict> {
        match self.fence {
            Fence::Cleaned(v) => Some(v),
            Fence::Accepting | Fence::Cancelled | Fence::Cleaning | Fence::Retry => None,
        }
    }

    /// Whether a started cleanup is running (its finish is awaited).
    pub const fn cleanup_running(&self) -> bool {
        matches!(self.fence, Fence::Cleaning) && self.cleanups > 0
    }

    /// Whether a node that shuts down must clean this request up itself:
    /// its job exists, is being opened, or may exist (an open that failed
    /// part-way, or a request known from before a restart), and no cleanup
    /// was asked for; or its last cleanup could not run. A job the node
    /// cannot vouch for is cleaned too: the workspace's idempotent cleanup
    /// finds out (`already_gone` if nothing is there).
    pub const fn held_open(&self) -> bool {
        matches!(self.fence, Fence::Retry)
            || (matches!(
                self.job,
                JobState::Present | JobState::Opening | JobState::Unknown
            ) && matches!(self.fence, Fence::Accepting | Fence::Cancelled))
    }
}

/// A message for the request, or the answer of an action the shell
/// performed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Input {
    /// `open_workspace` arrived.
    Open,
    /// The open started by [`Action::Open`] finished.
    OpenFinished {
        /// Whether the job namespace was created.
        ok: bool,
    },
    /// `write_artifact` or `run_process` arrived.
    Work,
    /// `cancel` arrived.
    Cancel,
    /// `cleanup_workspace` arrived (the first or a duplicate).
    Cleanup,
    /// The cleanup started by [`Action::StartCleanup`] finished.
    CleanupFinished(CleanupVerdict),
    /// The cleanup started by [`Action::StartCleanup`] could not run (out
    /// of inodes, descriptors or memory): nothing was decided, and the next
    /// [`Input::Cleanup`] starts it again.
    CleanupCouldNotRun,
}

/// Why a message is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Refusal {
    /// The request's workspace is not open (yet) on this node.
    NotOpen,
    /// The request's cancel or cleanup started: it accepts no new work.
    Closed,
    /// An open of the same request is running; this duplicate is not
    /// performed.
    OpenInProgress,
}

/// An immediate answer to the message just stepped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reply {
    /// The open succeeded (`already`: a duplicate of an earlier open).
    Opened {
        /// Nothing was done this time.
        already: bool,
    },
    /// The open failed; the shell answers with the workspace's code.
    OpenFailed,
    /// Refused; nothing was performed.
    Refused(Refusal),
    /// The request is closed; an open that ran concurrently with the cancel
    /// or cleanup is answered so (its job is cleaned by that cleanup).
    Closed,
    /// Nothing to cancel (the job is not present, or the cleanup already
    /// cancels).
    NothingToCancel,
    /// The cleanup's verdict; `cached` when an earlier cleanup produced it.
    Cleanup {
        /// What the cleanup did.
        verdict: CleanupVerdict,
        /// Whether this answer repeats an earlier cleanup's result.
        cached: bool,
    },
}

/// What the shell must do, in order; returned by [`step`].
#[must_use = "an action the node must perform"]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    /// Open the job namespace; answer with [`Input::OpenFinished`]. The
    /// open's caller is answered by the step of that input.
    Open,
    /// Perform the write or run that was stepped.
    Proceed,
    /// Cancel the request's processes and answer the cancel with how many
    /// there were.
    CancelProcesses,
    /// Run the workspace cleanup, once; answer with
    /// [`Input::CleanupFinished`].
    StartCleanup,
    /// Answer the stepped message with the verdict of the cleanup that is
    /// running or pending.
    AwaitCleanup,
    /// Answer the stepped message (or, for [`Input::OpenFinished`], the open
    /// that started it) with this.
    Reply(Reply),
}

/// The outcome of one [`step`].
#[must_use = "the next state must be stored and the actions performed"]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The state after the input.
    pub next: State,
    /// What the shell must do, in order (at most three).
    pub actions: Vec<Action>,
}

/// Advances one request's node state by `input`. Pure: no clock, no I/O.
///
/// See the [module docs](self) for the states and the shell's side of the
/// contract.
pub fn step(state: &State, input: Input) -> Transition {
    let mut next = *state;
    let mut actions = Vec::with_capacity(3);
    match input {
        Input::Open => actions.push(match (next.fence, next.job) {
            (Fence::Accepting, JobState::Absent | JobState::Unknown) => {
                next.job = JobState::Opening;
                Action::Open
            }
            (Fence::Accepting, JobState::Opening) => {
                Action::Reply(Reply::Refused(Refusal::OpenInProgress))
            }
            (Fence::Accepting, JobState::Present) => Action::Reply(Reply::Opened { already: true }),
            (Fence::Cancelled | Fence::Cleaning | Fence::Retry | Fence::Cleaned(_), _) => {
                Action::Reply(Reply::Refused(Refusal::Closed))
            }
        }),
        Input::OpenFinished { ok } => {
            if next.job != JobState::Opening {
                // No open is running: a stray answer changes nothing.
                return Transition { next, actions };
            }
            // A failed open is conservative: the workspace's cleanup checks.
            next.job = if ok {
                JobState::Present
            } else {
                JobState::Unknown
            };
            match next.fence {
                Fence::Accepting => actions.push(Action::Reply(if ok {
                    Reply::Opened { already: false }
                } else {
                    Reply::OpenFailed
                })),
                Fence::Cancelled => actions.push(Action::Reply(Reply::Closed)),
                // A cleanup waited for this open to finish.
                Fence::Cleaning => {
                    actions.push(Action::Reply(Reply::Closed));
                    start_cleanup(&mut next, &mut actions);
                }
                // Unreachable: a cleanup never finishes (or fails to run)
                // while an open runs.
                Fence::Cleaned(_) | Fence::Retry => actions.push(Action::Reply(Reply::Closed)),
            }
        }
        Input::Work => actions.push(match (next.fence, next.job) {
            (Fence::Accepting, JobState::Present) => Action::Proceed,
            (Fence::Accepting, JobState::Absent | JobState::Opening | JobState::Unknown) => {
                Action::Reply(Reply::Refused(Refusal::NotOpen))
            }
            (Fence::Cancelled | Fence::Cleaning | Fence::Retry | Fence::Cleaned(_), _) => {
                Action::Reply(Reply::Refused(Refusal::Closed))
            }
        }),
        Input::Cancel => {
            if next.fence == Fence::Accepting {
                next.fence = Fence::Cancelled;
            }
            actions.push(match (next.fence, next.job) {
                (Fence::Accepting | Fence::Cancelled | Fence::Retry, JobState::Present) => {
                    Action::CancelProcesses
                }
                // The cleanup cancels the processes itself before removing.
                (Fence::Cleaning | Fence::Cleaned(_), _)
                | (_, JobState::Absent | JobState::Opening | JobState::Unknown) => {
                    Action::Reply(Reply::NothingToCancel)
                }
            });
        }
        Input::Cleanup => match next.fence {
            Fence::Accepting | Fence::Cancelled => {
                next.fence = Fence::Cleaning;
                match next.job {
                    JobState::Absent => {
                        let verdict = CleanupVerdict::AlreadyGone;
                        next.fence = Fence::Cleaned(verdict);
                        actions.push(Action::Reply(Reply::Cleanup {
                            verdict,
                            cached: false,
                        }));
                    }
                    // Waits for the open: answered when it finishes.
                    JobState::Opening => actions.push(Action::AwaitCleanup),
                    JobState::Present | JobState::Unknown => start_cleanup(&mut next, &mut actions),
                }
            }
            // The last cleanup could not run: this one runs it again (no
            // open can be running: none was accepted since the first).
            Fence::Retry => {
                next.fence = Fence::Cleaning;
                start_cleanup(&mut next, &mut actions);
            }
            Fence::Cleaning => actions.push(Action::AwaitCleanup),
            Fence::Cleaned(verdict) => actions.push(Action::Reply(Reply::Cleanup {
                verdict,
                cached: true,
            })),
        },
        Input::CleanupFinished(verdict) => {
            if next.fence == Fence::Cleaning && next.cleanups > 0 {
                next.fence = Fence::Cleaned(verdict);
                next.job = match verdict {
                    CleanupVerdict::Cleaned
                    | CleanupVerdict::AlreadyGone
                    | CleanupVerdict::Reclaimed => JobState::Absent,
                    // Failed closed: the suspect subtree is kept and reported.
                    CleanupVerdict::Failed(_) => next.job,
                };
            }
            // Otherwise nobody asked: a stray answer changes nothing.
        }
        Input::CleanupCouldNotRun => {
            if next.cleanup_running() {
                next.fence = Fence::Retry;
            }
            // Otherwise nobody asked: a stray answer changes nothing.
        }
    }
    Transition { next, actions }
}

fn start_cleanup(next: &mut State, actions: &mut Vec<Action>) {
    next.cleanups = next.cleanups.saturating_add(1);
    actions.push(Action::StartCleanup);
    actions.push(Action::AwaitCleanup);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::SafeCode;

    const FAIL: SafeCode = SafeCode::new("symlink_in_job");

    /// Every state reachable from a fresh or a restarted request.
    fn states() -> Vec<State> {
        let mut seen = vec![State::new(), State::after_restart()];
        let mut i = 0;
        while i < seen.len() {
            for input in inputs() {
                let n = step(&seen[i], input).next;
                if !seen.contains(&n) {
                    seen.push(n);
                }
            }
            i += 1;
        }
        seen
    }

    /// Which reachable states a shutting-down node must clean itself,
    /// written out per state: every pair of job and fence that occurs, so
    /// that a change to the rule (or to what is reachable) is seen here.
    #[test]
    fn a_shutdown_cleans_exactly_the_requests_with_a_job_that_may_exist_and_no_cleanup_asked() {
        let mut seen = Vec::new();
        for s in states() {
            let expected = match (s.job, s.fence) {
                // The last cleanup could not run: the next one runs again.
                (_, Fence::Retry) => true,
                // A cleanup was asked for (running, or waiting for the
                // open) or finished: it is not the shutdown's.
                (_, Fence::Cleaning | Fence::Cleaned(_)) => false,
                // Nothing was ever opened here.
                (JobState::Absent, _) => false,
                (JobState::Opening | JobState::Present | JobState::Unknown, _) => true,
            };
            assert_eq!(s.held_open(), expected, "{s:?}");
            seen.push((s.job, expected));
        }
        // Both answers occur, the refusals for a waiting cleanup and for a
        // request never opened here among them.
        assert!(seen.iter().filter(|x| x.1).count() >= 3);
        assert!(seen.iter().filter(|x| !x.1).count() >= 3);
        assert!(seen.contains(&(JobState::Opening, false)));
        assert!(seen.contains(&(JobState::Absent, false)));
    }

    fn inputs() -> [Input; 9] {
        [
            Input::Open,
            Input::OpenFinished { ok: true },
            Input::OpenFinished { ok: false },
            Input::Work,
            Input::Cancel,
            Input::Cleanup,
            Input::CleanupFinished(CleanupVerdict::Cleaned),
            Input::CleanupFinished(CleanupVerdict::Failed(FAIL)),
            Input::CleanupCouldNotRun,
        ]
    }

    fn s(job: JobState, fence: Fence) -> State {
        let cleanups = u8::from(matches!(
            fence,
            Fence::Cleaning | Fence::Cleaned(_) | Fence::Retry
        ));
        State {
            job,
            fence,
            cleanups,
        }
    }

    #[test]
    fn every_state_and_input_is_decided_and_the_fence_never_reopens() {
        for st in states() {
            for input in inputs() {
                let t = step(&st, input);
                let ctx = format!("{st:?} × {input:?} → {:?} {:?}", t.next, t.actions);
                assert!(t.actions.len() <= 3, "{ctx}");
                if !st.accepting() {
                    assert!(!t.next.accepting(), "{ctx}");
                    assert!(!t.actions.contains(&Action::Open), "{ctx}");
                    assert!(!t.actions.contains(&Action::Proceed), "{ctx}");
                }
                // One cleanup at a time, and a new one only after one
                // that could not run.
                if t.actions.contains(&Action::StartCleanup) {
                    assert!(!st.cleanup_running(), "{ctx}");
                    assert!(st.cleanups == 0 || st.fence == Fence::Retry, "{ctx}");
                    assert!(st.cleaned().is_none(), "{ctx}");
                }
                if let Some(v) = st.cleaned() {
                    assert_eq!(t.next.cleaned(), Some(v), "{ctx}: cleaned is absorbing");
                }
                // A cleanup never starts while an open runs.
                if t.actions.contains(&Action::StartCleanup) {
                    assert_ne!(t.next.job, JobState::Opening, "{ctx}");
                }
            }
        }
    }

    #[test]
    fn open_is_allowed_only_while_accepting_and_not_yet_open() {
        use Action::*;
        let closed = Reply(super::Reply::Refused(Refusal::Closed));
        let table = [
            (s(JobState::Absent, Fence::Accepting), Open),
            (s(JobState::Unknown, Fence::Accepting), Open),
            (
                s(JobState::Opening, Fence::Accepting),
                Reply(super::Reply::Refused(Refusal::OpenInProgress)),
            ),
            (
                s(JobState::Present, Fence::Accepting),
                Reply(super::Reply::Opened { already: true }),
            ),
            (s(JobState::Absent, Fence::Cancelled), closed),
            (s(JobState::Present, Fence::Cancelled), closed),
            (s(JobState::Opening, Fence::Cleaning), closed),
            (
                s(
                    JobState::Absent,
                    Fence::Cleaned(CleanupVerdict::AlreadyGone),
                ),
                closed,
            ),
        ];
        for (st, want) in table {
            let t = step(&st, Input::Open);
            assert_eq!(t.actions, [want], "{st:?}");
        }
    }

    #[test]
    fn work_needs_an_open_accepting_request() {
        for st in states() {
            let t = step(&st, Input::Work);
            let want = if st.is_open() {
                Action::Proceed
            } else if !st.accepting() {
                Action::Reply(Reply::Refused(Refusal::Closed))
            } else {
                Action::Reply(Reply::Refused(Refusal::NotOpen))
            };
            assert_eq!(t.actions, [want], "{st:?}");
            assert_eq!(t.next, st);
        }
    }

    #[test]
    fn a_cancel_fences_later_opens_even_before_any_open() {
        let t = step(&State::new(), Input::Cancel);
        assert_eq!(t.actions, [Action::Reply(Reply::NothingToCancel)]);
        assert_eq!(t.next.fence(), Fence::Cancelled);
        let t = step(&t.next, Input::Open);
        assert_eq!(t.actions, [Action::Reply(Reply::Refused(Refusal::Closed))]);
        assert_eq!(t.next.job(), JobState::Absent);
    }

    #[test]
    fn a_cancel_of_an_open_request_cancels_its_processes_each_time() {
        let open = s(JobState::Present, Fence::Accepting);
        let t = step(&open, Input::Cancel);
        assert_eq!(t.actions, [Action::CancelProcesses]);
        let t = step(&t.next, Input::Cancel);
        assert_eq!(t.actions, [Action::CancelProcesses]);
        let t = step(&s(JobState::Present, Fence::Cleaning), Input::Cancel);
        assert_eq!(t.actions, [Action::Reply(Reply::NothingToCancel)]);
    }

    #[test]
    fn an_open_that_lost_the_race_to_a_cancel_is_refused_and_still_cleaned() {
        let t = step(&State::new(), Input::Open);
        let t = step(&t.next, Input::Cancel);
        assert_eq!(t.actions, [Action::Reply(Reply::NothingToCancel)]);
        let t = step(&t.next, Input::OpenFinished { ok: true });
        assert_eq!(t.actions, [Action::Reply(Reply::Closed)]);
        assert_eq!(t.next.job(), JobState::Present);
        let t = step(&t.next, Input::Cleanup);
        assert_eq!(t.actions, [Action::StartCleanup, Action::AwaitCleanup]);
    }

    #[test]
    fn a_cleanup_during_an_open_waits_for_it_then_starts_once() {
        let t = step(&State::new(), Input::Open);
        let t = step(&t.next, Input::Cleanup);
        assert_eq!(t.actions, [Action::AwaitCleanup]);
        let t = step(&t.next, Input::Cleanup);
        assert_eq!(t.actions, [Action::AwaitCleanup]);
        let t = step(&t.next, Input::OpenFinished { ok: true });
        assert_eq!(
            t.actions,
            [
                Action::Reply(Reply::Closed),
                Action::StartCleanup,
                Action::AwaitCleanup
            ]
        );
        let t = step(&t.next, Input::CleanupFinished(CleanupVerdict::Cleaned));
        assert!(t.actions.is_empty());
        assert_eq!(t.next.cleaned(), Some(CleanupVerdict::Cleaned));
        assert_eq!(t.next.job(), JobState::Absent);
    }

    #[test]
    fn a_failed_open_under_a_pending_cleanup_still_asks_the_workspace() {
        let t = step(&State::new(), Input::Open);
        let t = step(&t.next, Input::Cleanup);
        let t = step(&t.next, Input::OpenFinished { ok: false });
        assert!(t.actions.contains(&Action::StartCleanup));
        assert_eq!(t.next.job(), JobState::Unknown);
    }

    #[test]
    fn a_cleanup_of_a_never_opened_request_answers_at_once_and_fences() {
        let t = step(&State::new(), Input::Cleanup);
        assert_eq!(
            t.actions,
            [Action::Reply(Reply::Cleanup {
                verdict: CleanupVerdict::AlreadyGone,
                cached: false
            })]
        );
        assert_eq!(t.next.cleanups_started(), 0);
        let t2 = step(&t.next, Input::Open);
        assert_eq!(t2.actions, [Action::Reply(Reply::Refused(Refusal::Closed))]);
        let t3 = step(&t.next, Input::Cleanup);
        assert_eq!(
            t3.actions,
            [Action::Reply(Reply::Cleanup {
                verdict: CleanupVerdict::AlreadyGone,
                cached: true
            })]
        );
    }

    #[test]
    fn a_reclaimed_verdict_after_a_restart_is_absent_fenced_and_cached() {
        let t = step(&State::after_restart(), Input::Cleanup);
        assert_eq!(t.actions, [Action::StartCleanup, Action::AwaitCleanup]);
        let t = step(&t.next, Input::CleanupFinished(CleanupVerdict::Reclaimed));
        assert_eq!(t.next.job(), JobState::Absent);
        assert_eq!(t.next.cleaned(), Some(CleanupVerdict::Reclaimed));
        let again = step(&t.next, Input::Cleanup);
        assert_eq!(
            again.actions,
            [Action::Reply(Reply::Cleanup {
                verdict: CleanupVerdict::Reclaimed,
                cached: true
            })]
        );
        let open = step(&t.next, Input::Open);
        assert_eq!(
            open.actions,
            [Action::Reply(Reply::Refused(Refusal::Closed))]
        );
    }

    #[test]
    fn after_a_restart_a_cleanup_asks_the_workspace() {
        let t = step(&State::after_restart(), Input::Cleanup);
        assert_eq!(t.actions, [Action::StartCleanup, Action::AwaitCleanup]);
        // The started cleanup is counted (the actor model and the fuzz
        // oracle read this count to check "at most one").
        assert_eq!(t.next.cleanups_started(), 1);
    }

    #[test]
    fn duplicate_cleanups_never_start_a_second_removal() {
        let mut st = s(JobState::Present, Fence::Accepting);
        let mut started = 0;
        for i in 0..4 {
            let t = step(&st, Input::Cleanup);
            started += t
                .actions
                .iter()
                .filter(|a| **a == Action::StartCleanup)
                .count();
            st = t.next;
            if i == 1 {
                st = step(&st, Input::CleanupFinished(CleanupVerdict::Failed(FAIL))).next;
            }
        }
        assert_eq!(started, 1);
        assert_eq!(st.cleaned(), Some(CleanupVerdict::Failed(FAIL)));
        // Failed closed: the job is kept and reported, not forgotten.
        assert_eq!(st.job(), JobState::Present);
    }

    #[test]
    fn a_cleanup_that_could_not_run_is_started_again_by_the_next_one() {
        let t = step(&s(JobState::Present, Fence::Accepting), Input::Cleanup);
        assert_eq!(t.actions, [Action::StartCleanup, Action::AwaitCleanup]);
        // A duplicate while it runs waits for it (and gets its answer).
        let t = step(&t.next, Input::Cleanup);
        assert_eq!(t.actions, [Action::AwaitCleanup]);
        let t = step(&t.next, Input::CleanupCouldNotRun);
        assert!(t.actions.is_empty());
        assert_eq!(
            (t.next.fence(), t.next.job()),
            (Fence::Retry, JobState::Present)
        );
        assert!(t.next.cleaned().is_none());
        // Still closed to work.
        for input in [Input::Open, Input::Work] {
            let r = step(&t.next, input);
            assert_eq!(r.actions, [Action::Reply(Reply::Refused(Refusal::Closed))]);
        }
        // The next cleanup runs again; its verdict is final.
        let t = step(&t.next, Input::Cleanup);
        assert_eq!(t.actions, [Action::StartCleanup, Action::AwaitCleanup]);
        assert_eq!(t.next.cleanups_started(), 2);
        let t = step(&t.next, Input::CleanupFinished(CleanupVerdict::Cleaned));
        assert_eq!(t.next.cleaned(), Some(CleanupVerdict::Cleaned));
        let t = step(&t.next, Input::Cleanup);
        assert_eq!(
            t.actions,
            [Action::Reply(Reply::Cleanup {
                verdict: CleanupVerdict::Cleaned,
                cached: true
            })]
        );
    }

    #[test]
    fn stray_answers_change_nothing() {
        for st in states() {
            if st.job != JobState::Opening {
                let t = step(&st, Input::OpenFinished { ok: true });
                assert_eq!((t.next, t.actions.len()), (st, 0), "{st:?}");
            }
            if !st.cleanup_running() {
                let t = step(&st, Input::CleanupFinished(CleanupVerdict::Cleaned));
                assert_eq!((t.next, t.actions.len()), (st, 0), "{st:?}");
                let t = step(&st, Input::CleanupCouldNotRun);
                assert_eq!((t.next, t.actions.len()), (st, 0), "{st:?}");
            }
        }
    }
}

//! The process model: the real [`custodian::machine::process::step`] driven
//! by an adversarial environment, on every containment tier.
//!
//! The environment fires each event once, whenever it could happen: the
//! root exits (with a code), each stream closes (even after the driver
//! stopped reading: a late event may still be queued), the caller cancels,
//! and each timer fires once it has been armed — the hard deadline only
//! after the grace, since it is armed `grace + margin` after `TERM`. Every
//! [`Action::ProbeGroup`] is answered with each possible [`Probe`]. Time
//! itself is abstracted away: timers fire in any order relative to the other
//! events, which over-approximates every real schedule.
//!
//! The environment records what the machine made it do (signals, settles,
//! reaps, probes) and when, so properties are stated over that record.

use std::fmt;
use std::time::Duration;

use custodian::machine::process::{
    self, Action, Cause, Descendants, Event, ExitStatus, Limits, Phase, Probe, Signal, Status,
    Stream, StreamEnd, Summary, Tier, Timer,
};
use stateright::{Model, Property};

/// The seam the model is generic over: the real step function, or a broken
/// variant that wraps it.
pub trait ProcessStep: Send + Sync + 'static {
    /// A short name for reports.
    fn name(&self) -> &'static str;
    /// The property this variant is meant to break (`None` for the real
    /// machine).
    fn breaks(&self) -> Option<&'static str>;
    /// One step of the machine.
    fn step(&self, state: &State, event: Event, now: Duration) -> Transition;
}

type State = process::State<Duration>;
type Transition = process::Transition<Duration>;

/// The real machine, unaltered.
#[derive(Clone, Copy, Debug, Default)]
pub struct Real;

impl ProcessStep for Real {
    fn name(&self) -> &'static str {
        "process"
    }
    fn breaks(&self) -> Option<&'static str> {
        None
    }
    fn step(&self, state: &State, event: Event, now: Duration) -> Transition {
        process::step(state, event, now)
    }
}

/// Deliberately broken variants of the process machine, each wrapping the
/// real step function and altering one decision.
pub mod broken {
    use super::*;

    /// Forwards a cancel to the group even after settling — the bug of a
    /// cancel path that does not consult the settled state.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct SignalAfterSettle;

    impl ProcessStep for SignalAfterSettle {
        fn name(&self) -> &'static str {
            "process/broken/signal-after-settle"
        }
        fn breaks(&self) -> Option<&'static str> {
            Some(NO_SIGNAL_AFTER_SETTLE)
        }
        fn step(&self, state: &State, event: Event, now: Duration) -> Transition {
            let mut tr = process::step(state, event, now);
            if state.phase == Phase::Settled && event == Event::Cancel {
                tr.actions.push(Action::SignalGroup(Signal::Term));
            }
            tr
        }
    }

    /// Settles again when the hard deadline fires after settlement — the
    /// bug of a timer that is not disarmed by settling.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct SettleTwice;

    impl ProcessStep for SettleTwice {
        fn name(&self) -> &'static str {
            "process/broken/settle-twice"
        }
        fn breaks(&self) -> Option<&'static str> {
            Some(SETTLES_AT_MOST_ONCE)
        }
        fn step(&self, state: &State, event: Event, now: Duration) -> Transition {
            let mut tr = process::step(state, event, now);
            if state.phase == Phase::Settled && event == Event::HardDeadlineReached {
                tr.actions.push(Action::Reap);
                tr.actions.push(Action::Settle(Summary {
                    root: state.root,
                    cause: state.cause,
                    stdout: state.stdout.end,
                    stderr: state.stderr.end,
                    descendants: Descendants::UnconfirmedOrEscaped,
                    tier: state.tier,
                    timings: state.timings,
                }));
            }
            tr
        }
    }

    /// Sends `KILL` together with `TERM`, without waiting for the grace.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct KillBeforeGrace;

    impl ProcessStep for KillBeforeGrace {
        fn name(&self) -> &'static str {
            "process/broken/kill-before-grace"
        }
        fn breaks(&self) -> Option<&'static str> {
            Some(KILL_ONLY_AFTER_TERM_AND_GRACE)
        }
        fn step(&self, state: &State, event: Event, now: Duration) -> Transition {
            let mut tr = process::step(state, event, now);
            if let Some(i) = tr
                .actions
                .iter()
                .position(|a| *a == Action::SignalGroup(Signal::Term))
            {
                tr.actions.insert(i + 1, Action::SignalGroup(Signal::Kill));
            }
            tr
        }
    }
}

/// Property: at most one `Settle`.
pub const SETTLES_AT_MOST_ONCE: &str = "settles at most once";
/// Property: no signal once settled.
pub const NO_SIGNAL_AFTER_SETTLE: &str = "no signal after settlement";
/// Property: `KILL` only after `TERM` and the grace.
pub const KILL_ONLY_AFTER_TERM_AND_GRACE: &str = "KILL only after TERM and the grace";
/// Property: a state with nothing left to happen is settled.
pub const SETTLES: &str = "no enabled action implies settled";

/// The one-shot environment events, as bits of [`Sys::fired`].
const ROOT_EXIT: u16 = 1 << 0;
const STDOUT_CLOSED: u16 = 1 << 1;
const STDERR_CLOSED: u16 = 1 << 2;
const CANCEL: u16 = 1 << 3;
const DEADLINE: u16 = 1 << 4;
const GRACE: u16 = 1 << 5;
const DRAIN: u16 = 1 << 6;
const HARD: u16 = 1 << 7;

/// The checked system: the machine's state plus the environment's record.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Sys {
    /// The real machine state.
    pub machine: State,
    /// One-shot events fired so far (bits above).
    pub fired: u16,
    /// Timers armed so far (same bits as their events).
    pub armed: u16,
    /// Probes asked for and not answered yet.
    pub probes_pending: u8,
    /// The environment answered a probe with [`Probe::Empty`].
    pub saw_empty: bool,
    /// `TERM` signals sent.
    pub terms: u8,
    /// `KILL` signals sent.
    pub kills: u8,
    /// A `KILL` was sent before both a `TERM` and the grace's end.
    pub early_kill: bool,
    /// A signal was sent after settlement.
    pub signal_after_settle: bool,
    /// A group signal was sent after the root exited on a tier that does not
    /// pin the group id.
    pub unsafe_signal: bool,
    /// The root exited while `TERM` was sent and the grace running.
    pub exit_during_grace: bool,
    /// An event arrived after settlement.
    pub late_event: bool,
    /// `Reap` actions.
    pub reaps: u8,
    /// `Settle` actions.
    pub settles: u8,
    /// The first summary settled with.
    pub summary: Option<Summary<Duration>>,
}

/// An environment event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Act {
    /// Deliver this event to the machine.
    Deliver(Event),
}

/// The process model over a step function `S`.
pub struct ProcessModel<S> {
    /// The step function explored.
    pub step: S,
    /// The tiers to start from (one initial state each).
    pub tiers: Vec<Tier>,
}

impl<S: ProcessStep> ProcessModel<S> {
    /// A model of `step` on every tier.
    pub fn new(step: S) -> Self {
        ProcessModel {
            step,
            tiers: vec![Tier::PinnedGroup, Tier::Group, Tier::DirectChild],
        }
    }
}

impl<S> fmt::Debug for ProcessModel<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ProcessModel {{ tiers: {:?} }}", self.tiers)
    }
}

const LIMITS: Limits = Limits {
    timeout: Duration::from_secs(10),
    grace: Duration::from_secs(2),
    drain: Duration::from_secs(1),
    hard_margin: Duration::from_secs(3),
};

/// Time is abstracted: every event happens "now".
const NOW: Duration = Duration::ZERO;

fn bit(timer: Timer) -> u16 {
    match timer {
        Timer::Deadline => DEADLINE,
        Timer::Grace => GRACE,
        Timer::Drain => DRAIN,
        Timer::Hard => HARD,
    }
}

impl Sys {
    fn record(&mut self, before: &State, actions: Vec<Action<Duration>>) {
        for a in actions {
            match a {
                Action::SignalGroup(sig) => {
                    if before.phase == Phase::Settled || self.settles > 0 {
                        self.signal_after_settle = true;
                    }
                    if before.tier != Tier::PinnedGroup && self.fired & ROOT_EXIT != 0 {
                        self.unsafe_signal = true;
                    }
                    match sig {
                        Signal::Term => self.terms = self.terms.saturating_add(1),
                        Signal::Kill => {
                            if self.terms == 0 || self.fired & GRACE == 0 {
                                self.early_kill = true;
                            }
                            self.kills = self.kills.saturating_add(1);
                        }
                    }
                }
                Action::ArmTimer { timer, .. } => self.armed |= bit(timer),
                Action::CloseStreams => {}
                Action::ProbeGroup => self.probes_pending = self.probes_pending.saturating_add(1),
                Action::Reap => self.reaps = self.reaps.saturating_add(1),
                Action::Settle(summary) => {
                    self.settles = self.settles.saturating_add(1);
                    self.summary.get_or_insert(summary);
                }
            }
        }
    }
}

impl<S: ProcessStep> Model for ProcessModel<S> {
    type State = Sys;
    type Action = Act;

    fn init_states(&self) -> Vec<Sys> {
        self.tiers
            .iter()
            .map(|&tier| {
                let tr = process::start(tier, LIMITS, NOW);
                let mut s = Sys {
                    machine: tr.next,
                    fired: 0,
                    armed: 0,
                    probes_pending: 0,
                    saw_empty: false,
                    terms: 0,
                    kills: 0,
                    early_kill: false,
                    signal_after_settle: false,
                    unsafe_signal: false,
                    exit_during_grace: false,
                    late_event: false,
                    reaps: 0,
                    settles: 0,
                    summary: None,
                };
                let before = s.machine;
                s.record(&before, tr.actions);
                s
            })
            .collect()
    }

    fn actions(&self, s: &Sys, out: &mut Vec<Act>) {
        let once = |b: u16| s.fired & b == 0;
        if once(ROOT_EXIT) {
            out.push(Act::Deliver(Event::RootExited(ExitStatus::Code(0))));
        }
        if once(STDOUT_CLOSED) {
            out.push(Act::Deliver(Event::StreamClosed(Stream::Stdout)));
        }
        if once(STDERR_CLOSED) {
            out.push(Act::Deliver(Event::StreamClosed(Stream::Stderr)));
        }
        if once(CANCEL) {
            out.push(Act::Deliver(Event::Cancel));
        }
        let timer = |b: u16| once(b) && s.armed & b != 0;
        if timer(DEADLINE) {
            out.push(Act::Deliver(Event::DeadlineReached));
        }
        if timer(GRACE) {
            out.push(Act::Deliver(Event::GraceElapsed));
        }
        if timer(DRAIN) {
            out.push(Act::Deliver(Event::DrainBoundReached));
        }
        // Armed `grace + margin` after TERM, so never before the grace.
        if timer(HARD) && s.fired & GRACE != 0 {
            out.push(Act::Deliver(Event::HardDeadlineReached));
        }
        if s.probes_pending > 0 {
            for p in [Probe::Empty, Probe::Occupied, Probe::Unknown] {
                out.push(Act::Deliver(Event::GroupProbed(p)));
            }
        }
    }

    fn next_state(&self, s: &Sys, act: Act) -> Option<Sys> {
        let Act::Deliver(event) = act;
        let mut n = s.clone();
        n.late_event |= s.machine.phase == Phase::Settled;
        match event {
            Event::RootExited(_) => {
                n.fired |= ROOT_EXIT;
                n.exit_during_grace = s.machine.phase == Phase::Term;
            }
            Event::StreamClosed(Stream::Stdout) => n.fired |= STDOUT_CLOSED,
            Event::StreamClosed(Stream::Stderr) => n.fired |= STDERR_CLOSED,
            Event::Cancel => n.fired |= CANCEL,
            Event::DeadlineReached => n.fired |= DEADLINE,
            Event::GraceElapsed => n.fired |= GRACE,
            Event::DrainBoundReached => n.fired |= DRAIN,
            Event::HardDeadlineReached => n.fired |= HARD,
            Event::GroupProbed(p) => {
                n.probes_pending -= 1;
                n.saw_empty |= p == Probe::Empty;
            }
        }
        let tr = self.step.step(&s.machine, event, NOW);
        n.machine = tr.next;
        n.record(&s.machine, tr.actions);
        Some(n)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(SETTLES_AT_MOST_ONCE, |_, s: &Sys| s.settles <= 1),
            Property::always("reaped exactly once, with the settlement", |_, s: &Sys| {
                s.reaps == s.settles
            }),
            Property::always("settled is absorbing", |_, s: &Sys| {
                (s.settles > 0) == (s.machine.phase == Phase::Settled)
            }),
            Property::always(NO_SIGNAL_AFTER_SETTLE, |_, s: &Sys| !s.signal_after_settle),
            Property::always(KILL_ONLY_AFTER_TERM_AND_GRACE, |_, s: &Sys| !s.early_kill),
            Property::always("each signal at most once", |_, s: &Sys| {
                s.terms <= 1 && s.kills <= 1
            }),
            Property::always(
                "no group signal once an unpinned root exited",
                |_, s: &Sys| !s.unsafe_signal,
            ),
            Property::always(
                "the verdict is never more optimistic than observed",
                |_, s: &Sys| match s.summary {
                    Some(sum) if sum.descendants == Descendants::Terminated => {
                        sum.tier == Tier::PinnedGroup
                            && s.saw_empty
                            && sum.stdout == StreamEnd::Closed
                            && sum.stderr == StreamEnd::Closed
                    }
                    Some(sum) if sum.tier == Tier::DirectChild => {
                        sum.descendants == Descendants::Unsupported
                    }
                    _ => true,
                },
            ),
            Property::always(
                "timeout and cancel are reported as such",
                |_, s: &Sys| match s.summary {
                    Some(sum) => match sum.cause {
                        Some(Cause::Timeout) => {
                            sum.status() == Status::TimedOut && s.fired & DEADLINE != 0
                        }
                        Some(Cause::Cancel) => {
                            sum.status() == Status::Cancelled && s.fired & CANCEL != 0
                        }
                        _ => true,
                    },
                    None => true,
                },
            ),
            Property::always(SETTLES, |m: &Self, s: &Sys| {
                let mut acts = Vec::new();
                m.actions(s, &mut acts);
                !acts.is_empty() || (s.settles == 1 && s.machine.phase == Phase::Settled)
            }),
            Property::sometimes("the kill path is taken", |_, s: &Sys| s.kills > 0),
            Property::sometimes("the root exits during the grace", |_, s: &Sys| {
                s.exit_during_grace && s.settles > 0
            }),
            Property::sometimes("a clean exit settles as exited", |_, s: &Sys| {
                s.summary.is_some_and(|sum| sum.status() == Status::Exited)
            }),
            Property::sometimes("a timeout settles as timed out", |_, s: &Sys| {
                s.summary
                    .is_some_and(|sum| sum.status() == Status::TimedOut)
            }),
            Property::sometimes("a cancel settles as cancelled", |_, s: &Sys| {
                s.summary
                    .is_some_and(|sum| sum.status() == Status::Cancelled)
            }),
            Property::sometimes("descendants confirmed terminated", |_, s: &Sys| {
                s.summary
                    .is_some_and(|sum| sum.descendants == Descendants::Terminated)
            }),
            Property::sometimes("descendants unconfirmed or escaped", |_, s: &Sys| {
                s.summary
                    .is_some_and(|sum| sum.descendants == Descendants::UnconfirmedOrEscaped)
            }),
            Property::sometimes("a held pipe climbs the ladder", |_, s: &Sys| {
                s.machine.cause == Some(Cause::HeldStdio) && s.terms > 0
            }),
            Property::sometimes("a leftover group member climbs the ladder", |_, s: &Sys| {
                s.machine.cause == Some(Cause::Leftover) && s.terms > 0
            }),
            Property::sometimes("the hard deadline cuts the streams", |_, s: &Sys| {
                s.summary.is_some_and(|sum| {
                    sum.stdout == StreamEnd::CutAtDeadline || sum.stderr == StreamEnd::CutAtDeadline
                })
            }),
            Property::sometimes("an event arrives after settlement", |_, s: &Sys| {
                s.late_event
            }),
        ]
    }
}

/// Process states have no interchangeable parts: the representative is the
/// state itself.
pub fn representative(s: &Sys) -> Sys {
    s.clone()
}

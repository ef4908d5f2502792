//! The process model: the real [`custodian::machine::process::step`] (and
//! [`custodian::machine::process::abandon`], the driver's drop path) driven
//! by an adversarial environment in discrete time, on every containment
//! tier.
//!
//! # Time
//!
//! Time is a count of whole seconds since launch. Every timer the machine
//! arms is kept with its `at`; a timer fires only when it is the earliest
//! pending one (ties in any order), and time jumps to its `at`. Between
//! timers, time may also advance by one second ([`Act::Tick`]) as long as no
//! timer is passed, so the other events (the root's exit, a stream closing,
//! a cancel) happen at every whole second between two timers. Re-arming a
//! timer replaces its `at`, as in the driver. The limits are small and
//! chosen so that the timers interleave: the drain bound ends before, with
//! or after the grace, and the hard deadline comes one second after it.
//!
//! # Environment
//!
//! Each one-shot event happens once, whenever it could: the root exits
//! (with a code or killed by a signal), or exits *unobservably* (the
//! driver's `ExitUnobservable`: the exit is never reported and only the
//! timers end the run); each stream closes (even after the driver stopped
//! reading: a late event may still be queued); the caller cancels; the
//! caller asks for an interrupt (a session's `SIGINT`, any number of times,
//! at any moment, even after settlement); the driver is dropped ([`Act::Abandon`], which ends everything). Every
//! [`Action::ProbeGroup`] is answered with each possible [`Probe`]. Events
//! still arrive after settlement, which the machine must ignore.
//!
//! The environment records what the machine made it do (signals, arms,
//! settles, reaps, probes) and when, so properties are stated over that
//! record.

use std::fmt;
use std::time::Duration;

use custodian::machine::process::{
    self, Action, Cause, DescendantVerdict, Event, ExitStatus, Phase, Probe, ProcessLimits,
    ProcessStatus, Signal, Stream, StreamEnd, Summary, Tier, Timer,
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
    /// The driver's drop path.
    fn abandon(&self, state: &State, now: Duration) -> Transition {
        process::abandon(state, now)
    }
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

/// What the model knows about a tier, independently of the machine. A new
/// tier is one line of [`TIERS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TierFacts {
    /// The tier.
    pub tier: Tier,
    /// Group signals stay safe after the root's exit was observed (the
    /// group id cannot be reused before the reap).
    pub signals_after_exit: bool,
    /// The verdict may be [`DescendantVerdict::Terminated`] (an empty group can
    /// be confirmed).
    pub can_confirm: bool,
    /// An empty probe confirms only if both streams closed normally (a
    /// holder may have left the group). Not so on [`Tier::Cgroup`]: whoever
    /// held a pipe was in the cgroup, and the cgroup is empty.
    pub confirm_needs_clean_streams: bool,
    /// The only verdict the tier can give, if it is fixed.
    pub fixed_verdict: Option<DescendantVerdict>,
}

/// Every tier the model starts from, one initial state each.
pub const TIERS: &[TierFacts] = &[
    TierFacts {
        tier: Tier::PinnedGroup,
        signals_after_exit: true,
        can_confirm: true,
        confirm_needs_clean_streams: true,
        fixed_verdict: None,
    },
    TierFacts {
        tier: Tier::Cgroup,
        signals_after_exit: true,
        can_confirm: true,
        confirm_needs_clean_streams: false,
        fixed_verdict: None,
    },
    TierFacts {
        tier: Tier::Group,
        signals_after_exit: false,
        can_confirm: false,
        confirm_needs_clean_streams: true,
        fixed_verdict: Some(DescendantVerdict::UnconfirmedOrEscaped),
    },
    TierFacts {
        tier: Tier::DirectChild,
        signals_after_exit: false,
        can_confirm: false,
        confirm_needs_clean_streams: true,
        fixed_verdict: Some(DescendantVerdict::Unsupported),
    },
];

fn facts(tier: Tier) -> TierFacts {
    TIERS
        .iter()
        .copied()
        .find(|f| f.tier == tier)
        .unwrap_or(TierFacts {
            tier,
            signals_after_exit: false,
            can_confirm: false,
            confirm_needs_clean_streams: true,
            fixed_verdict: None,
        })
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
                    descendants: DescendantVerdict::UnconfirmedOrEscaped,
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

    /// Re-arms the deadline whenever a stream closes — the bug of a timer
    /// set up again by an unrelated event, pushing the timeout out.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct TimerRearmed;

    impl ProcessStep for TimerRearmed {
        fn name(&self) -> &'static str {
            "process/broken/timer-rearmed"
        }
        fn breaks(&self) -> Option<&'static str> {
            Some(TIMER_ARMED_AT_MOST_ONCE)
        }
        fn step(&self, state: &State, event: Event, now: Duration) -> Transition {
            let mut tr = process::step(state, event, now);
            if state.phase == Phase::Running && matches!(event, Event::StreamClosed(_)) {
                tr.actions.push(Action::ArmTimer {
                    timer: Timer::Deadline,
                    at: now + state.limits.timeout,
                });
            }
            tr
        }
    }

    /// Arms the hard deadline `hard_margin` after `TERM` instead of after
    /// the grace — the bug of a deadline measured from the wrong instant.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct HardBeforeGrace;

    impl ProcessStep for HardBeforeGrace {
        fn name(&self) -> &'static str {
            "process/broken/hard-before-grace"
        }
        fn breaks(&self) -> Option<&'static str> {
            Some(HARD_NOT_BEFORE_GRACE)
        }
        fn step(&self, state: &State, event: Event, now: Duration) -> Transition {
            let mut tr = process::step(state, event, now);
            for a in &mut tr.actions {
                if let Action::ArmTimer {
                    timer: Timer::Hard,
                    at,
                } = a
                {
                    *at = now + state.limits.hard_margin;
                }
            }
            tr
        }
    }

    /// Ignores a cancel once the root has exited — the bug of a cancel path
    /// that thinks an exited root leaves nothing to stop, so the run is
    /// reported by the root's own status instead of as cancelled.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct CauseDropped;

    impl ProcessStep for CauseDropped {
        fn name(&self) -> &'static str {
            "process/broken/cause-dropped"
        }
        fn breaks(&self) -> Option<&'static str> {
            Some(REQUESTED_CAUSE_REPORTED)
        }
        fn step(&self, state: &State, event: Event, now: Duration) -> Transition {
            if event == Event::Cancel && state.root.is_some() {
                return Transition {
                    next: *state,
                    actions: Vec::new(),
                };
            }
            process::step(state, event, now)
        }
    }

    /// Forwards a session's interrupt whenever the run is not settled —
    /// the bug of an interrupt path that does not ask whether a stop began
    /// (the ladder owns the signals then) or whether the group id is still
    /// the root's.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct InterruptAnytime;

    impl ProcessStep for InterruptAnytime {
        fn name(&self) -> &'static str {
            "process/broken/interrupt-anytime"
        }
        fn breaks(&self) -> Option<&'static str> {
            Some(INTERRUPT_ONLY_BEFORE_STOP)
        }
        fn step(&self, state: &State, event: Event, now: Duration) -> Transition {
            let mut tr = process::step(state, event, now);
            if event == Event::Interrupt
                && state.phase != Phase::Settled
                && !tr.actions.contains(&Action::SignalGroup(Signal::Int))
            {
                tr.actions.push(Action::SignalGroup(Signal::Int));
            }
            tr
        }
    }

    /// The drop path kills the group whatever the tier — the bug of the
    /// old hand-written drop path forgetting that an unpinned group id may
    /// have been reused once the root was reaped.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct DropKillsUnsafely;

    impl ProcessStep for DropKillsUnsafely {
        fn name(&self) -> &'static str {
            "process/broken/drop-kills-unsafely"
        }
        fn breaks(&self) -> Option<&'static str> {
            Some(NO_UNSAFE_SIGNAL)
        }
        fn step(&self, state: &State, event: Event, now: Duration) -> Transition {
            process::step(state, event, now)
        }
        fn abandon(&self, state: &State, now: Duration) -> Transition {
            let mut tr = process::abandon(state, now);
            if state.phase != Phase::Settled
                && !tr.actions.contains(&Action::SignalGroup(Signal::Kill))
            {
                tr.actions.insert(0, Action::SignalGroup(Signal::Kill));
            }
            tr
        }
    }
}

/// Property: at most one `Settle`.
pub const SETTLES_AT_MOST_ONCE: &str = "settles at most once";
/// Property: no signal once settled.
pub const NO_SIGNAL_AFTER_SETTLE: &str = "no signal after settlement";
/// Property: `KILL` only at least a grace after `TERM` (the drop path
/// excepted).
pub const KILL_ONLY_AFTER_TERM_AND_GRACE: &str =
    "KILL only a grace after TERM, once the grace fired (drop path excepted)";
/// Property: a state with nothing left to happen is settled.
pub const SETTLES: &str = "no enabled action implies settled";
/// Property: each timer armed at most once per run.
pub const TIMER_ARMED_AT_MOST_ONCE: &str = "each timer is armed at most once";
/// Property: the hard deadline never fires before the grace.
pub const HARD_NOT_BEFORE_GRACE: &str = "the hard deadline never fires before the grace";
/// Property: a cancel or deadline delivered before settlement is what the
/// status reports (the first of them).
pub const REQUESTED_CAUSE_REPORTED: &str = "a requested cancel or deadline is reported as such";
/// Property: no group signal after an observed exit on a tier that does not
/// pin the group id.
pub const NO_UNSAFE_SIGNAL: &str = "no group signal once an unpinned root's exit was observed";
/// Property: a session's `SIGINT` goes to the group only before any stop
/// began (`Running` or `Draining`), never during the ladder.
pub const INTERRUPT_ONLY_BEFORE_STOP: &str = "an interrupt is forwarded only before a stop began";

/// The one-shot environment events and fired timers, as bits of
/// [`Sys::fired`].
const ROOT_EXIT: u16 = 1 << 0;
const STDOUT_CLOSED: u16 = 1 << 1;
const STDERR_CLOSED: u16 = 1 << 2;
const CANCEL: u16 = 1 << 3;
const DEADLINE: u16 = 1 << 4;
const GRACE: u16 = 1 << 5;
const DRAIN: u16 = 1 << 6;
const HARD: u16 = 1 << 7;
const ABANDON: u16 = 1 << 8;

/// The timers in their slot order in [`Sys::timers`].
pub const TIMERS: [Timer; 4] = [Timer::Deadline, Timer::Grace, Timer::Drain, Timer::Hard];

fn slot(timer: Timer) -> usize {
    match timer {
        Timer::Deadline => 0,
        Timer::Grace => 1,
        Timer::Drain => 2,
        Timer::Hard => 3,
    }
}

fn bit(timer: Timer) -> u16 {
    match timer {
        Timer::Deadline => DEADLINE,
        Timer::Grace => GRACE,
        Timer::Drain => DRAIN,
        Timer::Hard => HARD,
    }
}

fn event_of(timer: Timer) -> Event {
    match timer {
        Timer::Deadline => Event::DeadlineReached,
        Timer::Grace => Event::GraceElapsed,
        Timer::Drain => Event::DrainBoundReached,
        Timer::Hard => Event::HardDeadlineReached,
    }
}

/// The checked system: the machine's state plus the environment's record.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Sys {
    /// The real machine state.
    pub machine: State,
    /// The current time.
    pub now: Duration,
    /// Each timer's pending `at` (armed, not fired yet), by [`TIMERS`] slot.
    pub timers: [Option<Duration>; 4],
    /// How often each timer was armed, by [`TIMERS`] slot.
    pub arms: [u8; 4],
    /// One-shot events and timers fired so far (bits above).
    pub fired: u16,
    /// The root exited and the exit was delivered to the machine.
    pub exit_observed: bool,
    /// The root exited and the exit will never be reported.
    pub exit_unobserved: bool,
    /// The first of cancel and deadline delivered before settlement.
    pub requested: Option<Cause>,
    /// Probes asked for and not answered yet.
    pub probes_pending: u8,
    /// The environment answered a probe with [`Probe::Empty`].
    pub saw_empty: bool,
    /// When `TERM` was sent.
    pub term_at: Option<Duration>,
    /// `TERM` signals sent.
    pub terms: u8,
    /// `KILL` signals sent.
    pub kills: u8,
    /// A `KILL` was sent by a step before `TERM` and the grace.
    pub early_kill: bool,
    /// The hard deadline fired while the grace had not.
    pub hard_before_grace: bool,
    /// A signal was sent after settlement.
    pub signal_after_settle: bool,
    /// A group signal was sent after an observed root exit on a tier that
    /// does not pin the group id.
    pub unsafe_signal: bool,
    /// The root exited while `TERM` was sent and the grace running.
    pub exit_during_grace: bool,
    /// An event arrived after settlement.
    pub late_event: bool,
    /// A `SIGINT` was sent while the ladder ran (`Term` or `Kill`).
    pub interrupt_in_stop: bool,
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
    /// The root exits and the driver observes it.
    Exit(ExitStatus),
    /// The root exits but the exit can never be observed.
    ExitUnobserved,
    /// A stream reaches end-of-file.
    Close(Stream),
    /// The caller cancels.
    Cancel,
    /// The caller asks for an interrupt (not one-shot).
    Interrupt,
    /// The earliest pending timer fires; time jumps to its `at`.
    Fire(Timer),
    /// One second passes without passing a timer.
    Tick,
    /// The driver answers a probe.
    Probed(Probe),
    /// The driver is dropped (runtime shutdown): its drop path runs, then
    /// nothing else happens.
    Abandon,
}

/// The process model over a step function `S`.
pub struct ProcessModel<S> {
    /// The step function explored.
    pub step: S,
    /// The tiers to start from (one initial state each).
    pub tiers: Vec<Tier>,
}

impl<S: ProcessStep> ProcessModel<S> {
    /// A model of `step` on every tier of [`TIERS`].
    pub fn new(step: S) -> Self {
        ProcessModel {
            step,
            tiers: TIERS.iter().map(|f| f.tier).collect(),
        }
    }

    /// The machine transition `act` causes in `s`, if `act` reaches the
    /// machine (a tick or an unobserved exit does not).
    pub fn transition(&self, s: &Sys, act: Act) -> Option<(Event, Transition)> {
        let now = self.time_of(s, act);
        let event = match act {
            Act::Exit(st) => Event::RootExited(st),
            Act::Close(which) => Event::StreamClosed(which),
            Act::Cancel => Event::Cancel,
            Act::Interrupt => Event::Interrupt,
            Act::Fire(t) => event_of(t),
            Act::Probed(p) => Event::GroupProbed(p),
            Act::Tick | Act::ExitUnobserved | Act::Abandon => return None,
        };
        Some((event, self.step.step(&s.machine, event, now)))
    }

    /// The time at which `act` happens in `s`.
    pub fn time_of(&self, s: &Sys, act: Act) -> Duration {
        match act {
            Act::Fire(t) => s.timers[slot(t)].unwrap_or(s.now),
            Act::Tick => s.now + TICK,
            _ => s.now,
        }
    }
}

impl<S> fmt::Debug for ProcessModel<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ProcessModel {{ tiers: {:?} }}", self.tiers)
    }
}

/// The limits of every modelled run: small, and chosen so that the timers
/// interleave (see the module documentation).
pub const LIMITS: ProcessLimits = ProcessLimits {
    timeout: Duration::from_secs(3),
    grace: Duration::from_secs(2),
    drain: Duration::from_secs(1),
    hard_margin: Duration::from_secs(1),
};

/// The step of [`Act::Tick`].
pub const TICK: Duration = Duration::from_secs(1);

impl Sys {
    fn settled(&self) -> bool {
        self.settles > 0 || self.machine.phase == Phase::Settled
    }

    /// The earliest pending timer's `at`.
    fn next_timer(&self) -> Option<Duration> {
        self.timers.iter().flatten().min().copied()
    }

    fn record(&mut self, before: &State, actions: Vec<Action<Duration>>, abandoning: bool) {
        for a in actions {
            match a {
                Action::SignalGroup(sig) => {
                    if before.phase == Phase::Settled || self.settles > 0 {
                        self.signal_after_settle = true;
                    }
                    if !facts(before.tier).signals_after_exit && self.exit_observed {
                        self.unsafe_signal = true;
                    }
                    match sig {
                        Signal::Term => {
                            self.terms = self.terms.saturating_add(1);
                            self.term_at.get_or_insert(self.now);
                        }
                        Signal::Int => {
                            if matches!(before.phase, Phase::Term | Phase::Kill) {
                                self.interrupt_in_stop = true;
                            }
                        }
                        Signal::Kill => {
                            let graced = self
                                .term_at
                                .is_some_and(|t| self.now >= t + before.limits.grace)
                                && self.fired & GRACE != 0;
                            if !graced && !abandoning {
                                self.early_kill = true;
                            }
                            self.kills = self.kills.saturating_add(1);
                        }
                    }
                }
                Action::ArmTimer { timer, at } => {
                    let i = slot(timer);
                    self.arms[i] = self.arms[i].saturating_add(1);
                    self.timers[i] = Some(at);
                }
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
                let tr = process::start(tier, LIMITS, Duration::ZERO);
                let mut s = Sys {
                    machine: tr.next,
                    now: Duration::ZERO,
                    timers: [None; 4],
                    arms: [0; 4],
                    fired: 0,
                    exit_observed: false,
                    exit_unobserved: false,
                    requested: None,
                    probes_pending: 0,
                    saw_empty: false,
                    term_at: None,
                    terms: 0,
                    kills: 0,
                    early_kill: false,
                    hard_before_grace: false,
                    signal_after_settle: false,
                    unsafe_signal: false,
                    exit_during_grace: false,
                    late_event: false,
                    interrupt_in_stop: false,
                    reaps: 0,
                    settles: 0,
                    summary: None,
                };
                let before = s.machine;
                s.record(&before, tr.actions, false);
                s
            })
            .collect()
    }

    fn actions(&self, s: &Sys, out: &mut Vec<Act>) {
        if s.fired & ABANDON != 0 {
            return;
        }
        let once = |b: u16| s.fired & b == 0;
        if once(ROOT_EXIT) {
            out.push(Act::Exit(ExitStatus::Code(0)));
            out.push(Act::Exit(ExitStatus::Signal(9)));
            out.push(Act::ExitUnobserved);
        }
        if once(STDOUT_CLOSED) {
            out.push(Act::Close(Stream::Stdout));
        }
        if once(STDERR_CLOSED) {
            out.push(Act::Close(Stream::Stderr));
        }
        if once(CANCEL) {
            out.push(Act::Cancel);
        }
        out.push(Act::Interrupt);
        if let Some(next) = s.next_timer() {
            for t in TIMERS {
                if s.timers[slot(t)] == Some(next) {
                    out.push(Act::Fire(t));
                }
            }
            // Time passes between timers only while the run is live.
            if !s.settled() && s.now + TICK < next {
                out.push(Act::Tick);
            }
        }
        if s.probes_pending > 0 {
            for p in [Probe::Empty, Probe::Occupied, Probe::Unknown] {
                out.push(Act::Probed(p));
            }
        }
        out.push(Act::Abandon);
    }

    fn next_state(&self, s: &Sys, act: Act) -> Option<Sys> {
        let mut n = s.clone();
        n.now = self.time_of(s, act);
        let settled = s.machine.phase == Phase::Settled;
        match act {
            Act::Tick => return Some(n),
            Act::ExitUnobserved => {
                n.fired |= ROOT_EXIT;
                n.exit_unobserved = true;
                return Some(n);
            }
            Act::Abandon => {
                n.fired |= ABANDON;
                let tr = self.step.abandon(&s.machine, n.now);
                n.machine = tr.next;
                n.record(&s.machine, tr.actions, true);
                return Some(n);
            }
            Act::Exit(_) => {
                n.fired |= ROOT_EXIT;
                n.exit_observed = true;
                n.exit_during_grace = s.machine.phase == Phase::Term;
            }
            Act::Close(Stream::Stdout) => n.fired |= STDOUT_CLOSED,
            Act::Close(Stream::Stderr) => n.fired |= STDERR_CLOSED,
            Act::Cancel => {
                n.fired |= CANCEL;
                if !settled {
                    n.requested.get_or_insert(Cause::Cancel);
                }
            }
            Act::Fire(t) => {
                n.fired |= bit(t);
                n.timers[slot(t)] = None;
                match t {
                    Timer::Deadline if !settled => {
                        n.requested.get_or_insert(Cause::Timeout);
                    }
                    Timer::Hard if s.fired & GRACE == 0 => n.hard_before_grace = true,
                    _ => {}
                }
            }
            Act::Interrupt => {}
            Act::Probed(p) => {
                n.probes_pending -= 1;
                n.saw_empty |= p == Probe::Empty;
            }
        }
        n.late_event |= settled;
        let (_, tr) = self.transition(s, act)?;
        n.machine = tr.next;
        n.record(&s.machine, tr.actions, false);
        Some(n)
    }

    fn format_action(&self, act: &Act) -> String {
        format!("{act:?}")
    }

    fn format_step(&self, last: &Sys, act: Act) -> Option<String> {
        let next = self.next_state(last, act)?;
        Some(crate::explain::process_state(&next))
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
            Property::always(NO_UNSAFE_SIGNAL, |_, s: &Sys| !s.unsafe_signal),
            Property::always(INTERRUPT_ONLY_BEFORE_STOP, |_, s: &Sys| {
                !s.interrupt_in_stop
            }),
            Property::always(TIMER_ARMED_AT_MOST_ONCE, |_, s: &Sys| {
                s.arms.iter().all(|&n| n <= 1)
            }),
            Property::always(HARD_NOT_BEFORE_GRACE, |_, s: &Sys| !s.hard_before_grace),
            Property::always(
                "the ladder settles by the hard deadline",
                |_, s: &Sys| match (s.term_at, s.summary) {
                    (Some(t), Some(sum)) => sum
                        .timings
                        .settled
                        .is_some_and(|at| at <= t + LIMITS.grace + LIMITS.hard_margin),
                    _ => true,
                },
            ),
            Property::always(
                "the verdict is never more optimistic than observed",
                |_, s: &Sys| match s.summary {
                    Some(sum) if sum.descendants == DescendantVerdict::Terminated => {
                        let f = facts(sum.tier);
                        f.can_confirm
                            && s.saw_empty
                            && (!f.confirm_needs_clean_streams
                                || (sum.stdout == StreamEnd::Closed
                                    && sum.stderr == StreamEnd::Closed))
                    }
                    Some(sum) => facts(sum.tier)
                        .fixed_verdict
                        .is_none_or(|v| v == sum.descendants),
                    None => true,
                },
            ),
            Property::always(
                "timeout and cancel are reported only when they happened",
                |_, s: &Sys| match s.summary {
                    Some(sum) => match sum.cause {
                        Some(Cause::Timeout) => {
                            sum.status() == ProcessStatus::TimedOut && s.fired & DEADLINE != 0
                        }
                        Some(Cause::Cancel) => {
                            sum.status() == ProcessStatus::Cancelled
                                && s.fired & (CANCEL | ABANDON) != 0
                        }
                        _ => true,
                    },
                    None => true,
                },
            ),
            Property::always(REQUESTED_CAUSE_REPORTED, |_, s: &Sys| {
                match (s.requested, s.summary) {
                    (Some(Cause::Timeout), Some(sum)) => sum.status() == ProcessStatus::TimedOut,
                    (Some(Cause::Cancel), Some(sum)) => sum.status() == ProcessStatus::Cancelled,
                    _ => true,
                }
            }),
            Property::always(
                "an exit never observed ends by the hard deadline or the drop path",
                |_, s: &Sys| match s.summary {
                    Some(sum) if sum.root.is_none() => {
                        s.fired & (HARD | ABANDON) != 0
                            && matches!(
                                sum.status(),
                                ProcessStatus::TimedOut | ProcessStatus::Cancelled
                            )
                    }
                    _ => true,
                },
            ),
            Property::always(SETTLES, |m: &Self, s: &Sys| {
                let mut acts = Vec::new();
                m.actions(s, &mut acts);
                !acts.is_empty() || (s.settles == 1 && s.machine.phase == Phase::Settled)
            }),
            Property::sometimes("the kill path is taken", |_, s: &Sys| {
                s.kills > 0 && s.fired & ABANDON == 0
            }),
            Property::sometimes("the root exits during the grace", |_, s: &Sys| {
                s.exit_during_grace && s.settles > 0
            }),
            Property::sometimes("a clean exit settles as exited", |_, s: &Sys| {
                s.summary
                    .is_some_and(|sum| sum.status() == ProcessStatus::Exited)
            }),
            Property::sometimes(
                "a root killed by a signal settles as signaled",
                |_, s: &Sys| {
                    s.summary
                        .is_some_and(|sum| sum.status() == ProcessStatus::Signaled)
                },
            ),
            Property::sometimes("a timeout settles as timed out", |_, s: &Sys| {
                s.summary
                    .is_some_and(|sum| sum.status() == ProcessStatus::TimedOut)
            }),
            Property::sometimes("a cancel settles as cancelled", |_, s: &Sys| {
                s.summary
                    .is_some_and(|sum| sum.status() == ProcessStatus::Cancelled)
            }),
            Property::sometimes("descendants confirmed terminated", |_, s: &Sys| {
                s.summary
                    .is_some_and(|sum| sum.descendants == DescendantVerdict::Terminated)
            }),
            Property::sometimes("descendants unconfirmed or escaped", |_, s: &Sys| {
                s.summary
                    .is_some_and(|sum| sum.descendants == DescendantVerdict::UnconfirmedOrEscaped)
            }),
            Property::sometimes("a held pipe climbs the ladder", |_, s: &Sys| {
                s.machine.cause == Some(Cause::HeldStdio) && s.terms > 0
            }),
            Property::sometimes("a leftover group member climbs the ladder", |_, s: &Sys| {
                s.machine.cause == Some(Cause::Leftover) && s.terms > 0
            }),
            Property::sometimes("the hard deadline cuts the streams", |_, s: &Sys| {
                s.fired & ABANDON == 0
                    && s.summary.is_some_and(|sum| {
                        sum.stdout == StreamEnd::CutAtDeadline
                            || sum.stderr == StreamEnd::CutAtDeadline
                    })
            }),
            Property::sometimes("the drain bound fires before the grace", |_, s: &Sys| {
                s.fired & DRAIN != 0 && s.fired & GRACE == 0 && s.terms > 0
            }),
            Property::sometimes("the deadline fires while draining", |_, s: &Sys| {
                s.exit_observed && s.requested == Some(Cause::Timeout) && s.settles > 0
            }),
            Property::sometimes(
                "an unobserved exit settles by the hard deadline",
                |_, s: &Sys| {
                    s.exit_unobserved
                        && s.fired & (HARD | ABANDON) == HARD
                        && s.summary.is_some_and(|sum| sum.root.is_none())
                },
            ),
            Property::sometimes("the drop path kills a live group", |_, s: &Sys| {
                s.fired & ABANDON != 0 && s.terms == 0 && s.kills == 1
            }),
            Property::sometimes(
                "the drop path settles an unpinned exited run without a signal",
                |_, s: &Sys| {
                    s.fired & ABANDON != 0
                        && s.kills == 0
                        && s.exit_observed
                        && s.summary
                            .is_some_and(|sum| !facts(sum.tier).signals_after_exit)
                },
            ),
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

//! The process machine: `Running → Term → Kill → Settled`, plus the path
//! where the root exits first and the output streams drain.
//!
//! # Theory of operation
//!
//! One governed process is one [`State`]. The driver in `process/` feeds it
//! [`Event`]s together with the current time and executes the
//! [`Action`]s that come back; the machine itself never reads a clock,
//! never signals anything and never touches a descriptor. The stateright
//! model in `model/` calls this very [`step`] function.
//!
//! ```text
//!            RootExited                 streams done
//!  Running ─────────────▶ Draining ───────────────────▶ (probe) ──▶ Settled
//!     │ Deadline/Cancel      │ Deadline/Cancel/DrainBound     ▲
//!     ▼                      ▼ (or probe says Occupied)        │
//!   Term ◀───────────────────┘                                 │
//!     │ GraceElapsed                                           │
//!     ▼                                                        │
//!   Kill ──── root exited + streams done (probe) / HardDeadline ┘
//! ```
//!
//! * **Running**: the root has not been seen to exit and no signal was sent.
//! * **Draining**: the root exited on its own; the machine waits for both
//!   streams to reach end-of-file, at most the drain bound.
//! * **Term**: `SIGTERM` went to the group (or could not be sent safely); the
//!   grace timer and the hard deadline are armed.
//! * **Kill**: the grace elapsed; `SIGKILL` went to the group if that was
//!   still safe. Only the hard deadline is left to wait for.
//! * **Settled**: absorbing. [`Action::Reap`] and [`Action::Settle`] were
//!   emitted exactly once, on the transition into it.
//!
//! Whenever the root has exited and both streams are done, a machine on the
//! [`Tier::PinnedGroup`] or [`Tier::Cgroup`] tier asks the driver to look at
//! the group ([`Action::ProbeGroup`]: a `/proc` scan of the process group,
//! or `cgroup.events` of the process's cgroup) and waits for
//! [`Event::GroupProbed`]. An empty
//! group settles; an occupied group climbs the ladder (`TERM`, then `KILL`
//! after the grace); a group still occupied after `KILL` settles as
//! [`DescendantVerdict::UnconfirmedOrEscaped`]. On the other tiers no probe is
//! possible and the machine settles as soon as the root exited and the
//! streams are done.
//!
//! # Invariants (checked by the unit tests below and by the model)
//!
//! * `Settle` is emitted at most once, together with exactly one `Reap`, and
//!   [`Phase::Settled`] is absorbing.
//! * No action at all is emitted by a settled machine, so no signal after
//!   settlement.
//! * `SignalGroup(Kill)` is only emitted on [`Event::GraceElapsed`] in
//!   [`Phase::Term`] after `SignalGroup(Term)` was emitted.
//! * `SignalGroup(Int)` is only emitted on [`Event::Interrupt`], before any
//!   stop began ([`Phase::Running`] or [`Phase::Draining`]), and changes no
//!   state.
//! * Group signals after the root exited are only emitted on
//!   [`Tier::PinnedGroup`] and [`Tier::Cgroup`], where the unreaped root
//!   keeps the group id from being reused.
//! * The verdict is [`DescendantVerdict::Terminated`] only after the driver
//!   reported the group empty, and then: on [`Tier::Cgroup`] always (an
//!   unpopulated cgroup means every descendant is dead, whoever held a
//!   pipe); on [`Tier::PinnedGroup`] only if no stream was held open past
//!   the root's exit or cut (a holder may have left the group); never on
//!   the other tiers.
//!
//! # Time
//!
//! `now` is any [`Instant`]: the runtime passes `tokio::time::Instant`, the
//! model and the tests pass a [`Duration`] since launch. The machine stores
//! instants only to report timings and to compute timer expiry instants; it
//! never compares `now` with them, so an event is trusted to arrive when the
//! driver says it did. A timer event for a timer that was never armed (for
//! example [`Event::GraceElapsed`] while [`Phase::Running`]) cannot happen
//! in the runtime and is ignored.

use core::fmt::Debug;
use core::hash::Hash;
use core::ops::Add;
use core::time::Duration;

/// A point in time as the machine sees it: anything copyable, ordered and
/// advanced by a [`Duration`] (`Duration` since launch,
/// `std::time::Instant`, `tokio::time::Instant`).
pub trait Instant: Copy + Ord + Debug + Hash + Add<Duration, Output = Self> {}

impl<T> Instant for T where T: Copy + Ord + Debug + Hash + Add<Duration, Output = T> {}

/// How far the platform lets the driver contain and observe the group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// POSIX process group whose id is pinned by the root being observed
    /// but not reaped (Linux `pidfd` + `waitid(WNOWAIT)`): group signals
    /// stay safe until [`Action::Reap`], and the group can be probed.
    PinnedGroup,
    /// POSIX process group without pinning: the root is reaped when its
    /// exit is observed, so group signals are only sent while the root has
    /// not exited (the seed's rule) and the group cannot be probed.
    Group,
    /// Only the direct child can be terminated (Windows); descendants are
    /// [`DescendantVerdict::Unsupported`].
    DirectChild,
    /// The root and every descendant live in a cgroup v2 of their own, and
    /// the root is pinned as in [`Tier::PinnedGroup`]. `SIGTERM` goes to the
    /// process group; [`Signal::Kill`] is executed as `cgroup.kill` (plus
    /// `killpg`), which reaches every member, `setsid` escapees included.
    /// The probe reads `cgroup.events`: [`Probe::Empty`] means
    /// `populated 0`, i.e. no task is left.
    Cgroup,
}

/// The tunables of one run. The driver arms timers from these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProcessLimits {
    /// From launch to [`Event::DeadlineReached`].
    pub timeout: Duration,
    /// From `SIGTERM` to [`Event::GraceElapsed`].
    pub grace: Duration,
    /// From the root's exit to [`Event::DrainBoundReached`].
    pub drain: Duration,
    /// From the end of the grace to [`Event::HardDeadlineReached`].
    pub hard_margin: Duration,
}

/// How the root ended, as the OS reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitStatus {
    /// Exited with this code.
    Code(i32),
    /// Terminated by this signal number.
    Signal(i32),
}

/// One of the two captured output streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    /// The child's standard output.
    Stdout,
    /// The child's standard error.
    Stderr,
}

/// The signal to send to the group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// `SIGTERM`: please stop.
    Term,
    /// `SIGKILL`: stop now.
    Kill,
    /// `SIGINT`: the interrupt a terminal's Ctrl-C sends, forwarded for the
    /// caller ([`Event::Interrupt`]); never a step of the ladder.
    Int,
}

/// The timers the machine arms; each is armed at most once per run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Timer {
    /// Fires [`Event::DeadlineReached`].
    Deadline,
    /// Fires [`Event::GraceElapsed`].
    Grace,
    /// Fires [`Event::DrainBoundReached`].
    Drain,
    /// Fires [`Event::HardDeadlineReached`].
    Hard,
}

/// What the driver saw when it looked at the group ([`Action::ProbeGroup`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Probe {
    /// No descendant of the root is alive, as a witness that sees every
    /// descendant observed (the cgroup tier's `populated 0`, the subreaper
    /// tier's adoption witness). A process group found empty is
    /// not enough — a descendant may have left it — and is answered
    /// [`Probe::Unknown`].
    Empty,
    /// At least one live member besides the root.
    Occupied,
    /// The driver could not tell (including: the group is empty, but the
    /// tier cannot see a descendant outside it).
    Unknown,
}

/// An input to the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// The root exited (observed; on [`Tier::PinnedGroup`] not yet reaped).
    RootExited(ExitStatus),
    /// A stream reached end-of-file (or failed to read).
    StreamClosed(Stream),
    /// The timeout elapsed ([`Timer::Deadline`]).
    DeadlineReached,
    /// The grace after `SIGTERM` elapsed ([`Timer::Grace`]).
    GraceElapsed,
    /// The drain bound after the root's exit elapsed ([`Timer::Drain`]).
    DrainBoundReached,
    /// The hard deadline elapsed ([`Timer::Hard`]).
    HardDeadlineReached,
    /// The embedding runtime asked to stop the process.
    Cancel,
    /// The caller asked to interrupt the process (`SIGINT` to its group,
    /// as a terminal's Ctrl-C): forwarded while the process runs and no
    /// stop began, and only while the group id is still the root's.
    /// Changes nothing else: the process may go on running.
    Interrupt,
    /// The answer to [`Action::ProbeGroup`].
    GroupProbed(Probe),
}

/// What the driver must do. Emitted in order; execute them in order.
#[must_use = "the machine decides, the driver must act"]
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action<I> {
    /// Send this signal to the whole process group (`killpg`); on
    /// [`Tier::Cgroup`], [`Signal::Kill`] also writes `cgroup.kill`.
    SignalGroup(Signal),
    /// Deliver the timer's event at `at`.
    ArmTimer {
        /// Which timer.
        timer: Timer,
        /// When it fires.
        at: I,
    },
    /// Stop reading both streams and drop their read ends; what was
    /// captured so far is final.
    CloseStreams,
    /// Look for live members of the group besides the root and answer with
    /// [`Event::GroupProbed`]. The driver may poll for a short window
    /// (much shorter than the grace) so that members that are just dying
    /// after a signal count as gone; any answer is safe, since only
    /// [`Probe::Empty`] can lead to [`DescendantVerdict::Terminated`].
    ProbeGroup,
    /// Release the root: reap it if it exited, else hand it to a background
    /// reaper. Emitted exactly once, just before [`Action::Settle`].
    Reap,
    /// The run is over; this is its summary. Emitted exactly once.
    Settle(Summary<I>),
}

/// The coarse position of the machine. See the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Root alive, no signal sent.
    Running,
    /// Root exited on its own; waiting for the streams.
    Draining,
    /// `SIGTERM` sent (or not safely sendable), grace running.
    Term,
    /// Grace elapsed; `SIGKILL` sent if it was safe.
    Kill,
    /// Absorbing.
    Settled,
}

/// Why the ladder (`TERM → grace → KILL`) was climbed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// The timeout elapsed.
    Timeout,
    /// The embedding runtime cancelled.
    Cancel,
    /// The root exited but a stream stayed open past the drain bound.
    HeldStdio,
    /// The root exited but the group still had live members.
    Leftover,
}

/// How a stream ended: decided here, reported as is by the evidence
/// (`process::capture::CapturedStream::state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StreamEnd {
    /// End-of-file (every writer closed it) while the root was alive or
    /// within the drain bound.
    Closed,
    /// Still open when the drain bound (or the deadline) passed after the
    /// root exited: some descendant held it; what was read until then is
    /// kept.
    HeldOpen,
    /// Closed by custodian while it was still open: at the hard deadline,
    /// or when the run was abandoned ([`abandon`]: its runtime shutting
    /// down). The minimal evidence of an internal error says it too, with
    /// nothing of the stream kept.
    CutAtDeadline,
}

/// One stream as the machine tracks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StreamState {
    /// Still being read.
    pub open: bool,
    /// What the evidence would say if the stream ended now.
    pub end: StreamEnd,
}

/// The descendant verdict: never more optimistic than what was observed.
///
/// `terminated` is said only when custodian observed, after the root
/// exited, that no descendant of it is alive; only a tier that can see
/// every descendant can observe that. By the evidence's tier names:
///
/// - `cgroup`: the process's cgroup was observed unpopulated
///   (`cgroup.events` said `populated 0`): every descendant, in the process
///   group or not, is dead, whoever held stdout or stderr.
/// - `subreaper`: a pass over custodian's own children found none alive and
///   none exited-but-unreaped (every live descendant of an exited root has a
///   chain of live ancestors ending at a child of custodian, in the group or
///   not), `/proc` shows every process, and no descendant held stdout or
///   stderr past the root's exit.
/// - `pinned_process_group`: never. A group confirmed empty is reported
///   `unconfirmed_or_escaped` with `may_have_left_group`: a descendant that
///   left the group (`setsid`, `setpgid`) and closed its stdio is invisible
///   to this tier.
/// - `process_group`: never (`root_reaped_before_check`).
/// - `direct_child`: never; the verdict is `unsupported`.
///
/// Decided by this machine ([`Summary::descendants`]) and reported as is
/// by the evidence. (The same text is in
/// `docs/contracts/process-evidence.md` and `docs/threat-model.md`.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DescendantVerdict {
    /// The driver answered [`Probe::Empty`] (a witness that sees every
    /// descendant found none alive), per tier: [`Tier::Cgroup`] — the cgroup
    /// was observed unpopulated, whoever held a pipe; [`Tier::PinnedGroup`]
    /// — the subreaper's adoption witness saw no descendant and no stream
    /// was held open or cut (a group scan alone never answers `Empty`).
    /// Never on the other tiers.
    Terminated,
    /// A descendant held stdio, may have left the group, or emptiness could
    /// not be confirmed.
    UnconfirmedOrEscaped,
    /// The platform cannot tell.
    Unsupported,
}

/// The state of the last [`Action::ProbeGroup`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeState {
    /// No probe outstanding.
    Idle,
    /// Waiting for [`Event::GroupProbed`].
    Pending,
    /// The last probe found the group occupied while in this phase
    /// ([`Phase::Term`]); the machine waits for the grace.
    OccupiedIn(Phase),
}

/// When things happened, as instants of the driver's clock (the evidence
/// reports them as `process::evidence::Timings`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Instants<I> {
    /// Launch.
    pub started: I,
    /// [`Event::RootExited`] arrived.
    pub root_exited: Option<I>,
    /// `SIGTERM` was sent.
    pub term_sent: Option<I>,
    /// `SIGKILL` was sent.
    pub kill_sent: Option<I>,
    /// The machine settled.
    pub settled: Option<I>,
}

/// The evidence summary carried by [`Action::Settle`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Summary<I> {
    /// How the root ended, if it was seen to end.
    pub root: Option<ExitStatus>,
    /// Why the ladder was climbed, if it was.
    pub cause: Option<Cause>,
    /// How stdout ended.
    pub stdout: StreamEnd,
    /// How stderr ended.
    pub stderr: StreamEnd,
    /// The descendant verdict.
    pub descendants: DescendantVerdict,
    /// The containment tier that was active.
    pub tier: Tier,
    /// Timings, `settled` included.
    pub timings: Instants<I>,
}

/// How a governed process ended: the overall status its evidence reports.
/// The machine decides the first four ([`Summary::status`]); the runtime
/// reports [`ProcessStatus::InternalError`] when its driver failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ProcessStatus {
    /// The root exited on its own with a code and no timeout or cancel
    /// happened.
    Exited,
    /// The root was ended by a signal custodian did not send.
    Signaled,
    /// The timeout passed; custodian escalated.
    TimedOut,
    /// The embedding runtime cancelled; custodian escalated.
    Cancelled,
    /// custodian failed internally (a bug) after the launch; it killed the
    /// group at once and reaped the root. What was captured until then may
    /// be missing. Never decided by the machine.
    InternalError,
}

impl<I> Summary<I> {
    /// The status to report: timeout and cancel win over the root's own
    /// status; a root that was never seen to exit counts as timed out
    /// (the hard deadline is only armed once the ladder has started).
    pub fn status(&self) -> ProcessStatus {
        match (self.cause, self.root) {
            (Some(Cause::Timeout), _) => ProcessStatus::TimedOut,
            (Some(Cause::Cancel), _) => ProcessStatus::Cancelled,
            (_, Some(ExitStatus::Code(_))) => ProcessStatus::Exited,
            (_, Some(ExitStatus::Signal(_))) => ProcessStatus::Signaled,
            (_, None) => ProcessStatus::TimedOut,
        }
    }
}

/// The whole state of one governed process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct State<I> {
    /// Where the machine is.
    pub phase: Phase,
    /// The containment tier.
    pub tier: Tier,
    /// The tunables.
    pub limits: ProcessLimits,
    /// How the root ended, once observed.
    pub root: Option<ExitStatus>,
    /// Standard output.
    pub stdout: StreamState,
    /// Standard error.
    pub stderr: StreamState,
    /// Why the ladder was (or will be) climbed.
    pub cause: Option<Cause>,
    /// The group probe.
    pub probe: ProbeState,
    /// The verdict the last group probe allows (`Terminated` until a probe
    /// said otherwise; the tier and held streams lower it at settlement).
    pub probed_empty: bool,
    /// Timings.
    pub timings: Instants<I>,
}

/// The result of [`start`] and [`step`]: the next state and what to do.
#[must_use = "the actions must be executed"]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition<I> {
    /// The state after the event.
    pub next: State<I>,
    /// The actions to execute, in order.
    pub actions: Vec<Action<I>>,
}

const OPEN: StreamState = StreamState {
    open: true,
    end: StreamEnd::Closed,
};

/// Creates the machine for a process launched at `now` and arms its
/// deadline.
pub fn start<I: Instant>(tier: Tier, limits: ProcessLimits, now: I) -> Transition<I> {
    Transition {
        next: State {
            phase: Phase::Running,
            tier,
            limits,
            root: None,
            stdout: OPEN,
            stderr: OPEN,
            cause: None,
            probe: ProbeState::Idle,
            probed_empty: false,
            timings: Instants {
                started: now,
                root_exited: None,
                term_sent: None,
                kill_sent: None,
                settled: None,
            },
        },
        actions: vec![Action::ArmTimer {
            timer: Timer::Deadline,
            at: now + limits.timeout,
        }],
    }
}

/// Applies `event`, which happened at `now`, to `state`.
///
/// Pure: the same inputs always give the same transition. A settled
/// machine returns itself and no actions, whatever the event.
pub fn step<I: Instant>(state: &State<I>, event: Event, now: I) -> Transition<I> {
    let mut s = *state;
    let mut out = Vec::new();
    if s.phase == Phase::Settled {
        return Transition {
            next: s,
            actions: out,
        };
    }
    match event {
        Event::RootExited(status) => {
            if s.root.is_none() {
                s.root = Some(status);
                s.timings.root_exited = Some(now);
                if s.phase == Phase::Running {
                    s.phase = Phase::Draining;
                }
                if s.any_open() {
                    out.push(Action::ArmTimer {
                        timer: Timer::Drain,
                        at: now + s.limits.drain,
                    });
                }
            }
        }
        Event::StreamClosed(which) => s.stream_mut(which).open = false,
        Event::DeadlineReached => s.request_stop(Cause::Timeout, now, &mut out),
        Event::Cancel => s.request_stop(Cause::Cancel, now, &mut out),
        Event::Interrupt => {
            if matches!(s.phase, Phase::Running | Phase::Draining) && s.signals_safe() {
                out.push(Action::SignalGroup(Signal::Int));
            }
        }
        Event::GraceElapsed => {
            if s.phase == Phase::Term {
                s.phase = Phase::Kill;
                if s.timings.term_sent.is_some() && s.signals_safe() {
                    s.timings.kill_sent = Some(now);
                    out.push(Action::SignalGroup(Signal::Kill));
                }
                // A probe that found the group occupied during the grace
                // is stale now: look again after KILL.
                if s.probe == ProbeState::OccupiedIn(Phase::Term) {
                    s.probe = ProbeState::Idle;
                }
                // The drain bound already passed: whoever still holds a
                // pipe after KILL is outside the group, so stop reading.
                let held = |st: StreamState| st.open && st.end == StreamEnd::HeldOpen;
                if held(s.stdout) || held(s.stderr) {
                    s.close_streams(&mut out);
                }
            }
        }
        Event::DrainBoundReached => {
            if s.root.is_some() {
                for st in [&mut s.stdout, &mut s.stderr] {
                    if st.open {
                        st.end = StreamEnd::HeldOpen;
                    }
                }
                match s.phase {
                    Phase::Draining if s.any_open() => {
                        s.request_ladder(Cause::HeldStdio, now, &mut out)
                    }
                    // After KILL a holder of the pipe is outside the group
                    // (or unkillable): waiting longer cannot help.
                    Phase::Kill if s.any_open() => s.close_streams(&mut out),
                    _ => {}
                }
            }
        }
        Event::HardDeadlineReached => {
            if matches!(s.phase, Phase::Term | Phase::Kill) {
                for st in [&mut s.stdout, &mut s.stderr] {
                    if st.open {
                        st.end = StreamEnd::CutAtDeadline;
                    }
                }
                s.close_streams(&mut out);
                s.settle(now, &mut out);
            }
        }
        Event::GroupProbed(probe) => {
            if s.probe == ProbeState::Pending {
                s.probe = ProbeState::Idle;
                match probe {
                    Probe::Empty => {
                        s.probed_empty = true;
                        s.settle(now, &mut out);
                    }
                    Probe::Unknown => s.settle(now, &mut out),
                    Probe::Occupied => match s.phase {
                        Phase::Running | Phase::Draining => {
                            s.request_ladder(Cause::Leftover, now, &mut out)
                        }
                        Phase::Term => s.probe = ProbeState::OccupiedIn(Phase::Term),
                        Phase::Kill | Phase::Settled => s.settle(now, &mut out),
                    },
                }
            }
        }
    }
    s.advance(now, &mut out);
    Transition {
        next: s,
        actions: out,
    }
}

/// What the driver must do when it is dropped before the machine settled
/// (runtime shutdown): there is no time left for a grace, so `SIGKILL` goes
/// to the group at once if that is still safe and was not sent yet, the
/// streams are cut, and the run is reaped and settled. A run abandoned
/// without a cause of its own counts as cancelled. A settled machine returns itself and no actions.
///
/// The actions are [`Action::SignalGroup`]`(`[`Signal::Kill`]`)` (only if
/// safe), [`Action::CloseStreams`] (if a stream was open), [`Action::Reap`]
/// and [`Action::Settle`], in that order.
///
/// # Caveats
///
/// This is the one path where `KILL` is sent without `TERM` and the grace.
pub fn abandon<I: Instant>(state: &State<I>, now: I) -> Transition<I> {
    let mut s = *state;
    let mut out = Vec::new();
    if s.phase != Phase::Settled {
        if s.cause.is_none() {
            s.cause = Some(Cause::Cancel);
        }
        if s.signals_safe() && s.timings.kill_sent.is_none() {
            s.timings.kill_sent = Some(now);
            out.push(Action::SignalGroup(Signal::Kill));
        }
        for st in [&mut s.stdout, &mut s.stderr] {
            if st.open {
                st.end = StreamEnd::CutAtDeadline;
            }
        }
        s.close_streams(&mut out);
        s.settle(now, &mut out);
    }
    Transition {
        next: s,
        actions: out,
    }
}

impl<I: Instant> State<I> {
    fn any_open(&self) -> bool {
        self.stdout.open || self.stderr.open
    }

    fn stream_mut(&mut self, which: Stream) -> &mut StreamState {
        match which {
            Stream::Stdout => &mut self.stdout,
            Stream::Stderr => &mut self.stderr,
        }
    }

    /// Whether a group signal can still reach only our group.
    fn signals_safe(&self) -> bool {
        match self.tier {
            Tier::PinnedGroup | Tier::Cgroup => true,
            Tier::Group | Tier::DirectChild => self.root.is_none(),
        }
    }

    /// Starts `TERM → grace → KILL` unless it already started or a probe
    /// is outstanding.
    /// A stop the caller asked for (timeout, cancel). It is what the
    /// evidence reports even when the ladder already climbed for the run's
    /// own reasons (a held pipe, a leftover member): the caller's deadline
    /// or cancel still ended the call. Between two requested stops the
    /// first wins.
    fn request_stop(&mut self, cause: Cause, now: I, out: &mut Vec<Action<I>>) {
        if matches!(self.cause, Some(Cause::HeldStdio | Cause::Leftover)) {
            self.cause = Some(cause);
        }
        self.request_ladder(cause, now, out);
    }

    fn request_ladder(&mut self, cause: Cause, now: I, out: &mut Vec<Action<I>>) {
        if !matches!(self.phase, Phase::Running | Phase::Draining) {
            return;
        }
        // A timeout or cancel is recorded even when nothing is signalled
        // now, so the evidence says why the run ended (`timed_out`,
        // `cancelled`) whatever the probe answers; the first cause wins.
        if self.cause.is_none() {
            self.cause = Some(cause);
        }
        // The root exited and the streams are done: the outstanding probe
        // decides whether anything is left to stop (an occupied group
        // climbs the ladder with the cause recorded above).
        if self.probe == ProbeState::Pending {
            return;
        }
        if !self.signals_safe() {
            // Unpinned and the root is gone: nothing can be signalled
            // without risking a reused group id. Stop waiting.
            for st in [&mut self.stdout, &mut self.stderr] {
                if st.open {
                    st.end = StreamEnd::HeldOpen;
                }
            }
            self.close_streams(out);
            self.settle(now, out);
            return;
        }
        self.phase = Phase::Term;
        self.timings.term_sent = Some(now);
        out.push(Action::SignalGroup(Signal::Term));
        out.push(Action::ArmTimer {
            timer: Timer::Grace,
            at: now + self.limits.grace,
        });
        out.push(Action::ArmTimer {
            timer: Timer::Hard,
            at: now + self.limits.grace + self.limits.hard_margin,
        });
    }

    fn close_streams(&mut self, out: &mut Vec<Action<I>>) {
        if self.any_open() {
            self.stdout.open = false;
            self.stderr.open = false;
            out.push(Action::CloseStreams);
        }
    }

    /// Probes or settles once the root exited and both streams are done.
    fn advance(&mut self, now: I, out: &mut Vec<Action<I>>) {
        if self.phase == Phase::Settled
            || self.root.is_none()
            || self.any_open()
            || self.probe != ProbeState::Idle
        {
            return;
        }
        match self.tier {
            Tier::PinnedGroup | Tier::Cgroup => {
                self.probe = ProbeState::Pending;
                out.push(Action::ProbeGroup);
            }
            Tier::Group | Tier::DirectChild => self.settle(now, out),
        }
    }

    fn verdict(&self) -> DescendantVerdict {
        let clean = self.stdout.end == StreamEnd::Closed && self.stderr.end == StreamEnd::Closed;
        match self.tier {
            Tier::DirectChild => DescendantVerdict::Unsupported,
            Tier::Group => DescendantVerdict::UnconfirmedOrEscaped,
            Tier::PinnedGroup if self.probed_empty && clean => DescendantVerdict::Terminated,
            Tier::PinnedGroup => DescendantVerdict::UnconfirmedOrEscaped,
            // Held or cut stdio does not lower it: whoever held the pipe was
            // in the cgroup, and the cgroup is empty.
            Tier::Cgroup if self.probed_empty => DescendantVerdict::Terminated,
            Tier::Cgroup => DescendantVerdict::UnconfirmedOrEscaped,
        }
    }

    fn settle(&mut self, now: I, out: &mut Vec<Action<I>>) {
        if self.phase == Phase::Settled {
            return;
        }
        self.phase = Phase::Settled;
        self.probe = ProbeState::Idle;
        self.timings.settled = Some(now);
        out.push(Action::Reap);
        out.push(Action::Settle(Summary {
            root: self.root,
            cause: self.cause,
            stdout: self.stdout.end,
            stderr: self.stderr.end,
            descendants: self.verdict(),
            tier: self.tier,
            timings: self.timings,
        }));
    }
}

#[cfg(test)]
mod tests;

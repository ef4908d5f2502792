//! The one door for every effect the process driver has on other
//! processes, checked against the process machine's decisions.
//!
//! The driver acts on the system in five ways: a signal to the root's
//! process group (`killpg`), `cgroup.kill` of the run's cgroup, `SIGKILL`
//! to an isolated root through its pidfd (the pid namespace's init: the
//! namespace dies with it), a signal to an adopted descendant (the
//! subreaper tier's own unreaped children), and the reaping of the root.
//! [`machine::process`](crate::machine::process) decides each of them: a
//! signal by [`Action::SignalGroup`], the reaping by [`Action::Reap`],
//! exactly once and after every signal. A group signal names the group by
//! the root's pid, which identifies the group only while the root is
//! unreaped: sent after the reaping, a `SIGTERM` or `SIGKILL` can hit an
//! unrelated group that was given the id. So:
//!
//! - [`Effects`] is the only maker of an [`Order`], and every system call of
//!   these effects takes one ([`sys::signal_group`], [`sys::pidfd_kill`],
//!   [`sys::signal_process`], and [`Effects::kill_cgroup`] for
//!   `cgroup.kill`). An order is made for a signal the machine ordered
//!   ([`Effects::license`] with each `SignalGroup` action, then
//!   [`Effects::ordered`]) and not yet sent, or by [`Effects::teardown`] for
//!   the `SIGKILL` of a launch abandoned before its driver ran; both refuse
//!   once the root was reaped. `cgroup.kill` and a pidfd's `SIGKILL` need a
//!   `KILL` order. The reaping needs the machine's `Reap`
//!   ([`Effects::license_reap`], then [`Effects::reap`]), once.
//! - A refusal is a bug in the driver: nothing is done, it is counted
//!   ([`refused_group_signals`]) and logged, and in a debug build (every
//!   test) it panics, so that it fails loudly where it is made.
//! - Every effect done through the door is recorded when recording is on
//!   ([`crate::__bench::record_process_runs`]), with the events the driver
//!   fed its machine, so that a test replays the events into
//!   `machine::process` and compares the actions with the effects
//!   (`tests/process/effects.rs`).
//!
//! The `kill(-pgid, 0)` probe delivers nothing and is not an effect; the
//! reaping of adopted descendants (our own children, whose pids cannot be
//! reused before we reap them) is the subreaper's duty, not a decision of
//! the root's machine. A cgroup found still populated when it is removed
//! after settlement is killed ([`Effects::kill_leftovers`]): it holds only
//! this run's leftovers and is handed to no other run.
//!
//! [`sys::signal_group`]: super::sys::signal_group
//! [`sys::pidfd_kill`]: super::sys::pidfd_kill
//! [`sys::signal_process`]: super::sys::signal_process
//! [`Action::SignalGroup`]: crate::machine::process::Action::SignalGroup
//! [`Action::Reap`]: crate::machine::process::Action::Reap

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::machine::process::{Event, ProcessLimits, Signal, Tier};

/// Refused effects since the process started.
static VIOLATIONS: AtomicU64 = AtomicU64::new(0);

/// How many effects the process driver refused since this process started:
/// group signals, `cgroup.kill`, pidfd kills and reapings its machine did
/// not order, or signals ordered after the root was reaped (see
/// `docs/verification.md`, *Effects against decisions*). A correct driver
/// refuses none; a debug build panics at the first. For an embedder's
/// health checks.
pub fn refused_group_signals() -> u64 {
    VIOLATIONS.load(Ordering::Relaxed)
}

/// The right to send one signal the machine decided, made only by
/// [`Effects`].
#[derive(Debug)]
pub(crate) struct Order {
    pgid: u32,
    sig: Signal,
}

impl Order {
    /// The group, named by its leader's pid.
    pub(crate) fn pgid(&self) -> u32 {
        self.pgid
    }

    /// The signal.
    pub(crate) fn signal(&self) -> Signal {
        self.sig
    }
}

/// One effect the driver had on the system, as recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Effect {
    /// `kill(-pgid, sig)` to the root's process group.
    GroupSignal(Signal),
    /// `cgroup.kill` of the run's cgroup.
    CgroupKill,
    /// `SIGKILL` to the isolated root (the pid namespace's init) through
    /// its pidfd.
    PidfdKill,
    /// A signal to one adopted descendant (the subreaper tier).
    AdoptedSignal(Signal),
    /// The root reaped (or handed to a reaper).
    Reap,
    /// `cgroup.kill` of a cgroup still populated after settlement.
    LeftoverKill,
}

/// Which system call a `KILL` of the machine becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KillTarget {
    /// The process group (`kill(-pgid, SIGKILL)`).
    Group,
    /// `cgroup.kill`, then the process group.
    Cgroup,
    /// The pid namespace's init, through its pidfd.
    PidNamespace,
}

/// One run's inputs and effects, recorded (see
/// [`crate::__bench::record_process_runs`]).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RecordedRun {
    /// The root's pid.
    pub pid: u32,
    /// The tier the machine was started with.
    pub tier: Tier,
    /// The limits the machine was started with.
    pub limits: ProcessLimits,
    /// What a `KILL` becomes for this run.
    pub kill_target: KillTarget,
    /// Every event fed to the machine, with its time since the start;
    /// `None` for the driver's abandonment (`machine::process::abandon`).
    pub inputs: Vec<(Option<Event>, Duration)>,
    /// Every effect, in order.
    pub effects: Vec<Effect>,
}

impl RecordedRun {
    /// A run of root `pid` with nothing recorded yet (for a test that
    /// builds one by hand).
    pub fn new(pid: u32, tier: Tier, limits: ProcessLimits, kill_target: KillTarget) -> Self {
        RecordedRun {
            pid,
            tier,
            limits,
            kill_target,
            inputs: Vec::new(),
            effects: Vec::new(),
        }
    }
}

static RECORDING: AtomicBool = AtomicBool::new(false);
static RECORDED: std::sync::Mutex<Vec<RecordedRun>> = std::sync::Mutex::new(Vec::new());

/// Turns recording on or off (see [`crate::__bench::record_process_runs`]).
pub(crate) fn set_recording(on: bool) {
    RECORDING.store(on, Ordering::SeqCst);
}

/// The runs recorded and settled since the last call.
pub(crate) fn take_recorded() -> Vec<RecordedRun> {
    std::mem::take(&mut *crate::sync::lock_std(&RECORDED))
}

/// The effects of one root: the ones its machine ordered and not yet done,
/// whether the root was reaped, and, when recording, what was done.
#[derive(Debug)]
pub(crate) struct Effects {
    pgid: u32,
    /// Ordered and not yet sent, by signal: `[TERM, KILL, INT]`.
    licensed: [u8; 3],
    /// `Reap` decided and not yet done.
    reap_licensed: bool,
    reaped: bool,
    record: Option<RecordedRun>,
    start: Option<Instant>,
}

impl Effects {
    /// The effects on the (unreaped) root `pgid`.
    pub(crate) fn new(pgid: u32) -> Self {
        Effects {
            pgid,
            licensed: [0; 3],
            reap_licensed: false,
            reaped: false,
            record: None,
            start: None,
        }
    }

    /// Starts recording this run if recording is on: the machine was
    /// started at `start` with `tier` and `limits`.
    pub(crate) fn record(
        &mut self,
        tier: Tier,
        limits: ProcessLimits,
        kill_target: KillTarget,
        start: Instant,
    ) {
        if RECORDING.load(Ordering::Relaxed) {
            self.start = Some(start);
            self.record = Some(RecordedRun::new(self.pgid, tier, limits, kill_target));
        }
    }

    /// The driver fed `event` (`None`: abandoned) to the machine at `now`.
    pub(crate) fn input(&mut self, event: Option<Event>, now: Instant) {
        if let (Some(r), Some(start)) = (self.record.as_mut(), self.start) {
            r.inputs.push((event, now.saturating_duration_since(start)));
        }
    }

    /// The run settled: its record, if any, is published.
    pub(crate) fn finish(&mut self) {
        if let Some(r) = self.record.take() {
            crate::sync::lock_std(&RECORDED).push(r);
        }
    }

    fn done(&mut self, effect: Effect) {
        if let Some(r) = self.record.as_mut() {
            r.effects.push(effect);
        }
    }

    /// The machine ordered `sig` (`Action::SignalGroup`).
    pub(crate) fn license(&mut self, sig: Signal) {
        let n = &mut self.licensed[slot(sig)];
        *n = n.saturating_add(1);
    }

    /// The order to send `sig`, which the machine ordered and which was not
    /// sent yet, while the root is unreaped; `None` (a violation: see the
    /// [module docs](self)) otherwise. Sending nothing for an ordered
    /// signal consumes its order as well.
    pub(crate) fn ordered(&mut self, sig: Signal) -> Option<Order> {
        let n = &mut self.licensed[slot(sig)];
        if *n == 0 {
            violation(self.pgid, sig, "not ordered by the machine");
            return None;
        }
        *n -= 1;
        if self.reaped {
            violation(self.pgid, sig, "after the root was reaped");
            return None;
        }
        Some(Order {
            pgid: self.pgid,
            sig,
        })
    }

    /// The order to `SIGKILL` the group of a launch that is torn down before
    /// it settled (its driver dropped or failed), while the root is
    /// unreaped; `None` (a violation) once it was reaped.
    pub(crate) fn teardown(&mut self) -> Option<Order> {
        if self.reaped {
            violation(self.pgid, Signal::Kill, "after the root was reaped");
            return None;
        }
        Some(Order {
            pgid: self.pgid,
            sig: Signal::Kill,
        })
    }

    /// `killpg` with `order`.
    #[cfg(unix)]
    pub(crate) fn signal_group(&mut self, order: &Order) -> super::sys::Delivery {
        self.done(Effect::GroupSignal(order.sig));
        super::sys::signal_group(order)
    }

    /// `cgroup.kill` of `cg`, for a `KILL` order.
    #[cfg(target_os = "linux")]
    pub(crate) fn kill_cgroup(
        &mut self,
        order: &Order,
        cg: &crate::contain::Cgroup,
    ) -> Result<(), crate::contain::CgroupError> {
        if order.sig != Signal::Kill {
            violation(self.pgid, order.sig, "cgroup.kill for a TERM");
            // Nothing was sent: the caller must not report it delivered.
            return Err(crate::contain::CgroupError::Io {
                op: "kill",
                source: std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    "refused: the order is not a KILL",
                ),
            });
        }
        self.done(Effect::CgroupKill);
        cg.kill()
    }

    /// `SIGKILL` through the root's pidfd, for a `KILL` order.
    #[cfg(target_os = "linux")]
    pub(crate) fn kill_pidfd(
        &mut self,
        order: &Order,
        fd: std::os::fd::BorrowedFd<'_>,
    ) -> rustix::io::Result<()> {
        if order.sig != Signal::Kill {
            violation(self.pgid, order.sig, "a pidfd KILL for a TERM");
            // Nothing was sent: the caller must not report it delivered.
            return Err(rustix::io::Errno::PERM);
        }
        self.done(Effect::PidfdKill);
        super::sys::pidfd_kill(order, fd)
    }

    /// `order`'s signal to one adopted descendant `pid` (our own unreaped
    /// child).
    #[cfg(target_os = "linux")]
    pub(crate) fn signal_adopted(&mut self, order: &Order, pid: u32) -> super::sys::Delivery {
        self.done(Effect::AdoptedSignal(order.sig));
        super::sys::signal_process(order, pid)
    }

    /// The machine decided to release the root (`Action::Reap`).
    pub(crate) fn license_reap(&mut self) {
        self.reap_licensed = true;
    }

    /// Whether the root may be reaped now: the machine decided it and it
    /// was not reaped yet; a violation otherwise. From here on no signal
    /// may follow.
    pub(crate) fn reap(&mut self) -> bool {
        if !self.reap_licensed || self.reaped {
            violation(
                self.pgid,
                Signal::Kill,
                "a reaping the machine did not decide",
            );
            return false;
        }
        self.reap_licensed = false;
        self.reaped = true;
        self.done(Effect::Reap);
        true
    }

    /// The root of a launch torn down before it settled is reaped (or
    /// handed to a reaper): no signal may follow.
    pub(crate) fn torn_down(&mut self) {
        self.reaped = true;
        self.done(Effect::Reap);
    }

    /// `cgroup.kill` of the run's cgroup found still populated when it is
    /// removed after settlement: the leftovers of this run, in a cgroup no
    /// other run is handed (it is being removed, not kept).
    #[cfg(target_os = "linux")]
    pub(crate) fn kill_leftovers(&mut self, cg: &crate::contain::Cgroup) {
        self.done(Effect::LeftoverKill);
        let _ = cg.kill();
    }
}

fn slot(sig: Signal) -> usize {
    match sig {
        Signal::Term => 0,
        Signal::Kill => 1,
        Signal::Int => 2,
    }
}

fn violation(pgid: u32, sig: Signal, why: &'static str) {
    VIOLATIONS.fetch_add(1, Ordering::Relaxed);
    tracing::error!(pgid, ?sig, why, "effect refused");
    #[cfg(test)]
    if tests::LENIENT.with(std::cell::Cell::get) {
        // A unit test looks at what a release build returns.
        return;
    }
    debug_assert!(false, "effect {sig:?} on {pgid} refused: {why}");
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// Set by a test to see a refusal's result as a release build
        /// returns it, instead of the debug build's panic.
        pub(super) static LENIENT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// Every refusal below panics in a debug build; count them instead.
    fn refused<T>(f: impl FnOnce() -> Option<T> + std::panic::UnwindSafe) -> bool {
        match std::panic::catch_unwind(f) {
            Ok(order) => order.is_none(),
            Err(_) => true,
        }
    }

    #[test]
    fn only_an_ordered_signal_of_an_unreaped_root_is_sent_and_only_once() {
        let before = refused_group_signals();
        let mut g = Effects::new(4242);
        g.license(Signal::Term);
        let order = g.ordered(Signal::Term).expect("ordered");
        assert_eq!((order.pgid(), order.signal()), (4242, Signal::Term));
        // Sent once; a second TERM, or a KILL, was never ordered.
        assert!(refused(move || g.ordered(Signal::Term)));
        let mut kill = Effects::new(4242);
        assert!(refused(move || kill.ordered(Signal::Kill)));
        // Ordered, but the root was reaped first.
        let mut late = Effects::new(4242);
        late.license(Signal::Kill);
        late.license_reap();
        assert!(late.reap());
        assert!(refused(move || late.ordered(Signal::Kill)));
        let mut torn = Effects::new(4242);
        assert!(torn.teardown().is_some());
        torn.torn_down();
        assert!(refused(move || torn.teardown()));
        assert!(
            refused_group_signals() >= before + 4,
            "each refusal is counted"
        );
    }

    #[test]
    fn a_terms_order_is_not_a_kills_and_a_kills_not_a_terms() {
        let mut term = Effects::new(4245);
        term.license(Signal::Term);
        assert!(refused(move || term.ordered(Signal::Kill)));
        let mut kill = Effects::new(4245);
        kill.license(Signal::Kill);
        assert!(refused(move || kill.ordered(Signal::Term)));
        // Each still sends what was ordered.
        let mut both = Effects::new(4245);
        both.license(Signal::Term);
        both.license(Signal::Kill);
        assert!(both.ordered(Signal::Kill).is_some());
        assert!(both.ordered(Signal::Term).is_some());
    }

    #[test]
    fn the_root_is_reaped_once_and_only_when_the_machine_decided_it() {
        let before = refused_group_signals();
        let mut early = Effects::new(4243);
        assert!(refused(move || early.reap().then_some(())));
        let mut twice = Effects::new(4243);
        twice.license_reap();
        assert!(twice.reap());
        assert!(refused(move || twice.reap().then_some(())));
        assert!(refused_group_signals() >= before + 2);
    }

    /// A KILL-only effect given a TERM order sends nothing and, as a
    /// release build (where a refusal does not panic), says so: the
    /// evidence must never read `delivered` for it.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_kill_only_effect_refuses_a_term_order_with_an_error() {
        use std::os::fd::AsFd;
        let before = refused_group_signals();
        let null = std::fs::File::open("/dev/null").expect("/dev/null");
        let mut g = Effects::new(4244);
        g.license(Signal::Term);
        let term = g.ordered(Signal::Term).expect("ordered");
        LENIENT.with(|l| l.set(true));
        let sent = g.kill_pidfd(&term, null.as_fd());
        LENIENT.with(|l| l.set(false));
        assert_eq!(sent, Err(rustix::io::Errno::PERM), "a refused pidfd KILL");
        assert!(refused_group_signals() > before, "the refusal is counted");
    }
}

//! The driver: executes the actions of [`crate::machine::process`] for one
//! real child. The machine decides, the driver acts.
//!
//! One tokio task per process owns the child, both pipe readers, the timers
//! and the machine. It waits on everything at once (cancel, root exit, both
//! reads, the next timer, the next probe scan), turns whatever happened into
//! one [`Event`], steps the machine and executes the returned actions, until
//! the machine settles. Because it is a spawned task, dropping the caller's
//! future changes nothing; if the task itself is dropped (runtime shutdown)
//! before settling, [`Driver`]'s `Drop` kills the group and settles.

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, SystemTime};

use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStderr, ChildStdout};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::capture::{StreamCapture, StreamState};
use super::env::ChildEnv;
use super::evidence::{
    self, Descendants as EvDescendants, EscalationAction, EscalationReason, EscalationStep,
    Evidence, InvocationIdentity, SignalTarget, StepOutcome, Verdict, VerdictReason,
};
use super::fault::{self, FaultPoint};
use super::invocation::Invocation;
use super::launch::{ProcessError, ROOTS, Running, SUBREAPER, Shared};
use super::sys::{self, Delivery, GroupScan};
use crate::machine::process::{
    self as m, Action, Cause, Descendants, Event, ExitStatus, Limits, Phase, Probe, Signal, Stream,
    StreamEnd, Summary, Tier, Timer,
};

/// Size of one pipe read.
const READ_CHUNK: usize = 64 * 1024;
/// Longest time a probe keeps rescanning an occupied group before
/// answering `Occupied` (further capped at half the grace): long enough for
/// a member that was just sent KILL to finish exiting on a loaded machine.
const PROBE_WINDOW: Duration = Duration::from_millis(250);

#[cfg(target_os = "linux")]
type PidFd = tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>;
#[cfg(not(target_os = "linux"))]
type PidFd = ();

pub(crate) fn spawn(
    runtime: &tokio::runtime::Handle,
    invocation: Invocation,
    env: ChildEnv,
    cwd: PathBuf,
    resolved: PathBuf,
) -> Result<Running, ProcessError> {
    let mut cmd = tokio::process::Command::new(&resolved);
    // No pre_exec hook anywhere: std keeps its posix_spawn fast path
    // (the program is an absolute path, so setting PATH does not force
    // fork, and the process group is set with POSIX_SPAWN_SETPGROUP).
    cmd.args(invocation.args())
        .env_clear()
        .envs(env.vars())
        .current_dir(&cwd)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(false);
    #[cfg(unix)]
    {
        cmd.arg0(invocation.executable()).process_group(0);
    }
    let subreaper = SUBREAPER.load(std::sync::atomic::Ordering::SeqCst);
    let fault = invocation.fault();
    // Built before the spawn: the fallback evidence needs it if anything
    // after the spawn fails.
    let identity = InvocationIdentity::new(&invocation, &resolved, env.secrets());
    let started_wall = SystemTime::now();
    let started = Instant::now();
    let child = {
        // Registered under the lock, so no probe ever sees this child
        // unregistered and takes it for an adopted descendant.
        let mut roots = ROOTS.lock().unwrap_or_else(|e| e.into_inner());
        // The runtime's reactor must be current when the child is spawned.
        let _guard = runtime.enter();
        let child = cmd.spawn().map_err(|source| ProcessError::Spawn {
            path: resolved.clone(),
            source,
        })?;
        roots.push(child.id().unwrap_or(0));
        child
    };
    let pid = child.id().unwrap_or(0);
    // From the instant the spawn returned, a guard owns the child until the
    // driver takes it over: whatever panics in between, the group is
    // killed and the root reaped, and the evidence says so.
    let mut guard = ChildGuard {
        child: Some(child),
        pid,
    };
    let (done, _) = watch::channel(None);
    let shared = Arc::new(Shared {
        pid,
        cancel: Notify::new(),
        cancelled: AtomicBool::new(false),
        done,
    });
    let setup = std::panic::catch_unwind(AssertUnwindSafe(|| {
        fault::hit(fault, FaultPoint::AfterSpawn);
        let child = guard.child.take()?;
        start_driver(
            runtime,
            child,
            &shared,
            identity.clone(),
            &invocation,
            &env,
            (started, started_wall),
            subreaper,
        );
        Some(())
    }));
    if setup.is_err() {
        // Either the guard still holds the child, or the driver that took
        // it over was dropped while unwinding and settled on its own.
        let kill = guard.kill_and_reap(started);
        let tier = if cfg!(windows) {
            evidence::Tier::DirectChild
        } else {
            evidence::Tier::ProcessGroup
        };
        publish_once(&shared, || {
            Evidence::internal_failure(identity, started_wall, started.elapsed(), kill, tier)
        });
    }
    Ok(Running::from_shared(shared))
}

/// Publishes `ev` unless an evidence was already published: every waiter
/// sees exactly one.
fn publish_once(shared: &Shared, ev: impl FnOnce() -> Evidence) {
    shared.done.send_if_modified(|slot| {
        if slot.is_some() {
            return false;
        }
        *slot = Some(Arc::new(ev()));
        true
    });
}

/// Pins the root, builds the driver and spawns its task.
#[allow(clippy::too_many_arguments)]
fn start_driver(
    runtime: &tokio::runtime::Handle,
    mut child: Child,
    shared: &Arc<Shared>,
    identity: InvocationIdentity,
    invocation: &Invocation,
    env: &ChildEnv,
    (started, started_wall): (Instant, SystemTime),
    subreaper: bool,
) {
    let pid = shared.pid;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let secrets = env.secrets();
    let budget = invocation.budget();
    let tun = invocation.tunables();
    let limits = Limits {
        timeout: invocation.timeout(),
        grace: tun.grace,
        drain: tun.drain,
        hard_margin: tun.hard_margin,
    };
    // The driver owns the child from its first line on.
    let mut driver = Driver {
        machine: m::start(Tier::Group, limits, started).next,
        child: Some(child),
        pid,
        shared: shared.clone(),
        identity,
        started,
        started_wall,
        out: Some(StreamCapture::new(budget.stdout, secrets.redactor())),
        err: Some(StreamCapture::new(budget.stderr, secrets.redactor())),
        timers: [None; 4],
        probe: None,
        last_view: None,
        escalation: Vec::new(),
        settled: false,
        cut: false,
        subreaper: false,
        probe_window: PROBE_WINDOW.min(limits.grace / 2),
        fault: invocation.fault(),
        internal_error: false,
    };
    let (pidfd, tier) = pin_root(runtime, pid);
    let start = m::start(tier, limits, started);
    driver.machine = start.next;
    driver.subreaper = subreaper && tier == Tier::PinnedGroup;
    let mut follow = Vec::new();
    driver.execute(start.actions, started, &mut follow);
    let span = tracing::debug_span!("process", pid);
    runtime.spawn(tracing::Instrument::instrument(
        driver.run(pidfd, stdout, stderr, follow),
        span,
    ));
}

/// Owns a freshly spawned child until the driver takes it over.
struct ChildGuard {
    child: Option<Child>,
    pid: u32,
}

impl ChildGuard {
    /// Kills the child's group (the root is unreaped, so the group id is
    /// still ours), reaps the root if it exits within a moment, and
    /// unregisters it. Returns the kill step, `None` if the child was
    /// already handed over.
    fn kill_and_reap(&mut self, started: Instant) -> Option<EscalationStep> {
        let mut child = self.child.take()?;
        let at = Instant::now() - started;
        #[cfg(unix)]
        let outcome = match sys::signal_group(self.pid, Signal::Kill) {
            Delivery::Delivered => StepOutcome::Delivered,
            Delivery::NoSuchProcess => StepOutcome::NoSuchProcess,
            Delivery::Failed => StepOutcome::Failed,
        };
        #[cfg(not(unix))]
        let outcome = match child.start_kill() {
            Ok(()) => StepOutcome::Delivered,
            Err(_) => StepOutcome::Failed,
        };
        wait_briefly(&mut child);
        let mut roots = ROOTS.lock().unwrap_or_else(|e| e.into_inner());
        // Reaps if it exited; else tokio's orphan queue takes it.
        let _ = child.try_wait();
        drop(child);
        roots.retain(|&p| p != self.pid);
        Some(EscalationStep::new(
            EscalationAction::Kill,
            EscalationReason::InternalError,
            Some(if cfg!(windows) {
                SignalTarget::DirectChild
            } else {
                SignalTarget::ProcessGroup
            }),
            outcome,
            at,
        ))
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.kill_and_reap(Instant::now());
    }
}

/// Gives a killed root a moment (≤ 100 ms) to exit, so that it is reaped
/// here rather than left as a zombie to an orphan queue that no runtime
/// may drain again.
fn wait_briefly(child: &mut Child) {
    for _ in 0..50 {
        if !matches!(child.try_wait(), Ok(None)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Opens a pidfd on the root so its exit can be observed without reaping
/// it; falls back to the unpinned tier if the kernel cannot.
#[cfg(target_os = "linux")]
fn pin_root(runtime: &tokio::runtime::Handle, pid: u32) -> (Option<PidFd>, Tier) {
    let _guard = runtime.enter();
    match sys::pidfd_open(pid).and_then(sys::register_pidfd) {
        Ok(fd) => (Some(fd), Tier::PinnedGroup),
        Err(e) => {
            tracing::warn!(pid, error = %e, "pidfd unavailable; group signals stop at root exit");
            (None, Tier::Group)
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn pin_root(_runtime: &tokio::runtime::Handle, _pid: u32) -> (Option<PidFd>, Tier) {
    (
        None,
        if cfg!(windows) {
            Tier::DirectChild
        } else {
            Tier::Group
        },
    )
}

/// A probe in progress: rescan at `next` until `give_up`.
#[derive(Clone, Copy, Debug)]
struct ProbeRun {
    next: Instant,
    delay: Duration,
    give_up: Instant,
}

struct Driver {
    machine: m::State<Instant>,
    child: Option<Child>,
    pid: u32,
    shared: Arc<Shared>,
    identity: InvocationIdentity,
    started: Instant,
    started_wall: SystemTime,
    out: Option<StreamCapture>,
    err: Option<StreamCapture>,
    timers: [Option<Instant>; 4],
    probe: Option<ProbeRun>,
    last_view: Option<View>,
    escalation: Vec<EscalationStep>,
    settled: bool,
    probe_window: Duration,
    /// custodian closed a stream that was still open (drain bound after
    /// KILL, hard deadline, or no safe signal left).
    cut: bool,
    /// The subreaper tier is active: adopted descendants count as ours.
    subreaper: bool,
    /// The test seam (see [`fault`]).
    fault: Option<FaultPoint>,
    /// custodian panicked; the evidence reports `internal_error`.
    internal_error: bool,
}

/// What woke the driver.
enum Wake {
    Cancel,
    Exit(ExitStatus),
    ExitUnobservable,
    Read(Stream, std::io::Result<usize>),
    Timer,
    Probe,
}

fn timer_index(t: Timer) -> usize {
    match t {
        Timer::Deadline => 0,
        Timer::Grace => 1,
        Timer::Drain => 2,
        Timer::Hard => 3,
    }
}

const TIMERS: [Timer; 4] = [Timer::Deadline, Timer::Grace, Timer::Drain, Timer::Hard];

impl Driver {
    async fn run(
        mut self,
        pidfd: Option<PidFd>,
        mut stdout: Option<ChildStdout>,
        mut stderr: Option<ChildStderr>,
        mut follow: Vec<Event>,
    ) {
        // Read into spare capacity: nothing is zeroed per launch.
        let mut out_buf = Vec::with_capacity(READ_CHUNK);
        let mut err_buf = Vec::with_capacity(READ_CHUNK);
        let mut root_pending = true;
        let mut cancel_seen = false;
        while !self.settled {
            // Events produced by executing actions (probe answers) first.
            let wake = if follow.is_empty() {
                let next_timer = self.timers.iter().flatten().min().copied();
                let probe_at = self.probe.map(|p| p.next);
                let shared = self.shared.clone();
                Some(tokio::select! {
                    biased;
                    _ = shared.cancel.notified(), if !cancel_seen => Wake::Cancel,
                    r = root_exit(pidfd.as_ref(), self.child.as_mut()), if root_pending => {
                        match r {
                            Some(st) => Wake::Exit(st),
                            None => Wake::ExitUnobservable,
                        }
                    }
                    r = read_some(stdout.as_mut(), &mut out_buf), if stdout.is_some() => {
                        Wake::Read(Stream::Stdout, r)
                    }
                    r = read_some(stderr.as_mut(), &mut err_buf), if stderr.is_some() => {
                        Wake::Read(Stream::Stderr, r)
                    }
                    _ = sleep_until(next_timer), if next_timer.is_some() => Wake::Timer,
                    _ = sleep_until(probe_at), if probe_at.is_some() => Wake::Probe,
                })
            } else {
                None
            };
            // Whatever panics while handling an event (a bug in the
            // driver, the capture, the evidence), the group is killed, the
            // root reaped and an evidence published: nothing leaks, no
            // waiter hangs.
            let handled = std::panic::catch_unwind(AssertUnwindSafe(|| {
                let now = Instant::now();
                let event = match wake {
                    None => Some(follow.remove(0)),
                    Some(Wake::Cancel) => {
                        cancel_seen = true;
                        Some(Event::Cancel)
                    }
                    Some(Wake::Exit(st)) => {
                        root_pending = false;
                        Some(Event::RootExited(st))
                    }
                    Some(Wake::ExitUnobservable) => {
                        // waitid failed: the exit cannot be observed. Leave
                        // it to the timers (the ladder and the hard deadline).
                        root_pending = false;
                        None
                    }
                    Some(Wake::Read(which, Ok(n))) if n > 0 => {
                        fault::hit(self.fault, FaultPoint::Capture);
                        let (cap, buf) = match which {
                            Stream::Stdout => (self.out.as_mut(), &mut out_buf),
                            Stream::Stderr => (self.err.as_mut(), &mut err_buf),
                        };
                        if let Some(cap) = cap {
                            cap.push(&buf[..n]);
                        }
                        buf.clear();
                        None
                    }
                    Some(Wake::Read(which, _)) => {
                        match which {
                            Stream::Stdout => stdout = None,
                            Stream::Stderr => stderr = None,
                        }
                        Some(Event::StreamClosed(which))
                    }
                    Some(Wake::Timer) => self.due_timer(now),
                    Some(Wake::Probe) => self.rescan(now),
                };
                if let Some(ev) = event {
                    self.feed(ev, now, &mut follow);
                    self.sync_streams(&mut stdout, &mut stderr);
                }
            }));
            if handled.is_err() {
                self.abandon(true);
            }
        }
    }

    /// Drops the readers the machine has closed (`CloseStreams`).
    fn sync_streams(&self, stdout: &mut Option<ChildStdout>, stderr: &mut Option<ChildStderr>) {
        if !self.machine.stdout.open {
            *stdout = None;
        }
        if !self.machine.stderr.open {
            *stderr = None;
        }
    }

    fn due_timer(&mut self, now: Instant) -> Option<Event> {
        // Earliest first; ties in the order deadline, grace, drain, hard.
        let (i, _) = self
            .timers
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.map(|t| (i, t)))
            .filter(|&(_, t)| t <= now)
            .min_by_key(|&(i, t)| (t, i))?;
        self.timers[i] = None;
        Some(match TIMERS[i] {
            Timer::Deadline => Event::DeadlineReached,
            Timer::Grace => Event::GraceElapsed,
            Timer::Drain => Event::DrainBoundReached,
            Timer::Hard => Event::HardDeadlineReached,
        })
    }

    /// Looks for live descendants with what this tier can see.
    ///
    /// Subreaper tier: the adoption witness alone. The root has exited, so
    /// every live descendant has an ancestor chain of live descendants up
    /// to a child of this process (orphans are re-parented to the nearest
    /// live subreaper ancestor): some non-root child of ours is alive
    /// whenever any descendant is, in or out of the group, `setsid` or
    /// not. One pass over our children that finds none alive and none
    /// dead-but-unreaped proves that none was alive when the pass began (a
    /// child that died during the pass, handing its children to us behind
    /// the listing's cursor, is still our zombie when the cursor reaches
    /// it, and only we reap it), and nothing outside the tree can enter it.
    ///
    /// Group tiers: the stable group scan ([`sys::scan_group_stable`]);
    /// an empty group proves nothing about a descendant that left it, so
    /// it is never [`View::NoDescendant`].
    ///
    /// Either way, a `/proc` that may hide processes makes any emptiness
    /// [`View::Restricted`].
    fn view(&self) -> View {
        if self.subreaper {
            return match adoption_witness() {
                View::Occupied => View::Occupied,
                _ if sys::proc_restricted(self.pid) => View::Restricted,
                v => v,
            };
        }
        match sys::scan_group_stable(self.pid, self.pid) {
            GroupScan::Occupied => View::Occupied,
            _ if sys::proc_restricted(self.pid) => View::Restricted,
            GroupScan::Empty => View::GroupEmpty,
            GroupScan::Unstable => View::Unstable,
            GroupScan::Unknown => View::Unknown,
        }
    }

    fn rescan(&mut self, now: Instant) -> Option<Event> {
        let run = self.probe?;
        match self.view() {
            // Members just sent a signal need a moment to exit, and a busy
            // host a quieter moment to scan in: look again shortly.
            View::Occupied | View::Unstable if now < run.give_up => {
                let delay = (run.delay * 2).min(Duration::from_millis(10));
                self.probe = Some(ProbeRun {
                    next: now + delay,
                    delay,
                    give_up: run.give_up,
                });
                None
            }
            v => Some(self.probe_answer(v)),
        }
    }

    fn probe_answer(&mut self, v: View) -> Event {
        self.probe = None;
        self.last_view = Some(v);
        Event::GroupProbed(v.probe())
    }

    fn feed(&mut self, event: Event, now: Instant, follow: &mut Vec<Event>) {
        fault::hit(self.fault, FaultPoint::Step);
        let t = m::step(&self.machine, event, now);
        let cause = event;
        self.machine = t.next;
        self.execute_with(t.actions, now, follow, Some(cause));
    }

    fn execute(&mut self, actions: Vec<Action<Instant>>, now: Instant, follow: &mut Vec<Event>) {
        self.execute_with(actions, now, follow, None);
    }

    fn execute_with(
        &mut self,
        actions: Vec<Action<Instant>>,
        now: Instant,
        follow: &mut Vec<Event>,
        event: Option<Event>,
    ) {
        for action in actions {
            match action {
                Action::SignalGroup(sig) => self.signal(sig, now),
                Action::ArmTimer { timer, at } => self.timers[timer_index(timer)] = Some(at),
                Action::CloseStreams => {
                    self.cut = true;
                    // The readers are dropped by `sync_streams`; record the
                    // step when the hard deadline forced it.
                    if event == Some(Event::HardDeadlineReached) {
                        self.escalation.push(EscalationStep::new(
                            EscalationAction::CloseStreams,
                            EscalationReason::HardDeadline,
                            None,
                            StepOutcome::Delivered,
                            now - self.started,
                        ));
                    }
                }
                Action::ProbeGroup => match self.view() {
                    View::Occupied | View::Unstable => {
                        let delay = Duration::from_millis(1);
                        self.probe = Some(ProbeRun {
                            next: now + delay,
                            delay,
                            give_up: now + self.probe_window,
                        });
                    }
                    v => follow.push(self.probe_answer(v)),
                },
                Action::Reap => self.reap(),
                Action::Settle(summary) => self.settle(summary),
            }
        }
    }

    fn signal(&mut self, sig: Signal, now: Instant) {
        #[cfg(unix)]
        let outcome = match sys::signal_group(self.pid, sig) {
            Delivery::Delivered => StepOutcome::Delivered,
            Delivery::NoSuchProcess => StepOutcome::NoSuchProcess,
            Delivery::Failed => StepOutcome::Failed,
        };
        #[cfg(not(unix))]
        let outcome = match self.child.as_mut().map(|c| c.start_kill()) {
            Some(Ok(())) => StepOutcome::Delivered,
            _ => StepOutcome::NoSuchProcess,
        };
        let reason = match (sig, self.machine.cause) {
            (Signal::Kill, _) => EscalationReason::GraceExpired,
            (Signal::Term, Some(Cause::Timeout)) => EscalationReason::Timeout,
            (Signal::Term, Some(Cause::Cancel)) => EscalationReason::Cancel,
            (Signal::Term, _) => EscalationReason::GroupCleanup,
        };
        let target = match (self.machine.tier, self.machine.root) {
            (Tier::DirectChild, _) => SignalTarget::DirectChild,
            (Tier::PinnedGroup, Some(_)) => SignalTarget::PinnedProcessGroup,
            _ => SignalTarget::ProcessGroup,
        };
        let action = match sig {
            Signal::Term => EscalationAction::Term,
            Signal::Kill => EscalationAction::Kill,
        };
        // A probe still running from before this signal gives the members
        // it just hit their full window to exit.
        if let Some(run) = self.probe.as_mut() {
            run.give_up = now + self.probe_window;
        }
        tracing::debug!(?sig, ?outcome, "signalled group");
        self.escalation.push(EscalationStep::new(
            action,
            reason,
            Some(target),
            outcome,
            now - self.started,
        ));
        #[cfg(target_os = "linux")]
        if self.subreaper {
            // Our own unreaped children: their pids cannot be reused.
            let live = adopted().unwrap_or_default();
            if !live.is_empty() {
                let delivered = live
                    .iter()
                    .filter(|&&p| sys::signal_process(p, sig) == Delivery::Delivered)
                    .count();
                self.escalation.push(EscalationStep::new(
                    action,
                    reason,
                    Some(SignalTarget::AdoptedDescendants),
                    if delivered > 0 {
                        StepOutcome::Delivered
                    } else {
                        StepOutcome::NoSuchProcess
                    },
                    now - self.started,
                ));
            }
        }
    }

    /// Reaps the root if it exited; otherwise drops the child, which hands
    /// it to tokio's orphan reaper (it was sent KILL, or cannot be pinned).
    fn reap(&mut self) {
        // Reap and unregister under the lock: a concurrent subreaper scan
        // must never see this root unregistered while it is still ours.
        let mut roots = ROOTS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mut child) = self.child.take() {
            match child.try_wait() {
                Ok(Some(_)) => {}
                Ok(None) => {
                    tracing::warn!(
                        pid = self.pid,
                        "root alive at settlement; left to the reaper"
                    );
                    drop(child);
                }
                Err(e) => tracing::warn!(pid = self.pid, error = %e, "reaping the root failed"),
            }
        }
        roots.retain(|&p| p != self.pid);
        drop(roots);
        if self.subreaper {
            // Reap adopted descendants that have exited meanwhile.
            let _ = adopted();
        }
    }

    /// Publishes the evidence, exactly once. Building it cannot take the
    /// waiters down with it: if it panics, a minimal evidence that says
    /// `internal_error` is published instead.
    fn settle(&mut self, summary: Summary<Instant>) {
        if self.settled {
            return;
        }
        let built = std::panic::catch_unwind(AssertUnwindSafe(|| self.evidence(&summary)));
        let ev = built.unwrap_or_else(|_| {
            let tier = self.descendants(&summary).tier;
            Evidence::internal_failure(
                self.identity.clone(),
                self.started_wall,
                self.started.elapsed(),
                None,
                tier,
            )
        });
        self.settled = true;
        publish_once(&self.shared, || ev);
    }

    fn evidence(&mut self, summary: &Summary<Instant>) -> Evidence {
        fault::hit(self.fault, FaultPoint::Evidence);
        let state = |e: StreamEnd| match e {
            StreamEnd::Closed => StreamState::Closed,
            StreamEnd::HeldOpen => StreamState::HeldOpen,
            StreamEnd::CutAtDeadline => StreamState::CutAtDeadline,
        };
        let stdout = self
            .out
            .take()
            .map(|c| c.finish(state(summary.stdout)))
            .unwrap_or_else(|| evidence_empty(state(summary.stdout)));
        let stderr = self
            .err
            .take()
            .map(|c| c.finish(state(summary.stderr)))
            .unwrap_or_else(|| evidence_empty(state(summary.stderr)));
        let since = |i: Option<Instant>| i.map(|i| i - self.started);
        let t = summary.timings;
        let settled_at = t.settled.unwrap_or_else(Instant::now);
        let timings = evidence::Timings::new(
            self.started_wall,
            since(t.root_exited),
            since(t.term_sent),
            since(t.kill_sent),
            settled_at - self.started,
        );
        let (exit_code, signal) = match summary.root {
            Some(ExitStatus::Code(c)) => (Some(c), None),
            Some(ExitStatus::Signal(s)) => (None, Some(s)),
            None => (None, None),
        };
        let status = match summary.status() {
            _ if self.internal_error => evidence::Status::InternalError,
            m::Status::Exited => evidence::Status::Exited,
            m::Status::Signaled => evidence::Status::Signaled,
            m::Status::TimedOut => evidence::Status::TimedOut,
            m::Status::Cancelled => evidence::Status::Cancelled,
        };
        Evidence {
            version: evidence::EVIDENCE_VERSION,
            invocation: self.identity.clone(),
            status,
            exit_code,
            signal,
            timings,
            stdout,
            stderr,
            escalation: std::mem::take(&mut self.escalation),
            descendants: self.descendants(summary),
        }
    }

    fn descendants(&self, s: &Summary<Instant>) -> EvDescendants {
        let tier = match s.tier {
            Tier::PinnedGroup if self.subreaper => evidence::Tier::Subreaper,
            Tier::PinnedGroup => evidence::Tier::PinnedProcessGroup,
            Tier::Group => evidence::Tier::ProcessGroup,
            Tier::DirectChild => evidence::Tier::DirectChild,
        };
        let verdict = match s.descendants {
            Descendants::Terminated => Verdict::Terminated,
            Descendants::UnconfirmedOrEscaped => Verdict::UnconfirmedOrEscaped,
            Descendants::Unsupported => Verdict::Unsupported,
        };
        let mut reasons = Vec::new();
        if verdict != Verdict::Terminated {
            let held = s.stdout != StreamEnd::Closed || s.stderr != StreamEnd::Closed;
            if held {
                reasons.push(VerdictReason::StdioHeldOpen);
            }
            match (s.tier, self.last_view) {
                (Tier::DirectChild, _) => reasons.push(VerdictReason::PlatformUnsupported),
                (Tier::Group, _) => reasons.push(VerdictReason::RootReapedBeforeCheck),
                (Tier::PinnedGroup, Some(View::Occupied)) => {
                    reasons.push(VerdictReason::GroupNotEmpty)
                }
                // The group is empty, but a descendant that left it cannot
                // be seen by this tier.
                (Tier::PinnedGroup, Some(View::GroupEmpty)) => {
                    reasons.push(VerdictReason::MayHaveLeftGroup)
                }
                // No descendant is alive yet a pipe had to be cut: whoever
                // held it was handed the pipe outside the tree.
                (Tier::PinnedGroup, Some(View::NoDescendant)) if self.cut => {
                    reasons.push(VerdictReason::MayHaveLeftGroup)
                }
                (Tier::PinnedGroup, Some(View::NoDescendant)) => {}
                (Tier::PinnedGroup, Some(View::Restricted)) => {
                    reasons.push(VerdictReason::ProcRestricted)
                }
                (Tier::PinnedGroup, Some(View::Unknown | View::Unstable) | None) => {
                    reasons.push(VerdictReason::GroupEmptinessUnknown)
                }
            }
        }
        EvDescendants::new(verdict, tier, reasons)
    }
}

fn evidence_empty(state: StreamState) -> super::capture::CapturedStream {
    super::capture::CapturedStream::empty(state)
}

impl Driver {
    /// Stops the run without a grace and settles: the group is killed (if
    /// that is still safe), the root reaped if it exits within a moment,
    /// and an evidence published, so that no waiter hangs and no signal is
    /// sent afterwards. `internal` marks a panic (status `internal_error`);
    /// otherwise the task was dropped (runtime shutdown) and the run counts
    /// as cancelled.
    fn abandon(&mut self, internal: bool) {
        if self.settled || self.machine.phase == Phase::Settled {
            // Settled in the machine but the evidence was never published
            // (a panic in between): publish the minimal one.
            if !self.settled {
                self.settled = true;
                let tier = match self.machine.tier {
                    Tier::DirectChild => evidence::Tier::DirectChild,
                    _ => evidence::Tier::PinnedProcessGroup,
                };
                publish_once(&self.shared, || {
                    Evidence::internal_failure(
                        self.identity.clone(),
                        self.started_wall,
                        self.started.elapsed(),
                        None,
                        tier,
                    )
                });
            }
            return;
        }
        self.internal_error = internal;
        let now = Instant::now();
        let t = m::abandon(&self.machine, now);
        self.machine = t.next;
        for action in t.actions {
            match action {
                Action::SignalGroup(sig) => {
                    #[cfg(unix)]
                    let delivery = sys::signal_group(self.pid, sig);
                    #[cfg(not(unix))]
                    let delivery = {
                        let _ = sig;
                        match self.child.as_mut().map(|c| c.start_kill()) {
                            Some(Ok(())) => Delivery::Delivered,
                            _ => Delivery::NoSuchProcess,
                        }
                    };
                    if internal {
                        self.escalation.push(EscalationStep::new(
                            EscalationAction::Kill,
                            EscalationReason::InternalError,
                            Some(match (self.machine.tier, self.machine.root) {
                                (Tier::DirectChild, _) => SignalTarget::DirectChild,
                                (Tier::PinnedGroup, Some(_)) => SignalTarget::PinnedProcessGroup,
                                _ => SignalTarget::ProcessGroup,
                            }),
                            match delivery {
                                Delivery::Delivered => StepOutcome::Delivered,
                                Delivery::NoSuchProcess => StepOutcome::NoSuchProcess,
                                Delivery::Failed => StepOutcome::Failed,
                            },
                            now - self.started,
                        ));
                    }
                    if let Some(child) = self.child.as_mut() {
                        wait_briefly(child);
                    }
                }
                Action::Reap => self.reap(),
                Action::Settle(summary) => self.settle(summary),
                // The readers go with the driver; nothing is left to arm or
                // probe.
                Action::CloseStreams | Action::ArmTimer { .. } | Action::ProbeGroup => {}
            }
        }
    }
}

impl Drop for Driver {
    /// The task was dropped before settling (runtime shutdown, or a panic
    /// that escaped the handler): stop and settle anyway.
    fn drop(&mut self) {
        self.abandon(std::thread::panicking());
    }
}

/// The children of this process that are not roots launched here:
/// descendants adopted in the subreaper tier. Dead ones are reaped on the
/// way (and still listed in `zombies`). `None` if `/proc` cannot be read.
#[cfg(target_os = "linux")]
fn adopted_pass() -> Option<sys::Children> {
    let roots = ROOTS.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = sys::own_children()?;
    c.live.retain(|p| !roots.contains(p));
    c.zombies.retain(|p| !roots.contains(p));
    for &pid in &c.zombies {
        sys::reap_child(pid);
    }
    Some(c)
}

#[cfg(not(target_os = "linux"))]
fn adopted_pass() -> Option<sys::Children> {
    None
}

/// The live adopted descendants (see [`adopted_pass`]).
fn adopted() -> Option<Vec<u32>> {
    adopted_pass().map(|c| c.live)
}

/// The subreaper tier's adoption witness (see [`Driver::view`]): passes
/// over our children until one sees a live one ([`View::Occupied`]) or
/// neither a live nor a dead one ([`View::NoDescendant`]). A pass that
/// reaped a zombie proves nothing (its children may have been handed to
/// us behind the cursor), so it is repeated, at most
/// [`sys::STABLE_ATTEMPTS`] times.
fn adoption_witness() -> View {
    for _ in 0..sys::STABLE_ATTEMPTS {
        match adopted_pass() {
            None => return View::Unknown,
            Some(c) if !c.live.is_empty() => return View::Occupied,
            Some(c) if c.zombies.is_empty() => return View::NoDescendant,
            Some(_) => {}
        }
    }
    View::Unknown
}

/// What one probe learned; the machine gets the coarser [`Probe`], the
/// evidence's reasons come from this.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum View {
    /// Subreaper tier: no live descendant at all (the adoption witness).
    NoDescendant,
    /// The group was stably empty; a descendant outside it cannot be seen.
    GroupEmpty,
    /// A live member, or a live adopted descendant, was seen.
    Occupied,
    /// `/proc` may hide processes from this one.
    Restricted,
    /// Tasks were created during every pass: an empty pass proves
    /// nothing ([`sys::scan_group_stable`]).
    Unstable,
    /// `/proc` could not be read.
    Unknown,
}

impl View {
    /// The machine's [`Probe::Empty`] is reserved for a witness that sees
    /// every descendant; an empty group is only "cannot tell".
    fn probe(self) -> Probe {
        match self {
            View::NoDescendant => Probe::Empty,
            View::Occupied => Probe::Occupied,
            View::GroupEmpty | View::Restricted | View::Unstable | View::Unknown => Probe::Unknown,
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Reads once into `buf`'s spare capacity (the caller empties it after
/// each read).
async fn read_some<R: tokio::io::AsyncRead + Unpin>(
    r: Option<&mut R>,
    buf: &mut Vec<u8>,
) -> std::io::Result<usize> {
    match r {
        Some(r) => r.read_buf(buf).await,
        None => std::future::pending().await,
    }
}

/// Waits for the root to exit. With a pidfd the root is only observed
/// (`WNOWAIT`), not reaped; without one, tokio reaps it (unpinned tier).
/// `None` means the exit cannot be observed.
async fn root_exit(pidfd: Option<&PidFd>, child: Option<&mut Child>) -> Option<ExitStatus> {
    #[cfg(target_os = "linux")]
    if let Some(fd) = pidfd {
        loop {
            let mut guard = fd.readable().await.ok()?;
            match sys::peek_exit(fd.get_ref()) {
                Ok(Some(st)) => return Some(st),
                Ok(None) => guard.clear_ready(),
                Err(e) => {
                    tracing::warn!(error = %e, "waitid on the pidfd failed");
                    return None;
                }
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = pidfd;
    let status = child?.wait().await.ok()?;
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return Some(ExitStatus::Signal(sig));
        }
    }
    Some(ExitStatus::Code(status.code().unwrap_or(-1)))
}

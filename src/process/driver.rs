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
    let started_wall = SystemTime::now();
    let started = Instant::now();
    let mut child = {
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
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let (pidfd, tier) = pin_root(runtime, pid);
    let secrets = env.secrets();
    let identity = InvocationIdentity::new(&invocation, &resolved, secrets);
    let budget = invocation.budget();
    let tun = invocation.tunables();
    let limits = Limits {
        timeout: invocation.timeout(),
        grace: tun.grace,
        drain: tun.drain,
        hard_margin: tun.hard_margin,
    };
    let (done, _) = watch::channel(None);
    let shared = Arc::new(Shared {
        pid,
        cancel: Notify::new(),
        cancelled: AtomicBool::new(false),
        done,
    });
    let start = m::start(tier, limits, started);
    let mut driver = Driver {
        machine: start.next,
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
        last_probe: None,
        escalation: Vec::new(),
        settled: false,
        cut: false,
        subreaper: subreaper && tier == Tier::PinnedGroup,
        probe_window: PROBE_WINDOW.min(limits.grace / 2),
    };
    let mut follow = Vec::new();
    driver.execute(start.actions, started, &mut follow);
    let span = tracing::debug_span!("process", pid);
    runtime.spawn(tracing::Instrument::instrument(
        driver.run(pidfd, stdout, stderr, follow),
        span,
    ));
    Ok(Running::from_shared(shared))
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
    last_probe: Option<Probe>,
    escalation: Vec<EscalationStep>,
    settled: bool,
    probe_window: Duration,
    /// custodian closed a stream that was still open (drain bound after
    /// KILL, hard deadline, or no safe signal left).
    cut: bool,
    /// The subreaper tier is active: adopted descendants count as ours.
    subreaper: bool,
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
            if !follow.is_empty() {
                let ev = follow.remove(0);
                self.feed(ev, Instant::now(), &mut follow);
                self.sync_streams(&mut stdout, &mut stderr);
                continue;
            }
            let next_timer = self.timers.iter().flatten().min().copied();
            let probe_at = self.probe.map(|p| p.next);
            let shared = self.shared.clone();
            let wake = tokio::select! {
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
            };
            let now = Instant::now();
            let event = match wake {
                Wake::Cancel => {
                    cancel_seen = true;
                    Some(Event::Cancel)
                }
                Wake::Exit(st) => {
                    root_pending = false;
                    Some(Event::RootExited(st))
                }
                Wake::ExitUnobservable => {
                    // waitid failed: the exit cannot be observed. Leave it
                    // to the timers (the ladder and the hard deadline).
                    root_pending = false;
                    None
                }
                Wake::Read(which, Ok(n)) if n > 0 => {
                    let (cap, buf) = match which {
                        Stream::Stdout => (self.out.as_mut(), &out_buf),
                        Stream::Stderr => (self.err.as_mut(), &err_buf),
                    };
                    if let Some(cap) = cap {
                        cap.push(&buf[..n]);
                    }
                    match which {
                        Stream::Stdout => out_buf.clear(),
                        Stream::Stderr => err_buf.clear(),
                    }
                    None
                }
                Wake::Read(which, _) => {
                    match which {
                        Stream::Stdout => stdout = None,
                        Stream::Stderr => stderr = None,
                    }
                    Some(Event::StreamClosed(which))
                }
                Wake::Timer => self.due_timer(now),
                Wake::Probe => self.rescan(now),
            };
            if let Some(ev) = event {
                self.feed(ev, now, &mut follow);
                self.sync_streams(&mut stdout, &mut stderr);
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

    /// The group scan, extended in the subreaper tier by the live adopted
    /// descendants (whose exited ones are reaped on the way).
    fn scan(&self) -> GroupScan {
        let group = sys::scan_group(self.pid, self.pid);
        if !self.subreaper || group != GroupScan::Empty {
            return group;
        }
        match adopted() {
            Some(live) if live.is_empty() => GroupScan::Empty,
            Some(_) => GroupScan::Occupied,
            None => GroupScan::Unknown,
        }
    }

    fn rescan(&mut self, now: Instant) -> Option<Event> {
        let run = self.probe?;
        match self.scan() {
            GroupScan::Empty => Some(self.probe_answer(Probe::Empty)),
            GroupScan::Unknown => Some(self.probe_answer(Probe::Unknown)),
            GroupScan::Occupied if now >= run.give_up => Some(self.probe_answer(Probe::Occupied)),
            GroupScan::Occupied => {
                let delay = (run.delay * 2).min(Duration::from_millis(10));
                self.probe = Some(ProbeRun {
                    next: now + delay,
                    delay,
                    give_up: run.give_up,
                });
                None
            }
        }
    }

    fn probe_answer(&mut self, p: Probe) -> Event {
        self.probe = None;
        self.last_probe = Some(p);
        Event::GroupProbed(p)
    }

    fn feed(&mut self, event: Event, now: Instant, follow: &mut Vec<Event>) {
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
                Action::ProbeGroup => match self.scan() {
                    GroupScan::Empty => follow.push(self.probe_answer(Probe::Empty)),
                    GroupScan::Unknown => follow.push(self.probe_answer(Probe::Unknown)),
                    GroupScan::Occupied => {
                        let delay = Duration::from_millis(1);
                        self.probe = Some(ProbeRun {
                            next: now + delay,
                            delay,
                            give_up: now + self.probe_window,
                        });
                    }
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

    fn settle(&mut self, summary: Summary<Instant>) {
        if self.settled {
            return;
        }
        self.settled = true;
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
            m::Status::Exited => evidence::Status::Exited,
            m::Status::Signaled => evidence::Status::Signaled,
            m::Status::TimedOut => evidence::Status::TimedOut,
            m::Status::Cancelled => evidence::Status::Cancelled,
        };
        let ev = Evidence {
            version: evidence::EVIDENCE_VERSION,
            invocation: self.identity.clone(),
            status,
            exit_code,
            signal,
            timings,
            stdout,
            stderr,
            escalation: std::mem::take(&mut self.escalation),
            descendants: self.descendants(&summary),
        };
        self.shared.done.send_replace(Some(Arc::new(ev)));
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
            match (s.tier, self.last_probe) {
                (Tier::DirectChild, _) => reasons.push(VerdictReason::PlatformUnsupported),
                (Tier::Group, _) => reasons.push(VerdictReason::RootReapedBeforeCheck),
                (Tier::PinnedGroup, Some(Probe::Occupied)) => {
                    reasons.push(VerdictReason::GroupNotEmpty)
                }
                // The group is empty yet a pipe had to be cut: whoever
                // held it is outside the group.
                (Tier::PinnedGroup, Some(Probe::Empty)) if self.cut => {
                    reasons.push(VerdictReason::MayHaveLeftGroup)
                }
                (Tier::PinnedGroup, Some(Probe::Empty)) => {}
                (Tier::PinnedGroup, Some(Probe::Unknown) | None) => {
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

impl Drop for Driver {
    /// The task was dropped before settling (runtime shutdown): stop the
    /// group without a grace, reap what can be reaped, and settle anyway
    /// so that no waiter hangs and no signal is sent afterwards.
    fn drop(&mut self) {
        if self.settled || self.machine.phase == Phase::Settled {
            return;
        }
        let t = m::abandon(&self.machine, Instant::now());
        self.machine = t.next;
        for action in t.actions {
            match action {
                Action::SignalGroup(sig) => {
                    #[cfg(unix)]
                    let _ = sys::signal_group(self.pid, sig);
                    #[cfg(not(unix))]
                    let _ = sig;
                    // Give the killed root a moment to exit so that `reap`
                    // collects it here instead of leaving a zombie to
                    // tokio's orphan queue, which no runtime may ever drain
                    // again.
                    if let Some(child) = self.child.as_mut() {
                        for _ in 0..50 {
                            if !matches!(child.try_wait(), Ok(None)) {
                                break;
                            }
                            std::thread::sleep(Duration::from_millis(2));
                        }
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

/// The live children of this process that are not roots launched here:
/// descendants adopted in the subreaper tier. Exited ones are reaped on
/// the way. `None` if `/proc` cannot be read.
#[cfg(target_os = "linux")]
fn adopted() -> Option<Vec<u32>> {
    let roots = ROOTS.lock().unwrap_or_else(|e| e.into_inner());
    let mut live = Vec::new();
    for (pid, state) in sys::own_children()? {
        if roots.contains(&pid) {
            continue;
        }
        if matches!(state, b'Z' | b'X') {
            sys::reap_child(pid);
        } else {
            live.push(pid);
        }
    }
    Some(live)
}

#[cfg(not(target_os = "linux"))]
fn adopted() -> Option<Vec<u32>> {
    None
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

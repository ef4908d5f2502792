//! The driver: executes the actions of [`crate::machine::process`] for one
//! real child. The machine decides, the driver acts.
//!
//! One tokio task per process owns the child, both pipe readers, the timers
//! and the machine. It waits on everything at once (cancel, root exit, both
//! reads, the next timer, the next probe scan), turns whatever happened into
//! one [`Event`], steps the machine and executes the returned actions, until
//! the machine settles. Because it is a spawned task, dropping the caller's
//! future changes nothing; if the task itself is dropped (runtime shutdown)
//! before settling, [`Driver`]'s `Drop` kills the group (and, in the cgroup
//! tier, the cgroup: `cgroup.kill`) and settles.
//!
//! In the cgroup tier the root is started by the `clone3` spawner inside a
//! fresh cgroup ([`super::cgroup_root`]); there is no `tokio::process::Child`:
//! its exit is observed through the pidfd `clone3` returned, it is reaped
//! with `waitid(P_PIDFD)` at settlement, the probe reads `cgroup.events`
//! (woken by inotify), and the cgroup is removed after settlement, with the
//! outcome in the evidence (`cgroup_removal`).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Child;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::capture::{StreamCapture, StreamState};
use super::containment::{Plan, Selected};
use super::env::ChildEnv;
use super::evidence::{
    self, CgroupRemoval, Descendants as EvDescendants, EscalationAction, EscalationReason,
    EscalationStep, Evidence, InvocationIdentity, SignalTarget, StepOutcome, Verdict,
    VerdictReason,
};
use super::invocation::Invocation;
use super::launch::{ProcessError, ROOTS, Running, Shared};
use super::sys::{self, Delivery, GroupScan};
use crate::contain::{Containment, Unavailable};
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

/// One captured output stream, whichever way the root was spawned.
type Reader = Box<dyn AsyncRead + Send + Unpin>;

/// The process's cgroup (cgroup tier) and the watch on its
/// `cgroup.events`.
#[cfg(target_os = "linux")]
struct CgroupRun {
    cg: crate::contain::Cgroup,
    /// `None` if inotify is unavailable: the probe then rescans on a timer.
    watch: Option<crate::contain::EventsWatch>,
}
#[cfg(not(target_os = "linux"))]
struct CgroupRun;

/// Everything a started root hands to its driver.
struct Started {
    pid: u32,
    child: Option<Child>,
    pidfd: Option<PidFd>,
    tier: Tier,
    stdout: Option<Reader>,
    stderr: Option<Reader>,
    cgroup: Option<CgroupRun>,
    subreaper: bool,
    started_wall: SystemTime,
    started: Instant,
}

/// Spawns the root as `selected` says and starts its driver task. `auto`
/// falls back to the group tier when the kernel cannot spawn into a
/// cgroup.
pub(crate) fn spawn(
    runtime: &tokio::runtime::Handle,
    invocation: Invocation,
    env: ChildEnv,
    cwd: PathBuf,
    resolved: PathBuf,
    selected: Selected,
) -> Result<Running, ProcessError> {
    let Selected {
        plan,
        requested,
        fallback,
    } = selected;
    let started = match plan {
        #[cfg(target_os = "linux")]
        Plan::Cgroup(cg) => {
            match spawn_in_cgroup(runtime, &invocation, &env, &cwd, &resolved, cg) {
                Ok(started) => started,
                Err(Ok(why)) if requested == Containment::Auto => {
                    let fb = Selected::fallback(requested, why);
                    return spawn(runtime, invocation, env, cwd, resolved, fb);
                }
                Err(Ok(reason)) => {
                    return Err(ProcessError::ContainmentUnavailable { requested, reason });
                }
                Err(Err(source)) => {
                    return Err(ProcessError::Spawn {
                        path: resolved,
                        source,
                    });
                }
            }
        }
        Plan::Group { subreaper } => {
            spawn_in_group(runtime, &invocation, &env, &cwd, &resolved, subreaper)?
        }
    };
    Ok(start_driver(
        runtime, invocation, &env, &resolved, started, requested, fallback,
    ))
}

/// The cgroup tier: the root starts inside `cg` (`clone3` with
/// `CLONE_INTO_CGROUP`), pinned by the pidfd that `clone3` returned.
/// `Err(Ok(why))`: the kernel cannot spawn into a cgroup here, or the
/// cgroup refused the process (nothing started; the cgroup was removed);
/// `Err(Err(e))`: the spawn itself failed.
#[cfg(target_os = "linux")]
fn spawn_in_cgroup(
    runtime: &tokio::runtime::Handle,
    invocation: &Invocation,
    env: &ChildEnv,
    cwd: &std::path::Path,
    resolved: &std::path::Path,
    cg: crate::contain::Cgroup,
) -> Result<Started, Result<Unavailable, std::io::Error>> {
    use super::cgroup_root::{self, StartError};
    let _guard = runtime.enter();
    // Watch before the root exists, so no change of `cgroup.events` is
    // missed.
    let watch = cg
        .watch()
        .map_err(|e| tracing::warn!(error = %e, "no inotify on cgroup.events; polling"))
        .ok();
    let started_wall = SystemTime::now();
    let started = Instant::now();
    let root = {
        // As for the group tier: a concurrent subreaper scan must never
        // take this root for an adopted descendant.
        let mut roots = ROOTS.lock().unwrap_or_else(|e| e.into_inner());
        match cgroup_root::start(invocation, env, cwd, resolved, &cg) {
            Ok(root) => {
                roots.push(root.pid);
                root
            }
            Err(e) => {
                drop(roots);
                // Nothing runs in it: the cgroup is empty.
                if let Err(re) = cg.remove() {
                    tracing::warn!(error = %re, "removing an unused cgroup failed");
                }
                use rustix::io::Errno;
                return Err(match e {
                    StartError::Unsupported => Ok(Unavailable::Clone3Unsupported),
                    StartError::Refused(Errno::BUSY) => Ok(Unavailable::InternalProcessRule),
                    StartError::Refused(Errno::ACCESS | Errno::PERM) => {
                        Ok(Unavailable::NotDelegated)
                    }
                    StartError::Refused(_) => Ok(Unavailable::SetupFailed),
                    StartError::Failed(e) => Err(e),
                });
            }
        }
    };
    let pid = root.pid;
    let pidfd = match sys::register_pidfd(root.pidfd) {
        Ok(fd) => fd,
        Err(e) => {
            // Cannot observe the root: kill the cgroup, reap, report.
            let _ = cg.kill();
            ROOTS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|&p| p != pid);
            return Err(Err(e));
        }
    };
    Ok(Started {
        pid,
        child: None,
        pidfd: Some(pidfd),
        tier: Tier::Cgroup,
        stdout: Some(Box::new(root.stdout)),
        stderr: Some(Box::new(root.stderr)),
        cgroup: Some(CgroupRun { cg, watch }),
        subreaper: false,
        started_wall,
        started,
    })
}

/// The group tiers: `tokio::process` (std's `posix_spawn`), the root leads
/// a new process group and is pinned with a pidfd where the kernel allows.
fn spawn_in_group(
    runtime: &tokio::runtime::Handle,
    invocation: &Invocation,
    env: &ChildEnv,
    cwd: &std::path::Path,
    resolved: &std::path::Path,
    subreaper: bool,
) -> Result<Started, ProcessError> {
    let mut cmd = tokio::process::Command::new(resolved);
    // No pre_exec hook anywhere: std keeps its posix_spawn fast path
    // (the program is an absolute path, so setting PATH does not force
    // fork, and the process group is set with POSIX_SPAWN_SETPGROUP).
    cmd.args(invocation.args())
        .env_clear()
        .envs(env.vars())
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(false);
    #[cfg(unix)]
    {
        cmd.arg0(invocation.executable()).process_group(0);
    }
    let started_wall = SystemTime::now();
    let started = Instant::now();
    let mut child = {
        // Registered under the lock, so no probe ever sees this child
        // unregistered and takes it for an adopted descendant.
        let mut roots = ROOTS.lock().unwrap_or_else(|e| e.into_inner());
        // The runtime's reactor must be current when the child is spawned.
        let _guard = runtime.enter();
        let child = cmd.spawn().map_err(|source| ProcessError::Spawn {
            path: resolved.to_path_buf(),
            source,
        })?;
        roots.push(child.id().unwrap_or(0));
        child
    };
    let pid = child.id().unwrap_or(0);
    let stdout = child.stdout.take().map(|r| Box::new(r) as Reader);
    let stderr = child.stderr.take().map(|r| Box::new(r) as Reader);
    let (pidfd, tier) = pin_root(runtime, pid);
    Ok(Started {
        pid,
        child: Some(child),
        pidfd,
        tier,
        stdout,
        stderr,
        cgroup: None,
        subreaper: subreaper && tier == Tier::PinnedGroup,
        started_wall,
        started,
    })
}

fn start_driver(
    runtime: &tokio::runtime::Handle,
    invocation: Invocation,
    env: &ChildEnv,
    resolved: &std::path::Path,
    started: Started,
    requested: Containment,
    fallback: Option<Unavailable>,
) -> Running {
    let Started {
        pid,
        child,
        pidfd,
        tier,
        stdout,
        stderr,
        cgroup,
        subreaper,
        started_wall,
        started,
    } = started;
    let secrets = env.secrets();
    let identity = InvocationIdentity::new(&invocation, resolved, secrets);
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
        child,
        pidfd,
        cgroup,
        requested,
        fallback,
        removal: None,
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
        subreaper,
        probe_window: PROBE_WINDOW.min(limits.grace / 2),
    };
    let mut follow = Vec::new();
    driver.execute(start.actions, started, &mut follow);
    let span = tracing::debug_span!("process", pid);
    runtime.spawn(tracing::Instrument::instrument(
        driver.run(stdout, stderr, follow),
        span,
    ));
    Running::from_shared(shared)
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
    /// The root in the group tiers (tokio reaps or we do, see `reap`).
    child: Option<Child>,
    /// The root's pidfd: observes its exit without reaping it; in the
    /// cgroup tier also reaps it.
    pidfd: Option<PidFd>,
    /// The cgroup tier's cgroup.
    cgroup: Option<CgroupRun>,
    requested: Containment,
    fallback: Option<Unavailable>,
    /// What became of the cgroup at settlement.
    removal: Option<CgroupRemoval>,
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
        mut stdout: Option<Reader>,
        mut stderr: Option<Reader>,
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
            let probing = self.probe.is_some();
            let wake = tokio::select! {
                biased;
                _ = shared.cancel.notified(), if !cancel_seen => Wake::Cancel,
                r = root_exit(self.pidfd.as_ref(), self.child.as_mut()), if root_pending => {
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
                _ = cgroup_changed(self.cgroup.as_mut()), if probing => Wake::Probe,
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
    fn sync_streams(&self, stdout: &mut Option<Reader>, stderr: &mut Option<Reader>) {
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
        #[cfg(target_os = "linux")]
        if let Some(run) = &self.cgroup {
            return match run.cg.populated() {
                Ok(false) => GroupScan::Empty,
                Ok(true) => GroupScan::Occupied,
                Err(e) => {
                    tracing::warn!(error = %e, "reading cgroup.events failed");
                    GroupScan::Unknown
                }
            };
        }
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
                    next: self.next_scan(now + delay, run.give_up),
                    delay,
                    give_up: run.give_up,
                });
                None
            }
        }
    }

    /// When to rescan an occupied group: on the timer in the `/proc`
    /// tiers; in the cgroup tier only at `give_up`, since the inotify watch
    /// wakes the driver as soon as `cgroup.events` changes.
    fn next_scan(&self, timer: Instant, give_up: Instant) -> Instant {
        #[cfg(target_os = "linux")]
        if self.cgroup.as_ref().is_some_and(|c| c.watch.is_some()) {
            return give_up;
        }
        let _ = give_up;
        timer
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
                        let give_up = now + self.probe_window;
                        self.probe = Some(ProbeRun {
                            next: self.next_scan(now + delay, give_up),
                            delay,
                            give_up,
                        });
                    }
                },
                Action::Reap => self.reap(),
                Action::Settle(summary) => self.settle(summary),
            }
        }
    }

    fn signal(&mut self, sig: Signal, now: Instant) {
        #[cfg(target_os = "linux")]
        if sig == Signal::Kill {
            if let Some(run) = &self.cgroup {
                // Every task in the cgroup, whatever its group or session;
                // the group KILL is for good measure.
                let outcome = match run.cg.kill() {
                    Ok(()) => StepOutcome::Delivered,
                    Err(e) => {
                        tracing::warn!(error = %e, "cgroup.kill failed");
                        StepOutcome::Failed
                    }
                };
                let _ = sys::signal_group(self.pid, sig);
                if let Some(run) = self.probe.as_mut() {
                    run.give_up = now + self.probe_window;
                    run.next = run.next.max(now);
                }
                self.escalation.push(EscalationStep::new(
                    EscalationAction::Kill,
                    EscalationReason::GraceExpired,
                    Some(SignalTarget::Cgroup),
                    outcome,
                    now - self.started,
                ));
                return;
            }
        }
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
            (Tier::PinnedGroup | Tier::Cgroup, Some(_)) => SignalTarget::PinnedProcessGroup,
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
        if let Some(run) = self.probe {
            let next = self.next_scan(run.next, run.give_up);
            self.probe = Some(ProbeRun { next, ..run });
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
        #[cfg(target_os = "linux")]
        if self.cgroup.is_some() {
            self.reap_pidfd();
        }
        roots.retain(|&p| p != self.pid);
        drop(roots);
        if self.subreaper {
            // Reap adopted descendants that have exited meanwhile.
            let _ = adopted();
        }
    }

    /// Cgroup tier: reaps the root through its pidfd; a root that has not
    /// exited yet (it was killed with its cgroup) is reaped by a thread.
    #[cfg(target_os = "linux")]
    fn reap_pidfd(&mut self) {
        let Some(fd) = self.pidfd.take() else {
            return;
        };
        match sys::reap_pidfd(fd.get_ref(), false) {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(
                    pid = self.pid,
                    "root alive at settlement; reaped when it exits"
                );
                let fd = fd.into_inner();
                let _ = std::thread::Builder::new()
                    .name("custodian-reap".into())
                    .spawn(move || sys::reap_pidfd(&fd, true));
            }
            Err(e) => tracing::warn!(pid = self.pid, error = %e, "reaping the root failed"),
        }
    }

    /// Cgroup tier: removes the cgroup after settlement and records what
    /// came of it. A cgroup that is still populated is killed and reported
    /// `left_populated`; a thread removes it once it is empty.
    #[cfg(target_os = "linux")]
    fn remove_cgroup(&mut self) {
        let Some(run) = self.cgroup.take() else {
            return;
        };
        self.removal = Some(match run.cg.remove() {
            Ok(()) => CgroupRemoval::Removed,
            Err(crate::contain::CgroupError::Busy { .. }) => {
                let _ = run.cg.kill();
                let cg = run.cg;
                let _ = std::thread::Builder::new()
                    .name("custodian-rmdir".into())
                    .spawn(move || {
                        for _ in 0..500 {
                            if cg.remove().is_ok() {
                                return;
                            }
                            std::thread::sleep(Duration::from_millis(10));
                        }
                        tracing::warn!(cgroup = cg.name(), "cgroup still populated after KILL");
                    });
                CgroupRemoval::LeftPopulated
            }
            Err(e) => {
                tracing::warn!(error = %e, "removing the cgroup failed");
                CgroupRemoval::Failed
            }
        });
    }

    fn settle(&mut self, summary: Summary<Instant>) {
        if self.settled {
            return;
        }
        self.settled = true;
        #[cfg(target_os = "linux")]
        self.remove_cgroup();
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
            Tier::Cgroup => evidence::Tier::Cgroup,
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
                (Tier::Cgroup, Some(Probe::Occupied)) => reasons.push(VerdictReason::GroupNotEmpty),
                (Tier::Cgroup, Some(Probe::Empty)) => {}
                (Tier::Cgroup, Some(Probe::Unknown) | None) => {
                    reasons.push(VerdictReason::GroupEmptinessUnknown)
                }
            }
        }
        EvDescendants::new(verdict, tier, reasons)
            .with_containment(self.requested, self.fallback)
            .with_cgroup_removal(self.removal)
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
        let now = Instant::now();
        let safe = match self.machine.tier {
            Tier::PinnedGroup | Tier::Cgroup => true,
            Tier::Group | Tier::DirectChild => self.machine.root.is_none(),
        };
        #[cfg(target_os = "linux")]
        if let Some(run) = &self.cgroup {
            let _ = run.cg.kill();
            // Let the killed tasks go, so that the cgroup can be removed and
            // the root reaped here rather than left behind.
            for _ in 0..50 {
                if matches!(run.cg.populated(), Ok(false)) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        if safe {
            #[cfg(unix)]
            let _ = sys::signal_group(self.pid, Signal::Kill);
            // Give the killed root a moment to exit so that `reap` collects
            // it here instead of leaving a zombie to tokio's orphan queue,
            // which no runtime may ever drain again.
            if let Some(child) = self.child.as_mut() {
                for _ in 0..50 {
                    if !matches!(child.try_wait(), Ok(None)) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        }
        self.reap();
        let mut s = self.machine;
        for st in [&mut s.stdout, &mut s.stderr] {
            if st.open {
                st.end = StreamEnd::CutAtDeadline;
            }
        }
        s.timings.settled = Some(now);
        self.settle(Summary {
            root: s.root,
            cause: Some(s.cause.unwrap_or(Cause::Cancel)),
            stdout: s.stdout.end,
            stderr: s.stderr.end,
            descendants: match s.tier {
                Tier::DirectChild => Descendants::Unsupported,
                _ => Descendants::UnconfirmedOrEscaped,
            },
            tier: s.tier,
            timings: s.timings,
        });
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

/// Waits for a change of the cgroup's `cgroup.events`; never returns
/// outside the cgroup tier or without a watch.
async fn cgroup_changed(run: Option<&mut CgroupRun>) {
    #[cfg(target_os = "linux")]
    if let Some(run) = run {
        if let Some(watch) = run.watch.as_mut() {
            if let Err(e) = watch.changed().await {
                // Back to rescans on the timer rather than a busy loop.
                tracing::warn!(error = %e, "cgroup.events watch failed; polling");
                run.watch = None;
            }
            return;
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = run;
    std::future::pending().await
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

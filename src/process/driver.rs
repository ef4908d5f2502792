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

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Child;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::capture::StreamCapture;
use super::containment::{Plan, Selected};
use super::effects::{Effects, KillTarget};
use super::env::ChildEnv;
use super::evidence::{
    self, CgroupRemoval, DescendantVerdict, Descendants, EscalationAction, EscalationReason,
    EscalationStep, Evidence, InvocationIdentity, SignalTarget, StepOutcome, VerdictReason,
};
use super::fault::{self, FaultPoint};
use super::invocation::Invocation;
use super::launch::{NO_CANCEL_GRACE, ProcessError, ROOTS, Running, Shared};
use super::spawn::IsolatedInit;
use super::sys::{self, Delivery, GroupScan};
use crate::confine::build::{Prepared, PrivateTmp};
use crate::confine::{ConfineError, ConfinementReport};
use crate::contain::{Containment, Unavailable};
use crate::machine::process::{
    self as m, Action, Cause, Event, ExitStatus, Phase, Probe, ProcessLimits, Signal, Stream,
    StreamEnd, Summary, Tier, Timer,
};

/// Size of one pipe read: a streamed launch's whole pipe
/// (`cgroup_root::STREAMED_PIPE`); a run's 64 KiB pipe fills a quarter of
/// it (the buffer is spare capacity, never zeroed or touched beyond a
/// read).
const READ_CHUNK: usize = 256 * 1024;
/// Longest time a probe keeps rescanning an occupied group before
/// answering `Occupied` (further capped at half the grace): long enough for
/// a member that was just sent KILL to finish exiting on a loaded machine.
const PROBE_WINDOW: Duration = Duration::from_millis(250);

#[cfg(target_os = "linux")]
type PidFd = tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>;
#[cfg(not(target_os = "linux"))]
type PidFd = ();

/// One captured output stream, whichever way the root was spawned.
pub(crate) type Reader = Box<dyn AsyncRead + Send + Unpin>;

/// A session launch's stdin (the pipe's read end, for the child) and its
/// shared side; both `None` for a plain launch (stdin on `/dev/null`).
pub(crate) struct Stdin<'a> {
    pub(crate) read: Option<std::os::fd::BorrowedFd<'a>>,
    pub(crate) session: Option<Arc<super::session::SessionShared>>,
    /// A session with a terminal: the pseudo-terminal's slave (the
    /// child's stdin, stdout and stderr) and a reader of its master (the
    /// capture's stdout; stderr then only carries its end-of-file).
    pub(crate) terminal: Option<(std::os::fd::BorrowedFd<'a>, Reader)>,
}

/// The process's cgroup (cgroup tier) and the watch on its
/// `cgroup.events`.
#[cfg(target_os = "linux")]
struct CgroupRun {
    cg: crate::contain::Cgroup,
    /// Armed by the first probe that finds the cgroup populated (most
    /// settle on a first read that finds it empty, and never need one);
    /// `None` before, or if the watch is unavailable: the probe then
    /// rescans on a timer.
    watch: Option<crate::contain::EventsWatch>,
    /// Whether arming was tried.
    armed: bool,
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
    /// The confinement enforced and its private `TMPDIR`.
    confined: Option<(ConfinementReport, Option<PrivateTmp>)>,
    /// The sandbox's init, when isolated: the root is the init, the
    /// program's own exit status is read from it.
    isolation: Option<IsolatedInit>,
    /// Network `allow`: the proxy's listener inside the sandbox, until
    /// [`spawn`] attaches it.
    proxy_listener: Option<std::os::fd::OwnedFd>,
    /// Network `allow`: the proxy serving the sandbox.
    network: Option<super::proxy::Served>,
}

/// Spawns the root as `selected` says and starts its driver task. `auto`
/// falls back to the group tier when the kernel cannot spawn into a
/// cgroup. `network`: the proxy and allow-list of a network `allow` launch.
#[allow(
    clippy::too_many_arguments,
    reason = "the launch's parts, each given up once; a struct would only rename them"
)]
pub(crate) fn spawn(
    runtime: &tokio::runtime::Handle,
    invocation: Invocation,
    env: ChildEnv,
    cwd: PathBuf,
    resolved: PathBuf,
    selected: Selected,
    confine: Option<Prepared>,
    network: Option<(super::proxy::NetworkProxy, crate::confine::hosts::AllowList)>,
    stdin: Stdin<'_>,
) -> Result<Running, ProcessError> {
    let unconfinable = |reason| {
        Err(ProcessError::Confinement(
            ConfineError::SpawnerUnavailable { reason },
        ))
    };
    let Selected {
        plan,
        requested,
        fallback,
    } = selected;
    // Built before the spawn: the fallback evidence needs it if anything
    // after the spawn fails.
    let identity = InvocationIdentity::new(&invocation, &resolved, env.secrets());
    let confined = confine.is_some();
    let (tty, master) = stdin.terminal.unzip();
    #[cfg(target_os = "linux")]
    let in_cgroup = |cg, confine| {
        spawn_in_cgroup(
            runtime,
            &invocation,
            &env,
            &cwd,
            &resolved,
            cg,
            confine,
            super::cgroup_root::SessionStdio {
                stdin: stdin.read,
                terminal: tty,
                streamed: stdin.session.is_some(),
            },
        )
    };
    let in_group = |subreaper| {
        if tty.is_some() {
            // Only the clone3 spawners make the child a session leader
            // with a controlling terminal.
            return Err(ProcessError::TerminalUnavailable);
        }
        spawn_in_group(
            runtime,
            &invocation,
            &env,
            &cwd,
            &resolved,
            subreaper,
            stdin.read,
        )
    };
    let started = match plan {
        #[cfg(target_os = "linux")]
        Plan::Cgroup(cg) => {
            match in_cgroup(Some(cg), confine) {
                Ok(started) => started,
                // Only the clone3 spawner applies a confinement: never fall
                // back to running unconfined.
                Err(Ok(_)) if confined => return unconfinable("no_cgroup_tier"),
                Err(Ok(why)) if requested == Containment::Auto => {
                    let fb = Selected::fallback(requested, why);
                    let stdin = Stdin {
                        read: stdin.read,
                        session: stdin.session,
                        terminal: tty.zip(master),
                    };
                    return spawn(
                        runtime, invocation, env, cwd, resolved, fb, None, None, stdin,
                    );
                }
                Err(Ok(reason)) => {
                    return Err(ProcessError::ContainmentUnavailable { requested, reason });
                }
                Err(Err(e)) => return Err(e),
            }
        }
        // An isolated launch without a cgroup: the pid namespace is the
        // unit (`auto`, or when the cgroup tier was not asked for).
        #[cfg(target_os = "linux")]
        Plan::Group { .. }
            if confine.as_ref().is_some_and(|c| c.view().is_some())
                && requested == Containment::Auto =>
        {
            match in_cgroup(None, confine) {
                Ok(started) => started,
                Err(Ok(_)) => return unconfinable("no_cgroup_tier"),
                Err(Err(e)) => return Err(e),
            }
        }
        // Unconfined under `auto` with no cgroup: the pid namespace is the
        // unit where user namespaces are allowed (a `setsid` escapee dies
        // with the run, no root or cgroup needed); where the clone is
        // refused after all, the group tier.
        #[cfg(target_os = "linux")]
        Plan::Group { subreaper }
            if !confined
                && requested == Containment::Auto
                && super::spawn::isolation_supported().is_ok() =>
        {
            let contained = Some(Prepared::pid_namespace_only());
            match in_cgroup(None, contained) {
                Ok(started) => started,
                Err(Ok(why)) => {
                    tracing::debug!(
                        ?why,
                        "no pid-namespace tier; the group tier contains the run"
                    );
                    in_group(subreaper)?
                }
                Err(Err(e)) => return Err(e),
            }
        }
        Plan::Group { .. } if confined => return unconfinable("no_cgroup_tier"),
        Plan::Group { subreaper } => in_group(subreaper)?,
    };
    let mut started = started;
    if let Some(master) = master {
        // The child's stdout pipe carries nothing but its end-of-file.
        started.stdout = Some(master);
    }
    if let (Some(listener), Some((proxy, allow))) = (started.proxy_listener.take(), network) {
        started.network = Some(super::proxy::Served::start(&proxy, listener, allow));
    }
    let pid = started.pid;
    let (started_at, started_wall) = (started.started, started.started_wall);
    let report = started.confined.as_ref().map(|c| c.0.clone());
    // The tier as the settled run's evidence names it (`descendants`): an
    // isolated launch without a cgroup is the pid-namespace tier. The root
    // is pinned only later, by the driver: here a group is a plain group.
    let tier = match started.tier {
        Tier::Cgroup if started.isolation.is_some() && started.cgroup.is_none() => {
            evidence::ContainmentTier::PidNamespace
        }
        Tier::Cgroup => evidence::ContainmentTier::Cgroup,
        Tier::DirectChild => evidence::ContainmentTier::DirectChild,
        Tier::PinnedGroup | Tier::Group => evidence::ContainmentTier::ProcessGroup,
    };
    // From the instant the spawn returned, a guard owns the root until the
    // driver takes it over: whatever panics in between, the group (and the
    // cgroup) is killed and the root reaped, and the evidence says so.
    let mut guard = StartedGuard {
        started: Some(started),
    };
    let (done, _) = watch::channel(None);
    let shared = Arc::new(Shared {
        pid,
        cancel: Notify::new(),
        cancelled: AtomicBool::new(false),
        cancel_grace: AtomicU64::new(NO_CANCEL_GRACE),
        done,
        captured: Default::default(),
        session: stdin.session,
    });
    let fault = invocation.fault();
    let setup = std::panic::catch_unwind(AssertUnwindSafe(|| {
        fault::hit(fault, FaultPoint::AfterSpawn);
        let started = guard.started.take()?;
        start_driver(
            runtime,
            &invocation,
            &env,
            started,
            &shared,
            identity.clone(),
            (requested, fallback),
        );
        Some(())
    }));
    if setup.is_err() {
        // The driver never ran (or unwound): the session's readers learn
        // the output ended from the evidence below.
        // Either the guard still holds the root, or the driver that took it
        // over was dropped while unwinding and settled on its own.
        let kill = guard.kill_and_reap();
        publish_once(&shared, || {
            let mut ev = Evidence::internal_failure(
                identity,
                started_wall,
                started_at.elapsed(),
                kill,
                tier,
            );
            ev.descendants = ev.descendants.with_containment(requested, fallback);
            ev.confinement = report;
            ev
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
    // Whichever path settled the run: a session's output ends with it.
    if let Some(session) = &shared.session {
        session.end();
    }
}

/// The cgroup tier: the root starts inside `cg` (`clone3` with
/// `CLONE_INTO_CGROUP`), pinned by the pidfd that `clone3` returned.
/// `Err(Ok(why))`: the kernel cannot spawn into a cgroup here, or the
/// cgroup refused the process (nothing started; the cgroup was removed);
/// `Err(Err(e))`: the spawn itself failed, or the child could not apply
/// `confine`.
#[cfg(target_os = "linux")]
#[expect(
    clippy::too_many_arguments,
    reason = "the launch's parts, borrowed from `spawn`; a struct would only rename them"
)]
fn spawn_in_cgroup(
    runtime: &tokio::runtime::Handle,
    invocation: &Invocation,
    env: &ChildEnv,
    cwd: &std::path::Path,
    resolved: &std::path::Path,
    cg: Option<crate::contain::Cgroup>,
    confine: Option<Prepared>,
    stdio: super::cgroup_root::SessionStdio<'_>,
) -> Result<Started, Result<Unavailable, ProcessError>> {
    use super::cgroup_root::{self, StartError};
    let _guard = runtime.enter();
    let started_wall = SystemTime::now();
    let started = Instant::now();
    let root = {
        // As for the group tier: a concurrent subreaper scan must never
        // take this root for an adopted descendant.
        let started = ROOTS.spawn(
            || {
                cgroup_root::start(
                    invocation,
                    env,
                    cwd,
                    resolved,
                    cg.as_ref(),
                    confine.as_ref(),
                    stdio,
                )
            },
            |root| root.pid,
        );
        match started {
            Ok(root) => root,
            Err(e) => {
                // Nothing runs in it: the cgroup is empty.
                if let Some(Err(re)) = cg.as_ref().map(crate::contain::Cgroup::remove) {
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
                    StartError::Confine(e) => Err(ProcessError::Confinement(e)),
                    StartError::Failed(source) => Err(ProcessError::Spawn {
                        path: resolved.to_path_buf(),
                        source,
                    }),
                });
            }
        }
    };
    let pid = root.pid;
    let registered = if fault::refuses(invocation.fault(), FaultPoint::RegisterPidfd) {
        Err((root.pidfd, std::io::Error::from_raw_os_error(libc::ENOMEM)))
    } else {
        sys::register_pidfd(root.pidfd)
    };
    let pidfd = match registered {
        Ok(fd) => fd,
        Err((fd, e)) => {
            // Cannot observe the root: kill it with its cgroup (isolated,
            // the pid namespace dies with it), reap it, report.
            let mut effects = Effects::new(pid);
            if let Some(order) = effects.teardown() {
                if let Some(cg) = &cg {
                    let _ = effects.kill_cgroup(&order, cg);
                }
                let _ = effects.kill_pidfd(&order, std::os::fd::AsFd::as_fd(&fd));
            }
            effects.torn_down();
            let _ = sys::reap_pidfd(&fd, true);
            ROOTS.with(|roots| roots.retain(|&p| p != pid));
            return Err(Err(ProcessError::Spawn {
                path: resolved.to_path_buf(),
                source: e,
            }));
        }
    };
    Ok(Started {
        pid,
        child: None,
        pidfd: Some(pidfd),
        tier: Tier::Cgroup,
        stdout: Some(Box::new(root.stdout)),
        stderr: Some(Box::new(root.stderr)),
        cgroup: cg.map(|cg| CgroupRun {
            cg,
            watch: None,
            armed: false,
        }),
        subreaper: false,
        started_wall,
        started,
        confined: confine.and_then(Prepared::after_spawn),
        isolation: root.isolation,
        proxy_listener: root.proxy_listener,
        network: None,
    })
}

/// Links glibc's `posix_spawn_file_actions_addchdir_np` into a static
/// build (this repository's own: `.cargo/config.toml`). std looks it up
/// through a weak reference, and a weak reference pulls nothing out of
/// `libc.a`: without this, every spawn with a working directory (the group
/// tiers below) would `fork` the whole process instead of `posix_spawn`.
#[cfg(all(target_os = "linux", target_env = "gnu", target_feature = "crt-static"))]
#[used]
static POSIX_SPAWN_ADDCHDIR: unsafe extern "C" fn(
    *mut libc::posix_spawn_file_actions_t,
    *const libc::c_char,
) -> libc::c_int = libc::posix_spawn_file_actions_addchdir_np;

/// The group tiers: `tokio::process` (std's `posix_spawn`), the root leads
/// a new process group and is pinned with a pidfd where the kernel allows.
fn spawn_in_group(
    runtime: &tokio::runtime::Handle,
    invocation: &Invocation,
    env: &ChildEnv,
    cwd: &std::path::Path,
    resolved: &std::path::Path,
    subreaper: bool,
    stdin: Option<std::os::fd::BorrowedFd<'_>>,
) -> Result<Started, ProcessError> {
    let stdin = match stdin {
        Some(fd) => std::process::Stdio::from(fd.try_clone_to_owned().map_err(|source| {
            ProcessError::Spawn {
                path: resolved.to_path_buf(),
                source,
            }
        })?),
        None => std::process::Stdio::null(),
    };
    let mut cmd = tokio::process::Command::new(resolved);
    // No pre_exec hook anywhere: std keeps its posix_spawn fast path
    // (the program is an absolute path, so setting PATH does not force
    // fork, and the process group is set with POSIX_SPAWN_SETPGROUP).
    cmd.args(invocation.args())
        .env_clear()
        .envs(env.vars())
        .current_dir(cwd)
        .stdin(stdin)
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
        // The runtime's reactor must be current when the child is spawned.
        let _guard = runtime.enter();
        ROOTS.spawn(
            || {
                cmd.spawn().map_err(|source| ProcessError::Spawn {
                    path: resolved.to_path_buf(),
                    source,
                })
            },
            |child| child.id().unwrap_or(0),
        )?
    };
    let pid = child.id().unwrap_or(0);
    let stdout = child.stdout.take().map(|r| Box::new(r) as Reader);
    let stderr = child.stderr.take().map(|r| Box::new(r) as Reader);
    // Pinned by `start_driver`, once the driver owns the child.
    Ok(Started {
        pid,
        child: Some(child),
        pidfd: None,
        tier: Tier::Group,
        stdout,
        stderr,
        cgroup: None,
        subreaper,
        started_wall,
        started,
        confined: None,
        isolation: None,
        proxy_listener: None,
        network: None,
    })
}

/// Builds the driver (which owns the root from then on), pins a group
/// tier's root and spawns the driver's task.
fn start_driver(
    runtime: &tokio::runtime::Handle,
    invocation: &Invocation,
    env: &ChildEnv,
    started: Started,
    shared: &Arc<Shared>,
    identity: InvocationIdentity,
    (requested, fallback): (Containment, Option<Unavailable>),
) {
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
        confined,
        isolation,
        proxy_listener: _,
        network,
    } = started;
    let cgroup_none = cgroup.is_none();
    let (confinement, private_tmp) = confined.unzip();
    let private_tmp = private_tmp.flatten();
    let secrets = env.secrets();
    let budget = invocation.budget();
    let tun = invocation.tunables();
    let limits = ProcessLimits {
        timeout: invocation.timeout(),
        grace: tun.grace,
        drain: tun.drain,
        hard_margin: tun.hard_margin,
    };
    // The driver owns the root from its first line on.
    let mut driver = Driver {
        machine: m::start(tier, limits, started).next,
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
        out: Some(
            StreamCapture::new(budget.stdout, secrets.redactor())
                .tapped(shared.session.as_ref(), Stream::Stdout),
        ),
        err: Some(
            StreamCapture::new(budget.stderr, secrets.redactor())
                .tapped(shared.session.as_ref(), Stream::Stderr),
        ),
        timers: [None; 4],
        probe: None,
        last_view: None,
        escalation: Vec::new(),
        settled: false,
        cut: false,
        left_cgroup: false,
        subreaper: false,
        probe_window: PROBE_WINDOW.min(limits.grace / 2),
        fault: invocation.fault(),
        internal_error: false,
        confinement,
        _private_tmp: private_tmp,
        ns_tier: isolation.is_some() && cgroup_none,
        isolation,
        effects: Effects::new(pid),
        network,
        session: shared.session.clone(),
    };
    let tier = if driver.cgroup.is_some() || driver.isolation.is_some() {
        tier
    } else {
        let (pidfd, tier) = pin_root(runtime, pid);
        driver.pidfd = pidfd;
        tier
    };
    let start = m::start(tier, limits, started);
    driver.machine = start.next;
    let kill_target = if driver.ns_tier {
        KillTarget::PidNamespace
    } else if driver.cgroup.is_some() {
        KillTarget::Cgroup
    } else {
        KillTarget::Group
    };
    driver.effects.record(tier, limits, kill_target, started);
    driver.subreaper = subreaper && tier == Tier::PinnedGroup;
    let mut follow = Vec::new();
    driver.execute(start.actions, started, &mut follow);
    let span = tracing::debug_span!("process", pid);
    runtime.spawn(tracing::Instrument::instrument(
        driver.run(stdout, stderr, follow),
        span,
    ));
}

/// Owns a freshly started root until the driver takes it over.
struct StartedGuard {
    started: Option<Started>,
}

impl StartedGuard {
    /// Kills the root's group (the root is unreaped, so the group id is
    /// still ours) and, in the cgroup tier, its cgroup; reaps the root if it
    /// exits within a moment, and unregisters it. Returns the kill step,
    /// `None` if the root was already handed over.
    fn kill_and_reap(&mut self) -> Option<EscalationStep> {
        let Started {
            pid,
            child,
            pidfd,
            cgroup,
            started,
            isolation,
            ..
        } = self.started.take()?;
        let at = Instant::now() - started;
        let mut effects = Effects::new(pid);
        #[cfg(target_os = "linux")]
        if let (None, Some(isolation), Some(fd)) = (&cgroup, isolation, &pidfd) {
            // The pid-namespace tier: SIGKILL to the init ends the
            // namespace; reap it, then release what it ran on.
            let outcome = match effects
                .teardown()
                .map(|order| effects.kill_pidfd(&order, std::os::fd::AsFd::as_fd(fd.get_ref())))
            {
                Some(Ok(())) => StepOutcome::Delivered,
                _ => StepOutcome::Failed,
            };
            ROOTS.with(|roots| {
                effects.torn_down();
                let _ = sys::reap_pidfd(fd.get_ref(), true);
                roots.retain(|&p| p != pid);
            });
            drop(isolation);
            return Some(EscalationStep::new(
                EscalationAction::Kill,
                EscalationReason::InternalError,
                Some(SignalTarget::PidNamespace),
                outcome,
                at,
            ));
        }
        #[cfg(target_os = "linux")]
        if let Some(run) = cgroup {
            let order = effects.teardown();
            let outcome = match order.as_ref().map(|o| effects.kill_cgroup(o, &run.cg)) {
                Some(Ok(())) => StepOutcome::Delivered,
                _ => StepOutcome::Failed,
            };
            if let Some(order) = &order {
                let _ = effects.signal_group(order);
            }
            for _ in 0..50 {
                if matches!(run.cg.populated(), Ok(false)) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            ROOTS.with(|roots| {
                effects.torn_down();
                if let Some(fd) = pidfd {
                    let fd = fd.into_inner();
                    if !matches!(sys::reap_pidfd(&fd, false), Ok(true)) {
                        let _ = std::thread::Builder::new()
                            .name("custodian-reap".into())
                            .spawn(move || sys::reap_pidfd(&fd, true));
                    }
                }
                roots.retain(|&p| p != pid);
            });
            if let Err(e) = run.cg.remove() {
                tracing::warn!(error = %e, "removing the cgroup of a failed launch failed");
            }
            return Some(EscalationStep::new(
                EscalationAction::Kill,
                EscalationReason::InternalError,
                Some(SignalTarget::Cgroup),
                outcome,
                at,
            ));
        }
        #[cfg(not(target_os = "linux"))]
        let _ = cgroup;
        drop(pidfd);
        let mut child = child?;
        #[cfg(unix)]
        let outcome = match effects.teardown().map(|o| effects.signal_group(&o)) {
            Some(Delivery::Delivered) => StepOutcome::Delivered,
            Some(Delivery::NoSuchProcess) => StepOutcome::NoSuchProcess,
            Some(Delivery::Failed) | None => StepOutcome::Failed,
        };
        #[cfg(not(unix))]
        let outcome = match child.start_kill() {
            Ok(()) => StepOutcome::Delivered,
            Err(_) => StepOutcome::Failed,
        };
        wait_briefly(&mut child);
        ROOTS.with(|roots| {
            effects.torn_down();
            // Reaps if it exited; else tokio's orphan queue takes it.
            let _ = child.try_wait();
            drop(child);
            roots.retain(|&p| p != pid);
        });
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

impl Drop for StartedGuard {
    fn drop(&mut self) {
        let _ = self.kill_and_reap();
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
    match sys::pidfd_open(pid).and_then(|fd| sys::register_pidfd(fd).map_err(|(_, e)| e)) {
        Ok(fd) => (Some(fd), Tier::PinnedGroup),
        Err(e) => {
            tracing::warn!(pid, error = %e, "pidfd unavailable; group signals stop at root exit");
            (None, Tier::Group)
        }
    }
}

#[cfg(not(target_os = "linux"))]
use portable::pin_root;

/// A probe in progress: rescan at `next` until `give_up`.
#[derive(Clone, Copy, Debug)]
struct ProbeRun {
    next: Instant,
    delay: Duration,
    give_up: Instant,
    /// The scans after the first (the one that answers included), for
    /// the debug log of the answer: a few dozen at most in the `/proc`
    /// tiers (a window of at most [`PROBE_WINDOW`], rescanned at most every
    /// 10 ms), a few in the cgroup tier (woken by `cgroup.events`).
    rescans: u32,
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
    last_view: Option<View>,
    escalation: Vec<EscalationStep>,
    settled: bool,
    probe_window: Duration,
    /// custodian closed a stream that was still open (drain bound after
    /// KILL, hard deadline, or no safe signal left).
    cut: bool,
    /// Cgroup tier: the cgroup was seen empty, yet a member of the root's
    /// process group lived on outside it at settlement (it was moved out
    /// through a `cgroup.procs`).
    left_cgroup: bool,
    /// The subreaper tier is active: adopted descendants count as ours.
    subreaper: bool,
    /// The test seam (see [`fault`]).
    fault: Option<FaultPoint>,
    /// custodian panicked; the evidence reports `internal_error`.
    internal_error: bool,
    /// What confinement was enforced.
    confinement: Option<ConfinementReport>,
    /// The confinement's private `TMPDIR`, removed when the driver is
    /// dropped (after settlement).
    _private_tmp: Option<PrivateTmp>,
    /// The sandbox's init, when isolated; kept until the driver is
    /// dropped (after the init was reaped).
    isolation: Option<IsolatedInit>,
    /// The pid-namespace tier: isolated, and no cgroup (the machine runs
    /// it as [`Tier::Cgroup`]: the kernel proves the namespace empty).
    ns_tier: bool,
    /// The effects the machine ordered, the only way to have one.
    effects: Effects,
    /// Network `allow`: the proxy serving the sandbox, finished into the
    /// evidence.
    network: Option<super::proxy::Served>,
    /// A session's side: the output log the captures feed, the interrupts
    /// asked for, the interactions the evidence reports.
    session: Option<Arc<super::session::SessionShared>>,
}

/// What woke the driver.
enum Wake {
    Cancel,
    Interrupt,
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
            let wake = if follow.is_empty() {
                let next_timer = self.timers.iter().flatten().min().copied();
                let probe_at = self.probe.map(|p| p.next);
                let shared = self.shared.clone();
                let probing = self.probe.is_some();
                let session = self.session.clone();
                Some(tokio::select! {
                    biased;
                    // Not only the first: a later `cancel_within` may
                    // shorten the grace.
                    _ = shared.cancel.notified() => Wake::Cancel,
                    _ = poked(session.as_deref()), if session.is_some() => Wake::Interrupt,
                    r = root_exit(self.pidfd.as_ref(), self.child.as_mut()), if root_pending => {
                        match r {
                            Some(st) => Wake::Exit(program_exit(self.isolation.as_ref(), st)),
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
                        self.narrow_grace(now);
                        (!std::mem::replace(&mut cancel_seen, true)).then_some(Event::Cancel)
                    }
                    Some(Wake::Interrupt) => {
                        // One event per interrupt asked for: the rest wait
                        // in `follow`, handled before anything new.
                        let n = self.session.as_ref().map_or(0, |s| s.take_interrupts());
                        follow.extend((1..n).map(|_| Event::Interrupt));
                        (n > 0).then_some(Event::Interrupt)
                    }
                    Some(Wake::Exit(st)) => {
                        root_pending = false;
                        if let Some(init) = self.isolation.as_mut() {
                            init.release_view();
                        }
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
                        let (cap, buf, slot) = match which {
                            Stream::Stdout => (self.out.as_mut(), &mut out_buf, 0),
                            Stream::Stderr => (self.err.as_mut(), &mut err_buf, 1),
                        };
                        if let Some(cap) = cap {
                            cap.push(&buf[..n]);
                            self.shared.captured[slot]
                                .store(cap.bytes_read(), std::sync::atomic::Ordering::Relaxed);
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

    /// Applies the shortest grace a [`Running::cancel_within`] asked for:
    /// the machine arms the grace from its limits, so they are narrowed
    /// before it sees the cancel; a ladder already climbing has its grace
    /// and hard deadline re-armed sooner, counted from its `SIGTERM`.
    fn narrow_grace(&mut self, now: Instant) {
        let us = self.shared.cancel_grace.load(Ordering::SeqCst);
        let grace = Duration::from_micros(us);
        if us == NO_CANCEL_GRACE || grace >= self.machine.limits.grace {
            return;
        }
        self.machine.limits.grace = grace;
        self.probe_window = self.probe_window.min(grace / 2);
        let Some(term) = self.machine.timings.term_sent else {
            return;
        };
        let sooner = |armed: &mut Option<Instant>, at: Instant| {
            if let Some(t) = armed {
                *t = (*t).min(at);
            }
        };
        // A grace already past ends now; the hard deadline keeps its whole
        // margin after that KILL, so the streams still get to close.
        let kill = (term + grace).max(now);
        sooner(&mut self.timers[timer_index(Timer::Grace)], kill);
        let hard = kill + self.machine.limits.hard_margin;
        sooner(&mut self.timers[timer_index(Timer::Hard)], hard);
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

    /// Looks for live descendants with what this tier can see.
    ///
    /// Cgroup tier: `cgroup.events`; `populated 0` is
    /// [`View::NoDescendant`]: every task the root or its descendants
    /// created is in the cgroup, whatever its group or session.
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
    /// In the `/proc` tiers, a `/proc` that may hide processes makes any
    /// emptiness [`View::Restricted`].
    fn view(&self) -> View {
        // The pid-namespace tier: the namespace is empty exactly when its
        // init has exited (the kernel kills and waits for every other
        // member before the init's exit can be seen).
        #[cfg(target_os = "linux")]
        if self.ns_tier {
            return match self.pidfd.as_ref().map(|fd| sys::peek_exit(fd.get_ref())) {
                Some(Ok(Some(_))) => View::NoDescendant,
                Some(Ok(None)) => View::Occupied,
                _ => View::Unknown,
            };
        }
        #[cfg(target_os = "linux")]
        if let Some(run) = &self.cgroup {
            return match run.cg.populated() {
                Ok(false) => View::NoDescendant,
                Ok(true) => View::Occupied,
                Err(e) => {
                    tracing::warn!(error = %e, "reading cgroup.events failed");
                    View::Unknown
                }
            };
        }
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

    /// The first look of a probe. In the cgroup tier, a populated cgroup
    /// arms the watch on `cgroup.events` and is read again: a change
    /// between the two reads is then seen by the second, any later one
    /// wakes the watch.
    fn probe_view(&mut self) -> View {
        let v = self.view();
        #[cfg(target_os = "linux")]
        if matches!(v, View::Occupied | View::Unstable) {
            if let Some(run) = self.cgroup.as_mut().filter(|r| !r.armed) {
                run.armed = true;
                run.watch = run
                    .cg
                    .watch()
                    .map_err(|e| tracing::warn!(error = %e, "no watch on cgroup.events; polling"))
                    .ok();
                return self.view();
            }
        }
        v
    }

    fn rescan(&mut self, now: Instant) -> Option<Event> {
        let mut run = self.probe?;
        run.rescans += 1;
        match self.view() {
            // Members just sent a signal need a moment to exit, and a busy
            // host a quieter moment to scan in: look again shortly.
            View::Occupied | View::Unstable if now < run.give_up => {
                let delay = (run.delay * 2).min(Duration::from_millis(10));
                self.probe = Some(ProbeRun {
                    next: self.next_scan(now + delay, run.give_up),
                    delay,
                    give_up: run.give_up,
                    rescans: run.rescans,
                });
                None
            }
            v => {
                self.probe = Some(run);
                Some(self.probe_answer(v))
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

    fn probe_answer(&mut self, v: View) -> Event {
        if let Some(run) = self.probe.take() {
            tracing::debug!(rescans = run.rescans, view = ?v, "group probed");
        }
        self.last_view = Some(v);
        Event::GroupProbed(v.probe())
    }

    fn feed(&mut self, event: Event, now: Instant, follow: &mut Vec<Event>) {
        fault::hit(self.fault, FaultPoint::Step);
        self.effects.input(Some(event), now);
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
                Action::SignalGroup(sig) => {
                    self.effects.license(sig);
                    self.signal(sig, now);
                }
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
                Action::ProbeGroup => match self.probe_view() {
                    View::Occupied | View::Unstable => {
                        let delay = Duration::from_millis(1);
                        let give_up = now + self.probe_window;
                        self.probe = Some(ProbeRun {
                            next: self.next_scan(now + delay, give_up),
                            delay,
                            give_up,
                            rescans: 0,
                        });
                    }
                    v => follow.push(self.probe_answer(v)),
                },
                Action::Reap => {
                    self.effects.license_reap();
                    self.reap();
                }
                Action::Settle(summary) => self.settle(summary),
            }
        }
    }

    fn signal(&mut self, sig: Signal, now: Instant) {
        if sig == Signal::Int {
            // Forwarded for a session's caller: not a step of the ladder,
            // so not in the escalation (the interactions list it).
            #[cfg(unix)]
            if let Some(order) = self.effects.ordered(sig) {
                let outcome = self.effects.signal_group(&order);
                tracing::debug!(?outcome, "interrupt forwarded to the group");
            }
            return;
        }
        #[cfg(target_os = "linux")]
        if sig == Signal::Kill && self.ns_tier {
            // The pid-namespace tier: SIGKILL to the init ends every
            // member of its namespace, whatever its group or session. The
            // pidfd needs no group id.
            let order = self.effects.ordered(sig);
            let outcome = match (order, self.pidfd.as_ref()) {
                (Some(order), Some(fd)) => Some(
                    self.effects
                        .kill_pidfd(&order, std::os::fd::AsFd::as_fd(fd.get_ref())),
                ),
                _ => None,
            };
            let outcome = match outcome {
                Some(Ok(())) => StepOutcome::Delivered,
                Some(Err(rustix::io::Errno::SRCH)) => StepOutcome::NoSuchProcess,
                _ => StepOutcome::Failed,
            };
            // No probe runs in this tier at a `KILL`: the machine probes
            // only after the root (the init) exited, and the namespace is
            // then empty, answered at the first look.
            debug_assert!(self.probe.is_none(), "a probe running at the init's KILL");
            self.escalation.push(EscalationStep::new(
                EscalationAction::Kill,
                EscalationReason::GraceExpired,
                Some(SignalTarget::PidNamespace),
                outcome,
                now - self.started,
            ));
            return;
        }
        #[cfg(target_os = "linux")]
        if sig == Signal::Kill {
            if let Some(run) = &self.cgroup {
                // Every task in the cgroup, whatever its group or session;
                // the group KILL is for good measure.
                let order = self.effects.ordered(sig);
                let outcome = match order.as_ref().map(|o| self.effects.kill_cgroup(o, &run.cg)) {
                    Some(Ok(())) => StepOutcome::Delivered,
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "cgroup.kill failed");
                        StepOutcome::Failed
                    }
                    None => StepOutcome::Failed,
                };
                if let Some(order) = &order {
                    let _ = self.effects.signal_group(order);
                }
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
        let order = self.effects.ordered(sig);
        #[cfg(unix)]
        let delivery = order.as_ref().map(|o| self.effects.signal_group(o));
        #[cfg(not(unix))]
        let delivery = Some(portable::start_kill(self.child.as_mut()));
        let outcome = match delivery {
            Some(Delivery::Delivered) => StepOutcome::Delivered,
            Some(Delivery::NoSuchProcess) => StepOutcome::NoSuchProcess,
            Some(Delivery::Failed) | None => StepOutcome::Failed,
        };
        let reason = match (sig, self.machine.cause) {
            (Signal::Kill, _) => EscalationReason::GraceExpired,
            (Signal::Term, Some(Cause::Timeout)) => EscalationReason::Timeout,
            (Signal::Term, Some(Cause::Cancel)) => EscalationReason::Cancel,
            (Signal::Term, _) => EscalationReason::GroupCleanup,
            (Signal::Int, _) => unreachable!("an interrupt is forwarded above"),
        };
        let target = match (self.machine.tier, self.machine.root) {
            (Tier::DirectChild, _) => SignalTarget::DirectChild,
            (Tier::PinnedGroup | Tier::Cgroup, Some(_)) => SignalTarget::PinnedProcessGroup,
            _ => SignalTarget::ProcessGroup,
        };
        let action = match sig {
            Signal::Term => EscalationAction::Term,
            Signal::Kill => EscalationAction::Kill,
            Signal::Int => unreachable!("an interrupt is forwarded above"),
        };
        // A probe still running from before this signal (only at a `KILL`:
        // the machine sends no `TERM` while a probe is outstanding) gives
        // the members it just hit their full window to exit. Its next
        // rescan stays on the timer: these tiers have no cgroup watch.
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
        if let (true, Some(order)) = (self.subreaper, &order) {
            // Our own unreaped children: their pids cannot be reused.
            let live = adopted().unwrap_or_default();
            if !live.is_empty() {
                let delivered = live
                    .iter()
                    .filter(|&&p| self.effects.signal_adopted(order, p) == Delivery::Delivered)
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
        // From here on the group id may stop being the root's.
        if !self.effects.reap() {
            return;
        }
        // Reap and unregister under the lock: a concurrent subreaper scan
        // must never see this root unregistered while it is still ours.
        ROOTS.with(|roots| {
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
                    Err(e) => {
                        tracing::warn!(pid = self.pid, error = %e, "reaping the root failed")
                    }
                }
            }
            #[cfg(target_os = "linux")]
            if self.cgroup.is_some() || self.isolation.is_some() {
                self.reap_pidfd();
            }
            roots.retain(|&p| p != self.pid);
        });
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

    /// Cgroup tier: releases the cgroup after settlement (removed, or kept
    /// empty for the request's next process: [`crate::contain::Cgroup::release`])
    /// and records what came of it. A cgroup that is still populated is
    /// killed and reported `left_populated`; a thread removes it once it is
    /// empty.
    #[cfg(target_os = "linux")]
    fn remove_cgroup(&mut self) {
        let Some(run) = self.cgroup.take() else {
            return;
        };
        self.removal = Some(match run.cg.release() {
            Ok(crate::contain::Released::Kept) => CgroupRemoval::KeptEmpty,
            Ok(_) => CgroupRemoval::Removed,
            Err((cg, crate::contain::CgroupError::Busy { .. })) => {
                self.effects.kill_leftovers(&cg);
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
            Err((_, e)) => {
                tracing::warn!(error = %e, "removing the cgroup failed");
                CgroupRemoval::Failed
            }
        });
    }

    /// Publishes the evidence, exactly once. Building it cannot take the
    /// waiters down with it: if it panics, a minimal evidence that says
    /// `internal_error` is published instead.
    fn settle(&mut self, summary: Summary<Instant>) {
        if self.settled {
            return;
        }
        fault::hit(self.fault, FaultPoint::Settle);
        #[cfg(target_os = "linux")]
        if summary.tier == Tier::Cgroup && summary.descendants == DescendantVerdict::Terminated {
            self.left_cgroup = group_outlives_cgroup(self.pid);
        }
        #[cfg(target_os = "linux")]
        self.remove_cgroup();
        self.effects.finish();
        let built = std::panic::catch_unwind(AssertUnwindSafe(|| self.evidence(&summary)));
        let ev = built.unwrap_or_else(|_| self.internal_failure(self.descendants(&summary).tier));
        self.settled = true;
        publish_once(&self.shared, || ev);
    }

    /// The minimal evidence published when custodian itself panicked.
    fn internal_failure(&self, tier: evidence::ContainmentTier) -> Evidence {
        let mut ev = Evidence::internal_failure(
            self.identity.clone(),
            self.started_wall,
            self.started.elapsed(),
            None,
            tier,
        );
        ev.descendants = ev
            .descendants
            .with_containment(self.requested, self.fallback)
            .with_cgroup_removal(self.removal);
        ev.confinement = self.confinement.clone();
        ev
    }

    fn evidence(&mut self, summary: &Summary<Instant>) -> Evidence {
        fault::hit(self.fault, FaultPoint::Evidence);
        let stdout = self
            .out
            .take()
            .map(|c| c.finish(summary.stdout))
            .unwrap_or_else(|| evidence_empty(summary.stdout));
        let stderr = self
            .err
            .take()
            .map(|c| c.finish(summary.stderr))
            .unwrap_or_else(|| evidence_empty(summary.stderr));
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
        let status = if self.internal_error {
            m::ProcessStatus::InternalError
        } else {
            summary.status()
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
            confinement: self.confinement.clone(),
            network: self.network.take().map(super::proxy::Served::finish),
            cancel_cause: None,
            // A streamed run is no session: nothing was written to it.
            interactions: self
                .session
                .as_ref()
                .filter(|s| s.options().stdin)
                .map(|s| s.interactions()),
            // Absent when nothing was recorded (no record, or no output).
            recorded: self
                .session
                .as_ref()
                .and_then(|s| s.recorded())
                .filter(|r| r.stdout.is_some() || r.stderr.is_some()),
        }
    }

    fn descendants(&self, s: &Summary<Instant>) -> Descendants {
        let tier = match s.tier {
            Tier::PinnedGroup if self.subreaper => evidence::ContainmentTier::Subreaper,
            Tier::PinnedGroup => evidence::ContainmentTier::PinnedProcessGroup,
            Tier::Cgroup if self.ns_tier => evidence::ContainmentTier::PidNamespace,
            Tier::Cgroup => evidence::ContainmentTier::Cgroup,
            Tier::Group => evidence::ContainmentTier::ProcessGroup,
            Tier::DirectChild => evidence::ContainmentTier::DirectChild,
        };
        let mut verdict = s.descendants;
        let mut reasons = Vec::new();
        if self.left_cgroup {
            // The cgroup is empty because a member was moved out of it, not
            // because everything died: never `terminated`.
            verdict = DescendantVerdict::UnconfirmedOrEscaped;
            reasons.push(VerdictReason::LeftCgroup);
        }
        if verdict != DescendantVerdict::Terminated {
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
                (Tier::Cgroup, Some(View::Occupied)) => reasons.push(VerdictReason::GroupNotEmpty),
                (Tier::Cgroup, Some(View::NoDescendant)) => {}
                (Tier::Cgroup, Some(_) | None) => {
                    reasons.push(VerdictReason::GroupEmptinessUnknown)
                }
            }
        }
        Descendants::new(verdict, tier, reasons)
            .with_containment(self.requested, self.fallback)
            .with_cgroup_removal(self.removal)
    }
}

fn evidence_empty(state: StreamEnd) -> super::capture::CapturedStream {
    super::capture::CapturedStream::empty(state)
}

impl Driver {
    /// Stops the run without a grace and settles: the group (and, in the
    /// cgroup tier, the cgroup) is killed if that is still safe, the root
    /// reaped if it exits within a moment, and an evidence published, so
    /// that no waiter hangs and no signal is sent afterwards. `internal`
    /// marks a panic (status `internal_error`); otherwise the task was
    /// dropped (runtime shutdown) and the run counts as cancelled.
    fn abandon(&mut self, internal: bool) {
        if self.settled || self.machine.phase == Phase::Settled {
            // Settled in the machine but the evidence was never published
            // (a panic in between): publish the minimal one.
            if !self.settled {
                self.settled = true;
                let tier = match self.machine.tier {
                    Tier::DirectChild => evidence::ContainmentTier::DirectChild,
                    Tier::Cgroup => evidence::ContainmentTier::Cgroup,
                    _ => evidence::ContainmentTier::PinnedProcessGroup,
                };
                #[cfg(target_os = "linux")]
                self.remove_cgroup();
                let ev = self.internal_failure(tier);
                publish_once(&self.shared, || ev);
            }
            return;
        }
        self.internal_error = internal;
        let now = Instant::now();
        self.effects.input(None, now);
        let t = m::abandon(&self.machine, now);
        self.machine = t.next;
        for action in t.actions {
            match action {
                Action::SignalGroup(sig) => {
                    self.effects.license(sig);
                    let order = self.effects.ordered(sig);
                    let (cgroup_killed, delivery) = self.abandon_signal(order.as_ref());
                    if internal {
                        self.record_internal_kill(cgroup_killed, delivery, now);
                    }
                    // Give the killed root a moment to exit so that `reap`
                    // collects it here instead of leaving a zombie to
                    // tokio's orphan queue, which no runtime may ever drain
                    // again.
                    if let Some(child) = self.child.as_mut() {
                        wait_briefly(child);
                    }
                }
                Action::Reap => {
                    self.effects.license_reap();
                    self.reap();
                }
                Action::Settle(summary) => self.settle(summary),
                // The readers go with the driver; nothing is left to arm or
                // probe.
                Action::CloseStreams | Action::ArmTimer { .. } | Action::ProbeGroup => {}
            }
        }
    }

    /// The signal of an abandonment: a `KILL` goes to the pid namespace's
    /// init in that tier, to the cgroup (waiting a moment for its tasks to
    /// go, so that it can be removed and the root reaped here) and then the
    /// group in the cgroup tier, to the group otherwise. Returns whether
    /// `cgroup.kill` worked (`None`: no cgroup was killed) and what came of
    /// the signal.
    fn abandon_signal(
        &mut self,
        order: Option<&super::effects::Order>,
    ) -> (Option<bool>, Delivery) {
        let Some(order) = order else {
            return (None, Delivery::Failed);
        };
        #[cfg(target_os = "linux")]
        if order.signal() == Signal::Kill {
            if self.ns_tier {
                let sent = match self.pidfd.as_ref() {
                    Some(fd) => self
                        .effects
                        .kill_pidfd(order, std::os::fd::AsFd::as_fd(fd.get_ref())),
                    None => Err(rustix::io::Errno::SRCH),
                };
                return (
                    None,
                    match sent {
                        Ok(()) => Delivery::Delivered,
                        Err(rustix::io::Errno::SRCH) => Delivery::NoSuchProcess,
                        Err(_) => Delivery::Failed,
                    },
                );
            }
            if let Some(run) = self.cgroup.take() {
                let killed = self.effects.kill_cgroup(order, &run.cg);
                for _ in 0..50 {
                    if matches!(run.cg.populated(), Ok(false)) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                self.cgroup = Some(run);
                let delivery = self.effects.signal_group(order);
                return (Some(killed.is_ok()), delivery);
            }
        }
        #[cfg(unix)]
        let delivery = self.effects.signal_group(order);
        #[cfg(not(unix))]
        let delivery = portable::start_kill(self.child.as_mut());
        (None, delivery)
    }

    /// Records the `KILL` that [`Driver::abandon`] sent after a panic.
    fn record_internal_kill(
        &mut self,
        cgroup_killed: Option<bool>,
        delivery: Delivery,
        now: Instant,
    ) {
        let (target, outcome) = match cgroup_killed {
            Some(true) => (SignalTarget::Cgroup, StepOutcome::Delivered),
            Some(false) => (SignalTarget::Cgroup, StepOutcome::Failed),
            None => (
                match (self.machine.tier, self.machine.root) {
                    _ if self.ns_tier => SignalTarget::PidNamespace,
                    (Tier::DirectChild, _) => SignalTarget::DirectChild,
                    (Tier::PinnedGroup, Some(_)) => SignalTarget::PinnedProcessGroup,
                    _ => SignalTarget::ProcessGroup,
                },
                match delivery {
                    Delivery::Delivered => StepOutcome::Delivered,
                    Delivery::NoSuchProcess => StepOutcome::NoSuchProcess,
                    Delivery::Failed => StepOutcome::Failed,
                },
            ),
        };
        self.escalation.push(EscalationStep::new(
            EscalationAction::Kill,
            EscalationReason::InternalError,
            Some(target),
            outcome,
            now - self.started,
        ));
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
    ROOTS.scan(|roots| {
        let mut c = sys::own_children()?;
        c.live.retain(|p| !roots.contains(p));
        c.zombies.retain(|p| !roots.contains(p));
        for &pid in &c.zombies {
            sys::reap_child(pid);
        }
        Some(c)
    })
}

#[cfg(not(target_os = "linux"))]
use portable::adopted_pass;

/// The live adopted descendants (see [`adopted_pass`]).
fn adopted() -> Option<Vec<u32>> {
    adopted_pass().map(|c| c.live)
}

/// The subreaper tier's adoption witness (see [`Driver::view`]): passes
/// over our children until one sees a live one ([`View::Occupied`]) or
/// neither a live nor a dead one ([`View::NoDescendant`]). A pass that
/// reaped a zombie proves nothing (its children may have been handed to
/// us behind the cursor), nor does one that could not read `/proc`
/// whole, so it is repeated, at most [`sys::STABLE_ATTEMPTS`] times.
fn adoption_witness() -> View {
    for _ in 0..sys::STABLE_ATTEMPTS {
        match adopted_pass() {
            Some(c) if !c.live.is_empty() => return View::Occupied,
            Some(c) if c.zombies.is_empty() => return View::NoDescendant,
            // A pass that could not read all of `/proc` (seen, rarely, while
            // processes come and go) proves nothing either: pass again.
            None | Some(_) => {}
        }
    }
    View::Unknown
}

/// What one probe learned; the machine gets the coarser [`Probe`], the
/// evidence's reasons come from this.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum View {
    /// Cgroup tier: the cgroup is unpopulated; subreaper tier: no live
    /// descendant at all (the adoption witness).
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

/// `kill(-pgid, 0)`, then one `/proc` pass if it answers—Whether a live
/// process of the root's group `pgid` exists once its cgroup was seen
/// empty (the root reaped). Every member was created inside the cgroup
/// (`CLONE_INTO_CGROUP`, then `fork`), so a live one now is one that a
/// write to a `cgroup.procs` moved out. While a member lives the kernel
/// keeps the group's id from being reused, so `ESRCH` proves there is none;
/// the `/proc` pass (only then) tells a live member from a zombie one that
/// its parent has yet to reap. Cannot see a member that also left the
/// group (`setsid`) before leaving the cgroup.
#[cfg(target_os = "linux")]
fn group_outlives_cgroup(pgid: u32) -> bool {
    let Some(pid) = i32::try_from(pgid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    match rustix::process::test_kill_process_group(pid) {
        Err(rustix::io::Errno::SRCH) => false,
        // Found (or not ours to signal: alive all the same).
        _ => !matches!(sys::scan_group(pgid, 0), GroupScan::Empty),
    }
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

/// Waits for a session's caller to ask for an interrupt.
async fn poked(session: Option<&super::session::SessionShared>) {
    match session {
        Some(s) => s.poke.notified().await,
        None => std::future::pending().await,
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

/// The program's own exit when the root is an isolated launch's init
/// (which exits with the program's code, and cannot die of the program's
/// signal): the status the init recorded; `st` otherwise, or when the init
/// was killed before the program exited (the namespace died with it).
fn program_exit(isolation: Option<&IsolatedInit>, st: ExitStatus) -> ExitStatus {
    match isolation.and_then(IsolatedInit::program_status) {
        Some(raw) if raw & 0x7f == 0 => ExitStatus::Code((raw >> 8) & 0xff),
        Some(raw) => ExitStatus::Signal(raw & 0x7f),
        None => st,
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

#[cfg(not(target_os = "linux"))]
mod portable;
#[cfg(test)]
mod tests;

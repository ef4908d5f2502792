//! Launching a governed process: [`launch`], the [`Running`] handle and
//! [`run`].

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use super::containment;
use super::driver;
use super::env::{Baseline, ChildEnv, EnvError, NoSecrets, SecretResolver};
use super::evidence::Evidence;
use super::invocation::{Invocation, ResolveError, is_executable_file, resolve_executable};
use super::proxy::NetworkProxy;
use crate::confine::build::Prepared;
use crate::confine::{self, ConfineError, Confinement};
use crate::contain::{Containment, Unavailable};

/// What the embedding runtime supplies besides the invocation.
#[derive(Clone)]
pub struct LaunchOptions {
    /// The workspace root; the invocation's cwd is relative to it.
    pub workspace: PathBuf,
    /// The baseline environment (see [`Baseline::from_parent`]).
    pub baseline: Baseline,
    /// Resolves secret references in the overlay.
    pub secrets: Arc<dyn SecretResolver>,
    /// How to contain the process and its descendants (default
    /// [`Containment::Auto`]: a cgroup v2 where one can be created).
    pub containment: Containment,
    /// In the cgroup tier, create the process's cgroup beneath this one (a
    /// request's cgroup) instead of beneath the per-process base.
    #[cfg(target_os = "linux")]
    pub(crate) cgroup_parent: Option<Arc<crate::contain::Cgroup>>,
    /// The proxy that serves a launch whose network is
    /// [`Network::Allow`](crate::confine::Network::Allow); `None`: the
    /// process-wide one ([`NetworkProxy::shared`]).
    pub proxy: Option<NetworkProxy>,
    /// Launch as a session (a stdin pipe, output readable while it runs):
    /// set by [`super::session::start`].
    pub(crate) session: Option<super::session::SessionOptions>,
    /// A session's record of its whole output (set by the runtime).
    pub(crate) record: Option<Arc<dyn super::session::OutputRecord>>,
    /// The request's network namespace, shared by its isolated launches
    /// with the network off (set by the request's scope); `None`: each
    /// such launch has its own.
    pub(crate) network: Option<Arc<SharedNetwork>>,
}

/// A request's network namespace: made (as root, taken from the spares)
/// with its loopback up at the request's first isolated launch with the
/// network off, and entered by each later one, so that a server one call
/// started is reachable on loopback from the next call of the same
/// request, and from no other request. As root it belongs to the host's
/// user namespace; an unprivileged process makes it in a user namespace of
/// its own, which each launch enters first (`process::spawn`, *A request's
/// network namespace*). Where neither can be made, each launch has its
/// own, as without it. Released with the request's scope and its last
/// process.
///
/// Shared by the requests of an MCP session ([`SharedNetwork::for_session`]),
/// it also holds a request cgroup reserved for the session's next request:
/// a request's first launch prepares the next request's first sandbox
/// beneath it (most of a session's requests launch once), and the next
/// request's barrier takes it as its cgroup (`process::spawn`, *A
/// prepared sandbox*).
#[derive(Debug, Default)]
pub(crate) struct SharedNetwork {
    ns: std::sync::OnceLock<Option<Arc<crate::confine::build::SharedNet>>>,
    /// `Some` for an MCP session's: the request cgroup reserved for its
    /// next request, once one was made.
    #[cfg(target_os = "linux")]
    next_request: Option<std::sync::Mutex<Option<Arc<crate::contain::Cgroup>>>>,
}

impl SharedNetwork {
    /// One for the requests of an MCP session: each request's first launch
    /// prepares the next request's first sandbox.
    #[cfg_attr(
        not(feature = "mcp"),
        allow(dead_code, reason = "only the MCP server shares one")
    )]
    pub(crate) fn for_session() -> Self {
        SharedNetwork {
            ns: std::sync::OnceLock::new(),
            #[cfg(target_os = "linux")]
            next_request: Some(std::sync::Mutex::new(None)),
        }
    }

    /// Kills (and reaps) the sandbox prepared for the next launch, if one
    /// is and it waits beneath the request cgroup `parent` (its id; `None`:
    /// wherever it waits): that request launches nothing more. A sandbox
    /// prepared for a session's next request is left for it.
    pub(crate) fn discard_spare(&self, parent: Option<u64>) {
        if let Some(Some(net)) = self.ns.get() {
            let mut held = net.spare.held.lock().unwrap_or_else(|e| e.into_inner());
            #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
            if let (Some(parent), Some(spare)) = (parent, held.as_ref()) {
                if super::spawn::prepared_parent(spare.as_ref()).is_some_and(|p| p != parent) {
                    return;
                }
            }
            #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
            let _ = parent;
            let spare = held.take();
            drop(held);
            drop(spare);
        }
    }

    /// The request cgroup reserved for the session's next request, made
    /// now if none is; `None` if this is no session's, or none can be made.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    fn reserved(&self) -> Option<Arc<crate::contain::Cgroup>> {
        let mut slot = self
            .next_request
            .as_ref()?
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = crate::contain::request_cgroup().ok().map(Arc::new);
        }
        slot.clone()
    }

    /// Takes the request cgroup reserved for the session's next request
    /// (the request's barrier: it becomes that request's cgroup, journalled
    /// as any). `None` if none is reserved.
    #[cfg(target_os = "linux")]
    pub(crate) fn take_reserved(&self) -> Option<Arc<crate::contain::Cgroup>> {
        self.next_request
            .as_ref()?
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Whether it is an MCP session's ([`SharedNetwork::for_session`]).
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    fn is_session(&self) -> bool {
        self.next_request.is_some()
    }

    /// Whether a launch has asked for the namespace yet.
    fn is_made(&self) -> bool {
        self.ns.get().is_some()
    }

    /// The namespace, made on the first call.
    fn get(&self) -> Option<Arc<crate::confine::build::SharedNet>> {
        self.ns
            .get_or_init(|| {
                #[cfg(target_os = "linux")]
                let made = super::spawn::shared_network_namespace().map(Arc::new);
                #[cfg(not(target_os = "linux"))]
                let made = None;
                made
            })
            .clone()
    }
}

/// The session is over: the sandbox prepared for its next request is
/// killed and reaped, then the cgroup reserved for that request removed
/// (nothing of a tool ever ran in it).
#[cfg(target_os = "linux")]
impl Drop for SharedNetwork {
    fn drop(&mut self) {
        let Some(reserved) = self
            .next_request
            .as_mut()
            .and_then(|r| r.get_mut().unwrap_or_else(|e| e.into_inner()).take())
        else {
            return;
        };
        self.discard_spare(None);
        match Arc::try_unwrap(reserved) {
            Ok(cg) => {
                if let Err(e) = cg.remove_tree() {
                    tracing::warn!(error = %e, code = e.code(), "reserved request cgroup left behind");
                }
            }
            Err(_) => tracing::warn!("reserved request cgroup still in use; left behind"),
        }
    }
}

#[cfg(test)]
impl SharedNetwork {
    /// The namespace, if a launch made it.
    pub(crate) fn namespace(&self) -> Option<&crate::confine::build::SharedNet> {
        self.ns.get().and_then(|n| n.as_deref())
    }

    /// One whose namespace is `ns` (`None`: each launch has its own).
    pub(crate) fn with(ns: Option<crate::confine::build::SharedNet>) -> Self {
        let made = SharedNetwork::default();
        made.ns
            .set(ns.map(Arc::new))
            .expect("a new SharedNetwork is unset");
        made
    }
}

impl LaunchOptions {
    /// Options for a workspace rooted at `workspace`, with the baseline
    /// taken from this process's environment and no secrets.
    ///
    /// Also makes the spawner's descriptor slots, once per process, while
    /// the descriptor table is (usually) still small: a launch from a large
    /// table later hands the child a small one of its own instead of a copy
    /// (see `docs/performance.md`, *A large descriptor table*).
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        #[cfg(target_os = "linux")]
        super::spawn::prepare_handoff();
        LaunchOptions {
            workspace: workspace.into(),
            baseline: Baseline::from_parent(),
            secrets: Arc::new(NoSecrets),
            containment: Containment::Auto,
            #[cfg(target_os = "linux")]
            cgroup_parent: None,
            proxy: None,
            session: None,
            record: None,
            network: None,
        }
    }

    /// Serves network `allow` launches with `proxy` (one per runtime or
    /// node; see [`NetworkProxy`]).
    #[must_use]
    pub fn with_proxy(mut self, proxy: NetworkProxy) -> Self {
        self.proxy = Some(proxy);
        self
    }

    /// Replaces the containment request.
    #[must_use]
    pub fn with_containment(mut self, containment: Containment) -> Self {
        self.containment = containment;
        self
    }

    /// Replaces the secret resolver.
    #[must_use]
    pub fn with_secrets(mut self, secrets: Arc<dyn SecretResolver>) -> Self {
        self.secrets = secrets;
        self
    }
}

impl fmt::Debug for LaunchOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the baseline's values.
        f.debug_struct("LaunchOptions")
            .field("workspace", &self.workspace)
            .field("containment", &self.containment)
            .finish_non_exhaustive()
    }
}

/// Why a process could not be launched. Nothing was started when this is
/// returned. Never carries an environment key or value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProcessError {
    /// The environment overlay could not be built (a secret failed).
    #[error(transparent)]
    Env(#[from] EnvError),
    /// A bare executable name was not found in the child's `PATH`.
    #[error("executable {name:?} not found in the child's PATH")]
    NotFound {
        /// The name as given (secrets redacted).
        name: String,
    },
    /// An executable given as a path (it holds a `/`) names nothing: a
    /// component is missing or not a directory.
    #[error("{path:?} does not exist")]
    PathNotFound {
        /// The path as given (secrets redacted).
        path: PathBuf,
    },
    /// The executable exists but cannot be executed: not a regular file,
    /// no execute permission, not a format the kernel runs, or a missing
    /// script interpreter.
    #[error("{path:?} is not an executable file")]
    NotExecutable {
        /// The path as given (secrets redacted).
        path: PathBuf,
    },
    /// The working directory does not exist or is not a directory.
    #[error("working directory {cwd:?} (relative to the workspace) is not a directory: {kind}")]
    BadCwd {
        /// The workspace-relative cwd (`.` for the root).
        cwd: String,
        /// What went wrong.
        kind: io::ErrorKind,
    },
    /// The spawn call itself failed for a reason not listed above.
    #[error("spawning {path:?} failed: {source}")]
    Spawn {
        /// The executable as given (secrets redacted).
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// [`launch`] was called outside a tokio runtime.
    #[error("process launch needs a tokio runtime")]
    NoRuntime,
    /// [`enable_subreaper`] failed or is not supported here.
    #[error("cannot become a child subreaper: {source}")]
    Subreaper {
        /// The OS error.
        source: io::Error,
    },
    /// The containment asked for explicitly ([`LaunchOptions::containment`]
    /// `cgroup` or `subreaper`) cannot be had here; nothing was launched.
    /// `auto` never fails this way: it falls back and says why in the
    /// evidence.
    #[error("containment {requested} is unavailable: {reason}")]
    ContainmentUnavailable {
        /// What was asked for.
        requested: Containment,
        /// Why it cannot be had (a safe code: [`Unavailable::code`]).
        reason: Unavailable,
    },
    /// The invocation's confinement cannot be built or applied, or the
    /// kernel cannot enforce a strict one ([`ConfineError::code`]).
    #[error(transparent)]
    Confinement(#[from] ConfineError),
    /// A session with a terminal
    /// ([`SessionOptions::with_terminal`](super::session::SessionOptions::with_terminal))
    /// needs the clone3 spawner (the cgroup or pid-namespace tier); this
    /// launch would have run in the process-group tier. Nothing was
    /// launched.
    #[error("a session with a terminal needs the cgroup or pid-namespace tier")]
    TerminalUnavailable,
}

impl ProcessError {
    /// A short, stable code for the error (`not_found`, `not_executable`,
    /// `bad_cwd`, `spawn_failed`, `env`, `no_runtime`, `subreaper`,
    /// `containment_unavailable`, `terminal_unavailable`, or the
    /// confinement's code).
    pub fn code(&self) -> &'static str {
        match self {
            ProcessError::Env(_) => "env",
            ProcessError::NotFound { .. } | ProcessError::PathNotFound { .. } => "not_found",
            ProcessError::NotExecutable { .. } => "not_executable",
            ProcessError::BadCwd { .. } => "bad_cwd",
            ProcessError::Spawn { .. } => "spawn_failed",
            ProcessError::NoRuntime => "no_runtime",
            ProcessError::Subreaper { .. } => "subreaper",
            ProcessError::ContainmentUnavailable { .. } => "containment_unavailable",
            ProcessError::Confinement(e) => e.code(),
            ProcessError::TerminalUnavailable => "terminal_unavailable",
        }
    }
}

/// Whether [`enable_subreaper`] succeeded in this process.
pub(crate) static SUBREAPER: AtomicBool = AtomicBool::new(false);

/// The roots launched by this process and not yet reaped. In the
/// subreaper tier every other child of this process is an adopted
/// descendant; the registry makes sure a fresh root is never mistaken for
/// one ([`crate::sync::RootRegistry`]).
pub(crate) static ROOTS: std::sync::LazyLock<crate::sync::RootRegistry> =
    std::sync::LazyLock::new(crate::sync::RootRegistry::new);

/// `prctl(PR_SET_CHILD_SUBREAPER, 1)`—Opts this whole process into the
/// **subreaper tier**: descendants of a launched process that outlive
/// their parent (double forks, `setsid` escapees) are re-parented to this
/// process instead of `init`, so the driver can see them, signal them with
/// the group and reap them. The evidence then reports the tier
/// `subreaper`.
///
/// # Caveats
///
/// Only for an embedding process whose children are **all** launched
/// through custodian (the `custodian` CLI, a dedicated node server): the
/// driver treats every other child of this process as an adopted
/// descendant, signals it along with a group it is stopping, and reaps it
/// when it has exited. Concurrent launches share the adopted set, which can
/// only make their verdicts more conservative. Linux only.
///
/// # Errors
///
/// [`ProcessError::Subreaper`] if the kernel refuses or the platform has
/// no subreapers.
#[doc(alias = "PR_SET_CHILD_SUBREAPER")]
pub fn enable_subreaper() -> Result<(), ProcessError> {
    #[cfg(target_os = "linux")]
    {
        super::sys::become_subreaper().map_err(|source| ProcessError::Subreaper { source })?;
        SUBREAPER.store(true, Ordering::SeqCst);
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    Err(ProcessError::Subreaper {
        source: io::Error::from(io::ErrorKind::Unsupported),
    })
}

/// How many isolated launches [`prepare_isolation`] gets this process
/// ready for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExpectedLaunches {
    /// One (a one-shot command such as `custodian run`): one spare network
    /// namespace at most, none made after it was taken.
    One,
    /// As many as come: spares are kept ready while the process runs.
    Many,
}

/// Gets this process ready for isolated launches of `confinement`, on a
/// thread of its own, and returns at once: the spawner thread and its
/// seccomp program, for a best-effort `confinement` the one-time check
/// that this host allows isolation (a strict launch does not wait for it),
/// and, with the network off where this process may make network
/// namespaces (root), spare ones with their loopback up, so that the
/// launch's `clone3` need not make one (see
/// `docs/contracts/confinement.md`, *Spare network namespaces*).
///
/// Optional: without it the first launch does the same work on its own
/// path. A launch that comes before the work is done waits for it (a few
/// milliseconds at most) or does it itself. Does nothing for an
/// unconfined `confinement`.
pub fn prepare_isolation(confinement: &Confinement, expected: ExpectedLaunches) {
    if confinement.is_none() {
        return;
    }
    #[cfg(target_os = "linux")]
    let _ = super::spawn::prepare_isolation(
        confinement.network != confine::Network::On,
        match expected {
            ExpectedLaunches::One => Some(1),
            ExpectedLaunches::Many => None,
        },
        confinement.enforcement != confine::Enforcement::Strict,
    );
    #[cfg(not(target_os = "linux"))]
    let _ = expected;
}

/// [`Shared::cancel_grace`] before any [`Running::cancel_within`].
pub(crate) const NO_CANCEL_GRACE: u64 = u64::MAX;

/// The handle shared by every clone of [`Running`] and the driver task.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) pid: u32,
    pub(crate) cancel: Notify,
    pub(crate) cancelled: AtomicBool,
    /// The shortest grace a [`Running::cancel_within`] asked for, in
    /// microseconds ([`NO_CANCEL_GRACE`] until one did).
    pub(crate) cancel_grace: AtomicU64,
    pub(crate) done: watch::Sender<Option<Arc<Evidence>>>,
    /// Bytes captured so far on stdout and stderr (after redaction), for
    /// progress reports; the evidence holds the final counts.
    pub(crate) captured: [std::sync::atomic::AtomicU64; 2],
    /// The session's side, when launched as one.
    pub(crate) session: Option<Arc<super::session::SessionShared>>,
}

/// A launched process. Cheap to clone; every clone sees the same
/// settlement.
///
/// The process is driven by a task spawned on the runtime that launched it:
/// dropping every `Running` (or the future of [`run`]) does **not** stop
/// the timeout, the escalation or the reaping; the process still settles.
#[derive(Clone, Debug)]
pub struct Running {
    shared: Arc<Shared>,
}

impl Running {
    /// The root's pid.
    pub fn pid(&self) -> u32 {
        self.shared.pid
    }

    /// The id of the process group the root leads (equal to its pid on
    /// POSIX).
    pub fn pgid(&self) -> u32 {
        self.shared.pid
    }

    /// Asks the driver to stop the process: `SIGTERM` to the group, the
    /// grace, then `SIGKILL`, exactly as at the timeout. Idempotent; a
    /// no-op once settled. Returns at once; await [`Running::settled`].
    pub fn cancel(&self) {
        if !self.shared.cancelled.swap(true, Ordering::SeqCst) {
            // `notify_one` stores a permit if the driver is not waiting
            // right now, so a cancel is never lost.
            self.shared.cancel.notify_one();
        }
    }

    /// [`Running::cancel`] with a grace of at most `grace` between
    /// `SIGTERM` and `SIGKILL` (the invocation's own grace if that is
    /// shorter), for a host that is shutting down and cannot wait the full
    /// grace. A ladder already climbing (a timeout's, an earlier cancel's)
    /// is shortened too: its `SIGKILL` comes at most `grace` after its
    /// `SIGTERM`. The shortest grace asked for wins; a no-op once settled.
    /// Returns at once; await [`Running::settled`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn stop(running: custodian::process::Running) {
    /// use std::time::Duration;
    /// running.cancel_within(Duration::from_millis(500));
    /// let evidence = running.settled().await; // KILLed 0.5 s after the TERM at most
    /// # }
    /// ```
    pub fn cancel_within(&self, grace: Duration) {
        let us = u64::try_from(grace.as_micros())
            .unwrap_or(u64::MAX)
            .min(NO_CANCEL_GRACE - 1);
        self.shared.cancel_grace.fetch_min(us, Ordering::SeqCst);
        self.shared.cancelled.store(true, Ordering::SeqCst);
        // Every call wakes the driver (a permit is stored if it is busy),
        // so a grace shortened after a plain cancel is seen too.
        self.shared.cancel.notify_one();
    }

    /// Waits for settlement and returns the evidence. Every caller, early
    /// or late, receives the same evidence.
    pub async fn settled(&self) -> Arc<Evidence> {
        let mut rx = self.shared.done.subscribe();
        loop {
            if let Some(ev) = rx.borrow_and_update().clone() {
                return ev;
            }
            // The sender lives in `shared`, which we hold: `changed` cannot
            // fail while we wait.
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// The evidence if the process has settled.
    pub fn try_settled(&self) -> Option<Arc<Evidence>> {
        self.shared.done.borrow().clone()
    }

    /// Bytes of stdout and stderr captured so far, counted after secret
    /// redaction like the evidence's `bytes_read` (so they reveal no
    /// secret's length). For progress reports while the process runs.
    ///
    /// # Caveats
    ///
    /// A few bytes held back by the redactor (a possible secret prefix) are
    /// counted only once it decides; the evidence has the final counts.
    pub fn bytes_captured(&self) -> (u64, u64) {
        (
            self.shared.captured[0].load(Ordering::Relaxed),
            self.shared.captured[1].load(Ordering::Relaxed),
        )
    }
}

/// Launches `invocation` in `options.workspace`.
///
/// The executable is resolved against the child's effective `PATH` (the
/// baseline's, or the overlay's if it sets one); the child gets `stdin`
/// from `/dev/null`, separate `stdout`/`stderr` pipes, a cleared
/// environment plus baseline plus overlay, and leads a new process group.
/// No shell is involved and argv is passed as given.
///
/// Must be called from within a tokio runtime (with the `time`, `io` and
/// `process` drivers enabled); the driver task is spawned on it.
///
/// # Errors
///
/// A [`ProcessError`] if the environment cannot be built, the executable
/// is not found or not executable, the cwd is not a directory, an explicit
/// containment is unavailable
/// ([`ProcessError::ContainmentUnavailable`]), or the spawn fails. A non-zero exit or a timeout is not an error: it is in the
/// [`Evidence`].
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use custodian::process::evidence::ProcessStatus;
/// use custodian::process::{Invocation, InvocationSpec, LaunchOptions, launch};
///
/// let workspace = tempfile::tempdir()?; // the base of the child's cwd
/// let inv = Invocation::validate(InvocationSpec::new("sleep").with_args(["30"]))?;
/// let running = launch(inv, &LaunchOptions::new(workspace.path()))?;
/// running.cancel(); // TERM to the group, the grace, then KILL
/// let evidence = running.settled().await;
/// assert_eq!(evidence.status, ProcessStatus::Cancelled);
/// println!("{}", evidence.to_json());
/// # Ok(()) }
/// ```
pub fn launch(invocation: Invocation, options: &LaunchOptions) -> Result<Running, ProcessError> {
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| ProcessError::NoRuntime)?;
    let env = ChildEnv::build(&options.baseline, invocation.env(), &*options.secrets)?;
    let cwd_rel = invocation
        .cwd()
        .map(|c| c.as_str().to_owned())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| ".".to_owned());
    let cwd = match invocation.cwd() {
        Some(c) => c.under(&options.workspace),
        None => options.workspace.clone(),
    };
    let secrets = env.secrets();
    check_cwd(&cwd, &secrets.redact_str(&cwd_rel))?;
    // Every message names the executable as the caller gave it, with
    // secrets redacted like argv in the evidence.
    let given = secrets.redact_str(invocation.executable());
    let resolved = resolve_executable(invocation.executable(), env.path(), &cwd, |p| {
        is_executable_file(p)
    })
    .map_err(|e| match e {
        ResolveError::NotExecutable { path } => unusable(&given, &path),
        _ => ProcessError::NotFound {
            name: given.clone(),
        },
    })?;
    let mut confine = prepare_confinement(
        invocation.confinement(),
        &options.workspace,
        &cwd,
        &resolved,
        env.get("HOME").map(Path::new),
    )?;
    // Isolated with the network off: the request's namespace, if it has one
    // (`allow` keeps one of its own: its proxy port is bound inside).
    let shares_net = |c: &crate::confine::build::Prepared| {
        c.view()
            .is_some_and(|v| v.new_net && v.proxy_port.is_none())
    };
    // The request's first such launch makes its cgroup before it takes the
    // namespace, which may still be in the making (`spawn::netns`): the
    // cgroup's `mkdir`s then run while it is made instead of after. No
    // sandbox can be prepared for a first launch, so this is the cgroup
    // the launch would have selected below.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    let early_selected = match (&options.network, confine.as_ref()) {
        (Some(shared), Some(c)) if shares_net(c) && !shared.is_made() => Some(containment::select(
            options.containment,
            options.cgroup_parent.as_deref(),
        )?),
        _ => None,
    };
    if let (Some(shared), Some(c)) = (&options.network, confine.as_mut()) {
        if shares_net(c) {
            c.set_shared_net(shared.get());
        }
    }
    // The background work an isolated launch sets off (the next network
    // namespace made, the next sandbox cloned) keeps off this CPU
    // (`spawn::Aside`).
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    if confine.as_ref().is_some_and(|c| c.view().is_some()) {
        super::spawn::note_launcher();
    }
    // Outside a request, while a keeper lives: the network namespace made
    // for this launch, with the sandbox prepared in it, if there is one.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    let standalone = options.network.is_none()
        && options.cgroup_parent.is_none()
        && confine.as_ref().is_some_and(shares_net)
        && may_prepare(options)
        && super::spawn::prepared_on()
        && crate::contain::keeper_lives();
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    if let (true, Some(c)) = (standalone, confine.as_mut()) {
        if let Some(net) = take_standalone() {
            c.set_shared_net(Some(net));
        }
    }
    // A sandbox prepared for this launch (`spawn`, *A prepared sandbox*)
    // comes with the cgroup it waits in: the launch's, under the cgroup
    // tier. The next launch's is prepared once this one runs.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    let (prepared_cgroup, next) = prepare_spares(options, confine.as_ref(), standalone);
    // Last, so that no cgroup is created for an invocation refused above.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    let selected = match (early_selected, prepared_cgroup) {
        (Some(selected), _) => selected,
        (None, Some(cg)) => containment::Selected::in_cgroup(options.containment, cg),
        (None, None) => containment::select(options.containment, options.cgroup_parent.as_deref())?,
    };
    #[cfg(all(target_os = "linux", not(target_arch = "x86_64")))]
    let selected = containment::select(options.containment, options.cgroup_parent.as_deref())?;
    #[cfg(not(target_os = "linux"))]
    let selected = containment::select(options.containment)?;
    let bare = !invocation.executable().contains('/');
    let network = match &confine {
        #[cfg(target_os = "linux")]
        Some(c) if c.view().is_some_and(|v| v.proxy_port.is_some()) => {
            let allow = invocation
                .confinement()
                .allow_list()
                .map_err(|e| ProcessError::Confinement(e.into()))?;
            let proxy = match &options.proxy {
                Some(p) => p.clone(),
                None => NetworkProxy::shared().map_err(|e| {
                    ProcessError::Confinement(ConfineError::Build {
                        step: "network_proxy",
                        message: e.to_string(),
                    })
                })?,
            };
            Some((proxy, allow))
        }
        _ => None,
    };
    let spawn_err = |e: rustix::io::Errno| ProcessError::Spawn {
        path: PathBuf::from(&given),
        source: e.into(),
    };
    // A session: a stdin pipe, or a pseudo-terminal for all three.
    let mut terminal = None;
    let session = match options.session {
        Some(opts) if opts.terminal.is_some() => {
            let pty = open_terminal(opts.terminal.unwrap_or_default()).map_err(spawn_err)?;
            let shared = Arc::new(super::session::SessionShared::new(
                opts,
                options.record.clone(),
            ));
            let reader = {
                let _guard = runtime.enter();
                tokio::net::unix::pipe::Receiver::from_owned_fd_unchecked(pty.reader).map_err(
                    |source| ProcessError::Spawn {
                        path: PathBuf::from(&given),
                        source,
                    },
                )?
            };
            shared.set_terminal(pty.master);
            terminal = Some((pty.slave, Box::new(reader) as driver::Reader));
            Some((None, Some(pty.writer), shared))
        }
        Some(opts) if opts.stdin => {
            let (read, write) =
                rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(spawn_err)?;
            let shared = Arc::new(super::session::SessionShared::new(
                opts,
                options.record.clone(),
            ));
            Some((Some(read), Some(write), shared))
        }
        // A streamed run: its output is kept for readers, stdin is
        // `/dev/null` as for any run.
        Some(opts) => Some((
            None,
            None,
            Arc::new(super::session::SessionShared::new(
                opts,
                options.record.clone(),
            )),
        )),
        None => None,
    };
    let (stdin, writer, shared) = match session {
        Some((r, w, s)) => (r, w, Some(s)),
        None => (None, None, None),
    };
    let (slave, master_reader) = terminal.unzip();
    // The next launch's sandbox is queued before this one starts: its
    // clone and view are composed while this launch's program runs.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    match next {
        Some(Next::Standalone) => {
            if let Some(c) = confine.as_ref() {
                prepare_standalone(c);
            }
        }
        Some(Next::Session(shared, plan)) if super::spawn::slot_free(&shared.spare) => {
            prepare_next_request(options, &shared, plan);
        }
        Some(Next::Request(shared, plan)) if super::spawn::slot_free(&shared.spare) => {
            // In a cgroup made for the next launch; in none where none can
            // be made (it then runs in the pid-namespace tier, as its
            // launch would: a launch in a cgroup does not take it).
            let cgroup = match containment::cgroup(options.cgroup_parent.as_deref()) {
                Ok(containment::Plan::Cgroup(cgroup)) => Some(cgroup),
                _ => None,
            };
            super::spawn::prepare_next(&shared, plan, cgroup);
        }
        _ => {}
    }
    let running = driver::spawn(
        &runtime,
        invocation,
        env,
        cwd,
        resolved.clone(),
        selected,
        confine,
        network,
        driver::Stdin {
            read: stdin.as_ref().map(std::os::fd::AsFd::as_fd),
            session: shared.clone(),
            terminal: slave
                .as_ref()
                .map(std::os::fd::AsFd::as_fd)
                .zip(master_reader),
        },
    )
    .map_err(|e| match e {
        ProcessError::Spawn { source, .. } => classify_spawn(&given, bare, &resolved, source),
        other => other,
    })?;
    // The child has its copy of the read end; ours must go, or a write
    // after the process closed stdin would block instead of failing. The
    // same for a terminal's slave: the master reads end-of-file (EIO) only
    // once no one holds it.
    drop((stdin, slave));
    if let (Some(w), Some(shared)) = (writer, shared) {
        let _guard = runtime.enter();
        let sender = if shared.options().terminal.is_some() {
            tokio::net::unix::pipe::Sender::from_owned_fd_unchecked(w)
        } else {
            tokio::net::unix::pipe::Sender::from_owned_fd(w)
        };
        match sender {
            Ok(sender) => super::session::attach(&running, &shared, sender),
            Err(e) => {
                // Registering the pipe failed: the session has no stdin.
                tracing::warn!(error = %e, "a session's stdin pipe could not be registered");
            }
        }
    }
    Ok(running)
}

/// The prepared-sandbox side of a launch (`spawn`, *A prepared
/// sandbox*), isolated with the network off, under the cgroup tier or
/// `auto`, not in a terminal: the sandbox prepared for it if one fits its
/// view (moved into `confine`, with its cgroup returned for the launch),
/// and what to prepare the next launch's from, queued before this one
/// starts. In a request's network namespace, from the request's second
/// launch on (most requests launch once); outside a request, while a
/// [`SpareKeeper`](crate::contain::SpareKeeper) lives (`standalone`).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn prepare_spares(
    options: &LaunchOptions,
    confine: Option<&crate::confine::build::Prepared>,
    standalone: bool,
) -> (Option<crate::contain::Cgroup>, Option<Next>) {
    let Some(c) = confine else {
        return (None, None);
    };
    let Some(view) = c.view() else {
        return (None, None);
    };
    if !may_prepare(options) {
        return (None, None);
    }
    let parent = match options
        .cgroup_parent
        .as_deref()
        .map(crate::contain::Cgroup::id)
    {
        None => 0,
        Some(Ok(id)) => id,
        Some(Err(_)) => return (None, None),
    };
    let shared = c.shared_arc();
    let mut cgroup = None;
    let mut taken = false;
    if let Some(shared) = &shared {
        if let Some(mut spare) =
            super::spawn::take_prepared(&shared.spare, view, c.program(), parent)
        {
            cgroup = spare.take_cgroup();
            taken = true;
            *c.spare().lock().unwrap_or_else(|e| e.into_inner()) = Some(spare);
        }
    }
    if standalone {
        return (cgroup, Some(Next::Standalone));
    }
    let Some(shared) = shared else {
        return (None, None);
    };
    let Some(plan) = super::spawn::SparePlan::of(view, c.program(), parent, shared.user.is_some())
    else {
        return (cgroup, None);
    };
    let before = shared
        .spare
        .last_parent
        .swap(parent, std::sync::atomic::Ordering::Relaxed);
    // A session's request launching for the first time (in its own
    // cgroup): the session's next request will most likely launch too.
    let session = options
        .network
        .as_deref()
        .is_some_and(SharedNetwork::is_session);
    if session && parent != 0 && before != parent {
        return (cgroup, Some(Next::Session(shared, plan)));
    }
    let again = taken || before == parent;
    (cgroup, again.then_some(Next::Request(shared, plan)))
}

/// Queues the sandbox of a session's next request's first launch
/// ([`Next::Session`]): beneath the request cgroup reserved for that
/// request (made now if none is), in a process cgroup of its own. Nothing
/// is prepared where no cgroup can be made: that launch would not take it.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn prepare_next_request(
    options: &LaunchOptions,
    shared: &crate::confine::build::SharedNet,
    plan: super::spawn::SparePlan,
) {
    let Some(reserved) = options.network.as_deref().and_then(SharedNetwork::reserved) else {
        return;
    };
    let Ok(id) = reserved.id() else {
        return;
    };
    let Ok(containment::Plan::Cgroup(cgroup)) = containment::cgroup(Some(&reserved)) else {
        return;
    };
    super::spawn::prepare_next(shared, plan.beneath(id), Some(cgroup));
}

/// Whether a launch with `options` may run in a prepared sandbox: under
/// the cgroup tier or `auto`, not in a terminal.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn may_prepare(options: &LaunchOptions) -> bool {
    matches!(options.containment, Containment::Auto | Containment::Cgroup)
        && options.session.is_none_or(|s| s.terminal.is_none())
}

/// Where the next launch's sandbox is prepared ([`prepare_spares`]).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
enum Next {
    /// In the request's network namespace, for its next launch.
    Request(
        Arc<crate::confine::build::SharedNet>,
        super::spawn::SparePlan,
    ),
    /// In the session's network namespace, beneath the request cgroup
    /// reserved for the session's next request, for that request's first
    /// launch (the plan's parent is set once the cgroup is reserved).
    Session(
        Arc<crate::confine::build::SharedNet>,
        super::spawn::SparePlan,
    ),
    /// In a network namespace of its own, for the next launch outside a
    /// request ([`STANDALONE`]).
    Standalone,
}

/// The sandbox prepared for the next isolated launch outside a request,
/// in the slot of a network namespace made for it alone: the launch that
/// takes it runs in that namespace (whether or not the sandbox fits its
/// view), and no other launch does. Kept while a
/// [`SpareKeeper`](crate::contain::SpareKeeper) lives; the last keeper's
/// drop kills it ([`discard_standalone`]).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
static STANDALONE: std::sync::Mutex<Option<Arc<crate::confine::build::SharedNet>>> =
    std::sync::Mutex::new(None);

/// Takes the network namespace (and the sandbox in its slot) prepared for
/// this launch outside a request, if there is one.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn take_standalone() -> Option<Arc<crate::confine::build::SharedNet>> {
    STANDALONE.lock().unwrap_or_else(|e| e.into_inner()).take()
}

/// The pid of the init of the sandbox prepared for the next launch
/// outside a request, once its view is composed (for the tests).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub(crate) fn standalone_init() -> Option<u32> {
    let net = STANDALONE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()?;
    super::spawn::waiting_init(&net.spare)
}

/// Kills (and reaps) the sandbox prepared for the next launch outside a
/// request: no keeper is left.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn discard_standalone() {
    drop(take_standalone());
}

/// Prepares the sandbox of the next launch outside a request like
/// `confine`'s ([`STANDALONE`]): in a network namespace made for it
/// ahead (only where this process keeps such namespaces ready: as root,
/// `spawn::netns`; making one here would cost the launch more than the
/// sandbox saves it), its init cloned into a cgroup made for that launch
/// (none where none can be made: the pid-namespace tier).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn prepare_standalone(confine: &crate::confine::build::Prepared) {
    let Some(view) = confine.view() else {
        return;
    };
    let Some(plan) = super::spawn::SparePlan::of(view, confine.program(), 0, false) else {
        return;
    };
    crate::contain::on_last_keeper(discard_standalone);
    let Some(net) = super::spawn::spare_network_namespace().map(Arc::new) else {
        return;
    };
    let cgroup = match containment::cgroup(None) {
        Ok(containment::Plan::Cgroup(cgroup)) => Some(cgroup),
        _ => None,
    };
    super::spawn::prepare_next(&net, plan, cgroup);
    if !super::spawn::slot_free(&net.spare) {
        store_standalone(net, crate::contain::keeper_lives);
    }
}

/// Stores `net` (a sandbox queued in its slot) as [`STANDALONE`], unless
/// `keeper_lives` says, once it is stored, that no keeper is left: a last
/// keeper dropped since the launch looked finds it there (its hook takes
/// it), or the count is 0 here and it goes now.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn store_standalone(net: Arc<crate::confine::build::SharedNet>, keeper_lives: fn() -> bool) {
    // An earlier one not taken (a concurrent launch's) goes.
    let earlier = STANDALONE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .replace(net);
    drop(earlier);
    if !keeper_lives() {
        discard_standalone();
    }
}

/// A session's pseudo-terminal: the master (kept for resizes), a reader
/// and a writer of it (non-blocking, one open file), and the slave the
/// child gets as its stdin, stdout, stderr and controlling terminal.
struct Terminal {
    master: std::os::fd::OwnedFd,
    reader: std::os::fd::OwnedFd,
    writer: std::os::fd::OwnedFd,
    slave: std::os::fd::OwnedFd,
}

/// Opens a pseudo-terminal of `size` (`/dev/ptmx`, the slave through
/// `TIOCGPTPEER`: no path is looked up for it). Neither end becomes this
/// process's controlling terminal (`O_NOCTTY`).
fn open_terminal(size: super::session::WindowSize) -> rustix::io::Result<Terminal> {
    use rustix::pty::OpenptFlags;
    let master =
        rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    rustix::pty::unlockpt(&master)?;
    super::session::set_window(&master, size)?;
    let slave = rustix::pty::ioctl_tiocgptpeer(
        &master,
        OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC,
    )?;
    // One open file: the reader and the writer are registered with the
    // reactor, which needs it non-blocking.
    rustix::io::ioctl_fionbio(&master, true)?;
    let dup = |fd: &std::os::fd::OwnedFd| rustix::io::fcntl_dupfd_cloexec(fd, 3);
    Ok(Terminal {
        reader: dup(&master)?,
        writer: dup(&master)?,
        master,
        slave,
    })
}

/// Plans `spec` against the running kernel and builds it (see
/// [`crate::confine`]); `None` when it confines nothing. Every confined
/// launch is isolated (new namespaces, no capabilities, the composed view)
/// where this host allows it; where it does not, a strict spec is refused
/// (`IsolationUnavailable`) and a best-effort one runs Landlock-only with
/// `isolation` listed as not enforced.
fn prepare_confinement(
    spec: &Confinement,
    workspace: &Path,
    cwd: &Path,
    program: &Path,
    home: Option<&Path>,
) -> Result<Option<Prepared>, ProcessError> {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        use crate::confine::{Enforcement, Feature, NotEnforced};
        if spec.is_none() {
            return Ok(None);
        }
        let abi = confine::landlock_abi();
        // A strict launch does not wait for the isolation probe: it plans
        // isolated unless the probe has already said no, and where this
        // host refuses isolation its own clone fails and is answered as
        // the probe would have answered (`cgroup_root::start`); with the
        // network off it learns of a refused network namespace from its
        // clone too (`network_namespace_unavailable`). A best-effort one
        // must know now, to plan without isolation.
        let isolation = if spec.enforcement == Enforcement::Strict {
            match super::spawn::isolation_known() {
                Some(Err(_)) => Err("user_namespaces_unavailable"),
                Some(Ok(())) | None => Ok(()),
            }
        } else {
            match super::spawn::isolation_supported() {
                Err(_) => Err("user_namespaces_unavailable"),
                Ok(())
                    if spec.network != confine::Network::On
                        && super::spawn::net_namespace_supported().is_err() =>
                {
                    Err("network_namespace_unavailable")
                }
                Ok(()) => Ok(()),
            }
        };
        let plan = match isolation {
            Ok(()) => confine::plan_isolated(spec, abi),
            Err(reason) if spec.enforcement == Enforcement::Strict => {
                return Err(ConfineError::IsolationUnavailable { reason }.into());
            }
            Err(reason) => confine::plan(spec, abi).map(|p| {
                p.map(|mut p| {
                    p.report.not_enforced.push(NotEnforced {
                        feature: Feature::Isolation,
                        needs_abi: 0,
                        reason: Some(reason.into()),
                    });
                    if spec.network == confine::Network::Allow {
                        p.report.not_enforced.push(NotEnforced {
                            feature: Feature::NetworkAllowList,
                            needs_abi: 0,
                            reason: Some(reason.into()),
                        });
                    }
                    p
                })
            }),
        };
        let Some(plan) = plan.map_err(ConfineError::from)? else {
            return Ok(None);
        };
        Ok(Some(confine::build::prepare(
            spec, plan, workspace, cwd, program, home,
        )?))
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    {
        let _ = (workspace, cwd, program, home);
        if confine::plan(spec, confine::landlock_abi())
            .map_err(ConfineError::from)?
            .is_none()
        {
            return Ok(None);
        }
        Err(ConfineError::SpawnerUnavailable {
            reason: "not_x86_64_linux",
        }
        .into())
    }
}

/// A path that did not pass the executable check: missing (`not_found`)
/// or present but not executable (`not_executable`).
fn unusable(given: &str, resolved: &Path) -> ProcessError {
    match std::fs::metadata(resolved) {
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            ProcessError::PathNotFound {
                path: PathBuf::from(given),
            }
        }
        _ => ProcessError::NotExecutable {
            path: PathBuf::from(given),
        },
    }
}

/// Classifies a failed spawn of `resolved` (which passed the executable
/// check a moment earlier): the kernel refusing the file or its
/// interpreter is `not_executable`; a file gone meanwhile is `not_found`.
fn classify_spawn(given: &str, bare: bool, resolved: &Path, source: io::Error) -> ProcessError {
    let path = PathBuf::from(given);
    #[cfg(unix)]
    {
        use rustix::io::Errno;
        let refused = [
            Errno::NOEXEC,
            Errno::ACCESS,
            Errno::ISDIR,
            Errno::TXTBSY,
            Errno::LOOP,
        ];
        if refused.contains(&Errno::from_io_error(&source).unwrap_or(Errno::IO)) {
            return ProcessError::NotExecutable { path };
        }
    }
    match source.kind() {
        // ENOENT from exec with the file present: a `#!` interpreter that
        // does not exist.
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => {
            match (std::fs::metadata(resolved).is_ok(), bare) {
                (true, _) => ProcessError::NotExecutable { path },
                (false, true) => ProcessError::NotFound {
                    name: given.to_owned(),
                },
                (false, false) => ProcessError::PathNotFound { path },
            }
        }
        _ => ProcessError::Spawn { path, source },
    }
}

fn check_cwd(cwd: &Path, rel: &str) -> Result<(), ProcessError> {
    let bad = |kind| ProcessError::BadCwd {
        cwd: rel.to_owned(),
        kind,
    };
    match std::fs::metadata(cwd) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(bad(io::ErrorKind::NotADirectory)),
        Err(e) => Err(bad(e.kind())),
    }
}

/// Launches `invocation` and waits for its evidence.
///
/// Dropping this future does not stop the process from settling: the
/// driver task keeps escalating and reaps the root.
///
/// # Errors
///
/// As [`launch`].
pub async fn run(
    invocation: Invocation,
    options: &LaunchOptions,
) -> Result<Arc<Evidence>, ProcessError> {
    Ok(launch(invocation, options)?.settled().await)
}

impl Running {
    pub(crate) fn from_shared(shared: Arc<Shared>) -> Self {
        Running { shared }
    }

    /// Whether the process was launched as a session
    /// ([`crate::process::session`]).
    pub fn is_session(&self) -> bool {
        self.shared
            .session
            .as_ref()
            .is_some_and(|s| s.options().stdin)
    }

    /// The session's side, when launched as one.
    pub(crate) fn session_shared(&self) -> Option<Arc<super::session::SessionShared>> {
        self.shared.session.clone()
    }
}

#[cfg(all(test, target_os = "linux", target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// A namespace whose slot holds something (what stands for a queued
    /// sandbox here), and whether it is still stored.
    fn queued() -> Arc<crate::confine::build::SharedNet> {
        let fd = std::fs::File::open("/proc/self/ns/net").unwrap();
        let net = crate::confine::build::SharedNet::new(fd.into(), None);
        *net.spare.held.lock().unwrap() = Some(Box::new(()));
        Arc::new(net)
    }

    /// A sandbox prepared while the last keeper went is not kept: the
    /// count is read after it is stored, and 0 takes it away again.
    #[test]
    fn a_standalone_sandbox_stored_after_the_last_keeper_went_goes() {
        let net = queued();
        store_standalone(Arc::clone(&net), || false);
        assert!(take_standalone().is_none());
        assert_eq!(Arc::strong_count(&net), 1, "still held");
        store_standalone(Arc::clone(&net), || true);
        let kept = take_standalone().expect("kept while a keeper lives");
        assert!(Arc::ptr_eq(&kept, &net));
    }
}

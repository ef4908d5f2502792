//! The embedder's facade: one [`Runtime`], one [`Request`] per request id,
//! owning everything the request creates, from its first file to its
//! cleanup.
//!
//! # Theory of operation
//!
//! A [`Runtime`] is built from one [`RuntimeConfig`]: the workspace root
//! (held by descriptor, the base of every process's cwd, never passed
//! twice), the spill store, the run policy, the containment asked of every
//! process, the confinement of every process that names none of its own,
//! and the default per-request [`RequestLimits`]. It owns a
//! [`Workspace`], a [`SpillService`] and a [`Coordinator`] whose hooks are
//! the runtime's own table of requests.
//!
//! [`Runtime::start`] begins a request and returns its two capabilities:
//!
//! - the **caller side**, [`Request`]: cancel it, wait for its
//!   [`Completion`]. Cheap to clone; dropping every clone before the request
//!   ended is a caller disconnect (the executor is stopped, the workspace
//!   cleaned, nothing written), whatever the executor still holds;
//! - the **executor side**, [`Executor`] ([`Request::executor`]): open the
//!   request's job namespace, write artifacts, launch governed processes,
//!   spill results, and report success or failure. It never keeps the
//!   request alive.
//!
//! Every process an executor launches runs under the runtime's containment
//! (in the request's cgroup where one can be made), passes the run policy
//! first, gets its secret references resolved asynchronously before the
//! launch, and is tracked in the request's process table. When the request
//! ends — success, failure, timeout, cancel, disconnect — the coordinator
//! cancels that table (the process groups get `TERM → grace → KILL` and are
//! awaited, then the request cgroup is killed), runs the workspace cleanup
//! exactly once, and publishes one [`Completion`] carrying the merged
//! result, the cleanup detail (status, counts, safe code), each process's
//! verdict and each launch the policy refused (its codes only); its JSON
//! form is `docs/schemas/completion.v1.json`, its clauses
//! `docs/contracts/runtime.md`.
//!
//! Tracing: each request has a `request` span (field `request_id`); each
//! process a `process` span (field `pid`) beneath it. Events are emitted at
//! launch, settlement, cleanup start and cleanup result, with safe fields
//! only (codes, counts, pids, statuses; never an argv, an environment key
//! or value, or a path).
//!
//! # Examples
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use custodian::prelude::*;
//!
//! let runtime = Runtime::open(RuntimeConfig::new("/srv/agent/workspace"))?;
//! let request = runtime.start(RequestId::new("req-1")?)?;
//! let executor = request.executor();
//! tokio::spawn(async move {
//!     executor.open_workspace().await?;
//!     executor.write_artifact("notes.txt", b"hello").await?;
//!     let evidence = executor
//!         .run(Invocation::validate(InvocationSpec::new("true"))?)
//!         .await?;
//!     if evidence.exit_code == Some(0) {
//!         executor.succeed();
//!     }
//!     Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
//! });
//! let completion = request.finished().await;
//! println!("{:?} {:?}", completion.result.status(), completion.cleanup);
//! # Ok(()) }
//! ```

mod hooks;
mod record;
mod request;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::confine::{Confinement, InvalidConfinement};
use crate::contain::Containment;
use crate::id::RequestId;
use crate::policy::{PolicyConfig, Provenance, Registry};
use crate::process::env::{AsyncSecretResolver, Baseline, Blocking, EnvError, NoSecrets};
use crate::process::governed::ApprovalRequired;
use crate::process::{NetworkProxy, ProcessError};
use crate::request::{Acknowledge, Coordinator, RequestLimits};
use crate::spill::{Locator, ServiceError, ServiceOptions, SpillConfig, SpillService, StoreError};
use crate::workspace::{CleanupResult, Workspace, WorkspaceConfig, WorkspaceError};

pub use crate::request::{Completion, ProcessVerdict};
pub use record::SessionRecord;
pub use request::{Executor, Request};

use hooks::Hooks;

/// The policy every process launched through a [`Runtime`] (or served by a
/// [`WorkspaceNode`](crate::wire::WorkspaceNode)) must pass as
/// `process.run`; without one, every launch is allowed. It holds no
/// approvals beyond the file's `policy.overrides`: a caller cannot approve
/// for it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RunPolicy {
    /// The validated policy file.
    pub config: PolicyConfig,
    /// The provenance of the calls (`Untrusted` fails closed).
    pub provenance: Provenance,
}

impl RunPolicy {
    /// Enforces `config`, the calls' provenance untrusted (as the command
    /// line's `--provenance` default: fail closed).
    pub fn new(config: PolicyConfig) -> Self {
        RunPolicy {
            config,
            provenance: Provenance::Untrusted,
        }
    }

    /// Replaces the calls' provenance.
    #[must_use]
    pub fn with_provenance(mut self, provenance: Provenance) -> Self {
        self.provenance = provenance;
        self
    }
}

/// Everything a [`Runtime`] is built from.
///
/// Every configuration the facade takes is built one way: a constructor
/// ([`RuntimeConfig::new`], [`RequestLimits::new`], [`RunPolicy::new`],
/// [`SpillConfig::default`], [`WorkspaceConfig::default`]), then a `with_*`
/// method for each setting that differs.
///
/// ```
/// use std::time::Duration;
/// use custodian::prelude::*;
///
/// let config = RuntimeConfig::new("/srv/agent/workspace")
///     .with_workspace(WorkspaceConfig::default().with_cleanup_bound(Duration::from_secs(5)))
///     .with_spill(SpillConfig::default().with_root("/srv/agent/spill"))
///     .with_limits(RequestLimits::new().with_request_timeout(Duration::from_secs(60)));
/// assert_eq!(config.limits.request_timeout, Duration::from_secs(60));
/// ```
///
/// None is written as a struct literal outside this crate:
///
/// ```compile_fail
/// let limits = custodian::request::RequestLimits {
///     request_timeout: std::time::Duration::from_secs(1),
///     ..Default::default()
/// };
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct RuntimeConfig {
    /// The workspace root: the base of every request's job namespace and of
    /// every process's cwd.
    pub workspace_root: PathBuf,
    /// How the workspace is opened (internal namespace name, cleanup bound).
    pub workspace: WorkspaceConfig,
    /// The spill store; `None` disables [`Executor::spill`].
    pub spill: Option<SpillConfig>,
    /// The run policy; `None` allows every launch.
    pub policy: Option<RunPolicy>,
    /// How each process and its descendants are contained.
    pub containment: Containment,
    /// What every process may touch while it runs, unless its invocation
    /// names a confinement of its own
    /// ([`InvocationSpec::confinement`](crate::process::InvocationSpec::confinement)
    /// is `Some`, [`Confinement::none`] included). Default: none.
    pub confinement: Confinement,
    /// The default limits of a request ([`Runtime::start_with`] overrides
    /// them per request).
    pub limits: RequestLimits,
    /// The children's baseline environment.
    pub baseline: Baseline,
    /// Resolves secret references in an invocation's overlay.
    pub secrets: Arc<dyn AsyncSecretResolver>,
    /// The filtering proxy of every network `allow` launch; `None`: the
    /// process-wide one ([`NetworkProxy::shared`], the system resolver).
    pub proxy: Option<NetworkProxy>,
    /// How many sessions ([`Executor::start`]) may run at once.
    pub sessions: SessionLimits,
    /// How much of a session's output is recorded whole, with a spill
    /// store (see [`SessionRecord`]).
    pub session_record: SessionRecord,
    /// Whether requests open job namespaces (the default). Without
    /// ([`RuntimeConfig::without_job_namespaces`]) the runtime only
    /// launches: it opens no workspace (nothing is created under
    /// `workspace_root`, no lock is taken), [`Executor::open_workspace`] is
    /// refused ([`RuntimeError::NoJobNamespaces`]), and a request ends
    /// once its processes are stopped, with no cleanup to run.
    pub job_namespaces: bool,
    /// The grace a request's stop gives its processes (`TERM`, this grace,
    /// `KILL`) when it is shorter than their own; `None`: their own
    /// ([`Tunables::grace`](crate::process::invocation::Tunables::grace)).
    pub stop_grace: Option<Duration>,
}

/// How many sessions ([`Executor::start`]) may run at once, per request and
/// in the whole runtime. A start past either bound is refused
/// ([`RuntimeError::TooManySessions`]); no running session is evicted to
/// make room (a session may be a server another call relies on: stopping
/// it is its owner's decision, or its idle timeout's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionLimits {
    /// Sessions one request may run at once. Default 16.
    pub per_request: usize,
    /// Sessions the runtime may run at once, all requests together.
    /// Default 64.
    pub per_runtime: usize,
}

impl SessionLimits {
    /// 16 per request, 64 in the runtime.
    pub const fn new() -> Self {
        SessionLimits {
            per_request: 16,
            per_runtime: 64,
        }
    }

    /// Replaces the per-request bound.
    #[must_use]
    pub const fn with_per_request(mut self, n: usize) -> Self {
        self.per_request = n;
        self
    }

    /// Replaces the runtime-wide bound.
    #[must_use]
    pub const fn with_per_runtime(mut self, n: usize) -> Self {
        self.per_runtime = n;
        self
    }
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self::new()
    }
}

impl RuntimeConfig {
    /// A configuration for the workspace at `workspace_root`: default
    /// workspace settings, no spill store, no policy, `auto` containment,
    /// no default confinement, default limits, the baseline taken from this
    /// process's environment, no secrets.
    pub fn new(workspace_root: impl Into<PathBuf>) -> Self {
        RuntimeConfig {
            workspace_root: workspace_root.into(),
            workspace: WorkspaceConfig::default(),
            spill: None,
            policy: None,
            containment: Containment::Auto,
            confinement: Confinement::none(),
            limits: RequestLimits::default(),
            baseline: Baseline::from_parent(),
            secrets: Arc::new(Blocking(Arc::new(NoSecrets))),
            proxy: None,
            sessions: SessionLimits::new(),
            session_record: SessionRecord::new(),
            job_namespaces: true,
            stop_grace: None,
        }
    }

    /// A runtime that only launches: its requests open no job namespace
    /// (see [`RuntimeConfig::job_namespaces`]). `workspace_root` stays the
    /// base of every process's cwd and the workspace a confinement names.
    /// For a one-shot caller such as `custodian run`, which must leave the
    /// directory it runs in as it found it.
    #[must_use]
    pub fn without_job_namespaces(mut self) -> Self {
        self.job_namespaces = false;
        self
    }

    /// Shortens the grace a request's stop gives its processes (see
    /// [`RuntimeConfig::stop_grace`]).
    #[must_use]
    pub fn with_stop_grace(mut self, grace: Duration) -> Self {
        self.stop_grace = Some(grace);
        self
    }

    /// Replaces how sessions' output is recorded: with a spill store, each
    /// stream of a session ([`Executor::start`]) is written, as it
    /// arrives, to a spilled result of its request (listed in the
    /// request's spills and its completion), up to `record.cap` bytes; the
    /// evidence's `recorded` names each one and says how much was dropped
    /// past the cap. Without a spill store nothing is recorded.
    #[must_use]
    pub fn with_session_record(mut self, record: SessionRecord) -> Self {
        self.session_record = record;
        self
    }

    /// Replaces the session bounds.
    #[must_use]
    pub fn with_session_limits(mut self, sessions: SessionLimits) -> Self {
        self.sessions = sessions;
        self
    }

    /// Serves every network `allow` launch of the runtime with `proxy`
    /// (e.g. one whose [`ProxyConfig`](crate::process::ProxyConfig) pins
    /// names to addresses).
    #[must_use]
    pub fn with_proxy(mut self, proxy: NetworkProxy) -> Self {
        self.proxy = Some(proxy);
        self
    }

    /// Replaces the workspace settings.
    #[must_use]
    pub fn with_workspace(mut self, workspace: WorkspaceConfig) -> Self {
        self.workspace = workspace;
        self
    }

    /// Enables the spill store.
    #[must_use]
    pub fn with_spill(mut self, spill: SpillConfig) -> Self {
        self.spill = Some(spill);
        self
    }

    /// Enforces `policy` on every launch.
    #[must_use]
    pub fn with_policy(mut self, policy: RunPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Replaces the containment.
    #[must_use]
    pub fn with_containment(mut self, containment: Containment) -> Self {
        self.containment = containment;
        self
    }

    /// Confines every process whose invocation names no confinement of its
    /// own; the policy decides on the confinement the process will run
    /// under.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use custodian::confine::Confinement;
    /// use custodian::prelude::*;
    ///
    /// let config = RuntimeConfig::new("/srv/agent/workspace")
    ///     .with_confinement(Confinement::workspace_write());
    /// let runtime = Runtime::open(config)?;
    /// let request = runtime.start(RequestId::new("req-1")?)?;
    /// let executor = request.executor();
    /// // Confined: writes only beneath the workspace root (and its TMPDIR).
    /// executor.run(Invocation::validate(InvocationSpec::new("make"))?).await?;
    /// // Explicitly unconfined, whatever the runtime's default.
    /// let spec = InvocationSpec::new("make").with_confinement(Confinement::none());
    /// executor.run(Invocation::validate(spec)?).await?;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn with_confinement(mut self, confinement: Confinement) -> Self {
        self.confinement = confinement;
        self
    }

    /// Replaces the default request limits.
    #[must_use]
    pub fn with_limits(mut self, limits: RequestLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Replaces the children's baseline environment.
    #[must_use]
    pub fn with_baseline(mut self, baseline: Baseline) -> Self {
        self.baseline = baseline;
        self
    }

    /// Replaces the secret resolver.
    #[must_use]
    pub fn with_secrets(mut self, secrets: Arc<dyn AsyncSecretResolver>) -> Self {
        self.secrets = secrets;
        self
    }
}

impl std::fmt::Debug for RuntimeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the baseline's values.
        f.debug_struct("RuntimeConfig")
            .field("workspace_root", &self.workspace_root)
            .field("workspace", &self.workspace)
            .field("spill", &self.spill.is_some())
            .field("policy", &self.policy.is_some())
            .field("containment", &self.containment)
            .field("confinement", &self.confinement)
            .field("limits", &self.limits)
            .field("job_namespaces", &self.job_namespaces)
            .field("stop_grace", &self.stop_grace)
            .finish_non_exhaustive()
    }
}

/// Why a runtime operation failed. Never carries an environment key or
/// value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The workspace refused (open, artifact, launch bookkeeping).
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    /// The launcher refused; nothing was started.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// A secret reference could not be resolved; nothing was started.
    #[error(transparent)]
    Env(#[from] EnvError),
    /// The spill store failed.
    #[error(transparent)]
    Spill(#[from] StoreError),
    /// The spill service could not be activated.
    #[error(transparent)]
    SpillService(#[from] ServiceError),
    /// [`RuntimeConfig::confinement`] breaks a lexical rule.
    #[error(transparent)]
    Confinement(#[from] InvalidConfinement),
    /// The runtime has no spill store ([`RuntimeConfig::spill`] is `None`).
    #[error("the runtime has no spill store")]
    SpillDisabled,
    /// A request with this id is still running in this runtime.
    #[error("request {request} is already running")]
    AlreadyRunning {
        /// The request.
        request: RequestId,
    },
    /// The request is finalizing (cancelled, timed out, disconnected or
    /// reported): nothing more may be opened or launched for it.
    #[error("request {request} is finalizing")]
    Finalizing {
        /// The request.
        request: RequestId,
    },
    /// The request completed: nothing more is recorded for it (a spill
    /// made after its completion listed its spills).
    #[error("request {request} has completed")]
    Completed {
        /// The request.
        request: RequestId,
    },
    /// The runtime opens no job namespaces
    /// ([`RuntimeConfig::without_job_namespaces`]).
    #[error("request {request}: this runtime opens no job namespaces")]
    NoJobNamespaces {
        /// The request.
        request: RequestId,
    },
    /// The request has no open workspace ([`Executor::open_workspace`]
    /// first).
    #[error("request {request} has no open workspace")]
    NoWorkspace {
        /// The request.
        request: RequestId,
    },
    /// The run policy denied the process; nothing was started.
    #[error("the run policy denied the process")]
    Denied(Box<crate::policy::Decision>),
    /// The run policy requires an approval; nothing was started.
    #[error("the process requires an approval")]
    ApprovalRequired(Box<ApprovalRequired>),
    /// Writing an artifact's contents failed.
    #[error("writing artifact failed: {0}")]
    Write(#[source] std::io::Error),
    /// A session start past a [`SessionLimits`] bound; nothing was started.
    #[error("request {request}: {limit} sessions already run {per}")]
    TooManySessions {
        /// The request.
        request: RequestId,
        /// The bound reached.
        limit: usize,
        /// Which bound: `in the request` or `in the runtime`.
        per: &'static str,
    },
}

impl From<crate::request::LaunchError> for RuntimeError {
    fn from(e: crate::request::LaunchError) -> Self {
        match e {
            crate::request::LaunchError::Workspace(e) => RuntimeError::Workspace(e),
            crate::request::LaunchError::Process(e) => RuntimeError::Process(e),
        }
    }
}

/// The embedder's entry point: one workspace, one spill store, one policy,
/// one coordinator, and the requests running in them. Cheap to clone;
/// every clone is the same runtime. See the [module docs](self).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use custodian::prelude::*;
///
/// let dir = tempfile::tempdir()?;
/// let runtime = Runtime::open(RuntimeConfig::new(dir.path()))?;
/// let request = runtime.start(RequestId::new("req-1")?)?;
/// let executor = request.executor();
/// executor.open_workspace().await?;
/// executor.write_artifact("out/result.json", b"{}").await?;
/// executor.succeed();
/// let completion = request.finished().await;
/// assert_eq!(completion.result.status(), RequestStatus::Succeeded);
/// assert_eq!(completion.cleanup.unwrap().counts.files_removed, 1);
/// runtime.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Runtime {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    hooks: Arc<Hooks>,
    coordinator: Coordinator<Hooks, Hooks, Acknowledge>,
    spill: Mutex<Option<SpillService>>,
    spill_store: Option<Arc<crate::spill::SpillStore>>,
    policy: Option<RunPolicy>,
    registry: Registry,
    launch: crate::process::LaunchOptions,
    /// Validated at open.
    confinement: Confinement,
    secrets: Arc<dyn AsyncSecretResolver>,
    sessions: SessionLimits,
    session_record: SessionRecord,
    /// Sessions running now, all requests together.
    live_sessions: Arc<std::sync::atomic::AtomicUsize>,
    /// The workspace's internal namespace's name (for [`Runtime::job_dir`]).
    internal_name: String,
}

impl Runtime {
    /// Opens the workspace at `config.workspace_root` (creating its internal
    /// namespace; not for a runtime without job namespaces,
    /// [`RuntimeConfig::without_job_namespaces`]) and activates the spill
    /// store if configured (its startup sweep runs in the background, the
    /// workspace root protected from it).
    ///
    /// Must be called within a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::Confinement`] if the default confinement breaks a
    /// lexical rule, [`RuntimeError::Workspace`] if the workspace cannot be
    /// opened safely, [`RuntimeError::SpillService`] if the spill store
    /// cannot.
    pub fn open(config: RuntimeConfig) -> Result<Self, RuntimeError> {
        config.confinement.validate()?;
        crate::spill::validate_session(&config.session_record.spill_session)
            .map_err(StoreError::from)?;
        // A confined default: the isolation's once-per-process work and
        // the spare network namespaces start now, beside the caller.
        crate::process::prepare_isolation(
            &config.confinement,
            crate::process::ExpectedLaunches::Many,
        );
        let workspace = if config.job_namespaces {
            Some(crate::request::open_workspace(
                &config.workspace_root,
                config.workspace.clone(),
            )?)
        } else {
            None
        };
        let spill = match &config.spill {
            Some(spill) => Some(SpillService::activate_with(
                spill,
                ServiceOptions {
                    protected: vec![config.workspace_root.clone()],
                    ..ServiceOptions::default()
                },
            )?),
            None => None,
        };
        let hooks = Arc::new(Hooks::new(workspace, config.stop_grace));
        let coordinator = Coordinator::new(
            Arc::clone(&hooks),
            Arc::clone(&hooks),
            Arc::new(Acknowledge),
            config.limits,
        );
        let mut launch = crate::process::LaunchOptions::new(config.workspace_root.clone())
            .with_containment(config.containment);
        launch.baseline = config.baseline.clone();
        launch.proxy = config.proxy.clone();
        Ok(Runtime {
            inner: Arc::new(Inner {
                hooks,
                coordinator,
                spill_store: spill.as_ref().map(|s| Arc::clone(s.store())),
                spill: Mutex::new(spill),
                policy: config.policy.clone(),
                registry: Registry::new(),
                launch,
                confinement: config.confinement.clone(),
                secrets: Arc::clone(&config.secrets),
                sessions: config.sessions,
                session_record: config.session_record.clone(),
                live_sessions: Arc::default(),
                internal_name: config.workspace.internal_name.clone(),
            }),
        })
    }

    /// Starts request `id` under the runtime's default limits; its
    /// deadlines are frozen now. Returns the caller's side; the executor's
    /// side is [`Request::executor`].
    ///
    /// # Errors
    ///
    /// [`RuntimeError::AlreadyRunning`] if a request with this id has not
    /// completed yet.
    ///
    /// # Panics
    ///
    /// Panics if called outside a tokio runtime.
    pub fn start(&self, id: RequestId) -> Result<Request, RuntimeError> {
        self.start_with(id, self.inner.coordinator_limits())
    }

    /// [`Runtime::start`] with this request's own `limits`.
    ///
    /// # Errors
    ///
    /// As [`Runtime::start`].
    ///
    /// # Panics
    ///
    /// Panics if called outside a tokio runtime.
    pub fn start_with(
        &self,
        id: RequestId,
        limits: RequestLimits,
    ) -> Result<Request, RuntimeError> {
        let entry = self.inner.hooks.insert(&id)?;
        let handle = self.inner.coordinator.start_with(id, limits);
        Ok(Request::new(handle, entry, Arc::clone(&self.inner)))
    }

    /// The workspace the requests' job namespaces live in; `None` for a
    /// runtime without job namespaces
    /// ([`RuntimeConfig::without_job_namespaces`]).
    pub fn workspace(&self) -> Option<&Workspace> {
        self.inner.hooks.workspace.as_ref()
    }

    /// Where request `id`'s job directory is while its workspace is open
    /// ([`Executor::open_workspace`] to its cleanup):
    /// `<workspace_root>/<internal name>/job/<id>`, built from
    /// [`RuntimeConfig::workspace_root`] as configured and
    /// [`WorkspaceConfig::internal_name`]. The artifacts an executor writes
    /// ([`Executor::write_artifact`]) are beneath it, at their relative
    /// names.
    ///
    /// # Caveats
    ///
    /// A path for reading and for showing to an operator: custodian itself
    /// never goes through it (it holds the directory by descriptor and
    /// opens nothing by a path that could be swapped), and a file created
    /// there other than through the [`Executor`] is not the request's: its
    /// cleanup then fails closed (`unregistered_entry`) and keeps the job.
    /// Confined processes do not see it (every confined mode masks the
    /// internal namespace).
    pub fn job_dir(&self, id: &RequestId) -> PathBuf {
        self.inner.job_dir(id)
    }

    /// The ids of the requests that have not completed yet.
    pub fn running(&self) -> Vec<RequestId> {
        self.inner.hooks.running()
    }

    /// Reads a spilled result on tokio's blocking pool.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::SpillDisabled`] without a spill store,
    /// [`RuntimeError::Spill`] as [`SpillService::read`].
    pub async fn read_spill(&self, locator: &Locator) -> Result<Vec<u8>, RuntimeError> {
        self.inner.read_spill(locator).await
    }

    /// Replays the ownership journals a runtime that died left in the
    /// workspace and cleans those requests ([`Workspace::reclaim`]). Call it
    /// once, before starting requests.
    pub async fn reclaim(&self) -> Vec<(RequestId, CleanupResult)> {
        match &self.inner.hooks.workspace {
            Some(workspace) => workspace.reclaim().await,
            None => Vec::new(),
        }
    }

    /// Closes the workspace (every request still open is cleaned up, see
    /// [`Workspace::close`]) and waits for the spill store's startup sweep.
    /// Returns the cleanups it ran.
    ///
    /// It returns only once the workspace's lock is released: a
    /// [`Runtime::open`] of the same root succeeds at once, whatever clones
    /// of this runtime, [`Request`]s, [`Executor`]s or [`Job`]s are still
    /// held. Those no longer touch the workspace: a new request's
    /// [`Executor::open_workspace`] and a held job's writes are refused
    /// ([`RuntimeError::Workspace`]).
    ///
    /// [`Job`]: crate::workspace::Job
    pub async fn shutdown(&self) -> Vec<(RequestId, CleanupResult)> {
        let cleaned = match &self.inner.hooks.workspace {
            Some(workspace) => workspace.close().await,
            None => Vec::new(),
        };
        let spill = crate::sync::lock_std(&self.inner.spill).take();
        if let Some(spill) = spill {
            if let Some(report) = spill.dispose().await {
                tracing::info!(
                    files_deleted = report.files_deleted,
                    "startup spill sweep finished"
                );
            }
        }
        cleaned
    }

    /// The spill store [`Executor::spill`] writes to, if one is configured.
    #[cfg(feature = "mcp")]
    pub(crate) fn spill_store(&self) -> Option<&Arc<crate::spill::SpillStore>> {
        self.inner.spill_store.as_ref()
    }
}

impl Inner {
    fn coordinator_limits(&self) -> RequestLimits {
        self.coordinator.limits()
    }

    fn job_dir(&self, id: &RequestId) -> PathBuf {
        self.launch
            .workspace
            .join(&self.internal_name)
            .join(crate::workspace::JOB_DIR_NAME)
            .join(id.as_str())
    }

    async fn read_spill(&self, locator: &Locator) -> Result<Vec<u8>, RuntimeError> {
        let store = self
            .spill_store
            .clone()
            .ok_or(RuntimeError::SpillDisabled)?;
        Ok(crate::spill::read_on_pool(store, locator.clone()).await?)
    }
}

//! The two sides of a running request: the caller's [`Request`] and the
//! executor's [`Executor`].

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tracing::{Instrument, info, info_span};

use super::hooks::Entry;
use super::{Inner, RuntimeError};
use crate::error::SafeCode;
use crate::id::RequestId;
use crate::machine::request::Candidate;
use crate::policy::{Context, StateMode, Verdict};
use crate::process::env::resolve_overlay;
use crate::process::governed::{ApprovalRequired, Gate, decide_invocation};
use crate::process::session::{Session, SessionOptions};
use crate::process::{Evidence, Invocation, Running};
use crate::request::StopHold;
use crate::request::scope::ScopeLaunchError;
use crate::request::{
    CODE_APPROVAL_REQUIRED, CODE_POLICY_DENIED, Completion, DeniedLaunch, ExecutorHandle,
    RequestHandle, RequestObserver,
};
use crate::spill::{Locator, MAX_SESSION_LEN};
use crate::sync::shim::lock;
use crate::workspace::{Job, WorkspaceError};

/// The caller's side of a request: cancel it, wait for its [`Completion`].
///
/// Cheap to clone. Dropping every clone before the request ended is a
/// caller disconnect, whatever [`Executor`]s remain: the executor is told
/// to stop ([`Executor::cancelled`]), the request's processes are stopped
/// and its workspace cleaned, and nothing is written.
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
/// let request = runtime.start(RequestId::new("req-2")?)?;
/// let executor = request.executor();
/// let observer = executor.observer();
/// executor.open_workspace().await?;
/// drop(request); // the caller went away
/// executor.cancelled().await; // the executor is told to stop
/// let completion = observer.finished().await;
/// assert_eq!(completion.result.status(), RequestStatus::Cancelled);
/// assert_eq!(completion.delivery, Delivery::CallerGone);
/// assert!(completion.cleanup.unwrap().is_clean());
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Request {
    handle: RequestHandle,
    entry: Arc<Entry>,
    rt: Arc<Inner>,
}

impl Request {
    pub(super) fn new(handle: RequestHandle, entry: Arc<Entry>, rt: Arc<Inner>) -> Self {
        Request { handle, entry, rt }
    }

    /// Runs this request's isolated launches with the network off in
    /// `network` (see `request::Scope::share_network`).
    #[cfg_attr(
        not(feature = "mcp"),
        allow(dead_code, reason = "only the MCP server shares one")
    )]
    pub(crate) fn share_network(&self, network: &Arc<crate::process::SharedNetwork>) {
        self.entry.share_network(Arc::clone(network));
    }

    /// The request's id.
    pub fn id(&self) -> &RequestId {
        self.handle.id()
    }

    /// The executor's side of this request. Hand it to the code that does
    /// the work; it does not keep the request alive.
    pub fn executor(&self) -> Executor {
        Executor {
            handle: self.handle.executor(),
            entry: Arc::clone(&self.entry),
            rt: Arc::clone(&self.rt),
        }
    }

    /// Cancels the request (a caller cancel): its executor is told to stop,
    /// its processes are stopped, its workspace cleaned. Idempotent; after
    /// the request ended it only records a duplicate.
    pub fn cancel(&self) {
        self.handle.candidate(Candidate::CallerCancel);
    }

    /// Waits for the request to complete. Every waiter, early or late,
    /// receives the same value; dropping this future changes nothing.
    pub async fn finished(&self) -> Completion {
        self.handle.finished().await
    }

    /// The completion, if the request has completed.
    pub fn try_finished(&self) -> Option<Completion> {
        self.handle.try_finished()
    }

    /// A read-only view that does not keep the request alive.
    pub fn observer(&self) -> RequestObserver {
        self.handle.observer()
    }

    /// The request's tracing span.
    pub fn span(&self) -> &tracing::Span {
        self.handle.span()
    }
}

/// The executor's side of a request: its job namespace, its artifacts, its
/// processes, its spills, and its own outcome. It never keeps the request
/// alive (see [`Request`]). Cheap to clone.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(executor: custodian::Executor) -> Result<(), Box<dyn std::error::Error>> {
/// use custodian::prelude::*;
///
/// executor.open_workspace().await?;
/// let running = executor
///     .launch(Invocation::validate(InvocationSpec::new("sleep").with_args(["30"]))?)
///     .await?;
/// tokio::select! {
///     evidence = running.settled() => println!("{:?}", evidence.status),
///     () = executor.cancelled() => return Ok(()), // stopped by the runtime
/// }
/// executor.succeed();
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Executor {
    handle: ExecutorHandle,
    entry: Arc<Entry>,
    rt: Arc<Inner>,
}

impl Executor {
    /// The request's id.
    pub fn id(&self) -> &RequestId {
        self.handle.id()
    }

    fn finalizing(&self) -> RuntimeError {
        RuntimeError::Finalizing {
            request: self.id().clone(),
        }
    }

    /// Opens the request's job namespace (`<internal>/job/<id>`), once: a
    /// second call returns the same [`Job`]. The request announces it
    /// first, so whatever ends the request from now on cleans it.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::Finalizing`] if the request is already ending (its
    /// cleanup may have started between the announcement and the open: the
    /// workspace then refuses the id, and nothing is created),
    /// [`RuntimeError::Workspace`] if the workspace refuses otherwise.
    pub async fn open_workspace(&self) -> Result<Job, RuntimeError> {
        if let Some(job) = self.entry.job() {
            return Ok(job);
        }
        let Some(workspace) = &self.rt.hooks.workspace else {
            return Err(RuntimeError::NoJobNamespaces {
                request: self.id().clone(),
            });
        };
        self.handle
            .workspace_opening()
            .await
            .map_err(|_| self.finalizing())?;
        self.entry
            .open_job(|| match workspace.open_request(self.id().as_str()) {
                Ok(job) => Ok(job),
                // A cleanup of the id entered its election after the
                // announcement: the request is ending.
                Err(WorkspaceError::AlreadyCleaned { .. }) => Err(self.finalizing()),
                Err(e) => Err(e.into()),
            })
    }

    /// The request's job, once opened.
    pub fn job(&self) -> Option<Job> {
        self.entry.job()
    }

    /// The request's job directory, once [`Executor::open_workspace`]
    /// opened it: where the artifacts of [`Executor::write_artifact`] are,
    /// at their relative names. See
    /// [`Runtime::job_dir`](super::Runtime::job_dir), and its caveats.
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
    /// let request = runtime.start(RequestId::new("req-3")?)?;
    /// let executor = request.executor();
    /// assert_eq!(executor.job_dir(), None);
    /// executor.open_workspace().await?;
    /// executor.write_artifact("out/result.json", b"{}").await?;
    /// let job_dir = executor.job_dir().unwrap();
    /// assert_eq!(std::fs::read(job_dir.join("out/result.json"))?, b"{}");
    /// executor.succeed();
    /// request.finished().await;
    /// assert!(!job_dir.exists());
    /// # Ok(()) }
    /// ```
    pub fn job_dir(&self) -> Option<std::path::PathBuf> {
        self.job().map(|_| self.rt.job_dir(self.id()))
    }

    /// Creates the artifact `rel` (relative to the job directory, parents
    /// created and registered as needed) and writes `contents` to it, on
    /// tokio's blocking pool. Returns the bytes written.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::NoWorkspace`] before [`Executor::open_workspace`],
    /// [`RuntimeError::Workspace`] if the name is refused or the request's
    /// cleanup started, [`RuntimeError::Write`] if writing fails.
    pub async fn write_artifact(&self, rel: &str, contents: &[u8]) -> Result<u64, RuntimeError> {
        let job = self.job().ok_or_else(|| RuntimeError::NoWorkspace {
            request: self.id().clone(),
        })?;
        let rel = rel.to_owned();
        let contents = contents.to_vec();
        tokio::task::spawn_blocking(move || {
            let mut file = job.create_file(&rel)?;
            file.write_all(&contents).map_err(RuntimeError::Write)?;
            Ok(contents.len() as u64)
        })
        .await
        .map_err(|e| RuntimeError::Write(std::io::Error::other(e)))?
    }

    /// Launches `invocation` as one of the request's processes: the run
    /// policy decides first, secret references are resolved (without
    /// blocking) before the launch, the process runs under the runtime's
    /// containment — in the request's cgroup once its workspace is open —
    /// with the workspace root as the base of its cwd, and it is tracked:
    /// whatever ends the request stops it.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::Denied`] / [`RuntimeError::ApprovalRequired`] from
    /// the policy (the refusal is also listed, by its codes only, in the
    /// request's [`Completion::denied`]), [`RuntimeError::Env`] if a secret
    /// cannot be resolved,
    /// [`RuntimeError::Finalizing`] once the request is ending,
    /// [`RuntimeError::Process`] / [`RuntimeError::Workspace`] if the
    /// launch is refused. Nothing was started in each case.
    pub async fn launch(&self, invocation: Invocation) -> Result<Running, RuntimeError> {
        self.launch_as(invocation, None, None).await
    }

    /// [`Executor::launch`], with the process's output readable while it
    /// runs: a **streamed run**, for progress. It is a run in every other
    /// way (stdin on `/dev/null`, `SIGINT` as the embedder left it, not
    /// counted in [`SessionLimits`](super::SessionLimits), no
    /// `interactions` in its evidence); the [`Session`] returned reads its
    /// output ([`Session::read`], [`Session::output`]) and waits for it,
    /// and its [`Session::write_stdin`] fails `stdin_closed`.
    ///
    /// # Errors
    ///
    /// As [`Executor::launch`].
    pub async fn launch_streamed(&self, invocation: Invocation) -> Result<Session, RuntimeError> {
        let running = self
            .launch_as(invocation, Some(SessionOptions::streamed_run()), None)
            .await?;
        Ok(Session::of(&running).expect("launched with an output log"))
    }

    /// Starts `invocation` as a session of this request: a process that
    /// outlives the call that started it, with a stdin pipe and its output
    /// readable while it runs ([`Session`]; see
    /// [`crate::process::session`]). It is launched, gated and contained
    /// exactly as by [`Executor::launch`], and it is one of the request's
    /// processes: whatever ends the request stops it (`TERM`, the grace,
    /// `KILL` of its whole tree) before any file is removed, and the
    /// request completes only once it settled.
    ///
    /// # Errors
    ///
    /// As [`Executor::launch`]; [`RuntimeError::TooManySessions`] when the
    /// request or the runtime already runs as many sessions as
    /// [`SessionLimits`](super::SessionLimits) allows (nothing is evicted).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(executor: custodian::Executor) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use custodian::prelude::*;
    /// use custodian::process::session::{Offsets, SessionOptions};
    ///
    /// let repl = executor
    ///     .start(
    ///         Invocation::validate(InvocationSpec::new("python3").with_args(["-i", "-q"]))?,
    ///         SessionOptions::default().with_idle_timeout(Duration::from_secs(600)),
    ///     )
    ///     .await?;
    /// repl.write_stdin(b"print(6*7)\n").await?;
    /// let out = repl.read(Offsets::default(), 4096, Duration::from_secs(5)).await;
    /// assert!(out.stdout.data.starts_with(b"42"));
    /// // Left running: the request's end stops it.
    /// # Ok(()) }
    /// ```
    pub async fn start(
        &self,
        invocation: Invocation,
        options: SessionOptions,
    ) -> Result<Session, RuntimeError> {
        let limits = self.rt.sessions;
        let live = &self.rt.live_sessions;
        // A place in the runtime's bound, held until the session settles.
        if live
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < limits.per_runtime).then_some(n + 1)
            })
            .is_err()
        {
            return Err(RuntimeError::TooManySessions {
                request: self.id().clone(),
                limit: limits.per_runtime,
                per: "in the runtime",
            });
        }
        // Its whole output, recorded in the request's spills (with a
        // store and a cap).
        let record = match &self.rt.spill_store {
            Some(store) if self.rt.session_record.cap > 0 => {
                Some(Arc::new(super::record::SpillRecord::new(
                    Arc::clone(store),
                    &self.rt.session_record,
                    Arc::clone(&self.entry),
                ))
                    as Arc<dyn crate::process::session::OutputRecord>)
            }
            _ => None,
        };
        let running = match self.launch_as(invocation, Some(options), record).await {
            Ok(running) => running,
            Err(e) => {
                live.fetch_sub(1, Ordering::SeqCst);
                return Err(e);
            }
        };
        let settled = running.clone();
        let live = Arc::clone(live);
        tokio::spawn(async move {
            let _ = settled.settled().await;
            live.fetch_sub(1, Ordering::SeqCst);
        });
        Ok(Session::of(&running).expect("launched as a session"))
    }

    async fn launch_as(
        &self,
        invocation: Invocation,
        session: Option<SessionOptions>,
        record: Option<Arc<dyn crate::process::session::OutputRecord>>,
    ) -> Result<Running, RuntimeError> {
        // First: the policy decides on the confinement the process runs
        // under. The default was validated when the runtime opened.
        let invocation = invocation.with_default_confinement(&self.rt.confinement)?;
        self.gate(&invocation)?;
        let secrets = resolve_overlay(invocation.env(), &*self.rt.secrets).await?;
        let mut options = self.rt.launch.clone();
        options.secrets = Arc::new(secrets);
        options.session = session;
        options.record = record;
        let span = info_span!(parent: self.handle.span(), "process", pid = tracing::field::Empty);
        let running = {
            let _entered = span.enter();
            let per_request = self.rt.sessions.per_request;
            self.entry
                .launch_bounded(
                    invocation,
                    options,
                    || self.handle.is_cancelled(),
                    per_request,
                )
                .map_err(|e| match e {
                    ScopeLaunchError::Closed => self.finalizing(),
                    ScopeLaunchError::Launch(e) => e.into(),
                    ScopeLaunchError::SessionsFull { limit } => RuntimeError::TooManySessions {
                        request: self.id().clone(),
                        limit,
                        per: "in the request",
                    },
                })?
        };
        span.record("pid", running.pid());
        info!(parent: &span, pid = running.pid(), "launched");
        if span.is_disabled() {
            // Nobody records the settlement event: no task to wait for it.
            return Ok(running);
        }
        let watched = running.clone();
        tokio::spawn(
            async move {
                let ev = watched.settled().await;
                info!(
                    status = ?ev.status,
                    exit_code = ev.exit_code,
                    signal = ev.signal,
                    descendants = ?ev.descendants.verdict,
                    tier = ?ev.descendants.tier,
                    "settled"
                );
            }
            .instrument(span),
        );
        Ok(running)
    }

    /// [`Executor::launch`], then waits for the process's evidence.
    ///
    /// # Errors
    ///
    /// As [`Executor::launch`].
    pub async fn run(&self, invocation: Invocation) -> Result<Arc<Evidence>, RuntimeError> {
        Ok(self.launch(invocation).await?.settled().await)
    }

    fn gate(&self, invocation: &Invocation) -> Result<(), RuntimeError> {
        let Some(policy) = &self.rt.policy else {
            return Ok(());
        };
        let gate = Gate {
            registry: &self.rt.registry,
            config: &policy.config,
            context: Context {
                provenance: policy.provenance,
                state_mode: StateMode::Local,
            },
            approvals: &[],
        };
        let decision = decide_invocation(invocation, &gate);
        if decision.verdict == Verdict::Allow {
            return Ok(());
        }
        // Deny, or an approval with nothing to approve: fail closed.
        let approval = decision.verdict == Verdict::RequireApproval
            && decision.target.is_some()
            && decision.suggested_override.is_some();
        // The completion and the log get codes only: the decision's target
        // holds the argv and the overlay's literal values.
        let denied = DeniedLaunch::new(
            if approval {
                CODE_APPROVAL_REQUIRED
            } else {
                CODE_POLICY_DENIED
            },
            &decision.reason,
        );
        let refusal = match (decision.target.clone(), decision.suggested_override.clone()) {
            (Some(target), Some(suggested_override)) if approval => {
                RuntimeError::ApprovalRequired(Box::new(ApprovalRequired {
                    target,
                    suggested_override,
                    decision,
                }))
            }
            _ => RuntimeError::Denied(Box::new(decision)),
        };
        info!(parent: self.handle.span(), code = %denied.code, reason = %denied.reason, "launch refused by the run policy");
        lock(&self.entry.extra).push(denied);
        Err(refusal)
    }

    /// Records a launch refused by the embedder's own gate before it reached
    /// [`Executor::launch`] (a policy decided with an approval the user
    /// declined, for instance): the request's [`Completion::denied`] lists it
    /// in order with the run policy's own refusals. Nothing is launched; the
    /// request's outcome is still the executor's to report
    /// ([`Executor::fail`]).
    pub fn record_denied(&self, denied: DeniedLaunch) {
        info!(parent: self.handle.span(), code = %denied.code, reason = %denied.reason, "launch refused before it was made");
        lock(&self.entry.extra).push(denied);
    }

    /// Spills `bytes` (an oversized result) to the runtime's spill store on
    /// tokio's blocking pool, under the request's id as the session (its
    /// first 64 bytes), and returns the locator. The request's
    /// [`Completion::spills`](crate::request::Completion::spills) lists
    /// it. Spills outlive the request: the store's retention sweep expires
    /// them.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::SpillDisabled`] without a spill store,
    /// [`RuntimeError::Spill`] if the store refuses,
    /// [`RuntimeError::Completed`] once the request completed (a spill
    /// whose write was still under way then is refused too; its file is
    /// left to the store's retention sweep).
    pub async fn spill(&self, bytes: Vec<u8>) -> Result<Locator, RuntimeError> {
        // A request id is a valid session name once cut to its length (same
        // alphabet, never a leading dot).
        let id = self.id().as_str();
        let session = id[..id.len().min(MAX_SESSION_LEN)].to_owned();
        let completed = || RuntimeError::Completed {
            request: self.id().clone(),
        };
        if self.entry.spills_closed() {
            return Err(completed());
        }
        match self.spill_in(session, bytes).await? {
            (locator, true) => Ok(locator),
            (_, false) => Err(completed()),
        }
    }

    /// Holds the request's stop open until the returned guard is dropped.
    /// The stop of the request's processes (on a cancel, a timeout, a
    /// disconnect, or the executor's own outcome) waits for it once every
    /// process settled, and the request's cleanup and completion follow
    /// the stop. Take it before launching, and drop it once what the
    /// processes left is filed, typically their output through
    /// [`Executor::spill`]: a request that is cancelled then still lists
    /// those spills in its
    /// [`Completion::spills`](crate::request::Completion::spills).
    ///
    /// Never await the request's end ([`Request::finished`]) while holding
    /// it: the stop would wait until the request's cleanup deadline
    /// ([`RequestLimits::cleanup_grace`](crate::request::RequestLimits::cleanup_grace)
    /// past its timeout), and the completion would say the stop was not
    /// confirmed (`stop_unconfirmed`). A hold taken once the stop finished
    /// holds nothing.
    pub fn hold_stop(&self) -> StopHold {
        self.entry.hold_stop()
    }

    /// Writes `bytes` to the runtime's spill store under `session` (the MCP
    /// server's `mcp`, whose outputs `spill_read` serves) and lists the
    /// locator among the request's spills unless the request completed
    /// first: `(locator, listed)`.
    pub(crate) async fn spill_in(
        &self,
        session: String,
        bytes: Vec<u8>,
    ) -> Result<(Locator, bool), RuntimeError> {
        let store = self
            .rt
            .spill_store
            .clone()
            .ok_or(RuntimeError::SpillDisabled)?;
        let locator = crate::spill::write_on_pool(store, session, bytes).await?;
        let listed = self.entry.add_spill(locator.clone());
        Ok((locator, listed))
    }

    /// The locators this request spilled, in order.
    pub fn spills(&self) -> Vec<Locator> {
        self.entry.spills()
    }

    /// Reads a spilled result, as [`Runtime::read_spill`](super::Runtime::read_spill).
    ///
    /// # Errors
    ///
    /// As [`Runtime::read_spill`](super::Runtime::read_spill).
    pub async fn read_spill(&self, locator: &Locator) -> Result<Vec<u8>, RuntimeError> {
        self.rt.read_spill(locator).await
    }

    /// Reports that the executor succeeded; the request finalizes (its
    /// processes are stopped, its workspace cleaned).
    pub fn succeed(&self) {
        self.handle.candidate(Candidate::Success);
    }

    /// Reports that the executor failed, with a safe code.
    pub fn fail(&self, code: SafeCode) {
        self.handle.candidate(Candidate::ExecutorError { code });
    }

    /// Resolves once the request asked its executor to stop (a cancel, a
    /// timeout, a disconnect, or its own report). Dropping it changes
    /// nothing.
    pub async fn cancelled(&self) {
        self.handle.cancelled().await;
    }

    /// Whether the request asked its executor to stop.
    pub fn is_cancelled(&self) -> bool {
        self.handle.is_cancelled()
    }

    /// A read-only view that does not keep the request alive: wait for the
    /// completion from the executor's side with
    /// [`RequestObserver::finished`].
    pub fn observer(&self) -> RequestObserver {
        self.handle.observer()
    }
}

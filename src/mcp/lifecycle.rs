//! The request lifecycle of one `process_run` call: open a job namespace,
//! launch into it, wait (reporting progress, honouring cancellation), then
//! run the request's exactly-once cleanup before the result is returned.
//!
//! All of the glue between a tool call and the workspace runtime sits in this
//! file, so that it can move onto a request facade without touching the MCP
//! layer.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::process::evidence::Evidence;
use crate::process::{Invocation, LaunchOptions};
use crate::workspace::{CleanupResult, Workspace, WorkspaceError};

/// The default grace between `SIGTERM` and `SIGKILL` when the server stops:
/// below the 2 s after which the MCP SDKs' clients kill a server they closed.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_millis(500);

/// How far a running process has got, for a progress notification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Bytes of stdout captured so far (after redaction).
    pub stdout_bytes: u64,
    /// Bytes of stderr captured so far (after redaction).
    pub stderr_bytes: u64,
    /// Time since launch.
    pub elapsed: Duration,
}

/// What one call ended with: the process's evidence and its request's
/// cleanup, which has finished by the time this exists.
#[derive(Debug)]
pub struct CallOutcome {
    /// The request (job namespace) the process ran in.
    pub request_id: String,
    /// The process's evidence.
    pub evidence: Arc<Evidence>,
    /// The request's cleanup.
    pub cleanup: CleanupResult,
    /// Whether the call was cancelled while the process ran.
    pub cancelled: bool,
}

/// Why a call produced no evidence.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchFailed {
    /// The request could not be opened or the launcher refused; nothing is
    /// running. The request's cleanup has run if it was opened.
    #[error("{source}")]
    Refused {
        /// The workspace or launcher error (carries no environment value).
        #[source]
        source: WorkspaceError,
        /// The request's cleanup, when the request was opened.
        cleanup: Option<CleanupResult>,
    },
    /// The call's task failed (a panic). Its request stays open until the
    /// workspace closes, whose cleanup kills and removes what it holds.
    #[error("the call's task failed; the request is cleaned up when the server stops")]
    TaskFailed,
    /// The server is stopping (its client went away or it was signalled):
    /// nothing was opened or launched.
    #[error("the server is stopping; nothing was launched")]
    Stopping,
}

impl LaunchFailed {
    /// A stable code: the launcher's for a refused launch, else the
    /// workspace error's kind, or `internal` for a failed task.
    pub fn code(&self) -> &'static str {
        match self {
            LaunchFailed::Refused { source, .. } => match source {
                WorkspaceError::Launch(e) => e.code(),
                WorkspaceError::InternalPath(_) => "internal_path",
                WorkspaceError::Closed => "workspace_closed",
                WorkspaceError::Io { .. } => "io_error",
                _ => "workspace_error",
            },
            LaunchFailed::TaskFailed => "internal",
            LaunchFailed::Stopping => "server_stopping",
        }
    }
}

/// Runs processes for tool calls, each in a request of its own.
#[derive(Debug)]
pub struct Lifecycle {
    workspace: Workspace,
    launch: LaunchOptions,
    progress_every: Duration,
    prefix: String,
    next: AtomicU64,
    /// Set once the server stops: every call in flight is cancelled with
    /// the shutdown grace, and no new call launches.
    stopping: CancellationToken,
    shutdown_grace: Duration,
    /// Every call's task, so that [`Lifecycle::stop`] can wait for them.
    calls: TaskTracker,
}

impl Lifecycle {
    /// Processes run in `workspace` with `launch`'s baseline, secrets and
    /// containment; progress is sampled every `progress_every`.
    pub fn new(workspace: Workspace, launch: LaunchOptions, progress_every: Duration) -> Self {
        // Request ids must not collide with a job directory a previous
        // server left behind (that one is refused, never adopted).
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Lifecycle {
            workspace,
            launch,
            progress_every,
            prefix: format!("mcp-{}-{:x}", std::process::id(), nanos & 0xffff_ffff),
            next: AtomicU64::new(1),
            stopping: CancellationToken::new(),
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            calls: TaskTracker::new(),
        }
    }

    /// The grace a process gets between `SIGTERM` and `SIGKILL` when the
    /// server stops (default [`DEFAULT_SHUTDOWN_GRACE`]).
    #[must_use]
    pub fn with_shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// Stops the server's calls: every call in flight is cancelled at once
    /// (`SIGTERM`, the shutdown grace, `SIGKILL` of its whole tree) and
    /// cleaned up; a call that has not launched yet launches nothing.
    /// Returns once every call's task has finished, its cleanup included.
    /// Idempotent.
    pub async fn stop(&self) {
        self.stopping.cancel();
        self.calls.close();
        self.calls.wait().await;
    }

    /// Completes once [`Lifecycle::stop`] was called.
    pub async fn stopping(&self) {
        self.stopping.cancelled().await;
    }

    /// Whether [`Lifecycle::stop`] was called.
    pub fn is_stopping(&self) -> bool {
        self.stopping.is_cancelled()
    }

    /// The workspace served.
    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    /// Runs `invocation` in a fresh request and returns once the process
    /// settled and the request was cleaned up.
    ///
    /// When `cancel` completes first, the process is cancelled (`SIGTERM`
    /// to its group, the grace, `SIGKILL`), whatever is left in the
    /// request's cgroup is killed, and the cleanup runs; the outcome says
    /// `cancelled`. `on_progress` is awaited every `progress_every` while
    /// the process runs.
    ///
    /// The work runs on a task of its own: if the future of this call is
    /// dropped, the process still settles and the cleanup still runs.
    ///
    /// # Errors
    ///
    /// [`LaunchFailed`] when the request cannot be opened or the launcher
    /// refuses; nothing is running then.
    pub async fn run<C, P, F>(
        self: &Arc<Self>,
        invocation: Invocation,
        cancel: C,
        mut on_progress: P,
    ) -> Result<CallOutcome, LaunchFailed>
    where
        C: Future<Output = ()> + Send + 'static,
        P: FnMut(Progress) -> F + Send + 'static,
        F: Future<Output = ()> + Send,
    {
        let id = format!(
            "{}-{}",
            self.prefix,
            self.next.fetch_add(1, Ordering::Relaxed)
        );
        let this = Arc::clone(self);
        let task = self.calls.spawn(async move {
            if this.stopping.is_cancelled() {
                return Err(LaunchFailed::Stopping);
            }
            let job = this
                .workspace
                .open_request(&id)
                .map_err(|source| LaunchFailed::Refused {
                    source,
                    cleanup: None,
                })?;
            let running = match job.launch(invocation, &this.launch) {
                Ok(r) => r,
                Err(source) => {
                    return Err(LaunchFailed::Refused {
                        source,
                        cleanup: Some(this.cleanup(&id).await),
                    });
                }
            };
            tracing::debug!(request_id = %id, pid = running.pid(), "launched");
            let started = Instant::now();
            let mut tick = tokio::time::interval(this.progress_every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            tokio::pin!(cancel);
            let mut cancelled = false;
            let mut stopped = false;
            let evidence = loop {
                tokio::select! {
                    ev = running.settled() => break ev,
                    () = &mut cancel, if !cancelled => {
                        cancelled = true;
                        running.cancel();
                    }
                    // The server stops: the short shutdown grace, even if a
                    // plain cancel already started the long one.
                    () = this.stopping.cancelled(), if !stopped => {
                        stopped = true;
                        cancelled = true;
                        running.cancel_within(this.shutdown_grace);
                    }
                    // No progress for a cancelled call: the client has
                    // forgotten its token.
                    _ = tick.tick(), if !cancelled => {
                        let (stdout_bytes, stderr_bytes) = running.bytes_captured();
                        on_progress(Progress {
                            stdout_bytes,
                            stderr_bytes,
                            elapsed: started.elapsed(),
                        })
                        .await;
                    }
                }
            };
            if cancelled && !job.kill_processes().await {
                tracing::warn!(request_id = %id, "request cgroup still populated after cancel");
            }
            let cleanup = this.cleanup(&id).await;
            Ok(CallOutcome {
                request_id: id,
                evidence,
                cleanup,
                cancelled,
            })
        });
        match task.await {
            Ok(r) => r,
            // The task panicked: the workspace's close still cleans the
            // request; say so rather than propagate the panic.
            Err(_) => Err(LaunchFailed::TaskFailed),
        }
    }

    /// The request's exactly-once cleanup (the workspace elects one runner;
    /// a repeated call receives the same result).
    async fn cleanup(&self, id: &str) -> CleanupResult {
        match self.workspace.cleanup(id).await {
            Ok(r) => r,
            // The id was generated here and is valid; keep a result anyway.
            Err(_) => CleanupResult::failed(
                crate::workspace::CleanupCode::Abandoned,
                Default::default(),
                None,
            ),
        }
    }
}

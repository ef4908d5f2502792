//! The production [`NodeWorkspace`]: the workspace runtime plus the
//! governed process launcher.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use super::message::{Code, PolicyRefusal, ProcessSummary, RunSpec};
use super::node::{CleanupVerdict, NodeWorkspace};
use super::reserve::FdReserve;
use crate::coordinator::RequestId;
use crate::error::SafeCode;
use crate::policy::{Context, Registry, StateMode, Verdict};
use crate::process::evidence::Evidence;
use crate::process::governed::{Gate, decide_invocation};
use crate::process::invocation::EnvValue;
use crate::process::{Invocation, InvocationSpec, LaunchOptions};
use crate::request::scope::{Scope, ScopeLaunchError, Scopes};
use crate::runtime::RunPolicy;
use crate::workspace::{CleanupStatus, Workspace, WorkspaceError};

/// Safe codes the adapter answers with.
pub mod codes {
    use crate::error::SafeCode;

    /// The artifact name was refused.
    pub const INVALID_ARTIFACT_NAME: SafeCode = SafeCode::new("invalid_artifact_name");
    /// The request is already open in the workspace (opened elsewhere).
    pub const ALREADY_OPEN: SafeCode = SafeCode::new("already_open");
    /// The request's job directory exists but this runtime did not create it.
    pub const JOB_EXISTS: SafeCode = SafeCode::new("job_exists");
    /// The request was already cleaned up.
    pub const ALREADY_CLEANED: SafeCode = SafeCode::new("already_cleaned");
    /// The workspace is closed.
    pub const WORKSPACE_CLOSED: SafeCode = SafeCode::new("workspace_closed");
    /// A filesystem call failed.
    pub const IO_ERROR: SafeCode = SafeCode::new("io_error");
    /// The process invocation was refused before launch.
    pub const INVALID_INVOCATION: SafeCode = SafeCode::new("invalid_invocation");
    /// The process could not be launched.
    pub const LAUNCH_FAILED: SafeCode = SafeCode::new("launch_failed");
    /// The process's cwd is inside the internal namespace.
    pub const INTERNAL_PATH: SafeCode = SafeCode::new("internal_path");
    /// Some other workspace error.
    pub const WORKSPACE_ERROR: SafeCode = SafeCode::new("workspace_error");
}

/// Serves the wire from a real [`Workspace`]: `open_workspace` opens a job
/// namespace, `write_artifact` creates a registered file in it,
/// `run_process` launches through [`crate::process::launch`] (with the
/// workspace root as the base of `cwd`) and tracks the process group in the
/// request, `cancel` stops the request's processes, and `cleanup_workspace`
/// is [`Workspace::cleanup`].
#[derive(Debug)]
pub struct WorkspaceNode {
    workspace: Workspace,
    launch: LaunchOptions,
    default_timeout: Duration,
    /// Each open request's scope (`request::scope`): its job and the
    /// processes launched for it.
    scopes: Scopes,
    policy: Option<RunPolicy>,
    reserve: Option<Arc<FdReserve>>,
}

impl WorkspaceNode {
    /// A node over `workspace`; processes run with `launch`'s baseline and
    /// secrets, `default_timeout` when a request names none.
    pub fn new(workspace: Workspace, launch: LaunchOptions, default_timeout: Duration) -> Self {
        WorkspaceNode {
            workspace,
            launch,
            default_timeout,
            scopes: Scopes::default(),
            policy: None,
            reserve: None,
        }
    }

    /// Launches under `reserve`'s allocation gate (a cleanup that holds the
    /// reserve is not raced for its descriptors by a launch), and reports a
    /// descriptor shortage of an open, a write or a launch to it, so that
    /// cleanups lend it. The same reserve as the [`Node`](super::Node)'s.
    #[must_use]
    pub fn with_fd_reserve(mut self, reserve: Arc<FdReserve>) -> Self {
        self.reserve = Some(reserve);
        self
    }

    /// `e`'s wire code. A descriptor shortage (`EMFILE`, `ENFILE`) is a
    /// bound of the node, not a fault of the request: it is reported to the
    /// reserve and answered `too_many_requests` (retry once others finish).
    fn code(&self, e: &WorkspaceError) -> SafeCode {
        match e {
            WorkspaceError::Io { source, .. } if super::reserve::is_fd_shortage(source) => {
                self.shortage()
            }
            _ => workspace_code(e),
        }
    }

    /// A refused launch's wire code, as [`Self::code`] for the request's
    /// refusals, the launcher's own code else (`launch_failed` where it has
    /// none that is safe).
    fn launch_code(&self, e: &crate::request::LaunchError) -> SafeCode {
        use crate::request::LaunchError;
        match e {
            LaunchError::Workspace(e) => self.code(e),
            LaunchError::Process(crate::process::ProcessError::Spawn { source, .. })
                if super::reserve::is_fd_shortage(source) =>
            {
                self.shortage()
            }
            LaunchError::Process(e) => safe(e.code(), codes::LAUNCH_FAILED),
        }
    }

    /// Out of descriptors: the reserve is told, and the answer is
    /// `too_many_requests`.
    fn shortage(&self) -> SafeCode {
        if let Some(r) = &self.reserve {
            r.note_shortage();
        }
        super::message::codes::TOO_MANY_REQUESTS
    }

    /// Enforces `policy` on every `run_process`: a call it denies or that
    /// needs an approval is refused before launch
    /// ([`NodeWorkspace::admit_run`], then again in [`NodeWorkspace::run`]).
    #[must_use]
    pub fn with_policy(mut self, policy: RunPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Builds the invocation of a `run_process` exactly as it will launch.
    fn invocation(&self, spec: RunSpec) -> Result<Invocation, SafeCode> {
        let mut inv = InvocationSpec::new(spec.executable)
            .with_args(spec.argv)
            .with_timeout(
                spec.timeout_ms
                    .map_or(self.default_timeout, Duration::from_millis),
            );
        if let Some(cwd) = spec.cwd {
            inv = inv.with_cwd(cwd);
        }
        for (k, v) in spec.env {
            inv = inv.with_env(k, EnvValue::Literal(v));
        }
        if let Some(c) = spec.confinement {
            inv = inv.with_confinement(c);
        }
        Invocation::validate(inv).map_err(|_| codes::INVALID_INVOCATION)
    }

    /// The node policy's decision on `inv`: `Ok` to launch.
    fn decide(&self, request: &RequestId, inv: &Invocation) -> Result<(), PolicyRefusal> {
        let Some(policy) = &self.policy else {
            return Ok(());
        };
        let registry = Registry::new();
        let gate = Gate {
            registry: &registry,
            config: &policy.config,
            context: Context {
                provenance: policy.provenance,
                state_mode: StateMode::Local,
            },
            approvals: &[],
        };
        let decision = decide_invocation(inv, &gate);
        if decision.verdict == Verdict::Allow {
            return Ok(());
        }
        let reason = serde_json::to_value(&decision.reason)
            .ok()
            .and_then(|v| v.get("code")?.as_str().and_then(|c| Code::new(c).ok()))
            .unwrap_or_else(|| Code::from(super::message::codes::POLICY_DENIED));
        // The target holds the overlay's literal values: the log gets the
        // reason only, the target goes back to the edge that sent them.
        tracing::info!(request_id = %request, verdict = %decision.verdict, %reason, "policy refused run_process");
        Err(match (decision.verdict, decision.suggested_override) {
            (Verdict::RequireApproval, Some(o)) => PolicyRefusal {
                code: Code::from(super::message::codes::APPROVAL_REQUIRED),
                reason,
                target: decision.target.map(|t| t.as_str().to_owned()),
                suggested_override: Some(o.as_str().to_owned()),
            },
            // Deny, or an approval with nothing to approve: fail closed.
            _ => PolicyRefusal {
                code: Code::from(super::message::codes::POLICY_DENIED),
                reason,
                target: None,
                suggested_override: None,
            },
        })
    }

    /// The workspace served.
    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }
}

/// A `&'static str` code as a [`SafeCode`], or `fallback` if it does not
/// follow the safe-code rules (so a surprising code can never panic here).
fn safe(code: &'static str, fallback: SafeCode) -> SafeCode {
    if Code::new(code).is_ok() {
        SafeCode::new(code)
    } else {
        fallback
    }
}

fn workspace_code(e: &WorkspaceError) -> SafeCode {
    match e {
        WorkspaceError::InvalidRequestId(_) => super::message::codes::INVALID_REQUEST_ID,
        WorkspaceError::InvalidName { .. } => codes::INVALID_ARTIFACT_NAME,
        WorkspaceError::Untrusted { code, .. } => code.safe_code(),
        WorkspaceError::JobExists { .. } => codes::JOB_EXISTS,
        WorkspaceError::AlreadyOpen { .. } => codes::ALREADY_OPEN,
        WorkspaceError::AlreadyCleaned { .. } => codes::ALREADY_CLEANED,
        WorkspaceError::RequestClosed { .. } => super::message::codes::REQUEST_CLOSED,
        WorkspaceError::Closed => codes::WORKSPACE_CLOSED,
        WorkspaceError::Io { .. } => codes::IO_ERROR,
        WorkspaceError::InternalPath(_) => codes::INTERNAL_PATH,
        _ => codes::WORKSPACE_ERROR,
    }
}

/// A serde unit-variant enum's name as a wire code.
fn variant_code<T: serde::Serialize>(v: &T, fallback: &str) -> Code {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().and_then(|s| Code::new(s).ok()))
        .unwrap_or_else(|| Code::new(fallback).expect("valid fallback"))
}

/// Evidence → the wire's process summary. Captured text is already bounded
/// and redacted by the launcher.
fn summary(ev: &Evidence) -> ProcessSummary {
    ProcessSummary {
        exit_code: ev.exit_code,
        signal: ev.signal,
        reason: variant_code(&ev.status, "unknown"),
        descendants: variant_code(&ev.descendants.verdict, "unknown"),
        stdout: ev.stdout.text.clone(),
        stderr: ev.stderr.text.clone(),
        stdout_truncated: ev.stdout.truncated,
        stderr_truncated: ev.stderr.truncated,
        network: ev.network.clone(),
    }
}

impl NodeWorkspace for WorkspaceNode {
    async fn open(&self, request: &RequestId) -> Result<(), SafeCode> {
        let job = self
            .workspace
            .open_request(request.as_str())
            .map_err(|e| self.code(&e))?;
        // The workspace refused a second open of an open id; a scope left
        // by a cleanup that failed is replaced.
        self.scopes.file(request, Scope::with_job(job));
        Ok(())
    }

    async fn write_artifact(
        &self,
        request: &RequestId,
        name: &str,
        contents: &[u8],
    ) -> Result<u64, SafeCode> {
        let job = self
            .scopes
            .get(request)
            .and_then(|scope| scope.job())
            .ok_or(super::message::codes::NOT_OPEN)?;
        let mut file = job.create_file(name).map_err(|e| self.code(&e))?;
        file.write_all(contents).map_err(|_| codes::IO_ERROR)?;
        Ok(contents.len() as u64)
    }

    fn admit_run(&self, request: &RequestId, spec: &RunSpec) -> Result<(), PolicyRefusal> {
        match self.invocation(spec.clone()) {
            Ok(inv) => self.decide(request, &inv),
            // `run` reports the invalid invocation; nothing launches.
            Err(_) => Ok(()),
        }
    }

    async fn run(&self, request: &RequestId, spec: RunSpec) -> Result<ProcessSummary, SafeCode> {
        let inv = self.invocation(spec)?;
        // Checked again on the very invocation that launches, for callers
        // that reach `run` without `admit_run`.
        self.decide(request, &inv)
            .map_err(|r| SafeCode::from(&r.code))?;
        // The launch opens descriptors (pipes, a pidfd, its cgroup): not
        // while a cleanup holds the reserve.
        let allocating = match &self.reserve {
            Some(r) => Some(r.allocating().await),
            None => None,
        };
        // The job launches and tracks under its process lock, so a
        // concurrent cleanup either sees this process or refuses it; the
        // scope's, so a concurrent cancel either stops it or refuses it.
        let scope = self
            .scopes
            .get(request)
            .ok_or(super::message::codes::NOT_OPEN)?;
        let running = scope
            .launch(inv, self.launch.clone(), || false)
            .map_err(|e| match e {
                ScopeLaunchError::Closed => super::message::codes::REQUEST_CLOSED,
                ScopeLaunchError::Launch(e) => self.launch_code(&e),
                // A wire run is never a session: no bound applies to it.
                ScopeLaunchError::SessionsFull { .. } => SafeCode::new("too_many_sessions"),
            })?;
        drop(allocating);
        let ev = running.settled().await;
        Ok(summary(&ev))
    }

    async fn cancel(&self, request: &RequestId) -> u32 {
        let Some(scope) = self.scopes.get(request) else {
            return 0;
        };
        let active = scope.stop().await;
        // Whatever outlived its process's settlement (cgroup tier: nothing
        // should) dies with the request's cgroup.
        if let Some(job) = scope.job() {
            if !job.kill_processes().await {
                tracing::warn!(request_id = %request, "request cgroup still populated after cancel");
            }
        }
        active
    }

    async fn cleanup(&self, request: &RequestId) -> CleanupVerdict {
        let result = match self.workspace.cleanup(request.as_str()).await {
            Ok(result) => result,
            Err(e) => return CleanupVerdict::Failed(workspace_code(&e)),
        };
        self.scopes.remove(request);
        if let Some(code) = result.safe_code() {
            // The suspect path (relative to the workspace) is for the
            // operator's log only; the wire gets the code.
            tracing::warn!(request_id = %request, %code, suspect = ?result.suspect, "cleanup failed closed");
        }
        match result.status {
            CleanupStatus::Cleaned => CleanupVerdict::Cleaned,
            CleanupStatus::AlreadyGone => CleanupVerdict::AlreadyGone,
            CleanupStatus::Reclaimed => CleanupVerdict::Reclaimed,
            _ => CleanupVerdict::Failed(result.safe_code().unwrap_or(codes::WORKSPACE_ERROR)),
        }
    }
}

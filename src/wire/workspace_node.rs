//! The production [`NodeWorkspace`]: the workspace runtime plus the
//! governed process launcher.

use std::io::Write;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use super::message::codes::{TOO_MANY_SESSIONS, UNKNOWN_SESSION};
use super::message::{
    Code, MAX_SESSION_BUFFER, MAX_SESSIONS_PER_NODE, MAX_SESSIONS_PER_REQUEST, Offsets,
    PolicyRefusal, ProcessSummary, RunSpec, SessionExit, SessionInfo, SessionOutput, SessionSignal,
    SessionStarted, StartSpec, StreamRead, WindowSize,
};
use super::node::{CleanupVerdict, NodeWorkspace};
use super::reserve::FdReserve;
use crate::error::SafeCode;
use crate::policy::{Context, Registry, StateMode, Verdict};
use crate::process::evidence::Evidence;
use crate::process::governed::{Gate, decide_invocation};
use crate::process::invocation::EnvValue;
use crate::process::session::{Chunk, Session, SessionOptions};
use crate::process::{Invocation, InvocationSpec, LaunchOptions};
use crate::request::RequestId;
use crate::request::scope::{Scope, ScopeLaunchError};
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
/// request, `start_process` launches a session the same way (kept by id in
/// the request's scope, at most [`MAX_SESSIONS_PER_REQUEST`] running per
/// request and [`MAX_SESSIONS_PER_NODE`] on the node), `cancel` stops the
/// request's processes, and `cleanup_workspace` is [`Workspace::cleanup`]
/// (which stops them too, sessions included, before removing anything).
///
/// It keeps no table of requests: the open returns the request's scope
/// ([`NodeScope`]), which the [`Node`](super::Node) files in the request's
/// row and hands back to every operation its machine lets through.
#[derive(Debug)]
pub struct WorkspaceNode {
    workspace: Workspace,
    launch: LaunchOptions,
    default_timeout: Duration,
    policy: Option<RunPolicy>,
    reserve: Option<Arc<FdReserve>>,
    /// Sessions running on the node, all requests together.
    live_sessions: Arc<AtomicUsize>,
    /// The number of the last session id handed out (`s1`, `s2`, ...).
    last_session: AtomicU64,
}

/// How long a `write_stdin` waits for the process to take its input.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// What an open request holds on a [`WorkspaceNode`]: its scope
/// (`request::scope`): its job, the processes launched for it and, beside
/// them, its sessions by id. The [`Node`](super::Node) keeps it in the
/// request's row from its open to its cleanup's end.
#[derive(Debug)]
pub struct NodeScope(Scope<RequestSessions>);

/// Settled sessions a request's table keeps for their output beyond its
/// running ones; past that the oldest settled one is forgotten (its id is
/// then `unknown_session`), so a request's memory stays bounded.
const SETTLED_KEPT: usize = MAX_SESSIONS_PER_REQUEST;

/// One request's sessions by id, in the order started. It lives in the
/// request's scope, so it goes with the scope when the cleanup drops it.
#[derive(Debug, Default)]
struct RequestSessions {
    table: Mutex<Vec<(String, Session)>>,
}

impl RequestSessions {
    fn get(&self, id: &str) -> Option<Session> {
        let table = crate::sync::lock_std(&self.table);
        table.iter().find(|(i, _)| i == id).map(|(_, s)| s.clone())
    }

    /// Files `session` as `id`, forgetting the oldest settled session while
    /// more than [`SETTLED_KEPT`] are.
    fn insert(&self, id: String, session: Session) {
        let mut table = crate::sync::lock_std(&self.table);
        table.push((id, session));
        let settled = |s: &Session| s.running().try_settled().is_some();
        while table.iter().filter(|(_, s)| settled(s)).count() > SETTLED_KEPT {
            let Some(oldest) = table.iter().position(|(_, s)| settled(s)) else {
                break;
            };
            table.remove(oldest);
        }
    }

    fn list(&self) -> Vec<(String, Session)> {
        crate::sync::lock_std(&self.table).clone()
    }
}

/// One place under the node's session bound, given back when dropped (when
/// the launch failed, or once the session settled).
struct SessionPlace(Arc<AtomicUsize>);

impl SessionPlace {
    fn take(live: &Arc<AtomicUsize>) -> Option<SessionPlace> {
        live.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < MAX_SESSIONS_PER_NODE).then_some(n + 1)
        })
        .ok()
        .map(|_| SessionPlace(Arc::clone(live)))
    }
}

impl Drop for SessionPlace {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl WorkspaceNode {
    /// A node over `workspace`; processes run with `launch`'s baseline and
    /// secrets, `default_timeout` when a request names none.
    pub fn new(workspace: Workspace, launch: LaunchOptions, default_timeout: Duration) -> Self {
        WorkspaceNode {
            workspace,
            launch,
            default_timeout,
            policy: None,
            reserve: None,
            live_sessions: Arc::new(AtomicUsize::new(0)),
            last_session: AtomicU64::new(0),
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

    /// Session `id` of the request whose scope is `held`; `unknown_session`
    /// for an id the request does not hold, whoever else may (another
    /// request's is never named).
    fn session(held: &NodeScope, id: &str) -> Result<Session, SafeCode> {
        held.0.extra.get(id).ok_or(UNKNOWN_SESSION)
    }
}

/// A chunk of a session's stream as the wire answers it: its bytes as lossy
/// UTF-8 text. While more may follow (`more`), a character cut by the
/// read's end is left for the next read, unless it is all there is.
fn stream_read(chunk: &Chunk, more: bool) -> StreamRead {
    let data = &chunk.data;
    let mut end = data.len();
    if more {
        // The last character's lead byte is among the last four.
        let lead = (data.len().saturating_sub(4)..data.len())
            .rev()
            .find(|&i| data[i] & 0xC0 != 0x80);
        if let Some(i) = lead {
            if i > 0 && std::str::from_utf8(&data[i..]).is_err_and(|e| e.error_len().is_none()) {
                end = i;
            }
        }
    }
    StreamRead {
        offset: chunk.offset,
        lost: chunk.lost,
        bytes: end as u64,
        text: String::from_utf8_lossy(&data[..end]).into_owned(),
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

/// Evidence → how a session settled.
fn exit(ev: &Evidence) -> SessionExit {
    SessionExit {
        exit_code: ev.exit_code,
        signal: ev.signal,
        reason: variant_code(&ev.status, "unknown"),
        descendants: variant_code(&ev.descendants.verdict, "unknown"),
    }
}

impl NodeWorkspace for WorkspaceNode {
    type Held = NodeScope;

    async fn open(&self, request: &RequestId) -> Result<NodeScope, SafeCode> {
        // The workspace refuses a second open of an open id.
        let job = self
            .workspace
            .open_request(request.as_str())
            .map_err(|e| self.code(&e))?;
        let scope = Scope::with_job(job).map_err(|e| self.code(&e))?;
        Ok(NodeScope(scope))
    }

    async fn write_artifact(
        &self,
        _request: &RequestId,
        held: &NodeScope,
        name: &str,
        contents: &[u8],
    ) -> Result<u64, SafeCode> {
        let job = held.0.job().ok_or(super::message::codes::NOT_OPEN)?;
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

    async fn run(
        &self,
        request: &RequestId,
        held: &NodeScope,
        spec: RunSpec,
    ) -> Result<ProcessSummary, SafeCode> {
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
        let running = held
            .0
            .launch(inv, self.launch.clone(), || false)
            .map_err(|e| match e {
                ScopeLaunchError::Closed => super::message::codes::REQUEST_CLOSED,
                ScopeLaunchError::Launch(e) => self.launch_code(&e),
                // A wire run is never a session: no bound applies to it.
                ScopeLaunchError::SessionsFull { .. } => TOO_MANY_SESSIONS,
            })?;
        drop(allocating);
        let ev = running.settled().await;
        Ok(summary(&ev))
    }

    async fn start(
        &self,
        request: &RequestId,
        held: &NodeScope,
        spec: StartSpec,
    ) -> Result<SessionStarted, SafeCode> {
        let inv = self.invocation(spec.run)?;
        // As `run`: decided on the very invocation that launches.
        self.decide(request, &inv)
            .map_err(|r| SafeCode::from(&r.code))?;
        let scope = &held.0;
        // The node's bound first, then the request's (under the scope's
        // lock, in `launch_bounded`); as the runtime does, a start past
        // either is refused and nothing running is evicted.
        let place = SessionPlace::take(&self.live_sessions).ok_or(TOO_MANY_SESSIONS)?;
        let mut session = SessionOptions::default();
        if let Some(bytes) = spec.buffer_bytes {
            let bytes = bytes.clamp(1, MAX_SESSION_BUFFER);
            session = session.with_buffer(usize::try_from(bytes).unwrap_or(usize::MAX));
        }
        if let Some(ms) = spec.idle_timeout_ms {
            session = session.with_idle_timeout(Duration::from_millis(ms));
        }
        if let Some(size) = spec.terminal {
            // Refused `terminal_unavailable` where only the group tier
            // could run it (the launcher's code), nothing launched.
            session = session.with_terminal(size);
        }
        let mut options = self.launch.clone();
        options.session = Some(session);
        let allocating = match &self.reserve {
            Some(r) => Some(r.allocating().await),
            None => None,
        };
        let running = scope
            .launch_bounded(inv, options, || false, MAX_SESSIONS_PER_REQUEST)
            .map_err(|e| match e {
                ScopeLaunchError::Closed => super::message::codes::REQUEST_CLOSED,
                ScopeLaunchError::Launch(e) => self.launch_code(&e),
                ScopeLaunchError::SessionsFull { .. } => TOO_MANY_SESSIONS,
            })?;
        drop(allocating);
        let session = Session::of(&running).ok_or(codes::LAUNCH_FAILED)?;
        let watched = running.clone();
        tokio::spawn(async move {
            let _ = watched.settled().await;
            drop(place);
        });
        let n = self.last_session.fetch_add(1, Ordering::Relaxed) + 1;
        let session_id = format!("s{n}");
        let pid = running.pid();
        let terminal = spec.terminal.filter(|_| session.is_terminal());
        scope.extra.insert(session_id.clone(), session);
        tracing::info!(request_id = %request, session_id, pid, terminal = terminal.is_some(), "session started");
        Ok(SessionStarted {
            session_id,
            pid,
            terminal,
        })
    }

    async fn read(
        &self,
        _request: &RequestId,
        held: &NodeScope,
        session: &str,
        from: Offsets,
        max: usize,
        wait: Duration,
    ) -> Result<SessionOutput, SafeCode> {
        let s = Self::session(held, session)?;
        let out = s.read(from, max, wait).await;
        let settled = s.running().try_settled();
        // `out.ended`: this read reached the end of both streams of a
        // settled process; a stream cut here before a split character
        // (below) is not at its end after all.
        let total = s.status().output;
        let stdout = stream_read(
            &out.stdout,
            !(out.ended && out.stdout.next() >= total.stdout),
        );
        let stderr = stream_read(
            &out.stderr,
            !(out.ended && out.stderr.next() >= total.stderr),
        );
        let next = Offsets {
            stdout: stdout.offset + stdout.bytes,
            stderr: stderr.offset + stderr.bytes,
        };
        Ok(SessionOutput {
            session_id: session.to_owned(),
            ended: out.ended && next.stdout >= total.stdout && next.stderr >= total.stderr,
            next,
            stdout,
            stderr,
            running: settled.is_none(),
            exit: settled.as_deref().map(exit),
        })
    }

    async fn write_stdin(
        &self,
        _request: &RequestId,
        held: &NodeScope,
        session: &str,
        input: &[u8],
        close: bool,
    ) -> Result<u64, SafeCode> {
        let s = Self::session(held, session)?;
        let written = async {
            if !input.is_empty() {
                s.write_stdin(input)
                    .await
                    .map_err(|e| safe(e.code(), codes::IO_ERROR))?;
            }
            if close {
                s.close_stdin().await;
            }
            Ok(input.len() as u64)
        };
        tokio::time::timeout(WRITE_TIMEOUT, written)
            .await
            .unwrap_or(Err(super::message::codes::STDIN_BLOCKED))
    }

    async fn signal(
        &self,
        _request: &RequestId,
        held: &NodeScope,
        session: &str,
        signal: SessionSignal,
    ) -> Result<(), SafeCode> {
        Self::session(held, session)?.signal(signal);
        Ok(())
    }

    async fn resize(
        &self,
        _request: &RequestId,
        held: &NodeScope,
        session: &str,
        size: WindowSize,
    ) -> Result<(), SafeCode> {
        Self::session(held, session)?
            .resize(size)
            .map_err(|e| safe(e.code(), codes::IO_ERROR))
    }

    async fn list(
        &self,
        _request: &RequestId,
        held: &NodeScope,
    ) -> Result<Vec<SessionInfo>, SafeCode> {
        Ok(held
            .0
            .extra
            .list()
            .into_iter()
            .map(|(session_id, s)| {
                let st = s.status();
                SessionInfo {
                    session_id,
                    pid: st.pid,
                    running: st.running,
                    stdout_bytes: st.output.stdout,
                    stderr_bytes: st.output.stderr,
                    bytes_written: st.bytes_written,
                    terminal: st.terminal,
                }
            })
            .collect())
    }

    async fn cancel(&self, request: &RequestId, held: Option<&NodeScope>) -> u32 {
        let Some(NodeScope(scope)) = held else {
            return 0;
        };
        let active = scope.stop(None).await;
        // Whatever outlived its process's settlement (cgroup tier: nothing
        // should) dies with the request's cgroup.
        let bound = self.workspace.config().cleanup_bound;
        if !scope.kill_cgroup(bound).await {
            tracing::warn!(request_id = %request, "request cgroup still populated after cancel");
        }
        active
    }

    async fn cleanup(&self, request: &RequestId) -> CleanupVerdict {
        // By id: the workspace holds the job, and a request known only from
        // an earlier run of the node has no scope.
        let result = match self.workspace.cleanup(request.as_str()).await {
            Ok(result) => result,
            Err(e) => return CleanupVerdict::Failed(workspace_code(&e)),
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(data: &[u8]) -> Chunk {
        Chunk {
            offset: 10,
            lost: 0,
            data: data.to_vec(),
        }
    }

    /// A character cut by a read's end is left for the next read while more
    /// may follow, never when it is all there is or the stream ended; other
    /// invalid bytes become U+FFFD and are counted.
    #[test]
    fn a_read_cuts_before_a_split_character_and_stays_valid_text() {
        let euro = "€".as_bytes();
        let split = [b"ab".as_slice(), &euro[..2]].concat();
        let r = stream_read(&chunk(&split), true);
        assert_eq!((r.bytes, r.text.as_str()), (2, "ab"));
        let r = stream_read(&chunk(&split), false);
        assert_eq!((r.bytes, r.text.as_str()), (4, "ab\u{FFFD}"));
        let r = stream_read(&chunk(&euro[..2]), true);
        assert_eq!((r.bytes, r.text.as_str()), (2, "\u{FFFD}"));
        let r = stream_read(&chunk(b"a\xffb\x01"), true);
        assert_eq!((r.bytes, r.text.as_str()), (4, "a\u{FFFD}b\u{1}"));
        let r = stream_read(&chunk(&[b"x".as_slice(), euro].concat()), true);
        assert_eq!((r.offset, r.bytes, r.text.as_str()), (10, 4, "x€"));
    }
}

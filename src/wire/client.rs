//! The edge side: a pipelined client over any `AsyncRead + AsyncWrite`.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

use super::codec::{FrameReader, decode_response, encode_request};
use super::message::{
    CleanupStatus, CleanupSummary, Code, Offsets, Operation, ProcessSummary, Response, RunSpec,
    SessionInfo, SessionOutput, SessionSignal, SessionStarted, StartSpec, StdinText, WindowSize,
};
use super::transport::{NodeTransport, SpawnError};
use crate::error::SafeCode;
use crate::machine::request::CleanupVerdict;
use crate::request::{OpenRefused, ProcessControl, RequestHandle, RequestId, WorkspaceLifecycle};

/// Why a wire call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The connection to the node is gone (before or while waiting).
    #[error("the node connection is closed")]
    Disconnected,
    /// The node answered with an error code.
    #[error("the node refused the request: {code}")]
    Refused {
        /// The node's safe code.
        code: Code,
    },
    /// The node's own policy refused a `run_process`; nothing was launched.
    #[error("the node's policy refused the process: {code} ({reason})")]
    PolicyRefused {
        /// `policy_denied` or `approval_required`.
        code: Code,
        /// The policy reason's code.
        reason: Code,
        /// On `approval_required`: the match target to approve.
        target: Option<String>,
        /// On `approval_required`: the exact override for the node's policy.
        suggested_override: Option<String>,
    },
    /// The node answered with a response of the wrong kind.
    #[error("the node sent an unexpected response")]
    Unexpected,
}

#[derive(Debug, Default)]
struct Pending {
    waiters: HashMap<u64, oneshot::Sender<Response>>,
    closed: bool,
}

#[derive(Debug)]
struct Inner {
    out: mpsc::UnboundedSender<Vec<u8>>,
    pending: Mutex<Pending>,
    next_seq: AtomicU64,
}

impl Inner {
    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        crate::sync::lock_std(&self.pending)
    }

    /// Fails every waiting call with [`WireError::Disconnected`]. Closing
    /// under the lock: a call that registers after this sees `closed` and
    /// fails instead of waiting forever.
    fn close(&self) {
        let mut p = self.pending();
        p.closed = true;
        p.waiters.clear();
    }
}

/// An edge-side connection to one node. Cheap to clone; calls may be issued
/// concurrently and are pipelined (answers are matched by `seq`).
///
/// # Examples
///
/// An edge and a node in one process, over an in-memory pipe:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use custodian::RequestId;
/// use custodian::process::LaunchOptions;
/// use custodian::wire::{DEFAULT_MAX_FRAME, Node, NodeConfig, WireClient, WorkspaceNode};
/// use custodian::workspace::{Workspace, WorkspaceConfig};
///
/// let dir = tempfile::tempdir()?;
/// let workspace = Workspace::open(dir.path(), WorkspaceConfig::default())?;
/// let launch = LaunchOptions::new(dir.path());
/// let node = Node::new(
///     WorkspaceNode::new(workspace, launch, Duration::from_secs(30)),
///     NodeConfig::default(),
/// );
/// let (edge_io, node_io) = tokio::io::duplex(64 * 1024);
/// tokio::spawn(async move { node.serve_to_end(node_io).await });
///
/// let client = WireClient::new(edge_io, DEFAULT_MAX_FRAME);
/// let id = RequestId::new("req-1")?;
/// client.open_workspace(&id).await?;
/// assert_eq!(client.write_artifact(&id, "notes.txt", "hello").await?, 5);
/// let report = client.cleanup_workspace(&id).await?;
/// assert_eq!(report.request_id, id);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct WireClient {
    inner: Arc<Inner>,
}

impl WireClient {
    /// Starts a client on `io` (spawns its reader and writer tasks on the
    /// current tokio runtime).
    ///
    /// # Panics
    ///
    /// Panics if called outside a tokio runtime.
    pub fn new<IO>(io: IO, max_frame: usize) -> Self
    where
        IO: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (read, write) = tokio::io::split(io);
        Self::from_parts(read, write, max_frame)
    }

    /// Starts a client on separate read and write halves (e.g. a child's
    /// stdout and stdin). Once every clone of the client is dropped, the
    /// writer is shut down and dropped, which closes it.
    ///
    /// # Panics
    ///
    /// Panics if called outside a tokio runtime.
    pub fn from_parts<R, W>(read: R, write: W, max_frame: usize) -> Self
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (out, rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let inner = Arc::new(Inner {
            out,
            pending: Mutex::new(Pending::default()),
            next_seq: AtomicU64::new(1),
        });
        tokio::spawn(super::codec::write_lines(write, rx));
        let reader_inner = Arc::downgrade(&inner);
        tokio::spawn(async move {
            let mut frames = FrameReader::new(BufReader::new(read), max_frame);
            loop {
                let frame = match frames.next_frame().await {
                    Ok(Some(frame)) => frame,
                    Ok(None) => break,
                    Err(e) => {
                        warn!(error = %e, "bad frame from the node");
                        if matches!(e, super::codec::FrameError::TooLarge { .. }) {
                            continue;
                        }
                        break;
                    }
                };
                let Some(inner) = reader_inner.upgrade() else {
                    return;
                };
                match decode_response(frame) {
                    Ok(resp) => {
                        let waiter = resp
                            .seq
                            .and_then(|seq| inner.pending().waiters.remove(&seq));
                        match waiter {
                            Some(w) => {
                                let _ = w.send(resp.result);
                            }
                            None => warn!(seq = ?resp.seq, "unroutable response from the node"),
                        }
                    }
                    Err(e) => warn!(error = %e, "undecodable response from the node"),
                }
            }
            if let Some(inner) = reader_inner.upgrade() {
                inner.close();
            }
        });
        WireClient { inner }
    }

    /// Starts a node through a command — `ssh -T host custodian node
    /// --workspace DIR`, a container exec, or the node binary itself — and
    /// speaks the wire over the command's stdin and stdout.
    ///
    /// `program` is spawned with `args` as its argument vector: no shell is
    /// added on this side. (A remote-login command may add one on the far
    /// side: `ssh` joins its remote command into one string that the remote
    /// user's shell parses, so quote what goes there.) The command inherits
    /// this process's environment (ssh needs `HOME`, `SSH_AUTH_SOCK`, …) and
    /// its stderr, where the node's own log lines arrive; it runs in a
    /// process group of its own, so a terminal's Ctrl-C reaches the edge
    /// (which can still send its cleanups) and not the transport. Neither
    /// the environment nor the arguments are ever logged or put in an
    /// error.
    ///
    /// How the failure modes reach the edge (`docs/contracts/edge-node-wire.md`,
    /// *Remote nodes*):
    ///
    /// - **The transport dies** (the local command is killed, the network
    ///   or the remote login goes away) and **the node dies** (killed,
    ///   OOM): every pending and later call fails with
    ///   [`WireError::Disconnected`] — at the latest
    ///   [`EXIT_GRACE`](super::transport::EXIT_GRACE) after the command
    ///   exited, even if something keeps its stdout open — and the
    ///   coordinator's cleanup through this client is
    ///   `Failed(`[`CODE_NODE_UNREACHABLE`]`)`. A node whose stdin closed
    ///   cleans up every request it held on its own; a killed node leaves
    ///   its journals for the next start.
    /// - **The node restarts and reclaims**: a client from a new
    ///   `spawn_node` on the same workspace asks `cleanup_workspace` for a
    ///   request of the dead connection and gets `reclaimed` (the restarted
    ///   node cleaned it from its journal), `already_gone` (the old node
    ///   had cleaned it when its stdin closed) or `failed` with the
    ///   reclaim's code — mapped to a successful cleanup or to
    ///   `Failed(code)` like any answer.
    ///
    /// # Errors
    ///
    /// [`SpawnError::Start`] when the command cannot be started; a command
    /// that starts but cannot reach its node exits, and the client's calls
    /// then fail with [`WireError::Disconnected`].
    ///
    /// # Panics
    ///
    /// Panics if called outside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use custodian::request::RequestId;
    /// use custodian::wire::{CleanupStatus, DEFAULT_MAX_FRAME, WireClient};
    ///
    /// let (client, transport) = WireClient::spawn_node(
    ///     "ssh",
    ///     ["-T", "-o", "BatchMode=yes", "build-host", "custodian", "node", "--workspace", "/srv/ws"],
    ///     DEFAULT_MAX_FRAME,
    /// )?;
    /// let id = RequestId::new("req-42")?;
    /// client.open_workspace(&id).await?;
    /// client.write_artifact(&id, "notes/plan.txt", "draft").await?;
    /// let report = client.cleanup_workspace(&id).await?;
    /// assert_eq!(report.status, CleanupStatus::Cleaned);
    /// // The graceful end: the node's stdin closes, it cleans up whatever
    /// // is still open, exits, and the ssh command with it.
    /// drop(client);
    /// let status = transport.wait().await?;
    /// # let _ = status;
    /// # Ok(())
    /// # }
    /// ```
    pub fn spawn_node<I, S>(
        program: impl AsRef<OsStr>,
        args: I,
        max_frame: usize,
    ) -> Result<(WireClient, NodeTransport), SpawnError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let program = program.as_ref();
        let start_error = |source| SpawnError::Start {
            program: program.to_string_lossy().into_owned(),
            source,
        };
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()
            .map_err(start_error)?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            // Both were asked for as pipes; without them there is no wire.
            let _ = child.start_kill();
            return Err(start_error(io::Error::other("no stdio pipes")));
        };
        let client = Self::from_parts(stdout, stdin, max_frame);
        let inner = Arc::downgrade(&client.inner);
        let transport = NodeTransport::watch(child, move || {
            if let Some(inner) = inner.upgrade() {
                inner.close();
            }
        });
        Ok((client, transport))
    }

    /// Sends one request and waits for its answer.
    ///
    /// # Errors
    ///
    /// [`WireError::Disconnected`] when the connection is (or goes) down.
    pub async fn call(&self, op: Operation) -> Result<Response, WireError> {
        let seq = self.inner.next_seq.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut p = self.inner.pending();
            if p.closed {
                return Err(WireError::Disconnected);
            }
            p.waiters.insert(seq, tx);
        }
        let mut line = Vec::with_capacity(96);
        encode_request(seq, op, &mut line);
        if self.inner.out.send(line).is_err() {
            self.inner.pending().waiters.remove(&seq);
            return Err(WireError::Disconnected);
        }
        // If this future is dropped, the entry is removed when the answer
        // arrives (or when the connection closes).
        rx.await.map_err(|_| WireError::Disconnected)
    }

    /// `open_workspace`; returns whether it was already open.
    ///
    /// # Errors
    ///
    /// As [`WireClient::call`], plus [`WireError::Refused`].
    pub async fn open_workspace(&self, request_id: &RequestId) -> Result<bool, WireError> {
        match self
            .call(Operation::OpenWorkspace {
                request_id: request_id.clone(),
            })
            .await?
        {
            Response::WorkspaceOpened { already_open, .. } => Ok(already_open),
            other => Err(refused(other)),
        }
    }

    /// The executor's open, in the order that cannot leak: announces the
    /// workspace to the request ([`RequestHandle::workspace_opening`]), and
    /// only if that was accepted sends `open_workspace`; stops waiting for
    /// the answer once the request is cancelled ([`RequestHandle::cancelled`]).
    /// Whatever the outcome, once the announcement was accepted the
    /// request's one cleanup covers the workspace, and the node refuses an
    /// open that arrives after the request's cancel or cleanup.
    ///
    /// Returns whether the workspace was already open.
    ///
    /// # Errors
    ///
    /// [`OpenError::Refused`] when the request refused the announcement
    /// (nothing was sent), [`OpenError::Cancelled`] when the request was
    /// cancelled before the answer arrived (the open may or may not have
    /// happened), [`OpenError::Wire`] when the node refused or the
    /// connection failed.
    pub async fn open_announced(&self, handle: &RequestHandle) -> Result<bool, OpenError> {
        handle.workspace_opening().await?;
        tokio::select! {
            biased;
            () = handle.cancelled() => Err(OpenError::Cancelled),
            answer = self.open_workspace(handle.id()) => answer.map_err(OpenError::Wire),
        }
    }

    /// `write_artifact`; returns bytes written.
    ///
    /// # Errors
    ///
    /// As [`WireClient::call`], plus [`WireError::Refused`].
    pub async fn write_artifact(
        &self,
        request_id: &RequestId,
        name: &str,
        contents: &str,
    ) -> Result<u64, WireError> {
        let op = Operation::WriteArtifact {
            request_id: request_id.clone(),
            name: name.to_owned(),
            contents: contents.to_owned(),
        };
        match self.call(op).await? {
            Response::ArtifactWritten { bytes, .. } => Ok(bytes),
            other => Err(refused(other)),
        }
    }

    /// `run_process`; returns once the process settled.
    ///
    /// # Errors
    ///
    /// As [`WireClient::call`], plus [`WireError::Refused`].
    pub async fn run_process(
        &self,
        request_id: &RequestId,
        spec: RunSpec,
    ) -> Result<ProcessSummary, WireError> {
        match self
            .call(Operation::RunProcess {
                request_id: request_id.clone(),
                spec: Box::new(spec),
            })
            .await?
        {
            Response::ProcessFinished { summary, .. } => Ok(summary),
            other => Err(refused(other)),
        }
    }

    /// `start_process`: launches a session of the request; returns its id
    /// and pid as soon as it runs.
    ///
    /// # Errors
    ///
    /// As [`WireClient::run_process`]; also [`WireError::Refused`] with
    /// `too_many_sessions` past the request's or the node's bound, and for
    /// a [`StartSpec::terminal`] session `terminal_unavailable` (the node
    /// could run it only in the group tier) or `invalid_terminal_size`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: custodian::wire::WireClient, id: custodian::RequestId)
    /// # -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use custodian::wire::{Offsets, RunSpec, StartSpec};
    ///
    /// let spec = RunSpec {
    ///     executable: "python3".into(),
    ///     argv: vec!["-i".into(), "-q".into(), "-u".into()],
    ///     env: Default::default(),
    ///     cwd: None,
    ///     timeout_ms: Some(600_000),
    ///     confinement: None,
    /// };
    /// let repl = client.start_process(&id, StartSpec::new(spec)).await?;
    /// client.write_stdin(&id, &repl.session_id, "print(6*7)\n", false).await?;
    /// let out = client
    ///     .read_output(&id, &repl.session_id, Offsets::default(), 4096, Duration::from_secs(5))
    ///     .await?;
    /// assert!(out.stdout.text.starts_with("42"));
    /// // Left running: the request's cleanup stops it.
    /// # Ok(()) }
    /// ```
    pub async fn start_process(
        &self,
        request_id: &RequestId,
        spec: StartSpec,
    ) -> Result<SessionStarted, WireError> {
        match self
            .call(Operation::StartProcess {
                request_id: request_id.clone(),
                spec: Box::new(spec),
            })
            .await?
        {
            Response::ProcessStarted { started, .. } => Ok(started),
            other => Err(refused(other)),
        }
    }

    /// `read_output`: the session's output from `from`, at most `max_bytes`
    /// per stream (the node reads at most
    /// [`MAX_READ_BYTES`](super::MAX_READ_BYTES)), waiting up to `wait`
    /// (at most [`MAX_READ_WAIT_MS`](super::MAX_READ_WAIT_MS)) for some.
    /// Ask next from the answer's `next`.
    ///
    /// # Errors
    ///
    /// As [`WireClient::call`], plus [`WireError::Refused`]
    /// (`unknown_session`, `request_closed`, ...).
    pub async fn read_output(
        &self,
        request_id: &RequestId,
        session_id: &str,
        from: Offsets,
        max_bytes: u32,
        wait: std::time::Duration,
    ) -> Result<SessionOutput, WireError> {
        let op = Operation::ReadOutput {
            request_id: request_id.clone(),
            session_id: session_id.to_owned(),
            stdout_offset: from.stdout,
            stderr_offset: from.stderr,
            max_bytes: Some(max_bytes),
            wait_ms: Some(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)),
        };
        match self.call(op).await? {
            Response::Output { output, .. } => Ok(*output),
            other => Err(refused(other)),
        }
    }

    /// `write_stdin`: writes `input` to the session's stdin, then closes it
    /// if `close`; returns the bytes written.
    ///
    /// # Errors
    ///
    /// As [`WireClient::call`], plus [`WireError::Refused`]
    /// (`unknown_session`, `stdin_closed`, `session_ended`,
    /// `stdin_blocked`, ...).
    pub async fn write_stdin(
        &self,
        request_id: &RequestId,
        session_id: &str,
        input: &str,
        close: bool,
    ) -> Result<u64, WireError> {
        let op = Operation::WriteStdin {
            request_id: request_id.clone(),
            session_id: session_id.to_owned(),
            input: StdinText::from(input),
            close,
        };
        match self.call(op).await? {
            Response::StdinWritten { bytes, .. } => Ok(bytes),
            other => Err(refused(other)),
        }
    }

    /// `signal_process`: asks for `signal` to the session.
    ///
    /// # Errors
    ///
    /// As [`WireClient::call`], plus [`WireError::Refused`]
    /// (`unknown_session`, ...).
    pub async fn signal_process(
        &self,
        request_id: &RequestId,
        session_id: &str,
        signal: SessionSignal,
    ) -> Result<(), WireError> {
        let op = Operation::SignalProcess {
            request_id: request_id.clone(),
            session_id: session_id.to_owned(),
            signal,
        };
        match self.call(op).await? {
            Response::SignalSent { .. } => Ok(()),
            other => Err(refused(other)),
        }
    }

    /// `resize_terminal`: sets a terminal session's window size (the
    /// program gets `SIGWINCH`).
    ///
    /// # Errors
    ///
    /// As [`WireClient::call`], plus [`WireError::Refused`]:
    /// `not_a_terminal` for a session on pipes, `session_ended` once it
    /// settled, `invalid_terminal_size` for a side outside
    /// 1 ..= [`MAX_TERMINAL_SIDE`](super::MAX_TERMINAL_SIDE),
    /// `unknown_session`, ...
    pub async fn resize_terminal(
        &self,
        request_id: &RequestId,
        session_id: &str,
        size: WindowSize,
    ) -> Result<(), WireError> {
        let op = Operation::ResizeTerminal {
            request_id: request_id.clone(),
            session_id: session_id.to_owned(),
            terminal: size,
        };
        match self.call(op).await? {
            Response::TerminalResized { .. } => Ok(()),
            other => Err(refused(other)),
        }
    }

    /// `list_processes`: the request's sessions, in the order started.
    ///
    /// # Errors
    ///
    /// As [`WireClient::call`], plus [`WireError::Refused`].
    pub async fn list_processes(
        &self,
        request_id: &RequestId,
    ) -> Result<Vec<SessionInfo>, WireError> {
        match self
            .call(Operation::ListProcesses {
                request_id: request_id.clone(),
            })
            .await?
        {
            Response::Processes { sessions, .. } => Ok(sessions),
            other => Err(refused(other)),
        }
    }

    /// `cancel`; returns how many processes were active.
    ///
    /// # Errors
    ///
    /// As [`WireClient::call`], plus [`WireError::Refused`].
    pub async fn cancel(&self, request_id: &RequestId) -> Result<u32, WireError> {
        match self
            .call(Operation::Cancel {
                request_id: request_id.clone(),
            })
            .await?
        {
            Response::Cancelled { processes, .. } => Ok(processes),
            other => Err(refused(other)),
        }
    }

    /// `cleanup_workspace`; returns the node's (possibly cached) report.
    ///
    /// # Errors
    ///
    /// As [`WireClient::call`], plus [`WireError::Refused`].
    pub async fn cleanup_workspace(
        &self,
        request_id: &RequestId,
    ) -> Result<CleanupSummary, WireError> {
        cleanup_answer(
            self.call(Operation::CleanupWorkspace {
                request_id: request_id.clone(),
            })
            .await?,
        )
    }
}

/// A node's answer to `cleanup_workspace`: its report, or why there is none.
fn cleanup_answer(resp: Response) -> Result<CleanupSummary, WireError> {
    match resp {
        Response::Cleanup(report) => Ok(report),
        other => Err(refused(other)),
    }
}

/// Why [`WireClient::open_announced`] did not open the workspace.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The request refused the announcement: its cleanup has started or
    /// was decided without a workspace. Nothing was sent.
    #[error(transparent)]
    Refused(#[from] OpenRefused),
    /// The request was cancelled before the node answered; the open may or
    /// may not have happened, and the request's cleanup covers it.
    #[error("the request was cancelled while the workspace was opening")]
    Cancelled,
    /// The node refused the open, or the connection failed.
    #[error(transparent)]
    Wire(WireError),
}

fn refused(resp: Response) -> WireError {
    match resp {
        Response::Error { code, .. } => WireError::Refused { code },
        Response::PolicyRefused {
            code,
            reason,
            target,
            suggested_override,
            ..
        } => WireError::PolicyRefused {
            code,
            reason,
            target,
            suggested_override,
        },
        _ => WireError::Unexpected,
    }
}

impl From<WireError> for io::Error {
    fn from(e: WireError) -> io::Error {
        let kind = match e {
            WireError::Disconnected => io::ErrorKind::BrokenPipe,
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, e)
    }
}

/// The code recorded when the node could not be reached for a cleanup.
pub const CODE_NODE_UNREACHABLE: SafeCode = SafeCode::new("node_unreachable");
/// The code recorded when a node's cleanup failed without a code, or the
/// node answered with something other than a cleanup report.
pub const CODE_REMOTE_CLEANUP_FAILED: SafeCode = SafeCode::new("remote_cleanup_failed");

/// One `cleanup_workspace` message per call; the coordinator makes exactly
/// one call per request that announced a workspace, whether or not its open
/// answer arrived (the node's cleanup is idempotent: a request it never
/// opened is `already_gone`).
impl WorkspaceLifecycle for WireClient {
    async fn cleanup_workspace(&self, request: &RequestId) -> CleanupVerdict {
        cleanup_verdict(WireClient::cleanup_workspace(self, request).await)
    }
}

/// The verdict the coordinator is told for a node's answer to
/// `cleanup_workspace`: the node's own. A node's failure code is kept
/// verbatim: it was checked as a [`SafeCode`] when the answer was decoded,
/// and the verdict owns a copy of its text.
fn cleanup_verdict(answer: Result<CleanupSummary, WireError>) -> CleanupVerdict {
    match answer {
        Ok(report) => match report.status {
            CleanupStatus::Cleaned => CleanupVerdict::Cleaned,
            CleanupStatus::AlreadyGone => CleanupVerdict::AlreadyGone,
            CleanupStatus::Reclaimed => CleanupVerdict::Reclaimed,
            CleanupStatus::Failed => CleanupVerdict::Failed(
                report
                    .code
                    .as_ref()
                    .map_or(CODE_REMOTE_CLEANUP_FAILED, SafeCode::from),
            ),
        },
        Err(WireError::Disconnected) => CleanupVerdict::Failed(CODE_NODE_UNREACHABLE),
        Err(WireError::Refused { code }) => CleanupVerdict::Failed(SafeCode::from(&code)),
        Err(WireError::Unexpected | WireError::PolicyRefused { .. }) => {
            CleanupVerdict::Failed(CODE_REMOTE_CLEANUP_FAILED)
        }
    }
}

/// Sends one `cancel` message; the node answers once the request's processes
/// have settled. A lost connection counts as stopped: the node cleans up
/// every open request when its edge goes away for good, and the cleanup
/// that follows cancels again before removing anything.
impl ProcessControl for WireClient {
    async fn cancel_processes(&self, request: &RequestId) {
        if let Err(e) = self.cancel(request).await {
            warn!(error = %e, "cancel over the wire failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    use super::*;
    use crate::wire::codec::decode_response;

    /// The unit tests' allocator: the system's, counting the bytes each
    /// thread holds, so that a test can see whether what it did left
    /// anything allocated (a leak grows its thread's count; other tests
    /// running at the same time do not touch it).
    struct CountingAlloc;

    thread_local! {
        static LIVE: Cell<isize> = const { Cell::new(0) };
    }

    fn count(bytes: usize, sign: isize) {
        // `try_with`: the allocator also runs while a thread's locals are
        // torn down. A size never exceeds isize::MAX (Layout's rule).
        let bytes = isize::try_from(bytes).unwrap_or(isize::MAX);
        let _ = LIVE.try_with(|live| live.set(live.get() + sign * bytes));
    }

    fn live_bytes() -> isize {
        LIVE.with(Cell::get)
    }

    // SAFETY: every method forwards to `System` with the caller's layout and
    // pointer unchanged, so `System`'s guarantees are this allocator's; the
    // count touches no allocation.
    #[allow(unsafe_code, reason = "a test-only counting allocator over System")]
    unsafe impl GlobalAlloc for CountingAlloc {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: the caller upholds `alloc`'s contract, passed on as is.
            let p = unsafe { System.alloc(layout) };
            if !p.is_null() {
                count(layout.size(), 1);
            }
            p
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            count(layout.size(), -1);
            // SAFETY: `ptr` came from this allocator, hence from `System`,
            // with this layout (the caller's contract).
            unsafe { System.dealloc(ptr, layout) }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            // SAFETY: as `dealloc` for `ptr` and `layout`; `new_size` is the
            // caller's, checked by the caller against `realloc`'s contract.
            let p = unsafe { System.realloc(ptr, layout, new_size) };
            if !p.is_null() {
                count(layout.size(), -1);
                count(new_size, 1);
            }
            p
        }
    }

    #[global_allocator]
    static ALLOC: CountingAlloc = CountingAlloc;

    /// The outcome of a node's cleanup answer, decoded from its frame as
    /// `WireClient::cleanup_workspace` does.
    fn outcome_of(frame: &str) -> CleanupVerdict {
        let resp = decode_response(frame.as_bytes())
            .expect("a valid frame")
            .result;
        cleanup_verdict(cleanup_answer(resp))
    }

    fn failed_cleanup(code: &str) -> String {
        format!(
            r#"{{"v":1,"seq":7,"result":"cleanup","request_id":"req-1","status":"failed","code":"{code}"}}"#
        )
    }

    /// A node's failure code reaches the coordinator verbatim, whether it
    /// comes in a failed cleanup report or an error answer.
    #[test]
    fn a_remote_cleanup_code_reaches_the_outcome_verbatim() {
        assert_eq!(
            outcome_of(&failed_cleanup("symlink_in_job")),
            CleanupVerdict::Failed(SafeCode::new("symlink_in_job"))
        );
        assert_eq!(
            outcome_of(r#"{"v":1,"seq":7,"result":"error","code":"no_space_left"}"#),
            CleanupVerdict::Failed(SafeCode::new("no_space_left"))
        );
        assert_eq!(
            outcome_of(
                r#"{"v":1,"seq":7,"result":"cleanup","request_id":"req-1","status":"failed"}"#
            ),
            CleanupVerdict::Failed(CODE_REMOTE_CLEANUP_FAILED)
        );
        assert_eq!(
            outcome_of(
                r#"{"v":1,"seq":7,"result":"cleanup","request_id":"req-1","status":"cleaned"}"#
            ),
            CleanupVerdict::Cleaned
        );
        // The node's clean verdicts reach the coordinator as they are.
        for (status, verdict) in [
            ("already_gone", CleanupVerdict::AlreadyGone),
            ("reclaimed", CleanupVerdict::Reclaimed),
        ] {
            assert_eq!(
                outcome_of(&format!(
                    r#"{{"v":1,"seq":7,"result":"cleanup","request_id":"req-1","status":"{status}"}}"#
                )),
                verdict
            );
        }
    }

    /// A hostile node cannot make the edge keep memory by sending many
    /// distinct codes: each one is owned by the outcome that carries it and
    /// goes with it. Before a code owned its text, each distinct code was
    /// leaked into a process-wide table (and past 256 of them the code was
    /// replaced by `remote_cleanup_failed`).
    #[test]
    fn many_distinct_remote_codes_are_kept_verbatim_and_leave_nothing_behind() {
        let codes: Vec<String> = (0..5_000).map(|i| format!("remote_code_{i}")).collect();
        let frames: Vec<String> = codes.iter().map(|c| failed_cleanup(c)).collect();
        // Anything a first decode sets up once (lazily) is not a leak.
        let _ = outcome_of(&failed_cleanup("warm_up"));
        let before = live_bytes();
        for (code, frame) in codes.iter().zip(&frames) {
            match outcome_of(frame) {
                CleanupVerdict::Failed(got) => assert_eq!(got.as_str(), code),
                other => panic!("{other:?}"),
            }
        }
        let grown = live_bytes() - before;
        assert_eq!(
            grown, 0,
            "decoding 5000 distinct codes left {grown} bytes allocated"
        );
    }

    /// The counter sees a leak: the check above can fail.
    #[test]
    fn the_allocation_count_sees_a_leak() {
        let before = live_bytes();
        let leaked: &'static str = Box::leak(String::from("leaked_code").into_boxed_str());
        assert_eq!(leaked, "leaked_code");
        assert!(live_bytes() - before >= 11);
    }
}

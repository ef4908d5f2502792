//! The typed messages of wire version 1.
//!
//! Every frame is one JSON object on one line. A request frame carries the
//! wire version `v`, a sequence number `seq` chosen by the edge (echoed in
//! the response so that requests can be pipelined) and an operation `op`; a
//! response frame carries `v`, `seq` and a `result`. The exact shapes, with
//! examples, are in `docs/contracts/edge-node-wire.md`.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

use crate::error::SafeCode;
pub use crate::process::session::{Offsets, SessionSignal, WindowSize};
use crate::request::RequestId;
pub use crate::workspace::CleanupStatus;

/// The wire version this build speaks. A frame with any other `v` is
/// answered with the error code `unsupported_version`.
pub const VERSION: u32 = 1;

/// A request frame, edge → node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestFrame {
    /// The wire version; always [`VERSION`] when sent by this build.
    pub v: u32,
    /// The edge's sequence number, echoed by the response.
    pub seq: u64,
    /// What the edge asks for.
    #[serde(flatten)]
    pub op: Operation,
}

/// An operation the edge asks the node to perform.
///
/// Every operation names the request it belongs to; the node keys all of
/// its state (open workspace, processes, cleanup result) by that id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Operation {
    /// Open the request's job namespace in the node's workspace. Opening an
    /// already open request is answered as success with `already_open`.
    OpenWorkspace {
        /// The request.
        request_id: RequestId,
    },
    /// Write a request-owned artifact under the request's job namespace.
    WriteArtifact {
        /// The request.
        request_id: RequestId,
        /// The artifact's path relative to the job namespace, `/`-separated.
        name: String,
        /// The artifact's content, as UTF-8 text.
        contents: String,
    },
    /// Launch one governed process for the request and answer when it has
    /// settled. No shell is involved: `executable` is spawned with `argv`.
    RunProcess {
        /// The request.
        request_id: RequestId,
        /// What to run (boxed: by far the largest operation).
        #[serde(flatten)]
        spec: Box<RunSpec>,
    },
    /// Launch one governed process as a *session* of the request (stdin
    /// a pipe, output readable while it runs) and answer as soon as it is
    /// launched, with the session id the other session operations name.
    StartProcess {
        /// The request.
        request_id: RequestId,
        /// What to run and how the session keeps its output (boxed, as
        /// `run_process`'s spec).
        #[serde(flatten)]
        spec: Box<StartSpec>,
    },
    /// Read a session's output from byte offsets, waiting for some at most
    /// `wait_ms` (a long poll).
    ReadOutput {
        /// The request.
        request_id: RequestId,
        /// The session, as `start_process` named it.
        session_id: String,
        /// The offset of the next byte of stdout wanted (0 at first, then
        /// the previous answer's `next.stdout`).
        #[serde(default)]
        stdout_offset: u64,
        /// The offset of the next byte of stderr wanted.
        #[serde(default)]
        stderr_offset: u64,
        /// Bytes read per stream at most (default and cap:
        /// [`MAX_READ_BYTES`]; a larger value reads the cap).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_bytes: Option<u32>,
        /// How long to wait for output when there is none past the offsets
        /// (default 0; cap [`MAX_READ_WAIT_MS`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_ms: Option<u64>,
    },
    /// Write text to a session's stdin and/or close it.
    WriteStdin {
        /// The request.
        request_id: RequestId,
        /// The session.
        session_id: String,
        /// The text to write (all of it; may be empty). Never logged.
        #[serde(default)]
        input: StdinText,
        /// Close stdin after writing (the process reads end-of-file).
        #[serde(default)]
        close: bool,
    },
    /// Ask for a signal to a session: `interrupt` (`SIGINT`, the process
    /// may go on), `terminate` (TERM → grace → KILL) or `kill`.
    SignalProcess {
        /// The request.
        request_id: RequestId,
        /// The session.
        session_id: String,
        /// Which signal.
        signal: SessionSignal,
    },
    /// Set a terminal session's window size (the program gets `SIGWINCH`).
    ResizeTerminal {
        /// The request.
        request_id: RequestId,
        /// The session.
        session_id: String,
        /// The new size, each side 1 ..= [`MAX_TERMINAL_SIDE`] (a frame
        /// with another is refused `invalid_terminal_size`).
        #[serde(deserialize_with = "terminal_size")]
        terminal: WindowSize,
    },
    /// List the request's sessions.
    ListProcesses {
        /// The request.
        request_id: RequestId,
    },
    /// Cancel every active process of the request (TERM → grace → KILL).
    Cancel {
        /// The request.
        request_id: RequestId,
    },
    /// Clean up everything the request owns: its processes and its
    /// registered artifacts. Idempotent: a duplicate is answered with the
    /// first cleanup's result and never runs a second cleanup.
    CleanupWorkspace {
        /// The request.
        request_id: RequestId,
    },
}

impl Operation {
    /// The request this operation belongs to.
    pub fn request_id(&self) -> &RequestId {
        match self {
            Operation::OpenWorkspace { request_id }
            | Operation::WriteArtifact { request_id, .. }
            | Operation::RunProcess { request_id, .. }
            | Operation::StartProcess { request_id, .. }
            | Operation::ReadOutput { request_id, .. }
            | Operation::WriteStdin { request_id, .. }
            | Operation::SignalProcess { request_id, .. }
            | Operation::ResizeTerminal { request_id, .. }
            | Operation::ListProcesses { request_id }
            | Operation::Cancel { request_id }
            | Operation::CleanupWorkspace { request_id } => request_id,
        }
    }

    /// The operation's name as it appears in `op`.
    pub fn op_name(&self) -> &'static str {
        match self {
            Operation::OpenWorkspace { .. } => "open_workspace",
            Operation::WriteArtifact { .. } => "write_artifact",
            Operation::RunProcess { .. } => "run_process",
            Operation::StartProcess { .. } => "start_process",
            Operation::ReadOutput { .. } => "read_output",
            Operation::WriteStdin { .. } => "write_stdin",
            Operation::SignalProcess { .. } => "signal_process",
            Operation::ResizeTerminal { .. } => "resize_terminal",
            Operation::ListProcesses { .. } => "list_processes",
            Operation::Cancel { .. } => "cancel",
            Operation::CleanupWorkspace { .. } => "cleanup_workspace",
        }
    }
}

/// What a `run_process` request runs.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSpec {
    /// The executable, spawned directly (never through a shell).
    pub executable: String,
    /// The arguments after the executable; boundaries are preserved.
    #[serde(default)]
    pub argv: Vec<String>,
    /// The environment overlay on top of the node's minimal baseline.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The working directory relative to the workspace root (default: the
    /// root itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The process deadline in milliseconds (default: the node's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// What the process may touch while it runs (absent: unconfined), as
    /// in `docs/contracts/confinement.md`; `workspace-write` writes beneath
    /// the request's job directory. A kernel that cannot enforce a strict
    /// confinement answers `confinement_unsupported` and runs nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confinement: Option<crate::confine::Confinement>,
}

// Environment values never appear in logs or errors: `Debug` prints the keys'
// count only.
impl fmt::Debug for RunSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunSpec")
            .field("executable", &self.executable)
            .field("argv", &self.argv)
            .field("env_keys", &self.env.len())
            .field("cwd", &self.cwd)
            .field("timeout_ms", &self.timeout_ms)
            .field("confinement", &self.confinement)
            .finish()
    }
}

/// The most bytes of each stream one `read_output` returns: 64 KiB. An
/// answer's text is at most six times its bytes once JSON-escaped (a
/// control byte is `\u00XX`), so a `read_output` answer stays below
/// `12 × 64 KiB` plus a few hundred bytes: under the default 1 MiB frame.
pub const MAX_READ_BYTES: u32 = 64 * 1024;

/// The longest a `read_output` waits for output: 30 s.
pub const MAX_READ_WAIT_MS: u64 = 30_000;

/// The largest output buffer a wire session may ask for, per stream: 1 MiB
/// (default 256 KiB, the library's). With [`MAX_SESSIONS_PER_NODE`] this
/// bounds the node's session memory at 128 MiB.
pub const MAX_SESSION_BUFFER: u64 = 1 << 20;

/// Sessions one request may run at once on a node; a start beyond is
/// refused `too_many_sessions` (nothing is evicted).
pub const MAX_SESSIONS_PER_REQUEST: usize = 16;

/// Sessions a node may run at once, all requests together; a start beyond
/// is refused `too_many_sessions`.
pub const MAX_SESSIONS_PER_NODE: usize = 64;

/// What a `start_process` request runs: a `run_process` spec plus the
/// session's own settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartSpec {
    /// The process, exactly as for `run_process` (its `timeout_ms` bounds
    /// the session's whole life).
    #[serde(flatten)]
    pub run: RunSpec,
    /// Stop the session (TERM → grace → KILL) after this long without a
    /// read, a write or a signal (default: never; only `timeout_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_ms: Option<u64>,
    /// Bytes of output kept per stream for readers, the newest ones
    /// (default 256 KiB; clamped to 1 ..= [`MAX_SESSION_BUFFER`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffer_bytes: Option<u64>,
    /// Run on a pseudo-terminal of this size instead of pipes (default:
    /// pipes), each side 1 ..= [`MAX_TERMINAL_SIDE`]; a frame with another
    /// size is refused `invalid_terminal_size`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "optional_terminal_size"
    )]
    pub terminal: Option<WindowSize>,
}

impl StartSpec {
    /// A session of `run` with the default settings.
    pub fn new(run: RunSpec) -> Self {
        StartSpec {
            run,
            idle_timeout_ms: None,
            buffer_bytes: None,
            terminal: None,
        }
    }

    /// Runs the session on a pseudo-terminal of `size`.
    #[must_use]
    pub fn with_terminal(mut self, size: WindowSize) -> Self {
        self.terminal = Some(size);
        self
    }
}

pub use crate::process::session::MAX_TERMINAL_SIDE;

/// Whether `cols` × `rows` is a terminal size the wire accepts: each side
/// 1 ..= [`MAX_TERMINAL_SIDE`].
pub fn terminal_size_ok(cols: u64, rows: u64) -> bool {
    let side = 1..=u64::from(MAX_TERMINAL_SIDE);
    side.contains(&cols) && side.contains(&rows)
}

/// A terminal size within the wire's bounds, or a decoding error.
fn terminal_size<'de, D: Deserializer<'de>>(d: D) -> Result<WindowSize, D::Error> {
    let size = WindowSize::deserialize(d)?;
    if terminal_size_ok(size.cols.into(), size.rows.into()) {
        Ok(size)
    } else {
        Err(serde::de::Error::custom("terminal size out of range"))
    }
}

/// As [`terminal_size`], `null` being no terminal.
fn optional_terminal_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<WindowSize>, D::Error> {
    match Option::<WindowSize>::deserialize(d)? {
        Some(size) if !terminal_size_ok(size.cols.into(), size.rows.into()) => {
            Err(serde::de::Error::custom("terminal size out of range"))
        }
        size => Ok(size),
    }
}

/// Text for a session's stdin. It may carry secrets: its `Debug` prints
/// the byte count only, and the node logs and records nothing else of it.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StdinText(pub String);

impl fmt::Debug for StdinText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StdinText({} bytes)", self.0.len())
    }
}

impl From<&str> for StdinText {
    fn from(s: &str) -> Self {
        StdinText(s.to_owned())
    }
}

/// A session just launched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionStarted {
    /// The node's name for it (`s1`, `s2`, …: unique on the node).
    pub session_id: String,
    /// The root process's pid.
    pub pid: u32,
    /// The terminal's size when it runs on one; absent on pipes (and from
    /// a node that predates terminals, which ignores `terminal` and runs
    /// the session on pipes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal: Option<WindowSize>,
}

/// Part of one stream, as `read_output` answers it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamRead {
    /// The offset of the first byte returned.
    pub offset: u64,
    /// Bytes asked for that left the session's buffer before they were
    /// read: `offset` is that many bytes past the offset asked for.
    pub lost: u64,
    /// How many bytes of the stream this answer covers (`text` may be
    /// longer: it is their lossy UTF-8 decoding).
    pub bytes: u64,
    /// The bytes as text: valid UTF-8, each invalid sequence replaced by
    /// U+FFFD. A character split by the read's end is left for the next
    /// read while more may follow.
    pub text: String,
}

/// How a session settled, as `read_output` reports it once it has: the
/// exit part of a [`ProcessSummary`]; the output is what the reads return.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionExit {
    /// The exit code, when the root exited normally.
    pub exit_code: Option<i32>,
    /// The signal that ended the root, when one did.
    pub signal: Option<i32>,
    /// Why it settled: `exited`, `timed_out`, `cancelled`, ...
    pub reason: Code,
    /// The descendant verdict, as in [`ProcessSummary::descendants`].
    pub descendants: Code,
}

/// A `read_output` answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionOutput {
    /// The session.
    pub session_id: String,
    /// Stdout from the offset asked for.
    pub stdout: StreamRead,
    /// Stderr from the offset asked for.
    pub stderr: StreamRead,
    /// The offsets to ask for next.
    pub next: Offsets,
    /// Whether the process has not settled yet.
    pub running: bool,
    /// No more output will come: the process settled and both streams were
    /// read to their end.
    pub ended: bool,
    /// Once the process settled: how.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<SessionExit>,
}

/// One session of a request, as `list_processes` answers it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// The session.
    pub session_id: String,
    /// The root process's pid.
    pub pid: u32,
    /// Whether the process has not settled yet.
    pub running: bool,
    /// Bytes of stdout so far.
    pub stdout_bytes: u64,
    /// Bytes of stderr so far.
    pub stderr_bytes: u64,
    /// Bytes written to stdin so far (never what they were).
    pub bytes_written: u64,
    /// Whether it runs on a pseudo-terminal (`false` from a node that
    /// predates terminals).
    #[serde(default)]
    pub terminal: bool,
}

/// A response frame, node → edge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResponseFrame {
    /// The wire version; always [`VERSION`] when sent by this build.
    pub v: u32,
    /// The `seq` of the request this answers; `null` when the request frame
    /// was too damaged to read one.
    pub seq: Option<u64>,
    /// The answer.
    #[serde(flatten)]
    pub result: Response,
}

/// The node's answer to one request frame.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Response {
    /// The request's job namespace is open.
    WorkspaceOpened {
        /// The request.
        request_id: RequestId,
        /// `true` when it was already open (nothing was done this time).
        already_open: bool,
    },
    /// The artifact was written and registered as request-owned.
    ArtifactWritten {
        /// The request.
        request_id: RequestId,
        /// The artifact's path relative to the job namespace.
        name: String,
        /// Bytes written.
        bytes: u64,
    },
    /// The process settled.
    ProcessFinished {
        /// The request.
        request_id: RequestId,
        /// What happened to it.
        #[serde(flatten)]
        summary: ProcessSummary,
    },
    /// A session was launched (`start_process`).
    ProcessStarted {
        /// The request.
        request_id: RequestId,
        /// Its id and pid.
        #[serde(flatten)]
        started: SessionStarted,
    },
    /// A session's output (`read_output`).
    Output {
        /// The request.
        request_id: RequestId,
        /// What was read (boxed: the largest answer).
        #[serde(flatten)]
        output: Box<SessionOutput>,
    },
    /// Text was written to a session's stdin (`write_stdin`).
    StdinWritten {
        /// The request.
        request_id: RequestId,
        /// The session.
        session_id: String,
        /// Bytes written.
        bytes: u64,
        /// Whether stdin was closed after them.
        closed: bool,
    },
    /// The signal was asked for (`signal_process`); a no-op on a session
    /// that already settled.
    SignalSent {
        /// The request.
        request_id: RequestId,
        /// The session.
        session_id: String,
        /// The signal.
        signal: SessionSignal,
    },
    /// A terminal session's window size was set (`resize_terminal`).
    TerminalResized {
        /// The request.
        request_id: RequestId,
        /// The session.
        session_id: String,
        /// The size set.
        terminal: WindowSize,
    },
    /// The request's sessions (`list_processes`), in the order started.
    Processes {
        /// The request.
        request_id: RequestId,
        /// Each session, running or settled.
        sessions: Vec<SessionInfo>,
    },
    /// The request's active processes were told to stop and have settled.
    Cancelled {
        /// The request.
        request_id: RequestId,
        /// How many processes were active when the cancel arrived.
        processes: u32,
    },
    /// The request's cleanup result (the first one, for duplicates).
    Cleanup(CleanupSummary),
    /// The node's own policy refused a `run_process`: nothing was launched.
    /// Sent only by a node started with a policy (`custodian node --policy`).
    PolicyRefused {
        /// The request.
        request_id: RequestId,
        /// `policy_denied` or `approval_required`.
        code: Code,
        /// Why, as the policy reason's code (`denied_by_rule`,
        /// `not_exposed`, `malformed_target`, `default_decision`,
        /// `untrusted_shell_requires_approval`, ...).
        reason: Code,
        /// On `approval_required`: the invocation's match target (display
        /// form), the identity an operator approves.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<String>,
        /// On `approval_required`: the exact override that approves this
        /// invocation and no other, to add to the *node's* policy file.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        suggested_override: Option<String>,
    },
    /// The frame or the operation failed; nothing was lost or half-done
    /// beyond what `code` says.
    Error {
        /// The request, when the frame named a valid one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<RequestId>,
        /// A safe, stable code (see the contract for the list).
        code: Code,
    },
}

/// A node-side policy refusal of a `run_process`, before anything is
/// launched; [`PolicyRefusal::into_response`] makes the wire answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyRefusal {
    /// `policy_denied` or `approval_required`.
    pub code: Code,
    /// The policy reason's code.
    pub reason: Code,
    /// The match target (on `approval_required`).
    pub target: Option<String>,
    /// The exact override (on `approval_required`).
    pub suggested_override: Option<String>,
}

impl PolicyRefusal {
    /// The [`Response::PolicyRefused`] answer for `request_id`.
    pub fn into_response(self, request_id: RequestId) -> Response {
        Response::PolicyRefused {
            request_id,
            code: self.code,
            reason: self.reason,
            target: self.target,
            suggested_override: self.suggested_override,
        }
    }
}

/// How a process settled, as reported over the wire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessSummary {
    /// The exit code, when the root exited normally.
    pub exit_code: Option<i32>,
    /// The signal that ended the root, when one did.
    pub signal: Option<i32>,
    /// Why it settled: `exited`, `timed_out`, `cancelled`, ...
    pub reason: Code,
    /// The descendant verdict: `terminated`, `unconfirmed_or_escaped`,
    /// `unsupported` or `none`.
    pub descendants: Code,
    /// Captured standard output (bounded, valid UTF-8).
    pub stdout: String,
    /// Captured standard error (bounded, valid UTF-8).
    pub stderr: String,
    /// Whether `stdout` was truncated at the capture bound.
    pub stdout_truncated: bool,
    /// Whether `stderr` was truncated at the capture bound.
    pub stderr_truncated: bool,
    /// Network `allow`: the evidence's summary of what the process asked
    /// the node's proxy for (hosts and counts only); absent otherwise, and
    /// from nodes that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::process::NetworkAccess>,
}

/// One request's cleanup as the wire reports it: identity, status and a safe
/// code only — never a raw path, an environment value or captured output.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CleanupSummary {
    /// The request that was cleaned up.
    pub request_id: RequestId,
    /// What the cleanup did.
    pub status: CleanupStatus,
    /// Why it failed (present exactly when `status` is `failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<Code>,
    /// `true` when this answer is the cached result of an earlier cleanup.
    #[serde(default)]
    pub cached: bool,
}

/// A safe, stable, machine-readable code received over the wire: 1 to 64
/// lowercase ASCII letters, digits and `_`. Anything else is refused when
/// decoding ([`SafeCode::parse`] decides), so a code can never smuggle a
/// path or a value, and every `Code` is a [`SafeCode`] (`SafeCode::from`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Code(String);

impl Code {
    /// The longest code accepted.
    pub const MAX_LEN: usize = SafeCode::MAX_LEN;

    /// Validates `code` with [`SafeCode::parse`].
    ///
    /// # Errors
    ///
    /// [`InvalidCode`] when `code` is empty, longer than [`Code::MAX_LEN`] or
    /// holds anything but lowercase ASCII letters, digits and `_`.
    pub fn new(code: &str) -> Result<Self, InvalidCode> {
        match SafeCode::parse(code) {
            Ok(_) => Ok(Code(code.to_owned())),
            Err(_) => Err(InvalidCode),
        }
    }

    /// The code as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<SafeCode> for Code {
    fn from(code: SafeCode) -> Self {
        Code(code.as_str().to_owned())
    }
}

/// A node's code as the crate's own: a copy of its text, which owns it.
impl From<&Code> for SafeCode {
    fn from(code: &Code) -> Self {
        match SafeCode::parse(&code.0) {
            Ok(safe) => safe,
            // `Code::new`, the only way to a `Code`, checked this very text.
            Err(_) => unreachable!("a wire code is a safe code"),
        }
    }
}

impl TryFrom<String> for Code {
    type Error = InvalidCode;
    fn try_from(s: String) -> Result<Self, InvalidCode> {
        Code::new(&s)
    }
}

impl From<Code> for String {
    fn from(c: Code) -> String {
        c.0
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A code that is not 1–64 lowercase ASCII letters, digits and `_`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a wire code is 1-64 lowercase ascii letters, digits and '_'")]
pub struct InvalidCode;

/// The error codes the node sends in [`Response::Error`].
pub mod codes {
    use crate::error::SafeCode;

    /// The frame is not valid UTF-8 JSON.
    pub const MALFORMED_FRAME: SafeCode = SafeCode::new("malformed_frame");
    /// The frame is JSON but not a known, well-formed request.
    pub const INVALID_MESSAGE: SafeCode = SafeCode::new("invalid_message");
    /// `op` names no operation of this version.
    pub const UNKNOWN_OP: SafeCode = SafeCode::new("unknown_op");
    /// `request_id` fails validation.
    pub const INVALID_REQUEST_ID: SafeCode = SafeCode::new("invalid_request_id");
    /// `v` is not a version this node speaks.
    pub const UNSUPPORTED_VERSION: SafeCode = SafeCode::new("unsupported_version");
    /// The frame exceeded the node's maximum frame size and was discarded.
    pub const FRAME_TOO_LARGE: SafeCode = SafeCode::new("frame_too_large");
    /// The peer closed the stream in the middle of a frame.
    pub const TRUNCATED_FRAME: SafeCode = SafeCode::new("truncated_frame");
    /// The request's workspace is not open.
    pub const NOT_OPEN: SafeCode = SafeCode::new("not_open");
    /// The request's cleanup has started: it accepts no new work.
    pub const REQUEST_CLOSED: SafeCode = SafeCode::new("request_closed");
    /// An open of the same request is still running; this one was not
    /// performed.
    pub const OPEN_IN_PROGRESS: SafeCode = SafeCode::new("open_in_progress");
    /// The node is shutting down.
    pub const SHUTTING_DOWN: SafeCode = SafeCode::new("shutting_down");
    /// A bound on open requests (the node's or the connection's) is
    /// reached: the `open_workspace` was not performed and the request's
    /// state is unchanged (a later open may succeed once others are
    /// cleaned up).
    pub const TOO_MANY_REQUESTS: SafeCode = SafeCode::new("too_many_requests");
    /// The node serves as many connections as it may (or is out of file
    /// descriptors): the connection is answered with this and closed.
    pub const TOO_MANY_CONNECTIONS: SafeCode = SafeCode::new("too_many_connections");
    /// The peer runs in another user namespace than the node (every
    /// confined tool does), or its namespace could not be verified: the
    /// connection is answered with this and closed before any request is
    /// read ([`crate::wire::listen::Acceptor`]).
    pub const PEER_NAMESPACE_REFUSED: SafeCode = SafeCode::new("peer_namespace_refused");
    /// A frame did not complete within the node's frame deadline: the
    /// connection is answered with this and closed.
    pub const FRAME_TIMEOUT: SafeCode = SafeCode::new("frame_timeout");
    /// The connection was idle (nothing in flight, nothing read) for the
    /// node's idle deadline: it is answered with this and closed.
    pub const IDLE_TIMEOUT: SafeCode = SafeCode::new("idle_timeout");
    /// The node's policy denies the `run_process`.
    pub const POLICY_DENIED: SafeCode = SafeCode::new("policy_denied");
    /// The node's policy requires an approval the node does not hold.
    pub const APPROVAL_REQUIRED: SafeCode = SafeCode::new("approval_required");
    /// No session of this request has the id (it never existed, belongs to
    /// another request, or was forgotten).
    pub const UNKNOWN_SESSION: SafeCode = SafeCode::new("unknown_session");
    /// The request or the node already runs as many sessions as it may.
    pub const TOO_MANY_SESSIONS: SafeCode = SafeCode::new("too_many_sessions");
    /// The process did not read its stdin within the write's bound (10 s);
    /// part of the input may have been written.
    pub const STDIN_BLOCKED: SafeCode = SafeCode::new("stdin_blocked");
    /// The node's workspace runs no sessions.
    pub const SESSIONS_UNSUPPORTED: SafeCode = SafeCode::new("sessions_unsupported");
    /// A `start_process` or `resize_terminal` names a terminal size with a
    /// side outside 1 ..= [`MAX_TERMINAL_SIDE`](super::MAX_TERMINAL_SIDE)
    /// (or not a `{"cols", "rows"}` object): the frame is refused like
    /// any malformed one, nothing started or resized.
    pub const INVALID_TERMINAL_SIZE: SafeCode = SafeCode::new("invalid_terminal_size");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The contract's example cleanup answers, byte for byte: the status is
    /// the workspace's own `CleanupStatus`, spelled `cleaned` as everywhere.
    #[test]
    fn cleanup_answers_read_and_write_as_the_contract_shows() {
        for line in [
            r#"{"v":1,"seq":5,"result":"cleanup","request_id":"req-42","status":"cleaned","cached":false}"#,
            r#"{"v":1,"seq":6,"result":"cleanup","request_id":"req-42","status":"failed","code":"symlink_in_job","cached":true}"#,
        ] {
            let frame: ResponseFrame = serde_json::from_str(line).unwrap();
            assert!(matches!(frame.result, Response::Cleanup(_)), "{frame:?}");
            assert_eq!(serde_json::to_string(&frame).unwrap(), line);
        }
        let old = r#"{"v":1,"seq":5,"result":"cleanup","request_id":"req-42","status":"clean","cached":false}"#;
        assert!(serde_json::from_str::<ResponseFrame>(old).is_err());
    }

    /// The contract's session examples, byte for byte: each request and
    /// answer decodes to its operation and encodes back to the same line.
    #[test]
    fn session_operations_read_and_write_as_the_contract_shows() {
        let requests = [
            r#"{"v":1,"seq":8,"op":"start_process","request_id":"req-42","executable":"python3","argv":["-i","-q","-u"],"timeout_ms":600000,"idle_timeout_ms":60000,"buffer_bytes":262144}"#,
            r#"{"v":1,"seq":9,"op":"write_stdin","request_id":"req-42","session_id":"s1","input":"print(6*7)\n","close":false}"#,
            r#"{"v":1,"seq":10,"op":"read_output","request_id":"req-42","session_id":"s1","stdout_offset":0,"stderr_offset":0,"max_bytes":4096,"wait_ms":5000}"#,
            r#"{"v":1,"seq":11,"op":"signal_process","request_id":"req-42","session_id":"s1","signal":"interrupt"}"#,
            r#"{"v":1,"seq":12,"op":"list_processes","request_id":"req-42"}"#,
            r#"{"v":1,"seq":14,"op":"start_process","request_id":"req-42","executable":"python3","argv":["-c","import getpass; getpass.getpass()"],"terminal":{"cols":80,"rows":24}}"#,
            r#"{"v":1,"seq":15,"op":"resize_terminal","request_id":"req-42","session_id":"s2","terminal":{"cols":120,"rows":40}}"#,
        ];
        for line in requests {
            let frame: RequestFrame = serde_json::from_str(line).unwrap();
            assert_eq!(serde_json::to_string(&frame).unwrap(), line);
        }
        let answers = [
            r#"{"v":1,"seq":8,"result":"process_started","request_id":"req-42","session_id":"s1","pid":4242}"#,
            r#"{"v":1,"seq":9,"result":"stdin_written","request_id":"req-42","session_id":"s1","bytes":11,"closed":false}"#,
            r#"{"v":1,"seq":10,"result":"output","request_id":"req-42","session_id":"s1","stdout":{"offset":0,"lost":0,"bytes":3,"text":"42\n"},"stderr":{"offset":0,"lost":0,"bytes":0,"text":""},"next":{"stdout":3,"stderr":0},"running":true,"ended":false}"#,
            r#"{"v":1,"seq":13,"result":"output","request_id":"req-42","session_id":"s1","stdout":{"offset":3,"lost":0,"bytes":0,"text":""},"stderr":{"offset":0,"lost":0,"bytes":0,"text":""},"next":{"stdout":3,"stderr":0},"running":false,"ended":true,"exit":{"exit_code":0,"signal":null,"reason":"exited","descendants":"terminated"}}"#,
            r#"{"v":1,"seq":11,"result":"signal_sent","request_id":"req-42","session_id":"s1","signal":"interrupt"}"#,
            r#"{"v":1,"seq":12,"result":"processes","request_id":"req-42","sessions":[{"session_id":"s1","pid":4242,"running":true,"stdout_bytes":3,"stderr_bytes":0,"bytes_written":11,"terminal":false}]}"#,
            r#"{"v":1,"seq":14,"result":"process_started","request_id":"req-42","session_id":"s2","pid":4343,"terminal":{"cols":80,"rows":24}}"#,
            r#"{"v":1,"seq":15,"result":"terminal_resized","request_id":"req-42","session_id":"s2","terminal":{"cols":120,"rows":40}}"#,
        ];
        for line in answers {
            let frame: ResponseFrame = serde_json::from_str(line).unwrap();
            assert_eq!(serde_json::to_string(&frame).unwrap(), line);
        }
        // A node that predates terminals lists no `terminal`: a session on
        // pipes.
        let old = r#"{"v":1,"seq":12,"result":"processes","request_id":"req-42","sessions":[{"session_id":"s1","pid":4242,"running":true,"stdout_bytes":3,"stderr_bytes":0,"bytes_written":11}]}"#;
        let frame: ResponseFrame = serde_json::from_str(old).unwrap();
        let Response::Processes { sessions, .. } = frame.result else {
            panic!("{frame:?}");
        };
        assert!(!sessions[0].terminal);
        // `"terminal": null` is no terminal; a side outside 1..=1000 is
        // refused.
        let null = r#"{"v":1,"seq":8,"op":"start_process","request_id":"req-42","executable":"cat","terminal":null}"#;
        let frame: RequestFrame = serde_json::from_str(null).unwrap();
        let Operation::StartProcess { spec, .. } = frame.op else {
            panic!("{frame:?}");
        };
        assert_eq!(spec.terminal, None);
        for size in ["[0,24]", "[1001,24]", "[80,0]", "[80,1001]", "[65536,1]"] {
            let [cols, rows]: [u32; 2] = serde_json::from_str(size).unwrap();
            let terminal = format!(r#"{{"cols":{cols},"rows":{rows}}}"#);
            for line in [
                format!(
                    r#"{{"v":1,"seq":8,"op":"start_process","request_id":"r","executable":"cat","terminal":{terminal}}}"#
                ),
                format!(
                    r#"{{"v":1,"seq":8,"op":"resize_terminal","request_id":"r","session_id":"s1","terminal":{terminal}}}"#
                ),
            ] {
                assert!(
                    serde_json::from_str::<RequestFrame>(&line).is_err(),
                    "{line}"
                );
            }
        }
        let edge = r#"{"v":1,"seq":8,"op":"resize_terminal","request_id":"r","session_id":"s1","terminal":{"cols":1000,"rows":1}}"#;
        assert!(serde_json::from_str::<RequestFrame>(edge).is_ok());
        // Stdin text never reaches a log through `Debug`.
        let op = Operation::WriteStdin {
            request_id: RequestId::new("req-42").unwrap(),
            session_id: "s1".into(),
            input: StdinText::from("hunter2\n"),
            close: false,
        };
        let shown = format!("{op:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("8 bytes"), "{shown}");
    }
}

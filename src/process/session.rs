//! Sessions: a governed process that is talked to while it runs.
//!
//! A [`Session`] is a process launched like any other (the same launcher,
//! containment, confinement, timeout and ladder, the same one evidence)
//! with two differences:
//!
//! - its stdin is a pipe the caller writes ([`Session::write_stdin`],
//!   [`Session::close_stdin`]) instead of `/dev/null`;
//! - its output can be read while it runs: every byte of stdout and stderr
//!   (after secret redaction, as in the evidence) is kept in a bounded
//!   buffer per stream and addressed by its **offset** in the stream.
//!   [`Session::read`] long-polls from given offsets; [`Session::output`]
//!   is an async [`Stream`](futures_core::Stream) of the same chunks. A
//!   reader that falls more than the buffer behind is told how many bytes
//!   it lost ([`Chunk::lost`], [`OutputEvent::Lost`]), never blocks the
//!   process, and memory stays bounded whatever the process writes.
//!
//! The evidence's capture (head and tail, [`crate::process::capture`]) is
//! unchanged, and the evidence gains [`Interactions`]: how many bytes were
//! written to stdin and in how many writes, whether stdin was closed, the
//! signals asked for, and whether the idle timeout ended the session. Never
//! what was written: stdin may carry secrets.
//!
//! # Terminal
//!
//! [`SessionOptions::with_terminal`] runs the session on a pseudo-terminal
//! instead of pipes: its slave is the process's stdin, stdout, stderr and
//! the controlling terminal of a new session (the process leads it;
//! isolated, the sandbox's init leads it and the program runs in its
//! foreground group). The program sees a terminal (`isatty`, `/dev/tty`),
//! a prompt on `/dev/tty` is answered through [`Session::write_stdin`],
//! Ctrl-C written to it is the line discipline's `SIGINT`, and
//! [`Session::resize`] sets the window size (`SIGWINCH`). The output is one
//! stream, stdout (with the terminal's `\r\n` and echo); stderr stays
//! empty. [`Session::close_stdin`] writes the terminal's end-of-file
//! (Ctrl-D). Only the clone3 spawner can do this: in the group tier a
//! terminal session is refused ([`ProcessError::TerminalUnavailable`]).
//!
//! # Signals
//!
//! [`Session::signal`] asks, it does not send:
//! [`SessionSignal::Interrupt`] is an [`Event::Interrupt`] for the process
//! machine, which forwards `SIGINT` to the group only while the process
//! runs, no stop began and the group id is still the root's (the same door
//! as every other signal, `process::effects`);
//! [`SessionSignal::Terminate`] is [`Running::cancel`] (the ladder);
//! [`SessionSignal::Kill`] is [`Running::cancel_within`] a zero grace.
//!
//! A session's process starts with `SIGINT` at its default action even when
//! the embedding process ignores it (a background job, a service), in the
//! tiers the clone3 spawner starts (cgroup, pid namespace, isolated): an
//! interrupt then means what a terminal's Ctrl-C means, and a shell can
//! trap it. In the group tier (`posix_spawn`) an ignored `SIGINT` stays
//! ignored, as for any exec.
//!
//! # Record
//!
//! The buffer keeps the newest bytes for readers and the evidence the head
//! and tail; the **whole** output can be recorded too, as it arrives, by
//! an [`OutputRecord`] the embedder's layer supplies (the runtime's, with
//! a spill store: each stream written to a spilled result of the request,
//! up to a cap; see `runtime::RuntimeConfig::with_session_record`). The
//! evidence then says where each stream went and how much of it
//! ([`Recorded`]).
//!
//! # Lifetime
//!
//! A session ends like any governed process: on its own, at its timeout
//! (the invocation's), when cancelled, or after
//! [`SessionOptions::idle_timeout`] without a read or a write. Launched
//! for a request (`runtime::Executor::start`), it is one of the request's
//! processes, and the request's cleanup stops it (its whole tree, in its
//! cgroup or pid namespace) before any file is removed.
//!
//! [`Event::Interrupt`]: crate::machine::process::Event::Interrupt

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;
use tokio::sync::{Notify, watch};

use super::evidence::Evidence;
use super::invocation::Invocation;
use super::launch::{LaunchOptions, ProcessError, Running, launch};
use crate::machine::process::Stream;
use crate::sync::lock_std as lock;

/// The default size of each stream's buffer: 256 KiB.
pub const DEFAULT_BUFFER: usize = 256 * 1024;

/// The largest buffer a session may ask for, per stream: 16 MiB.
pub const MAX_BUFFER: usize = 16 * 1024 * 1024;

/// How a session is run, besides its invocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionOptions {
    /// Bytes kept per stream for readers (the newest ones). Memory grows
    /// with what is kept, up to this.
    pub buffer: usize,
    /// Ends the session (as a cancel: `TERM`, the grace, `KILL`) after
    /// this long without a read, a write or a signal; `None`: only the
    /// invocation's timeout bounds it.
    pub idle_timeout: Option<Duration>,
    /// Run on a pseudo-terminal of this size instead of pipes (see
    /// *Terminal* in the [module documentation](self)); `None`: pipes.
    pub terminal: Option<WindowSize>,
    /// A session proper (a stdin pipe, counted in the session bounds,
    /// interactions in its evidence); `false`: a streamed run (stdin on
    /// `/dev/null`, only its output readable while it runs).
    pub(crate) stdin: bool,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            buffer: DEFAULT_BUFFER,
            idle_timeout: None,
            terminal: None,
            stdin: true,
        }
    }
}

/// The largest terminal side (columns or rows) the edges accept (the MCP
/// tools, the wire): 1000.
pub const MAX_TERMINAL_SIDE: u16 = 1000;

/// A terminal's size in character cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WindowSize {
    /// Columns (at least 1).
    pub cols: u16,
    /// Rows (at least 1).
    pub rows: u16,
}

impl WindowSize {
    /// `cols` × `rows`, each at least 1.
    pub fn new(cols: u16, rows: u16) -> Self {
        WindowSize {
            cols: cols.max(1),
            rows: rows.max(1),
        }
    }
}

impl Default for WindowSize {
    /// 80 × 24.
    fn default() -> Self {
        WindowSize::new(80, 24)
    }
}

impl SessionOptions {
    /// Keeps `bytes` per stream for readers (clamped to 1 ..= [`MAX_BUFFER`]).
    #[must_use]
    pub fn with_buffer(mut self, bytes: usize) -> Self {
        self.buffer = bytes.clamp(1, MAX_BUFFER);
        self
    }

    /// Ends the session after `idle` without a read, a write or a signal.
    #[must_use]
    pub fn with_idle_timeout(mut self, idle: Duration) -> Self {
        self.idle_timeout = Some(idle);
        self
    }

    /// A streamed run: a plain run (stdin on `/dev/null`, not a session
    /// for any bound, no interactions in its evidence) whose output is
    /// readable while it runs.
    pub(crate) fn streamed_run() -> Self {
        SessionOptions {
            stdin: false,
            ..SessionOptions::default()
        }
    }

    /// Runs the session on a pseudo-terminal of `size` (see *Terminal* in
    /// the [module documentation](self)).
    #[must_use]
    pub fn with_terminal(mut self, size: WindowSize) -> Self {
        self.terminal = Some(WindowSize::new(size.cols, size.rows));
        self
    }
}

/// What the caller did to a session, as the evidence reports it: counts
/// and kinds only, never the bytes written (stdin may hold secrets).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Interactions {
    /// Bytes written to stdin.
    pub bytes_written: u64,
    /// Successful writes to stdin.
    pub writes: u64,
    /// Whether the caller closed stdin.
    pub stdin_closed: bool,
    /// The signals asked for, in order.
    pub signals: Vec<SessionSignal>,
    /// Whether [`SessionOptions::idle_timeout`] ended the session.
    pub idle_timeout: bool,
    /// A terminal session's window size at the end (the last one set);
    /// `None` for a session on pipes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal: Option<WindowSize>,
    /// How many times [`Session::resize`] set it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub resizes: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Where a session's whole output goes as it arrives, besides its buffer:
/// each chunk of a stream (redacted, as everywhere else) in order, then,
/// once the output ended, what was recorded (for the evidence). Called
/// from the task that reads the process's output: `append` must not
/// block for long (a write to a local file).
pub trait OutputRecord: Send + Sync + fmt::Debug {
    /// `data` arrived on `stream`, after everything appended before.
    fn append(&self, stream: Stream, data: &[u8]);
    /// The output ended: what each stream's record holds. Called once.
    fn finish(&self) -> Recorded;
}

/// What a session's [`OutputRecord`] holds, as the evidence reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Recorded {
    /// Standard output's record; `None`: it wrote nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<RecordedStream>,
    /// Standard error's record; `None`: it wrote nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<RecordedStream>,
}

/// One stream's record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RecordedStream {
    /// Where it is (the runtime's record: a spill locator, read with the
    /// spill store's `read`, or MCP's `spill_read`); empty when the record
    /// could not be made (`error` says why).
    pub locator: String,
    /// Bytes recorded: the stream's first ones, up to the cap.
    pub bytes: u64,
    /// Bytes the stream wrote past the cap, not recorded.
    pub dropped: u64,
    /// Recording stopped at a write error (its kind, e.g. `"StorageFull"`;
    /// never a path): what is recorded is what was written before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl RecordedStream {
    /// A record at `locator`, nothing in it yet.
    pub fn new(locator: impl Into<String>) -> Self {
        RecordedStream {
            locator: locator.into(),
            ..RecordedStream::default()
        }
    }
}

/// A signal a caller may ask a session for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SessionSignal {
    /// `SIGINT` to the group (a terminal's Ctrl-C), if the process machine
    /// forwards it (before any stop, while the group id is the root's).
    Interrupt,
    /// Stop: `SIGTERM`, the grace, then `SIGKILL` ([`Running::cancel`]).
    Terminate,
    /// Stop now: `SIGTERM` then `SIGKILL` with no grace.
    Kill,
}

/// Why a session refused a request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// Stdin was closed (by [`Session::close_stdin`]), or the process no
    /// longer reads it (every reader closed it: `EPIPE`).
    #[error("the session's stdin is closed")]
    StdinClosed,
    /// The session settled; only its output and evidence remain.
    #[error("the session has ended")]
    Ended,
    /// Writing to stdin (or resizing the terminal) failed otherwise.
    #[error("writing to the session's stdin failed: {0}")]
    Io(#[source] std::io::Error),
    /// [`Session::resize`] of a session without a terminal.
    #[error("the session has no terminal")]
    NotATerminal,
}

impl SessionError {
    /// A stable code: `stdin_closed`, `session_ended`, `io_error`,
    /// `not_a_terminal`.
    pub fn code(&self) -> &'static str {
        match self {
            SessionError::StdinClosed => "stdin_closed",
            SessionError::Ended => "session_ended",
            SessionError::Io(_) => "io_error",
            SessionError::NotATerminal => "not_a_terminal",
        }
    }
}

/// Where to read each stream from: the offset of the next byte wanted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offsets {
    /// The next byte of stdout.
    pub stdout: u64,
    /// The next byte of stderr.
    pub stderr: u64,
}

/// Part of one stream, from a [`Session::read`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Chunk {
    /// The offset of `data`'s first byte in the stream.
    pub offset: u64,
    /// Bytes asked for that left the buffer before they were read: the
    /// reader fell behind. `data` starts `lost` bytes after the offset
    /// asked for.
    pub lost: u64,
    /// The bytes (redacted like the evidence's capture).
    pub data: Vec<u8>,
}

impl Chunk {
    /// The offset to ask for next.
    pub fn next(&self) -> u64 {
        self.offset + self.data.len() as u64
    }
}

/// What a [`Session::read`] returns.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Output {
    /// Stdout from the offset asked for.
    pub stdout: Chunk,
    /// Stderr from the offset asked for.
    pub stderr: Chunk,
    /// No more output will come past this answer: the process settled
    /// and this answer reaches the end of both streams (a read cut by its
    /// `max` after the process settled is not the end: read on from
    /// [`Output::next`]).
    pub ended: bool,
}

impl Output {
    /// The offsets to ask for next.
    pub fn next(&self) -> Offsets {
        Offsets {
            stdout: self.stdout.next(),
            stderr: self.stderr.next(),
        }
    }
}

/// One item of a session's [`OutputStream`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OutputEvent {
    /// Bytes of one stream, starting at `offset`.
    Data {
        /// Which stream.
        stream: Stream,
        /// The offset of the first byte.
        offset: u64,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// `bytes` of `stream` left the buffer before this reader read them.
    Lost {
        /// Which stream.
        stream: Stream,
        /// How many.
        bytes: u64,
    },
}

/// One stream's newest bytes, addressed by their offset in the stream.
#[derive(Debug)]
struct Ring {
    buf: VecDeque<u8>,
    /// The offset one past the newest byte (every byte ever pushed).
    end: u64,
    cap: usize,
}

impl Ring {
    fn new(cap: usize) -> Self {
        Ring {
            buf: VecDeque::new(),
            end: 0,
            cap,
        }
    }

    fn start(&self) -> u64 {
        self.end - self.buf.len() as u64
    }

    fn push(&mut self, data: &[u8]) {
        self.end += data.len() as u64;
        // Only the newest `cap` bytes can be kept.
        let data = &data[data.len().saturating_sub(self.cap)..];
        let over = (self.buf.len() + data.len()).saturating_sub(self.cap);
        self.buf.drain(..over);
        self.buf.extend(data);
    }

    /// From `from`, at most `max` bytes.
    fn read(&self, from: u64, max: usize) -> Chunk {
        let start = self.start();
        let offset = from.clamp(start, self.end);
        let lost = offset - from.min(offset);
        let skip = (offset - start) as usize;
        let take = (self.buf.len() - skip).min(max);
        // The ring's two halves, copied whole (not byte by byte).
        let (a, b) = self.buf.as_slices();
        let mut data = Vec::with_capacity(take);
        let from_a = a.len().saturating_sub(skip).min(take);
        if from_a > 0 {
            data.extend_from_slice(&a[skip..skip + from_a]);
        }
        let b_skip = skip.saturating_sub(a.len());
        data.extend_from_slice(&b[b_skip..b_skip + (take - from_a)]);
        Chunk { offset, lost, data }
    }
}

/// The output kept for readers, shared by the driver (which pushes) and
/// the session's handles.
#[derive(Debug)]
struct Log {
    streams: [Ring; 2],
    ended: bool,
}

/// A session's side of a launch: the output log, stdin, the interactions.
pub(crate) struct SessionShared {
    log: std::sync::Mutex<Log>,
    /// Bumped at every push and at the end.
    changed: watch::Sender<u64>,
    stdin: tokio::sync::Mutex<Option<pipe::Sender>>,
    interactions: std::sync::Mutex<Interactions>,
    /// Interrupts asked for and not yet handed to the machine: each one is
    /// an event of its own (three quick Ctrl-Cs are three).
    interrupts: AtomicU32,
    /// Wakes the driver for an interrupt.
    pub(crate) poke: Notify,
    /// Milliseconds since `epoch` of the last read, write or signal.
    active_ms: AtomicU64,
    epoch: std::time::Instant,
    options: SessionOptions,
    /// A terminal session: the pseudo-terminal's master, for resizes.
    terminal: std::sync::OnceLock<std::os::fd::OwnedFd>,
    /// Where the whole output goes too, if anywhere.
    record: Option<Arc<dyn OutputRecord>>,
    /// What it held at the end.
    recorded: std::sync::OnceLock<Recorded>,
}

impl fmt::Debug for SessionShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionShared")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

fn slot(stream: Stream) -> usize {
    match stream {
        Stream::Stdout => 0,
        Stream::Stderr => 1,
    }
}

impl SessionShared {
    pub(crate) fn new(options: SessionOptions, record: Option<Arc<dyn OutputRecord>>) -> Self {
        let cap = options.buffer.clamp(1, MAX_BUFFER);
        SessionShared {
            log: std::sync::Mutex::new(Log {
                streams: [Ring::new(cap), Ring::new(cap)],
                ended: false,
            }),
            changed: watch::channel(0).0,
            stdin: tokio::sync::Mutex::new(None),
            interactions: std::sync::Mutex::new(Interactions::default()),
            interrupts: AtomicU32::new(0),
            poke: Notify::new(),
            active_ms: AtomicU64::new(0),
            epoch: std::time::Instant::now(),
            options,
            terminal: std::sync::OnceLock::new(),
            record,
            recorded: std::sync::OnceLock::new(),
        }
    }

    /// The options the session was started with.
    pub(crate) fn options(&self) -> &SessionOptions {
        &self.options
    }

    /// A terminal session's master (kept for resizes).
    pub(crate) fn set_terminal(&self, master: std::os::fd::OwnedFd) {
        lock(&self.interactions).terminal = self.options.terminal;
        let _ = self.terminal.set(master);
    }

    /// The driver read (and redacted) `data` from `stream`.
    pub(crate) fn push(&self, stream: Stream, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        if let Some(record) = &self.record {
            record.append(stream, data);
        }
        lock(&self.log).streams[slot(stream)].push(data);
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// What the record held at the end (`None`: no record); finishes it
    /// on the first call.
    pub(crate) fn recorded(&self) -> Option<Recorded> {
        let record = self.record.as_ref()?;
        Some(self.recorded.get_or_init(|| record.finish()).clone())
    }

    /// No more output: the driver settled. Our end of stdin goes too, so
    /// that nothing left holding the pipe (a descendant outside the group
    /// tier's reach) waits on it for good; a write in progress keeps it
    /// until that write fails.
    pub(crate) fn end(&self) {
        if let Ok(mut stdin) = self.stdin.try_lock() {
            stdin.take();
        }
        lock(&self.log).ended = true;
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Takes the interrupts asked for since the last call.
    pub(crate) fn take_interrupts(&self) -> u32 {
        self.interrupts.swap(0, Ordering::SeqCst)
    }

    /// The interactions so far, for the evidence.
    pub(crate) fn interactions(&self) -> Interactions {
        lock(&self.interactions).clone()
    }

    fn touch(&self) {
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.active_ms.fetch_max(ms, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.active_ms.load(Ordering::Relaxed));
        self.epoch.elapsed().saturating_sub(last)
    }

    fn snapshot(&self, from: Offsets, max: usize) -> Output {
        let log = lock(&self.log);
        let stdout = log.streams[0].read(from.stdout, max);
        let stderr = log.streams[1].read(from.stderr, max);
        // Ended for this reader only once nothing is left past what it
        // got: a read cut by `max` after the process settled is not the end.
        let ended =
            log.ended && stdout.next() == log.streams[0].end && stderr.next() == log.streams[1].end;
        Output {
            stdout,
            stderr,
            ended,
        }
    }
}

/// A governed process with a stdin pipe and its output readable while it
/// runs (see the [module documentation](self)). Cheap to clone; every clone
/// is the same session.
#[derive(Clone)]
pub struct Session {
    running: Running,
    shared: Arc<SessionShared>,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("pid", &self.running.pid())
            .finish_non_exhaustive()
    }
}

/// A session's state at a glance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct SessionStatus {
    /// The root's pid.
    pub pid: u32,
    /// Whether the process has not settled yet.
    pub running: bool,
    /// Bytes of stdout and of stderr so far (after redaction).
    pub output: Offsets,
    /// Bytes written to stdin so far.
    pub bytes_written: u64,
    /// How long since the last read, write or signal.
    #[serde(serialize_with = "millis")]
    pub idle: Duration,
    /// Whether it runs on a pseudo-terminal.
    pub terminal: bool,
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Launches `invocation` as a session (see [`crate::process::launch`] for
/// everything else a launch does and refuses).
///
/// # Errors
///
/// As [`crate::process::launch`]; also [`ProcessError::Spawn`] if the stdin
/// pipe cannot be made.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use custodian::process::session::{self, Offsets, SessionOptions};
/// use custodian::process::{Invocation, InvocationSpec, LaunchOptions};
///
/// let workspace = tempfile::tempdir()?;
/// let inv = Invocation::validate(InvocationSpec::new("cat"))?;
/// let options = LaunchOptions::new(workspace.path());
/// let cat = session::start(inv, &options, SessionOptions::default())?;
/// cat.write_stdin(b"hello\n").await?;
/// let out = cat.read(Offsets::default(), 4096, Duration::from_secs(5)).await;
/// assert_eq!(out.stdout.data, b"hello\n");
/// cat.close_stdin().await;
/// let evidence = cat.wait().await;
/// assert_eq!(evidence.interactions.as_ref().map(|i| i.bytes_written), Some(6));
/// # Ok(()) }
/// ```
pub fn start(
    invocation: Invocation,
    options: &LaunchOptions,
    session: SessionOptions,
) -> Result<Session, ProcessError> {
    let mut options = options.clone();
    options.session = Some(session);
    let running = launch(invocation, &options)?;
    Ok(Session::of(&running).expect("a session launch has a session"))
}

impl Session {
    /// The session of `running`, if it was launched as one.
    pub fn of(running: &Running) -> Option<Session> {
        let shared = running.session_shared()?;
        Some(Session {
            running: running.clone(),
            shared,
        })
    }

    /// The process, for [`Running::cancel`], [`Running::pid`] and the rest.
    pub fn running(&self) -> &Running {
        &self.running
    }

    /// Output from `from`, at most `max` bytes per stream: at once if there
    /// is any past `from` (or the output ended), else as soon as some
    /// arrives, waiting at most `wait`. Counts as activity.
    pub async fn read(&self, from: Offsets, max: usize, wait: Duration) -> Output {
        self.shared.touch();
        let deadline = tokio::time::Instant::now() + wait;
        let mut rx = self.shared.changed.subscribe();
        loop {
            let out = self.shared.snapshot(from, max);
            let fresh = |c: &Chunk| c.lost > 0 || !c.data.is_empty();
            if out.ended || fresh(&out.stdout) || fresh(&out.stderr) {
                return out;
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                // The deadline, or the log is gone (cannot happen while
                // we hold it): what there is.
                _ => return self.shared.snapshot(from, max),
            }
        }
    }

    /// Every byte of output from the start, as it comes, in chunks of at
    /// most 256 KiB; ends once the session's output ended. Reading from the
    /// stream does not count as activity for the idle timeout.
    pub fn output(&self) -> OutputStream {
        self.output_from(Offsets::default())
    }

    /// [`Session::output`] from `from`.
    pub fn output_from(&self, from: Offsets) -> OutputStream {
        OutputStream {
            shared: self.shared.clone(),
            next: from,
            pending: VecDeque::new(),
            wait: None,
            done: false,
        }
    }

    /// Writes all of `data` to the process's stdin. Waits while the pipe is
    /// full (the process is not reading); wrap in a timeout to bound that.
    ///
    /// # Errors
    ///
    /// [`SessionError::Ended`] once the process settled,
    /// [`SessionError::StdinClosed`] after [`Session::close_stdin`] or when
    /// the process closed its end, [`SessionError::Io`] otherwise.
    pub async fn write_stdin(&self, data: &[u8]) -> Result<(), SessionError> {
        if self.running.try_settled().is_some() {
            return Err(SessionError::Ended);
        }
        self.shared.touch();
        let mut stdin = self.shared.stdin.lock().await;
        let Some(pipe) = stdin.as_mut() else {
            return Err(SessionError::StdinClosed);
        };
        match pipe.write_all(data).await {
            Ok(()) => {
                let mut i = lock(&self.shared.interactions);
                i.bytes_written += data.len() as u64;
                i.writes += 1;
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                *stdin = None;
                Err(SessionError::StdinClosed)
            }
            Err(e) => Err(SessionError::Io(e)),
        }
    }

    /// Closes the process's stdin (it reads end-of-file). Idempotent. Waits
    /// for a write in progress (wrap that write in a timeout, or stop the
    /// session, if the process does not read).
    ///
    /// A terminal session's stdin is the terminal itself, which stays
    /// open: this writes the terminal's end-of-file character (Ctrl-D;
    /// read as end-of-file at the start of a line) and refuses every later
    /// write.
    pub async fn close_stdin(&self) {
        self.shared.touch();
        let mut stdin = self.shared.stdin.lock().await;
        if let Some(mut pipe) = stdin.take() {
            if self.shared.terminal.get().is_some() {
                // Best effort: a terminal that no one reads keeps it.
                let eof = [4u8];
                let _ = tokio::time::timeout(Duration::from_secs(1), pipe.write_all(&eof)).await;
            }
            lock(&self.shared.interactions).stdin_closed = true;
        }
    }

    /// Sets a terminal session's window size; the kernel tells the
    /// terminal's foreground process group (`SIGWINCH`).
    ///
    /// # Errors
    ///
    /// [`SessionError::NotATerminal`] for a session on pipes,
    /// [`SessionError::Ended`] once settled, [`SessionError::Io`] if the
    /// kernel refuses.
    pub fn resize(&self, size: WindowSize) -> Result<(), SessionError> {
        let Some(master) = self.shared.terminal.get() else {
            return Err(SessionError::NotATerminal);
        };
        if self.running.try_settled().is_some() {
            return Err(SessionError::Ended);
        }
        self.shared.touch();
        let size = WindowSize::new(size.cols, size.rows);
        set_window(master, size).map_err(|e| SessionError::Io(e.into()))?;
        let mut i = lock(&self.shared.interactions);
        i.resizes += 1;
        i.terminal = Some(size);
        Ok(())
    }

    /// Whether the session runs on a pseudo-terminal.
    pub fn is_terminal(&self) -> bool {
        self.shared.terminal.get().is_some()
    }

    /// Asks for `signal` (see *Signals* in the [module
    /// documentation](self)). A no-op once settled.
    pub fn signal(&self, signal: SessionSignal) {
        self.shared.touch();
        lock(&self.shared.interactions).signals.push(signal);
        match signal {
            SessionSignal::Interrupt => {
                self.shared.interrupts.fetch_add(1, Ordering::SeqCst);
                self.shared.poke.notify_one();
            }
            SessionSignal::Terminate => self.running.cancel(),
            SessionSignal::Kill => self.running.cancel_within(Duration::ZERO),
        }
    }

    /// The session's state now.
    pub fn status(&self) -> SessionStatus {
        let log = lock(&self.shared.log);
        SessionStatus {
            pid: self.running.pid(),
            running: self.running.try_settled().is_none(),
            output: Offsets {
                stdout: log.streams[0].end,
                stderr: log.streams[1].end,
            },
            bytes_written: lock(&self.shared.interactions).bytes_written,
            idle: self.shared.idle_for(),
            terminal: self.is_terminal(),
        }
    }

    /// Waits for the process to settle; its evidence (with
    /// [`Evidence::interactions`]).
    pub async fn wait(&self) -> Arc<Evidence> {
        self.running.settled().await
    }
}

/// `TIOCSWINSZ` on a pseudo-terminal's master.
pub(crate) fn set_window(
    master: impl std::os::fd::AsFd,
    size: WindowSize,
) -> rustix::io::Result<()> {
    rustix::termios::tcsetwinsize(
        master,
        rustix::termios::Winsize {
            ws_row: size.rows,
            ws_col: size.cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    )
}

/// Hands the stdin pipe's write end to the session and starts its idle
/// watch (called once the process started).
pub(crate) fn attach(running: &Running, shared: &Arc<SessionShared>, stdin: pipe::Sender) {
    *shared
        .stdin
        .try_lock()
        .expect("nobody holds a new session's stdin") = Some(stdin);
    shared.touch();
    if let Some(idle) = shared.options.idle_timeout {
        let running = running.clone();
        let shared = shared.clone();
        tokio::spawn(async move {
            loop {
                let left = idle.saturating_sub(shared.idle_for());
                if left.is_zero() {
                    lock(&shared.interactions).idle_timeout = true;
                    running.cancel();
                    return;
                }
                tokio::select! {
                    _ = running.settled() => return,
                    _ = tokio::time::sleep(left) => {}
                }
            }
        });
    }
}

/// A session's output as an async stream (see [`Session::output`]).
pub struct OutputStream {
    shared: Arc<SessionShared>,
    next: Offsets,
    pending: VecDeque<OutputEvent>,
    wait: Option<Pin<Box<dyn std::future::Future<Output = ()> + Send>>>,
    done: bool,
}

impl fmt::Debug for OutputStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutputStream")
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

/// The most bytes one stream item carries.
const STREAM_CHUNK: usize = 256 * 1024;

impl OutputStream {
    /// Queues what the log holds past `next`; whether anything was queued.
    fn fill(&mut self) -> bool {
        let out = self.shared.snapshot(self.next, STREAM_CHUNK);
        let mut any = false;
        for (stream, chunk) in [(Stream::Stdout, &out.stdout), (Stream::Stderr, &out.stderr)] {
            if chunk.lost > 0 {
                self.pending.push_back(OutputEvent::Lost {
                    stream,
                    bytes: chunk.lost,
                });
                any = true;
            }
            if !chunk.data.is_empty() {
                self.pending.push_back(OutputEvent::Data {
                    stream,
                    offset: chunk.offset,
                    bytes: chunk.data.clone(),
                });
                any = true;
            }
        }
        self.next = out.next();
        if !any && out.ended {
            self.done = true;
        }
        any
    }
}

impl futures_core::Stream for OutputStream {
    type Item = OutputEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<OutputEvent>> {
        let this = &mut *self;
        loop {
            if let Some(ev) = this.pending.pop_front() {
                return Poll::Ready(Some(ev));
            }
            if this.done {
                return Poll::Ready(None);
            }
            if let Some(wait) = this.wait.as_mut() {
                match wait.as_mut().poll(cx) {
                    Poll::Ready(()) => this.wait = None,
                    Poll::Pending => return Poll::Pending,
                }
            }
            // Subscribed before looking: a push after the look wakes us.
            let mut rx = this.shared.changed.subscribe();
            if !this.fill() && !this.done {
                this.wait = Some(Box::pin(async move {
                    let _ = rx.changed().await;
                }));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_keeps_the_newest_bytes_and_reports_what_a_late_reader_lost() {
        let mut r = Ring::new(8);
        r.push(b"abcdef");
        assert_eq!(r.read(0, 100).data, b"abcdef");
        assert_eq!(r.read(4, 100).data, b"ef");
        r.push(b"ghijkl");
        assert_eq!((r.start(), r.end), (4, 12));
        let c = r.read(1, 100);
        assert_eq!(
            (c.offset, c.lost, c.data.as_slice()),
            (4, 3, &b"efghijkl"[..])
        );
        assert_eq!(c.next(), 12);
        let c = r.read(6, 3);
        assert_eq!((c.offset, c.lost, c.data.as_slice()), (6, 0, &b"ghi"[..]));
        // A push larger than the buffer keeps its own tail.
        r.push(b"0123456789");
        let c = r.read(12, 100);
        assert_eq!(
            (c.offset, c.lost, c.data.as_slice()),
            (14, 2, &b"23456789"[..])
        );
        // An offset past the end reads nothing and loses nothing.
        let c = r.read(99, 100);
        assert_eq!((c.offset, c.lost, c.data.len()), (22, 0, 0));
        assert!(r.buf.len() <= 8);
    }

    /// Against a plain copy of the whole stream, across every way the ring
    /// can wrap: each read is the stream's bytes from the offset it reports.
    #[test]
    fn a_ring_reads_what_the_stream_holds_however_it_wrapped() {
        let mut r = Ring::new(13);
        let mut all = Vec::new();
        let mut seed = 7u32;
        for round in 0..400u32 {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            let n = (seed >> 16) as usize % 9;
            let chunk: Vec<u8> = (0..n)
                .map(|i| (round as u8).wrapping_add(i as u8))
                .collect();
            r.push(&chunk);
            all.extend_from_slice(&chunk);
            let end = all.len() as u64;
            for from in [0, end.saturating_sub(20), end.saturating_sub(5), end] {
                for max in [0, 1, 4, 100] {
                    let c = r.read(from, max);
                    let start = end.saturating_sub(13).max(from).min(end);
                    assert_eq!(c.offset, start, "round {round} from {from}");
                    assert_eq!(c.lost, start - from.min(start));
                    let want = &all[start as usize..(start as usize + max).min(all.len())];
                    assert_eq!(c.data, want, "round {round} from {from} max {max}");
                }
            }
        }
    }
}

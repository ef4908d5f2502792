//! The node side: maps wire requests onto a workspace runtime.
//!
//! [`Node`] holds the per-request bookkeeping that makes the wire idempotent
//! (open once, clean up once, answer duplicates from a bounded cache) and
//! delegates the work itself to a [`NodeWorkspace`]: the real workspace
//! runtime in production, a counting fake in tests. Its one table holds
//! each request's row ([`NodeRow`]): the machine's state and, from the
//! open's success to the cleanup's end, what the open returned (the
//! production node: the request's scope), which every operation the
//! machine lets through is handed; the workspace keeps no table.
//!
//! # Concurrency
//!
//! Every decision is [`machine::node::step`](crate::machine::node::step)
//! taken under the lock of one [`sync::Slots`](crate::sync::Slots) (the
//! table), through [`node_slot_step`]: the lock only makes each step atomic
//! and files what the step returned; nothing is awaited under it. The same
//! table holds each request's cleanup cell — the step's `StartCleanup` hands
//! out its one owner guard, `AwaitCleanup` a waiter (also before the owner
//! exists, while a cleanup waits for a running open), and a dropped guard
//! publishes `Abandoned` — and the bounded memory of finished requests, so
//! the decision states and the cleanups never disagree and are evicted
//! together. [`Node::serve`] takes each frame's decision as it reads the
//! frame ([`Node::admit`]) and only then carries it out in a task of its
//! own, so a connection's requests are decided in the order the peer sent
//! them: the edge's open is never decided after the cleanup it sent later
//! (which could otherwise answer "already gone", be forgotten once the
//! bounded memory moves on, and let the open create a job nobody cleans).
//! The open and the cleanup each run in their own task, so they
//! always reach their `OpenFinished` / `CleanupFinished` step whatever
//! their callers do. loom explores these races on the real table and the
//! real decisions (`loom-tests/tests/runtime.rs`).

use std::fmt;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, Semaphore, mpsc};
use tokio::time::Instant;
use tracing::{Instrument, debug, info_span, warn};

use super::codec::{FrameError, FrameReader, decode_request, encode_line};
use super::message::{
    CleanupStatus, CleanupSummary, Code, MAX_READ_BYTES, MAX_READ_WAIT_MS, Offsets, Operation,
    PolicyRefusal, ProcessSummary, Response, ResponseFrame, RunSpec, SessionInfo, SessionOutput,
    SessionSignal, SessionStarted, StartSpec, StdinText, VERSION, WindowSize, codes,
};
use crate::error::SafeCode;
pub use crate::machine::node::CleanupVerdict;
use crate::machine::node::{self as decide, Action, Input, Refusal, Reply};
use crate::request::RequestId;
use crate::sync::{Abandoned, Applied, Elected, OwnerGuard, SlotEffect, SlotStep, Slots, Waiter};

#[cfg(unix)]
use super::reserve::FdReserve;

/// The workspace operations the node performs for the wire.
///
/// Implementations key everything by request id and must be idempotent
/// where the contract says so; the [`Node`] already guarantees that
/// `cleanup` is called at most once per request id while its result is in
/// the cache, and never concurrently for the same id.
pub trait NodeWorkspace: Send + Sync + 'static {
    /// What an open request holds (the production node: the request's
    /// scope, see [`crate::request`]). [`NodeWorkspace::open`] returns it;
    /// the [`Node`] files it in the request's row of its one table, in the
    /// same step as the open's `OpenFinished`, hands it to every operation
    /// the machine lets through, and drops it with the row's
    /// `CleanupFinished`. The workspace keeps no table of its own.
    type Held: Send + Sync + 'static;

    /// Opens the request's job namespace; returns what the open request
    /// holds.
    ///
    /// # Errors
    ///
    /// A safe code saying why the namespace could not be opened.
    fn open(
        &self,
        request: &RequestId,
    ) -> impl Future<Output = Result<Self::Held, SafeCode>> + Send;

    /// Creates and registers a request-owned artifact; returns bytes written.
    ///
    /// # Errors
    ///
    /// A safe code (invalid name, not open, filesystem refusal, ...).
    fn write_artifact(
        &self,
        request: &RequestId,
        held: &Self::Held,
        name: &str,
        contents: &[u8],
    ) -> impl Future<Output = Result<u64, SafeCode>> + Send;

    /// Runs one governed process for the request until it settles.
    ///
    /// # Errors
    ///
    /// A safe code when the process could not be launched.
    fn run(
        &self,
        request: &RequestId,
        held: &Self::Held,
        spec: RunSpec,
    ) -> impl Future<Output = Result<ProcessSummary, SafeCode>> + Send;

    /// Decides, before [`NodeWorkspace::run`], whether the node's own policy
    /// lets `spec` run; the default admits everything (the node trusts its
    /// edge).
    ///
    /// # Errors
    ///
    /// The [`PolicyRefusal`] to answer with; nothing is launched.
    fn admit_run(&self, _request: &RequestId, _spec: &RunSpec) -> Result<(), PolicyRefusal> {
        Ok(())
    }

    /// Launches one governed process as a session of the request and
    /// returns as soon as it runs. The default runs no session.
    ///
    /// # Errors
    ///
    /// A safe code when nothing was launched (`too_many_sessions`, the
    /// launcher's codes, ...); the default answers `sessions_unsupported`.
    fn start(
        &self,
        _request: &RequestId,
        _held: &Self::Held,
        _spec: StartSpec,
    ) -> impl Future<Output = Result<SessionStarted, SafeCode>> + Send {
        async { Err(codes::SESSIONS_UNSUPPORTED) }
    }

    /// Reads session `session` of the request from `from`, at most `max`
    /// bytes per stream, waiting at most `wait` for output when there is
    /// none (the [`Node`] has already applied the wire's bounds).
    ///
    /// # Errors
    ///
    /// `unknown_session` when the request has no such session; the default
    /// answers `sessions_unsupported`.
    fn read(
        &self,
        _request: &RequestId,
        _held: &Self::Held,
        _session: &str,
        _from: Offsets,
        _max: usize,
        _wait: Duration,
    ) -> impl Future<Output = Result<SessionOutput, SafeCode>> + Send {
        async { Err(codes::SESSIONS_UNSUPPORTED) }
    }

    /// Writes `input` to the session's stdin, then closes it if `close`;
    /// returns the bytes written. `input` is never logged.
    ///
    /// # Errors
    ///
    /// `unknown_session`, `session_ended`, `stdin_closed`, `stdin_blocked`,
    /// `io_error`; the default answers `sessions_unsupported`.
    fn write_stdin(
        &self,
        _request: &RequestId,
        _held: &Self::Held,
        _session: &str,
        _input: &[u8],
        _close: bool,
    ) -> impl Future<Output = Result<u64, SafeCode>> + Send {
        async { Err(codes::SESSIONS_UNSUPPORTED) }
    }

    /// Asks for `signal` to the session.
    ///
    /// # Errors
    ///
    /// `unknown_session`; the default answers `sessions_unsupported`.
    fn signal(
        &self,
        _request: &RequestId,
        _held: &Self::Held,
        _session: &str,
        _signal: SessionSignal,
    ) -> impl Future<Output = Result<(), SafeCode>> + Send {
        async { Err(codes::SESSIONS_UNSUPPORTED) }
    }

    /// Sets a terminal session's window size (the wire has already
    /// checked its bounds).
    ///
    /// # Errors
    ///
    /// `unknown_session`, `not_a_terminal` (a session on pipes),
    /// `session_ended`, `io_error`; the default answers
    /// `sessions_unsupported`.
    fn resize(
        &self,
        _request: &RequestId,
        _held: &Self::Held,
        _session: &str,
        _size: WindowSize,
    ) -> impl Future<Output = Result<(), SafeCode>> + Send {
        async { Err(codes::SESSIONS_UNSUPPORTED) }
    }

    /// The request's sessions, in the order started.
    ///
    /// # Errors
    ///
    /// The default answers `sessions_unsupported`.
    fn list(
        &self,
        _request: &RequestId,
        _held: &Self::Held,
    ) -> impl Future<Output = Result<Vec<SessionInfo>, SafeCode>> + Send {
        async { Err(codes::SESSIONS_UNSUPPORTED) }
    }

    /// Cancels every active process of the request and waits for them to
    /// settle; returns how many there were. `held` is `None` while the
    /// request's open has not finished (nothing was launched for it yet).
    fn cancel(
        &self,
        request: &RequestId,
        held: Option<&Self::Held>,
    ) -> impl Future<Output = u32> + Send;

    /// Cleans up the request: cancels its processes, removes its registered
    /// artifacts, fails closed on anything unexpected.
    fn cleanup(&self, request: &RequestId) -> impl Future<Output = CleanupVerdict> + Send;
}

/// Limits of a [`Node`]. Every bound is answered on the wire, never by
/// dropping the connection silently (`docs/contracts/edge-node-wire.md`,
/// *Bounds*).
#[derive(Clone, Copy, Debug)]
pub struct NodeConfig {
    /// The largest request frame accepted (bigger ones are refused).
    pub max_frame: usize,
    /// Requests handled concurrently per connection; reading pauses beyond.
    pub max_in_flight: usize,
    /// Completed cleanup results kept for duplicate requests.
    pub cleanup_cache: usize,
    /// Requests open on the node at once (an `open_workspace` performed and
    /// its cleanup not finished); an open beyond is answered
    /// `too_many_requests`. Each open request holds descriptors (its job
    /// directory and journal).
    pub max_open_requests: usize,
    /// Requests one connection may hold open at once; an open beyond is
    /// answered `too_many_requests`.
    pub max_open_per_connection: usize,
    /// Bytes of answers a connection may have queued but not yet written
    /// to its peer; beyond, the node stops reading the connection until the
    /// peer reads (backpressure). The answers already being worked on are
    /// still queued, so the bound is exceeded by at most `max_in_flight`
    /// answers.
    pub max_unanswered_bytes: usize,
    /// How long a frame may take from its first byte to its newline; on
    /// expiry the connection is answered `frame_timeout` and closed. `None`
    /// waits for ever.
    pub frame_timeout: Option<Duration>,
    /// How long a connection may stay idle — nothing in flight, no answer
    /// queued, no frame begun — before it is answered `idle_timeout` and
    /// closed; also how long the node waits for a peer to read an answer
    /// before it gives the connection up (or `frame_timeout`, when this is
    /// `None`). `None` waits for ever.
    pub idle_timeout: Option<Duration>,
}

/// The default of [`NodeConfig::max_open_requests`].
pub const DEFAULT_MAX_OPEN_REQUESTS: usize = 10_000;
/// The default of [`NodeConfig::max_open_per_connection`].
pub const DEFAULT_MAX_OPEN_PER_CONNECTION: usize = 5_000;
/// The default of [`NodeConfig::max_unanswered_bytes`]: 4 MiB.
pub const DEFAULT_MAX_UNANSWERED_BYTES: usize = 4 << 20;

impl Default for NodeConfig {
    /// The library's defaults: the bounds above, and no deadline (a node
    /// embedded over stdio or a duplex serves one trusted edge; `custodian
    /// node --socket` sets both deadlines).
    fn default() -> Self {
        NodeConfig {
            max_frame: super::codec::DEFAULT_MAX_FRAME,
            max_in_flight: 256,
            cleanup_cache: 4096,
            max_open_requests: DEFAULT_MAX_OPEN_REQUESTS,
            max_open_per_connection: DEFAULT_MAX_OPEN_PER_CONNECTION,
            max_unanswered_bytes: DEFAULT_MAX_UNANSWERED_BYTES,
            frame_timeout: None,
            idle_timeout: None,
        }
    }
}

/// One open request's place under the node's and its connection's bounds;
/// dropping it gives the place back.
#[derive(Debug)]
struct OpenSlot {
    node: Arc<AtomicUsize>,
    connection: Option<Arc<AtomicUsize>>,
}

impl Drop for OpenSlot {
    fn drop(&mut self) {
        self.node.fetch_sub(1, Ordering::AcqRel);
        if let Some(c) = &self.connection {
            c.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Takes one place under `max` in `count`, or none.
fn take_place(count: &AtomicUsize, max: usize) -> bool {
    count
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .is_ok()
}

/// The node's one per-request table: each request's row (its decision
/// state and, while it is open, what it holds: its scope and its place
/// under the bounds), its cleanup cell, and a bounded memory of finished
/// requests, in one [`Slots`] (one lock; see its theory of operation).
type Table<H> = Slots<RequestId, NodeRow<Opened<H>>, CleanupVerdict>;

/// What an open request's row holds: what the workspace returned for it
/// (its scope) and its place under the node's and its connection's bounds.
#[derive(Debug)]
struct Opened<H> {
    held: Arc<H>,
    _slot: OpenSlot,
}

/// One request's row in a node's table: the machine's state and, from its
/// open's `OpenFinished { ok: true }` to its cleanup's end
/// (`CleanupFinished`, or a cleanup that could not run), what the open
/// request holds. Both change in the same step, under the table's lock
/// ([`node_row_step`]), so no operation finds a request open without its
/// scope or its scope without its state.
pub struct NodeRow<O> {
    state: decide::State,
    open: Option<Arc<O>>,
}

impl<O> NodeRow<O> {
    /// The request's state in the node machine.
    pub fn state(&self) -> &decide::State {
        &self.state
    }

    /// What the open request holds, from its open's success to its
    /// cleanup's end.
    pub fn open(&self) -> Option<&Arc<O>> {
        self.open.as_ref()
    }
}

impl<O> Clone for NodeRow<O> {
    fn clone(&self) -> Self {
        NodeRow {
            state: self.state,
            open: self.open.clone(),
        }
    }
}

impl<O> fmt::Debug for NodeRow<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeRow")
            .field("state", &self.state)
            .field("open", &self.open.is_some())
            .finish()
    }
}

/// Steps one request's row by `input`, as [`Slots::apply`] runs it under
/// the node's table lock: the state by [`node_slot_step`], and what the
/// request holds with it. `opened` is what a successful open returned
/// (with `OpenFinished { ok: true }`): filed in the row. A cleanup's end
/// (`CleanupFinished`) drops what the row held; every other input keeps
/// it.
///
/// Public so that the loom models drive the node's real row glue; a
/// [`Node`] is the only other caller.
pub fn node_row_step<O>(
    row: Option<&NodeRow<O>>,
    input: Input,
    opened: Option<O>,
) -> SlotStep<NodeRow<O>, Vec<Action>> {
    let step = node_slot_step(row.map(NodeRow::state), input);
    let open = match input {
        Input::OpenFinished { ok: true } => opened.map(Arc::new),
        Input::CleanupFinished(_) => None,
        _ => row.and_then(|r| r.open.clone()),
    };
    SlotStep {
        next: step.next.map(|state| NodeRow { state, open }),
        decision: step.decision,
        effect: step.effect,
    }
}

/// The row a request's cleanup that **could not run** leaves, as
/// [`Slots::retry`] files it: the state by [`node_slot_retry`], and nothing
/// held (the request accepts no more work, and no longer counts against
/// the bounds; its next cleanup goes by its id).
///
/// Public so that the loom models drive the node's real retry; a [`Node`]
/// is the only other caller.
pub fn node_row_retry<O>(row: Option<&NodeRow<O>>) -> Option<NodeRow<O>> {
    node_slot_retry(row.map(NodeRow::state)).map(|state| NodeRow { state, open: None })
}

/// Steps one request by `input` with [`machine::node::step`](decide::step),
/// as [`Slots::apply`] runs it under the node's table lock.
///
/// Public so that the loom models drive the node's real table glue; a
/// [`Node`] is the only other caller.
///
/// An id the table does not hold is at
/// [`State::after_restart`](decide::State::after_restart): this process
/// cannot prove that no earlier run of the node opened it, so a cleanup
/// asks the workspace, whose idempotent form checks the disk. The actions
/// choose the table's effect on the cleanup cell: `StartCleanup` owns it
/// (also when an earlier `AwaitCleanup` created it while an open ran),
/// `AwaitCleanup` waits on it. A request that ended without a cleanup to
/// run (already gone at once, or cancelled with no job) is retired: it may
/// be forgotten once the table's bound is reached. Filed states only move
/// on to other forgettable ones (the machine's fences never reopen), and a
/// request whose cleanup runs is never forgotten before it publishes.
pub fn node_slot_step(
    state: Option<&decide::State>,
    input: Input,
) -> SlotStep<decide::State, Vec<Action>> {
    let before = state.copied();
    let from = before.unwrap_or_else(decide::State::after_restart);
    let decide::Transition { next, actions } = decide::step(&from, input);
    let effect = if actions.contains(&Action::StartCleanup) {
        SlotEffect::StartCleanup
    } else if actions.contains(&Action::AwaitCleanup) {
        SlotEffect::AwaitCleanup
    } else if forgettable_now(input, before.is_some(), &next, &actions) {
        SlotEffect::Retire
    } else {
        SlotEffect::None
    };
    SlotStep {
        // An unknown id that stays at the restart state is not remembered.
        next: (before.is_some() || next != from).then_some(next),
        decision: actions,
        effect,
    }
}

/// The state a request's cleanup that **could not run** leaves, as
/// [`Slots::retry`] files it under the node's table lock: the machine's
/// [`CleanupCouldNotRun`](Input::CleanupCouldNotRun) step.
///
/// Public so that the loom models drive the node's real retry; a [`Node`]
/// is the only other caller.
pub fn node_slot_retry(state: Option<&decide::State>) -> Option<decide::State> {
    let from = state.copied().unwrap_or_else(decide::State::after_restart);
    Some(decide::step(&from, Input::CleanupCouldNotRun).next)
}

/// One decision of a node, as recorded (see
/// [`crate::__bench::record_node_steps`]): the request's state before (`None`:
/// not held, the restart state), the input, the state after (`None`: not
/// remembered) and the actions.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct NodeStep {
    /// The request.
    pub request: RequestId,
    /// Its state before the step; `None` when the table did not hold it.
    pub before: Option<decide::State>,
    /// The input.
    pub input: Input,
    /// Its state after; `None` when the table does not remember it.
    pub after: Option<decide::State>,
    /// The actions decided.
    pub actions: Vec<Action>,
}

impl NodeStep {
    /// A step built by hand (for a test that plants one).
    pub fn new(
        request: RequestId,
        before: Option<decide::State>,
        input: Input,
        after: Option<decide::State>,
        actions: Vec<Action>,
    ) -> Self {
        NodeStep {
            request,
            before,
            input,
            after,
            actions,
        }
    }
}

static RECORDING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static RECORDED: std::sync::Mutex<Vec<NodeStep>> = std::sync::Mutex::new(Vec::new());

/// Turns the recording of every node's decisions on or off.
pub(crate) fn set_recording(on: bool) {
    RECORDING.store(on, std::sync::atomic::Ordering::SeqCst);
}

/// The decisions recorded since the last call, in the order each request's
/// were taken (under the table's lock).
pub(crate) fn take_recorded() -> Vec<NodeStep> {
    std::mem::take(&mut *crate::sync::lock_std(&RECORDED))
}

/// Records one decision of a request's row when recording is on (under the
/// table's lock; the record's own lock is never held while the table's is
/// taken): its state before and after.
fn record_step<O>(
    id: &RequestId,
    before: Option<&NodeRow<O>>,
    input: Input,
    after: Option<&NodeRow<O>>,
    actions: &[Action],
) {
    if RECORDING.load(std::sync::atomic::Ordering::Relaxed) {
        crate::sync::lock_std(&RECORDED).push(NodeStep {
            request: id.clone(),
            before: before.map(|row| row.state),
            input,
            after: after.map(|row| row.state),
            actions: actions.to_vec(),
        });
    }
}

/// Whether this step ended the request on the node without a cleanup to
/// run: a cleanup answered at once (nothing was ever opened here), or a
/// cancel that fenced a request with no job. `held`: the table held the
/// request before the step.
///
/// A cancelled request whose job is unknown is forgettable only if the
/// table did not hold it (an id of an earlier run of the node, whose
/// leftovers the journal reclaim at a node's start removes). One it held
/// is unknown because an open of this node failed part-way: its job may
/// exist, the node's shutdown must still clean it
/// ([`State::held_open`](decide::State::held_open)), so it is kept until its
/// cleanup, never evicted by another request's result.
fn forgettable_now(input: Input, held: bool, next: &decide::State, actions: &[Action]) -> bool {
    match input {
        Input::Cleanup => actions
            .iter()
            .any(|a| matches!(a, Action::Reply(Reply::Cleanup { cached: false, .. }))),
        Input::Cancel => {
            next.fence() == decide::Fence::Cancelled
                && match next.job() {
                    decide::JobState::Absent => true,
                    decide::JobState::Unknown => !held,
                    decide::JobState::Opening | decide::JobState::Present => false,
                }
        }
        Input::Open
        | Input::OpenFinished { .. }
        | Input::Work
        | Input::CleanupFinished(_)
        | Input::CleanupCouldNotRun => false,
    }
}

/// Whether a cleanup's verdict says it **could not run** (the workspace was
/// out of inodes, descriptors or memory) rather than deciding anything
/// ([`CleanupCode::is_transient`](crate::workspace::CleanupCode::is_transient)).
fn could_not_run(verdict: &CleanupVerdict) -> bool {
    use crate::workspace::CleanupCode;
    match verdict {
        CleanupVerdict::Failed(code) => [
            CleanupCode::NoSpace,
            CleanupCode::NoDescriptors,
            CleanupCode::NoMemory,
        ]
        .into_iter()
        .any(|c| c.is_transient() && c.safe_code() == *code),
        _ => false,
    }
}

/// Frame counters of a [`Node`], across all its connections.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Request frames decoded successfully.
    pub requests: u64,
    /// `cleanup_workspace` frames among them (duplicates included).
    pub cleanup_requests: u64,
    /// Frames refused with an error response (malformed, oversized, ...).
    pub refused_frames: u64,
}

#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    cleanup_requests: AtomicU64,
    refused_frames: AtomicU64,
}

/// The node-side wire handler for one workspace.
#[derive(Debug)]
pub struct Node<W: NodeWorkspace> {
    counters: Counters,
    workspace: W,
    config: NodeConfig,
    table: Table<W::Held>,
    /// Requests open on the node (their [`OpenSlot`]s, held in their rows
    /// until their cleanup finishes).
    open_count: Arc<AtomicUsize>,
    #[cfg(unix)]
    reserve: Arc<FdReserve>,
}

impl<W: NodeWorkspace> Node<W> {
    /// A handler over `workspace`, with no descriptor reserve.
    pub fn new(workspace: W, config: NodeConfig) -> Arc<Self> {
        Self::build(
            workspace,
            config,
            #[cfg(unix)]
            FdReserve::none(),
        )
    }

    /// A handler over `workspace` whose cleanups lend `reserve` when the
    /// node is short of descriptors, and whose opens and writes wait at its
    /// gate ([`FdReserve`]).
    #[cfg(unix)]
    pub fn with_fd_reserve(workspace: W, config: NodeConfig, reserve: Arc<FdReserve>) -> Arc<Self> {
        Self::build(workspace, config, reserve)
    }

    fn build(workspace: W, config: NodeConfig, #[cfg(unix)] reserve: Arc<FdReserve>) -> Arc<Self> {
        Arc::new(Node {
            counters: Counters::default(),
            workspace,
            table: Slots::new(config.cleanup_cache),
            config,
            open_count: Arc::new(AtomicUsize::new(0)),
            #[cfg(unix)]
            reserve,
        })
    }

    /// Requests open on the node now (opened, their cleanup not finished).
    pub fn open_count(&self) -> usize {
        self.open_count.load(Ordering::Acquire)
    }

    /// Takes a place for one more open request under the node's bound and,
    /// for an open read from a connection, under that connection's.
    fn take_open_slot(&self, connection: Option<&Arc<AtomicUsize>>) -> Option<OpenSlot> {
        if !take_place(&self.open_count, self.config.max_open_requests) {
            return None;
        }
        let node = Arc::clone(&self.open_count);
        match connection {
            None => Some(OpenSlot {
                node,
                connection: None,
            }),
            Some(c) if take_place(c, self.config.max_open_per_connection) => Some(OpenSlot {
                node,
                connection: Some(Arc::clone(c)),
            }),
            Some(_) => {
                drop(OpenSlot {
                    node,
                    connection: None,
                });
                None
            }
        }
    }

    /// The descriptor reserve this node's cleanups lend.
    #[cfg(unix)]
    pub fn fd_reserve(&self) -> &Arc<FdReserve> {
        &self.reserve
    }

    /// A permit for one allocation of descriptors ([`FdReserve::allocating`]).
    #[cfg(unix)]
    async fn allocating(&self) -> tokio::sync::RwLockReadGuard<'_, ()> {
        self.reserve.allocating().await
    }

    #[cfg(not(unix))]
    async fn allocating(&self) {}

    /// Frame counters so far.
    pub fn stats(&self) -> NodeStats {
        let c = &self.counters;
        NodeStats {
            requests: c.requests.load(Ordering::Relaxed),
            cleanup_requests: c.cleanup_requests.load(Ordering::Relaxed),
            refused_frames: c.refused_frames.load(Ordering::Relaxed),
        }
    }

    /// The workspace this node serves.
    pub fn workspace(&self) -> &W {
        &self.workspace
    }

    /// Steps request `id`'s row by `input` under the table's lock, filing
    /// `opened` with a successful open's `OpenFinished`.
    fn step(
        &self,
        id: &RequestId,
        input: Input,
        opened: Option<Opened<W::Held>>,
    ) -> Applied<CleanupVerdict, Vec<Action>> {
        self.table.apply(id, |row| {
            let step = node_row_step(row, input, opened);
            record_step(id, row, input, step.next.as_ref(), &step.decision);
            step
        })
    }

    /// Steps request `id` by an input that never touches its cleanup, and
    /// takes, in the same step, what the request's row holds after it: the
    /// request's scope, for the operation the machine lets through
    /// (`Proceed`, `CancelProcesses`).
    fn decide(&self, id: &RequestId, input: Input) -> (Vec<Action>, Option<Arc<W::Held>>) {
        let applied = self.table.apply(id, |row| {
            let step = node_row_step(row, input, None);
            record_step(id, row, input, step.next.as_ref(), &step.decision);
            let held = step
                .next
                .as_ref()
                .and_then(NodeRow::open)
                .map(|opened| Arc::clone(&opened.held));
            SlotStep {
                next: step.next,
                decision: (step.decision, held),
                effect: step.effect,
            }
        });
        debug_assert!(applied.cleanup.is_none(), "{input:?} touched the cleanup");
        applied.decision
    }

    /// Handles one decoded request and returns its answer: the request's
    /// decision is taken at once ([`Node::admit`]), then carried out.
    pub async fn handle(self: &Arc<Self>, op: Operation) -> Response {
        self.admit(op).perform().await
    }

    /// As [`Node::admit`], for a frame read from a connection whose open
    /// requests `connection` counts.
    fn admit_on(self: &Arc<Self>, op: Operation, connection: &Arc<AtomicUsize>) -> Admitted<W> {
        self.admit_from(op, Some(connection))
    }

    /// Takes the decision for one decoded request now, under the table's
    /// lock, and returns what is left to carry out.
    ///
    /// [`Node::serve`] admits a connection's frames in the order it reads
    /// them and only then hands each to its own task, so the node decides a
    /// connection's requests in the order the peer sent them: an open that
    /// the edge sent before its cancel or cleanup is never decided after
    /// them, however the tasks that carry the requests out are scheduled.
    /// A cleanup that this call starts runs in its own task from here on.
    ///
    /// Call it from within a tokio runtime (a cleanup may be spawned).
    ///
    /// An `open_workspace` that the machine would perform but that finds
    /// the node's bound on open requests reached is answered
    /// `too_many_requests` and leaves the request's state untouched, as if
    /// the frame had not arrived: the refusal fences nothing, and a later
    /// open may succeed.
    pub fn admit(self: &Arc<Self>, op: Operation) -> Admitted<W> {
        self.admit_from(op, None)
    }

    fn admit_from(
        self: &Arc<Self>,
        op: Operation,
        connection: Option<&Arc<AtomicUsize>>,
    ) -> Admitted<W> {
        let decided = match op {
            Operation::OpenWorkspace { request_id } => {
                let slot = self.take_open_slot(connection);
                let refused = slot.is_none();
                let applied = self.table.apply(&request_id, |row| {
                    let step = node_row_step(row, Input::Open, None);
                    let step = if refused && step.decision.first() == Some(&Action::Open) {
                        // Out of places: the row stays as it was.
                        SlotStep {
                            next: row.cloned(),
                            decision: Vec::new(),
                            effect: SlotEffect::None,
                        }
                    } else {
                        step
                    };
                    record_step(
                        &request_id,
                        row,
                        Input::Open,
                        step.next.as_ref(),
                        &step.decision,
                    );
                    step
                });
                debug_assert!(applied.cleanup.is_none(), "an open touched the cleanup");
                match (applied.decision.first(), slot) {
                    (Some(Action::Open), Some(slot)) => Decided::Open(request_id, slot),
                    (Some(Action::Reply(r)), _) => {
                        Decided::Answer(self.reply(request_id, *r, None))
                    }
                    (None, _) => Decided::Answer(error(request_id, codes::TOO_MANY_REQUESTS)),
                    (other, _) => unreachable_decision(other),
                }
            }
            Operation::WriteArtifact {
                request_id,
                name,
                contents,
            } => match self.work(&request_id) {
                Ok(held) => Decided::Write {
                    request_id,
                    held,
                    name,
                    contents,
                },
                Err(code) => Decided::Answer(error(request_id, code)),
            },
            Operation::RunProcess { request_id, spec } => match self.work(&request_id) {
                Ok(held) => match self.workspace.admit_run(&request_id, &spec) {
                    Ok(()) => Decided::Run {
                        request_id,
                        held,
                        spec: *spec,
                    },
                    Err(refusal) => Decided::Answer(refusal.into_response(request_id)),
                },
                Err(code) => Decided::Answer(error(request_id, code)),
            },
            Operation::StartProcess { request_id, spec } => match self.work(&request_id) {
                // The node's policy decides on a session as on a run.
                Ok(held) => match self.workspace.admit_run(&request_id, &spec.run) {
                    Ok(()) => Decided::Session(request_id, held, SessionCall::Start(spec)),
                    Err(refusal) => Decided::Answer(refusal.into_response(request_id)),
                },
                Err(code) => Decided::Answer(error(request_id, code)),
            },
            Operation::ReadOutput {
                request_id,
                session_id,
                stdout_offset,
                stderr_offset,
                max_bytes,
                wait_ms,
            } => self.session_call(
                request_id,
                SessionCall::Read {
                    session_id,
                    from: Offsets {
                        stdout: stdout_offset,
                        stderr: stderr_offset,
                    },
                    max: max_bytes.unwrap_or(MAX_READ_BYTES).clamp(1, MAX_READ_BYTES) as usize,
                    wait: Duration::from_millis(wait_ms.unwrap_or(0).min(MAX_READ_WAIT_MS)),
                },
            ),
            Operation::WriteStdin {
                request_id,
                session_id,
                input,
                close,
            } => self.session_call(
                request_id,
                SessionCall::Write {
                    session_id,
                    input,
                    close,
                },
            ),
            Operation::SignalProcess {
                request_id,
                session_id,
                signal,
            } => self.session_call(request_id, SessionCall::Signal { session_id, signal }),
            Operation::ResizeTerminal {
                request_id,
                session_id,
                terminal,
            } => self.session_call(
                request_id,
                SessionCall::Resize {
                    session_id,
                    size: terminal,
                },
            ),
            Operation::ListProcesses { request_id } => {
                self.session_call(request_id, SessionCall::List)
            }
            Operation::Cancel { request_id } => {
                let (actions, held) = self.decide(&request_id, Input::Cancel);
                if actions.contains(&Action::CancelProcesses) {
                    Decided::Cancel(request_id, held)
                } else {
                    Decided::Answer(Response::Cancelled {
                        request_id,
                        processes: 0,
                    })
                }
            }
            Operation::CleanupWorkspace { request_id } => match self.start_cleanup(request_id) {
                Ok(report) => Decided::Answer(Response::Cleanup(report)),
                Err(pending) => Decided::Cleanup(pending),
            },
        };
        Admitted {
            node: Arc::clone(self),
            decided,
        }
    }

    /// A session operation is carried out, like a write or a run, only
    /// while the request is open and accepting.
    fn session_call(&self, request_id: RequestId, call: SessionCall) -> Decided<W::Held> {
        match self.work(&request_id) {
            Ok(held) => Decided::Session(request_id, held, call),
            Err(code) => Decided::Answer(error(request_id, code)),
        }
    }

    /// A write or run is performed only while the request is open and
    /// accepting, on what its row holds.
    fn work(&self, id: &RequestId) -> Result<Arc<W::Held>, SafeCode> {
        let (actions, held) = self.decide(id, Input::Work);
        match actions.first() {
            // The machine proceeds only once the open finished, and that
            // step filed what the open returned.
            Some(Action::Proceed) => held.ok_or(codes::NOT_OPEN),
            Some(Action::Reply(Reply::Refused(r))) => Err(refusal_code(*r)),
            other => unreachable_decision(other),
        }
    }

    /// Runs the open the machine decided. The open runs outside the table
    /// lock; a cancel or cleanup that lands meanwhile is decided by the
    /// machine (the open's answer becomes `request_closed`, a cleanup waits
    /// for the open to finish). It runs in its own task so that it always
    /// reaches `OpenFinished`, even if this caller goes away: a cleanup may
    /// be waiting for it.
    async fn open(self: &Arc<Self>, request_id: RequestId, slot: OpenSlot) -> Response {
        let node = Arc::clone(self);
        let id = request_id.clone();
        let finished = tokio::spawn(
            async move {
                let opened = {
                    let _allocating = node.allocating().await;
                    node.workspace.open(&id).await
                };
                // Filed in the row by the step that may start a waiting
                // cleanup, whose end releases it; a failed open gives its
                // place back at once.
                let (opened, held) = match opened {
                    Ok(held) => (
                        Ok(()),
                        Some(Opened {
                            held: Arc::new(held),
                            _slot: slot,
                        }),
                    ),
                    Err(code) => (Err(code), None),
                };
                node.finish_open(id, opened, held)
            }
            .in_current_span(),
        );
        finished
            .await
            .unwrap_or_else(|_| error(request_id, codes::SHUTTING_DOWN))
    }
    /// Steps `OpenFinished` and performs what it decides: the open's answer,
    /// and the cleanup that waited for this open, if one did.
    fn finish_open(
        self: &Arc<Self>,
        request_id: RequestId,
        opened: Result<(), SafeCode>,
        held: Option<Opened<W::Held>>,
    ) -> Response {
        let applied = self.step(
            &request_id,
            Input::OpenFinished { ok: opened.is_ok() },
            held,
        );
        if let Some(Elected::Owner(guard)) = applied.cleanup {
            // A cleanup was asked for while the open ran: its callers wait
            // on the cell this guard publishes to.
            self.run_cleanup(&request_id, guard);
        }
        let mut answer = None;
        for action in applied.decision {
            match action {
                Action::Reply(r) => answer = Some(self.reply(request_id.clone(), r, opened.err())),
                Action::StartCleanup | Action::AwaitCleanup => {}
                other => unreachable_decision(Some(&other)),
            }
        }
        answer.unwrap_or_else(|| error(request_id, codes::REQUEST_CLOSED))
    }

    fn reply(&self, request_id: RequestId, r: Reply, open_error: Option<SafeCode>) -> Response {
        match r {
            Reply::Opened { already } => Response::WorkspaceOpened {
                request_id,
                already_open: already,
            },
            Reply::OpenFailed => error(request_id, open_error.unwrap_or(codes::NOT_OPEN)),
            Reply::Refused(refusal) => error(request_id, refusal_code(refusal)),
            Reply::Closed => error(request_id, codes::REQUEST_CLOSED),
            Reply::NothingToCancel => Response::Cancelled {
                request_id,
                processes: 0,
            },
            Reply::Cleanup { verdict, cached } => {
                let mut rep = report(request_id, verdict);
                rep.cached = cached;
                Response::Cleanup(rep)
            }
        }
    }

    /// Runs the one cleanup the machine decided, in its own task so that it
    /// finishes even if every caller goes away.
    fn run_cleanup(self: &Arc<Self>, id: &RequestId, guard: OwnerGuard<CleanupVerdict>) {
        let node = Arc::clone(self);
        let id = id.clone();
        tokio::spawn(
            async move {
                let verdict = {
                    // At the descriptor limit the cleanup runs on the
                    // reserve, alone (see `FdReserve`).
                    #[cfg(unix)]
                    let _loan = node.reserve.lend().await;
                    node.workspace.cleanup(&id).await
                };
                // Either step below drops what the row held: the request
                // no longer counts against the bounds, whatever the
                // verdict, as it accepts no more work.
                if could_not_run(&verdict) {
                    // Nothing was decided (out of inodes, descriptors or
                    // memory): this attempt's callers get the answer, and
                    // the request waits, closed, for the next cleanup (a
                    // caller's, or the node's shutdown) to run it again.
                    // State and attempt change under one lock.
                    node.table.retry(&id, guard, verdict, |row| {
                        let next = node_row_retry(row);
                        record_step(&id, row, Input::CleanupCouldNotRun, next.as_ref(), &[]);
                        next
                    });
                    return;
                }
                // The verdict enters the state before it is published, so a
                // caller that sees it published finds the state cleaned.
                let _stray_answer_has_no_actions =
                    node.decide(&id, Input::CleanupFinished(verdict));
                // Waiters may all be gone; the table keeps the result.
                // Dropping the guard instead (the runtime shutting down)
                // publishes `Abandoned`.
                guard.complete(verdict);
            }
            .in_current_span(),
        );
    }

    /// Cleans up the request once: the machine decides whether this call
    /// starts the cleanup, waits for the one running (or pending behind an
    /// open), or is answered from the state at once. Every caller,
    /// concurrent or late, gets the same verdict; `cached` is false only for
    /// the first caller to ask (or an immediate "already gone").
    pub async fn cleanup(self: &Arc<Self>, request_id: RequestId) -> CleanupSummary {
        match self.start_cleanup(request_id) {
            Ok(report) => report,
            Err(pending) => pending.wait().await,
        }
    }

    /// Steps `Cleanup` and, if this call was elected, starts the cleanup in
    /// its own task: the answer at once, or the cleanup to wait for.
    fn start_cleanup(
        self: &Arc<Self>,
        request_id: RequestId,
    ) -> Result<CleanupSummary, PendingCleanup> {
        let applied = self.step(&request_id, Input::Cleanup, None);
        let waiter = match applied.cleanup {
            Some(Elected::Owner(guard)) => {
                let waiter = guard.waiter();
                self.run_cleanup(&request_id, guard);
                waiter
            }
            Some(Elected::Waiter(waiter)) => waiter,
            None => {
                for action in applied.decision {
                    if let Action::Reply(Reply::Cleanup { verdict, cached }) = action {
                        let mut rep = report(request_id, verdict);
                        rep.cached = cached;
                        return Ok(rep);
                    }
                }
                unreachable_decision(None)
            }
        };
        Err(PendingCleanup {
            request_id,
            waiter,
            first: applied.first,
        })
    }

    /// Ids of requests this node must clean when it shuts down
    /// ([`decide::State::held_open`]): whose job exists, is being opened or
    /// may exist (an open that failed part-way, an id known from before a
    /// restart), and whose cleanup has not started; or whose last cleanup
    /// could not run.
    pub fn open_requests(&self) -> Vec<RequestId> {
        // The decision is the machine's (`decide::State::held_open`), which
        // the composition model's node shutdown checks.
        self.table.keys_where(|row| row.state.held_open())
    }

    /// Cleans up every request that is still open, through the same
    /// exactly-once path as a wire cleanup. Used when the node shuts down.
    pub async fn close(self: &Arc<Self>) -> Vec<CleanupSummary> {
        let mut out = Vec::new();
        for id in self.open_requests() {
            out.push(self.cleanup(id).await);
        }
        out
    }

    /// Serves the wire on one connection until the peer closes its sending
    /// side, then returns a [`Drain`] that completes once every request read
    /// before that has been answered.
    ///
    /// Requests are handled concurrently (up to `max_in_flight`), answers
    /// are written as they complete and carry the request's `seq`. A
    /// malformed or oversized frame is answered with an error response and
    /// the connection goes on; only an I/O failure, the end of the stream or
    /// a deadline ends it. Work already started (a process, a cleanup)
    /// continues after the connection ends.
    ///
    /// The connection holds at most `max_open_per_connection` open
    /// requests; reading stops while more than `max_unanswered_bytes` of
    /// answers wait for the peer to read them; a frame must complete within
    /// `frame_timeout` and an idle connection is closed after
    /// `idle_timeout` ([`NodeConfig`]). A deadline is noticed up to a
    /// quarter of it late.
    ///
    /// # Errors
    ///
    /// An I/O error reading from the connection.
    pub async fn serve<IO>(self: &Arc<Self>, io: IO) -> io::Result<Drain>
    where
        IO: AsyncRead + AsyncWrite + Send + 'static,
    {
        let config = self.config;
        let (read, write) = tokio::io::split(io);
        let (tx, rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let backlog = Arc::new(Backlog::default());
        let stall = config.idle_timeout.or(config.frame_timeout);
        let writer = tokio::spawn(write_answers(write, rx, Arc::clone(&backlog), stall));
        let outbox = Outbox { tx, backlog };
        let opened_here = Arc::new(AtomicUsize::new(0));
        let max_in_flight = config.max_in_flight.max(1);
        let permits = Arc::new(Semaphore::new(max_in_flight));
        let mut frames = FrameReader::new(read, config.max_frame);
        let mut clock = Deadlines::new(config.frame_timeout, config.idle_timeout);
        let result = loop {
            // Backpressure: a peer that does not read its answers is not
            // read either, so its answers cannot pile up without bound.
            if !outbox.backlog.wait_below(config.max_unanswered_bytes).await {
                debug!("the peer stopped reading its answers; the connection is given up");
                break Ok(());
            }
            let permit = Arc::clone(&permits)
                .acquire_owned()
                .await
                .expect("never closed");
            let read = loop {
                let busy =
                    permits.available_permits() + 1 < max_in_flight || outbox.backlog.queued() > 0;
                let wake = match clock.check(frames.mid_frame(), busy) {
                    Err(code) => break Read::Expired(code),
                    Ok(wake) => wake,
                };
                let tick = async {
                    match wake {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    r = frames.next_frame() => break match r {
                        Ok(None) => Read::End,
                        Ok(Some(frame)) => Read::Frame(Box::new(decode_request(frame))),
                        Err(FrameError::Io(e)) => Read::Failed(e),
                        Err(e) => Read::Refused(e),
                    },
                    () = tick => {}
                }
            };
            let decoded = match read {
                Read::End => break Ok(()),
                Read::Failed(e) => break Err(e),
                Read::Expired(code) => {
                    self.counters.refused_frames.fetch_add(1, Ordering::Relaxed);
                    debug!(%code, "connection deadline expired");
                    outbox.send(line(&ResponseFrame {
                        v: VERSION,
                        seq: None,
                        result: Response::Error {
                            request_id: None,
                            code: Code::from(code),
                        },
                    }));
                    break Ok(());
                }
                Read::Refused(e) => {
                    self.counters.refused_frames.fetch_add(1, Ordering::Relaxed);
                    warn!(error = %e, "refused a request frame");
                    outbox.send(line(&ResponseFrame {
                        v: VERSION,
                        seq: None,
                        result: Response::Error {
                            request_id: None,
                            code: Code::from(e.code()),
                        },
                    }));
                    if matches!(e, FrameError::Truncated) {
                        break Ok(());
                    }
                    continue;
                }
                Read::Frame(decoded) => *decoded,
            };
            clock.frame_read();
            match decoded {
                Err(e) => {
                    self.counters.refused_frames.fetch_add(1, Ordering::Relaxed);
                    debug!(code = %e.code, "undecodable request frame");
                    outbox.send(line(&e.response()));
                }
                Ok(frame) => {
                    self.counters.requests.fetch_add(1, Ordering::Relaxed);
                    if matches!(frame.op, Operation::CleanupWorkspace { .. }) {
                        self.counters
                            .cleanup_requests
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    // Decided here, in the order the frames arrived; only
                    // carrying the decision out runs concurrently.
                    let admitted = self.admit_on(frame.op, &opened_here);
                    let outbox = outbox.clone();
                    tokio::spawn(async move {
                        let result = admitted.perform().await;
                        outbox.send(line(&ResponseFrame {
                            v: VERSION,
                            seq: Some(frame.seq),
                            result,
                        }));
                        drop(permit);
                    });
                }
            }
        };
        drop(outbox);
        // The writer ends once every in-flight handler has answered; it is
        // not awaited here so that a long-running process cannot hold the
        // end of the connection hostage (the caller may cancel it first).
        result.map(|()| Drain(writer))
    }

    /// Serves one connection and waits until every answer was written.
    ///
    /// # Errors
    ///
    /// As [`Node::serve`].
    pub async fn serve_to_end<IO>(self: &Arc<Self>, io: IO) -> io::Result<()>
    where
        IO: AsyncRead + AsyncWrite + Send + 'static,
    {
        self.serve(io).await?.wait().await;
        Ok(())
    }
}

/// A request the node has decided ([`Node::admit`]); [`Admitted::perform`]
/// carries out what was decided and returns the answer.
#[must_use = "a decided open, write or run happens only when performed"]
pub struct Admitted<W: NodeWorkspace> {
    node: Arc<Node<W>>,
    decided: Decided<W::Held>,
}

impl<W: NodeWorkspace> fmt::Debug for Admitted<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admitted")
            .field("decided", &self.decided)
            .finish_non_exhaustive()
    }
}

/// What [`Node::admit`] decided; an operation the machine let through
/// carries what the request's row held (`H`, its scope) when it did.
enum Decided<H> {
    /// The decision is the answer.
    Answer(Response),
    /// The machine said `Open`, and the request has its place under the
    /// bounds.
    Open(RequestId, OpenSlot),
    /// The machine said `Proceed` to a write.
    Write {
        request_id: RequestId,
        held: Arc<H>,
        name: String,
        contents: String,
    },
    /// The machine said `Proceed` to a run.
    Run {
        request_id: RequestId,
        held: Arc<H>,
        spec: RunSpec,
    },
    /// The machine said `Proceed` to a session operation.
    Session(RequestId, Arc<H>, SessionCall),
    /// The machine said `CancelProcesses` (`None`: the request's open has
    /// not finished).
    Cancel(RequestId, Option<Arc<H>>),
    /// A cleanup runs (started by this request or an earlier one).
    Cleanup(PendingCleanup),
}

impl<H> fmt::Debug for Decided<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decided::Answer(r) => f.debug_tuple("Answer").field(r).finish(),
            Decided::Open(id, slot) => f.debug_tuple("Open").field(id).field(slot).finish(),
            Decided::Write {
                request_id, name, ..
            } => f
                .debug_struct("Write")
                .field("request_id", request_id)
                .field("name", name)
                .finish_non_exhaustive(),
            Decided::Run { request_id, .. } => f
                .debug_struct("Run")
                .field("request_id", request_id)
                .finish_non_exhaustive(),
            Decided::Session(id, _, call) => {
                f.debug_tuple("Session").field(id).field(call).finish()
            }
            Decided::Cancel(id, held) => f
                .debug_tuple("Cancel")
                .field(id)
                .field(&held.is_some())
                .finish(),
            Decided::Cleanup(p) => f.debug_tuple("Cleanup").field(p).finish(),
        }
    }
}

/// A session operation the machine let through, with the wire's bounds
/// applied (a read's size and wait).
#[derive(Debug)]
enum SessionCall {
    Start(Box<StartSpec>),
    Read {
        session_id: String,
        from: Offsets,
        max: usize,
        wait: Duration,
    },
    Write {
        session_id: String,
        input: StdinText,
        close: bool,
    },
    Signal {
        session_id: String,
        signal: SessionSignal,
    },
    Resize {
        session_id: String,
        size: WindowSize,
    },
    List,
}

impl SessionCall {
    fn op_name(&self) -> &'static str {
        match self {
            SessionCall::Start(_) => "start_process",
            SessionCall::Read { .. } => "read_output",
            SessionCall::Write { .. } => "write_stdin",
            SessionCall::Signal { .. } => "signal_process",
            SessionCall::Resize { .. } => "resize_terminal",
            SessionCall::List => "list_processes",
        }
    }
}

/// A cleanup to wait for: its verdict becomes the answer.
#[derive(Debug)]
struct PendingCleanup {
    request_id: RequestId,
    waiter: Waiter<CleanupVerdict>,
    first: bool,
}

impl PendingCleanup {
    async fn wait(self) -> CleanupSummary {
        let verdict = match self.waiter.await {
            Ok(verdict) => verdict,
            Err(Abandoned) => CleanupVerdict::Failed(codes::SHUTTING_DOWN),
        };
        let mut report = report(self.request_id, verdict);
        report.cached = !self.first;
        report
    }
}

impl<W: NodeWorkspace> Admitted<W> {
    /// Carries out the decision and returns the request's answer.
    pub async fn perform(self) -> Response {
        let Admitted { node, decided } = self;
        let (id, op) = match &decided {
            Decided::Answer(r) => return r.clone(),
            Decided::Open(id, _) => (id.clone(), "open_workspace"),
            Decided::Write { request_id, .. } => (request_id.clone(), "write_artifact"),
            Decided::Run { request_id, .. } => (request_id.clone(), "run_process"),
            Decided::Session(id, _, call) => (id.clone(), call.op_name()),
            Decided::Cancel(id, _) => (id.clone(), "cancel"),
            Decided::Cleanup(p) => (p.request_id.clone(), "cleanup_workspace"),
        };
        let span = info_span!("node_request", request_id = %id, op);
        async move {
            match decided {
                Decided::Answer(r) => r,
                Decided::Open(request_id, slot) => node.open(request_id, slot).await,
                Decided::Write {
                    request_id,
                    held,
                    name,
                    contents,
                } => {
                    let written = {
                        let _allocating = node.allocating().await;
                        node.workspace
                            .write_artifact(&request_id, &held, &name, contents.as_bytes())
                            .await
                    };
                    match written {
                        Ok(bytes) => Response::ArtifactWritten {
                            request_id,
                            name,
                            bytes,
                        },
                        Err(code) => error(request_id, code),
                    }
                }
                Decided::Run {
                    request_id,
                    held,
                    spec,
                } => match node.workspace.run(&request_id, &held, spec).await {
                    Ok(summary) => Response::ProcessFinished {
                        request_id,
                        summary,
                    },
                    Err(code) => error(request_id, code),
                },
                Decided::Session(request_id, held, call) => {
                    node.session(request_id, &held, call).await
                }
                Decided::Cancel(request_id, held) => {
                    let processes = node.workspace.cancel(&request_id, held.as_deref()).await;
                    Response::Cancelled {
                        request_id,
                        processes,
                    }
                }
                Decided::Cleanup(pending) => Response::Cleanup(pending.wait().await),
            }
        }
        .instrument(span)
        .await
    }
}

impl<W: NodeWorkspace> Node<W> {
    /// Carries out one session operation the machine let through.
    async fn session(&self, request_id: RequestId, held: &W::Held, call: SessionCall) -> Response {
        let w = &self.workspace;
        let answer = match call {
            SessionCall::Start(spec) => {
                w.start(&request_id, held, *spec)
                    .await
                    .map(|started| Response::ProcessStarted {
                        request_id: request_id.clone(),
                        started,
                    })
            }
            SessionCall::Read {
                session_id,
                from,
                max,
                wait,
            } => w
                .read(&request_id, held, &session_id, from, max, wait)
                .await
                .map(|output| Response::Output {
                    request_id: request_id.clone(),
                    output: Box::new(output),
                }),
            SessionCall::Write {
                session_id,
                input,
                close,
            } => w
                .write_stdin(&request_id, held, &session_id, input.0.as_bytes(), close)
                .await
                .map(|bytes| Response::StdinWritten {
                    request_id: request_id.clone(),
                    session_id,
                    bytes,
                    closed: close,
                }),
            SessionCall::Signal { session_id, signal } => w
                .signal(&request_id, held, &session_id, signal)
                .await
                .map(|()| Response::SignalSent {
                    request_id: request_id.clone(),
                    session_id,
                    signal,
                }),
            SessionCall::Resize { session_id, size } => w
                .resize(&request_id, held, &session_id, size)
                .await
                .map(|()| Response::TerminalResized {
                    request_id: request_id.clone(),
                    session_id,
                    terminal: size,
                }),
            SessionCall::List => {
                w.list(&request_id, held)
                    .await
                    .map(|sessions| Response::Processes {
                        request_id: request_id.clone(),
                        sessions,
                    })
            }
        };
        answer.unwrap_or_else(|code| error(request_id, code))
    }
}

/// The tail of a served connection: its answers still being written.
#[derive(Debug)]
#[must_use = "await `wait` to let the remaining answers reach the peer"]
pub struct Drain(tokio::task::JoinHandle<()>);

impl Drain {
    /// Waits until every request read from the connection was answered (or
    /// the peer stopped reading).
    pub async fn wait(self) {
        let _ = self.0.await;
    }
}

/// What one read of the connection produced.
enum Read {
    Frame(Box<Result<super::message::RequestFrame, super::codec::DecodeError>>),
    End,
    Refused(FrameError),
    Failed(io::Error),
    Expired(SafeCode),
}

/// The bytes of answers queued on one connection and not yet written to
/// its peer, shared by the reader (which stops while they exceed the bound)
/// and the writer (which counts them down as the peer takes them).
#[derive(Debug, Default)]
struct Backlog {
    queued: AtomicUsize,
    /// The writer is gone (the peer closed, or stopped reading for the
    /// stall deadline): nothing queued will ever be written.
    closed: AtomicBool,
    changed: Notify,
}

impl Backlog {
    fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    fn written(&self, bytes: usize) {
        self.queued.fetch_sub(bytes, Ordering::AcqRel);
        self.changed.notify_waiters();
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.changed.notify_waiters();
    }

    /// Waits until fewer than `max` bytes are queued; `false` once the
    /// writer is gone.
    async fn wait_below(&self, max: usize) -> bool {
        loop {
            // Registered before the checks, so a change between the check
            // and the wait is not missed.
            let changed = self.changed.notified();
            if self.closed.load(Ordering::Acquire) {
                return false;
            }
            if self.queued() < max.max(1) {
                return true;
            }
            changed.await;
        }
    }
}

/// The sending side of one connection's answers.
#[derive(Clone, Debug)]
struct Outbox {
    tx: mpsc::UnboundedSender<Vec<u8>>,
    backlog: Arc<Backlog>,
}

impl Outbox {
    fn send(&self, line: Vec<u8>) {
        let bytes = line.len();
        self.backlog.queued.fetch_add(bytes, Ordering::AcqRel);
        if self.tx.send(line).is_err() {
            // The writer is gone; the line is dropped with the channel.
            self.backlog.written(bytes);
        }
    }
}

/// Writes every answer of one connection, batching those already queued
/// into one flush and counting them out of the backlog once flushed, until
/// the channel closes (then shuts the write half down) or a write fails or
/// makes no progress for `stall`. On the way out the backlog is closed and
/// the queued answers are freed with the channel.
async fn write_answers<W: AsyncWrite + Unpin>(
    write: W,
    mut lines: mpsc::UnboundedReceiver<Vec<u8>>,
    backlog: Arc<Backlog>,
    stall: Option<Duration>,
) {
    async fn bounded<F: Future<Output = io::Result<()>>>(
        stall: Option<Duration>,
        f: F,
    ) -> io::Result<()> {
        match stall {
            None => f.await,
            Some(d) => tokio::time::timeout(d, f)
                .await
                .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into())),
        }
    }
    let mut w = tokio::io::BufWriter::new(write);
    let result: io::Result<()> = async {
        while let Some(line) = lines.recv().await {
            let mut batch = line.len();
            bounded(stall, w.write_all(&line)).await?;
            drop(line);
            while let Ok(more) = lines.try_recv() {
                batch += more.len();
                bounded(stall, w.write_all(&more)).await?;
            }
            bounded(stall, w.flush()).await?;
            backlog.written(batch);
        }
        bounded(stall, w.shutdown()).await
    }
    .await;
    if let Err(e) = result {
        debug!(error = %e, "the connection's writer stopped");
    }
    backlog.close();
}

/// The read deadlines of one connection: a frame begun must complete
/// within `frame`; a connection with nothing in flight, nothing queued and
/// no frame begun is closed after `idle`. Both are sampled: a deadline is
/// noticed at most a quarter of it late, and never early.
#[derive(Debug)]
struct Deadlines {
    frame: Option<Duration>,
    idle: Option<Duration>,
    frame_since: Option<Instant>,
    idle_since: Option<Instant>,
}

impl Deadlines {
    fn new(frame: Option<Duration>, idle: Option<Duration>) -> Self {
        Deadlines {
            frame,
            idle,
            frame_since: None,
            idle_since: Some(Instant::now()),
        }
    }

    /// A complete frame was read: the connection is not idle.
    fn frame_read(&mut self) {
        self.frame_since = None;
        self.idle_since = None;
    }

    /// Checks the deadlines now; `Err` with the code of the one that
    /// expired, or the instant to check again (`None`: never).
    fn check(&mut self, mid_frame: bool, busy: bool) -> Result<Option<Instant>, SafeCode> {
        let now = Instant::now();
        let mut wake: Option<Instant> = None;
        let mut at = |t: Instant| wake = Some(wake.map_or(t, |w| w.min(t)));
        if let Some(limit) = self.frame {
            if mid_frame {
                let since = *self.frame_since.get_or_insert(now);
                if now >= since + limit {
                    return Err(codes::FRAME_TIMEOUT);
                }
                at(since + limit);
            } else {
                self.frame_since = None;
                // Sampled: a frame that begins is seen within a quarter.
                at(now + limit / 4);
            }
        }
        if let Some(limit) = self.idle {
            if mid_frame || busy {
                self.idle_since = None;
                at(now + limit / 4);
            } else {
                let since = *self.idle_since.get_or_insert(now);
                if now >= since + limit {
                    return Err(codes::IDLE_TIMEOUT);
                }
                at(since + limit);
            }
        }
        Ok(wake)
    }
}

fn line(frame: &ResponseFrame) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    encode_line(frame, &mut out);
    out
}

fn error(request_id: RequestId, code: SafeCode) -> Response {
    Response::Error {
        request_id: Some(request_id),
        code: Code::from(code),
    }
}

fn refusal_code(r: Refusal) -> SafeCode {
    match r {
        Refusal::NotOpen => codes::NOT_OPEN,
        Refusal::Closed => codes::REQUEST_CLOSED,
        Refusal::OpenInProgress => codes::OPEN_IN_PROGRESS,
    }
}

/// The machine returned an action this input never produces; the exhaustive
/// tables in `machine::node` rule it out.
#[track_caller]
fn unreachable_decision(action: Option<&Action>) -> ! {
    unreachable!("the node machine returned {action:?} for this input")
}

fn report(request_id: RequestId, verdict: CleanupVerdict) -> CleanupSummary {
    let (status, code) = match verdict {
        CleanupVerdict::Cleaned => (CleanupStatus::Cleaned, None),
        CleanupVerdict::AlreadyGone => (CleanupStatus::AlreadyGone, None),
        CleanupVerdict::Reclaimed => (CleanupStatus::Reclaimed, None),
        CleanupVerdict::Failed(code) => (CleanupStatus::Failed, Some(Code::from(code))),
    };
    CleanupSummary {
        request_id,
        status,
        code,
        cached: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::CleanupCode;
    use std::sync::atomic::AtomicBool;

    /// What an open request holds here: its number, and a count of drops.
    struct Token {
        number: u32,
        drops: Arc<AtomicUsize>,
    }

    impl Drop for Token {
        fn drop(&mut self) {
            self.drops.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A workspace that sees only what the node hands it: a write reports
    /// the number of the token it was given, a cancel answers it.
    #[derive(Default)]
    struct Rows {
        opened: AtomicU64,
        drops: Arc<AtomicUsize>,
        cleanup_cannot_run: AtomicBool,
    }

    impl NodeWorkspace for Rows {
        type Held = Token;

        async fn open(&self, _: &RequestId) -> Result<Token, SafeCode> {
            let number = self.opened.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(Token {
                number: u32::try_from(number).unwrap(),
                drops: Arc::clone(&self.drops),
            })
        }

        async fn write_artifact(
            &self,
            _: &RequestId,
            held: &Token,
            _: &str,
            _: &[u8],
        ) -> Result<u64, SafeCode> {
            Ok(u64::from(held.number))
        }

        async fn run(
            &self,
            _: &RequestId,
            _: &Token,
            _: RunSpec,
        ) -> Result<ProcessSummary, SafeCode> {
            Err(SafeCode::new("unsupported"))
        }

        async fn cancel(&self, _: &RequestId, held: Option<&Token>) -> u32 {
            held.map_or(0, |t| t.number)
        }

        async fn cleanup(&self, _: &RequestId) -> CleanupVerdict {
            if self.cleanup_cannot_run.swap(false, Ordering::SeqCst) {
                CleanupVerdict::Failed(CleanupCode::NoSpace.safe_code())
            } else {
                CleanupVerdict::Cleaned
            }
        }
    }

    fn id(s: &str) -> RequestId {
        RequestId::new(s).unwrap()
    }

    async fn write(node: &Arc<Node<Rows>>, request: &str) -> Response {
        node.handle(Operation::WriteArtifact {
            request_id: id(request),
            name: "a".into(),
            contents: String::new(),
        })
        .await
    }

    /// The open's token is filed in the request's row, handed to each
    /// operation the machine lets through (each request its own), and
    /// dropped with the row's `CleanupFinished`, its place under the bounds
    /// given back with it.
    #[tokio::test]
    async fn a_request_row_holds_what_its_open_returned_until_its_cleanup_ends() {
        let node = Node::new(Rows::default(), NodeConfig::default());
        for r in ["r1", "r2"] {
            let opened = node
                .handle(Operation::OpenWorkspace { request_id: id(r) })
                .await;
            assert!(
                matches!(opened, Response::WorkspaceOpened { .. }),
                "{opened:?}"
            );
        }
        assert_eq!(node.open_count(), 2);
        for (r, number) in [("r1", 1), ("r2", 2), ("r1", 1)] {
            match write(&node, r).await {
                Response::ArtifactWritten { bytes, .. } => assert_eq!(bytes, number),
                other => panic!("{other:?}"),
            }
        }
        let cancelled = node
            .handle(Operation::Cancel {
                request_id: id("r2"),
            })
            .await;
        assert!(
            matches!(cancelled, Response::Cancelled { processes: 2, .. }),
            "{cancelled:?}"
        );
        let drops = Arc::clone(&node.workspace().drops);
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        let summary = node.cleanup(id("r1")).await;
        assert_eq!(summary.status, CleanupStatus::Cleaned);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            1,
            "r1's token outlived its cleanup"
        );
        assert_eq!(node.open_count(), 1);
        // The cleaned request is fenced: nothing reaches a workspace for it.
        assert!(matches!(write(&node, "r1").await, Response::Error { .. }));
        assert_eq!(node.cleanup(id("r2")).await.status, CleanupStatus::Cleaned);
        assert_eq!(drops.load(Ordering::SeqCst), 2);
        assert_eq!(node.open_count(), 0);
    }

    /// A cleanup that could not run ends the row's hold too: the request
    /// accepts no more work and no longer counts against the bounds; the
    /// next cleanup runs by its id.
    #[tokio::test]
    async fn a_cleanup_that_could_not_run_drops_what_the_row_held() {
        let node = Node::new(Rows::default(), NodeConfig::default());
        node.workspace()
            .cleanup_cannot_run
            .store(true, Ordering::SeqCst);
        let opened = node
            .handle(Operation::OpenWorkspace {
                request_id: id("r"),
            })
            .await;
        assert!(
            matches!(opened, Response::WorkspaceOpened { .. }),
            "{opened:?}"
        );
        let first = node.cleanup(id("r")).await;
        assert_eq!(first.status, CleanupStatus::Failed);
        assert_eq!(node.workspace().drops.load(Ordering::SeqCst), 1);
        assert_eq!(node.open_count(), 0);
        assert!(matches!(write(&node, "r").await, Response::Error { .. }));
        assert_eq!(node.open_requests(), vec![id("r")]);
        assert_eq!(node.cleanup(id("r")).await.status, CleanupStatus::Cleaned);
        assert!(node.open_requests().is_empty());
    }

    /// The row's own rule, step by step: filed by a successful open's
    /// `OpenFinished`, kept by every other input, dropped by
    /// `CleanupFinished` and by a retry.
    #[test]
    fn a_row_files_keeps_and_drops_what_the_open_returned() {
        let open = node_row_step::<u8>(None, Input::Open, None);
        let opening = open.next.expect("an open is remembered");
        assert!(opening.open().is_none());
        // A failed open files nothing.
        let failed = node_row_step(Some(&opening), Input::OpenFinished { ok: false }, Some(8));
        assert!(failed.next.is_none_or(|r| r.open().is_none()));
        let finished = node_row_step(Some(&opening), Input::OpenFinished { ok: true }, Some(7));
        let row = finished.next.unwrap();
        assert_eq!(row.open().map(|o| **o), Some(7));
        let work = node_row_step(Some(&row), Input::Work, None);
        assert_eq!(work.decision, vec![Action::Proceed]);
        assert_eq!(
            work.next.as_ref().and_then(NodeRow::open).map(|o| **o),
            Some(7)
        );
        let cleanup = node_row_step(Some(&row), Input::Cleanup, None);
        let cleaning = cleanup.next.unwrap();
        assert_eq!(cleaning.open().map(|o| **o), Some(7));
        assert!(node_row_retry(Some(&cleaning)).unwrap().open().is_none());
        let done = node_row_step(
            Some(&cleaning),
            Input::CleanupFinished(CleanupVerdict::Cleaned),
            None,
        );
        assert!(done.next.unwrap().open().is_none());
    }
}

//! The node side: maps wire requests onto a workspace runtime.
//!
//! [`Node`] holds the per-request bookkeeping that makes the wire idempotent
//! (open once, clean up once, answer duplicates from a bounded cache) and
//! delegates the work itself to a [`NodeWorkspace`]: the real workspace
//! runtime in production, a counting fake in tests.
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
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{Semaphore, mpsc};
use tracing::{Instrument, debug, info_span, warn};

use super::codec::{FrameError, FrameReader, decode_request, encode_line};
use super::message::{
    CleanupStatus, CleanupSummary, Code, Operation, PolicyRefusal, ProcessSummary, Response,
    ResponseFrame, RunSpec, VERSION, codes,
};
use crate::coordinator::RequestId;
use crate::error::SafeCode;
pub use crate::machine::node::CleanupVerdict;
use crate::machine::node::{self as decide, Action, Input, Refusal, Reply};
use crate::sync::{Abandoned, Applied, Elected, OwnerGuard, SlotEffect, SlotStep, Slots, Waiter};

/// The workspace operations the node performs for the wire.
///
/// Implementations key everything by request id and must be idempotent
/// where the contract says so; the [`Node`] already guarantees that
/// `cleanup` is called at most once per request id while its result is in
/// the cache, and never concurrently for the same id.
pub trait NodeWorkspace: Send + Sync + 'static {
    /// Opens the request's job namespace.
    ///
    /// # Errors
    ///
    /// A safe code saying why the namespace could not be opened.
    fn open(&self, request: &RequestId) -> impl Future<Output = Result<(), SafeCode>> + Send;

    /// Creates and registers a request-owned artifact; returns bytes written.
    ///
    /// # Errors
    ///
    /// A safe code (invalid name, not open, filesystem refusal, ...).
    fn write_artifact(
        &self,
        request: &RequestId,
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

    /// Cancels every active process of the request and waits for them to
    /// settle; returns how many there were.
    fn cancel(&self, request: &RequestId) -> impl Future<Output = u32> + Send;

    /// Cleans up the request: cancels its processes, removes its registered
    /// artifacts, fails closed on anything unexpected.
    fn cleanup(&self, request: &RequestId) -> impl Future<Output = CleanupVerdict> + Send;
}

/// Limits of a [`Node`].
#[derive(Clone, Copy, Debug)]
pub struct NodeConfig {
    /// The largest request frame accepted (bigger ones are refused).
    pub max_frame: usize,
    /// Requests handled concurrently per connection; reading pauses beyond.
    pub max_in_flight: usize,
    /// Completed cleanup results kept for duplicate requests.
    pub cleanup_cache: usize,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            max_frame: super::codec::DEFAULT_MAX_FRAME,
            max_in_flight: 256,
            cleanup_cache: 4096,
        }
    }
}

/// The node's per-request table: the decision state of every request,
/// its cleanup cell, and a bounded memory of finished requests, in one
/// [`Slots`] (one lock; see its theory of operation).
type Table = Slots<RequestId, decide::State, CleanupVerdict>;

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
    } else if forgettable_now(input, &next, &actions) {
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

/// Whether this step ended the request on the node without a cleanup to
/// run: a cleanup answered at once (nothing was ever opened here), or a
/// cancel that fenced a request with no job.
fn forgettable_now(input: Input, next: &decide::State, actions: &[Action]) -> bool {
    match input {
        Input::Cleanup => actions
            .iter()
            .any(|a| matches!(a, Action::Reply(Reply::Cleanup { cached: false, .. }))),
        Input::Cancel => {
            next.fence() == decide::Fence::Cancelled
                && matches!(
                    next.job(),
                    decide::JobState::Absent | decide::JobState::Unknown
                )
        }
        Input::Open | Input::OpenFinished { .. } | Input::Work | Input::CleanupFinished(_) => false,
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
pub struct Node<W> {
    counters: Counters,
    workspace: W,
    config: NodeConfig,
    table: Table,
}

impl<W: NodeWorkspace> Node<W> {
    /// A handler over `workspace`.
    pub fn new(workspace: W, config: NodeConfig) -> Arc<Self> {
        Arc::new(Node {
            counters: Counters::default(),
            workspace,
            table: Slots::new(config.cleanup_cache),
            config,
        })
    }

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

    /// Steps request `id` by `input` under the table's lock.
    fn step(&self, id: &RequestId, input: Input) -> Applied<CleanupVerdict, Vec<Action>> {
        self.table.apply(id, |state| node_slot_step(state, input))
    }

    /// Steps request `id` by an input that never touches its cleanup.
    fn decide(&self, id: &RequestId, input: Input) -> Vec<Action> {
        let applied = self.step(id, input);
        debug_assert!(applied.cleanup.is_none(), "{input:?} touched the cleanup");
        applied.decision
    }

    /// Handles one decoded request and returns its answer: the request's
    /// decision is taken at once ([`Node::admit`]), then carried out.
    pub async fn handle(self: &Arc<Self>, op: Operation) -> Response {
        self.admit(op).perform().await
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
    pub fn admit(self: &Arc<Self>, op: Operation) -> Admitted<W> {
        let decided = match op {
            Operation::OpenWorkspace { request_id } => {
                let actions = self.decide(&request_id, Input::Open);
                match actions.first() {
                    Some(Action::Open) => Decided::Open(request_id),
                    Some(Action::Reply(r)) => Decided::Answer(self.reply(request_id, *r, None)),
                    other => unreachable_decision(other),
                }
            }
            Operation::WriteArtifact {
                request_id,
                name,
                contents,
            } => match self.work(&request_id) {
                Ok(()) => Decided::Write {
                    request_id,
                    name,
                    contents,
                },
                Err(code) => Decided::Answer(error(request_id, code)),
            },
            Operation::RunProcess { request_id, spec } => match self.work(&request_id) {
                Ok(()) => match self.workspace.admit_run(&request_id, &spec) {
                    Ok(()) => Decided::Run { request_id, spec },
                    Err(refusal) => Decided::Answer(refusal.into_response(request_id)),
                },
                Err(code) => Decided::Answer(error(request_id, code)),
            },
            Operation::Cancel { request_id } => {
                if self
                    .decide(&request_id, Input::Cancel)
                    .contains(&Action::CancelProcesses)
                {
                    Decided::Cancel(request_id)
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

    /// A write or run is performed only while the request is open and
    /// accepting.
    fn work(&self, id: &RequestId) -> Result<(), SafeCode> {
        match self.decide(id, Input::Work).first() {
            Some(Action::Proceed) => Ok(()),
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
    async fn open(self: &Arc<Self>, request_id: RequestId) -> Response {
        let node = Arc::clone(self);
        let id = request_id.clone();
        let finished = tokio::spawn(
            async move {
                let opened = node.workspace.open(&id).await;
                node.finish_open(id, opened)
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
    ) -> Response {
        let applied = self.step(&request_id, Input::OpenFinished { ok: opened.is_ok() });
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
                let verdict = node.workspace.cleanup(&id).await;
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
        let applied = self.step(&request_id, Input::Cleanup);
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

    /// Ids of requests whose job exists or is being opened here and whose
    /// cleanup has not started.
    pub fn open_requests(&self) -> Vec<RequestId> {
        self.table.keys_where(|s| {
            matches!(
                s.job(),
                decide::JobState::Present | decide::JobState::Opening
            ) && matches!(
                s.fence(),
                decide::Fence::Accepting | decide::Fence::Cancelled
            )
        })
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
    /// the connection goes on; only an I/O failure or the end of the stream
    /// ends it. Work already started (a process, a cleanup) continues after
    /// the connection ends.
    ///
    /// # Errors
    ///
    /// An I/O error reading from the connection.
    pub async fn serve<IO>(self: &Arc<Self>, io: IO) -> io::Result<Drain>
    where
        IO: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (read, write) = tokio::io::split(io);
        let (tx, rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let writer = tokio::spawn(super::codec::write_lines(write, rx));
        let permits = Arc::new(Semaphore::new(self.config.max_in_flight.max(1)));
        let mut frames = FrameReader::new(read, self.config.max_frame);
        let result = loop {
            let permit = Arc::clone(&permits)
                .acquire_owned()
                .await
                .expect("never closed");
            let decoded = match frames.next_frame().await {
                Ok(None) => break Ok(()),
                Ok(Some(frame)) => decode_request(frame),
                Err(e @ (FrameError::TooLarge { .. } | FrameError::Truncated)) => {
                    self.counters.refused_frames.fetch_add(1, Ordering::Relaxed);
                    warn!(error = %e, "refused a request frame");
                    let _ = tx.send(line(&ResponseFrame {
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
                Err(FrameError::Io(e)) => break Err(e),
            };
            match decoded {
                Err(e) => {
                    self.counters.refused_frames.fetch_add(1, Ordering::Relaxed);
                    debug!(code = %e.code, "undecodable request frame");
                    let _ = tx.send(line(&e.response()));
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
                    let admitted = self.admit(frame.op);
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        let result = admitted.perform().await;
                        let _ = tx.send(line(&ResponseFrame {
                            v: VERSION,
                            seq: Some(frame.seq),
                            result,
                        }));
                        drop(permit);
                    });
                }
            }
        };
        drop(tx);
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
pub struct Admitted<W> {
    node: Arc<Node<W>>,
    decided: Decided,
}

impl<W> fmt::Debug for Admitted<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admitted")
            .field("decided", &self.decided)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
enum Decided {
    /// The decision is the answer.
    Answer(Response),
    /// The machine said `Open`.
    Open(RequestId),
    /// The machine said `Proceed` to a write.
    Write {
        request_id: RequestId,
        name: String,
        contents: String,
    },
    /// The machine said `Proceed` to a run.
    Run {
        request_id: RequestId,
        spec: RunSpec,
    },
    /// The machine said `CancelProcesses`.
    Cancel(RequestId),
    /// A cleanup runs (started by this request or an earlier one).
    Cleanup(PendingCleanup),
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
            Decided::Open(id) => (id.clone(), "open_workspace"),
            Decided::Write { request_id, .. } => (request_id.clone(), "write_artifact"),
            Decided::Run { request_id, .. } => (request_id.clone(), "run_process"),
            Decided::Cancel(id) => (id.clone(), "cancel"),
            Decided::Cleanup(p) => (p.request_id.clone(), "cleanup_workspace"),
        };
        let span = info_span!("node_request", request_id = %id, op);
        async move {
            match decided {
                Decided::Answer(r) => r,
                Decided::Open(request_id) => node.open(request_id).await,
                Decided::Write {
                    request_id,
                    name,
                    contents,
                } => match node
                    .workspace
                    .write_artifact(&request_id, &name, contents.as_bytes())
                    .await
                {
                    Ok(bytes) => Response::ArtifactWritten {
                        request_id,
                        name,
                        bytes,
                    },
                    Err(code) => error(request_id, code),
                },
                Decided::Run { request_id, spec } => {
                    match node.workspace.run(&request_id, spec).await {
                        Ok(summary) => Response::ProcessFinished {
                            request_id,
                            summary,
                        },
                        Err(code) => error(request_id, code),
                    }
                }
                Decided::Cancel(request_id) => {
                    let processes = node.workspace.cancel(&request_id).await;
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

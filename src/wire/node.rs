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
//! taken under one `std::sync::Mutex` (the table): the lock only makes each
//! step atomic and files what the step returned; nothing is awaited under
//! it. Beside the decision states the table holds the election owners of
//! cleanups that wait for a running open. The cleanups themselves are
//! elected in a [`sync::Elections`](crate::sync::Elections) (where callers
//! wait and which publishes `Abandoned` if the cleanup task dies); an
//! election is always made while the table lock is held, so the table and
//! the elections never disagree about who owns a cleanup. The open and the
//! cleanup each run in their own task, so they always reach their
//! `OpenFinished` / `CleanupFinished` step whatever their callers do.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::sync::{Semaphore, mpsc};
use tracing::{Instrument, debug, info_span, warn};

use super::codec::{FrameError, FrameReader, decode_request, encode_line};
use super::message::{
    CleanupReport, CleanupStatus, Code, ProcessSummary, Request, Response, ResponseFrame, RunSpec,
    VERSION, codes,
};
use crate::coordinator::RequestId;
use crate::error::SafeCode;
pub use crate::machine::node::CleanupVerdict;
use crate::machine::node::{self as decide, Action, Input, Refusal, Reply};
use crate::sync::{Abandoned, Elected, Elections, OwnerGuard, Waiter};

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

/// The node's per-request decision states, plus what only the shell holds.
///
/// Every decision is [`machine::node::step`](crate::machine::node::step)
/// taken under this table's lock: the lock makes each step atomic, the
/// machine decides. An id not in the table is at
/// [`State::after_restart`](decide::State::after_restart): this process
/// cannot prove that no earlier run of the node opened it, so a cleanup
/// asks the workspace, whose idempotent form checks the disk.
#[derive(Debug, Default)]
struct Table {
    slots: HashMap<RequestId, decide::State>,
    /// Owners of cleanups asked for while the open was running; the open's
    /// finish starts them.
    pending: HashMap<RequestId, OwnerGuard<CleanupVerdict>>,
    /// Ids whose state may be forgotten (cleaned, or fenced with no job),
    /// oldest first, for bounding the table like the elections' cache.
    retired: VecDeque<RequestId>,
}

impl Table {
    fn state(&self, id: &RequestId) -> decide::State {
        self.slots
            .get(id)
            .copied()
            .unwrap_or_else(decide::State::after_restart)
    }

    /// Steps the request's state by `input` and stores the result.
    fn step(&mut self, id: &RequestId, input: Input) -> Vec<Action> {
        let before = self.state(id);
        let decide::Transition { next, actions } = decide::step(&before, input);
        if next != before {
            self.slots.insert(id.clone(), next);
        }
        actions
    }

    fn retire(&mut self, id: &RequestId, bound: usize) {
        self.retired.push_back(id.clone());
        while self.retired.len() > bound {
            let Some(old) = self.retired.pop_front() else {
                break;
            };
            // Forgetting an id lets a later duplicate start from "unknown":
            // a cleanup asks the workspace again (a no-op for a gone job),
            // an open is refused by the workspace while it remembers the
            // cleanup.
            let forgettable = self.slots.get(&old).is_some_and(|s| {
                s.cleaned().is_some()
                    || (s.fence() == decide::Fence::Cancelled
                        && matches!(s.job(), decide::Job::Absent | decide::Job::Unknown))
            });
            if forgettable {
                self.slots.remove(&old);
            }
        }
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
    table: Mutex<Table>,
    /// Where callers wait for the one cleanup the table started.
    cleanups: Elections<RequestId, CleanupVerdict>,
}

impl<W: NodeWorkspace> Node<W> {
    /// A handler over `workspace`.
    pub fn new(workspace: W, config: NodeConfig) -> Arc<Self> {
        Arc::new(Node {
            counters: Counters::default(),
            workspace,
            cleanups: Elections::new(config.cleanup_cache),
            config,
            table: Mutex::new(Table::default()),
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

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        // A panic while holding this lock cannot leave the table torn: every
        // critical section stores one stepped state.
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Handles one decoded request and returns its answer.
    pub async fn handle(self: &Arc<Self>, op: Request) -> Response {
        let id = op.request_id().clone();
        let span = info_span!("node_request", request_id = %id, op = op.op_name());
        async move {
            match op {
                Request::OpenWorkspace { request_id } => self.open(request_id).await,
                Request::WriteArtifact {
                    request_id,
                    name,
                    contents,
                } => {
                    if let Err(code) = self.work(&request_id) {
                        return error(request_id, code);
                    }
                    match self
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
                    }
                }
                Request::RunProcess { request_id, spec } => {
                    if let Err(code) = self.work(&request_id) {
                        return error(request_id, code);
                    }
                    match self.workspace.run(&request_id, spec).await {
                        Ok(summary) => Response::ProcessFinished {
                            request_id,
                            summary,
                        },
                        Err(code) => error(request_id, code),
                    }
                }
                Request::Cancel { request_id } => {
                    let actions = self.table().step(&request_id, Input::Cancel);
                    self.retire_if_fenced_without_job(&request_id);
                    let processes = if actions.contains(&Action::CancelProcesses) {
                        self.workspace.cancel(&request_id).await
                    } else {
                        0
                    };
                    Response::Cancelled {
                        request_id,
                        processes,
                    }
                }
                Request::CleanupWorkspace { request_id } => {
                    Response::Cleanup(self.cleanup(request_id).await)
                }
            }
        }
        .instrument(span)
        .await
    }

    /// A write or run is performed only while the request is open and
    /// accepting.
    fn work(&self, id: &RequestId) -> Result<(), SafeCode> {
        match self.table().step(id, Input::Work).first() {
            Some(Action::Proceed) => Ok(()),
            Some(Action::Reply(Reply::Refused(r))) => Err(refusal_code(*r)),
            other => unreachable_decision(other),
        }
    }

    fn retire_if_fenced_without_job(&self, id: &RequestId) {
        let mut table = self.table();
        let s = table.state(id);
        if s.fence() == decide::Fence::Cancelled
            && matches!(s.job(), decide::Job::Absent | decide::Job::Unknown)
            && table.slots.contains_key(id)
        {
            table.retire(id, self.config.cleanup_cache);
        }
    }

    async fn open(self: &Arc<Self>, request_id: RequestId) -> Response {
        let actions = self.table().step(&request_id, Input::Open);
        match actions.first() {
            Some(Action::Open) => {}
            Some(Action::Reply(r)) => return self.reply(request_id, *r, None),
            other => unreachable_decision(other),
        }
        // The open runs outside the table lock; a cancel or cleanup that
        // lands meanwhile is decided by the machine (the open's answer
        // becomes `request_closed`, a cleanup waits for the open to finish).
        // It runs in its own task so that it always reaches `OpenFinished`,
        // even if this caller goes away: a cleanup may be waiting for it.
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
        let actions = self
            .table()
            .step(&request_id, Input::OpenFinished { ok: opened.is_ok() });
        let mut answer = None;
        for action in actions {
            match action {
                Action::Reply(r) => answer = Some(self.reply(request_id.clone(), r, opened.err())),
                Action::StartCleanup => {
                    // The guard was filed in the same critical section that
                    // stepped the waiting cleanup, so it is there.
                    let pending = self.table().pending.remove(&request_id);
                    // Our own election waiter is not needed: the callers
                    // that asked for this cleanup already wait on it.
                    drop(self.start_cleanup(&request_id, pending));
                }
                Action::AwaitCleanup => {}
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

    /// Starts the one cleanup the machine decided, in its own task so that
    /// it finishes even if every caller goes away; returns a waiter on its
    /// verdict. `owner` is the election owner a caller already holds (a
    /// cleanup asked for while the open ran).
    fn start_cleanup(
        self: &Arc<Self>,
        id: &RequestId,
        owner: Option<OwnerGuard<CleanupVerdict>>,
    ) -> Waiter<CleanupVerdict> {
        let elected = match owner {
            Some(guard) => Elected::Owner(guard),
            None => self.cleanups.elect(id.clone()),
        };
        let node = Arc::clone(self);
        let id = id.clone();
        match elected {
            Elected::Owner(guard) => {
                let waiter = guard.waiter();
                tokio::spawn(
                    async move {
                        let verdict = node.workspace.cleanup(&id).await;
                        node.finish_cleanup(&id, verdict);
                        // Waiters may all be gone; the elections keep the
                        // result. Dropping the guard instead (the runtime
                        // shutting down) publishes `Abandoned`.
                        guard.complete(verdict);
                    }
                    .in_current_span(),
                );
                waiter
            }
            // The table forgot this id but the elections still hold its
            // cleanup: that cleanup's verdict is this one's.
            Elected::Waiter(waiter) => {
                let w = waiter.clone();
                tokio::spawn(async move {
                    let verdict = w
                        .await
                        .unwrap_or(CleanupVerdict::Failed(codes::SHUTTING_DOWN));
                    node.finish_cleanup(&id, verdict);
                });
                waiter
            }
        }
    }

    /// Cleans up the request once: the machine decides whether this call
    /// starts the cleanup, waits for the one running (or pending behind an
    /// open), or is answered from the state at once. Every caller,
    /// concurrent or late, gets the same verdict; `cached` is false only for
    /// the caller that started it (or an immediate "already gone").
    pub async fn cleanup(self: &Arc<Self>, request_id: RequestId) -> CleanupReport {
        let (waiter, owner) = {
            let mut table = self.table();
            let actions = table.step(&request_id, Input::Cleanup);
            let mut waiter = None;
            let mut owner = false;
            for action in actions {
                match action {
                    Action::Reply(Reply::Cleanup { verdict, cached }) => {
                        if !cached {
                            table.retire(&request_id, self.config.cleanup_cache);
                        }
                        let mut rep = report(request_id, verdict);
                        rep.cached = cached;
                        return rep;
                    }
                    Action::StartCleanup => {
                        let pending = table.pending.remove(&request_id);
                        waiter = Some(self.start_cleanup(&request_id, pending));
                        owner = true;
                    }
                    Action::AwaitCleanup if waiter.is_none() => {
                        waiter = Some(match self.cleanups.elect(request_id.clone()) {
                            // The cleanup waits for a running open, which
                            // starts it with this guard.
                            Elected::Owner(guard) => {
                                let w = guard.waiter();
                                table.pending.insert(request_id.clone(), guard);
                                owner = true;
                                w
                            }
                            Elected::Waiter(w) => w,
                        });
                    }
                    Action::AwaitCleanup => {}
                    other => unreachable_decision(Some(&other)),
                }
            }
            match waiter {
                Some(w) => (w, owner),
                None => unreachable_decision(None),
            }
        };
        let verdict = match waiter.await {
            Ok(verdict) => verdict,
            Err(Abandoned) => CleanupVerdict::Failed(codes::SHUTTING_DOWN),
        };
        let mut report = report(request_id, verdict);
        report.cached = !owner;
        report
    }

    fn finish_cleanup(&self, id: &RequestId, verdict: CleanupVerdict) {
        let mut table = self.table();
        let _stray_answer_has_no_actions = table.step(id, Input::CleanupFinished(verdict));
        table.retire(id, self.config.cleanup_cache);
    }

    /// Ids of requests whose job exists or is being opened here and whose
    /// cleanup has not started.
    pub fn open_requests(&self) -> Vec<RequestId> {
        self.table()
            .slots
            .iter()
            .filter(|(_, s)| {
                matches!(s.job(), decide::Job::Present | decide::Job::Opening)
                    && matches!(
                        s.fence(),
                        decide::Fence::Accepting | decide::Fence::Cancelled
                    )
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Cleans up every request that is still open, through the same
    /// exactly-once path as a wire cleanup. Used when the node shuts down.
    pub async fn close(self: &Arc<Self>) -> Vec<CleanupReport> {
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
        let mut frames = FrameReader::new(BufReader::new(read), self.config.max_frame);
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
                    if matches!(frame.op, Request::CleanupWorkspace { .. }) {
                        self.counters
                            .cleanup_requests
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    let node = Arc::clone(self);
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        let result = node.handle(frame.op).await;
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

fn report(request_id: RequestId, verdict: CleanupVerdict) -> CleanupReport {
    let (status, code) = match verdict {
        CleanupVerdict::Cleaned => (CleanupStatus::Cleaned, None),
        CleanupVerdict::AlreadyGone => (CleanupStatus::AlreadyGone, None),
        CleanupVerdict::Failed(code) => (CleanupStatus::Failed, Some(Code::from(code))),
    };
    CleanupReport {
        request_id,
        status,
        code,
        cached: false,
    }
}

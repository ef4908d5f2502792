//! The node side: maps wire requests onto a workspace runtime.
//!
//! [`Node`] holds the per-request bookkeeping that makes the wire idempotent
//! (open once, clean up once, answer duplicates from a bounded cache) and
//! delegates the work itself to a [`NodeWorkspace`]: the real workspace
//! runtime in production, a counting fake in tests.

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
use crate::sync::{Abandoned, Elected, Elections};

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

/// What one cleanup did, as the workspace reports it to the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CleanupVerdict {
    /// Everything the request owned is gone.
    Cleaned,
    /// Nothing is held for the request (never opened here, or already
    /// removed): nothing was touched.
    AlreadyGone,
    /// Cleanup failed closed for the given reason.
    Failed(SafeCode),
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

/// Where one request stands on this node. The cleanup's result lives in
/// the node's [`Elections`], not here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Open,
    /// Cleanup elected: no new work is accepted.
    Closed,
}

#[derive(Debug, Default)]
struct Table {
    slots: HashMap<RequestId, Slot>,
    /// Closed ids whose cleanup finished, oldest first, for bounding the
    /// table like the elections' result cache.
    cleaned: VecDeque<RequestId>,
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
    /// One cleanup per request id; duplicates share its result.
    cleanups: Elections<RequestId, CleanupReport>,
    /// Serializes `open` so that a request is opened at most once.
    open_lock: tokio::sync::Mutex<()>,
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
            open_lock: tokio::sync::Mutex::new(()),
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
        // critical section is a single insert/remove.
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
                    if let Err(code) = self.accepting(&request_id) {
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
                    if let Err(code) = self.accepting(&request_id) {
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
                    let processes = self.workspace.cancel(&request_id).await;
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

    /// New work is accepted only while the request is open.
    fn accepting(&self, id: &RequestId) -> Result<(), SafeCode> {
        match self.table().slots.get(id) {
            Some(Slot::Open) => Ok(()),
            Some(_) => Err(codes::REQUEST_CLOSED),
            None => Err(codes::NOT_OPEN),
        }
    }

    async fn open(&self, request_id: RequestId) -> Response {
        let _serial = self.open_lock.lock().await;
        match self.table().slots.get(&request_id) {
            Some(Slot::Open) => {
                return Response::WorkspaceOpened {
                    request_id,
                    already_open: true,
                };
            }
            Some(_) => return error(request_id, codes::REQUEST_CLOSED),
            None => {}
        }
        match self.workspace.open(&request_id).await {
            Ok(()) => {
                self.table().slots.insert(request_id.clone(), Slot::Open);
                Response::WorkspaceOpened {
                    request_id,
                    already_open: false,
                }
            }
            Err(code) => error(request_id, code),
        }
    }

    /// Elects one cleanup per request id; every caller, concurrent or late,
    /// gets the same report. The cleanup runs in its own task so that it
    /// finishes even if every caller goes away.
    pub async fn cleanup(self: &Arc<Self>, request_id: RequestId) -> CleanupReport {
        let (waiter, owner) = {
            // Electing under the table lock closes the request in the same
            // critical section, so no new work slips in once cleanup is
            // elected.
            let mut table = self.table();
            match self.cleanups.elect(request_id.clone()) {
                Elected::Owner(guard) => {
                    table.slots.insert(request_id.clone(), Slot::Closed);
                    let waiter = guard.waiter();
                    let node = Arc::clone(self);
                    let id = request_id.clone();
                    tokio::spawn(
                        async move {
                            let verdict = node.workspace.cleanup(&id).await;
                            node.finish_cleanup(&id);
                            // Waiters may all be gone; the elections keep
                            // the result. Dropping the guard instead (the
                            // runtime shutting down) publishes `Abandoned`.
                            guard.complete(report(id, verdict));
                        }
                        .in_current_span(),
                    );
                    (waiter, true)
                }
                Elected::Waiter(waiter) => (waiter, false),
            }
        };
        let mut report = match waiter.await {
            Ok(report) => report,
            Err(Abandoned) => CleanupReport {
                request_id,
                status: CleanupStatus::Failed,
                code: Some(Code::from(codes::SHUTTING_DOWN)),
                cached: false,
            },
        };
        report.cached = !owner;
        report
    }

    fn finish_cleanup(&self, id: &RequestId) {
        let mut table = self.table();
        table.cleaned.push_back(id.clone());
        while table.cleaned.len() > self.config.cleanup_cache {
            if let Some(old) = table.cleaned.pop_front() {
                // Forgetting a closed id lets a later duplicate elect a new
                // owner once the elections evicted its result too; it asks
                // the workspace again, whose cleanup of a gone job is a no-op.
                table.slots.remove(&old);
            }
        }
    }

    /// Ids of requests that are open (cleanup not started).
    pub fn open_requests(&self) -> Vec<RequestId> {
        self.table()
            .slots
            .iter()
            .filter(|(_, s)| matches!(s, Slot::Open))
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

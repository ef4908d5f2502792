//! [`Acceptor`]: the node's accept loop on a Unix socket, bounded and
//! well-behaved at exhaustion.
//!
//! # Theory of operation
//!
//! [`Acceptor::accept`] returns the next connection the node may serve,
//! with a [`ConnectionSlot`] that counts it until dropped. Everything else
//! is answered or waited out inside it, so the caller's loop never sees an
//! error and never spins:
//!
//! - **Past the bound** (`max_connections` slots held), a connection is
//!   accepted, answered one `too_many_connections` error line and closed.
//! - **Out of descriptors** (`EMFILE`, `ENFILE`), one descriptor of the
//!   [`FdReserve`] is closed, the waiting connections are accepted into it
//!   one by one, each answered `too_many_connections` and closed, and the
//!   descriptor is taken back; the shortage also puts the reserve under
//!   pressure, so that cleanups lend it. Only when the reserve is empty
//!   does the loop wait.
//! - **Out of memory** (`ENOMEM`, `ENOBUFS`) or any unexpected error, the
//!   loop waits, doubling the wait from 10 ms up to 1 s, and logs one
//!   warning per 10 s with the number it held back.
//! - An error that concerns one connection only (`ECONNABORTED`, `EINTR`,
//!   `EPROTO`, `EPERM`) is skipped.
//! - **A peer in another user namespace** than the node's — every confined
//!   tool runs in one of its own, and may reach a socket outside its view —
//!   or one whose namespace cannot be verified, is answered
//!   `peer_namespace_refused` and closed before a request is read
//!   ([`crate::confine::peer`]), unless
//!   [`admit_other_user_namespaces`](Acceptor::admit_other_user_namespaces).
//!   The check takes two descriptors for a moment, under the allocation
//!   gate; when it finds none, the connection is answered
//!   `too_many_connections` and the reserve is put under pressure, as for a
//!   failed accept.
//!
//! Each accept runs under the reserve's allocation gate, so a cleanup that
//! holds the reserve is never raced for its descriptors by a new connection:
//! the connections wait in the listen backlog until the cleanup is done. The
//! loop holds the gate while it waits for a connection and lets go of it as
//! soon as a cleanup asks for the reserve ([`FdReserve::loan_wanted`]).

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use rustix::io::Errno;
use tokio::net::UnixListener;
use tracing::warn;

use super::codec::encode_line;
use super::message::{Code, Response, ResponseFrame, VERSION, codes};
use super::reserve::{FdReserve, Throttle, is_fd_shortage};
use crate::confine::peer::{PeerNamespace, peer_namespace};
use crate::error::SafeCode;

/// The default of `--max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// The shortest and longest waits after an accept failed for a lack of
/// resources.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(1));

/// How many waiting connections one borrowed descriptor answers before
/// the loop looks at the rest of its work again.
const ANSWER_BATCH: usize = 256;

/// The node's accept loop on a Unix socket; see the [module docs](self).
#[derive(Debug)]
pub struct Acceptor {
    listener: UnixListener,
    max_connections: usize,
    live: Arc<AtomicUsize>,
    reserve: Arc<FdReserve>,
    backoff: Duration,
    refused: Throttle,
    failed: Throttle,
    /// Serve peers in another user namespace too.
    other_namespaces: bool,
}

/// One served connection's place under the bound; dropping it frees it.
#[derive(Debug)]
#[must_use = "the connection counts against the bound until this is dropped"]
pub struct ConnectionSlot(Arc<AtomicUsize>);

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Acceptor {
    /// Accepts on `listener`, serving at most `max_connections`
    /// connections at once, with `reserve` as the descriptors held back for
    /// exhaustion.
    pub fn new(listener: UnixListener, max_connections: usize, reserve: Arc<FdReserve>) -> Self {
        Acceptor {
            listener,
            max_connections,
            live: Arc::new(AtomicUsize::new(0)),
            reserve,
            backoff: BACKOFF.0,
            refused: Throttle::default(),
            failed: Throttle::default(),
            other_namespaces: false,
        }
    }

    /// Whether peers in another user namespace than this process's are
    /// served (`false` by default: they are answered
    /// `peer_namespace_refused`; see the [module docs](self)).
    pub fn admit_other_user_namespaces(mut self, admit: bool) -> Self {
        self.other_namespaces = admit;
        self
    }

    /// Connections served now (their slots not yet dropped).
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }

    /// Waits for the next connection to serve. Never fails: refusals,
    /// shortages and errors are handled as the [module docs](self) say.
    /// Cancel-safe.
    pub async fn accept(&mut self) -> (tokio::net::UnixStream, ConnectionSlot) {
        loop {
            let reserve = Arc::clone(&self.reserve);
            let gate = reserve.allocating().await;
            let accepted = tokio::select! {
                biased;
                // A cleanup wants the reserve: let go of the gate, and wait
                // at it (behind the cleanup) on the next turn.
                () = reserve.loan_wanted() => continue,
                accepted = self.listener.accept() => accepted,
            };
            match accepted {
                Ok((stream, _)) => {
                    // Under the gate: the check takes descriptors.
                    let peer = (!self.other_namespaces).then(|| peer_namespace(&stream));
                    drop(gate);
                    self.backoff = BACKOFF.0;
                    match peer {
                        None | Some(Ok(PeerNamespace::Same)) => {}
                        Some(Err(e)) if is_fd_shortage(&e) => {
                            self.reserve.note_shortage();
                            if let Ok(stream) = stream.into_std() {
                                refuse(stream, codes::TOO_MANY_CONNECTIONS);
                            }
                            self.note_refused(1, "out of file descriptors");
                            continue;
                        }
                        Some(seen) => {
                            warn!(
                                peer = ?seen.map_err(|e| e.kind()),
                                "refused a peer in another user namespace (a sandbox), or one that could not be verified"
                            );
                            if let Ok(stream) = stream.into_std() {
                                refuse(stream, codes::PEER_NAMESPACE_REFUSED);
                            }
                            continue;
                        }
                    }
                    if take(&self.live, self.max_connections) {
                        return (stream, ConnectionSlot(Arc::clone(&self.live)));
                    }
                    match stream.into_std() {
                        Ok(stream) => refuse(stream, codes::TOO_MANY_CONNECTIONS),
                        Err(e) => self.note_failed(&e),
                    }
                    self.note_refused(1, "the connection bound is reached");
                }
                Err(e) if is_fd_shortage(&e) => {
                    self.reserve.note_shortage();
                    drop(gate);
                    // Alone: no other allocation may take the borrowed
                    // descriptor before it is taken back.
                    let alone = reserve.exclusive().await;
                    let answered = self.answer_at_limit();
                    drop(alone);
                    if answered > 0 {
                        self.note_refused(answered, "out of file descriptors");
                    } else {
                        // Nothing to borrow: wait for descriptors to return.
                        self.note_failed(&e);
                        self.wait().await;
                    }
                }
                Err(e) if per_connection(&e) => {}
                Err(e) => {
                    drop(gate);
                    self.note_failed(&e);
                    self.wait().await;
                }
            }
        }
    }

    /// One accept that does not wait: `None` when no connection is waiting
    /// (or it failed).
    fn try_accept(&self) -> Option<UnixStream> {
        let mut cx = Context::from_waker(Waker::noop());
        match self.listener.poll_accept(&mut cx) {
            Poll::Ready(Ok((stream, _))) => stream.into_std().ok(),
            Poll::Ready(Err(_)) | Poll::Pending => None,
        }
    }

    /// Answers the connections waiting in the backlog with one reserve
    /// descriptor (closed, reused for each, then taken back); returns how
    /// many were answered.
    fn answer_at_limit(&self) -> usize {
        if !self.reserve.release_one() {
            return 0;
        }
        let mut answered = 0;
        while answered < ANSWER_BATCH {
            match self.try_accept() {
                Some(stream) => {
                    refuse(stream, codes::TOO_MANY_CONNECTIONS);
                    answered += 1;
                }
                None => break,
            }
        }
        self.reserve.refill();
        answered
    }

    async fn wait(&mut self) {
        tokio::time::sleep(self.backoff).await;
        self.backoff = (self.backoff * 2).min(BACKOFF.1);
    }

    fn note_refused(&mut self, n: usize, why: &'static str) {
        if let Some(held_back) = self.refused.add(n as u64) {
            warn!(
                refused = held_back,
                live = self.live(),
                why,
                "refused connections with too_many_connections"
            );
        }
    }

    fn note_failed(&mut self, e: &io::Error) {
        if let Some(held_back) = self.failed.add(1) {
            warn!(error = %e, failures = held_back, wait = ?self.backoff, "accept failed; backing off");
        }
    }
}

fn take(count: &AtomicUsize, max: usize) -> bool {
    count
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .is_ok()
}

/// An accept error about that one connection (the next accept may work).
fn per_connection(e: &io::Error) -> bool {
    let raw = e.raw_os_error();
    [Errno::CONNABORTED, Errno::INTR, Errno::PROTO, Errno::PERM]
        .iter()
        .any(|n| raw == Some(n.raw_os_error()))
}

/// Answers `stream` with one error line and closes it, without waiting: a
/// fresh socket's buffer holds the line. What the peer had already sent is
/// read and dropped first, so the close does not reset the connection
/// before the peer reads the answer.
pub fn refuse(stream: UnixStream, code: SafeCode) {
    let mut line = Vec::with_capacity(96);
    encode_line(
        &ResponseFrame {
            v: VERSION,
            seq: None,
            result: Response::Error {
                request_id: None,
                code: Code::from(code),
            },
        },
        &mut line,
    );
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    let mut s = &stream;
    let _ = s.write_all(&line);
    let mut sink = [0u8; 4096];
    for _ in 0..16 {
        match s.read(&mut sink) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

//! [`FdReserve`]: file descriptors held back so that a cleanup can always
//! run, even when the node is at its descriptor limit.
//!
//! # Theory of operation
//!
//! A cleanup needs descriptors of its own (the job directory, each
//! directory it walks, the journal). When the node's table is full — too
//! many connections, a low `ulimit -n`, a system out of files — a cleanup
//! that cannot open them fails, and the request's files stay behind. So the
//! node opens a few descriptors at start (`/dev/null`, close-on-exec) and
//! keeps them: everything else the node opens comes out of the rest of the
//! table, and the reserve is what is left when the rest is gone.
//!
//! The reserve is used in two ways:
//!
//! - **To answer at the limit.** When `accept` fails with `EMFILE` or
//!   `ENFILE`, the acceptor ([`super::listen`]) closes one reserve
//!   descriptor, accepts the waiting connection into it, answers it
//!   `too_many_connections`, closes it and takes the descriptor back: a
//!   client at the limit gets a typed answer, never a connection that hangs
//!   in the backlog, and the accept loop never spins.
//! - **To let a cleanup run.** A descriptor shortage seen anywhere by the
//!   node (an `accept`, an open, a launch) puts the reserve *under pressure*
//!   for [`PRESSURE_WINDOW`]. A cleanup that starts under pressure
//!   [lends](FdReserve::lend) the reserve: it waits until no allocation of
//!   the node is under way, closes the reserve's descriptors and runs with
//!   them free; until it finishes, every other allocation site of the node
//!   (accept, open, artifact write, process launch) waits at the
//!   [gate](FdReserve::allocating). Cleanups under pressure therefore run one
//!   at a time, each with the whole reserve; outside pressure nothing waits
//!   and cleanups run concurrently as usual.
//!
//! # Caveats
//!
//! The guarantee covers the node's own allocation sites. Descriptors opened
//! outside them while a cleanup holds the reserve — the runtime's own, a
//! running process's settlement reading its cgroup — come out of the
//! reserve too; the default size ([`DEFAULT_FD_RESERVE`]) leaves room for
//! them. `ENFILE` is system-wide: another process may take a descriptor the
//! reserve released.

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedRwLockWriteGuard, RwLock, RwLockReadGuard};
use tracing::{debug, warn};

use crate::sync::lock_std;

/// The default number of descriptors held in reserve.
pub const DEFAULT_FD_RESERVE: usize = 32;

/// How long a descriptor shortage keeps the reserve under pressure.
pub const PRESSURE_WINDOW: Duration = Duration::from_secs(5);

/// Descriptors held back for cleanups; see the [module docs](self).
#[derive(Debug)]
pub struct FdReserve {
    target: usize,
    fds: Mutex<Vec<File>>,
    gate: Arc<RwLock<()>>,
    /// Lenders waiting for the gate; with `wanted`, tells an allocation
    /// site that holds the gate while it waits for a peer to let go.
    lenders_waiting: AtomicUsize,
    wanted: Notify,
    pressure_until: Mutex<Option<Instant>>,
    refill_failed: Mutex<Throttle>,
}

impl FdReserve {
    /// Opens `count` descriptors (`/dev/null`, close-on-exec) and holds
    /// them. `0` holds none: lending is then a no-op.
    ///
    /// # Errors
    ///
    /// The OS error of opening `/dev/null` (the table is already full).
    pub fn new(count: usize) -> io::Result<Arc<Self>> {
        let mut fds = Vec::with_capacity(count);
        for _ in 0..count {
            fds.push(File::open("/dev/null")?);
        }
        Ok(Arc::new(FdReserve {
            target: count,
            fds: Mutex::new(fds),
            gate: Arc::new(RwLock::new(())),
            lenders_waiting: AtomicUsize::new(0),
            wanted: Notify::new(),
            pressure_until: Mutex::new(None),
            refill_failed: Mutex::new(Throttle::default()),
        }))
    }

    /// A reserve of none: nothing held, nothing lent, no gate ever closed.
    pub fn none() -> Arc<Self> {
        Self::new(0).expect("holding nothing cannot fail")
    }

    /// How many descriptors the reserve is meant to hold.
    pub fn target(&self) -> usize {
        self.target
    }

    /// How many it holds now (fewer while lent, or after a refill failed).
    pub fn held(&self) -> usize {
        self.lock_fds().len()
    }

    /// Records a descriptor shortage (`EMFILE`, `ENFILE`) seen by the node:
    /// cleanups that start within [`PRESSURE_WINDOW`] lend the reserve.
    pub fn note_shortage(&self) {
        let until = Instant::now() + PRESSURE_WINDOW;
        *lock_std(&self.pressure_until) = Some(until);
    }

    /// Records `error` as a shortage if it is one; returns whether it was.
    pub fn note_if_shortage(&self, error: &io::Error) -> bool {
        let short = is_fd_shortage(error);
        if short {
            self.note_shortage();
        }
        short
    }

    /// Whether a shortage was seen within [`PRESSURE_WINDOW`].
    pub fn under_pressure(&self) -> bool {
        lock_std(&self.pressure_until).is_some_and(|until| Instant::now() < until)
    }

    /// Waits until no cleanup holds the reserve, and returns a permit for
    /// one allocation of the node (an accept, an open, a write, a launch):
    /// while it is held, no cleanup lends the reserve. Hold it across the
    /// allocating calls only; a holder that waits for a peer meanwhile (the
    /// accept loop) must let go when [`FdReserve::loan_wanted`] completes.
    pub async fn allocating(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read().await
    }

    /// Completes when a cleanup asks for the reserve: a holder of an
    /// [`allocating`](FdReserve::allocating) permit that waits for a peer
    /// drops it then. May complete spuriously.
    pub async fn loan_wanted(&self) {
        let notified = self.wanted.notified();
        tokio::pin!(notified);
        // Registered before the check, so a lender that comes after the
        // check wakes it.
        notified.as_mut().enable();
        if self.lenders_waiting.load(Ordering::Acquire) > 0 {
            return;
        }
        notified.await;
    }

    /// Waits until no other allocation of the node is under way and none
    /// can start: for a short, synchronous use of a borrowed descriptor.
    pub(crate) async fn exclusive(&self) -> tokio::sync::RwLockWriteGuard<'_, ()> {
        self.lenders_waiting.fetch_add(1, Ordering::AcqRel);
        self.wanted.notify_waiters();
        let gate = self.gate.write().await;
        self.lenders_waiting.fetch_sub(1, Ordering::AcqRel);
        gate
    }

    /// Lends the reserve to a cleanup when the node is under pressure:
    /// waits for the allocations under way, closes the held descriptors,
    /// and returns the loan; dropping it takes them back and reopens the
    /// gate. `None` (nothing waits, nothing is closed) outside pressure or
    /// for an empty reserve.
    pub async fn lend(self: &Arc<Self>) -> Option<Loan> {
        if self.target == 0 || !self.under_pressure() {
            return None;
        }
        // An allocation site that holds the gate while it waits for the
        // peer (the accept loop) lets go when told.
        self.lenders_waiting.fetch_add(1, Ordering::AcqRel);
        self.wanted.notify_waiters();
        let gate = Arc::clone(&self.gate).write_owned().await;
        self.lenders_waiting.fetch_sub(1, Ordering::AcqRel);
        let released = std::mem::take(&mut *self.lock_fds()).len();
        debug!(released, "the descriptor reserve is lent to a cleanup");
        Some(Loan {
            reserve: Arc::clone(self),
            _gate: gate,
        })
    }

    /// Closes one held descriptor so that the caller can open one in its
    /// place; `false` if none is held. Follow with [`FdReserve::refill`].
    pub(crate) fn release_one(&self) -> bool {
        self.lock_fds().pop().is_some()
    }

    /// Reopens held descriptors up to the target; a failure (the table is
    /// full again) is logged and retried at the next refill.
    pub(crate) fn refill(&self) {
        let mut fds = self.lock_fds();
        while fds.len() < self.target {
            match File::open("/dev/null") {
                Ok(f) => fds.push(f),
                Err(e) => {
                    let mut t = lock_std(&self.refill_failed);
                    if let Some(failures) = t.add(1) {
                        warn!(error = %e, held = fds.len(), target = self.target, failures,
                            "the descriptor reserve could not be refilled");
                    }
                    return;
                }
            }
        }
    }

    fn lock_fds(&self) -> std::sync::MutexGuard<'_, Vec<File>> {
        lock_std(&self.fds)
    }
}

/// A cleanup's hold on the reserve ([`FdReserve::lend`]).
#[derive(Debug)]
#[must_use = "the reserve is taken back when the loan is dropped"]
pub struct Loan {
    reserve: Arc<FdReserve>,
    _gate: OwnedRwLockWriteGuard<()>,
}

impl Drop for Loan {
    fn drop(&mut self) {
        // Refilled while the gate is still closed: no allocation of the
        // node can take the descriptors first.
        self.reserve.refill();
    }
}

/// Whether `error` is the process or the system running out of
/// descriptors (`EMFILE`, `ENFILE`).
pub fn is_fd_shortage(error: &io::Error) -> bool {
    let raw = error.raw_os_error();
    raw == Some(rustix::io::Errno::MFILE.raw_os_error())
        || raw == Some(rustix::io::Errno::NFILE.raw_os_error())
}

/// At most one warning of a kind per this long.
pub(crate) const WARN_EVERY: Duration = Duration::from_secs(10);

/// Counts events and lets one through per [`WARN_EVERY`].
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    last: Option<Instant>,
    held_back: u64,
}

impl Throttle {
    /// Counts `n` events; `Some(count since the last one let through)`
    /// when this one may be logged.
    pub(crate) fn add(&mut self, n: u64) -> Option<u64> {
        self.held_back += n;
        let now = Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < WARN_EVERY)
        {
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.held_back))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_throttle_lets_one_through_per_period_and_counts_the_rest() {
        let mut t = Throttle::default();
        assert_eq!(t.add(1), Some(1));
        assert_eq!(t.add(5), None);
        assert_eq!(t.add(2), None);
        t.last = Some(Instant::now() - WARN_EVERY);
        assert_eq!(t.add(1), Some(8));
    }

    #[tokio::test]
    async fn a_loan_releases_and_takes_back_the_reserve_only_under_pressure() {
        let r = FdReserve::new(4).unwrap();
        assert_eq!(r.held(), 4);
        assert!(r.lend().await.is_none(), "no pressure: nothing is lent");
        r.note_shortage();
        let loan = r.lend().await.expect("lent under pressure");
        assert_eq!(r.held(), 0);
        // The gate is closed while the loan is out.
        assert!(r.gate.try_read().is_err());
        drop(loan);
        assert_eq!(r.held(), 4);
        assert!(r.gate.try_read().is_ok());
    }

    #[test]
    fn shortages_are_emfile_and_enfile_only() {
        assert!(is_fd_shortage(&io::Error::from_raw_os_error(
            rustix::io::Errno::MFILE.raw_os_error()
        )));
        assert!(is_fd_shortage(&io::Error::from_raw_os_error(
            rustix::io::Errno::NFILE.raw_os_error()
        )));
        assert!(!is_fd_shortage(&io::Error::from_raw_os_error(
            rustix::io::Errno::NOMEM.raw_os_error()
        )));
    }
}

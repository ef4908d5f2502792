//! [`SettleOnce`]: a cell that is written once and read by everyone.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use super::shim::{self, Arc, Condvar, Mutex};

/// A cell that settles exactly once: the first [`settle`](Self::settle) wins
/// and every reader, early or late, blocking or async, observes that value.
///
/// `SettleOnce` is a handle: cloning it gives another handle to the same
/// cell, so one clone can be moved into a task that settles it while others
/// wait.
///
/// Waiting works from synchronous code ([`wait`](Self::wait), which blocks
/// the thread) and from async code ([`wait_async`](Self::wait_async), a
/// cancel-safe future). Async waiters are kept in a small hand-rolled list of
/// [`Waker`]s rather than a tokio primitive, so the same code runs under loom.
///
/// # Examples
///
/// ```
/// use custodian::sync::SettleOnce;
///
/// let cell = SettleOnce::new();
/// assert_eq!(cell.get(), None);
/// assert!(cell.settle("first").is_ok());
///
/// let refused = cell.settle("second").unwrap_err();
/// assert_eq!(refused.winner, "first");
/// assert_eq!(refused.rejected, "second");
/// assert_eq!(cell.wait(), "first");
/// ```
pub struct SettleOnce<T> {
    shared: Arc<Shared<T>>,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    settled: Condvar,
}

struct State<T> {
    value: Option<T>,
    /// Async waiters registered while the cell was unsettled, keyed by the
    /// id their future holds so a dropped future can remove exactly its own.
    wakers: Vec<(u64, Waker)>,
    next_id: u64,
}

/// The refusal returned by [`SettleOnce::settle`] when the cell had already
/// settled: it gives the caller's value back and tells it the winner.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the cell had already settled; this value was refused")]
#[non_exhaustive]
pub struct AlreadySettled<T> {
    /// The value the refused caller tried to settle with, handed back.
    pub rejected: T,
    /// The value that won and that every reader observes.
    pub winner: T,
}

impl<T> SettleOnce<T> {
    /// Creates an unsettled cell.
    pub fn new() -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    value: None,
                    wakers: Vec::new(),
                    next_id: 0,
                }),
                settled: Condvar::new(),
            }),
        }
    }

    /// Returns true once the cell has settled.
    pub fn is_settled(&self) -> bool {
        shim::lock(&self.shared.state).value.is_some()
    }

    /// Returns how many async waiters are currently registered.
    ///
    /// A diagnostic: it is zero once the cell has settled, and a dropped
    /// [`Settled`] future removes its registration, so it never grows with
    /// abandoned waits.
    pub fn registered_wakers(&self) -> usize {
        shim::lock(&self.shared.state).wakers.len()
    }

    /// Settles the cell with `value` if nobody has yet and wakes every
    /// waiter; a refused value is handed back. Needs no `T: Clone`.
    pub(crate) fn try_settle(&self, value: T) -> Result<(), T> {
        let wakers = {
            let mut state = shim::lock(&self.shared.state);
            if state.value.is_some() {
                return Err(value);
            }
            state.value = Some(value);
            std::mem::take(&mut state.wakers)
        };
        // Wake outside the lock: a waker may run code (or, under a
        // single-threaded executor, poll the future) that takes the lock.
        self.shared.settled.notify_all();
        for (_, waker) in wakers {
            waker.wake();
        }
        Ok(())
    }

    /// Returns true if `self` and `other` are handles to the same cell.
    pub fn same_cell(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}

impl<T: Clone> SettleOnce<T> {
    /// Settles the cell with `value` if nobody has yet, and wakes every waiter.
    ///
    /// # Errors
    ///
    /// [`AlreadySettled`] if the cell had already settled: the cell keeps the
    /// winning value, and the error carries it together with the refused one.
    pub fn settle(&self, value: T) -> Result<(), AlreadySettled<T>> {
        self.try_settle(value).map_err(|rejected| AlreadySettled {
            rejected,
            // A settled cell never changes, so reading the winner after the
            // refusal observes the very value that refused us.
            winner: self.get().expect("a refused settle implies a settled cell"),
        })
    }

    /// Returns the settled value, or `None` if the cell has not settled yet.
    pub fn get(&self) -> Option<T> {
        shim::lock(&self.shared.state).value.clone()
    }

    /// Blocks the current thread until the cell settles and returns its value.
    ///
    /// # Caveats
    ///
    /// This parks an OS thread: from async code use
    /// [`wait_async`](Self::wait_async) instead, or a tokio worker is blocked.
    pub fn wait(&self) -> T {
        let mut state = shim::lock(&self.shared.state);
        loop {
            if let Some(value) = &state.value {
                return value.clone();
            }
            state = shim::wait(&self.shared.settled, state);
        }
    }

    /// Returns a future that resolves to the settled value.
    ///
    /// The future is cancel-safe: the value lives in the cell, not in the
    /// future, so dropping it loses nothing, and its drop removes its waker
    /// from the cell so abandoned waits do not accumulate.
    pub fn wait_async(&self) -> Settled<T> {
        Settled {
            shared: Arc::clone(&self.shared),
            slot: None,
        }
    }
}

impl<T> Clone for SettleOnce<T> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T> Default for SettleOnce<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: fmt::Debug> fmt::Debug for SettleOnce<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = shim::lock(&self.shared.state);
        f.debug_struct("SettleOnce")
            .field("value", &state.value)
            .field("registered_wakers", &state.wakers.len())
            .finish()
    }
}

/// The future returned by [`SettleOnce::wait_async`]: resolves to the settled
/// value. Dropping it before it resolves is safe and unregisters its waker.
#[must_use = "futures do nothing unless polled"]
pub struct Settled<T> {
    shared: Arc<Shared<T>>,
    /// The id of this future's entry in the waker list, while it has one.
    slot: Option<u64>,
}

impl<T: Clone> Future for Settled<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let this = &mut *self;
        let mut state = shim::lock(&this.shared.state);
        if let Some(value) = &state.value {
            // `settle` drained the list when it stored the value, so our
            // entry (if any) is already gone.
            this.slot = None;
            return Poll::Ready(value.clone());
        }
        // Checking the value and registering happen under one lock, and
        // `settle` stores the value and drains the list under the same lock,
        // so a wake-up cannot fall between the two.
        match this.slot {
            Some(id) => {
                if let Some((_, waker)) = state.wakers.iter_mut().find(|(slot, _)| *slot == id) {
                    if !waker.will_wake(cx.waker()) {
                        waker.clone_from(cx.waker());
                    }
                }
            }
            None => {
                let id = state.next_id;
                state.next_id += 1;
                state.wakers.push((id, cx.waker().clone()));
                this.slot = Some(id);
            }
        }
        Poll::Pending
    }
}

impl<T> Drop for Settled<T> {
    fn drop(&mut self) {
        if let Some(id) = self.slot.take() {
            let mut state = shim::lock(&self.shared.state);
            if let Some(at) = state.wakers.iter().position(|(slot, _)| *slot == id) {
                state.wakers.swap_remove(at);
            }
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for Settled<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settled")
            .field("registered", &self.slot.is_some())
            .finish_non_exhaustive()
    }
}

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

#[cfg(all(test, not(custodian_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    /// A waker that counts its wake-ups, for driving futures by hand.
    struct CountingWaker(AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting_waker() -> (std::sync::Arc<CountingWaker>, Waker) {
        let counter = std::sync::Arc::new(CountingWaker(AtomicUsize::new(0)));
        (counter.clone(), Waker::from(counter))
    }

    fn poll_once<T: Clone>(future: &mut Settled<T>, waker: &Waker) -> Poll<T> {
        Pin::new(future).poll(&mut Context::from_waker(waker))
    }

    #[test]
    fn first_settle_wins_and_later_ones_are_told_the_winner() {
        let cell = SettleOnce::new();
        assert!(!cell.is_settled());
        assert_eq!(cell.settle(1), Ok(()));
        for loser in [2, 1, 3] {
            let refused = cell.settle(loser).unwrap_err();
            assert_eq!(refused.rejected, loser);
            assert_eq!(refused.winner, 1);
        }
        assert_eq!(cell.get(), Some(1));
        assert_eq!(cell.wait(), 1);
    }

    #[test]
    fn clones_are_handles_to_the_same_cell() {
        let cell = SettleOnce::new();
        let other = cell.clone();
        assert!(cell.same_cell(&other));
        assert!(!cell.same_cell(&SettleOnce::new()));
        other.settle("x").unwrap();
        assert_eq!(cell.get(), Some("x"));
    }

    #[test]
    fn racing_settlers_elect_exactly_one_winner_seen_by_all() {
        for _ in 0..50 {
            let cell = SettleOnce::new();
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
            let racers: Vec<_> = (0..4)
                .map(|i| {
                    let (cell, barrier) = (cell.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        match cell.settle(i) {
                            Ok(()) => (true, i),
                            Err(refused) => (false, refused.winner),
                        }
                    })
                })
                .collect();
            let results: Vec<_> = racers.into_iter().map(|r| r.join().unwrap()).collect();
            let winners: Vec<_> = results.iter().filter(|(won, _)| *won).collect();
            assert_eq!(winners.len(), 1, "{results:?}");
            let value = cell.get().unwrap();
            assert!(
                results.iter().all(|(_, seen)| *seen == value),
                "{results:?}"
            );
        }
    }

    #[test]
    fn blocking_readers_before_and_after_settle_see_the_same_value() {
        let cell = SettleOnce::new();
        let early: Vec<_> = (0..3)
            .map(|_| {
                let cell = cell.clone();
                std::thread::spawn(move || cell.wait())
            })
            .collect();
        cell.settle(String::from("done")).unwrap();
        for reader in early {
            assert_eq!(reader.join().unwrap(), "done");
        }
        assert_eq!(cell.wait(), "done");
    }

    #[test]
    fn async_waiter_registers_once_and_is_woken_by_settle() {
        let cell = SettleOnce::new();
        let mut future = cell.wait_async();
        let (count, waker) = counting_waker();
        assert_eq!(poll_once(&mut future, &waker), Poll::Pending);
        assert_eq!(poll_once(&mut future, &waker), Poll::Pending);
        assert_eq!(
            cell.registered_wakers(),
            1,
            "re-polling must not add entries"
        );
        cell.settle(7).unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(cell.registered_wakers(), 0);
        assert_eq!(poll_once(&mut future, &waker), Poll::Ready(7));
    }

    #[test]
    fn repolling_with_a_new_waker_wakes_only_the_new_one() {
        let cell = SettleOnce::new();
        let mut future = cell.wait_async();
        let (old_count, old) = counting_waker();
        let (new_count, new) = counting_waker();
        assert_eq!(poll_once(&mut future, &old), Poll::Pending);
        assert_eq!(poll_once(&mut future, &new), Poll::Pending);
        assert_eq!(cell.registered_wakers(), 1);
        cell.settle(()).unwrap();
        assert_eq!(old_count.0.load(Ordering::SeqCst), 0);
        assert_eq!(new_count.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn dropped_async_waiter_unregisters_and_loses_nothing() {
        let cell = SettleOnce::new();
        let (_, waker) = counting_waker();
        let mut kept = cell.wait_async();
        for _ in 0..10 {
            let mut dropped = cell.wait_async();
            assert_eq!(poll_once(&mut dropped, &waker), Poll::Pending);
        }
        assert_eq!(poll_once(&mut kept, &waker), Poll::Pending);
        assert_eq!(cell.registered_wakers(), 1, "dropped futures leaked wakers");
        cell.settle(5).unwrap();
        assert_eq!(poll_once(&mut kept, &waker), Poll::Ready(5));
        let mut late = cell.wait_async();
        assert_eq!(poll_once(&mut late, &waker), Poll::Ready(5));
        assert_eq!(cell.registered_wakers(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn async_waiters_on_tokio_all_observe_the_value() {
        let cell = SettleOnce::new();
        let tasks: Vec<_> = (0..8).map(|_| tokio::spawn(cell.wait_async())).collect();
        let settler = {
            let cell = cell.clone();
            std::thread::spawn(move || cell.settle(42u32))
        };
        settler.join().unwrap().unwrap();
        for task in tasks {
            assert_eq!(task.await.unwrap(), 42);
        }
        assert_eq!(cell.wait_async().await, 42);
    }

    #[tokio::test]
    async fn cancelled_async_wait_leaves_the_cell_clean() {
        let cell = SettleOnce::<u8>::new();
        let timed_out =
            tokio::time::timeout(std::time::Duration::from_millis(1), cell.wait_async()).await;
        assert!(timed_out.is_err());
        assert_eq!(cell.registered_wakers(), 0);
        cell.settle(1).unwrap();
        assert_eq!(cell.wait_async().await, 1);
    }

    #[test]
    fn is_settled_turns_true_on_settle_and_stays_true() {
        let cell = SettleOnce::new();
        assert!(!cell.is_settled());
        cell.settle(0u8).unwrap();
        assert!(cell.is_settled());
        assert!(cell.settle(1).is_err());
        assert!(cell.is_settled());
    }

    #[test]
    fn debug_shows_the_state_not_an_empty_string() {
        let cell = SettleOnce::new();
        let (_, waker) = counting_waker();
        let mut future = cell.wait_async();
        assert_eq!(poll_once(&mut future, &waker), Poll::Pending);
        let mut printed = vec![format!("{cell:?}"), format!("{future:?}")];
        cell.settle(9u8).unwrap();
        printed.push(format!("{cell:?}"));
        // One comparison, so a failure shows every line that changed.
        assert_eq!(
            printed,
            [
                "SettleOnce { value: None, registered_wakers: 1 }",
                "Settled { registered: true, .. }",
                "SettleOnce { value: Some(9), registered_wakers: 0 }",
            ]
        );
    }

    #[test]
    fn dropping_one_waiter_keeps_the_other_waiters_registration() {
        let cell = SettleOnce::new();
        let (kept_count, kept_waker) = counting_waker();
        let (gone_count, gone_waker) = counting_waker();
        let mut kept = cell.wait_async();
        let mut gone = cell.wait_async();
        assert_eq!(poll_once(&mut kept, &kept_waker), Poll::Pending);
        assert_eq!(poll_once(&mut gone, &gone_waker), Poll::Pending);
        drop(gone);
        assert_eq!(cell.registered_wakers(), 1);
        cell.settle(3u8).unwrap();
        assert_eq!(kept_count.0.load(Ordering::SeqCst), 1, "kept waiter lost");
        assert_eq!(
            gone_count.0.load(Ordering::SeqCst),
            0,
            "dropped waiter woken"
        );
        assert_eq!(poll_once(&mut kept, &kept_waker), Poll::Ready(3));
    }
}

//! Cleanup elections: the first caller owns the work, everyone gets its result.

use std::borrow::Borrow;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::IntoFuture;
use std::hash::Hash;

use super::settle::{SettleOnce, Settled};
use super::shim::{self, Arc, Mutex, atomic::AtomicBool, atomic::Ordering};

/// The result every participant of an election observes: the owner's value,
/// or [`Abandoned`] if the owner's guard was dropped without completing.
pub type Outcome<V> = Result<V, Abandoned>;

/// How the owner's result is filed once published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Filing {
    /// The result of work that ran: every later participant receives it
    /// (while the keyed form keeps it cached).
    Final,
    /// The work could not run (see [`OwnerGuard::complete_transient`]):
    /// only the participants holding the result now receive it.
    Transient,
}

/// The owner's [`OwnerGuard`] was dropped (or [`abandon`](OwnerGuard::abandon)ed)
/// before it completed the work, so no value exists.
///
/// This is a final result, never a retry signal: waiters stop waiting and
/// observe it, and later callers of the same election observe it too. The
/// work may have been partly done; a caller mapping this to a domain error
/// must treat it as a failure (a cleanup that was abandoned failed closed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[error("the election's owner was dropped before it completed the work")]
pub struct Abandoned;

/// What [`Election::elect`] and [`Elections::elect`] hand a caller.
#[must_use = "dropping an `Owner` guard abandons the work for every waiter"]
pub enum Elected<V> {
    /// This caller won: it must do the work and [`complete`](OwnerGuard::complete)
    /// the guard (or drop it, which settles [`Abandoned`]).
    Owner(OwnerGuard<V>),
    /// Somebody else owns (or already did) the work: wait for its result.
    Waiter(Waiter<V>),
}

impl<V> Elected<V> {
    /// Returns true if this caller became the owner.
    pub fn is_owner(&self) -> bool {
        matches!(self, Self::Owner(_))
    }

    /// Returns a waiter on this election's result, whichever side this is.
    pub fn waiter(&self) -> Waiter<V> {
        match self {
            Self::Owner(guard) => guard.waiter(),
            Self::Waiter(waiter) => waiter.clone(),
        }
    }
}

impl<V> fmt::Debug for Elected<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Owner(_) => f.write_str("Elected::Owner(..)"),
            Self::Waiter(_) => f.write_str("Elected::Waiter(..)"),
        }
    }
}

/// Proof of ownership of an election's work.
///
/// [`complete`](Self::complete) publishes the result to every waiter; dropping
/// the guard without completing publishes [`Abandoned`], so waiters never
/// hang on an owner that went away (panicked, was cancelled, or forgot).
///
/// The guard is `Send + 'static`: move it into the task that does the work
/// (e.g. `tokio::spawn`) so the work outlives every caller, including the
/// one that won the election. See the [module docs](crate::sync).
pub struct OwnerGuard<V> {
    cell: SettleOnce<Outcome<V>>,
    /// Runs once, after the result is published (the keyed form files the
    /// result in its bounded cache here), or, for a transient result, just
    /// before (the keyed form forgets the key here).
    on_settled: Option<Box<dyn FnOnce(Filing) + Send + Sync>>,
}

impl<V> OwnerGuard<V> {
    /// A guard over `cell` that runs `on_settled` once, after publishing (just
    /// before, for a transient result).
    pub(super) fn with_hook(
        cell: SettleOnce<Outcome<V>>,
        on_settled: Box<dyn FnOnce(Filing) + Send + Sync>,
    ) -> Self {
        Self {
            cell,
            on_settled: Some(on_settled),
        }
    }

    /// Returns a waiter on the result this guard will publish.
    pub fn waiter(&self) -> Waiter<V> {
        Waiter {
            cell: self.cell.clone(),
        }
    }

    /// Publishes `value` as the election's result to every present and
    /// future participant.
    pub fn complete(mut self, value: V) {
        self.publish(Ok(value), Filing::Final);
    }

    /// Publishes `value` to every participant holding a [`Waiter`] on this
    /// attempt now, and files it as **not final**: the work could not run
    /// (the machine was out of something, nothing suspicious was found) and
    /// must be tried again.
    ///
    /// In [`Elections`], the key is forgotten, then `value` published, so
    /// the next [`elect`](Elections::elect) of the key — by a caller that
    /// already received `value` too — becomes the owner of a new attempt.
    /// Attempts never overlap: the key stays in flight until this call (the
    /// owner's work is over by then), so a caller arriving before it waits
    /// on this attempt and receives `value`. A single [`Election`] has one cell for its whole
    /// life: there the value is final like [`complete`](Self::complete)'s.
    pub fn complete_transient(mut self, value: V) {
        self.publish(Ok(value), Filing::Transient);
    }

    /// Whether this guard owns `cell`.
    pub(super) fn owns(&self, cell: &SettleOnce<Outcome<V>>) -> bool {
        self.cell.same_cell(cell)
    }

    /// Settles this attempt's cell with `value` without running its hook:
    /// for a keyed table that already forgot the attempt itself, under its
    /// own lock ([`Slots::retry`](super::Slots::retry)).
    pub(super) fn settle_detached(mut self, value: V) {
        if self.on_settled.take().is_none() {
            return;
        }
        let refused = self.cell.try_settle(Ok(value)).is_err();
        debug_assert!(!refused, "an election's cell was settled twice");
    }

    /// Publishes [`Abandoned`] explicitly (the same as dropping the guard).
    pub fn abandon(mut self) {
        self.publish(Err(Abandoned), Filing::Final);
    }

    fn publish(&mut self, outcome: Outcome<V>, filing: Filing) {
        // The hook doubles as the "not yet published" flag: taking it makes
        // every later call (including the one from `drop`) a no-op.
        let Some(on_settled) = self.on_settled.take() else {
            return;
        };
        // A transient result is forgotten before it is published: a caller
        // that saw it and enters again must find a new attempt to own, not
        // this settled cell. The work is over either way, so attempts still
        // never overlap.
        let mut hook = Some(on_settled);
        if filing == Filing::Transient {
            if let Some(forget) = hook.take() {
                forget(filing);
            }
        }
        // Only the guard settles its cell, and only once, so this cannot be
        // refused.
        let refused = self.cell.try_settle(outcome).is_err();
        debug_assert!(!refused, "an election's cell was settled twice");
        if let Some(file) = hook {
            file(filing);
        }
    }
}

impl<V> Drop for OwnerGuard<V> {
    fn drop(&mut self) {
        self.publish(Err(Abandoned), Filing::Final);
    }
}

impl<V> fmt::Debug for OwnerGuard<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnerGuard")
            .field("published", &self.on_settled.is_none())
            .finish()
    }
}

/// A handle on an election's result. Clone freely; every clone sees the same
/// [`Outcome`].
///
/// `.await` it (it implements [`IntoFuture`]; the future is cancel-safe), or
/// call [`wait`](Self::wait) from synchronous code.
pub struct Waiter<V> {
    cell: SettleOnce<Outcome<V>>,
}

impl<V> Waiter<V> {
    /// A waiter on `cell`.
    pub(super) fn on(cell: SettleOnce<Outcome<V>>) -> Self {
        Self { cell }
    }
}

impl<V: Clone> Waiter<V> {
    /// Blocks the current thread until the result is published.
    ///
    /// # Caveats
    ///
    /// Parks an OS thread; from async code `.await` the waiter instead.
    pub fn wait(&self) -> Outcome<V> {
        self.cell.wait()
    }

    /// Returns the result if it has been published.
    pub fn try_get(&self) -> Option<Outcome<V>> {
        self.cell.get()
    }

    /// Returns a cancel-safe future resolving to the result, leaving this
    /// waiter usable.
    pub fn wait_async(&self) -> Settled<Outcome<V>> {
        self.cell.wait_async()
    }
}

impl<V: Clone> IntoFuture for Waiter<V> {
    type Output = Outcome<V>;
    type IntoFuture = Settled<Outcome<V>>;

    fn into_future(self) -> Self::IntoFuture {
        self.cell.wait_async()
    }
}

impl<V> Clone for Waiter<V> {
    fn clone(&self) -> Self {
        Self {
            cell: self.cell.clone(),
        }
    }
}

impl<V> fmt::Debug for Waiter<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Waiter")
            .field("settled", &self.cell.is_settled())
            .finish()
    }
}

/// A single cleanup election: the first [`elect`](Self::elect) becomes the
/// owner, every other call — concurrent, late, or a duplicate — becomes a
/// waiter on the owner's result.
///
/// `Election` is a handle: clones share the same election.
///
/// # Examples
///
/// ```
/// use custodian::sync::{Elected, Election};
///
/// let election = Election::new();
/// let Elected::Owner(guard) = election.elect() else { unreachable!() };
/// let Elected::Waiter(duplicate) = election.elect() else { unreachable!() };
/// guard.complete("removed 3 entries");
/// assert_eq!(duplicate.wait(), Ok("removed 3 entries"));
/// // A call after completion still gets the same result, never the work.
/// assert!(!election.elect().is_owner());
/// assert_eq!(election.result(), Some(Ok("removed 3 entries")));
/// ```
pub struct Election<V> {
    claimed: Arc<AtomicBool>,
    cell: SettleOnce<Outcome<V>>,
}

impl<V> Election<V> {
    /// Creates an election nobody has entered yet.
    pub fn new() -> Self {
        Self {
            claimed: Arc::new(AtomicBool::new(false)),
            cell: SettleOnce::new(),
        }
    }

    /// Enters the election: the first caller ever gets
    /// [`Elected::Owner`], every other caller [`Elected::Waiter`].
    pub fn elect(&self) -> Elected<V> {
        // AcqRel: the winner's later writes are published through the cell's
        // lock, not this flag; the flag only has to pick exactly one winner.
        if self
            .claimed
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            Elected::Owner(OwnerGuard {
                cell: self.cell.clone(),
                on_settled: Some(Box::new(|_| {})),
            })
        } else {
            Elected::Waiter(self.waiter())
        }
    }

    /// Returns a waiter on the result without standing for owner.
    pub fn waiter(&self) -> Waiter<V> {
        Waiter {
            cell: self.cell.clone(),
        }
    }
}

impl<V: Clone> Election<V> {
    /// Returns the published result, if any.
    pub fn result(&self) -> Option<Outcome<V>> {
        self.cell.get()
    }
}

impl<V> Clone for Election<V> {
    fn clone(&self) -> Self {
        Self {
            claimed: Arc::clone(&self.claimed),
            cell: self.cell.clone(),
        }
    }
}

impl<V> Default for Election<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V> fmt::Debug for Election<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("claimed", &self.claimed.load(Ordering::Acquire))
            .field("settled", &self.cell.is_settled())
            .finish()
    }
}

/// Elections keyed by `K` (e.g. a request id), with a bounded cache of
/// completed results.
///
/// Per key this behaves like an [`Election`]: one owner, everyone else
/// waits for and receives the owner's [`Outcome`]. An election in flight is
/// never evicted. Once completed (or abandoned) its result is filed in a
/// cache of at most `capacity` results; the oldest completed results are
/// evicted first.
///
/// # Eviction never re-runs destructive work — by contract with the owner
///
/// After a key's result is evicted, the next `elect(key)` returns
/// [`Elected::Owner`] again: the cache cannot remember forever. Waiters that
/// already hold a [`Waiter`] are unaffected. The owner code is therefore
/// written so a second run is harmless: the workspace's cleanup, when
/// re-elected for a request whose result was evicted, performs only an
/// idempotent check that the request's job directory is gone (and reports
/// it), never repeats removals on anything else and never broadens its scope.
/// The cache exists so duplicates get the *same* typed result cheaply; the
/// idempotent owner keeps a re-election after eviction safe.
///
/// # A result of work that could not run is not cached
///
/// An owner that completes with [`OwnerGuard::complete_transient`] (its
/// work could not run: out of disk space, descriptors, memory) hands its
/// value to the participants waiting on that attempt, and the key is
/// forgotten: the next `elect(key)` owns a new attempt. Attempts of one key
/// never overlap — the key is in flight until the owner publishes — so
/// "exactly once" holds for the attempt that ran to a final result.
///
/// `Elections` is a handle: clones share the same table.
///
/// # Examples
///
/// ```
/// use custodian::sync::{Elected, Elections};
///
/// let cleanups: Elections<&str, u32> = Elections::new(1);
/// let Elected::Owner(guard) = cleanups.elect("req-1") else { unreachable!() };
/// guard.complete(3);
/// assert!(!cleanups.elect("req-1").is_owner()); // cached: same result
/// assert_eq!(cleanups.result("req-1"), Some(Ok(3)));
///
/// let Elected::Owner(guard) = cleanups.elect("req-2") else { unreachable!() };
/// guard.complete(0); // capacity 1: "req-1" is evicted
/// assert_eq!(cleanups.result("req-1"), None);
/// assert!(cleanups.elect("req-1").is_owner()); // owner again: must be idempotent
/// ```
pub struct Elections<K, V> {
    table: Arc<Mutex<Table<K, V>>>,
}

struct Table<K, V> {
    entries: HashMap<K, SettleOnce<Outcome<V>>>,
    /// Keys whose election has published, oldest first; only these are
    /// ever evicted.
    completed: VecDeque<K>,
    capacity: usize,
}

impl<K, V> Elections<K, V>
where
    K: Eq + Hash + Clone + Send + Sync + 'static,
    V: Send + 'static,
{
    /// Creates an empty table that keeps at most `capacity` completed results.
    ///
    /// With `capacity == 0` nothing is cached: participants present while
    /// the work runs share its result, and the next caller after completion
    /// becomes owner again.
    pub fn new(capacity: usize) -> Self {
        Self {
            table: Arc::new(Mutex::new(Table {
                entries: HashMap::new(),
                completed: VecDeque::new(),
                capacity,
            })),
        }
    }

    /// Enters the election for `key`: [`Elected::Owner`] if no election for
    /// `key` is in flight or cached, else [`Elected::Waiter`] on it.
    pub fn elect(&self, key: K) -> Elected<V> {
        let mut table = shim::lock(&self.table);
        if let Some(cell) = table.entries.get(&key) {
            return Elected::Waiter(Waiter { cell: cell.clone() });
        }
        let cell = SettleOnce::new();
        table.entries.insert(key.clone(), cell.clone());
        drop(table);
        let shared = Arc::clone(&self.table);
        Elected::Owner(OwnerGuard {
            cell,
            on_settled: Some(Box::new(move |filing| {
                let mut table = shim::lock(&shared);
                match filing {
                    Filing::Final => table.file_completed(key),
                    // Nothing ran: the next caller owns a new attempt.
                    Filing::Transient => {
                        table.entries.remove(&key);
                    }
                }
            })),
        })
    }

    /// Returns the number of results in the cache of completed elections.
    pub fn cached(&self) -> usize {
        shim::lock(&self.table).completed.len()
    }

    /// Returns the number of elections whose owner has not published yet.
    pub fn in_flight(&self) -> usize {
        let table = shim::lock(&self.table);
        table.entries.len() - table.completed.len()
    }

    /// Returns the most completed results this table keeps.
    pub fn capacity(&self) -> usize {
        shim::lock(&self.table).capacity
    }
}

impl<K, V> Elections<K, V>
where
    K: Eq + Hash,
    V: Clone,
{
    /// Returns the published result for `key` if its election completed and
    /// the result is still cached.
    pub fn result<Q>(&self, key: &Q) -> Option<Outcome<V>>
    where
        K: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        let cell = shim::lock(&self.table).entries.get(key).cloned();
        cell.and_then(|cell| cell.get())
    }
}

impl<K: Eq + Hash, V> Elections<K, V> {
    /// Whether `key`'s election was entered and is remembered: `None` if
    /// not, `Some(false)` while its owner has not published, `Some(true)`
    /// once it has (and the result is still cached).
    pub(super) fn entered<Q>(&self, key: &Q) -> Option<bool>
    where
        K: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        let cell = shim::lock(&self.table).entries.get(key).cloned();
        cell.map(|cell| cell.is_settled())
    }
}

impl<K: Eq + Hash, V> Table<K, V> {
    /// Files `key` as completed and evicts the oldest completed results
    /// beyond the capacity. In-flight elections are never evicted.
    fn file_completed(&mut self, key: K) {
        self.completed.push_back(key);
        while self.completed.len() > self.capacity {
            if let Some(oldest) = self.completed.pop_front() {
                self.entries.remove(&oldest);
            }
        }
    }
}

impl<K, V> Clone for Elections<K, V> {
    fn clone(&self) -> Self {
        Self {
            table: Arc::clone(&self.table),
        }
    }
}

impl<K, V> fmt::Debug for Elections<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let table = shim::lock(&self.table);
        f.debug_struct("Elections")
            .field("in_flight", &(table.entries.len() - table.completed.len()))
            .field("cached", &table.completed.len())
            .field("capacity", &table.capacity)
            .finish()
    }
}

#[cfg(all(test, not(custodian_loom)))]
mod tests {
    use super::*;
    use std::sync::Barrier;
    use std::time::Duration;

    fn owner<V>(elected: Elected<V>) -> OwnerGuard<V> {
        match elected {
            Elected::Owner(guard) => guard,
            Elected::Waiter(_) => panic!("expected to own the election"),
        }
    }

    fn waiter<V>(elected: Elected<V>) -> Waiter<V> {
        match elected {
            Elected::Waiter(waiter) => waiter,
            Elected::Owner(_) => panic!("expected to wait on another owner"),
        }
    }

    #[test]
    fn first_caller_owns_and_every_other_caller_gets_its_result() {
        let election = Election::new();
        let guard = owner(election.elect());
        let concurrent = waiter(election.elect());
        let duplicate = waiter(election.clone().elect());
        assert_eq!(concurrent.try_get(), None);
        guard.complete(String::from("ok"));
        assert_eq!(concurrent.wait(), Ok(String::from("ok")));
        assert_eq!(duplicate.wait(), Ok(String::from("ok")));
        let late = waiter(election.elect());
        assert_eq!(late.try_get(), Some(Ok(String::from("ok"))));
        assert_eq!(election.result(), Some(Ok(String::from("ok"))));
    }

    #[test]
    fn dropped_owner_guard_releases_blocked_waiters_with_abandoned() {
        let election = Election::<u32>::new();
        let guard = owner(election.elect());
        let blocked: Vec<_> = (0..3)
            .map(|_| {
                let w = waiter(election.elect());
                std::thread::spawn(move || w.wait())
            })
            .collect();
        drop(guard);
        for w in blocked {
            assert_eq!(w.join().unwrap(), Err(Abandoned));
        }
        // Abandoned is final: a later caller observes it and does not own.
        assert_eq!(waiter(election.elect()).wait(), Err(Abandoned));
    }

    #[test]
    fn owner_panicking_mid_work_abandons_instead_of_hanging() {
        let election = Election::<u32>::new();
        let guard = owner(election.elect());
        let w = guard.waiter();
        let worker = std::thread::spawn(move || {
            let _guard = guard;
            panic!("work failed");
        });
        assert!(worker.join().is_err());
        assert_eq!(w.wait(), Err(Abandoned));
    }

    #[test]
    fn explicit_abandon_publishes_abandoned() {
        let election = Election::<()>::new();
        let elected = election.elect();
        let w = elected.waiter();
        owner(elected).abandon();
        assert_eq!(w.try_get(), Some(Err(Abandoned)));
    }

    #[test]
    fn racing_callers_elect_exactly_one_owner() {
        for _ in 0..50 {
            let election = Election::new();
            let barrier = std::sync::Arc::new(Barrier::new(4));
            let racers: Vec<_> = (0..4u32)
                .map(|i| {
                    let (election, barrier) = (election.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        match election.elect() {
                            Elected::Owner(guard) => {
                                let w = guard.waiter();
                                guard.complete(i);
                                (true, w.wait())
                            }
                            Elected::Waiter(w) => (false, w.wait()),
                        }
                    })
                })
                .collect();
            let results: Vec<_> = racers.into_iter().map(|r| r.join().unwrap()).collect();
            assert_eq!(results.iter().filter(|(owned, _)| *owned).count(), 1);
            let published = election.result().unwrap();
            assert!(
                results.iter().all(|(_, seen)| *seen == published),
                "{results:?}"
            );
        }
    }

    #[tokio::test]
    async fn work_keeps_running_when_every_caller_is_cancelled() {
        let elections: Elections<u8, &str> = Elections::new(4);
        let (release, gate) = tokio::sync::oneshot::channel::<()>();
        let guard = owner(elections.elect(1));
        let work = tokio::spawn(async move {
            gate.await.unwrap();
            guard.complete("cleaned");
        });
        // Both the owner's caller and a duplicate give up waiting.
        for elected in [elections.elect(1), elections.elect(1)] {
            let gave_up =
                tokio::time::timeout(Duration::from_millis(1), elected.waiter().into_future())
                    .await;
            assert!(gave_up.is_err());
        }
        release.send(()).unwrap();
        work.await.unwrap();
        assert_eq!(waiter(elections.elect(1)).await, Ok("cleaned"));
    }

    #[tokio::test]
    async fn async_waiters_all_receive_the_owner_result() {
        let election = Election::new();
        let guard = owner(election.elect());
        let waiters: Vec<_> = (0..5)
            .map(|_| tokio::spawn(waiter(election.elect()).into_future()))
            .collect();
        tokio::task::yield_now().await;
        guard.complete(vec![1, 2, 3]);
        for w in waiters {
            assert_eq!(w.await.unwrap(), Ok(vec![1, 2, 3]));
        }
    }

    #[test]
    fn keyed_elections_are_independent_per_key() {
        let elections: Elections<&str, u8> = Elections::new(8);
        let a = owner(elections.elect("a"));
        let b = owner(elections.elect("b"));
        let a_dup = waiter(elections.elect("a"));
        assert_eq!(elections.in_flight(), 2);
        b.complete(2);
        assert_eq!(a_dup.try_get(), None);
        a.complete(1);
        assert_eq!(a_dup.wait(), Ok(1));
        assert_eq!(elections.result("b"), Some(Ok(2)));
        assert_eq!((elections.in_flight(), elections.cached()), (0, 2));
    }

    #[test]
    fn eviction_drops_the_oldest_completed_result_only() {
        let elections: Elections<u32, u32> = Elections::new(2);
        let held = owner(elections.elect(0)).waiter();
        let in_flight = owner(elections.elect(99));
        for key in 1..=3 {
            owner(elections.elect(key)).complete(key * 10);
        }
        // Key 0's guard was dropped right after `waiter()`, so it completed
        // first (as abandoned) and is the oldest cached result.
        assert_eq!(held.try_get(), Some(Err(Abandoned)));
        // Capacity 2: of 0 (abandoned), 1, 2, 3 only 2 and 3 remain cached.
        assert_eq!(elections.result(&0), None);
        assert_eq!(elections.result(&1), None);
        assert_eq!(elections.result(&2), Some(Ok(20)));
        assert_eq!(elections.result(&3), Some(Ok(30)));
        assert_eq!(elections.cached(), 2);
        // The in-flight election survived every eviction.
        assert!(!elections.elect(99).is_owner());
        assert_eq!(elections.in_flight(), 1);
        in_flight.complete(990);
        assert_eq!(elections.result(&99), Some(Ok(990)));
        assert_eq!(
            elections.result(&2),
            None,
            "oldest cached result goes first"
        );
        // After eviction, the next call owns again (the owner must be idempotent).
        assert!(elections.elect(1).is_owner());
    }

    #[test]
    fn zero_capacity_shares_results_only_among_present_participants() {
        let elections: Elections<&str, u8> = Elections::new(0);
        let guard = owner(elections.elect("k"));
        let present = waiter(elections.elect("k"));
        guard.complete(5);
        assert_eq!(present.wait(), Ok(5));
        assert_eq!(elections.cached(), 0);
        assert!(elections.elect("k").is_owner());
    }

    /// A result of work that could not run reaches the callers of that
    /// attempt and is not cached: the next caller owns a new attempt, and a
    /// final result after it is cached as usual.
    #[test]
    fn a_transient_result_reaches_its_waiters_and_the_next_caller_owns_again() {
        let elections: Elections<&str, &str> = Elections::new(4);
        let first = owner(elections.elect("k"));
        let present = waiter(elections.elect("k"));
        // In flight: a caller arriving now waits on this attempt.
        assert_eq!(elections.in_flight(), 1);
        first.complete_transient("no_space");
        assert_eq!(present.wait(), Ok("no_space"));
        assert_eq!(elections.result("k"), None);
        assert_eq!((elections.in_flight(), elections.cached()), (0, 0));
        let second = owner(elections.elect("k"));
        let late = waiter(elections.elect("k"));
        second.complete("cleaned");
        assert_eq!(late.wait(), Ok("cleaned"));
        assert_eq!(waiter(elections.elect("k")).wait(), Ok("cleaned"));
        assert_eq!(elections.cached(), 1);
    }

    /// A single election has one cell: a transient result is its last.
    #[test]
    fn a_single_elections_transient_result_is_final() {
        let election = Election::new();
        owner(election.elect()).complete_transient(7);
        assert_eq!(waiter(election.elect()).wait(), Ok(7));
    }

    #[test]
    fn abandoned_result_is_cached_like_any_other() {
        let elections: Elections<&str, u8> = Elections::new(4);
        drop(owner(elections.elect("k")));
        assert_eq!(waiter(elections.elect("k")).wait(), Err(Abandoned));
        assert_eq!(elections.result("k"), Some(Err(Abandoned)));
    }

    #[test]
    fn racing_keyed_callers_elect_one_owner_per_key() {
        for _ in 0..30 {
            let elections: Elections<u8, usize> = Elections::new(16);
            let barrier = std::sync::Arc::new(Barrier::new(6));
            let racers: Vec<_> = (0..6usize)
                .map(|i| {
                    let (elections, barrier) = (elections.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        let key = (i % 2) as u8;
                        match elections.elect(key) {
                            Elected::Owner(guard) => {
                                let w = guard.waiter();
                                guard.complete(i);
                                (key, true, w.wait())
                            }
                            Elected::Waiter(w) => (key, false, w.wait()),
                        }
                    })
                })
                .collect();
            let results: Vec<_> = racers.into_iter().map(|r| r.join().unwrap()).collect();
            for key in 0..2u8 {
                let of_key: Vec<_> = results.iter().filter(|(k, ..)| *k == key).collect();
                assert_eq!(of_key.iter().filter(|(_, owned, _)| *owned).count(), 1);
                let published = elections.result(&key).unwrap();
                assert!(of_key.iter().all(|(.., seen)| *seen == published));
            }
        }
    }

    #[test]
    fn capacity_reports_the_configured_bound() {
        for capacity in [0, 1, 5] {
            assert_eq!(Elections::<u8, u8>::new(capacity).capacity(), capacity);
        }
    }

    #[test]
    fn debug_shows_flags_and_counts_never_values() {
        let mut printed = Vec::new();
        let election = Election::new();
        printed.push(format!("{election:?}"));
        let elected = election.elect();
        printed.push(format!("{elected:?}"));
        printed.push(format!("{:?}", election.elect()));
        let guard = owner(elected);
        printed.push(format!("{guard:?}"));
        guard.complete("secret-value");
        printed.push(format!("{election:?}"));
        printed.push(format!("{:?}", election.waiter()));
        // Two entries, one of them completed: in flight is their difference.
        let keyed: Elections<u8, &str> = Elections::new(4);
        owner(keyed.elect(1)).complete("secret-value");
        let _running = owner(keyed.elect(2));
        printed.push(format!("{keyed:?}"));
        // One comparison, so a failure shows every line that changed.
        assert_eq!(
            printed,
            [
                "Election { claimed: false, settled: false }",
                "Elected::Owner(..)",
                "Elected::Waiter(..)",
                "OwnerGuard { published: false }",
                "Election { claimed: true, settled: true }",
                "Waiter { settled: true }",
                "Elections { in_flight: 1, cached: 1, capacity: 4 }",
            ]
        );
        assert!(printed.iter().all(|p| !p.contains("secret")), "{printed:?}");
    }
}

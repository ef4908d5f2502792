//! [`Slots`]: per-key state, decided by a caller's pure step function, with
//! the key's cleanup election and its bounded cache of results under the
//! same lock.

use std::collections::hash_map::Entry as MapEntry;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::Hash;

use super::election::{OwnerGuard, Waiter};
use super::settle::SettleOnce;
use super::shim::{self, Arc, Mutex};
use super::{Elected, Outcome};

/// What [`Slots::cleanup`] hands a caller.
#[must_use = "dropping an `Owner` guard abandons the cleanup for every waiter"]
pub enum SlotCleanup<V, D> {
    /// This caller won the key's cleanup election: it must do the work the
    /// step function decided and [`complete`](OwnerGuard::complete) the
    /// guard.
    Owner {
        /// Publishes the cleanup's result to every waiter of the key.
        guard: OwnerGuard<V>,
        /// What the step function decided for this cleanup.
        decision: D,
    },
    /// The key's cleanup was already elected (in flight or cached): wait for
    /// its result. The step function was not called.
    Waiter(Waiter<V>),
}

impl<V, D> SlotCleanup<V, D> {
    /// Returns true if this caller owns the cleanup.
    pub fn is_owner(&self) -> bool {
        matches!(self, Self::Owner { .. })
    }

    /// Returns a waiter on the cleanup's result, whichever side this is.
    pub fn waiter(&self) -> Waiter<V> {
        match self {
            Self::Owner { guard, .. } => guard.waiter(),
            Self::Waiter(waiter) => waiter.clone(),
        }
    }

    /// Forgets the decision and returns the plain election result.
    pub fn into_elected(self) -> Elected<V> {
        match self {
            Self::Owner { guard, .. } => Elected::Owner(guard),
            Self::Waiter(waiter) => Elected::Waiter(waiter),
        }
    }
}

impl<V, D: fmt::Debug> fmt::Debug for SlotCleanup<V, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Owner { decision, .. } => f
                .debug_struct("SlotCleanup::Owner")
                .field("decision", decision)
                .finish_non_exhaustive(),
            Self::Waiter(_) => f.write_str("SlotCleanup::Waiter(..)"),
        }
    }
}

/// A table of per-key slots (e.g. a node's requests): each key's state, its
/// cleanup election, and a bounded cache of completed cleanup results, all
/// under one lock.
///
/// # Theory of operation
///
/// What may happen to a key — open it, accept work for it, cancel it,
/// clean it up — is decided by a pure step function the caller supplies:
/// it sees the key's current state (`None` if the key is unknown: never
/// seen, or forgotten after eviction) and returns the next state (`None`
/// forgets the key) and a decision. `Slots` runs that function under its
/// lock and stores its answer before anyone else can look, so a decision is
/// never taken on a state another caller has changed meanwhile: a cancel
/// that has returned has fenced every later open, however the two raced.
///
/// [`cleanup`](Self::cleanup) adds the cleanup election to the same
/// critical section: the first caller for a key steps the state (e.g. to
/// "closed") *and* becomes the owner at once; every other caller, while the
/// cleanup runs and while its result is cached, is a waiter on that result
/// and never reaches the step function.
///
/// Completed cleanups are filed, oldest first, in a cache of at most
/// `capacity` keys. Evicting a key forgets its result **and** its state
/// together, in the critical section of the completion that evicted it. A
/// later cleanup of that key therefore meets `None` — the same as a key
/// never seen — and the step function decides what an unknown key's cleanup
/// does (for a workspace: the idempotent check that nothing is left, never a
/// second removal). A cleanup still running is never evicted. The cost of a
/// bounded table: an evicted key is unknown, so the step function decides
/// too what an open of an unknown key may do.
///
/// All of this uses the [`shim`] types; `loom-tests` checks a cancel racing
/// an open and a cleanup racing eviction under every interleaving.
///
/// `Slots` is a handle: clones share the same table.
///
/// # Examples
///
/// ```
/// use custodian::sync::{SlotCleanup, Slots};
///
/// #[derive(Clone, Copy, Debug, PartialEq)]
/// enum Slot { Open, Closed }
///
/// // A tiny decision function: opens are refused once cleanup started, and
/// // only a key known to be open is really removed.
/// let open = |slot: Option<&Slot>| match slot {
///     None => (Some(Slot::Open), true),
///     Some(s) => (Some(*s), *s == Slot::Open),
/// };
/// let cleanup = |slot: Option<&Slot>| (Some(Slot::Closed), slot == Some(&Slot::Open));
///
/// let slots: Slots<&str, Slot, &str> = Slots::new(1);
/// assert!(slots.apply(&"req-1", open));
/// let SlotCleanup::Owner { guard, decision: true } = slots.cleanup(&"req-1", cleanup) else {
///     unreachable!()
/// };
/// assert!(!slots.apply(&"req-1", open)); // fenced
/// assert!(!slots.cleanup(&"req-1", cleanup).is_owner()); // a duplicate waits
/// guard.complete("removed");
/// assert_eq!(slots.result(&"req-1"), Some(Ok("removed")));
/// ```
pub struct Slots<K, S, V> {
    table: Arc<Mutex<Table<K, S, V>>>,
}

struct Table<K, S, V> {
    entries: HashMap<K, Entry<S, V>>,
    /// Keys whose cleanup has published, oldest first; only these are ever
    /// evicted.
    completed: VecDeque<K>,
    capacity: usize,
}

struct Entry<S, V> {
    state: Option<S>,
    cleanup: Option<SettleOnce<Outcome<V>>>,
}

impl<K, S, V> Slots<K, S, V>
where
    K: Eq + Hash + Clone + Send + Sync + 'static,
    S: Send + 'static,
    V: Send + 'static,
{
    /// Creates an empty table that keeps at most `capacity` completed
    /// cleanups (and their keys' states).
    pub fn new(capacity: usize) -> Self {
        Self {
            table: Arc::new(Mutex::new(Table {
                entries: HashMap::new(),
                completed: VecDeque::new(),
                capacity,
            })),
        }
    }

    /// Steps `key`'s state with `step` and returns its decision.
    ///
    /// `step` gets the current state (`None`: unknown key) and returns the
    /// next one (`None`: forget it, unless its cleanup is elected) and the
    /// decision. It runs under the table's lock: it must be quick and must
    /// not call back into this table (that would deadlock).
    pub fn apply<D>(&self, key: &K, step: impl FnOnce(Option<&S>) -> (Option<S>, D)) -> D {
        let mut table = shim::lock(&self.table);
        match table.entries.get_mut(key) {
            Some(entry) => {
                let (next, decision) = step(entry.state.as_ref());
                entry.state = next;
                if entry.state.is_none() && entry.cleanup.is_none() {
                    table.entries.remove(key);
                }
                decision
            }
            None => {
                let (next, decision) = step(None);
                if next.is_some() {
                    table.entries.insert(
                        key.clone(),
                        Entry {
                            state: next,
                            cleanup: None,
                        },
                    );
                }
                decision
            }
        }
    }

    /// Enters `key`'s cleanup election. The first caller (or the first after
    /// the key was evicted) steps the state with `step` and becomes the
    /// owner, in one critical section; every other caller waits on that
    /// owner's result and `step` is not called.
    pub fn cleanup<D>(
        &self,
        key: &K,
        step: impl FnOnce(Option<&S>) -> (Option<S>, D),
    ) -> SlotCleanup<V, D> {
        let mut table = shim::lock(&self.table);
        let entry = match table.entries.entry(key.clone()) {
            MapEntry::Occupied(occupied) => occupied.into_mut(),
            MapEntry::Vacant(vacant) => vacant.insert(Entry {
                state: None,
                cleanup: None,
            }),
        };
        if let Some(cell) = &entry.cleanup {
            return SlotCleanup::Waiter(Waiter::on(cell.clone()));
        }
        let (next, decision) = step(entry.state.as_ref());
        let cell = SettleOnce::new();
        entry.state = next;
        entry.cleanup = Some(cell.clone());
        drop(table);
        let shared = Arc::clone(&self.table);
        let key = key.clone();
        let guard = OwnerGuard::with_hook(
            cell,
            Box::new(move || shim::lock(&shared).file_completed(key)),
        );
        SlotCleanup::Owner { guard, decision }
    }

    /// Returns the number of cached completed cleanups.
    pub fn cached(&self) -> usize {
        shim::lock(&self.table).completed.len()
    }

    /// Returns the number of cleanups whose owner has not published yet.
    pub fn in_flight(&self) -> usize {
        let table = shim::lock(&self.table);
        let elected = table
            .entries
            .values()
            .filter(|entry| entry.cleanup.is_some())
            .count();
        elected - table.completed.len()
    }

    /// Returns the most completed cleanups this table keeps.
    pub fn capacity(&self) -> usize {
        shim::lock(&self.table).capacity
    }

    /// Returns the keys whose state satisfies `keep`.
    pub fn keys_where(&self, mut keep: impl FnMut(&S) -> bool) -> Vec<K> {
        let table = shim::lock(&self.table);
        table
            .entries
            .iter()
            .filter(|(_, entry)| entry.state.as_ref().is_some_and(&mut keep))
            .map(|(key, _)| key.clone())
            .collect()
    }
}

impl<K: Eq + Hash, S: Clone, V> Slots<K, S, V> {
    /// Returns `key`'s state, `None` if unknown.
    pub fn get(&self, key: &K) -> Option<S> {
        shim::lock(&self.table)
            .entries
            .get(key)
            .and_then(|entry| entry.state.clone())
    }
}

impl<K: Eq + Hash, S, V: Clone> Slots<K, S, V> {
    /// Returns `key`'s published cleanup result, if its cleanup completed
    /// and is still cached.
    pub fn result(&self, key: &K) -> Option<Outcome<V>> {
        let cell = shim::lock(&self.table)
            .entries
            .get(key)
            .and_then(|entry| entry.cleanup.clone());
        cell.and_then(|cell| cell.get())
    }
}

impl<K: Eq + Hash, S, V> Table<K, S, V> {
    /// Files `key` as completed and evicts the oldest completed keys beyond
    /// the capacity, state and result together.
    fn file_completed(&mut self, key: K) {
        self.completed.push_back(key);
        while self.completed.len() > self.capacity {
            if let Some(oldest) = self.completed.pop_front() {
                self.entries.remove(&oldest);
            }
        }
    }
}

impl<K, S, V> Clone for Slots<K, S, V> {
    fn clone(&self) -> Self {
        Self {
            table: Arc::clone(&self.table),
        }
    }
}

impl<K, S, V> fmt::Debug for Slots<K, S, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let table = shim::lock(&self.table);
        f.debug_struct("Slots")
            .field("keys", &table.entries.len())
            .field("cached", &table.completed.len())
            .field("capacity", &table.capacity)
            .finish()
    }
}

#[cfg(all(test, not(custodian_loom)))]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Slot {
        Open,
        Closed,
    }

    /// Opens an unknown key; refuses once closed.
    fn open(slot: Option<&Slot>) -> (Option<Slot>, bool) {
        match slot {
            None => (Some(Slot::Open), true),
            Some(s) => (Some(*s), *s == Slot::Open),
        }
    }

    /// Closes the key; removes for real only what is known to be open.
    fn close(slot: Option<&Slot>) -> (Option<Slot>, bool) {
        (Some(Slot::Closed), slot == Some(&Slot::Open))
    }

    fn owner(cleanup: SlotCleanup<u32, bool>) -> (OwnerGuard<u32>, bool) {
        match cleanup {
            SlotCleanup::Owner { guard, decision } => (guard, decision),
            SlotCleanup::Waiter(_) => panic!("expected to own the cleanup"),
        }
    }

    #[test]
    fn a_cleanup_fences_later_opens_and_duplicates_wait() {
        let slots: Slots<u8, Slot, u32> = Slots::new(4);
        assert!(slots.apply(&1, open));
        let (guard, remove) = owner(slots.cleanup(&1, close));
        assert!(remove);
        assert!(!slots.apply(&1, open), "opened after its cleanup started");
        let duplicate = slots.cleanup(&1, close);
        assert!(!duplicate.is_owner());
        assert_eq!(slots.in_flight(), 1);
        guard.complete(7);
        assert_eq!(duplicate.waiter().wait(), Ok(7));
        assert_eq!(slots.result(&1), Some(Ok(7)));
        assert_eq!((slots.in_flight(), slots.cached()), (0, 1));
    }

    #[test]
    fn eviction_forgets_state_and_result_together() {
        let slots: Slots<u8, Slot, u32> = Slots::new(1);
        assert!(slots.apply(&1, open));
        let (guard, remove) = owner(slots.cleanup(&1, close));
        assert!(remove);
        guard.complete(1);
        let (guard, remove) = owner(slots.cleanup(&2, close));
        assert!(!remove, "an unknown key is never removed for real");
        guard.complete(2);
        assert_eq!(slots.get(&1), None);
        assert_eq!(slots.result(&1), None);
        // After eviction the key is unknown: its cleanup is owned again,
        // and the step function sees `None`.
        let (guard, remove) = owner(slots.cleanup(&1, close));
        assert!(!remove, "a second real removal after eviction");
        guard.complete(3);
        assert_eq!(slots.cached(), 1);
    }

    #[test]
    fn an_in_flight_cleanup_is_never_evicted() {
        let slots: Slots<u8, Slot, u32> = Slots::new(0);
        let (guard, _) = owner(slots.cleanup(&1, close));
        let (other, _) = owner(slots.cleanup(&2, close));
        other.complete(2);
        assert!(!slots.cleanup(&1, close).is_owner());
        assert_eq!(slots.get(&1), Some(Slot::Closed));
        guard.complete(1);
        assert_eq!(slots.get(&1), None, "capacity 0 keeps nothing completed");
    }

    #[test]
    fn a_step_that_forgets_removes_the_key_and_a_dropped_owner_abandons() {
        let slots: Slots<u8, Slot, u32> = Slots::new(4);
        assert!(slots.apply(&1, open));
        slots.apply(&1, |_| (None, ()));
        assert_eq!(slots.get(&1), None);
        assert!(slots.keys_where(|_| true).is_empty());
        let (guard, _) = owner(slots.cleanup(&3, close));
        drop(guard);
        assert_eq!(slots.result(&3), Some(Err(super::super::Abandoned)));
        assert_eq!(slots.keys_where(|s| *s == Slot::Closed), vec![3]);
    }
}

//! [`Slots`]: per-key state, decided by a caller's pure step function, with
//! the key's cleanup election and its bounded cache of results under the
//! same lock.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::Hash;

use super::election::{OwnerGuard, Waiter};
use super::settle::SettleOnce;
use super::shim::{self, Arc, Mutex};
use super::{Elected, Outcome};

/// What a step function asks of [`Slots`] besides storing the next state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SlotEffect {
    /// Nothing.
    #[default]
    None,
    /// This caller starts the key's cleanup: it gets the owner guard of the
    /// key's cleanup cell (unless an owner exists already, then a waiter).
    StartCleanup,
    /// This caller waits for the key's cleanup, started now or later: it
    /// gets a waiter on the key's cleanup cell (created if none exists yet).
    AwaitCleanup,
    /// The key's state may be forgotten once the bound is reached (e.g. it
    /// ended without a cleanup): file it with the completed cleanups.
    Retire,
}

/// What a step function returns to [`Slots::apply`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotStep<S, D> {
    /// The key's next state; `None` forgets it (unless a cleanup is in
    /// flight or cached for it).
    pub next: Option<S>,
    /// Returned to the caller of [`Slots::apply`], untouched.
    pub decision: D,
    /// What the table does with the key's cleanup cell.
    pub effect: SlotEffect,
}

/// What [`Slots::apply`] hands back.
#[must_use = "dropping an owner guard abandons the cleanup for every waiter"]
pub struct Applied<V, D> {
    /// The step function's decision.
    pub decision: D,
    /// For [`SlotEffect::StartCleanup`]: [`Elected::Owner`] (or, if the
    /// key's cleanup already has an owner, [`Elected::Waiter`]); for
    /// [`SlotEffect::AwaitCleanup`]: [`Elected::Waiter`]; otherwise `None`.
    pub cleanup: Option<Elected<V>>,
    /// This call created the key's cleanup cell: it is the first to start
    /// or await the key's cleanup (since the key was last forgotten).
    pub first: bool,
}

impl<V, D: fmt::Debug> fmt::Debug for Applied<V, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Applied")
            .field("decision", &self.decision)
            .field("cleanup", &self.cleanup)
            .field("first", &self.first)
            .finish()
    }
}

/// A table of per-key slots (e.g. a node's requests): each key's state, its
/// cleanup cell, and a bounded cache of finished keys, all under one lock.
///
/// # Theory of operation
///
/// What may happen to a key — open it, accept work for it, cancel it,
/// clean it up — is decided by a pure step function the caller supplies:
/// it sees the key's current state (`None` if the key is unknown: never
/// seen, or forgotten after eviction) and returns a [`SlotStep`]: the next
/// state, a decision for the caller, and a [`SlotEffect`] on the key's
/// cleanup. `Slots` runs that function under its lock and stores its answer
/// before anyone else can look, so a decision is never taken on a state
/// another caller has changed meanwhile: a cancel that has returned has
/// fenced every later open, however the two raced.
///
/// The cleanup cell is handed out in the same critical section. A key has
/// at most one owner of its cleanup, ever, while it is remembered:
/// [`StartCleanup`](SlotEffect::StartCleanup) makes the caller the owner
/// (the step function decides *when*, e.g. only after an open that was
/// running has finished); every [`AwaitCleanup`](SlotEffect::AwaitCleanup)
/// gets a waiter on the same cell, before or after the owner exists. A
/// second `StartCleanup` gets a waiter, never a second owner.
///
/// Keys whose cleanup published, and keys the step function
/// [`Retire`](SlotEffect::Retire)s, are filed oldest first in a cache of at
/// most `capacity` keys. Evicting a key forgets its state **and** its
/// cleanup result together, in the critical section that evicted it; a key
/// whose cleanup is still running is never evicted (it is filed again when
/// its cleanup publishes). A later input for an evicted key meets `None` —
/// the same as a key never seen — and the step function decides what that
/// means (for a workspace: a cleanup runs the idempotent check that nothing
/// is left, never a second removal). The cost of a bounded table: an
/// evicted key is unknown, so the step function also decides what an open
/// of an unknown key may do.
///
/// All of this uses the [`shim`] types; `loom-tests` checks a cancel racing
/// an open and a cleanup racing eviction under every interleaving.
///
/// `Slots` is a handle: clones share the same table.
///
/// # Examples
///
/// ```
/// use custodian::sync::{Elected, SlotEffect, SlotStep, Slots};
///
/// #[derive(Clone, Copy, Debug, PartialEq)]
/// enum Slot { Open, Closed }
///
/// // A tiny decision function: opens are refused once cleanup started, the
/// // first cleanup starts it (removing for real only what is known to be
/// // open), later ones wait for it.
/// let open = |slot: Option<&Slot>| match slot {
///     None => SlotStep { next: Some(Slot::Open), decision: true, effect: SlotEffect::None },
///     Some(s) => SlotStep { next: Some(*s), decision: *s == Slot::Open, effect: SlotEffect::None },
/// };
/// let cleanup = |slot: Option<&Slot>| match slot {
///     Some(Slot::Closed) => SlotStep { next: Some(Slot::Closed), decision: false, effect: SlotEffect::AwaitCleanup },
///     _ => SlotStep { next: Some(Slot::Closed), decision: slot.is_some(), effect: SlotEffect::StartCleanup },
/// };
///
/// let slots: Slots<&str, Slot, &str> = Slots::new(1);
/// assert!(slots.apply(&"req-1", open).decision);
/// let first = slots.apply(&"req-1", cleanup);
/// assert!(first.decision); // remove for real
/// let Some(Elected::Owner(guard)) = first.cleanup else { unreachable!() };
/// assert!(!slots.apply(&"req-1", open).decision); // fenced
/// let Some(Elected::Waiter(duplicate)) = slots.apply(&"req-1", cleanup).cleanup else {
///     unreachable!()
/// };
/// guard.complete("removed");
/// assert_eq!(duplicate.wait(), Ok("removed"));
/// assert_eq!(slots.result(&"req-1"), Some(Ok("removed")));
/// ```
pub struct Slots<K, S, V> {
    table: Arc<Mutex<Table<K, S, V>>>,
}

struct Table<K, S, V> {
    entries: HashMap<K, Entry<S, V>>,
    /// Keys that may be forgotten (cleanup published, or retired), oldest
    /// first; each at most once.
    finished: VecDeque<K>,
    capacity: usize,
}

struct Entry<S, V> {
    state: Option<S>,
    cleanup: Option<SettleOnce<Outcome<V>>>,
    /// An owner guard was handed out for `cleanup`.
    owned: bool,
    /// The owner published.
    published: bool,
    /// The key is in `finished`.
    filed: bool,
}

impl<S, V> Entry<S, V> {
    fn new() -> Self {
        Self {
            state: None,
            cleanup: None,
            owned: false,
            published: false,
            filed: false,
        }
    }

    /// A cleanup that is owned or awaited and not published pins the key.
    fn in_flight(&self) -> bool {
        self.cleanup.is_some() && !self.published
    }
}

impl<K, S, V> Slots<K, S, V>
where
    K: Eq + Hash + Clone + Send + Sync + 'static,
    S: Send + 'static,
    V: Send + 'static,
{
    /// Creates an empty table that remembers at most `capacity` finished
    /// keys (their states and cleanup results).
    pub fn new(capacity: usize) -> Self {
        Self {
            table: Arc::new(Mutex::new(Table {
                entries: HashMap::new(),
                finished: VecDeque::new(),
                capacity,
            })),
        }
    }

    /// Steps `key`'s state with `step`, applies its [`SlotEffect`] and
    /// returns its decision (and the cleanup handle the effect asked for).
    ///
    /// `step` gets the current state (`None`: unknown key). It runs under
    /// the table's lock: it must be quick and must not call back into this
    /// table (that would deadlock).
    pub fn apply<D>(
        &self,
        key: &K,
        step: impl FnOnce(Option<&S>) -> SlotStep<S, D>,
    ) -> Applied<V, D> {
        let mut guard = shim::lock(&self.table);
        let table = &mut *guard;
        if !table.entries.contains_key(key) {
            table.entries.insert(key.clone(), Entry::new());
        }
        let Some(entry) = table.entries.get_mut(key) else {
            unreachable!("inserted above")
        };
        let SlotStep {
            next,
            decision,
            effect,
        } = step(entry.state.as_ref());
        entry.state = next;
        let first = matches!(effect, SlotEffect::StartCleanup | SlotEffect::AwaitCleanup)
            && entry.cleanup.is_none();
        let cleanup = match effect {
            SlotEffect::None | SlotEffect::Retire => None,
            SlotEffect::AwaitCleanup => Some(Elected::Waiter(Waiter::on(
                entry.cleanup.get_or_insert_with(SettleOnce::new).clone(),
            ))),
            SlotEffect::StartCleanup => {
                let cell = entry.cleanup.get_or_insert_with(SettleOnce::new).clone();
                Some(if entry.owned {
                    Elected::Waiter(Waiter::on(cell))
                } else {
                    entry.owned = true;
                    let shared = Arc::clone(&self.table);
                    let key = key.clone();
                    Elected::Owner(OwnerGuard::with_hook(
                        cell,
                        // The node's state machine decides what a result
                        // means for a retry; the cell's filing is its own.
                        Box::new(move |_| shim::lock(&shared).publish(key)),
                    ))
                })
            }
        };
        if effect == SlotEffect::Retire && !entry.filed {
            entry.filed = true;
            table.file(key.clone());
        } else if entry.state.is_none() && entry.cleanup.is_none() && !entry.filed {
            // Nothing left to remember (a filed key stays until evicted, so
            // the queue never holds a key twice).
            table.entries.remove(key);
        }
        Applied {
            decision,
            cleanup,
            first,
        }
    }

    /// Ends the attempt `guard` owns as one that **could not run** (the
    /// machine was out of something; nothing was decided): under the
    /// table's lock, `key`'s state becomes `step`'s and the attempt is
    /// forgotten, so the next [`StartCleanup`](SlotEffect::StartCleanup)
    /// owns a new one; then `value` goes to the waiters of this attempt
    /// only. The key is not filed as finished: it stays remembered (and
    /// cannot be evicted) like an open one.
    ///
    /// State and cell change in one critical section, so a cleanup asked
    /// for concurrently either waits on this attempt (and gets `value`) or,
    /// stepped after, starts the next one; it never waits on an attempt
    /// nobody owns.
    ///
    /// # Panics
    ///
    /// In debug builds, if `guard` does not own `key`'s current attempt.
    pub fn retry(
        &self,
        key: &K,
        guard: OwnerGuard<V>,
        value: V,
        step: impl FnOnce(Option<&S>) -> Option<S>,
    ) {
        {
            let mut table = shim::lock(&self.table);
            if let Some(entry) = table.entries.get_mut(key) {
                let ours = entry.cleanup.as_ref().is_some_and(|c| guard.owns(c));
                debug_assert!(ours, "retry with a guard of another attempt");
                if ours {
                    entry.state = step(entry.state.as_ref());
                    entry.cleanup = None;
                    entry.owned = false;
                    entry.published = false;
                }
            }
        }
        guard.settle_detached(value);
    }

    /// Returns the number of finished keys remembered.
    pub fn finished(&self) -> usize {
        shim::lock(&self.table).finished.len()
    }

    /// Returns the number of keys whose cleanup is owned or awaited and not
    /// yet published.
    pub fn in_flight(&self) -> usize {
        let table = shim::lock(&self.table);
        table.entries.values().filter(|e| e.in_flight()).count()
    }

    /// Returns the most finished keys this table remembers.
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
    /// Returns `key`'s published cleanup result, if its cleanup published
    /// and the key is still remembered.
    pub fn result(&self, key: &K) -> Option<Outcome<V>> {
        let cell = shim::lock(&self.table)
            .entries
            .get(key)
            .and_then(|entry| entry.cleanup.clone());
        cell.and_then(|cell| cell.get())
    }
}

impl<K: Eq + Hash + Clone, S, V> Table<K, S, V> {
    /// Marks `key`'s cleanup published and files the key.
    fn publish(&mut self, key: K) {
        let Some(entry) = self.entries.get_mut(&key) else {
            return;
        };
        entry.published = true;
        if !entry.filed {
            entry.filed = true;
            self.file(key);
        }
    }

    /// Files `key` as finished and evicts the oldest finished keys beyond
    /// the capacity, state and result together. A key whose cleanup is in
    /// flight is skipped (it is filed again when it publishes).
    fn file(&mut self, key: K) {
        self.finished.push_back(key);
        while self.finished.len() > self.capacity {
            let Some(oldest) = self.finished.pop_front() else {
                break;
            };
            if let Some(entry) = self.entries.get_mut(&oldest) {
                if entry.in_flight() {
                    entry.filed = false;
                } else {
                    self.entries.remove(&oldest);
                }
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
            .field("finished", &table.finished.len())
            .field("capacity", &table.capacity)
            .finish()
    }
}

#[cfg(all(test, not(custodian_loom)))]
mod tests {
    use super::*;
    use crate::sync::Abandoned;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Slot {
        Open,
        Closed,
    }

    fn stepped<D>(next: Option<Slot>, decision: D, effect: SlotEffect) -> SlotStep<Slot, D> {
        SlotStep {
            next,
            decision,
            effect,
        }
    }

    /// Opens an unknown key; refuses once closed.
    fn open(slot: Option<&Slot>) -> SlotStep<Slot, bool> {
        match slot {
            None => stepped(Some(Slot::Open), true, SlotEffect::None),
            Some(s) => stepped(Some(*s), *s == Slot::Open, SlotEffect::None),
        }
    }

    /// The first cleanup starts it (a real removal only for a key known to
    /// be open); later ones wait for it.
    fn close(slot: Option<&Slot>) -> SlotStep<Slot, bool> {
        match slot {
            Some(Slot::Closed) => stepped(Some(Slot::Closed), false, SlotEffect::AwaitCleanup),
            _ => stepped(
                Some(Slot::Closed),
                slot == Some(&Slot::Open),
                SlotEffect::StartCleanup,
            ),
        }
    }

    fn owner(applied: Applied<u32, bool>) -> (OwnerGuard<u32>, bool) {
        match applied.cleanup {
            Some(Elected::Owner(guard)) => (guard, applied.decision),
            other => panic!("expected to own the cleanup, got {other:?}"),
        }
    }

    fn waiter<D>(applied: Applied<u32, D>) -> Waiter<u32> {
        match applied.cleanup {
            Some(Elected::Waiter(waiter)) => waiter,
            other => panic!("expected to wait for the cleanup, got {other:?}"),
        }
    }

    #[test]
    fn a_cleanup_fences_later_opens_and_duplicates_wait() {
        let slots: Slots<u8, Slot, u32> = Slots::new(4);
        assert!(slots.apply(&1, open).decision);
        let (guard, remove) = owner(slots.apply(&1, close));
        assert!(remove);
        assert!(
            !slots.apply(&1, open).decision,
            "opened after its cleanup started"
        );
        let duplicate = waiter(slots.apply(&1, close));
        assert_eq!(slots.in_flight(), 1);
        guard.complete(7);
        assert_eq!(duplicate.wait(), Ok(7));
        assert_eq!(slots.result(&1), Some(Ok(7)));
        assert_eq!((slots.in_flight(), slots.finished()), (0, 1));
    }

    #[test]
    fn a_retried_attempt_answers_its_waiters_and_the_next_start_owns_anew() {
        let slots: Slots<u8, Slot, u32> = Slots::new(1);
        assert!(slots.apply(&1, open).decision);
        let (guard, _) = owner(slots.apply(&1, close));
        let duplicate = waiter(slots.apply(&1, close));
        // Could not run: the state goes back to open-for-cleanup.
        slots.retry(&1, guard, 28, |_| Some(Slot::Open));
        assert_eq!(duplicate.wait(), Ok(28));
        assert_eq!(slots.get(&1), Some(Slot::Open));
        assert_eq!((slots.in_flight(), slots.finished()), (0, 0));
        assert_eq!(slots.result(&1), None, "a retried attempt is not a result");
        // Other keys finishing do not evict it (it was never filed).
        for k in 2..5 {
            let (g, _) = owner(slots.apply(&k, close));
            g.complete(0);
        }
        assert_eq!(slots.get(&1), Some(Slot::Open));
        let (again, remove) = owner(slots.apply(&1, close));
        assert!(remove);
        again.complete(7);
        assert_eq!(slots.result(&1), Some(Ok(7)));
    }

    #[test]
    fn a_second_start_gets_a_waiter_never_a_second_owner() {
        let slots: Slots<u8, Slot, u32> = Slots::new(4);
        let start = |_: Option<&Slot>| stepped(Some(Slot::Closed), (), SlotEffect::StartCleanup);
        let Some(Elected::Owner(guard)) = slots.apply(&1, start).cleanup else {
            panic!("the first start owns");
        };
        let second = waiter(slots.apply(&1, start));
        guard.complete(1);
        assert_eq!(second.wait(), Ok(1));
    }

    #[test]
    fn an_awaited_cleanup_is_owned_by_the_later_start() {
        // A cleanup asked for while an open runs waits; the open's finish
        // starts it, and the early waiter gets that owner's result.
        let slots: Slots<u8, Slot, u32> = Slots::new(4);
        let wait = |_: Option<&Slot>| stepped(Some(Slot::Closed), (), SlotEffect::AwaitCleanup);
        let asked = slots.apply(&1, wait);
        assert!(asked.first);
        let early = waiter(asked);
        assert_eq!(slots.in_flight(), 1);
        assert!(!slots.apply(&1, wait).first);
        let start = |_: Option<&Slot>| stepped(Some(Slot::Closed), (), SlotEffect::StartCleanup);
        let started = slots.apply(&1, start);
        assert!(!started.first);
        let Some(Elected::Owner(guard)) = started.cleanup else {
            panic!("the start owns the awaited cleanup");
        };
        guard.complete(5);
        assert_eq!(early.wait(), Ok(5));
    }

    #[test]
    fn eviction_forgets_state_and_result_together() {
        let slots: Slots<u8, Slot, u32> = Slots::new(1);
        assert!(slots.apply(&1, open).decision);
        let (guard, remove) = owner(slots.apply(&1, close));
        assert!(remove);
        guard.complete(1);
        let (guard, remove) = owner(slots.apply(&2, close));
        assert!(!remove, "an unknown key is never removed for real");
        guard.complete(2);
        assert_eq!(slots.get(&1), None);
        assert_eq!(slots.result(&1), None);
        // After eviction the key is unknown: its cleanup is owned again,
        // and the step function sees `None`.
        let (guard, remove) = owner(slots.apply(&1, close));
        assert!(!remove, "a second real removal after eviction");
        guard.complete(3);
        assert_eq!(slots.finished(), 1);
    }

    #[test]
    fn an_in_flight_cleanup_is_never_evicted() {
        let slots: Slots<u8, Slot, u32> = Slots::new(0);
        let (guard, _) = owner(slots.apply(&1, close));
        let (other, _) = owner(slots.apply(&2, close));
        other.complete(2);
        let retire = |_: Option<&Slot>| stepped(Some(Slot::Open), (), SlotEffect::Retire);
        let _ = slots.apply(&3, retire);
        assert_eq!(slots.get(&3), None, "capacity 0 remembers nothing finished");
        let _ = waiter(slots.apply(&1, close));
        assert_eq!(slots.get(&1), Some(Slot::Closed));
        guard.complete(1);
        assert_eq!(slots.get(&1), None);
    }

    #[test]
    fn retired_keys_are_remembered_up_to_the_bound() {
        let slots: Slots<u8, Slot, u32> = Slots::new(2);
        let retire = |_: Option<&Slot>| stepped(Some(Slot::Closed), (), SlotEffect::Retire);
        for key in 0..3 {
            let _ = slots.apply(&key, retire);
            let _ = slots.apply(&key, retire); // filed once only
        }
        assert_eq!(slots.get(&0), None);
        assert_eq!(slots.get(&1), Some(Slot::Closed));
        assert_eq!(slots.get(&2), Some(Slot::Closed));
        assert_eq!(slots.finished(), 2);
    }

    #[test]
    fn a_step_that_forgets_removes_the_key_and_a_dropped_owner_abandons() {
        let slots: Slots<u8, Slot, u32> = Slots::new(4);
        assert!(slots.apply(&1, open).decision);
        let _ = slots.apply(&1, |_| stepped(None, (), SlotEffect::None));
        assert_eq!(slots.get(&1), None);
        assert!(slots.keys_where(|_| true).is_empty());
        let (guard, _) = owner(slots.apply(&3, close));
        drop(guard);
        assert_eq!(slots.result(&3), Some(Err(Abandoned)));
        assert_eq!(slots.keys_where(|s| *s == Slot::Closed), vec![3]);
    }
}

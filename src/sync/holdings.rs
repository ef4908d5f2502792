//! [`Holdings`]: the states a workspace holds per key, fenced by the key's
//! cleanup election, so that an open and a cleanup of one key are ordered.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;

use super::election::{Elected, Elections, Outcome, OwnerGuard};
use super::shim::{self, Arc, Mutex};

/// Why [`Holdings::open`] refused a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpenRefusal {
    /// [`Holdings::close`] was called: nothing is opened any more.
    Closed,
    /// The key is held already (opened, or taken by a cleanup or a reclaim).
    Held,
    /// The key's cleanup was entered ([`Holdings::elect`]) and its owner
    /// has not published yet.
    Cleaning,
    /// The key's cleanup published and its result is still cached.
    Cleaned,
}

/// The states held per key (a workspace's open requests), and each key's
/// cleanup election, so that "may this key be opened now" and "what does a
/// cleanup of this key find" are decided in one order.
///
/// # Theory of operation
///
/// A cleanup of a key the table holds nothing for must not report the key
/// gone while an open of the key creates something for it. So the election
/// itself is the fence: from the moment a cleanup enters it
/// ([`elect`](Self::elect)) until its result is evicted from the cache,
/// every [`open`](Self::open) of the key is refused
/// ([`OpenRefusal::Cleaning`], then [`OpenRefusal::Cleaned`]). The owner then looks
/// the key up ([`find`](Self::find), which takes its guard as proof that
/// the election came first) under the table's lock, the lock every open
/// decides and creates under. Whatever the interleaving, exactly one of two
/// things holds:
///
/// - the open took the lock first: its state is held, and the cleanup
///   finds it (and cleans it);
/// - the cleanup entered the election first: the open is refused, and the
///   cleanup finds nothing, or only what its `unknown` closure adopted.
///
/// [`complete`](Self::complete) forgets the key's state and then publishes
/// the result, so a key is never held and cleaned at once, and the state
/// of a later open (after the result was evicted) is never forgotten by an
/// earlier cleanup. A result of work that could not run
/// ([`OwnerGuard::complete_transient`]) leaves the state held, so the next
/// cleanup finds it again.
///
/// [`close`](Self::close) refuses every later open under the same lock and
/// lists the keys held, so a key is either listed (and cleaned by the
/// caller) or refused.
///
/// All of this uses the [`shim`] types; `loom-tests` checks an open racing
/// a cleanup of an unknown key under every interleaving, and that the
/// ordering this replaces (opens fenced only by a published result) fails.
///
/// `Holdings` is a handle: clones share the same table.
///
/// # Examples
///
/// ```
/// use custodian::sync::{Elected, Holdings, OpenRefusal};
///
/// let holdings: Holdings<&str, u32, &str> = Holdings::new(8);
/// // A cleanup of an unknown key fences it first...
/// let Elected::Owner(guard) = holdings.elect("req-1") else { unreachable!() };
/// assert_eq!(holdings.open("req-1", || Ok::<_, ()>(7)), Err(OpenRefusal::Cleaning));
/// // ...then finds nothing, and reports the key gone.
/// assert_eq!(holdings.find(&guard, &"req-1", || Err::<u32, _>("nothing")), Err("nothing"));
/// holdings.complete(&"req-1", guard, "already_gone");
/// assert_eq!(holdings.open("req-1", || Ok::<_, ()>(7)), Err(OpenRefusal::Cleaned));
///
/// // An open that came first is what the cleanup finds.
/// assert_eq!(holdings.open("req-2", || Ok::<_, ()>(9)), Ok(Ok(9)));
/// let Elected::Owner(guard) = holdings.elect("req-2") else { unreachable!() };
/// assert_eq!(holdings.find(&guard, &"req-2", || Err::<u32, _>("nothing")), Ok(9));
/// holdings.complete(&"req-2", guard, "cleaned");
/// assert!(holdings.keys().is_empty());
/// ```
pub struct Holdings<K, S, V> {
    table: Arc<Mutex<Table<K, S>>>,
    elections: Elections<K, V>,
}

struct Table<K, S> {
    held: HashMap<K, S>,
    closed: bool,
}

impl<K, S, V> Holdings<K, S, V>
where
    K: Eq + Hash + Clone + Send + Sync + 'static,
    S: Clone,
    V: Send + 'static,
{
    /// Creates an empty table whose elections keep at most `capacity`
    /// published results (see [`Elections`]).
    pub fn new(capacity: usize) -> Self {
        Self {
            table: Arc::new(Mutex::new(Table {
                held: HashMap::new(),
                closed: false,
            })),
            elections: Elections::new(capacity),
        }
    }

    /// Opens `key`: under the table's lock, refuses it if the table is
    /// closed, holds the key, or the key's cleanup was entered and is still
    /// remembered; otherwise runs `make` (under the lock, so no cleanup of
    /// the key looks while it runs) and holds the state it returns.
    ///
    /// # Errors
    ///
    /// `Err(refusal)` without running `make`; `Ok(Err(e))` if `make`
    /// failed (nothing is held).
    ///
    /// `make` must not call back into this table's held states (`open`,
    /// `find`, `complete`, ...: that would deadlock); it may enter the
    /// key's election ([`elect`](Self::elect) takes only the election's
    /// lock), e.g. to file a result decided without a cleanup before any
    /// open of the key can look.
    pub fn open<E>(
        &self,
        key: K,
        make: impl FnOnce() -> Result<S, E>,
    ) -> Result<Result<S, E>, OpenRefusal> {
        let mut table = shim::lock(&self.table);
        if table.closed {
            return Err(OpenRefusal::Closed);
        }
        if table.held.contains_key(&key) {
            return Err(OpenRefusal::Held);
        }
        #[cfg(all(test, custodian_shuttle))]
        let fenced = !shuttle_tests::fence_planted_away();
        #[cfg(not(all(test, custodian_shuttle)))]
        let fenced = true;
        if let Some(published) = self.opened_fence(&key).filter(|_| fenced) {
            return Err(published);
        }
        Ok(make().inspect(|state| {
            table.held.insert(key, state.clone());
        }))
    }

    /// Enters `key`'s cleanup election: from now on, until the result is
    /// evicted, every [`open`](Self::open) of `key` is refused.
    pub fn elect(&self, key: K) -> Elected<V> {
        self.elections.elect(key)
    }

    /// The state `key`'s cleanup owner works on: the held one; or, if none
    /// is held, what `unknown` decides, under the table's lock: `Ok(state)`
    /// is held from now on (e.g. a journal replayed), `Err(t)` means the
    /// table holds nothing for `key` and no open can create anything for
    /// it until `owner` publishes.
    ///
    /// `unknown` must not call back into this table (that would deadlock).
    pub fn find<T>(
        &self,
        owner: &OwnerGuard<V>,
        key: &K,
        unknown: impl FnOnce() -> Result<S, T>,
    ) -> Result<S, T> {
        // Only an owner looks: its election is what fences the opens.
        let _ = owner;
        let mut table = shim::lock(&self.table);
        if let Some(state) = table.held.get(key) {
            return Ok(state.clone());
        }
        unknown().inspect(|state| {
            table.held.insert(key.clone(), state.clone());
        })
    }

    /// Files `owner`'s final result for `key`: forgets `key`'s state, then
    /// publishes `value` to every participant. In between, opens of `key`
    /// are refused as [`OpenRefusal::Cleaning`], after it as
    /// [`OpenRefusal::Cleaned`] while the result is cached.
    pub fn complete(&self, key: &K, owner: OwnerGuard<V>, value: V) {
        shim::lock(&self.table).held.remove(key);
        owner.complete(value);
    }

    /// Refuses every later [`open`](Self::open) and returns the keys held
    /// now: each is either listed here or refused.
    pub fn close(&self) -> Vec<K> {
        let mut table = shim::lock(&self.table);
        table.closed = true;
        table.held.keys().cloned().collect()
    }

    /// Returns the keys held.
    pub fn keys(&self) -> Vec<K> {
        shim::lock(&self.table).held.keys().cloned().collect()
    }

    /// Returns the states held.
    pub fn states(&self) -> Vec<S> {
        shim::lock(&self.table).held.values().cloned().collect()
    }

    /// Returns `key`'s held state, if any.
    pub fn get(&self, key: &K) -> Option<S> {
        shim::lock(&self.table).held.get(key).cloned()
    }

    /// Returns the number of keys held.
    pub fn len(&self) -> usize {
        shim::lock(&self.table).held.len()
    }

    /// Returns true if no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Why an open of `key` is refused by its election, if it is.
    fn opened_fence(&self, key: &K) -> Option<OpenRefusal> {
        self.elections.entered(key).map(|published| {
            if published {
                OpenRefusal::Cleaned
            } else {
                OpenRefusal::Cleaning
            }
        })
    }
}

impl<K, S, V> Holdings<K, S, V>
where
    K: Eq + Hash,
    V: Clone,
{
    /// Returns `key`'s published cleanup result, if it is still cached.
    pub fn result(&self, key: &K) -> Option<Outcome<V>> {
        self.elections.result(key)
    }
}

impl<K, S, V> Clone for Holdings<K, S, V> {
    fn clone(&self) -> Self {
        Self {
            table: Arc::clone(&self.table),
            elections: self.elections.clone(),
        }
    }
}

impl<K, S, V> fmt::Debug for Holdings<K, S, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let table = shim::lock(&self.table);
        f.debug_struct("Holdings")
            .field("held", &table.held.len())
            .field("closed", &table.closed)
            .field("elections", &self.elections)
            .finish()
    }
}

#[cfg(all(test, not(custodian_loom)))]
mod tests {
    use super::*;

    type Table = Holdings<&'static str, u32, &'static str>;

    fn owner(elected: Elected<&'static str>) -> OwnerGuard<&'static str> {
        match elected {
            Elected::Owner(guard) => guard,
            Elected::Waiter(_) => panic!("expected to own the election"),
        }
    }

    fn nothing() -> Result<u32, ()> {
        Err(())
    }

    /// The window this table closes: a cleanup of an unknown key that has
    /// found nothing and not yet published refuses every open of the key.
    #[test]
    fn an_entered_cleanup_fences_opens_until_it_publishes_and_while_cached() {
        let table: Table = Holdings::new(1);
        let guard = owner(table.elect("k"));
        assert_eq!(
            table.open("k", || Ok::<_, ()>(1)),
            Err(OpenRefusal::Cleaning)
        );
        assert_eq!(table.find(&guard, &"k", nothing), Err(()));
        assert_eq!(
            table.open("k", || Ok::<_, ()>(1)),
            Err(OpenRefusal::Cleaning)
        );
        table.complete(&"k", guard, "gone");
        assert_eq!(
            table.open("k", || Ok::<_, ()>(1)),
            Err(OpenRefusal::Cleaned)
        );
        assert!(table.is_empty());
        // Evicted by another key's result: the key may be opened again.
        owner(table.elect("other")).complete("gone");
        assert_eq!(table.open("k", || Ok::<_, ()>(2)), Ok(Ok(2)));
        assert_eq!(table.get(&"k"), Some(2));
    }

    #[test]
    fn a_cleanup_finds_the_state_an_earlier_open_holds_and_forgets_it_before_publishing() {
        let table: Table = Holdings::new(4);
        assert_eq!(table.open("k", || Ok::<_, ()>(5)), Ok(Ok(5)));
        assert_eq!(table.open("k", || Ok::<_, ()>(6)), Err(OpenRefusal::Held));
        let guard = owner(table.elect("k"));
        let waiter = guard.waiter();
        assert_eq!(table.find(&guard, &"k", nothing), Ok(5));
        table.complete(&"k", guard, "cleaned");
        assert_eq!(waiter.wait(), Ok("cleaned"));
        assert_eq!(table.get(&"k"), None);
        assert_eq!(table.result(&"k"), Some(Ok("cleaned")));
    }

    #[test]
    fn a_state_adopted_by_find_is_held_and_a_transient_result_keeps_it() {
        let table: Table = Holdings::new(4);
        let guard = owner(table.elect("k"));
        assert_eq!(table.find(&guard, &"k", || Ok::<_, ()>(3)), Ok(3));
        guard.complete_transient("no_space");
        // Still held: the next cleanup finds it, an open is refused.
        assert_eq!(table.open("k", || Ok::<_, ()>(4)), Err(OpenRefusal::Held));
        let guard = owner(table.elect("k"));
        assert_eq!(table.find(&guard, &"k", nothing), Ok(3));
        table.complete(&"k", guard, "cleaned");
        assert!(table.is_empty());
    }

    #[test]
    fn a_failed_make_holds_nothing_and_close_refuses_later_opens() {
        let table: Table = Holdings::new(4);
        assert_eq!(
            table.open("bad", || Err::<u32, _>("mkdir")),
            Ok(Err("mkdir"))
        );
        assert!(table.is_empty());
        assert_eq!(table.open("a", || Ok::<_, ()>(1)), Ok(Ok(1)));
        assert_eq!(table.close(), vec!["a"]);
        assert_eq!(table.open("b", || Ok::<_, ()>(2)), Err(OpenRefusal::Closed));
        assert_eq!(table.keys(), vec!["a"]);
        assert_eq!(table.states(), vec![1]);
        assert_eq!(
            format!("{table:?}"),
            "Holdings { held: 1, closed: true, elections: Elections { in_flight: 0, cached: 0, capacity: 4 } }"
        );
    }
}

/// The facade's request lifecycle on the real table under shuttle's
/// scheduler, at a size loom's exhaustive search cannot hold: two requests,
/// a cache of one result (the second request's cleanup evicts the first's),
/// a cancel's cleanup racing the first request's open, and a shutdown
/// racing both. Built and run only under `cfg(custodian_shuttle)`
/// (`.ci/run`, stage "shuttle"); see `docs/verification.md`.
#[cfg(all(test, custodian_shuttle))]
mod shuttle_tests {
    use super::*;
    use crate::sync::Elected;
    use crate::sync::shim::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
    use crate::sync::shim::thread;
    use std::sync::atomic::{AtomicUsize as Count, Ordering::Relaxed};

    /// A request's cleanup verdict.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Verdict {
        Cleaned,
        Gone,
    }

    /// A job directory per request (the state an open creates), and how
    /// many times a cleanup removed it.
    struct Dirs([AtomicBool; 2], [AtomicUsize; 2]);

    type Table = Holdings<usize, usize, Verdict>;

    /// An open of `key`, as the workspace does it: the directory is made
    /// under the table's lock, or nothing is.
    fn open(t: &Table, dirs: &Dirs, key: usize) -> bool {
        matches!(
            t.open(key, || {
                assert!(!dirs.0[key].swap(true, SeqCst), "job {key} made twice");
                Ok::<_, ()>(key)
            }),
            Ok(Ok(_))
        )
    }

    /// A cleanup of `key`, as the workspace runs it: the owner removes what
    /// the table holds, or reports the key gone; every other caller waits
    /// for the owner's verdict.
    fn cleanup(t: &Table, dirs: &Dirs, key: usize) -> Verdict {
        match t.elect(key) {
            Elected::Owner(guard) => {
                let verdict = match t.find(&guard, &key, || Err::<usize, ()>(())) {
                    Ok(_) => {
                        assert!(dirs.0[key].swap(false, SeqCst), "job {key} removed twice");
                        dirs.1[key].fetch_add(1, SeqCst);
                        Verdict::Cleaned
                    }
                    Err(()) => {
                        // The fence: nothing can be made for the key while
                        // its owner looks, until it publishes.
                        thread::yield_now();
                        assert!(
                            !dirs.0[key].load(SeqCst),
                            "job {key} was made while its cleanup reported it gone"
                        );
                        Verdict::Gone
                    }
                };
                t.complete(&key, guard, verdict);
                verdict
            }
            Elected::Waiter(w) => w.wait().expect("the owner published"),
        }
    }

    /// Set by the planted test: `open` skips the election's fence.
    static NO_FENCE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

    pub(super) fn fence_planted_away() -> bool {
        NO_FENCE.load(Relaxed)
    }

    // Counts across executions, outside shuttle's control.
    static EXECUTIONS: Count = Count::new(0);
    static REOPENED: Count = Count::new(0);
    static SHUTDOWN_CLEANED: Count = Count::new(0);
    static OPEN_REFUSED: Count = Count::new(0);
    static GONE_AFTER_EVICTION: Count = Count::new(0);

    fn lifecycle() {
        EXECUTIONS.fetch_add(1, Relaxed);
        let t = Arc::new(Table::new(1));
        let dirs = Arc::new(Dirs(
            [AtomicBool::new(false), AtomicBool::new(false)],
            [AtomicUsize::new(0), AtomicUsize::new(0)],
        ));
        // Request 0: announced, then opened; it ends with its own cleanup.
        let first = {
            let (t, dirs) = (Arc::clone(&t), Arc::clone(&dirs));
            thread::spawn(move || {
                let opened = open(&t, &dirs, 0);
                (opened, cleanup(&t, &dirs, 0))
            })
        };
        // The cancel of request 0: its cleanup, in the open's window.
        let cancel = {
            let (t, dirs) = (Arc::clone(&t), Arc::clone(&dirs));
            thread::spawn(move || cleanup(&t, &dirs, 0))
        };
        // Request 1: opened and cleaned; its result evicts request 0's.
        let second = {
            let (t, dirs) = (Arc::clone(&t), Arc::clone(&dirs));
            thread::spawn(move || {
                let opened = open(&t, &dirs, 1);
                (opened, cleanup(&t, &dirs, 1))
            })
        };
        // The shutdown: refuses later opens, cleans what is held.
        let shutdown = {
            let (t, dirs) = (Arc::clone(&t), Arc::clone(&dirs));
            thread::spawn(move || {
                let held = t.close();
                held.into_iter()
                    .map(|k| cleanup(&t, &dirs, k))
                    .filter(|v| *v == Verdict::Cleaned)
                    .count()
            })
        };
        let (opened0, own0) = first.join().unwrap();
        let cancelled = cancel.join().unwrap();
        let (opened1, own1) = second.join().unwrap();
        let by_shutdown = shutdown.join().unwrap();
        // Nothing is left: every job made was removed, nothing is held.
        for (k, d) in dirs.0.iter().enumerate() {
            assert!(!d.load(SeqCst), "job {k} left behind");
        }
        assert!(t.is_empty(), "a request still held: {:?}", t.keys());
        // A job made was removed exactly once, by one of the cleanups of
        // its request. The cleanup that ends the request says `Cleaned`
        // unless another one (the shutdown's, the cancel's) removed it
        // first and that result was then evicted: a re-elected owner only
        // sees the job gone (`Elections`, *Eviction never re-runs
        // destructive work*).
        for (k, (opened, own)) in [(opened0, own0), (opened1, own1)].into_iter().enumerate() {
            let removed = dirs.1[k].load(SeqCst);
            assert_eq!(
                removed,
                usize::from(opened),
                "job {k}: opened {opened}, removed {removed} times"
            );
            if opened && own == Verdict::Gone {
                GONE_AFTER_EVICTION.fetch_add(1, Relaxed);
            }
        }
        if opened0 && cancelled == Verdict::Gone {
            // The cancel's result was evicted, then the open came.
            REOPENED.fetch_add(1, Relaxed);
        }
        if by_shutdown > 0 {
            SHUTDOWN_CLEANED.fetch_add(1, Relaxed);
        }
        if !opened0 || !opened1 {
            OPEN_REFUSED.fetch_add(1, Relaxed);
        }
    }

    #[test]
    fn two_requests_a_cancel_and_a_shutdown_leave_nothing_and_remove_each_job_once() {
        let counts = || {
            [
                &EXECUTIONS,
                &REOPENED,
                &SHUTDOWN_CLEANED,
                &OPEN_REFUSED,
                &GONE_AFTER_EVICTION,
            ]
            .map(|c| c.load(Relaxed))
        };
        let before = counts();
        shim::shuttle_explore(lifecycle, 5_000);
        let after = counts();
        let [n, reopened, shut, refused, evicted] = std::array::from_fn(|i| after[i] - before[i]);
        eprintln!(
            "{n} executions; an open after the cancel's result was evicted: {reopened}; \
             the shutdown cleaned a request: {shut}; an open refused: {refused}; \
             a request's end re-elected after eviction: {evicted}"
        );
        assert!(n >= 10_000, "explored {n}");
        // The interesting windows were reached, not only the easy orders.
        assert!(reopened > 0 && shut > 0 && refused > 0);
    }

    /// The same lifecycle with `open` planted to skip the election's
    /// fence (the facade race of an open in a cleanup's window): caught.
    #[test]
    fn an_open_that_skips_the_cleanups_fence_is_caught() {
        NO_FENCE.store(true, Relaxed);
        let r = std::panic::catch_unwind(|| shim::shuttle_explore(lifecycle, 5_000));
        NO_FENCE.store(false, Relaxed);
        let payload = r.expect_err("the planted open went unnoticed");
        let why = payload
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        eprintln!("caught: {why}");
        assert!(
            why.contains("while its cleanup reported it gone") || why.contains("left behind"),
            "{why}"
        );
    }
}

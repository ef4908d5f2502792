//! [`CommitLog`]: one request's committed state and its log, and the
//! direct-commit decision of a caller that bypasses the actor.

use std::fmt;

use super::shim::{self, Mutex, atomic::AtomicUsize, atomic::Ordering};

/// What a step function hands back to [`CommitLog`]: the state to commit,
/// the record to append to the log, and whatever the caller needs next
/// (typically the actions to execute).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit<S, R, T> {
    /// The committed state after this step.
    pub next: S,
    /// The log entry for this step.
    pub record: R,
    /// Returned to the caller of the commit, untouched.
    pub output: T,
}

/// One request's committed state, the log of every committed step, and the
/// count of inputs sent to its actor and not yet committed.
///
/// # Theory of operation
///
/// A request is driven by an actor that commits the inputs its callers send
/// it, in the order they were sent. Some inputs need no action from the
/// actor, and a caller may commit them itself ([`commit_direct`]) to spare
/// the round trip — but only when that cannot reorder its own inputs. The
/// rule is kept here, in one place:
///
/// - Every commit — the actor's, a direct one — steps from the committed
///   state and appends its record in **one** critical section, so the log is
///   one chained sequence (each record's "before" is the previous record's
///   "after") whoever commits.
/// - A caller raises `pending` *before* it sends an input ([`send`]); the
///   actor lowers it in the same critical section as the input's commit
///   ([`commit_sent`]).
/// - [`commit_direct`] commits only if `pending` is zero, read inside that
///   critical section. A caller that sent an input earlier raised `pending`
///   before this check in its own program order, and the count falls back
///   to zero only once that input is committed, so a direct commit never
///   overtakes an input its caller sent earlier. (The count is shared by
///   every caller of the request, so a direct commit is also refused while
///   another caller's input is queued; that costs a round trip, never
///   order.)
///
/// The log, the state and the count use the [`shim`] types, so the
/// `loom-tests` crate checks this ordering under every interleaving.
///
/// [`commit_direct`]: Self::commit_direct
/// [`send`]: Self::send
/// [`commit_sent`]: Self::commit_sent
///
/// # Examples
///
/// ```
/// use custodian::sync::{Commit, CommitLog};
///
/// // A counter machine whose log records (before, after).
/// let step = |add: u32| move |state: &u32, _index: usize| Commit {
///     next: state + add,
///     record: (*state, state + add),
///     output: (),
/// };
/// let log: CommitLog<u32, (u32, u32)> = CommitLog::new(0);
/// // An input on its way to the actor: a direct commit must wait.
/// log.send(|| Ok::<(), ()>(())).unwrap();
/// assert!(log.commit_direct(step(10)).is_none());
/// // The actor commits it; now the caller may commit directly.
/// log.commit_sent(step(1));
/// assert!(log.commit_direct(step(10)).is_some());
/// assert_eq!(log.log(), vec![(0, 1), (1, 11)]);
/// assert_eq!(log.state(), 11);
/// ```
pub struct CommitLog<S, R> {
    committed: Mutex<Committed<S, R>>,
    /// Inputs sent to the actor and not yet committed.
    pending: AtomicUsize,
}

struct Committed<S, R> {
    state: S,
    log: Vec<R>,
}

impl<S, R> CommitLog<S, R> {
    /// Creates a log at `state` with nothing committed and nothing pending.
    pub fn new(state: S) -> Self {
        Self::with_capacity(state, 0)
    }

    /// As [`new`](Self::new), with room for `capacity` records.
    pub fn with_capacity(state: S, capacity: usize) -> Self {
        Self {
            committed: Mutex::new(Committed {
                state,
                log: Vec::with_capacity(capacity),
            }),
            pending: AtomicUsize::new(0),
        }
    }

    /// Returns the number of inputs sent and not yet committed.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::SeqCst)
    }

    /// Returns the number of records committed so far.
    pub fn len(&self) -> usize {
        shim::lock(&self.committed).log.len()
    }

    /// Returns true if nothing was committed yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counts one input as pending, then calls `send` to hand it to the
    /// actor; if `send` fails the count is lowered again.
    ///
    /// The actor must commit every input that was sent successfully with
    /// [`commit_sent`](Self::commit_sent), exactly once.
    ///
    /// # Errors
    ///
    /// The error of `send`, unchanged.
    pub fn send<E>(&self, send: impl FnOnce() -> Result<(), E>) -> Result<(), E> {
        // Raised before the input can be seen by the actor, so the actor's
        // lowering never runs ahead of this raise.
        self.pending.fetch_add(1, Ordering::SeqCst);
        send().inspect_err(|_| {
            self.pending.fetch_sub(1, Ordering::SeqCst);
        })
    }
}

impl<S: Clone, R> CommitLog<S, R> {
    /// Commits one step that was not sent through [`send`](Self::send) (the
    /// actor's own events, e.g. an action's answer), and returns the new
    /// state and the step's output.
    ///
    /// `step` receives the committed state and the index its record will
    /// have in the log. It runs under the log's lock: it must be quick, and
    /// must not call back into this log (that would deadlock).
    pub fn commit<T>(&self, step: impl FnOnce(&S, usize) -> Commit<S, R, T>) -> (S, T) {
        let mut committed = shim::lock(&self.committed);
        committed.apply(step)
    }

    /// Commits one input that was counted by [`send`](Self::send), and
    /// lowers the pending count in the same critical section.
    ///
    /// # Panics
    ///
    /// In debug builds, if nothing was pending (an input committed twice or
    /// never sent).
    pub fn commit_sent<T>(&self, step: impl FnOnce(&S, usize) -> Commit<S, R, T>) -> (S, T) {
        let mut committed = shim::lock(&self.committed);
        let out = committed.apply(step);
        // Lowered only after the commit and before the lock is released: a
        // direct commit that reads the lowered count also sees this step.
        let before = self.pending.fetch_sub(1, Ordering::SeqCst);
        debug_assert!(before > 0, "an input was committed that was never sent");
        out
    }

    /// Commits `step` here, without the actor, if no sent input is still
    /// waiting to be committed; returns `None` (and calls nothing) otherwise,
    /// in which case the caller sends the input to the actor instead.
    ///
    /// Only use this for steps whose actions need nothing from the actor.
    pub fn commit_direct<T>(
        &self,
        step: impl FnOnce(&S, usize) -> Commit<S, R, T>,
    ) -> Option<(S, T)> {
        let mut committed = shim::lock(&self.committed);
        // Read under the lock that `commit_sent` lowers the count under.
        if self.pending.load(Ordering::SeqCst) != 0 {
            return None;
        }
        Some(committed.apply(step))
    }

    /// Returns the committed state.
    pub fn state(&self) -> S {
        shim::lock(&self.committed).state.clone()
    }
}

impl<S: Clone, R> Committed<S, R> {
    fn apply<T>(&mut self, step: impl FnOnce(&S, usize) -> Commit<S, R, T>) -> (S, T) {
        let Commit {
            next,
            record,
            output,
        } = step(&self.state, self.log.len());
        self.log.push(record);
        self.state = next.clone();
        (next, output)
    }
}

impl<S, R: Clone> CommitLog<S, R> {
    /// Returns every record committed so far, in order.
    pub fn log(&self) -> Vec<R> {
        shim::lock(&self.committed).log.clone()
    }
}

impl<S, R> fmt::Debug for CommitLog<S, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommitLog")
            .field("records", &shim::lock(&self.committed).log.len())
            .field("pending", &self.pending.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(custodian_loom)))]
mod tests {
    use super::*;

    /// A machine whose state counts commits; its record is (before, event, after).
    fn step(event: char) -> impl FnOnce(&u32, usize) -> Commit<u32, (u32, char, u32), usize> {
        move |state, index| Commit {
            next: state + 1,
            record: (*state, event, state + 1),
            output: index,
        }
    }

    #[test]
    fn a_direct_commit_waits_for_every_sent_input() {
        let log = CommitLog::new(0);
        log.send(|| Ok::<(), ()>(())).unwrap();
        log.send(|| Ok::<(), ()>(())).unwrap();
        assert_eq!(log.pending(), 2);
        assert!(log.commit_direct(step('o')).is_none());
        assert_eq!(log.commit_sent(step('a')), (1, 0));
        assert!(log.commit_direct(step('o')).is_none());
        assert_eq!(
            log.commit(step('x')),
            (2, 1),
            "uncounted commits leave pending alone"
        );
        assert_eq!(log.commit_sent(step('b')), (3, 2));
        assert_eq!(log.commit_direct(step('o')), Some((4, 3)));
        assert_eq!(
            log.log(),
            vec![(0, 'a', 1), (1, 'x', 2), (2, 'b', 3), (3, 'o', 4)]
        );
        assert_eq!((log.state(), log.len(), log.pending()), (4, 4, 0));
    }

    #[test]
    fn a_failed_send_is_not_counted() {
        let log: CommitLog<u32, (u32, char, u32)> = CommitLog::new(0);
        assert_eq!(log.send(|| Err("closed")), Err("closed"));
        assert_eq!(log.pending(), 0);
        assert!(log.commit_direct(step('o')).is_some());
        assert!(!log.is_empty());
    }

    #[test]
    fn racing_committers_keep_one_chained_log() {
        let log = std::sync::Arc::new(CommitLog::new(0));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let log = std::sync::Arc::clone(&log);
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        if log.commit_direct(step('d')).is_none() {
                            log.commit(step('c'));
                        }
                        log.send(|| Ok::<(), ()>(())).unwrap();
                        log.commit_sent(step(char::from(b'0' + t)));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let records = log.log();
        assert_eq!(records.len(), 800);
        for (i, (before, _, after)) in records.iter().enumerate() {
            assert_eq!(*before as usize, i);
            assert_eq!(*after, before + 1);
        }
    }
}

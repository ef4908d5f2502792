//! Exactly-once primitives, and the loom shim they are built on.
//!
//! # Theory of operation
//!
//! Two promises of custodian reduce to "exactly once, and everyone agrees":
//! a process settles once and every waiter sees the same evidence; a request
//! is cleaned up once and every terminal candidate — success, error, timeout,
//! cancel, disconnect, and their duplicates — sees the same cleanup result.
//! This module provides the two primitives those promises are built from:
//!
//! - [`SettleOnce<T>`]: a cell whose first [`settle`](SettleOnce::settle)
//!   wins; later ones are refused and told the winner
//!   ([`AlreadySettled`]). Readers block ([`wait`](SettleOnce::wait)) or
//!   `.await` ([`wait_async`](SettleOnce::wait_async), cancel-safe).
//! - [`Election<V>`] and its keyed form [`Elections<K, V>`]: the first caller
//!   of [`elect`](Elections::elect) becomes the owner and gets an
//!   [`OwnerGuard`]; every other caller, concurrent or late, gets a
//!   [`Waiter`] that yields a clone of the owner's result ([`Outcome`]). If
//!   the guard is dropped without [`complete`](OwnerGuard::complete), every
//!   participant observes [`Abandoned`] instead of hanging. The keyed form
//!   keeps a bounded cache of completed results (see [`Elections`] for why
//!   eviction is safe).
//!
//! Three more primitives carry the runtime's own concurrency, so that it is
//! checked here and not only in the integration tests:
//!
//! - [`CommitLog<S, R>`]: a request's committed state and the log of its
//!   transitions under one lock, with the count of inputs sent to the
//!   request's actor and not yet committed. The coordinator commits every
//!   event through it; a handle's direct commit
//!   ([`commit_direct`](CommitLog::commit_direct)) happens only when
//!   nothing sent is pending, so it never overtakes an input its caller
//!   sent earlier, and the log stays one chain whoever commits.
//! - [`Slots<K, S, V>`]: per-key state stepped by a caller's pure decision
//!   function ([`SlotStep`], [`SlotEffect`]), the key's cleanup cell (one
//!   owner, any number of waiters, before or after the owner exists) and a
//!   bounded memory of finished keys, all under one lock. The wire node
//!   keeps its requests in it, deciding with `machine::node::step`: a cancel
//!   that returned fences every later open, and evicting a key forgets its
//!   state and its cleanup result together, never while the cleanup runs.
//! - [`Holdings<K, S, V>`]: the states a workspace holds per key, fenced
//!   by the key's cleanup election: a cleanup that entered the election
//!   refuses every later open of the key before it looks the key up, so it
//!   never reports a key gone while an open creates something for it.
//!
//! Another, [`RootRegistry`], keeps the launcher's roots so that a subreaper
//! scan never takes a fresh root for an adopted descendant, without
//! serialising launches while no scan runs.
//!
//! All sit in the pure layer: no tokio, no I/O, no clock. Async waiting uses
//! a hand-rolled list of [`std::task::Waker`]s guarded by the same mutex as
//! the value, so check-then-register and store-then-wake cannot interleave
//! into a lost wake-up. All synchronization types come from [`shim`], which
//! swaps `std` for loom under `cfg(custodian_loom)`; the `loom-tests` crate
//! then explores every interleaving of racing owners, waiters and dropped
//! waiters (see `docs/verification.md`). Under `cfg(custodian_shuttle)` it
//! hands out shuttle's types instead, for randomized schedules of races too
//! large for loom ([`Holdings`] at two requests with a cache of one).
//!
//! # The work outlives its callers
//!
//! An election does not run anything; it only decides who runs it. The layer
//! above makes the work survive every caller going away by moving the guard
//! into a spawned task and having every caller — owner included — merely wait:
//!
//! ```
//! use custodian::sync::{Abandoned, Elected, Elections};
//!
//! async fn remove_job_dir(request_id: &str) -> Result<u32, String> {
//!     // ... the destructive work, done once ...
//!     Ok(3)
//! }
//!
//! async fn cleanup(
//!     elections: &Elections<String, Result<u32, String>>,
//!     request_id: &str,
//! ) -> Result<Result<u32, String>, Abandoned> {
//!     match elections.elect(request_id.to_owned()) {
//!         Elected::Owner(guard) => {
//!             let waiter = guard.waiter();
//!             let id = request_id.to_owned();
//!             // The task owns the guard: if this caller is cancelled the work
//!             // continues; if the task panics or the runtime drops it, the
//!             // guard's drop publishes `Abandoned` and no waiter hangs.
//!             tokio::spawn(async move {
//!                 let result = remove_job_dir(&id).await;
//!                 guard.complete(result);
//!             });
//!             waiter.await
//!         }
//!         Elected::Waiter(waiter) => waiter.await,
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let elections = Elections::new(1024);
//! let (a, b) = tokio::join!(cleanup(&elections, "req-1"), cleanup(&elections, "req-1"));
//! assert_eq!(a, Ok(Ok(3)));
//! assert_eq!(a, b);
//! # }
//! ```
//!
//! Dropping either `cleanup` future drops only a [`Waiter`]'s future, which
//! unregisters its waker and loses nothing: the result stays in the election.

mod commit;
mod election;
mod holdings;
mod roots;
mod settle;
pub mod shim;
mod slots;

pub use commit::{Commit, CommitLog};
pub use election::{Abandoned, Elected, Election, Elections, Outcome, OwnerGuard, Waiter};
pub use holdings::{Holdings, OpenRefusal};
pub use roots::RootRegistry;
pub use settle::{AlreadySettled, SettleOnce, Settled};
pub use slots::{Applied, SlotEffect, SlotStep, Slots};

#[cfg(all(test, not(custodian_loom)))]
mod tests {
    use super::*;

    fn send_sync_static<T: Send + Sync + 'static>() {}
    fn unpin<T: Unpin>() {}

    /// The workspace moves guards and waiters into `tokio::spawn`ed tasks;
    /// losing `Send`, `Sync` or `'static` here would break that pattern.
    #[test]
    fn handles_can_cross_into_spawned_tasks() {
        send_sync_static::<SettleOnce<String>>();
        send_sync_static::<Settled<String>>();
        send_sync_static::<Election<String>>();
        send_sync_static::<Elections<String, String>>();
        send_sync_static::<OwnerGuard<String>>();
        send_sync_static::<Waiter<String>>();
        send_sync_static::<Elected<String>>();
        send_sync_static::<CommitLog<String, String>>();
        send_sync_static::<Slots<String, String, String>>();
        send_sync_static::<Applied<String, String>>();
        send_sync_static::<Holdings<String, String, String>>();
        unpin::<Settled<String>>();
    }
}

/// Locks a `std` mutex that loom never checks (a `static`, which cannot
/// hold the shim's types, or state no primitive here is built on),
/// recovering the data if a previous holder panicked, for the reason
/// [`shim::lock`] gives.
pub(crate) fn lock_std<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Blocks on a `std` condition variable, releasing `guard` while waiting;
/// recovers from poisoning as [`lock_std`] does.
pub(crate) fn wait_std<'a, T>(
    condvar: &std::sync::Condvar,
    guard: std::sync::MutexGuard<'a, T>,
) -> std::sync::MutexGuard<'a, T> {
    condvar
        .wait(guard)
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

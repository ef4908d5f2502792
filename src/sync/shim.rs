//! The loom shim: the one place in custodian that chooses between `std` and
//! `loom` synchronization types.
//!
//! Built normally, every name here is the `std` type. Built with
//! `RUSTFLAGS="--cfg custodian_loom"`, every name is loom's mock, so the
//! `loom-tests` crate can explore every interleaving of the primitives in
//! [`crate::sync`] that are built on them. The switch is `cfg(custodian_loom)`
//! and never `cfg(loom)`: tokio changes its own internals under `cfg(loom)`,
//! which would break the rest of the crate.
//!
//! Code elsewhere in custodian that must be loom-checkable takes its `Arc`,
//! `Mutex`, `Condvar`, atomics and (in tests) `thread` from here and never
//! from `std::sync` directly.
//!
//! Built with `RUSTFLAGS="--cfg custodian_shuttle"`, every name is
//! shuttle's instead (a randomized scheduler that scales to races loom's
//! exhaustive search cannot hold), and [`sim`] too: the code loom does not
//! reach, because it runs on scoped threads that loom has no mock of (the
//! workspace cleanup's two threads). The crate's shuttle tests
//! (`cargo test --lib shuttle::` under that cfg) drive both.
//!
//! # Caveats
//!
//! Under `cfg(custodian_loom)` these types only work inside
//! `loom::model`, and under `cfg(custodian_shuttle)` only inside a shuttle
//! `check_*` run; using them anywhere else panics. Only the loom test crate
//! and the shuttle stage of `.ci/run` build custodian with those cfgs.

#[cfg(all(custodian_loom, custodian_shuttle))]
compile_error!("custodian_loom and custodian_shuttle exclude each other");

#[cfg(custodian_loom)]
pub use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(custodian_shuttle)]
pub use shuttle::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(not(any(custodian_loom, custodian_shuttle)))]
pub use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Atomic integer and boolean types (std, loom or shuttle) and
/// [`Ordering`](atomic::Ordering).
pub mod atomic {
    #[cfg(custodian_loom)]
    pub use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
    #[cfg(custodian_shuttle)]
    pub use shuttle::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
    #[cfg(not(any(custodian_loom, custodian_shuttle)))]
    pub use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
}

/// Threads (std, loom or shuttle), for tests that race the primitives.
pub mod thread {
    #[cfg(custodian_loom)]
    pub use loom::thread::{JoinHandle, spawn, yield_now};
    #[cfg(custodian_shuttle)]
    pub use shuttle::thread::{JoinHandle, spawn, yield_now};
    #[cfg(not(any(custodian_loom, custodian_shuttle)))]
    pub use std::thread::{JoinHandle, spawn, yield_now};
}

/// The synchronization of code that loom does not reach and shuttle
/// simulates: `std`'s, or shuttle's under `cfg(custodian_shuttle)` (loom
/// builds keep `std`'s: loom has no scoped threads).
pub mod sim {
    #[cfg(custodian_shuttle)]
    pub use shuttle::sync::{Condvar, Mutex, MutexGuard};
    #[cfg(not(custodian_shuttle))]
    pub use std::sync::{Condvar, Mutex, MutexGuard};

    /// Atomics.
    pub mod atomic {
        #[cfg(custodian_shuttle)]
        pub use shuttle::sync::atomic::{AtomicU64, Ordering};
        #[cfg(not(custodian_shuttle))]
        pub use std::sync::atomic::{AtomicU64, Ordering};
    }

    /// Scoped threads.
    pub mod thread {
        #[cfg(custodian_shuttle)]
        pub use shuttle::thread::{Scope, ScopedJoinHandle, scope};
        #[cfg(not(custodian_shuttle))]
        pub use std::thread::{Scope, ScopedJoinHandle, scope};

        /// Spawns a scoped thread named `name` (shuttle's threads have no
        /// name, and never fail to start).
        ///
        /// # Errors
        ///
        /// The OS refused a thread.
        pub fn spawn_named<'scope, 'env, F, T>(
            sc: &'scope Scope<'scope, 'env>,
            name: &str,
            f: F,
        ) -> std::io::Result<ScopedJoinHandle<'scope, T>>
        where
            F: FnOnce() -> T + Send + 'scope,
            T: Send + 'scope,
        {
            #[cfg(custodian_shuttle)]
            {
                let _ = name;
                Ok(sc.spawn(f))
            }
            #[cfg(not(custodian_shuttle))]
            {
                std::thread::Builder::new()
                    .name(name.into())
                    .spawn_scoped(sc, f)
            }
        }
    }
}

/// Runs `f` under shuttle's random scheduler, then its PCT scheduler
/// (depth 3), `iterations` schedules each, from a fixed seed: a run (and a
/// failure) replays the same way everywhere. `CUSTODIAN_SHUTTLE_SEED`
/// picks other schedules.
#[cfg(all(test, custodian_shuttle))]
pub(crate) fn shuttle_explore(f: impl Fn() + Send + Sync + Clone + 'static, iterations: usize) {
    use shuttle::scheduler::{PctScheduler, RandomScheduler};
    let seed = std::env::var("CUSTODIAN_SHUTTLE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x00c0_57d1_a45e_edu64);
    shuttle::Runner::new(
        RandomScheduler::new_from_seed(seed, iterations),
        shuttle::Config::default(),
    )
    .run(f.clone());
    shuttle::Runner::new(
        PctScheduler::new_from_seed(seed, 3, iterations),
        shuttle::Config::default(),
    )
    .run(f);
}

/// Locks `mutex`, recovering the data if a previous holder panicked.
///
/// The primitives here never leave their state half-updated across a call
/// that can panic (waking happens after unlocking), so a poisoned lock still
/// guards consistent data and refusing it would only turn one panic into many.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Blocks on `condvar`, releasing `guard` while waiting; recovers from
/// poisoning as [`lock`] does.
pub fn wait<'a, T>(condvar: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    condvar
        .wait(guard)
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

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
//! # Caveats
//!
//! Under `cfg(custodian_loom)` these types only work inside
//! `loom::model`; using them anywhere else panics. Only the loom test crate
//! builds custodian with that cfg.

#[cfg(custodian_loom)]
pub use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(not(custodian_loom))]
pub use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Atomic integer and boolean types (std or loom) and [`Ordering`](atomic::Ordering).
pub mod atomic {
    #[cfg(custodian_loom)]
    pub use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
    #[cfg(not(custodian_loom))]
    pub use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
}

/// Threads (std or loom), for tests that race the primitives.
pub mod thread {
    #[cfg(custodian_loom)]
    pub use loom::thread::{JoinHandle, spawn, yield_now};
    #[cfg(not(custodian_loom))]
    pub use std::thread::{JoinHandle, spawn, yield_now};
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

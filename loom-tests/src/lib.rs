//! loom tests of custodian's exactly-once primitives.
//!
//! The tests live in `tests/` and only exist when the workspace is built with
//! `--cfg custodian_loom`, which makes `custodian::sync::shim` hand out loom's
//! mock `Arc`, `Mutex`, `Condvar`, atomics and threads:
//!
//! ```text
//! RUSTFLAGS="--cfg custodian_loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p custodian-loom-tests -- --nocapture --test-threads=1
//! ```
//!
//! Built without the cfg (as `cargo test --workspace` does), each test file
//! holds a single test that prints that it was skipped.
//!
//! `explore` (present under the cfg) wraps `loom::model::Builder` so that every model also proves it
//! explored: it counts executions and which racer won in each, in `std`
//! atomics that loom does not control (they survive across executions), and
//! fails if nothing was explored or if some racer never won.
//!
//! `runtime` (also under the cfg) holds the models of the runtime's races —
//! the coordinator's direct commit against its actor, a node's cancel
//! against an open, a cleanup against eviction — written over small traits
//! so that the real primitives (`tests/runtime.rs`) and deliberately broken
//! ones (`tests/harness_can_fail.rs`) run through the very same model.

#[cfg(custodian_loom)]
mod harness;
#[cfg(custodian_loom)]
pub mod runtime;

#[cfg(custodian_loom)]
pub use harness::{Exploration, Recorder, explore, noop_waker};

//! Integration tests of the governed launcher with real child processes.
//!
//! Every test checks afterwards that the root was reaped and that nothing
//! it started is still alive (`/proc`).

// `common::quiet_host` orders whole tests against the fork-storm tests:
// its guard is held across awaits on purpose (each test owns its runtime).
#![allow(clippy::await_holding_lock)]

#[macro_use]
#[path = "../support/skip.rs"]
mod skip;
mod cli;
mod common;
mod confinement;
mod containment;
mod effects;
mod errors;
mod evidence;
mod isolation;
mod lifecycle;
#[path = "../support/logs.rs"]
mod logs;
#[path = "../support/marker.rs"]
mod marker;
mod outlived;
mod output;
mod panics;
mod session;
mod signals;
mod skips;
mod soundness;
mod terminal;

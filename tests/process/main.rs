//! Integration tests of the governed launcher with real child processes.
//!
//! Every test checks afterwards that the root was reaped and that nothing
//! it started is still alive (`/proc`).

mod cli;
mod common;
mod containment;
mod errors;
mod evidence;
mod lifecycle;
mod output;

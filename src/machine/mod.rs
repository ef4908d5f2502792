//! Pure typed state machines: an input and `now` go in, a new state and
//! `#[must_use]` actions come out. Nothing here reads a clock or touches the
//! operating system; the runtime executes the actions, and the stateright
//! model in `model/` explores these very functions.
//!
//! Both machines share one shape:
//!
//! - the state is a plain `Copy` value advanced only by a free function
//!   `step(&State, Event, now) -> Transition`;
//! - a `Transition` (itself `#[must_use]`) holds the next state and the
//!   actions the runtime must perform, in order;
//! - every `(state, event)` pair is handled by an exhaustive `match`, so a
//!   new state or event does not compile until each pair is decided;
//! - events that make no sense in the current state change nothing but a
//!   counter the runtime may log.
//!
//! The runtime (the coordinator for [`request`], the wire node for [`node`], the launcher for
//! [`process`]) owns the real clock, the I/O and the channels; it feeds each
//! event through `step` and then performs the returned actions before the
//! next event. `docs/state-machines.md` has a diagram and the full
//! state × event table of each machine; `docs/verification.md` says what the
//! model checker proves about them.

pub mod cleanup;
pub mod node;
pub mod process;
pub mod request;

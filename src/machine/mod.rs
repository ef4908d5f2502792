//! Pure typed state machines: an input and `now` go in, a new state and
//! `#[must_use]` actions come out. Nothing here reads a clock or touches the
//! operating system; the runtime executes the actions, and the stateright
//! model in `model/` explores these very functions.

pub mod process;
pub mod request;

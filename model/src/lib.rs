//! Stateright models over custodian's real state machines.
//!
//! # Theory of operation
//!
//! Each model wraps one pure step function from `custodian::machine` in an
//! adversarial environment: the environment fires every event the runtime
//! could deliver, in every order the checker can find, and executes the
//! actions the machine returns by recording them. Properties are stated over
//! that record (how many cleanups ran, what was published, when), never over
//! a second implementation of the machine.
//!
//! The models are generic over the step function ([`request::RequestStep`]),
//! so the same harness also explores deliberately broken variants that wrap
//! the real function and alter one decision; [`check`] runs them all and
//! demands that each broken variant is caught by the property it breaks.
//! That is how the harness is shown able to fail.

pub mod actor;
pub mod catalog;
pub mod check;
pub mod explain;
pub mod process;
pub mod progress;
pub mod request;

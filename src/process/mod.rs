//! The governed process launcher (`process.run`).

pub mod capture;
pub mod env;
pub mod evidence;
pub mod invocation;
pub mod units;

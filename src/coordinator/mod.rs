//! Drives each request end to end through `machine::request`.

mod id;

pub use id::{InvalidRequestId, RequestId};

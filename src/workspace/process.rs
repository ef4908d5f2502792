//! The seam between a request and the processes it launched.

use std::future::Future;
use std::pin::Pin;

/// A future a [`RequestProcess`] returns from `settled`.
pub type SettledFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// One process group a request launched, as cleanup sees it.
///
/// The workspace needs exactly two things from the launcher: ask the group to
/// stop (`TERM → grace → KILL`, idempotent, never a signal after settlement)
/// and wait until it has settled. Implemented for the launcher's handle and,
/// in tests, for anything that counts calls.
pub trait RequestProcess: Send + Sync + 'static {
    /// Starts cancelling the whole process group. Returns at once; calling it
    /// again, or after the process settled, does nothing.
    fn cancel(&self);

    /// Completes once the process has settled (its group is gone or the
    /// launcher gave up on it and said so in its evidence).
    fn settled(&self) -> SettledFuture<'_>;

    /// Whether the process has settled already (then a cancel is not
    /// counted as one). The default says no: a process the launcher cannot
    /// ask is counted as running.
    fn is_settled(&self) -> bool {
        false
    }
}

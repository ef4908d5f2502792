//! The seam between a request's files and whatever could still write them.
//!
//! The workspace knows files only. What a request started that could write
//! into its job (processes, the cgroup holding them) belongs to the layer
//! above, which puts it behind a [`Barrier`] on the request's [`Job`]
//! ([`Job::barrier_or_insert`]). Every cleanup of the request, whoever starts
//! it (a caller, [`Workspace::close`], a reclaim), stops the barrier first and
//! removes nothing unless the barrier says everything behind it stopped.
//!
//! A barrier that must survive its process (a request cgroup, which a node
//! started after this one died must kill before it removes anything) is
//! journalled as an opaque record ([`Job::journal_barrier`]); the workspace
//! hands the record back to its [`Revival`] when it replays the journal.
//!
//! [`Job`]: super::Job
//! [`Job::barrier_or_insert`]: super::Job::barrier_or_insert
//! [`Job::journal_barrier`]: super::Job::journal_barrier
//! [`Workspace::close`]: super::Workspace::close

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::CleanupCode;

/// The future [`Barrier::stop`] returns.
pub type StopFuture<'a> = Pin<Box<dyn Future<Output = Stopped> + Send + 'a>>;

/// What stands between a request's files and whatever the request started
/// that could still write them.
///
/// The workspace knows files only: the layer that starts what could write
/// into a job puts it behind the request's barrier
/// ([`Job::barrier_or_insert`](super::Job::barrier_or_insert), one per request),
/// and every cleanup of the request (a caller's, [`Workspace::close`]'s, a
/// reclaim's) stops the barrier first and removes nothing unless the barrier
/// says everything behind it stopped. A barrier that must outlive its process
/// is journalled as an opaque record
/// ([`Job::journal_barrier`](super::Job::journal_barrier)) and revived by the
/// workspace's [`Revival`] on reclaim. `request` puts a request's processes
/// and its cgroup behind one.
///
/// [`Workspace::close`]: super::Workspace::close
pub trait Barrier: Any + Send + Sync {
    /// Stops everything behind the barrier: nothing new is admitted from now
    /// on, whatever runs is stopped, and the future completes once all of
    /// it is seen stopped, or once `bound` has passed (then
    /// [`Stopped::unsettled`] or [`Stopped::refused`] says so). Called once
    /// per cleanup attempt; a second call finds everything stopped already.
    fn stop(&self, bound: Duration) -> StopFuture<'_>;

    /// The cleanup is over: `retired` when the request's journal no longer
    /// names the barrier's record (the request was cleaned clean and its
    /// journal is gone), so whatever the record names may serve again;
    /// otherwise it must not (a later reclaim of the journal acts on it).
    fn finished(&self, retired: bool) {
        let _ = retired;
    }
}

/// What [`Barrier::stop`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stopped {
    /// How many were still running when the stop began (each was stopped).
    pub cancelled: u32,
    /// How many had not settled when the bound passed. The files are
    /// removed all the same when nothing is [`refused`](Stopped::refused):
    /// the barrier holds that nothing behind it can still write; the cleanup
    /// then reports [`CleanupCode::ProcessBoundExceeded`].
    pub unsettled: u32,
    /// Something behind the barrier may still write: no file may be removed,
    /// and the cleanup fails closed with this code.
    pub refused: Option<CleanupCode>,
}

impl Stopped {
    /// A stop that found `cancelled` running and saw `unsettled` of them
    /// not settled by the bound.
    pub fn new(cancelled: u32, unsettled: u32) -> Self {
        Stopped {
            cancelled,
            unsettled,
            refused: None,
        }
    }

    /// A stop after which files must not be removed.
    pub fn refused(self, code: CleanupCode) -> Self {
        Stopped {
            refused: Some(code),
            ..self
        }
    }
}

/// The layer above's side of a workspace: turns a journalled barrier record
/// back into a barrier, and is told when the workspace's reclaim and close
/// are done. Given to [`Workspace::open_with`](super::Workspace::open_with).
pub trait Revival: Send + Sync {
    /// The barrier `record` (written by [`Job::journal_barrier`]) names, for a
    /// request a process that died left: `None` when nothing of it is left.
    ///
    /// # Errors
    ///
    /// The code the reclaim's cleanup fails closed with (the job is kept):
    /// the record is not honoured, or what it names cannot be stopped.
    ///
    /// [`Job::journal_barrier`]: super::Job::journal_barrier
    fn revive(&self, record: &[u8]) -> Result<Option<Arc<dyn Barrier>>, CleanupCode>;

    /// [`Workspace::reclaim`](super::Workspace::reclaim) replayed every
    /// journal (and cleaned what they proved).
    fn reclaimed(&self) {}

    /// [`Workspace::close`](super::Workspace::close) finished every cleanup
    /// and is about to release the workspace.
    fn closed(&self) {}
}

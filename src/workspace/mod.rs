//! Request-owned job namespaces, the ownership inventory, and fail-closed
//! exactly-once cleanup.
//!
//! # Theory of operation
//!
//! A [`Workspace`] is opened on a root directory and holds it, its internal
//! namespace (`.custodian` by default) and the namespace's `job` directory by
//! descriptor. Opening a request ([`Workspace::open_request`]) validates the
//! request id before any syscall and creates `<internal>/job/<request_id>`
//! with `mkdirat` relative to the held descriptor.
//!
//! Everything a request owns is created through the [`Job`] and
//! [`ArtifactDir`] helpers: one name at a time, relative to a directory
//! descriptor, never following a symlink, and checked to stay on the
//! workspace's device and mount. The identity the kernel reports for each new
//! inode (device, inode, mount id, birth time) is recorded in the request's
//! [`Inventory`]. The workspace knows nothing of processes: what a request
//! started that could write into its job is put behind the request's
//! [`Barrier`] by the layer that started it (`request` puts its processes and
//! their cgroup there).
//!
//! Cleanup runs once per request whatever races ([`Workspace::cleanup`]): it
//! stops the request's barrier (at most the cleanup bound; a barrier that does
//! not stop keeps every file), then compares the job tree with the inventory and either
//! removes exactly the registered artifacts, deepest first, or stops and
//! keeps everything that remains (see `remove.rs` and
//! `docs/contracts/workspace-cleanup.md`). Caller file tools resolve their
//! paths with [`Workspace::resolve_user_path`], which never yields a path in
//! the internal namespace.
//!
//! Every request's inventory is also written to an append-only ownership
//! journal (`<internal>/journal/<id>`, format in [`journal`]): an intent
//! before each entry is created, its identity after, the cleanup's start and
//! verdict. A workspace opened again after its process died replays the
//! journals without a verdict ([`Workspace::reclaim`]) and runs the same
//! cleanup for those requests, removing only what a journal proves.

mod barrier;
mod identity;
mod inventory;
pub mod journal;
mod resolve;
mod result;

#[cfg(unix)]
mod journal_file;
#[cfg(unix)]
mod leftovers;
#[cfg(unix)]
mod remove;
#[cfg(unix)]
mod runtime;

#[cfg(not(unix))]
mod runtime_other;
#[cfg(not(unix))]
use runtime_other as runtime;

use std::io;
use std::time::Duration;

pub use crate::fs::{BirthTime, FileKind, Identity, MountId, Observed};
pub use crate::id::{MAX_REQUEST_ID_LEN, RequestId, RequestIdError};
pub use barrier::{Barrier, Revival, StopFuture, Stopped};
pub use identity::{Anchor, Mismatch};
pub use inventory::{ArtifactKind, Entry, Inventory, InventoryError, JOB_ROOT};
pub use resolve::UserPathError;
pub use result::{CleanupCode, CleanupCounts, CleanupResult, CleanupStatus};
pub use runtime::{ArtifactDir, Job, Workspace};

/// The default name of the internal namespace under the workspace root.
pub const DEFAULT_INTERNAL_NAME: &str = ".custodian";

/// The directory of the internal namespace that holds one job directory
/// per open request: `<root>/<internal>/job/<id>`.
pub const JOB_DIR_NAME: &str = "job";

/// How a [`Workspace`] is opened: [`WorkspaceConfig::default`], then
/// `with_*` for what differs.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct WorkspaceConfig {
    /// Name of the internal namespace directory under the root (a single,
    /// non-hidden-dot-dot component; default `.custodian`).
    pub internal_name: String,
    /// How long cleanup waits for a request's process groups to settle after
    /// cancelling them (default 10 s).
    pub cleanup_bound: Duration,
    /// How many completed cleanup results are kept for duplicate callers
    /// (default 1024).
    pub result_cache: usize,
}

impl Default for WorkspaceConfig {
    fn default() -> Self {
        WorkspaceConfig {
            internal_name: DEFAULT_INTERNAL_NAME.to_owned(),
            cleanup_bound: Duration::from_secs(10),
            result_cache: 1024,
        }
    }
}

impl WorkspaceConfig {
    /// Replaces the internal namespace's name.
    #[must_use]
    pub fn with_internal_name(mut self, name: impl Into<String>) -> Self {
        self.internal_name = name.into();
        self
    }

    /// Replaces how long cleanup waits for a request's process groups.
    #[must_use]
    pub fn with_cleanup_bound(mut self, bound: Duration) -> Self {
        self.cleanup_bound = bound;
        self
    }

    /// Replaces how many completed cleanup results are kept.
    #[must_use]
    pub fn with_result_cache(mut self, results: usize) -> Self {
        self.result_cache = results;
        self
    }
}

/// Errors of the workspace runtime.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkspaceError {
    /// The request id was refused (before any syscall).
    #[error("invalid request id: {0}")]
    InvalidRequestId(#[from] RequestIdError),
    /// An artifact name or relative path was refused (before any syscall).
    #[error("invalid artifact name: {reason}")]
    InvalidName {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The configured internal namespace name is not a single plain component.
    #[error("invalid internal namespace name")]
    InvalidInternalName,
    /// A filesystem call failed.
    #[error("{op} failed: {source}")]
    Io {
        /// The operation, e.g. `mkdirat job`.
        op: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A component is not a plain directory/file on the workspace's device
    /// and mount (a symlink, special file, mount root or replacement).
    #[error("{what} is not owned by the workspace: {code:?}")]
    Untrusted {
        /// Which component (`root`, `internal`, `job`, `artifact`).
        what: &'static str,
        /// Why, as a cleanup code.
        code: CleanupCode,
    },
    /// The request's job directory already exists: this runtime cannot prove
    /// it created it, so it does not adopt it.
    #[error("job directory for request {request} already exists")]
    JobExists {
        /// The request.
        request: RequestId,
    },
    /// The request is already open in this workspace.
    #[error("request {request} is already open")]
    AlreadyOpen {
        /// The request.
        request: RequestId,
    },
    /// The request was already cleaned up and its result is still cached;
    /// reusing the id now would hand the new request the old result.
    #[error("request {request} was already cleaned up")]
    AlreadyCleaned {
        /// The request.
        request: RequestId,
    },
    /// The request's cleanup has started: nothing more may be created or
    /// launched for it.
    #[error("request {request} is closed")]
    RequestClosed {
        /// The request.
        request: RequestId,
    },
    /// A caller path was refused (absolute, escaping, or in the internal
    /// namespace).
    #[error("path refused: {0}")]
    InternalPath(#[from] UserPathError),
    /// A launch names another workspace directory than this workspace's
    /// root.
    #[error("the launch options name another workspace root")]
    RootMismatch,
    /// The request holds a barrier of another type than the one asked for
    /// ([`Job::barrier_or_insert`]): one barrier per request.
    #[error("request {request} holds a barrier of another kind")]
    BarrierTaken {
        /// The request.
        request: RequestId,
    },
    /// A barrier record was refused ([`Job::journal_barrier`]).
    #[error("barrier record refused: {reason}")]
    BarrierRecord {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The workspace has been closed.
    #[error("workspace is closed")]
    Closed,
    /// Another [`Workspace`] holds this workspace open (another node, or
    /// another `open` in this process): one owner per workspace, so that a
    /// reclaim never adopts the journals of requests that are alive.
    #[error("the workspace is held open by another owner")]
    Locked,
    /// The artifact could not be registered.
    #[error(transparent)]
    Inventory(#[from] InventoryError),
    /// Descriptor-relative no-follow primitives are not available on this
    /// platform.
    #[error("request workspaces are unsupported on this platform")]
    Unsupported,
}

impl From<WorkspaceError> for io::Error {
    fn from(e: WorkspaceError) -> Self {
        match e {
            WorkspaceError::Io { source, .. } => source,
            WorkspaceError::Unsupported => io::Error::new(io::ErrorKind::Unsupported, e),
            e => io::Error::other(e),
        }
    }
}

/// Validates a single artifact name component.
pub(crate) fn validate_name(name: &str) -> Result<(), WorkspaceError> {
    let reason = if name.is_empty() {
        "empty"
    } else if name == "." || name == ".." {
        "dot or dot-dot"
    } else if name.contains('/') {
        "holds a separator"
    } else if name.contains('\0') {
        "holds NUL"
    } else if name.len() > 255 {
        "longer than 255 bytes"
    } else {
        return Ok(());
    };
    Err(WorkspaceError::InvalidName { reason })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifact_names_are_single_components() {
        assert!(validate_name("out.json").is_ok());
        assert!(validate_name(".hidden").is_ok());
        for bad in ["", ".", "..", "a/b", "/", "a\0"] {
            assert!(
                matches!(validate_name(bad), Err(WorkspaceError::InvalidName { .. })),
                "{bad:?}"
            );
        }
        assert!(validate_name(&"x".repeat(256)).is_err());
    }
}

//! How a cleanup ended, in the one vocabulary every layer uses: the
//! workspace reports it (`workspace::CleanupResult::verdict`), the wire node
//! decides with it (`machine::node`), the request machine is told it
//! (`machine::request::Event::CleanupFinished`), and the wire, the CLI and
//! the MCP server spell its [`CleanupStatus`] (`cleaned`, `already_gone`,
//! `reclaimed`, `failed`).

use serde::{Deserialize, Serialize};

use crate::error::SafeCode;

/// How a request's cleanup ended: the one status of a cleanup, the same in
/// a `workspace::CleanupResult`, on the wire (`wire::CleanupSummary`) and in the CLI's
/// and the MCP server's JSON (`"cleaned"`, `"already_gone"`, `"reclaimed"`,
/// `"failed"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CleanupStatus {
    /// Every process group was settled and every registered entry still
    /// present was destroyed, nothing else was (artifacts already gone are
    /// counted as `missing`); see `docs/contracts/workspace-cleanup.md`.
    Cleaned,
    /// Nothing is held for the request (never opened here, or its result
    /// was evicted from the cache) and its job directory does not exist:
    /// nothing was touched.
    AlreadyGone,
    /// The request belonged to a node that died before its cleanup
    /// finished; a node started again on the same workspace replayed the
    /// request's ownership journal and removed every artifact the journal
    /// proves (and nothing else was in the job tree).
    Reclaimed,
    /// Cleanup failed closed; the code (`workspace::CleanupResult::code`, or the
    /// wire's `code`) says why. Whatever was not yet removed is preserved
    /// for inspection.
    Failed,
}

/// What one cleanup did, as the workspace reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum CleanupVerdict {
    /// Everything the request owned is gone.
    Cleaned,
    /// Nothing is held for the request (never opened here, or already
    /// removed): nothing was touched.
    AlreadyGone,
    /// The request belonged to an earlier run of the node that died; the
    /// node replayed its ownership journal on start and removed everything
    /// the journal proves.
    Reclaimed,
    /// Cleanup failed closed for the given reason; the suspect subtree is
    /// kept and reported.
    Failed(SafeCode),
}

impl CleanupVerdict {
    /// The verdict's status.
    pub const fn status(&self) -> CleanupStatus {
        match self {
            CleanupVerdict::Cleaned => CleanupStatus::Cleaned,
            CleanupVerdict::AlreadyGone => CleanupStatus::AlreadyGone,
            CleanupVerdict::Reclaimed => CleanupStatus::Reclaimed,
            CleanupVerdict::Failed(_) => CleanupStatus::Failed,
        }
    }

    /// Why the cleanup failed, when it did.
    pub const fn code(&self) -> Option<SafeCode> {
        match self {
            CleanupVerdict::Failed(code) => Some(*code),
            _ => None,
        }
    }

    /// True when nothing of the request remains (every verdict but
    /// `Failed`).
    pub const fn is_clean(&self) -> bool {
        !matches!(self, CleanupVerdict::Failed(_))
    }
}

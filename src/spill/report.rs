//! The sweep report, warnings and the warning sink.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

use serde::Serialize;

/// The schema id of [`SweepReport`]'s JSON form.
pub const REPORT_SCHEMA: &str = "custodian.spill.sweep_report/1";
/// The most warnings a report keeps; later ones are only counted.
pub const MAX_REPORT_WARNINGS: usize = 1000;

/// Why an entry or root was skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SkipReason {
    /// A symlink: never followed, never deleted.
    Symlink,
    /// A FIFO, socket or device node: never opened, never deleted.
    SpecialFile,
    /// A directory in a root whose name is not a session name.
    NonSessionDir,
    /// A regular file that is not a spill file (wrong place or name).
    UnrelatedFile,
    /// A directory inside a session directory.
    NestedDir,
    /// A mount point (including a same-filesystem bind mount).
    MountPoint,
    /// A root or session directory not owned by the current user.
    UntrustedOwner,
    /// A root or session directory writable by group or others.
    UntrustedMode,
    /// A root whose ancestor is writable by others without the sticky bit,
    /// or owned by another user.
    UntrustedAncestor,
    /// A root refused when running as root (`/`, home, workspace, cwd, or
    /// an ancestor of one of them).
    DangerousRoot,
    /// A root that aliases one already scanned (same device and inode).
    DuplicateRoot,
    /// The entry changed between listing and acting on it.
    IdentityChanged,
    /// A root that does not exist or is not a directory.
    MissingRoot,
    /// A filesystem call failed (see the warnings).
    Error,
    /// The sweep was cancelled before reaching the entry.
    Cancelled,
}

/// One contained failure or refusal, as given to the [`WarningSink`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SpillWarning {
    /// A stable code, e.g. `untrusted_session`, `unlink_failed`.
    pub code: &'static str,
    /// The path concerned, escaped losslessly (invalid UTF-8 as `\xNN`).
    pub path: String,
    /// A human-readable explanation.
    pub message: String,
}

/// Where the sweep's warnings go.
///
/// A sink may fail (return `Err`) or even panic: both are contained, counted
/// in [`SweepReport::sink_failures`] and the warning is still kept in the
/// report.
pub trait WarningSink: Send + Sync {
    /// Records one warning.
    ///
    /// # Errors
    ///
    /// Any error; the sweep ignores it beyond counting.
    fn warn(&self, warning: &SpillWarning) -> Result<(), Box<dyn std::error::Error + Send + Sync>>;
}

/// The default sink: `tracing::warn!`.
#[derive(Clone, Copy, Debug, Default)]
pub struct TracingSink;

impl WarningSink for TracingSink {
    fn warn(&self, w: &SpillWarning) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        tracing::warn!(code = w.code, path = %w.path, "spill sweep: {}", w.message);
        Ok(())
    }
}

/// What happened to one root.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RootReport {
    /// The path as given or discovered, escaped.
    pub path: String,
    /// `configured`, `active` or `discovered`.
    pub origin: RootKind,
    /// Whether the root was scanned.
    pub scanned: bool,
    /// Why it was not scanned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<SkipReason>,
    /// Whether the (discovered, empty) root itself was removed.
    pub removed: bool,
}

/// How a root came to be swept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RootKind {
    /// Named by the configuration or the command line; never removed.
    Configured,
    /// The running store's root; never removed.
    Active,
    /// A prior default root found under the temp dir by prefix; removed
    /// when empty.
    Discovered,
}

/// The result of one sweep. Serializes to the JSON documented in
/// `docs/contracts/spill.md`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SweepReport {
    /// Always [`REPORT_SCHEMA`].
    pub schema: &'static str,
    /// Whether this was a dry run (nothing deleted).
    pub dry_run: bool,
    /// The cutoff as nanoseconds since the Unix epoch (negative before it).
    pub cutoff_unix_nanos: i128,
    /// Every root considered.
    pub roots: Vec<RootReport>,
    /// How many roots were scanned.
    pub roots_scanned: u64,
    /// Expired spill files deleted (or, in a dry run, that would be).
    pub files_deleted: u64,
    /// Spill files kept because they are not expired.
    pub files_kept: u64,
    /// Empty session directories removed.
    pub dirs_pruned: u64,
    /// Empty discovered roots removed.
    pub roots_removed: u64,
    /// Skipped entries by reason.
    pub skipped: BTreeMap<SkipReason, u64>,
    /// The warnings (at most [`MAX_REPORT_WARNINGS`]).
    pub warnings: Vec<SpillWarning>,
    /// Warnings beyond [`MAX_REPORT_WARNINGS`].
    pub warnings_dropped: u64,
    /// How many times the warning sink failed or panicked.
    pub sink_failures: u64,
    /// In a dry run, the files that would be deleted (escaped paths).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub would_delete: Vec<String>,
    /// Whether the sweep stopped early because it was cancelled.
    pub cancelled: bool,
}

impl SweepReport {
    pub(crate) fn new(dry_run: bool, cutoff_unix_nanos: i128) -> Self {
        SweepReport {
            schema: REPORT_SCHEMA,
            dry_run,
            cutoff_unix_nanos,
            ..SweepReport::default()
        }
    }

    pub(crate) fn skip(&mut self, reason: SkipReason) {
        *self.skipped.entry(reason).or_default() += 1;
    }

    /// How many entries were skipped for `reason`.
    pub fn skipped_for(&self, reason: SkipReason) -> u64 {
        self.skipped.get(&reason).copied().unwrap_or(0)
    }

    /// Sends `w` to `sink`, containing a failing or panicking sink, and
    /// keeps it in the report.
    pub(crate) fn warn(&mut self, sink: &dyn WarningSink, w: SpillWarning) {
        let ok = matches!(catch_unwind(AssertUnwindSafe(|| sink.warn(&w))), Ok(Ok(())));
        if !ok {
            self.sink_failures += 1;
        }
        if self.warnings.len() < MAX_REPORT_WARNINGS {
            self.warnings.push(w);
        } else {
            self.warnings_dropped += 1;
        }
    }
}

//! The spill store and its one-shot startup retention sweep.
//!
//! # Theory of operation
//!
//! Oversized tool results are *spilled* to local disk and named by an
//! opaque, versioned [`Locator`]. A [`SpillStore`] owns one root directory:
//! either configured, or a per-process default root created under the OS
//! temp dir with the prefix `custodian-spill-` (configurable). Files live at
//! `<root>/<session>/<32 hex>.spill`; directories are `0700`, files `0600`,
//! created exclusively and never through a symlink.
//!
//! Spills must outlive the process that wrote them (resumed and forked
//! sessions keep their locators), but not forever. [`SpillService`] runs
//! **one** best-effort sweep after activation, on tokio's blocking pool,
//! without delaying availability, and awaits it at disposal. The sweep
//! ([`sweep_spill_roots`]) deletes spill files whose mtime is strictly
//! older than `now − cleanup_period_days`, prunes empty session directories,
//! and removes prior default roots (found by [`discover_default_roots`]) once
//! they are empty. A write that loses a race with a prune recreates its
//! session directory.
//!
//! The sweep runs in `/tmp`, the classic target of symlink and mount tricks,
//! so it works descriptor-relative: directories are opened with
//! `O_NOFOLLOW | O_DIRECTORY`, every action is an `*at` call on a single
//! name from `getdents`, the entry is re-checked with `statx` (device, inode,
//! mount id) immediately before each unlink, and a mount point — including
//! a same-filesystem bind mount, which only the mount id reveals — is never
//! entered. Roots and session directories must be owned by the current user
//! and not writable by group/others; ancestors must be non-writable by others
//! or sticky. Every failure, including a failing or panicking
//! [`WarningSink`], is contained and reported in the [`SweepReport`].
//!
//! See `docs/contracts/spill.md` for the on-disk layout, locator format,
//! configuration, sweep and trust rules and report JSON.
//!
//! # Caveats
//!
//! Linux only: the mount fence relies on `statx` (`STATX_MNT_ID`, Linux
//! ≥ 5.8). The same user account is the trust boundary: a process running
//! as that user can always swap entries between the final `statx` and the
//! `unlinkat`, but can only ever redirect the sweep to entries inside the
//! same trusted directory.

mod config;
mod escape;
mod locator;
mod report;
mod service;
pub(crate) use service::{read_on_pool, write_on_pool};
mod store;
mod sweep;

pub use config::{
    DEFAULT_CLEANUP_PERIOD_DAYS, DEFAULT_ROOT_PREFIX, SpillConfig, SpillConfigError,
    validate_prefix,
};
pub use locator::{
    LOCATOR_PREFIX, LOCATOR_VERSION, Locator, LocatorError, MAX_SESSION_LEN, RootTag,
    validate_session,
};
pub use report::{
    MAX_REPORT_WARNINGS, REPORT_SCHEMA, RootKind, RootReport, SkipReason, SpillWarning,
    SweepReport, TracingSink, WarningSink,
};
pub use service::{ServiceError, ServiceOptions, SpillService};
pub use store::{RootOrigin, SpillStore, StoreError};
pub use sweep::{
    Discovery, SweepPlan, discover_default_roots, sweep_spill_roots, sweep_spill_roots_until,
};

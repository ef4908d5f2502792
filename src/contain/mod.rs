//! Containment tiers: where a governed process (and everything it starts)
//! is kept, and how custodian proves that nothing of it is left.
//!
//! # Theory of operation
//!
//! A POSIX process group is a weak container: any member can leave it with
//! `setsid` or `setpgid`, and the only way to find its members is to scan
//! `/proc`, which can be neither complete nor cheap. A **cgroup v2** is a
//! container the kernel keeps for us: membership is inherited across every
//! `fork`, no unprivileged call leaves it, `cgroup.events` says
//! `populated 0` exactly when no task is left in it (zombies do not count),
//! and writing `1` to `cgroup.kill` sends `SIGKILL` to every task inside at
//! once, fork bombs included.
//!
//! This module finds the unified hierarchy ([`Hierarchy::discover`]), decides
//! whether child cgroups may be created beneath this process's own cgroup,
//! and hands out [`Cgroup`] handles: a directory descriptor opened with
//! `O_DIRECTORY | O_NOFOLLOW` on which every operation is performed
//! relative, never a path rebuilt from input. The layout is
//!
//! ```text
//! <own cgroup>/custodian-<pid>/        one base per custodian process (lazy)
//!                              p<n>/   one cgroup per governed process
//!                              r<n>/   or a request's cgroup ...
//!                                 p<n>/  ... with its processes' cgroups
//! ```
//!
//! Empty cgroups are kept for reuse ([`Cgroup::release`]): a process
//! cgroup beneath its request cgroup for the request's next process; a
//! request cgroup beneath the base for the next request, and a standalone
//! launch's cgroup ([`process_cgroup`]) for the next standalone launch,
//! while a [`SpareKeeper`] (a workspace, or an embedder that launches again
//! and again) lives. A kept cgroup is read again before
//! it serves (empty, attributes at their defaults, no stray child): a tool
//! that can write cgroupfs may have changed it, and then it is not reused.
//!
//! Nothing a tool could write is trusted later without a check: a request
//! cgroup named by a journal is reopened ([`reopen_request_cgroup`]) only
//! when it has custodian's own shape under a base no live process owns, and
//! is the cgroup the journal recorded; else [`UntrustedCgroup`] says why.
//!
//! The base is created on first use and removed, best effort, whenever its
//! last child is removed; while it is in use its process holds a shared
//! `flock` on it. A base whose process died (SIGKILL) outlives it:
//! [`remove_dead_bases`], called by the workspace's reclaim when a node
//! starts, removes those whose pid is gone and whose lock nobody holds.
//! Names come from a process-wide counter, so concurrent launches never
//! collide.
//!
//! [`Containment`] is what the embedder asks for; [`Unavailable`] says,
//! with a safe code, why the cgroup tier cannot be used here.
//!
//! # Caveats
//!
//! Under systemd, give the unit `Delegate=yes` so that systemd leaves the
//! cgroups created beneath it alone.
//!
//! No cgroup controller is needed or enabled. A non-root cgroup that has
//! controllers in its `cgroup.subtree_control` cannot hold processes itself
//! ("no internal processes" rule); custodian running in such a cgroup means
//! it sees a namespace or a delegation it does not understand, and the tier
//! is refused with [`Unavailable::InternalProcessRule`] rather than guessed.

#[cfg(target_os = "linux")]
mod cgroup;
#[cfg(target_os = "linux")]
pub(crate) use cgroup::{discover_once, keeper_lives, on_last_keeper};

#[cfg(target_os = "linux")]
pub use cgroup::{
    Cgroup, CgroupError, CgroupName, DeadBases, EventsWatch, Hierarchy, Released, ReopenError,
    SpareKeeper, UntrustedCgroup, base_cgroup_name, check_request_record, process_cgroup,
    remove_dead_bases, reopen_request_cgroup, request_cgroup,
};

use std::fmt;
use std::str::FromStr;

use crate::error::SafeCode;

/// The containment the embedder asks for.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Containment {
    /// A cgroup v2 where one can be created here, else the pinned process
    /// group (the subreaper tier if [`crate::process::enable_subreaper`]
    /// was called). The evidence says which, and why it fell back.
    #[default]
    Auto,
    /// A cgroup v2 per governed process, or a launch error.
    Cgroup,
    /// The process group (pinned by the unreaped root where Linux allows).
    Group,
    /// The pinned group plus this process as child subreaper; needs
    /// [`crate::process::enable_subreaper`] first.
    Subreaper,
}

impl Containment {
    /// The name used on the command line and in the evidence.
    pub const fn as_str(self) -> &'static str {
        match self {
            Containment::Auto => "auto",
            Containment::Cgroup => "cgroup",
            Containment::Group => "group",
            Containment::Subreaper => "subreaper",
        }
    }
}

impl fmt::Display for Containment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A containment name that is none of `auto`, `cgroup`, `group`,
/// `subreaper`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown containment (expected auto, cgroup, group or subreaper)")]
pub struct UnknownContainment;

impl FromStr for Containment {
    type Err = UnknownContainment;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Containment::Auto),
            "cgroup" => Ok(Containment::Cgroup),
            "group" => Ok(Containment::Group),
            "subreaper" => Ok(Containment::Subreaper),
            _ => Err(UnknownContainment),
        }
    }
}

/// Why a containment tier cannot be used here. Each variant is a safe code
/// (no path, no errno text) for the evidence and the wire.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, thiserror::Error,
)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Unavailable {
    /// No cgroup v2 hierarchy is mounted, this process has no `0::` entry
    /// in `/proc/self/cgroup`, or its cgroup is not visible in the mount.
    #[error("no cgroup v2 hierarchy holding this process is mounted")]
    NoCgroup2,
    /// Child cgroups cannot be created beneath this process's cgroup (not
    /// delegated to this user, read-only, or refused).
    #[error("the own cgroup is not delegated: child cgroups cannot be created")]
    NotDelegated,
    /// This process sits in a non-root cgroup that has controllers enabled
    /// for its children, which the kernel's "no internal processes" rule
    /// forbids; custodian will not guess where it may create cgroups.
    #[error("the own cgroup has controllers enabled for its children (no internal processes rule)")]
    InternalProcessRule,
    /// The kernel has no `cgroup.kill` (before Linux 5.14).
    #[error("the kernel has no cgroup.kill")]
    NoCgroupKill,
    /// The kernel cannot start a process inside a cgroup (`clone3` with
    /// `CLONE_INTO_CGROUP`, Linux 5.7).
    #[error("clone3 with CLONE_INTO_CGROUP is not supported")]
    Clone3Unsupported,
    /// Not Linux.
    #[error("cgroups are Linux only")]
    NotLinux,
    /// Subreaper containment was asked for but
    /// [`crate::process::enable_subreaper`] was not called (or failed).
    #[error("this process is not a child subreaper")]
    NotSubreaper,
    /// Setting the cgroup up failed for another reason.
    #[error("setting up the cgroup failed")]
    SetupFailed,
}

impl Unavailable {
    /// The safe code (`no_cgroup2`, `not_delegated`, ...).
    pub const fn code(self) -> SafeCode {
        SafeCode::new(match self {
            Unavailable::NoCgroup2 => "no_cgroup2",
            Unavailable::NotDelegated => "not_delegated",
            Unavailable::InternalProcessRule => "internal_process_rule",
            Unavailable::NoCgroupKill => "no_cgroup_kill",
            Unavailable::Clone3Unsupported => "clone3_unsupported",
            Unavailable::NotLinux => "not_linux",
            Unavailable::NotSubreaper => "not_subreaper",
            Unavailable::SetupFailed => "setup_failed",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containment_parses_and_serializes_the_same_names() {
        for c in [
            Containment::Auto,
            Containment::Cgroup,
            Containment::Group,
            Containment::Subreaper,
        ] {
            assert_eq!(c.as_str().parse::<Containment>(), Ok(c));
            assert_eq!(serde_json::to_value(c).unwrap(), c.as_str());
        }
        assert!("Cgroup".parse::<Containment>().is_err());
        assert!("".parse::<Containment>().is_err());
        assert_eq!(Containment::default(), Containment::Auto);
    }

    #[test]
    fn unavailable_codes_match_their_serde_names() {
        for u in [
            Unavailable::NoCgroup2,
            Unavailable::NotDelegated,
            Unavailable::InternalProcessRule,
            Unavailable::NoCgroupKill,
            Unavailable::Clone3Unsupported,
            Unavailable::NotLinux,
            Unavailable::NotSubreaper,
            Unavailable::SetupFailed,
        ] {
            assert_eq!(serde_json::to_value(u).unwrap(), u.code().as_str());
        }
    }
}

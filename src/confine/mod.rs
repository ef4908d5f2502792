//! Confinement: what a governed process may touch while it runs.
//!
//! # Theory of operation
//!
//! custodian decides *whether* a process runs (policy) and makes sure it
//! ends (containment); confinement limits *what* it can do meanwhile. A
//! [`Confinement`] names a filesystem mode (`none`, `read-only`,
//! `workspace-write`), extra read/write grants and read denies by path, a
//! network mode and whether signals and abstract unix sockets are scoped
//! to the sandbox. Three kernel mechanisms enforce it, each for what it
//! covers:
//!
//! | part | mechanism |
//! |---|---|
//! | reads, writes, executes, renames, links, truncation, device ioctls by path hierarchy | Landlock filesystem rights (ABI 1, 2, 3, 5) |
//! | TCP bind and connect | Landlock network rights (ABI 4) |
//! | UDP, raw, packet, netlink, every non-`AF_UNIX` socket; `io_uring` | seccomp filter on `socket`, `socketpair`, `io_uring_setup` |
//! | signals and abstract unix sockets to processes outside the sandbox | Landlock scopes (ABI 6) |
//! | no privilege gained through `execve` (setuid, file capabilities) | `no_new_privs` |
//!
//! The launcher builds everything in the parent, before the clone: it
//! probes the kernel's Landlock ABI, plans what the ABI can enforce
//! (strict: refuse when something is missing; best-effort: launch and list
//! what was not enforced), creates the Landlock ruleset with the `landlock`
//! crate (close-on-exec descriptor), compiles the seccomp program with
//! `seccompiler` (once per process), and creates a private temporary
//! directory. The child of the `clone3` spawner, already in its cgroup,
//! makes its raw system calls on that pre-built memory just before
//! `execve`: `prctl(PR_SET_NO_NEW_PRIVS)` and `landlock_restrict_self(fd,
//! 0)`. The seccomp program is installed once per process on a spawner
//! thread that does nothing else, and every network-off child is cloned by
//! that thread, so it inherits the filter (and `no_new_privs`) from its
//! first instruction: installing a filter costs the kernel tens of
//! microseconds per call (conversion, JIT, its allow cache), releasing it
//! as much again (`crate::process::spawn`, *Inherited seccomp filter*;
//! where that thread cannot be set up, the child installs the program
//! itself with `seccomp(SECCOMP_SET_MODE_FILTER, 0, prog)`). A failure is
//! reported with its stage and errno and nothing runs. The evidence
//! records a
//! [`ConfinementReport`]: the ABI, the handled rights, the network mode,
//! the scopes, the seccomp denials and what was not enforced.
//!
//! `read-only` grants read and execute beneath `/`; a denied path is carved
//! out by granting each of its siblings instead, level by level down from
//! `/` (Landlock rules only add rights), so the directories on the way to a
//! denied path cannot be listed.
//!
//! # Caveats
//!
//! - Linux x86-64 and the cgroup tier only (the `clone3` spawner): any
//!   other path refuses a confinement with
//!   [`ConfineError::SpawnerUnavailable`] rather than run unconfined.
//! - Read grants are taken at launch: an entry created later directly in
//!   a directory on the way to a denied path is not readable.
//! - A hard link or a bind mount of a denied file elsewhere is readable
//!   there (Landlock follows the path hierarchy, not the inode's name).
//! - Network off does not stop a connection to a *pathname* unix socket
//!   that proxies the network (Landlock ABI 9 can; this build handles up
//!   to [`TESTED_ABI`]); a 32-bit (`int 0x80`) system call kills the
//!   process (the filter checks the architecture).

pub use crate::policy::hosts;
mod plan;
mod spec;
pub(crate) mod view;

/// The port of custodian's filtering proxy on the loopback of a sandbox
/// whose network is [`Network::Allow`] (`127.0.0.1:28080`): each sandbox
/// has a network namespace of its own, so the port is the same in every
/// one, and taken by nothing else there.
pub const PROXY_PORT: u16 = 28080;

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub(crate) mod build;
pub mod peer;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod sys;

/// Off x86-64 Linux nothing is ever built: the launcher refuses first.
#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
pub(crate) mod build {
    #[cfg(target_os = "linux")]
    use std::os::fd::BorrowedFd;
    use std::path::Path;

    /// Never constructed here.
    #[derive(Debug)]
    pub(crate) enum Prepared {}

    /// Never constructed here.
    #[derive(Debug)]
    pub(crate) enum PrivateTmp {}

    impl Prepared {
        #[cfg(target_os = "linux")]
        pub(crate) fn ruleset(&self) -> Option<BorrowedFd<'_>> {
            match *self {}
        }
        #[cfg(target_os = "linux")]
        pub(crate) fn program(&self) -> Option<&'static [seccompiler::sock_filter]> {
            match *self {}
        }
        pub(crate) fn tmp_dir(&self) -> Option<&Path> {
            match *self {}
        }
        pub(crate) fn after_spawn(self) -> (super::ConfinementReport, Option<PrivateTmp>) {
            match self {}
        }
    }
}

use std::io;
use std::path::PathBuf;

pub use plan::{ConfinementReport, Feature, NotEnforced, TESTED_ABI, Unsupported};
pub(crate) use plan::{Plan, plan, plan_isolated};
pub use spec::{Confinement, Enforcement, FsMode, InvalidConfinement, MAX_PATHS, Network};
pub use view::{DEFAULT_PROTECT, INTERNAL_DIR, IsolationReport};

/// The step of applying a confinement in the child that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApplyStep {
    /// `prctl(PR_SET_NO_NEW_PRIVS, 1)`.
    NoNewPrivs,
    /// `landlock_restrict_self(fd, 0)`.
    Landlock,
    /// `seccomp(SECCOMP_SET_MODE_FILTER, 0, prog)`.
    Seccomp,
    /// Writing the user namespace's `uid_map`, `setgroups` or `gid_map`.
    IdMap,
    /// `setsid()` or `prctl(PR_SET_PDEATHSIG)`.
    Session,
    /// A step of the composed view (a mount, a bind, a mask).
    View,
    /// Bringing the private network namespace's loopback up.
    Loopback,
    /// Opening the proxy's listener inside the sandbox's network namespace
    /// and handing it out ([`Network::Allow`]).
    ProxyListener,
    /// A Landlock rule for the view's own `/tmp` or `/dev`.
    LandlockRule,
    /// Dropping every capability set.
    Capabilities,
    /// Forking the program from the sandbox's init.
    Fork,
}

/// Why a confined launch was refused. Nothing was launched.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfineError {
    /// The spec breaks a lexical rule.
    #[error(transparent)]
    Invalid(#[from] InvalidConfinement),
    /// Strict enforcement, and the kernel lacks a feature the spec needs.
    #[error("confinement unsupported: {0}")]
    Unsupported(#[from] Unsupported),
    /// The launch would not go through the `clone3` spawner (another
    /// architecture, or no cgroup tier), which is the only one that
    /// applies a confinement.
    #[error("confinement needs the clone3 spawner: {reason}")]
    SpawnerUnavailable {
        /// A safe code: `not_x86_64_linux`, `no_cgroup_tier`.
        reason: &'static str,
    },
    /// A grant path cannot be opened.
    #[error("confinement path {path:?}: {source}")]
    Path {
        /// The path.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A denied path lies inside a readable grant (the workspace, an
    /// `allow_read` or `allow_write`), which would re-grant it.
    #[error("deny_read {deny:?} lies inside the grant {grant:?}")]
    DenyInsideGrant {
        /// The denied path.
        deny: PathBuf,
        /// The grant containing it.
        grant: PathBuf,
    },
    /// A path of the composed view cannot be used: a `protect`, `hide` or
    /// `deny_read` path that is a symlink, a `protect` or `hide` path that
    /// is not normal, a grant beneath the view's own `/dev` or `/proc`.
    #[error("confinement view path {path:?}: {reason}")]
    ViewPath {
        /// The path.
        path: PathBuf,
        /// A safe code: `symlink`, `not_normal`, `beneath_dev_or_proc`.
        reason: &'static str,
    },
    /// Strict enforcement, and the namespace sandbox cannot be set up here
    /// (user namespaces disabled by a sysctl or a security module, or no
    /// clone3 spawner).
    #[error("isolation unavailable: {reason}")]
    IsolationUnavailable {
        /// A safe code: `user_namespaces_unavailable`,
        /// `network_namespace_unavailable`, `not_x86_64_linux`.
        reason: &'static str,
    },
    /// Building the Landlock ruleset, the seccomp program or the private
    /// temporary directory failed.
    #[error("building the confinement failed at {step}: {message}")]
    Build {
        /// `landlock`, `seccomp`, `private_tmp` or `network_proxy`.
        step: &'static str,
        /// The library's message (no environment content).
        message: String,
    },
    /// The child could not apply the confinement; it exited before
    /// `execve`.
    #[error("applying the confinement failed at {step:?} (errno {errno})")]
    Apply {
        /// The step.
        step: ApplyStep,
        /// Its errno.
        errno: i32,
    },
}

impl ConfineError {
    /// A short, stable code for the error.
    pub fn code(&self) -> &'static str {
        match self {
            ConfineError::Invalid(_) => "confinement_invalid",
            ConfineError::Unsupported(_) => "confinement_unsupported",
            ConfineError::SpawnerUnavailable { .. } => "confinement_spawner_unavailable",
            ConfineError::Path { .. } => "confinement_path",
            ConfineError::DenyInsideGrant { .. } => "confinement_deny_inside_grant",
            ConfineError::Build { .. } => "confinement_build_failed",
            ConfineError::Apply { .. } => "confinement_apply_failed",
            ConfineError::ViewPath { .. } => "confinement_view_path",
            ConfineError::IsolationUnavailable { .. } => "confinement_isolation_unavailable",
        }
    }
}

/// The running kernel's Landlock ABI (0 where Landlock is not built in or
/// not enabled), probed once.
pub fn landlock_abi() -> u32 {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        static ABI: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
        *ABI.get_or_init(sys::landlock_abi)
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    0
}

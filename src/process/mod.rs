//! The governed process launcher (`process.run`).
//!
//! # Theory of operation
//!
//! An [`Invocation`] (validated: executable, argv list, workspace-relative
//! cwd, environment overlay, timeout, output budgets, tunables) is handed to
//! [`launch`]. custodian resolves the executable against the child's
//! effective `PATH`, builds the child's environment from a minimal baseline
//! plus the overlay, and spawns it without a shell, with `stdin` on
//! `/dev/null`, separate `stdout`/`stderr` pipes, as the leader of a new
//! process group.
//!
//! A driver task then executes the decisions of the pure
//! [`crate::machine::process`] machine: on Linux it observes the root's
//! exit through a pidfd **without reaping it**, so the group id stays
//! pinned and `SIGKILL` can still reach a descendant after the root exited;
//! it signals the group (`TERM`, grace, `KILL`), waits at most the drain
//! bound for pipes a descendant holds open, closes the streams at the hard
//! deadline, probes `/proc` for live group members, and reaps the root
//! exactly once, at settlement. The outcome is one bounded [`Evidence`]
//! object; [`Running::settled`] hands the same one to every waiter.
//!
//! Tiers (recorded in the evidence, chosen with
//! [`LaunchOptions::containment`](crate::contain::Containment)): `cgroup`,
//! the default where a cgroup v2 can be created — the root starts inside a
//! fresh cgroup of its own (`clone3` with `CLONE_INTO_CGROUP`), `KILL` is
//! `cgroup.kill`, settlement waits on `cgroup.events` (inotify), and the
//! cgroup is removed afterwards; `pinned_process_group` on Linux ≥ 5.3;
//! `process_group` where no pidfd can be opened (signals only while the root
//! has not exited, the seed's rule); `direct_child` on Windows (descendants
//! `unsupported`); and, opted into by the embedding process with
//! [`enable_subreaper`], `subreaper`: a pinned group plus every descendant
//! re-parented to this process, which is signalled with the group, counted
//! by the probe and reaped.
//!
//! # Caveats
//!
//! Without a confinement ([`crate::confine`], applied by the cgroup tier's
//! spawner) this is a governed launcher, not a sandbox. Outside the cgroup
//! tier a
//! descendant that calls `setsid` and closes its stdio leaves the group
//! unseen, so the group tiers never say `terminated` (see
//! [`evidence::DescendantVerdict`] for what it means in each tier); only the cgroup
//! tier and the subreaper tier can observe that no descendant is left. In
//! the subreaper tier an escapee whose parent is still alive (and itself
//! escaped) is only seen once that parent exits.

pub mod capture;
#[cfg(target_os = "linux")]
mod cgroup_root;
mod containment;
mod driver;
pub(crate) mod effects;
pub mod env;
pub mod evidence;
#[doc(hidden)]
pub mod fault;
pub mod governed;
pub mod invocation;
mod launch;
pub mod proxy;
pub mod session;
#[cfg(target_os = "linux")]
pub(crate) mod spawn;
pub(crate) mod sys;

pub use effects::refused_group_signals;
pub use evidence::Evidence;
pub use invocation::{Invocation, InvocationSpec};
pub(crate) use launch::SharedNetwork;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub(crate) use launch::standalone_init;
pub use launch::{
    ExpectedLaunches, LaunchOptions, ProcessError, Running, enable_subreaper, launch,
    prepare_isolation, run,
};
pub use proxy::{NetworkAccess, NetworkProxy, ProxyConfig};

//! The driver's stand-ins where the platform lacks what Linux gives it
//! (pidfds, a `/proc` of children, process groups on Windows).
//!
//! Compiled only there: a mutation pass over `driver.rs` on Linux meets
//! none of their mutants, which no test on Linux could reach.

use super::{PidFd, Tier};
use crate::process::sys;

/// No pidfd: the root is not pinned, so group signals stop at its exit;
/// Windows has no process group, only the direct child.
pub(super) fn pin_root(_runtime: &tokio::runtime::Handle, _pid: u32) -> (Option<PidFd>, Tier) {
    (
        None,
        if cfg!(windows) {
            Tier::DirectChild
        } else {
            Tier::Group
        },
    )
}

/// No subreaper tier: nothing is adopted.
pub(super) fn adopted_pass() -> Option<sys::Children> {
    None
}

/// Without process groups, a signal is the direct child's kill: delivered,
/// or no such process (gone, or already reaped).
#[cfg(not(unix))]
pub(super) fn start_kill(child: Option<&mut tokio::process::Child>) -> sys::Delivery {
    match child.map(|c| c.start_kill()) {
        Some(Ok(())) => sys::Delivery::Delivered,
        _ => sys::Delivery::NoSuchProcess,
    }
}

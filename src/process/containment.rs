//! Choosing the containment tier of one launch from what the embedder
//! asked for and what this host allows.

use std::sync::atomic::Ordering;

use super::launch::{ProcessError, SUBREAPER};
use crate::contain::{Containment, Unavailable};

/// How one launch will be contained.
pub(crate) enum Plan {
    /// In a fresh cgroup of its own.
    #[cfg(target_os = "linux")]
    Cgroup(crate::contain::Cgroup),
    /// In its process group (pinned where a pidfd can be opened), with
    /// adopted descendants counted when `subreaper` is set.
    Group {
        /// The subreaper tier.
        subreaper: bool,
    },
}

/// The plan, what was asked for, and why `auto` fell back.
pub(crate) struct Selected {
    pub(crate) plan: Plan,
    pub(crate) requested: Containment,
    pub(crate) fallback: Option<Unavailable>,
}

impl Selected {
    /// The cgroup tier in `cgroup`, made ahead for this launch (with the
    /// sandbox prepared in it).
    #[cfg(target_os = "linux")]
    pub(crate) fn in_cgroup(requested: Containment, cgroup: crate::contain::Cgroup) -> Selected {
        Selected {
            plan: Plan::Cgroup(cgroup),
            requested,
            fallback: None,
        }
    }

    /// The group plan `auto` falls back to, and why.
    pub(crate) fn fallback(requested: Containment, why: Unavailable) -> Selected {
        Selected {
            plan: Plan::Group {
                subreaper: SUBREAPER.load(Ordering::SeqCst),
            },
            requested,
            fallback: Some(why),
        }
    }
}

/// A fresh cgroup for one process (beneath `parent` if given), or why
/// there is none.
#[cfg(target_os = "linux")]
pub(crate) fn cgroup(parent: Option<&crate::contain::Cgroup>) -> Result<Plan, Unavailable> {
    use crate::contain::CgroupError;
    if !super::spawn::supported() {
        return Err(Unavailable::Clone3Unsupported);
    }
    match parent {
        None => crate::contain::process_cgroup().map(Plan::Cgroup),
        Some(parent) => parent
            .process_child()
            .map(Plan::Cgroup)
            .map_err(|e| match e {
                CgroupError::Io { source, .. }
                    if source.raw_os_error().is_some_and(|n| {
                        use rustix::io::Errno;
                        [Errno::ACCESS, Errno::PERM, Errno::ROFS]
                            .contains(&Errno::from_raw_os_error(n))
                    }) =>
                {
                    Unavailable::NotDelegated
                }
                _ => Unavailable::SetupFailed,
            }),
    }
}

#[cfg(not(target_os = "linux"))]
fn cgroup() -> Result<Plan, Unavailable> {
    Err(Unavailable::NotLinux)
}

/// Picks the tier for `requested`. `auto` never fails: it falls back to the
/// group (or subreaper) tier and says why.
///
/// # Errors
///
/// [`ProcessError::ContainmentUnavailable`] when an explicit `cgroup` or
/// `subreaper` cannot be had. Nothing was created.
pub(crate) fn select(
    requested: Containment,
    #[cfg(target_os = "linux")] parent: Option<&crate::contain::Cgroup>,
) -> Result<Selected, ProcessError> {
    #[cfg(target_os = "linux")]
    let cgroup = || cgroup(parent);
    let unavailable = |reason| ProcessError::ContainmentUnavailable { requested, reason };
    let plan = match requested {
        Containment::Auto => match cgroup() {
            Ok(plan) => plan,
            Err(why) => return Ok(Selected::fallback(requested, why)),
        },
        Containment::Cgroup => cgroup().map_err(unavailable)?,
        Containment::Group => Plan::Group { subreaper: false },
        Containment::Subreaper => {
            if !SUBREAPER.load(Ordering::SeqCst) {
                return Err(unavailable(Unavailable::NotSubreaper));
            }
            Plan::Group { subreaper: true }
        }
    };
    Ok(Selected {
        plan,
        requested,
        fallback: None,
    })
}

//! Deciding what a confinement enforces on a kernel with a given Landlock
//! ABI: a pure function of the spec and the ABI number, so every ABI can
//! be checked without that kernel.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::spec::{Confinement, Enforcement, FsMode, Network};

/// The newest Landlock ABI custodian asks for: rights of a newer kernel
/// are not handled until they have been tested here.
pub const TESTED_ABI: u32 = 7;

/// A part of a confinement that needs a kernel feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Feature {
    /// Filesystem access control (Landlock ABI ≥ 1).
    Filesystem,
    /// Truncation counted as a write (ABI ≥ 3); without it `truncate(2)`
    /// of a readable file is allowed.
    FsTruncate,
    /// Device `ioctl`s counted as a write (ABI ≥ 5).
    FsIoctlDev,
    /// TCP bind and connect denied by Landlock (ABI ≥ 4). seccomp denies
    /// creating sockets in any case; this also covers a TCP socket handed
    /// in over a unix socket.
    NetworkTcp,
    /// Signals scoped to the sandbox (ABI ≥ 6).
    ScopeSignals,
    /// Abstract unix sockets scoped to the sandbox (ABI ≥ 6).
    ScopeAbstractUnixSockets,
    /// The spec's `min_abi`.
    MinAbi,
    /// The namespace sandbox (user, pid, mount, ipc, uts, net namespaces,
    /// no capabilities, the composed view); needs unprivileged user
    /// namespaces, not a Landlock ABI.
    Isolation,
    /// Network `allow`'s proxy, which needs the sandbox's own network
    /// namespace: without isolation the network is off altogether (no
    /// allowed host either).
    NetworkAllowList,
}

impl Feature {
    /// The Landlock ABI the feature needs (`min_abi` for [`Feature::MinAbi`]).
    fn needs(self, spec: &Confinement) -> u32 {
        match self {
            Feature::Filesystem => 1,
            Feature::FsTruncate => 3,
            Feature::NetworkTcp => 4,
            Feature::FsIoctlDev => 5,
            Feature::ScopeSignals | Feature::ScopeAbstractUnixSockets => 6,
            Feature::MinAbi => spec.min_abi.unwrap_or(0),
            Feature::Isolation | Feature::NetworkAllowList => 0,
        }
    }
}

/// A part that was not enforced (best-effort only) and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct NotEnforced {
    /// What was not enforced.
    pub feature: Feature,
    /// Why: the Landlock ABI the feature needs (0 for
    /// [`Feature::Isolation`], which needs user namespaces).
    pub needs_abi: u32,
    /// Why, when it is not the Landlock ABI: a safe code such as
    /// `user_namespaces_unavailable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What a launch enforced: recorded in the evidence (`confinement`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ConfinementReport {
    /// The filesystem mode asked for.
    pub filesystem: FsMode,
    /// The network mode asked for.
    pub network: Network,
    /// Strict or best-effort.
    pub enforcement: Enforcement,
    /// The running kernel's Landlock ABI (0: no Landlock).
    pub landlock_abi: u32,
    /// The ABI whose rights were handled (the kernel's, at most
    /// [`TESTED_ABI`]).
    pub landlock_abi_used: u32,
    /// The filesystem rights Landlock handled (everything not granted by
    /// a rule is denied).
    pub handled_access_fs: Vec<String>,
    /// The network rights Landlock handled.
    pub handled_access_net: Vec<String>,
    /// What Landlock scoped to the sandbox.
    pub scoped: Vec<String>,
    /// What the seccomp filter denies (`EACCES`).
    pub seccomp: Vec<String>,
    /// `no_new_privs` was set (always, when anything is enforced).
    pub no_new_privs: bool,
    /// The process got a private temporary directory as its `TMPDIR`.
    pub private_tmp: bool,
    /// The workspace was writable.
    pub workspace_writable: bool,
    /// Extra readable hierarchies.
    pub allow_read: Vec<PathBuf>,
    /// Extra writable hierarchies.
    pub allow_write: Vec<PathBuf>,
    /// Hierarchies that could not be read.
    pub deny_read: Vec<PathBuf>,
    /// What was asked for and not enforced (best-effort only).
    pub not_enforced: Vec<NotEnforced>,
    /// The namespace sandbox, when the launch was isolated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<super::view::IsolationReport>,
}

/// What to build for one launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The ABI whose rights to handle.
    pub(crate) abi: u32,
    /// Build a Landlock filesystem ruleset.
    pub(crate) fs: bool,
    /// Handle Landlock's TCP rights (none granted).
    pub(crate) net_tcp: bool,
    /// Scope signals and abstract unix sockets.
    pub(crate) scope: bool,
    /// Install the network seccomp filter (or, isolated, the isolation
    /// filter).
    pub(crate) seccomp: bool,
    /// Isolate: new namespaces, no capabilities, the composed view.
    pub(crate) isolate: bool,
    /// The evidence.
    pub(crate) report: ConfinementReport,
}

impl Plan {
    /// Whether a Landlock ruleset is needed at all.
    pub(crate) fn landlock(&self) -> bool {
        self.fs || self.net_tcp || self.scope
    }
}

/// The kernel cannot enforce a strict confinement.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{feature:?} needs Landlock ABI {needs_abi}; the kernel has {kernel_abi}")]
pub struct Unsupported {
    /// The first feature missing.
    pub feature: Feature,
    /// The ABI it needs.
    pub needs_abi: u32,
    /// The kernel's ABI (0: no Landlock).
    pub kernel_abi: u32,
}

const FS_RIGHTS: [(&str, u32); 16] = [
    ("execute", 1),
    ("write_file", 1),
    ("read_file", 1),
    ("read_dir", 1),
    ("remove_dir", 1),
    ("remove_file", 1),
    ("make_char", 1),
    ("make_dir", 1),
    ("make_reg", 1),
    ("make_sock", 1),
    ("make_fifo", 1),
    ("make_block", 1),
    ("make_sym", 1),
    ("refer", 2),
    ("truncate", 3),
    ("ioctl_dev", 5),
];

fn names(table: &[(&str, u32)], abi: u32) -> Vec<String> {
    table
        .iter()
        .filter(|(_, v)| *v <= abi)
        .map(|(n, _)| (*n).to_owned())
        .collect()
}

/// What `spec` enforces on a kernel with Landlock ABI `kernel_abi` (0: no
/// Landlock). `None` for a spec that confines nothing.
///
/// # Errors
///
/// [`Unsupported`] for a strict spec that needs a feature the kernel lacks.
pub(crate) fn plan(spec: &Confinement, kernel_abi: u32) -> Result<Option<Plan>, Unsupported> {
    plan_landlock(spec, kernel_abi)
}

/// [`plan`] for an isolated launch: the namespaces do what Landlock's
/// network rights and the socket filter did (a private network namespace
/// with its own loopback: sockets of every family work inside, nothing
/// outside is reachable), so neither is used; the isolation filter denies
/// `io_uring` entirely; `/tmp` and `/dev/shm` are private.
///
/// # Errors
///
/// As [`plan`].
pub(crate) fn plan_isolated(
    spec: &Confinement,
    kernel_abi: u32,
) -> Result<Option<Plan>, Unsupported> {
    let Some(mut plan) = plan_landlock(spec, kernel_abi)? else {
        return Ok(None);
    };
    plan.isolate = true;
    plan.net_tcp = false;
    plan.seccomp = true;
    plan.report
        .not_enforced
        .retain(|n| n.feature != Feature::NetworkTcp);
    plan.report.handled_access_net = vec![];
    plan.report.seccomp = ["io_uring_setup", "io_uring_enter", "io_uring_register"]
        .map(String::from)
        .to_vec();
    plan.report.private_tmp = true;
    Ok(Some(plan))
}

/// The Landlock-only plan (no namespaces): what [`plan`] returns, and what
/// a best-effort launch falls back to where user namespaces cannot be had.
fn plan_landlock(spec: &Confinement, kernel_abi: u32) -> Result<Option<Plan>, Unsupported> {
    if spec.is_none() {
        return Ok(None);
    }
    let abi = kernel_abi.min(TESTED_ABI);
    let fs = spec.fs != FsMode::None;
    let net_off = spec.network != Network::On;
    let mut wanted = Vec::new();
    if fs {
        wanted.extend([
            Feature::Filesystem,
            Feature::FsTruncate,
            Feature::FsIoctlDev,
        ]);
    }
    if net_off {
        wanted.push(Feature::NetworkTcp);
    }
    if spec.scoped {
        wanted.extend([Feature::ScopeSignals, Feature::ScopeAbstractUnixSockets]);
    }
    if spec.min_abi.is_some() {
        wanted.push(Feature::MinAbi);
    }
    let mut not_enforced = Vec::new();
    for feature in wanted {
        let needs_abi = feature.needs(spec);
        if kernel_abi < needs_abi {
            if spec.enforcement == Enforcement::Strict {
                return Err(Unsupported {
                    feature,
                    needs_abi,
                    kernel_abi,
                });
            }
            not_enforced.push(NotEnforced {
                feature,
                needs_abi,
                reason: None,
            });
        }
    }
    let fs = fs && abi >= 1;
    let net_tcp = net_off && abi >= 4;
    let scope = spec.scoped && abi >= 6;
    let report = ConfinementReport {
        filesystem: spec.fs,
        network: spec.network,
        enforcement: spec.enforcement,
        landlock_abi: kernel_abi,
        landlock_abi_used: abi,
        handled_access_fs: if fs { names(&FS_RIGHTS, abi) } else { vec![] },
        handled_access_net: if net_tcp {
            vec!["bind_tcp".into(), "connect_tcp".into()]
        } else {
            vec![]
        },
        scoped: if scope {
            vec!["abstract_unix_socket".into(), "signal".into()]
        } else {
            vec![]
        },
        seccomp: if net_off {
            ["socket_non_unix", "socketpair_non_unix", "io_uring_setup"]
                .map(String::from)
                .to_vec()
        } else {
            vec![]
        },
        no_new_privs: true,
        private_tmp: fs,
        workspace_writable: spec.fs == FsMode::WorkspaceWrite && fs,
        allow_read: spec.allow_read.clone(),
        allow_write: spec.allow_write.clone(),
        deny_read: spec.deny_read.clone(),
        not_enforced,
        isolation: None,
    };
    Ok(Some(Plan {
        abi,
        fs,
        net_tcp,
        scope,
        seccomp: net_off,
        isolate: false,
        report,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_plans_nothing() {
        assert_eq!(plan(&Confinement::none(), 7), Ok(None));
    }

    #[test]
    fn abi_7_enforces_everything() {
        let p = plan(&Confinement::read_only(), 7).unwrap().unwrap();
        assert!(p.fs && p.net_tcp && p.scope && p.seccomp);
        assert!(p.report.not_enforced.is_empty());
        assert!(p.report.handled_access_fs.contains(&"ioctl_dev".to_owned()));
        assert_eq!(p.report.scoped.len(), 2);
    }

    #[test]
    fn a_newer_kernel_is_handled_at_the_tested_abi() {
        let p = plan(&Confinement::read_only(), 9).unwrap().unwrap();
        assert_eq!((p.abi, p.report.landlock_abi), (TESTED_ABI, 9));
    }

    #[test]
    fn strict_refuses_the_first_missing_feature() {
        let e = plan(&Confinement::read_only(), 5).unwrap_err();
        assert_eq!(
            (e.feature, e.needs_abi, e.kernel_abi),
            (Feature::ScopeSignals, 6, 5)
        );
        let e = plan(&Confinement::read_only(), 3).unwrap_err();
        assert_eq!(e.feature, Feature::FsIoctlDev);
        let e = plan(&Confinement::workspace_write(), 0).unwrap_err();
        assert_eq!((e.feature, e.needs_abi), (Feature::Filesystem, 1));
        let mut spec = Confinement::read_only();
        spec.min_abi = Some(8);
        let e = plan(&spec, 7).unwrap_err();
        assert_eq!(
            (e.feature, e.needs_abi, e.kernel_abi),
            (Feature::MinAbi, 8, 7)
        );
    }

    #[test]
    fn best_effort_launches_and_lists_what_is_missing() {
        let spec = Confinement::read_only().with_enforcement(Enforcement::BestEffort);
        let p = plan(&spec, 3).unwrap().unwrap();
        assert!(p.fs && !p.net_tcp && !p.scope && p.seccomp);
        let missing: Vec<_> = p.report.not_enforced.iter().map(|n| n.feature).collect();
        assert_eq!(
            missing,
            [
                Feature::FsIoctlDev,
                Feature::NetworkTcp,
                Feature::ScopeSignals,
                Feature::ScopeAbstractUnixSockets
            ]
        );
        assert!(!p.report.handled_access_fs.contains(&"ioctl_dev".to_owned()));
        let p = plan(&spec, 0).unwrap().unwrap();
        assert!(!p.landlock() && p.seccomp);
        assert_eq!(p.report.not_enforced[0].feature, Feature::Filesystem);
    }

    #[test]
    fn every_abi_from_0_to_9_refuses_or_reports_exactly_the_missing_features() {
        let thresholds = [
            (Feature::Filesystem, 1),
            (Feature::FsTruncate, 3),
            (Feature::FsIoctlDev, 5),
            (Feature::NetworkTcp, 4),
            (Feature::ScopeSignals, 6),
            (Feature::ScopeAbstractUnixSockets, 6),
        ];
        for abi in 0..=9 {
            let missing: Vec<Feature> = thresholds
                .iter()
                .filter(|(_, needs)| abi < *needs)
                .map(|(f, _)| *f)
                .collect();
            let strict = plan(&Confinement::workspace_write(), abi);
            assert_eq!(strict.is_ok(), missing.is_empty(), "abi {abi}");
            if let Err(e) = strict {
                assert_eq!(e.feature, missing[0], "abi {abi}");
            }
            let spec = Confinement::workspace_write().with_enforcement(Enforcement::BestEffort);
            let p = plan(&spec, abi).unwrap().unwrap();
            let reported: Vec<Feature> = p.report.not_enforced.iter().map(|n| n.feature).collect();
            assert_eq!(reported, missing, "abi {abi}");
            assert_eq!(p.fs, abi >= 1, "abi {abi}");
            assert_eq!(p.net_tcp, abi >= 4, "abi {abi}");
            assert_eq!(p.scope, abi >= 6, "abi {abi}");
            assert!(p.seccomp && p.report.no_new_privs);
            assert_eq!(p.abi, abi.min(TESTED_ABI));
        }
    }
}

//! The confinement spec: what a governed process may touch while it runs.
//! Pure data and lexical validation only (no I/O), so a policy can name and
//! compare confinements.

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The most paths accepted in each of the grant and deny lists.
pub const MAX_PATHS: usize = 64;

pub use crate::policy::FsMode;

impl std::str::FromStr for FsMode {
    type Err = InvalidConfinement;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(FsMode::None),
            "read-only" => Ok(FsMode::ReadOnly),
            "workspace-write" => Ok(FsMode::WorkspaceWrite),
            _ => Err(InvalidConfinement::UnknownMode),
        }
    }
}

/// Whether the process may use the network.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Network {
    /// No network restriction.
    #[default]
    On,
    /// No network beyond the sandbox: isolated, a private network
    /// namespace with its own loopback (servers and clients on 127.0.0.1
    /// work inside, nothing outside is reachable); without isolation
    /// (best-effort), no socket other than `AF_UNIX` (seccomp) and no TCP
    /// bind or connect (Landlock ABI ≥ 4).
    Off,
    /// `Off`, plus custodian's filtering proxy reachable inside at
    /// `127.0.0.1:`[`PROXY_PORT`](crate::confine::PROXY_PORT): HTTP
    /// forwarding and `CONNECT` to the hosts [`Confinement::allow_hosts`]
    /// names, a `403` naming the refusal for any other. The child's
    /// environment names the proxy (`HTTP_PROXY`, `HTTPS_PROXY`,
    /// `ALL_PROXY`, their lower-case forms, `NO_PROXY` for loopback).
    /// Needs isolation: without it the network is off.
    Allow,
}

impl Network {
    /// The name used on the command line, the wire and in evidence.
    pub fn as_str(self) -> &'static str {
        match self {
            Network::On => "on",
            Network::Off => "off",
            Network::Allow => "allow",
        }
    }
}

impl std::str::FromStr for Network {
    type Err = InvalidConfinement;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "on" => Ok(Network::On),
            "off" => Ok(Network::Off),
            "allow" => Ok(Network::Allow),
            _ => Err(InvalidConfinement::UnknownNetwork),
        }
    }
}

/// What to do when the kernel cannot enforce all of a confinement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Enforcement {
    /// Refuse to launch (a typed error); nothing is started.
    #[default]
    Strict,
    /// Launch with what the kernel can enforce; the evidence lists each
    /// part that was not enforced, with the reason.
    BestEffort,
}

impl Enforcement {
    /// The name used on the wire and in evidence.
    pub fn as_str(self) -> &'static str {
        match self {
            Enforcement::Strict => "strict",
            Enforcement::BestEffort => "best-effort",
        }
    }
}

/// A confinement: applied to the process (and everything it starts) after
/// it is in its cgroup and before `execve`, and never lifted.
///
/// Build one with [`Confinement::read_only`], [`Confinement::workspace_write`]
/// or [`Confinement::none`] and the `with_*` helpers. Paths must be
/// absolute; [`Confinement::validate`] checks the rest lexically, the
/// launcher checks them against the filesystem.
///
/// Deserialized (the wire), an absent `network` or `scoped` takes the
/// default of `fs`, as [`Confinement::for_mode`] gives it: a confined mode
/// means the network off and scoping on unless said otherwise.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "RawConfinement")]
#[non_exhaustive]
pub struct Confinement {
    /// The filesystem mode.
    pub fs: FsMode,
    /// The network mode.
    pub network: Network,
    /// Signals and abstract unix sockets scoped to the sandbox (Landlock
    /// ABI ≥ 6): the process cannot signal, or connect to an abstract unix
    /// socket of, a process outside its Landlock domain.
    pub scoped: bool,
    /// Extra hierarchies readable (meaningful beneath a denied path).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_read: Vec<PathBuf>,
    /// Extra hierarchies readable and writable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_write: Vec<PathBuf>,
    /// Hierarchies that may not be read (nor listed), e.g. `~/.ssh`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny_read: Vec<PathBuf>,
    /// Strict (default) or best-effort.
    #[serde(default)]
    pub enforcement: Enforcement,
    /// Refuse (strict) or report (best-effort) a kernel whose Landlock ABI
    /// is below this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_abi: Option<u32>,
    /// Paths kept read-only inside a writable tree (relative paths are
    /// beneath the workspace), on top of `.git/hooks` and `.git/config`,
    /// which every writable workspace protects. Isolation only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protect: Vec<PathBuf>,
    /// Paths masked (an empty read-only directory, or an empty file) in the
    /// view (relative paths are beneath the workspace), on top of
    /// custodian's own `.custodian/`, which every confined mode masks.
    /// Isolation only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hide: Vec<PathBuf>,
    /// The hosts a [`Network::Allow`] process may reach through the proxy
    /// (see [`crate::confine::hosts`] for the patterns); empty for every
    /// other network mode.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_hosts: Vec<String>,
}

/// The wire form: `network` and `scoped` default by `fs`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfinement {
    #[serde(default)]
    fs: FsMode,
    #[serde(default)]
    network: Option<Network>,
    #[serde(default)]
    scoped: Option<bool>,
    #[serde(default)]
    allow_read: Vec<PathBuf>,
    #[serde(default)]
    allow_write: Vec<PathBuf>,
    #[serde(default)]
    deny_read: Vec<PathBuf>,
    #[serde(default)]
    enforcement: Enforcement,
    #[serde(default)]
    min_abi: Option<u32>,
    #[serde(default)]
    protect: Vec<PathBuf>,
    #[serde(default)]
    hide: Vec<PathBuf>,
    #[serde(default)]
    allow_hosts: Vec<String>,
}

impl From<RawConfinement> for Confinement {
    fn from(raw: RawConfinement) -> Self {
        let defaults = Confinement::for_mode(raw.fs);
        Confinement {
            fs: raw.fs,
            network: raw.network.unwrap_or(defaults.network),
            scoped: raw.scoped.unwrap_or(defaults.scoped),
            allow_read: raw.allow_read,
            allow_write: raw.allow_write,
            deny_read: raw.deny_read,
            enforcement: raw.enforcement,
            min_abi: raw.min_abi,
            protect: raw.protect,
            hide: raw.hide,
            allow_hosts: raw.allow_hosts,
        }
    }
}

/// Why a confinement spec was refused. Nothing was launched.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidConfinement {
    /// Not one of `none`, `read-only`, `workspace-write`.
    #[error("unknown confinement mode (expected none, read-only or workspace-write)")]
    UnknownMode,
    /// Not one of `on`, `off`, `allow`.
    #[error("unknown network mode (expected on, off or allow)")]
    UnknownNetwork,
    /// An `allow_hosts` pattern is malformed.
    #[error("allow_hosts pattern {pattern:?}: {reason}")]
    BadHostPattern {
        /// The pattern as given.
        pattern: String,
        /// Why.
        reason: super::hosts::HostPatternError,
    },
    /// More than [`MAX_HOSTS`](super::hosts::MAX_HOSTS) `allow_hosts`
    /// patterns.
    #[error("more than {} allow_hosts patterns", super::hosts::MAX_HOSTS)]
    TooManyHosts,
    /// `allow_hosts` with a network mode other than `allow`, or `allow`
    /// with no host (which would be `off`).
    #[error("allow_hosts goes with network allow, and network allow needs at least one host")]
    HostsWithoutAllow,
    /// A path is not absolute.
    #[error("{list} path {path:?} is not absolute")]
    NotAbsolute {
        /// `allow_read`, `allow_write` or `deny_read`.
        list: &'static str,
        /// The path.
        path: PathBuf,
    },
    /// A path has a `.` or `..` component (its meaning would depend on
    /// symlinks).
    #[error("{list} path {path:?} has a . or .. component")]
    NotNormal {
        /// `allow_read`, `allow_write` or `deny_read`.
        list: &'static str,
        /// The path.
        path: PathBuf,
    },
    /// `/` itself cannot be denied.
    #[error("deny_read of / would deny everything")]
    DenyRoot,
    /// More than [`MAX_PATHS`] entries in one list.
    #[error("more than {MAX_PATHS} {list} paths")]
    TooManyPaths {
        /// The list.
        list: &'static str,
    },
    /// Path grants or denies need a filesystem mode other than `none`.
    #[error("allow/deny paths need a filesystem mode (read-only or workspace-write)")]
    PathsWithoutFsMode,
}

impl Confinement {
    /// No confinement at all (what a launch without one gets).
    pub fn none() -> Self {
        Confinement::default()
    }

    /// `read-only`, network off, signals and abstract sockets scoped.
    pub fn read_only() -> Self {
        Confinement {
            fs: FsMode::ReadOnly,
            network: Network::Off,
            scoped: true,
            ..Confinement::default()
        }
    }

    /// `workspace-write`, network off, signals and abstract sockets scoped.
    pub fn workspace_write() -> Self {
        Confinement {
            fs: FsMode::WorkspaceWrite,
            ..Confinement::read_only()
        }
    }

    /// The defaults of `fs` (see the constructors).
    pub fn for_mode(fs: FsMode) -> Self {
        match fs {
            FsMode::None => Confinement::none(),
            FsMode::ReadOnly => Confinement::read_only(),
            FsMode::WorkspaceWrite => Confinement::workspace_write(),
        }
    }

    /// Replaces the network mode.
    #[must_use]
    pub fn with_network(mut self, network: Network) -> Self {
        self.network = network;
        self
    }

    /// [`Network::Allow`] with one more allowed host pattern (see
    /// [`crate::confine::hosts`]).
    #[must_use]
    pub fn with_allow_host(mut self, pattern: impl Into<String>) -> Self {
        self.network = Network::Allow;
        self.allow_hosts.push(pattern.into());
        self
    }

    /// The parsed allow-list ([`Network::Allow`]); empty for every other
    /// mode.
    ///
    /// # Errors
    ///
    /// [`InvalidConfinement::BadHostPattern`] for the first bad pattern.
    pub fn allow_list(&self) -> Result<super::hosts::AllowList, InvalidConfinement> {
        super::hosts::AllowList::parse(&self.allow_hosts)
            .map_err(|(pattern, reason)| InvalidConfinement::BadHostPattern { pattern, reason })
    }

    /// Adds a readable hierarchy.
    #[must_use]
    pub fn with_allow_read(mut self, path: impl Into<PathBuf>) -> Self {
        self.allow_read.push(path.into());
        self
    }

    /// Adds a readable and writable hierarchy.
    #[must_use]
    pub fn with_allow_write(mut self, path: impl Into<PathBuf>) -> Self {
        self.allow_write.push(path.into());
        self
    }

    /// Adds a hierarchy that may not be read.
    #[must_use]
    pub fn with_deny_read(mut self, path: impl Into<PathBuf>) -> Self {
        self.deny_read.push(path.into());
        self
    }

    /// Adds a path kept read-only inside a writable tree (relative: beneath
    /// the workspace).
    #[must_use]
    pub fn with_protect(mut self, path: impl Into<PathBuf>) -> Self {
        self.protect.push(path.into());
        self
    }

    /// Adds a path masked in the view (relative: beneath the workspace).
    #[must_use]
    pub fn with_hide(mut self, path: impl Into<PathBuf>) -> Self {
        self.hide.push(path.into());
        self
    }

    /// Replaces the enforcement.
    #[must_use]
    pub fn with_enforcement(mut self, enforcement: Enforcement) -> Self {
        self.enforcement = enforcement;
        self
    }

    /// Whether this confines nothing (no kernel mechanism is applied).
    pub fn is_none(&self) -> bool {
        self.fs == FsMode::None && self.network == Network::On && !self.scoped
    }

    /// The lexical rules: absolute, normal paths, at most [`MAX_PATHS`]
    /// per list, no deny of `/`, paths only with a filesystem mode.
    ///
    /// # Errors
    ///
    /// The first rule broken, see [`InvalidConfinement`].
    pub fn validate(&self) -> Result<(), InvalidConfinement> {
        let lists = [
            ("allow_read", &self.allow_read),
            ("allow_write", &self.allow_write),
            ("deny_read", &self.deny_read),
        ];
        for (list, paths) in lists {
            if paths.len() > MAX_PATHS {
                return Err(InvalidConfinement::TooManyPaths { list });
            }
            for p in paths {
                check_path(list, p)?;
            }
        }
        if self.deny_read.iter().any(|p| p == Path::new("/")) {
            return Err(InvalidConfinement::DenyRoot);
        }
        for (list, paths) in [("protect", &self.protect), ("hide", &self.hide)] {
            if paths.len() > MAX_PATHS {
                return Err(InvalidConfinement::TooManyPaths { list });
            }
            for p in paths {
                check_view_path(list, p)?;
            }
        }
        let any_paths = lists.iter().any(|(_, l)| !l.is_empty())
            || !self.protect.is_empty()
            || !self.hide.is_empty();
        if any_paths && self.fs == FsMode::None {
            return Err(InvalidConfinement::PathsWithoutFsMode);
        }
        if self.allow_hosts.len() > super::hosts::MAX_HOSTS {
            return Err(InvalidConfinement::TooManyHosts);
        }
        if (self.network == Network::Allow) == self.allow_hosts.is_empty() {
            return Err(InvalidConfinement::HostsWithoutAllow);
        }
        self.allow_list()?;
        Ok(())
    }
}

/// A `protect` or `hide` path: absolute, or relative to the workspace, and
/// in either case made of normal components only (so it cannot leave the
/// workspace when joined onto it).
fn check_view_path(list: &'static str, path: &Path) -> Result<(), InvalidConfinement> {
    if path.is_absolute() {
        return check_path(list, path);
    }
    let normal = !path.as_os_str().is_empty()
        && path.components().all(|c| matches!(c, Component::Normal(_)))
        && !path
            .as_os_str()
            .as_encoded_bytes()
            .split(|&b| b == b'/')
            .any(|c| c == b"." || c == b"..");
    if !normal {
        return Err(InvalidConfinement::NotNormal {
            list,
            path: path.to_owned(),
        });
    }
    Ok(())
}

fn check_path(list: &'static str, path: &Path) -> Result<(), InvalidConfinement> {
    if !path.is_absolute() {
        return Err(InvalidConfinement::NotAbsolute {
            list,
            path: path.to_owned(),
        });
    }
    let normal = path
        .components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    // `components()` drops a `.` in the middle; compare the text too.
    let dotted = path
        .as_os_str()
        .as_encoded_bytes()
        .split(|&b| b == b'/')
        .any(|c| c == b"." || c == b"..");
    if !normal || dotted {
        return Err(InvalidConfinement::NotNormal {
            list,
            path: path.to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_confine_and_none_does_not() {
        assert!(Confinement::none().is_none());
        assert!(!Confinement::read_only().is_none());
        assert_eq!(Confinement::read_only().network, Network::Off);
        assert_eq!(Confinement::workspace_write().fs, FsMode::WorkspaceWrite);
        assert!(!Confinement::none().with_network(Network::Off).is_none());
    }

    #[test]
    fn relative_and_dotted_paths_are_refused() {
        let rel = Confinement::read_only().with_deny_read("home/.ssh");
        assert!(matches!(
            rel.validate(),
            Err(InvalidConfinement::NotAbsolute {
                list: "deny_read",
                ..
            })
        ));
        for bad in ["/a/../b", "/a/./b", "/a/.."] {
            let c = Confinement::read_only().with_allow_write(bad);
            assert!(
                matches!(c.validate(), Err(InvalidConfinement::NotNormal { .. })),
                "{bad}"
            );
        }
        assert!(
            Confinement::read_only()
                .with_deny_read("/root/.ssh")
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn deny_root_and_paths_without_mode_are_refused() {
        let c = Confinement::read_only().with_deny_read("/");
        assert_eq!(c.validate(), Err(InvalidConfinement::DenyRoot));
        let c = Confinement::none().with_deny_read("/root/.ssh");
        assert_eq!(c.validate(), Err(InvalidConfinement::PathsWithoutFsMode));
        let mut c = Confinement::read_only();
        c.allow_read = (0..=MAX_PATHS)
            .map(|i| PathBuf::from(format!("/p{i}")))
            .collect();
        assert!(matches!(
            c.validate(),
            Err(InvalidConfinement::TooManyPaths { .. })
        ));
    }

    #[test]
    fn names_round_trip() {
        for m in [FsMode::None, FsMode::ReadOnly, FsMode::WorkspaceWrite] {
            assert_eq!(m.as_str().parse::<FsMode>(), Ok(m));
        }
        assert!("rw".parse::<FsMode>().is_err());
        assert_eq!("off".parse::<Network>(), Ok(Network::Off));
        let json = serde_json::to_string(&Confinement::read_only()).unwrap();
        let back: Confinement = serde_json::from_str(&json).unwrap();
        assert_eq!(back, Confinement::read_only());
    }

    #[test]
    fn absent_network_and_scoping_default_by_mode_on_the_wire() {
        let c: Confinement = serde_json::from_str(r#"{"fs":"read-only"}"#).unwrap();
        assert_eq!(c, Confinement::read_only());
        let c: Confinement =
            serde_json::from_str(r#"{"fs":"workspace-write","network":"on"}"#).unwrap();
        assert_eq!((c.network, c.scoped), (Network::On, true));
        let c: Confinement = serde_json::from_str("{}").unwrap();
        assert!(c.is_none());
        assert!(serde_json::from_str::<Confinement>(r#"{"fs":"none","extra":1}"#).is_err());
    }
}

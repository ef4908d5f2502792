//! Exposure: whether a tool is offered at all, before any decision about a
//! particular call.
//!
//! `process.run` is held to a stricter rule than its `advanced` tier: it is
//! exposed only in local state mode, only when `tools.allow` holds the exact
//! literal `process.run`, and, when an execution profile is active, only when
//! that profile lists the exact literal too. `default_mode = "allow"`,
//! wildcard selectors, group selectors, compatibility selectors and authoring
//! bundles expose other tools but never `process.run`. Deny selectors of any
//! form hide any tool.

use std::fmt;

use serde::Serialize;

use super::tool::{ALIASES, BASH, Group, PROCESS_RUN, TOOL_EXEC, ToolDescriptor, validate_tool_id};

/// Where the runtime keeps its state. `process.run` launches on the local
/// host, so it fails closed in shared state mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StateMode {
    /// State on the local host.
    Local,
    /// State shared across hosts.
    Shared,
}

/// What an `allow` list without the exact `process.run` falls back to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DefaultMode {
    /// Tools not selected by `allow` are hidden.
    #[default]
    Deny,
    /// Every tool not denied is exposed — except `process.run`.
    Allow,
}

/// Compatibility selectors kept for configurations written for older tool
/// catalogues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Compat {
    /// `compat:shell`: the shell-like tools (`bash`, `tool.exec`, and what
    /// older catalogues counted as shell, including `process.run`).
    Shell,
    /// `compat:all`: every tool.
    All,
}

/// Authoring bundles: named tool sets for common agent roles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Bundle {
    /// `bundle:authoring`: read, write, and run programs.
    Authoring,
    /// `bundle:readonly`: read files and fetch pages.
    Readonly,
}

impl Bundle {
    fn members(self) -> &'static [&'static str] {
        match self {
            Bundle::Authoring => &["fs.read", "fs.write", BASH, PROCESS_RUN],
            Bundle::Readonly => &["fs.read", "web.fetch"],
        }
    }
}

/// One entry of an `allow` or `deny` list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Selector {
    /// An exact tool ID (an alias is stored as its canonical ID).
    Exact(String),
    /// A tool-ID pattern with `*` wildcards.
    Wildcard(String),
    /// `group:NAME`.
    Group(Group),
    /// `compat:NAME`.
    Compat(Compat),
    /// `bundle:NAME`.
    Bundle(Bundle),
}

/// Why a selector was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize)]
#[serde(tag = "code", rename_all = "snake_case")]
#[non_exhaustive]
pub enum SelectorError {
    /// `group:`, `compat:` or `bundle:` with a name that does not exist.
    #[error("unknown {kind} name")]
    UnknownName {
        /// `group`, `compat` or `bundle`.
        kind: &'static str,
    },
    /// An unknown `KIND:` prefix.
    #[error("unknown selector kind (expected group:, compat: or bundle:)")]
    UnknownKind,
    /// Neither a well-formed tool ID nor a wildcard over tool-ID characters.
    #[error("not a tool ID, a wildcard over tool-ID characters, or a KIND:NAME selector")]
    Malformed,
}

impl Selector {
    /// Parses a selector.
    ///
    /// # Errors
    ///
    /// [`SelectorError`] when it names nothing.
    pub fn parse(text: &str) -> Result<Selector, SelectorError> {
        if let Some((kind, name)) = text.split_once(':') {
            return match kind {
                "group" => Group::from_name(name)
                    .map(Selector::Group)
                    .ok_or(SelectorError::UnknownName { kind: "group" }),
                "compat" => match name {
                    "shell" => Ok(Selector::Compat(Compat::Shell)),
                    "all" => Ok(Selector::Compat(Compat::All)),
                    _ => Err(SelectorError::UnknownName { kind: "compat" }),
                },
                "bundle" => match name {
                    "authoring" => Ok(Selector::Bundle(Bundle::Authoring)),
                    "readonly" => Ok(Selector::Bundle(Bundle::Readonly)),
                    _ => Err(SelectorError::UnknownName { kind: "bundle" }),
                },
                _ => Err(SelectorError::UnknownKind),
            };
        }
        if text.contains('*') {
            let ok = !text.is_empty()
                && text
                    .bytes()
                    .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' | b'*'));
            return if ok {
                Ok(Selector::Wildcard(text.to_owned()))
            } else {
                Err(SelectorError::Malformed)
            };
        }
        validate_tool_id(text).map_err(|_| SelectorError::Malformed)?;
        let canonical = ALIASES
            .iter()
            .find(|(alias, _)| *alias == text)
            .map_or(text, |(_, c)| c);
        Ok(Selector::Exact(canonical.to_owned()))
    }

    /// Whether this is the exact literal `process.run`, the only selector that
    /// can expose it.
    pub fn is_exact_process_run(&self) -> bool {
        matches!(self, Selector::Exact(id) if id == PROCESS_RUN)
    }

    /// Whether the selector covers the tool called as `requested` (which may
    /// be an alias) and resolved to `tool`.
    pub fn matches(&self, requested: &str, tool: &ToolDescriptor) -> bool {
        match self {
            Selector::Exact(id) => *id == tool.id,
            Selector::Wildcard(p) => glob(p, requested) || glob(p, &tool.id),
            Selector::Group(g) => *g == tool.group,
            Selector::Compat(Compat::All) => true,
            Selector::Compat(Compat::Shell) => {
                [BASH, TOOL_EXEC, PROCESS_RUN].contains(&tool.id.as_str())
            }
            Selector::Bundle(b) => b.members().contains(&tool.id.as_str()),
        }
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Selector::Exact(s) | Selector::Wildcard(s) => f.write_str(s),
            Selector::Group(g) => write!(f, "group:{}", g.name()),
            Selector::Compat(Compat::Shell) => f.write_str("compat:shell"),
            Selector::Compat(Compat::All) => f.write_str("compat:all"),
            Selector::Bundle(Bundle::Authoring) => f.write_str("bundle:authoring"),
            Selector::Bundle(Bundle::Readonly) => f.write_str("bundle:readonly"),
        }
    }
}

fn glob(pattern: &str, text: &str) -> bool {
    super::pattern::wildcard_match(pattern.as_bytes(), text.as_bytes())
}

/// The exposure part of the configuration (`[tools]`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ToolsConfig {
    /// What unselected tools fall back to.
    pub default_mode: DefaultMode,
    /// Selectors that expose tools.
    pub allow: Vec<Selector>,
    /// Selectors that hide tools; they win over `allow`.
    pub deny: Vec<Selector>,
    /// The active execution profile and its selectors, if any.
    pub profile: Option<(String, Vec<Selector>)>,
}

/// Why a tool is hidden.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "code", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Hidden {
    /// `process.run` in shared state mode.
    SharedStateMode,
    /// `tools.allow` lacks the exact literal `process.run`; broader selectors
    /// do not count.
    ProcessRunNotExactlyAllowed,
    /// No allow selector covers the tool and `default_mode` is `deny`.
    NotAllowed,
    /// A deny selector covers the tool.
    Denied {
        /// The deny selector, as written in canonical form.
        selector: String,
    },
    /// The active execution profile does not cover the tool (for
    /// `process.run`: does not list the exact ID).
    ProfileOmits {
        /// The active profile.
        profile: String,
    },
}

impl fmt::Display for Hidden {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Hidden::SharedStateMode => f.write_str("process.run is disabled in shared state mode"),
            Hidden::ProcessRunNotExactlyAllowed => {
                f.write_str("tools.allow does not list the exact literal \"process.run\"")
            }
            Hidden::NotAllowed => f.write_str("no tools.allow selector covers the tool"),
            Hidden::Denied { selector } => {
                write!(f, "tools.deny selector {selector:?} covers the tool")
            }
            Hidden::ProfileOmits { profile } => {
                write!(f, "execution profile {profile:?} does not enable the tool")
            }
        }
    }
}

/// Decides whether the tool called as `requested` and resolved to `tool` is
/// exposed.
///
/// # Errors
///
/// The [`Hidden`] reason when it is not.
pub fn check_exposure(
    config: &ToolsConfig,
    requested: &str,
    tool: &ToolDescriptor,
    state_mode: StateMode,
) -> Result<(), Hidden> {
    let process_run = tool.id == PROCESS_RUN;
    if process_run && state_mode != StateMode::Local {
        return Err(Hidden::SharedStateMode);
    }
    if let Some(s) = config.deny.iter().find(|s| s.matches(requested, tool)) {
        return Err(Hidden::Denied {
            selector: s.to_string(),
        });
    }
    let allowed = if process_run {
        config.allow.iter().any(Selector::is_exact_process_run)
    } else {
        config.default_mode == DefaultMode::Allow
            || config.allow.iter().any(|s| s.matches(requested, tool))
    };
    if !allowed {
        return Err(if process_run {
            Hidden::ProcessRunNotExactlyAllowed
        } else {
            Hidden::NotAllowed
        });
    }
    if let Some((name, selectors)) = &config.profile {
        let enabled = if process_run {
            selectors.iter().any(Selector::is_exact_process_run)
        } else {
            selectors.iter().any(|s| s.matches(requested, tool))
        };
        if !enabled {
            return Err(Hidden::ProfileOmits {
                profile: name.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::tool::Registry;

    fn tools(allow: &[&str]) -> ToolsConfig {
        ToolsConfig {
            allow: allow.iter().map(|s| Selector::parse(s).unwrap()).collect(),
            ..ToolsConfig::default()
        }
    }

    fn exposed(config: &ToolsConfig, id: &str, mode: StateMode) -> Result<(), Hidden> {
        let registry = Registry::new();
        let d = registry.route(id).unwrap().descriptor().clone();
        check_exposure(config, id, &d, mode)
    }

    #[test]
    fn exact_literal_exposes_process_run_in_local_mode() {
        assert_eq!(
            exposed(&tools(&["process.run"]), PROCESS_RUN, StateMode::Local),
            Ok(())
        );
    }

    #[test]
    fn shared_state_mode_fails_closed() {
        assert_eq!(
            exposed(&tools(&["process.run"]), PROCESS_RUN, StateMode::Shared),
            Err(Hidden::SharedStateMode)
        );
        // Other tools are unaffected by the state mode.
        assert_eq!(exposed(&tools(&["bash"]), BASH, StateMode::Shared), Ok(()));
    }

    #[test]
    fn broad_selectors_never_expose_process_run() {
        for selector in [
            "*",
            "process.*",
            "*.run",
            "p*n",
            "group:environment",
            "compat:shell",
            "compat:all",
            "bundle:authoring",
        ] {
            let config = tools(&[selector]);
            assert_eq!(
                exposed(&config, PROCESS_RUN, StateMode::Local),
                Err(Hidden::ProcessRunNotExactlyAllowed),
                "{selector}"
            );
        }
        // The same selectors do expose other tools they cover, so the refusal
        // above is specific to process.run.
        for (selector, id) in [
            ("*", "fs.read"),
            ("group:environment", BASH),
            ("compat:shell", BASH),
            ("compat:all", "web.fetch"),
            ("bundle:authoring", "fs.write"),
        ] {
            assert_eq!(
                exposed(&tools(&[selector]), id, StateMode::Local),
                Ok(()),
                "{selector}"
            );
        }
    }

    #[test]
    fn default_mode_allow_never_exposes_process_run() {
        let config = ToolsConfig {
            default_mode: DefaultMode::Allow,
            ..ToolsConfig::default()
        };
        assert_eq!(
            exposed(&config, PROCESS_RUN, StateMode::Local),
            Err(Hidden::ProcessRunNotExactlyAllowed)
        );
        assert_eq!(exposed(&config, "fs.write", StateMode::Local), Ok(()));
        assert_eq!(
            exposed(&ToolsConfig::default(), "fs.write", StateMode::Local),
            Err(Hidden::NotAllowed)
        );
    }

    #[test]
    fn profiles_need_the_exact_id_too() {
        let mut config = tools(&["process.run", "fs.read"]);
        config.profile = Some((
            "build".into(),
            vec![
                Selector::parse("*").unwrap(),
                Selector::parse("bundle:authoring").unwrap(),
            ],
        ));
        assert_eq!(
            exposed(&config, PROCESS_RUN, StateMode::Local),
            Err(Hidden::ProfileOmits {
                profile: "build".into()
            })
        );
        assert_eq!(exposed(&config, "fs.read", StateMode::Local), Ok(()));
        config
            .profile
            .as_mut()
            .unwrap()
            .1
            .push(Selector::parse("process.run").unwrap());
        assert_eq!(exposed(&config, PROCESS_RUN, StateMode::Local), Ok(()));
        // A profile cannot widen tools.allow.
        let mut narrow = tools(&["fs.read"]);
        narrow.profile = Some((
            "build".into(),
            vec![Selector::parse("process.run").unwrap()],
        ));
        assert_eq!(
            exposed(&narrow, PROCESS_RUN, StateMode::Local),
            Err(Hidden::ProcessRunNotExactlyAllowed)
        );
    }

    #[test]
    fn deny_selectors_of_any_form_hide() {
        let mut config = tools(&["process.run", "bash"]);
        config.deny = vec![Selector::parse("group:environment").unwrap()];
        assert!(matches!(
            exposed(&config, PROCESS_RUN, StateMode::Local),
            Err(Hidden::Denied { .. })
        ));
        assert!(matches!(
            exposed(&config, BASH, StateMode::Local),
            Err(Hidden::Denied { .. })
        ));
    }

    #[test]
    fn alias_selects_its_canonical_tool() {
        assert_eq!(
            exposed(&tools(&["tool.exec"]), BASH, StateMode::Local),
            Ok(())
        );
        assert_eq!(
            exposed(&tools(&["bash"]), TOOL_EXEC, StateMode::Local),
            Ok(())
        );
    }

    #[test]
    fn selector_parsing() {
        assert_eq!(
            Selector::parse("tool.exec"),
            Ok(Selector::Exact(BASH.into()))
        );
        assert_eq!(
            Selector::parse("group:nope"),
            Err(SelectorError::UnknownName { kind: "group" })
        );
        assert_eq!(Selector::parse("kind:x"), Err(SelectorError::UnknownKind));
        assert_eq!(
            Selector::parse("Process.Run"),
            Err(SelectorError::Malformed)
        );
        assert_eq!(Selector::parse("a b*"), Err(SelectorError::Malformed));
        assert!(glob("a*b*c", "axxbyyc") && !glob("a*b", "ab c"));
    }
}

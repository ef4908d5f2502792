//! The policy file: TOML, validated completely at load.
//!
//! ```toml
//! version = 1
//!
//! [tools]
//! default_mode = "deny"           # "deny" | "allow" (never exposes process.run)
//! allow = ["process.run", "fs.read", "group:web"]
//! deny = []
//! profile = "build"               # optional: the active execution profile
//!
//! [tools.profiles.build]
//! allow = ["process.run", "fs.*"]
//!
//! [policy]
//! default_decision = "require_approval"   # "allow" | "require_approval" | "deny"
//! untrusted_shell_requires_approval = true
//! overrides = ['{"executable":"git","argv":["status"],"cwd":".","env":{}}']
//!
//! [[policy.rules]]
//! tool = "process.run"            # a selector, as in tools.allow
//! decision = "allow"
//! target = '{"executable":"cargo","argv":["test"*'   # optional; process.run only
//! ```
//!
//! Unknown keys anywhere are errors, as are unknown selectors, an undefined
//! active profile, empty or oversized patterns, and a `target` on a rule
//! whose tool selector is not exactly `process.run`.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::decision::Verdict;
use super::exposure::{DefaultMode, Selector, SelectorError, ToolsConfig};
use super::pattern::{Pattern, PatternError};

/// The only configuration version this build reads.
pub const CONFIG_VERSION: u32 = 1;

/// Longest piece of the file's own text (a parser message, a selector, a
/// profile name) that a [`ConfigError`] quotes; longer ones are clipped so an
/// error stays bounded whatever the input.
pub const MAX_QUOTED_BYTES: usize = 512;

/// Clips `s` to [`MAX_QUOTED_BYTES`] at a character boundary, marking the cut.
fn clip(s: &str) -> String {
    if s.len() <= MAX_QUOTED_BYTES {
        return s.to_owned();
    }
    let mut cut = MAX_QUOTED_BYTES;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &s[..cut])
}

/// A policy file that could not be loaded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Not TOML, a wrong type, a missing field, or an unknown key.
    #[error("invalid policy file: {message}")]
    Parse {
        /// The parser's message, with line and column.
        message: String,
    },
    /// `version` is not [`CONFIG_VERSION`].
    #[error("unsupported policy version {found} (this build reads version {CONFIG_VERSION})")]
    UnsupportedVersion {
        /// The version found.
        found: u32,
    },
    /// A selector names nothing.
    #[error("{at}: invalid selector {selector:?}: {source}")]
    InvalidSelector {
        /// Where, e.g. `tools.allow[2]`.
        at: String,
        /// The selector as written.
        selector: String,
        /// Why.
        source: SelectorError,
    },
    /// A pattern is empty or too long.
    #[error("{at}: invalid pattern: {source}")]
    InvalidPattern {
        /// Where, e.g. `policy.overrides[0]`.
        at: String,
        /// Why.
        source: PatternError,
    },
    /// A rule has a `target` but its tool is not exactly `process.run`.
    #[error("{at}: `target` is only valid on a rule whose tool is exactly \"process.run\"")]
    TargetOnNonProcessRule {
        /// Where, e.g. `policy.rules[1]`.
        at: String,
    },
    /// `tools.profile` names a profile that is not defined.
    #[error("tools.profile names {name:?}, which is not defined under [tools.profiles]")]
    UnknownProfile {
        /// The name.
        name: String,
    },
}

/// One validated `[[policy.rules]]` entry.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Rule {
    /// Which tools the rule covers.
    pub tool: Selector,
    /// What it decides.
    pub decision: Verdict,
    /// An optional pattern over the `process.run` match target.
    pub target: Option<Pattern>,
}

/// The decision part of the configuration (`[policy]`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DecisionConfig {
    /// The verdict when no rule matches.
    pub default_decision: Verdict,
    /// Whether untrusted provenance raises an allow of a shell-like tool to
    /// `require_approval`.
    pub untrusted_shell_requires_approval: bool,
    /// Standing approvals: exact overrides or `*` patterns over
    /// `process.run` targets.
    pub overrides: Vec<Pattern>,
    /// The rules, in file order.
    pub rules: Vec<Rule>,
}

impl Default for DecisionConfig {
    fn default() -> Self {
        DecisionConfig {
            default_decision: Verdict::RequireApproval,
            untrusted_shell_requires_approval: true,
            overrides: Vec::new(),
            rules: Vec::new(),
        }
    }
}

/// A validated policy file.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PolicyConfig {
    /// Exposure.
    pub tools: ToolsConfig,
    /// Decisions.
    pub policy: DecisionConfig,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    version: u32,
    #[serde(default)]
    tools: RawTools,
    #[serde(default)]
    policy: RawPolicy,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTools {
    #[serde(default)]
    default_mode: DefaultMode,
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    deny: Vec<String>,
    #[serde(default)]
    profile: Option<String>,
    #[serde(default)]
    profiles: BTreeMap<String, RawProfile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    #[serde(default)]
    allow: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    #[serde(default = "default_decision")]
    default_decision: Verdict,
    #[serde(default = "yes")]
    untrusted_shell_requires_approval: bool,
    #[serde(default)]
    overrides: Vec<String>,
    #[serde(default)]
    rules: Vec<RawRule>,
}

impl Default for RawPolicy {
    fn default() -> Self {
        RawPolicy {
            default_decision: default_decision(),
            untrusted_shell_requires_approval: true,
            overrides: Vec::new(),
            rules: Vec::new(),
        }
    }
}

fn default_decision() -> Verdict {
    Verdict::RequireApproval
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    tool: String,
    decision: Verdict,
    #[serde(default)]
    target: Option<String>,
}

fn selectors(list: &[String], at: &str) -> Result<Vec<Selector>, ConfigError> {
    list.iter()
        .enumerate()
        .map(|(i, s)| {
            Selector::parse(s).map_err(|source| ConfigError::InvalidSelector {
                at: format!("{at}[{i}]"),
                selector: clip(s),
                source,
            })
        })
        .collect()
}

fn pattern(text: &str, at: String) -> Result<Pattern, ConfigError> {
    Pattern::parse(text).map_err(|source| ConfigError::InvalidPattern { at, source })
}

impl PolicyConfig {
    /// Parses and validates a policy file's text.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the first problem and where it is.
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            message: clip(e.to_string().trim_end()),
        })?;
        if raw.version != CONFIG_VERSION {
            return Err(ConfigError::UnsupportedVersion { found: raw.version });
        }
        let mut profiles = BTreeMap::new();
        for (name, profile) in &raw.tools.profiles {
            let at = format!("tools.profiles.{}.allow", clip(name));
            profiles.insert(name.clone(), selectors(&profile.allow, &at)?);
        }
        let profile = match raw.tools.profile {
            None => None,
            Some(name) => match profiles.remove(&name) {
                Some(list) => Some((name, list)),
                None => return Err(ConfigError::UnknownProfile { name: clip(&name) }),
            },
        };
        let tools = ToolsConfig {
            default_mode: raw.tools.default_mode,
            allow: selectors(&raw.tools.allow, "tools.allow")?,
            deny: selectors(&raw.tools.deny, "tools.deny")?,
            profile,
        };
        let overrides = raw
            .policy
            .overrides
            .iter()
            .enumerate()
            .map(|(i, o)| pattern(o, format!("policy.overrides[{i}]")))
            .collect::<Result<_, _>>()?;
        let mut rules = Vec::with_capacity(raw.policy.rules.len());
        for (i, rule) in raw.policy.rules.iter().enumerate() {
            let at = format!("policy.rules[{i}]");
            let tool =
                Selector::parse(&rule.tool).map_err(|source| ConfigError::InvalidSelector {
                    at: format!("{at}.tool"),
                    selector: clip(&rule.tool),
                    source,
                })?;
            let target = match &rule.target {
                None => None,
                Some(_) if !tool.is_exact_process_run() => {
                    return Err(ConfigError::TargetOnNonProcessRule { at });
                }
                Some(t) => Some(pattern(t, format!("{at}.target"))?),
            };
            rules.push(Rule {
                tool,
                decision: rule.decision,
                target,
            });
        }
        Ok(PolicyConfig {
            tools,
            policy: DecisionConfig {
                default_decision: raw.policy.default_decision,
                untrusted_shell_requires_approval: raw.policy.untrusted_shell_requires_approval,
                overrides,
                rules,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<PolicyConfig, ConfigError> {
        PolicyConfig::from_toml_str(text)
    }

    #[test]
    fn minimal_file_gets_documented_defaults() {
        let c = load("version = 1").unwrap();
        assert_eq!(c.tools.default_mode, DefaultMode::Deny);
        assert!(c.tools.allow.is_empty() && c.tools.profile.is_none());
        assert_eq!(c.policy.default_decision, Verdict::RequireApproval);
        assert!(c.policy.untrusted_shell_requires_approval);
    }

    #[test]
    fn full_file_loads() {
        let c = load(
            r#"
            version = 1
            [tools]
            default_mode = "allow"
            allow = ["process.run", "group:web", "fs.*"]
            deny = ["bash"]
            profile = "build"
            [tools.profiles.build]
            allow = ["process.run"]
            [policy]
            default_decision = "deny"
            untrusted_shell_requires_approval = false
            overrides = ['{"executable":"ls","argv":[],"cwd":".","env":{}}']
            [[policy.rules]]
            tool = "process.run"
            decision = "allow"
            target = '{"executable":"cargo",*'
            "#,
        )
        .unwrap();
        assert_eq!(c.tools.profile.as_ref().unwrap().0, "build");
        assert_eq!(c.policy.rules.len(), 1);
        assert!(!c.policy.rules[0].target.as_ref().unwrap().is_exact());
        assert!(c.policy.overrides[0].is_exact());
        assert!(!c.policy.untrusted_shell_requires_approval);
    }

    #[test]
    fn unknown_keys_are_rejected_everywhere() {
        for text in [
            "version = 1\nextra = 1",
            "version = 1\n[tools]\nalow = []",
            "version = 1\n[tools.profiles.p]\ndeny = []",
            "version = 1\n[policy]\nuntrusted_shell = true",
            "version = 1\n[[policy.rules]]\ntool = \"bash\"\ndecision = \"allow\"\nwhy = 1",
        ] {
            match load(text) {
                Err(ConfigError::Parse { message }) => {
                    assert!(message.contains("unknown field"), "{text}: {message}")
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn errors_quote_bounded_text() {
        let long = "x".repeat(10 * MAX_QUOTED_BYTES);
        for text in [
            format!("version = 1\n[tools]\nallow = [\"group:{long}\"]"),
            format!("version = 1\n[tools]\nprofile = \"{long}\""),
            format!("version = 1\n{long} = 1"),
        ] {
            let err = load(&text).unwrap_err().to_string();
            assert!(err.len() < 3 * MAX_QUOTED_BYTES, "{} bytes", err.len());
        }
    }

    #[test]
    fn bad_values_get_typed_errors() {
        assert!(matches!(load(""), Err(ConfigError::Parse { .. })));
        assert!(matches!(
            load("version = 1\n[tools]\ndefault_mode = \"maybe\""),
            Err(ConfigError::Parse { .. })
        ));
        assert_eq!(
            load("version = 2"),
            Err(ConfigError::UnsupportedVersion { found: 2 })
        );
        assert!(matches!(
            load("version = 1\n[tools]\nallow = [\"fs.read\", \"group:shell\"]"),
            Err(ConfigError::InvalidSelector { at, .. }) if at == "tools.allow[1]"
        ));
        assert!(matches!(
            load("version = 1\n[tools]\nprofile = \"nope\""),
            Err(ConfigError::UnknownProfile { .. })
        ));
        assert!(matches!(
            load("version = 1\n[policy]\noverrides = [\"\"]"),
            Err(ConfigError::InvalidPattern { at, .. }) if at == "policy.overrides[0]"
        ));
        assert!(matches!(
            load("version = 1\n[[policy.rules]]\ntool = \"*\"\ndecision = \"allow\"\ntarget = \"x\""),
            Err(ConfigError::TargetOnNonProcessRule { at }) if at == "policy.rules[0]"
        ));
        assert!(matches!(
            load("version = 1\n[[policy.rules]]\ntool = \"bash\"\ndecision = \"perhaps\""),
            Err(ConfigError::Parse { .. })
        ));
    }
}

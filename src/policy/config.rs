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
//! confinement = "workspace-write" # optional; process.run only: the rule
//!                                 # applies only to runs confined at least so
//! allow_hosts = ["pypi.org"]      # optional, with confinement: a network
//!                                 # `allow` run whose allow-list these cover
//!                                 # counts as confined so
//! ```
//!
//! `[policy] allow_hosts = [...]` grants the same to `require_confinement`,
//! and so does the active profile's `[tools.profiles.NAME] allow_hosts`:
//! without either, no network `allow` run satisfies `require_confinement`.
//!
//! `[policy] require_confinement = "workspace-write" | "read-only"` denies
//! every `process.run` that is not confined at least that much
//! ([`ConfineTarget::satisfies`](super::ConfineTarget::satisfies)), whatever
//! the rules and approvals say.
//!
//! Unknown keys anywhere are errors, as are unknown selectors, an undefined
//! active profile, empty or oversized patterns, and a `target` on a rule
//! whose tool selector is not exactly `process.run`.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::decision::Verdict;
use super::exposure::{DefaultMode, Selector, SelectorError, ToolsConfig};
use super::pattern::{Pattern, PatternError};
use super::target::ConfineLevel;

/// The only configuration version this build reads.
pub const CONFIG_VERSION: u32 = 1;

/// Longest piece of the file's own text (a parser message, a selector, a
/// profile name) that a [`PolicyConfigError`] quotes; longer ones are clipped so an
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
pub enum PolicyConfigError {
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
    /// A host pattern of `allow_hosts` is malformed.
    #[error("{at}: host pattern {pattern:?}: {source}")]
    InvalidHost {
        /// Where (`policy.allow_hosts`, `policy.rules[N].allow_hosts`).
        at: String,
        /// The pattern (clipped).
        pattern: String,
        /// Why.
        source: super::hosts::HostPatternError,
    },
    /// More than [`MAX_HOSTS`](super::hosts::MAX_HOSTS) patterns in one
    /// `allow_hosts`.
    #[error("{at}: more than {} host patterns", super::hosts::MAX_HOSTS)]
    TooManyHosts {
        /// Where.
        at: String,
    },
    /// A rule has `allow_hosts` but no `confinement` (the grant only
    /// widens which confined runs the rule applies to).
    #[error("{at}: `allow_hosts` goes with a `confinement`")]
    AllowHostsWithoutConfinement {
        /// The rule (`policy.rules[N]`).
        at: String,
    },
    /// A rule has a `confinement` but its tool is not exactly
    /// `process.run`.
    #[error("{at}: `confinement` is only valid on a rule whose tool is exactly \"process.run\"")]
    ConfinementOnNonProcessRule {
        /// Where, e.g. `policy.rules[1]`.
        at: String,
    },
    /// An executable given to [`PolicyConfig::allow_executables`] breaks
    /// the executable rules.
    #[error("executables[{index}]: {source}")]
    InvalidExecutable {
        /// Its position in the list.
        index: usize,
        /// Why.
        source: super::target::ExecutableError,
    },
    /// An executable given to [`PolicyConfig::allow_executables`] is so long
    /// that a target naming it is truncated
    /// ([`MAX_PREFIX_BYTES`](super::target::MAX_PREFIX_BYTES)), so no
    /// pattern over its name could match.
    #[error("executables[{index}] is too long to be matched")]
    ExecutableTooLong {
        /// Its position in the list.
        index: usize,
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
    /// The rule applies only to runs confined at least this much.
    pub confinement: Option<ConfineLevel>,
    /// With `confinement`: the hosts a network `allow` run may name for
    /// the rule to apply (its allow-list covered by these); empty, the
    /// rule applies to network `off` runs only.
    pub allow_hosts: super::hosts::AllowList,
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
    /// Every `process.run` must be confined at least this much; a weaker
    /// one is denied, approvals notwithstanding.
    pub require_confinement: Option<ConfineLevel>,
    /// The hosts a network `allow` run may name and still satisfy
    /// `require_confinement` (its allow-list covered by these); empty, no
    /// network `allow` run does.
    pub allow_hosts: super::hosts::AllowList,
}

impl Default for DecisionConfig {
    fn default() -> Self {
        DecisionConfig {
            default_decision: Verdict::RequireApproval,
            untrusted_shell_requires_approval: true,
            overrides: Vec::new(),
            rules: Vec::new(),
            require_confinement: None,
            allow_hosts: super::hosts::AllowList::default(),
        }
    }
}

/// Something a policy file loads with but that is probably not what its
/// author meant; the CLI prints each on stderr.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, serde::Serialize)]
#[serde(tag = "code", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ConfigWarning {
    /// A pattern with `*` that has the exact shape of a generated target (or
    /// of an oversized target's display form): a generated target writes `*`
    /// as `\u002a`, and a TOML *basic* string (`"..."`) decodes that escape
    /// back into a wildcard, so a pasted exact override became a broad
    /// pattern. Paste generated overrides as TOML *literal* strings
    /// (`'...'`), as `custodian policy explain` prints them.
    #[error(
        "{at}: looks like a generated target whose \\u002a escapes were decoded into `*` \
         (a TOML basic string decodes \\u escapes): it loads as a BROAD wildcard pattern; \
         paste generated overrides as TOML literal strings ('...')"
    )]
    DecodedWildcard {
        /// Where, e.g. `policy.overrides[0]`.
        at: String,
    },
    /// A pattern holds a character that targets always escape (a control,
    /// format or invisible character), so that part can never match; it was
    /// probably a `\uXXXX` escape decoded by a TOML basic string.
    #[error(
        "{at}: holds U+{code_point:04X} at byte {offset}, which targets always write as \
         \\u{code_point:04x}, so it can never match there (a TOML basic string decodes \
         \\u escapes; use a literal string '...')"
    )]
    DecodedEscape {
        /// Where, e.g. `policy.rules[1].target`.
        at: String,
        /// The raw character's code point.
        code_point: u32,
        /// Its byte offset in the pattern.
        offset: usize,
    },
}

/// Whether `text` is shaped like a whole target, or an oversized target's
/// display form: `{"executable":…` ending in `}}` or in the hash suffix.
fn target_shaped(text: &str) -> bool {
    if !text.starts_with("{\"executable\":") {
        return false;
    }
    if let Some((_, hex)) = text.rsplit_once(super::target::TRUNCATION_MARKER) {
        return hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit());
    }
    serde_json::from_str::<serde_json::Value>(text).is_ok_and(|v| {
        v.as_object().is_some_and(|o| {
            o.keys()
                .map(String::as_str)
                .eq(["argv", "cwd", "env", "executable"])
                || o.keys()
                    .map(String::as_str)
                    .eq(["executable", "argv", "cwd", "env"])
        })
    })
}

/// The warnings a loaded pattern deserves.
fn pattern_warnings(p: &Pattern, at: &str, out: &mut Vec<ConfigWarning>) {
    let text = p.as_str();
    if let Some((offset, c)) = text
        .char_indices()
        .find(|&(_, c)| c != '*' && super::target::needs_unicode_escape(c))
    {
        out.push(ConfigWarning::DecodedEscape {
            at: at.to_owned(),
            code_point: c as u32,
            offset,
        });
    }
    if !p.is_exact() && target_shaped(text) {
        out.push(ConfigWarning::DecodedWildcard { at: at.to_owned() });
    }
}

/// A validated policy file.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PolicyConfig {
    /// Exposure.
    pub tools: ToolsConfig,
    /// Decisions.
    pub policy: DecisionConfig,
    #[serde(skip)]
    warnings: Vec<ConfigWarning>,
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
    #[serde(default)]
    allow_hosts: Vec<String>,
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
    #[serde(default)]
    require_confinement: Option<ConfineLevel>,
    #[serde(default)]
    allow_hosts: Vec<String>,
}

impl Default for RawPolicy {
    fn default() -> Self {
        RawPolicy {
            default_decision: default_decision(),
            untrusted_shell_requires_approval: true,
            overrides: Vec::new(),
            rules: Vec::new(),
            require_confinement: None,
            allow_hosts: Vec::new(),
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
    #[serde(default)]
    confinement: Option<ConfineLevel>,
    #[serde(default)]
    allow_hosts: Vec<String>,
}

fn hosts(list: &[String], at: &str) -> Result<super::hosts::AllowList, PolicyConfigError> {
    if list.len() > super::hosts::MAX_HOSTS {
        return Err(PolicyConfigError::TooManyHosts { at: at.to_owned() });
    }
    super::hosts::AllowList::parse(list).map_err(|(pattern, source)| {
        PolicyConfigError::InvalidHost {
            at: at.to_owned(),
            pattern: clip(&pattern),
            source,
        }
    })
}

fn selectors(list: &[String], at: &str) -> Result<Vec<Selector>, PolicyConfigError> {
    list.iter()
        .enumerate()
        .map(|(i, s)| {
            Selector::parse(s).map_err(|source| PolicyConfigError::InvalidSelector {
                at: format!("{at}[{i}]"),
                selector: clip(s),
                source,
            })
        })
        .collect()
}

fn pattern(text: &str, at: String) -> Result<Pattern, PolicyConfigError> {
    Pattern::parse(text).map_err(|source| PolicyConfigError::InvalidPattern { at, source })
}

impl PolicyConfig {
    /// The smallest policy that runs processes: `process.run` exposed, each
    /// of `executables` allowed with any arguments, working directory and
    /// environment overlay, every other executable denied.
    ///
    /// An executable matches as the invocation names it
    /// ([`Invocation::executable`](crate::process::Invocation::executable)):
    /// allowing `git` does not allow `/usr/bin/git`. The list is the
    /// embedder's own decision, so untrusted provenance does not raise these
    /// allows to an approval. It is the file
    ///
    /// ```toml
    /// version = 1
    /// [tools]
    /// allow = ["process.run"]
    /// [policy]
    /// default_decision = "deny"
    /// untrusted_shell_requires_approval = false
    /// [[policy.rules]]               # one per executable
    /// tool = "process.run"
    /// decision = "allow"
    /// target = '{"executable":"git",*'
    /// ```
    ///
    /// # Errors
    ///
    /// [`PolicyConfigError::InvalidExecutable`] for an empty executable, one
    /// holding a NUL byte or one that does not name a file;
    /// [`PolicyConfigError::ExecutableTooLong`] for one too long to match.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use custodian::policy::PolicyConfig;
    /// use custodian::prelude::*;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let policy = RunPolicy::new(PolicyConfig::allow_executables(["echo"])?);
    /// let runtime = Runtime::open(RuntimeConfig::new(dir.path()).with_policy(policy))?;
    /// let request = runtime.start(RequestId::new("req-1")?)?;
    /// let executor = request.executor();
    /// let echo = Invocation::validate(InvocationSpec::new("echo").with_args(["hi"]))?;
    /// assert_eq!(executor.run(echo).await?.stdout.text, "hi\n");
    /// let rm = Invocation::validate(InvocationSpec::new("rm").with_args(["-rf", "x"]))?;
    /// assert!(matches!(executor.run(rm).await, Err(RuntimeError::Denied(_))));
    /// executor.succeed();
    /// assert_eq!(request.finished().await.denied.len(), 1);
    /// runtime.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn allow_executables<I, S>(executables: I) -> Result<Self, PolicyConfigError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let process_run = || Selector::parse(super::tool::PROCESS_RUN).expect("a built-in id");
        let mut rules = Vec::new();
        for (index, exe) in executables.into_iter().enumerate() {
            let exe = exe.as_ref();
            super::target::check_executable(exe)
                .map_err(|source| PolicyConfigError::InvalidExecutable { index, source })?;
            // The target's own prefix, escaped as targets are (a `*` in the
            // name is `\u002a`, never a wildcard), then anything.
            let mut text = String::from("{\"executable\":");
            super::target::escape_into(&mut text, exe);
            text.push(',');
            if text.len() > super::target::MAX_PREFIX_BYTES {
                return Err(PolicyConfigError::ExecutableTooLong { index });
            }
            text.push('*');
            rules.push(Rule {
                tool: process_run(),
                decision: Verdict::Allow,
                target: Some(pattern(&text, format!("executables[{index}]"))?),
                confinement: None,
                allow_hosts: super::hosts::AllowList::default(),
            });
        }
        Ok(PolicyConfig {
            tools: ToolsConfig {
                allow: vec![process_run()],
                ..ToolsConfig::default()
            },
            policy: DecisionConfig {
                default_decision: Verdict::Deny,
                untrusted_shell_requires_approval: false,
                rules,
                ..DecisionConfig::default()
            },
            warnings: Vec::new(),
        })
    }

    /// What the file loaded with but probably did not mean (see
    /// [`ConfigWarning`]); empty for a clean file.
    pub fn warnings(&self) -> &[ConfigWarning] {
        &self.warnings
    }

    /// Parses and validates a policy file's text.
    ///
    /// # Errors
    ///
    /// [`PolicyConfigError`] naming the first problem and where it is.
    pub fn from_toml_str(text: &str) -> Result<Self, PolicyConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| PolicyConfigError::Parse {
            message: clip(e.to_string().trim_end()),
        })?;
        if raw.version != CONFIG_VERSION {
            return Err(PolicyConfigError::UnsupportedVersion { found: raw.version });
        }
        let mut profiles = BTreeMap::new();
        for (name, profile) in &raw.tools.profiles {
            let at = format!("tools.profiles.{}", clip(name));
            let hosts = hosts(&profile.allow_hosts, &format!("{at}.allow_hosts"))?;
            let allow = selectors(&profile.allow, &format!("{at}.allow"))?;
            profiles.insert(name.clone(), (allow, hosts));
        }
        // The active profile's hosts join the policy's grant.
        let mut granted = hosts(&raw.policy.allow_hosts, "policy.allow_hosts")?;
        let profile = match raw.tools.profile {
            None => None,
            Some(name) => match profiles.remove(&name) {
                Some((list, hosts)) => {
                    granted.extend(hosts);
                    Some((name, list))
                }
                None => return Err(PolicyConfigError::UnknownProfile { name: clip(&name) }),
            },
        };
        let tools = ToolsConfig {
            default_mode: raw.tools.default_mode,
            allow: selectors(&raw.tools.allow, "tools.allow")?,
            deny: selectors(&raw.tools.deny, "tools.deny")?,
            profile,
        };
        let overrides: Vec<Pattern> = raw
            .policy
            .overrides
            .iter()
            .enumerate()
            .map(|(i, o)| pattern(o, format!("policy.overrides[{i}]")))
            .collect::<Result<_, _>>()?;
        let mut rules = Vec::with_capacity(raw.policy.rules.len());
        for (i, rule) in raw.policy.rules.iter().enumerate() {
            let at = format!("policy.rules[{i}]");
            let tool = Selector::parse(&rule.tool).map_err(|source| {
                PolicyConfigError::InvalidSelector {
                    at: format!("{at}.tool"),
                    selector: clip(&rule.tool),
                    source,
                }
            })?;
            let target = match &rule.target {
                None => None,
                Some(_) if !tool.is_exact_process_run() => {
                    return Err(PolicyConfigError::TargetOnNonProcessRule { at });
                }
                Some(t) => Some(pattern(t, format!("{at}.target"))?),
            };
            if rule.confinement.is_some() && !tool.is_exact_process_run() {
                return Err(PolicyConfigError::ConfinementOnNonProcessRule { at });
            }
            if !rule.allow_hosts.is_empty() && rule.confinement.is_none() {
                return Err(PolicyConfigError::AllowHostsWithoutConfinement { at });
            }
            let allow_hosts = hosts(&rule.allow_hosts, &format!("{at}.allow_hosts"))?;
            rules.push(Rule {
                tool,
                decision: rule.decision,
                target,
                confinement: rule.confinement,
                allow_hosts,
            });
        }
        let mut warnings = Vec::new();
        for (i, o) in overrides.iter().enumerate() {
            pattern_warnings(o, &format!("policy.overrides[{i}]"), &mut warnings);
        }
        for (i, r) in rules.iter().enumerate() {
            if let Some(t) = &r.target {
                pattern_warnings(t, &format!("policy.rules[{i}].target"), &mut warnings);
            }
        }
        Ok(PolicyConfig {
            warnings,
            tools,
            policy: DecisionConfig {
                default_decision: raw.policy.default_decision,
                untrusted_shell_requires_approval: raw.policy.untrusted_shell_requires_approval,
                overrides,
                rules,
                require_confinement: raw.policy.require_confinement,
                allow_hosts: granted,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<PolicyConfig, PolicyConfigError> {
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
                Err(PolicyConfigError::Parse { message }) => {
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
    fn decoded_escapes_in_patterns_warn() {
        // As a TOML basic string, a generated override for `ls *` decodes
        // `\u002a` into a wildcard: it loads, broad, and says so.
        let c = load(
            r#"
            version = 1
            [policy]
            overrides = ["{\"executable\":\"ls\",\"argv\":[\"\u002a\"],\"cwd\":\".\",\"env\":{}}"]
            [[policy.rules]]
            tool = "process.run"
            decision = "deny"
            target = "{\"executable\":\"x\",\"argv\":[\"a\u000ab\"]*"
            "#,
        )
        .unwrap();
        assert!(!c.policy.overrides[0].is_exact());
        assert_eq!(
            c.warnings(),
            [
                ConfigWarning::DecodedWildcard {
                    at: "policy.overrides[0]".into()
                },
                ConfigWarning::DecodedEscape {
                    at: "policy.rules[0].target".into(),
                    code_point: 0x0a,
                    offset: 28,
                },
            ]
        );
        assert!(c.warnings()[0].to_string().contains("BROAD"));
        // The same override pasted as a literal string is exact and quiet,
        // and so are hand-written patterns that are not target-shaped.
        let c = load(
            r#"
            version = 1
            [policy]
            overrides = ['{"executable":"ls","argv":["\u002a"],"cwd":".","env":{}}', '{"executable":"cargo",*']
            "#,
        )
        .unwrap();
        assert!(c.policy.overrides[0].is_exact());
        assert!(c.warnings().is_empty(), "{:?}", c.warnings());
        // A decoded oversized display form warns too.
        let display = format!(
            "{{\"executable\":\"x\",\"argv\":[\"*{}...sha256:{}",
            "a".repeat(10),
            "0".repeat(64)
        );
        let c = load(&format!("version = 1\n[policy]\noverrides = ['{display}']")).unwrap();
        assert_eq!(c.warnings().len(), 1);
    }

    #[test]
    fn bad_values_get_typed_errors() {
        assert!(matches!(load(""), Err(PolicyConfigError::Parse { .. })));
        assert!(matches!(
            load("version = 1\n[tools]\ndefault_mode = \"maybe\""),
            Err(PolicyConfigError::Parse { .. })
        ));
        assert_eq!(
            load("version = 2"),
            Err(PolicyConfigError::UnsupportedVersion { found: 2 })
        );
        assert!(matches!(
            load("version = 1\n[tools]\nallow = [\"fs.read\", \"group:shell\"]"),
            Err(PolicyConfigError::InvalidSelector { at, .. }) if at == "tools.allow[1]"
        ));
        assert!(matches!(
            load("version = 1\n[tools]\nprofile = \"nope\""),
            Err(PolicyConfigError::UnknownProfile { .. })
        ));
        assert!(matches!(
            load("version = 1\n[policy]\noverrides = [\"\"]"),
            Err(PolicyConfigError::InvalidPattern { at, .. }) if at == "policy.overrides[0]"
        ));
        assert!(matches!(
            load("version = 1\n[[policy.rules]]\ntool = \"*\"\ndecision = \"allow\"\ntarget = \"x\""),
            Err(PolicyConfigError::TargetOnNonProcessRule { at }) if at == "policy.rules[0]"
        ));
        assert!(matches!(
            load("version = 1\n[[policy.rules]]\ntool = \"bash\"\ndecision = \"perhaps\""),
            Err(PolicyConfigError::Parse { .. })
        ));
    }
}

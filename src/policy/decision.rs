//! The decision function: (tool, invocation, provenance, configuration,
//! approvals) → `allow | require_approval | deny`, with the reason as data.
//!
//! The checks run in a fixed order and the first that decides wins:
//!
//! 1. **Routing** — the ID must route ([`Registry::route`]); a stale plugin
//!    registration under a reserved ID is refused here too.
//! 2. **Exposure** — [`check_exposure`]; a hidden tool is denied.
//! 3. **Target** — `process.run` needs a well-formed invocation; a malformed
//!    one is denied with a typed reason, no target and no override.
//! 4. **Deny rules** — a matching `deny` rule wins over any approval; then
//!    `policy.require_confinement`: a `process.run` not confined at least
//!    that much is denied, approvals notwithstanding. (A rule with a
//!    `confinement` matches only runs confined at least that much.)
//! 5. **Overrides** — an override from the configuration or from the caller's
//!    approvals that matches the target allows the call, whatever the
//!    provenance: that is what an approval is for.
//! 6. **Rules** — among the remaining matching rules the most restrictive
//!    wins (`require_approval` over `allow`); with none, `default_decision`.
//! 7. **Untrusted shell** — with `untrusted_shell_requires_approval`, an
//!    `allow` from step 6 for a shell-like tool (`bash`, `tool.exec`,
//!    `process.run`) driven by untrusted provenance becomes
//!    `require_approval`.
//!
//! A `require_approval` decision for `process.run` carries the exact override
//! that would approve this invocation and nothing else.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::config::PolicyConfig;
use super::exposure::{Hidden, StateMode, check_exposure};
use super::pattern::Pattern;
use super::target::{CanonicalProcess, ConfineLevel, MatchTarget, ProcessTarget, TargetError};
use super::tool::{PROCESS_RUN, Registry, RouteError, SHELL_LIKE};

/// The outcome of a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Verdict {
    /// The call may run.
    Allow,
    /// The call may run once a human approves this exact target.
    RequireApproval,
    /// The call must not run.
    Deny,
}

impl Verdict {
    /// The verdict as written in configuration and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::RequireApproval => "require_approval",
            Verdict::Deny => "deny",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who or what drove the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Provenance {
    /// A trusted operator or trusted automation.
    Trusted,
    /// Content the operator does not vouch for (model output shaped by
    /// untrusted input, an external trigger).
    Untrusted,
}

/// Where an override came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OverrideSource {
    /// `policy.overrides` in the configuration.
    Config,
    /// The caller's approvals for this call.
    Approval,
}

/// Why a decision came out as it did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "code", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reason {
    /// The tool ID did not route.
    Routing {
        /// Why.
        cause: RouteError,
    },
    /// The tool is not exposed.
    NotExposed {
        /// Why.
        cause: Hidden,
    },
    /// The invocation is malformed.
    MalformedTarget {
        /// Why.
        cause: TargetError,
    },
    /// A `deny` rule matched.
    DeniedByRule {
        /// Index into `policy.rules`.
        rule: usize,
    },
    /// `policy.require_confinement` asks for more confinement than the
    /// invocation has.
    ConfinementRequired {
        /// The least confinement the policy accepts.
        required: ConfineLevel,
    },
    /// An override matched the target.
    Override {
        /// Where the override came from.
        source: OverrideSource,
        /// Index into that source's list.
        index: usize,
        /// Whether the override is exact (no `*`); a pattern is broad.
        exact: bool,
    },
    /// An `allow` or `require_approval` rule decided.
    Rule {
        /// Index into `policy.rules`.
        rule: usize,
    },
    /// No rule matched; `policy.default_decision` applied.
    DefaultDecision,
    /// An `allow` was raised because untrusted provenance drove a shell-like
    /// tool.
    UntrustedShellRequiresApproval {
        /// The rule that allowed, or `None` for the default decision.
        rule: Option<usize>,
    },
}

impl Reason {
    /// The reason's code, as serialized (`"denied_by_rule"`,
    /// `"default_decision"`, …): safe to show, it holds nothing of the call.
    pub const fn code(&self) -> &'static str {
        match self {
            Reason::Routing { .. } => "routing",
            Reason::NotExposed { .. } => "not_exposed",
            Reason::MalformedTarget { .. } => "malformed_target",
            Reason::DeniedByRule { .. } => "denied_by_rule",
            Reason::ConfinementRequired { .. } => "confinement_required",
            Reason::Override { .. } => "override",
            Reason::Rule { .. } => "rule",
            Reason::DefaultDecision => "default_decision",
            Reason::UntrustedShellRequiresApproval { .. } => "untrusted_shell_requires_approval",
        }
    }

    /// The index into `policy.rules` of the rule that decided, if one did.
    pub const fn rule(&self) -> Option<usize> {
        match self {
            Reason::DeniedByRule { rule } | Reason::Rule { rule } => Some(*rule),
            Reason::UntrustedShellRequiresApproval { rule } => *rule,
            _ => None,
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Routing { cause } => write!(f, "routing refused the call: {cause}"),
            Reason::NotExposed { cause } => write!(f, "the tool is not exposed: {cause}"),
            Reason::MalformedTarget { cause } => {
                write!(
                    f,
                    "the invocation is malformed, so it has no match target: {cause}"
                )
            }
            Reason::DeniedByRule { rule } => write!(f, "policy.rules[{rule}] denies the call"),
            Reason::ConfinementRequired { required } => write!(
                f,
                "policy.require_confinement: process.run must be confined {required} or \
                 stronger, strictly, with the network off (or an allow-list within \
                 policy.allow_hosts) and no extra writable path"
            ),
            Reason::Override {
                source,
                index,
                exact,
            } => {
                let list = match source {
                    OverrideSource::Config => "policy.overrides",
                    OverrideSource::Approval => "approvals",
                };
                let kind = if *exact {
                    "exact override"
                } else {
                    "wildcard override (broad)"
                };
                write!(f, "{kind} {list}[{index}] matches the target")
            }
            Reason::Rule { rule } => write!(f, "policy.rules[{rule}] decides"),
            Reason::DefaultDecision => {
                f.write_str("no rule matches; policy.default_decision applies")
            }
            Reason::UntrustedShellRequiresApproval { rule } => {
                let from = match rule {
                    Some(i) => format!("policy.rules[{i}]"),
                    None => "policy.default_decision".to_owned(),
                };
                write!(
                    f,
                    "untrusted provenance drives a shell-like tool: the allow from {from} \
                     requires approval (untrusted_shell_requires_approval)"
                )
            }
        }
    }
}

/// The context of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Context {
    /// Who drove the call.
    pub provenance: Provenance,
    /// Where the runtime keeps state.
    pub state_mode: StateMode,
}

/// One call to decide.
#[derive(Clone, Copy, Debug)]
pub struct Query<'a> {
    /// The tool ID as called (may be an alias).
    pub tool: &'a str,
    /// The `process.run` invocation; ignored for other tools.
    pub process: Option<&'a ProcessTarget>,
    /// Provenance and state mode.
    pub context: Context,
    /// Approvals the caller holds for this call (exact overrides or
    /// patterns).
    pub approvals: &'a [Pattern],
}

/// What an approver sees and the audit log records: the tool, the context,
/// the target, and the canonical invocation with its *unresolved* overlay
/// (secret references, never resolved values).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AuditContext {
    /// The canonical tool ID.
    pub tool: String,
    /// The call's context.
    pub context: Context,
    /// The match target.
    pub target: MatchTarget,
    /// The canonical invocation.
    pub invocation: CanonicalProcess,
}

/// A decision with its reason and, for `process.run`, its target.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// Allow, require approval, or deny.
    pub verdict: Verdict,
    /// Why, as data.
    pub reason: Reason,
    /// The match target, when the call is a well-formed `process.run`.
    pub target: Option<MatchTarget>,
    /// On `require_approval` with a target: the exact override that approves
    /// this invocation and no other.
    pub suggested_override: Option<Pattern>,
    /// The approval audit context, whenever there is a target.
    pub audit: Option<AuditContext>,
}

/// Decides one call; see the [module docs](self) for the order of checks.
pub fn decide(registry: &Registry, config: &PolicyConfig, request: &Query<'_>) -> Decision {
    let mut decision = Decision {
        verdict: Verdict::Deny,
        reason: Reason::DefaultDecision,
        target: None,
        suggested_override: None,
        audit: None,
    };
    let deny = |mut d: Decision, reason| {
        d.verdict = Verdict::Deny;
        d.reason = reason;
        d.suggested_override = None;
        d
    };
    let route = match registry.route(request.tool) {
        Ok(route) => route,
        Err(cause) => return deny(decision, Reason::Routing { cause }),
    };
    let tool = route.descriptor();
    let canonical: Option<Result<CanonicalProcess, TargetError>> =
        (tool.id == PROCESS_RUN).then(|| match request.process {
            Some(p) => p.canonicalize(),
            None => Err(TargetError::MissingInvocation),
        });
    if let Some(Ok(c)) = &canonical {
        let target = c.match_target();
        decision.audit = Some(AuditContext {
            tool: tool.id.clone(),
            context: request.context,
            target: target.clone(),
            invocation: c.clone(),
        });
        decision.target = Some(target);
    }
    if let Err(cause) = check_exposure(
        &config.tools,
        request.tool,
        tool,
        request.context.state_mode,
    ) {
        return deny(decision, Reason::NotExposed { cause });
    }
    if let Some(Err(cause)) = canonical {
        return deny(decision, Reason::MalformedTarget { cause });
    }
    let target = decision.target.as_ref();
    let confine = decision
        .audit
        .as_ref()
        .and_then(|a| a.invocation.confine.as_ref());
    let confined = |level: ConfineLevel, grant: &super::hosts::AllowList| {
        confine.is_some_and(|c| c.satisfies(level, grant))
    };
    let rules = &config.policy.rules;
    let applies = |rule: &super::config::Rule| {
        rule.tool.matches(request.tool, tool)
            && match (&rule.target, target) {
                (None, _) => true,
                (Some(p), Some(t)) => p.matches(t),
                (Some(_), None) => false,
            }
            && rule
                .confinement
                .is_none_or(|level| confined(level, &rule.allow_hosts))
    };
    if let Some(rule) = rules
        .iter()
        .position(|r| r.decision == Verdict::Deny && applies(r))
    {
        return deny(decision, Reason::DeniedByRule { rule });
    }
    if let Some(required) = config.policy.require_confinement {
        if tool.id == PROCESS_RUN && !confined(required, &config.policy.allow_hosts) {
            return deny(decision, Reason::ConfinementRequired { required });
        }
    }
    if let Some(t) = target {
        let sources = [
            (OverrideSource::Config, config.policy.overrides.as_slice()),
            (OverrideSource::Approval, request.approvals),
        ];
        for (source, list) in sources {
            if let Some(index) = list.iter().position(|o| o.matches(t)) {
                decision.verdict = Verdict::Allow;
                decision.reason = Reason::Override {
                    source,
                    index,
                    exact: list[index].is_exact(),
                };
                return decision;
            }
        }
    }
    // Most restrictive matching rule; the first of equals.
    let matched = rules
        .iter()
        .enumerate()
        .filter(|(_, r)| applies(r))
        .max_by(|(ia, a), (ib, b)| a.decision.cmp(&b.decision).then(ib.cmp(ia)));
    let (mut verdict, rule) = match matched {
        Some((i, r)) => (r.decision, Some(i)),
        None => (config.policy.default_decision, None),
    };
    let mut reason = rule.map_or(Reason::DefaultDecision, |rule| Reason::Rule { rule });
    let shell_like = SHELL_LIKE.contains(&request.tool) || SHELL_LIKE.contains(&tool.id.as_str());
    if verdict == Verdict::Allow
        && shell_like
        && request.context.provenance == Provenance::Untrusted
        && config.policy.untrusted_shell_requires_approval
    {
        verdict = Verdict::RequireApproval;
        reason = Reason::UntrustedShellRequiresApproval { rule };
    }
    decision.verdict = verdict;
    decision.reason = reason;
    if verdict == Verdict::RequireApproval {
        decision.suggested_override = decision.target.as_ref().map(Pattern::exact);
    }
    decision
}

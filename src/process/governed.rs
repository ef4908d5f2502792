//! The policy-aware entry point of `process.run`: decide, then launch only on
//! `allow`.
//!
//! The decision is made over the *validated* [`Invocation`] (normalized cwd,
//! sorted overlay with secret references unresolved), so the match target is
//! the identity of what the launcher will actually run. On `deny` nothing is
//! launched; on `require_approval` nothing is launched either and the caller
//! gets an [`ApprovalRequired`] carrying the match target and the exact
//! override that would approve this invocation. Present that override again
//! in [`Gate::approvals`] to launch.

use std::sync::Arc;

use crate::policy::{
    ConfineTarget, Context, Decision, MatchTarget, PROCESS_RUN, Pattern, PolicyConfig,
    ProcessTarget, Query, Registry, TargetEnvValue, Verdict, decide,
};

use super::evidence::Evidence;
use super::invocation::{EnvValue, Invocation};
use super::launch::{LaunchOptions, ProcessError, Running, launch};
use crate::confine::{Confinement, Enforcement, Network};

/// What the decision needs besides the invocation.
#[derive(Clone, Copy, Debug)]
pub struct Gate<'a> {
    /// The tool registry (routing and namespace checks).
    pub registry: &'a Registry,
    /// The validated policy configuration.
    pub config: &'a PolicyConfig,
    /// Provenance and state mode of the call.
    pub context: Context,
    /// Approvals the caller holds: exact overrides or `*` patterns.
    pub approvals: &'a [Pattern],
}

/// A call that needs a human approval before it may launch.
///
/// It carries the match target, which includes the unresolved environment
/// overlay by design (an approval must bind the whole process identity); it
/// never holds a resolved secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApprovalRequired {
    /// The match target of the invocation.
    pub target: MatchTarget,
    /// The exact override that approves this invocation and no other.
    pub suggested_override: Pattern,
    /// The full decision, with its reason and audit context.
    pub decision: Decision,
}

/// The outcome of a governed launch.
#[derive(Debug)]
#[must_use]
#[non_exhaustive]
pub enum Governed<T> {
    /// Policy allowed the call and the process was launched.
    Launched {
        /// The launched process, or its evidence.
        value: T,
        /// The `allow` decision.
        decision: Box<Decision>,
    },
    /// Policy requires approval; nothing was launched.
    ApprovalRequired(Box<ApprovalRequired>),
    /// Policy denied the call; nothing was launched.
    Denied(Box<Decision>),
}

/// Policy's view of a validated invocation: the executable as written, the
/// arguments, the normalized cwd, and the overlay with secret references
/// left unresolved.
pub fn policy_target(invocation: &Invocation) -> ProcessTarget {
    ProcessTarget {
        executable: invocation.executable().to_owned(),
        argv: invocation.args().to_vec(),
        // The launcher's root is `""`; policy spells an absent cwd `None`.
        cwd: invocation
            .cwd()
            .map(|c| c.as_str())
            .filter(|c| !c.is_empty())
            .map(str::to_owned),
        env_overlay: invocation
            .env()
            .iter()
            .map(|(k, v)| {
                let value = match v {
                    EnvValue::Literal(l) => TargetEnvValue::Literal(l.clone()),
                    EnvValue::Secret(r) => TargetEnvValue::SecretRef(r.as_str().to_owned()),
                };
                (k.to_owned(), value)
            })
            .collect(),
        confine: Some(confine_target(invocation.confinement())),
    }
}

/// Policy's view of a confinement: the same fields, paths as text. A
/// confinement path is absolute (validated), so it starts with `/`; one that
/// is not UTF-8 is written `bytes:` and the hex of its bytes, which no
/// other path can be written as.
pub fn confine_target(c: &Confinement) -> ConfineTarget {
    let paths = |v: &[std::path::PathBuf]| {
        v.iter()
            .map(|p| match p.to_str() {
                Some(s) => s.to_owned(),
                None => {
                    let mut out = String::from("bytes:");
                    for b in p.as_os_str().as_encoded_bytes() {
                        out.push_str(&format!("{b:02x}"));
                    }
                    out
                }
            })
            .collect::<Vec<_>>()
    };
    ConfineTarget {
        fs: c.fs,
        network_off: c.network != Network::On,
        allow_hosts: match c.allow_list() {
            Ok(list) => list.patterns().map(ToString::to_string).collect(),
            // Refused at validation; never matched as anything else.
            Err(_) => c.allow_hosts.clone(),
        },
        scoped: c.scoped,
        allow_read: paths(&c.allow_read),
        allow_write: paths(&c.allow_write),
        deny_read: paths(&c.deny_read),
        protect: paths(&c.protect),
        hide: paths(&c.hide),
        best_effort: c.enforcement == Enforcement::BestEffort,
        min_abi: c.min_abi,
    }
}

/// Decides whether `invocation` may run as `process.run`.
pub fn decide_invocation(invocation: &Invocation, gate: &Gate<'_>) -> Decision {
    let target = policy_target(invocation);
    decide(
        gate.registry,
        gate.config,
        &Query {
            tool: PROCESS_RUN,
            process: Some(&target),
            context: gate.context,
            approvals: gate.approvals,
        },
    )
}

/// Splits a decision into "go" or the refusal to return.
fn gate_outcome<T>(decision: Decision) -> Result<Decision, Governed<T>> {
    match decision.verdict {
        Verdict::Allow => Ok(decision),
        Verdict::RequireApproval => match (&decision.target, &decision.suggested_override) {
            (Some(target), Some(suggested)) => {
                Err(Governed::ApprovalRequired(Box::new(ApprovalRequired {
                    target: target.clone(),
                    suggested_override: suggested.clone(),
                    decision,
                })))
            }
            // Without a target there is nothing to approve: fail closed.
            _ => Err(Governed::Denied(Box::new(decision))),
        },
        _ => Err(Governed::Denied(Box::new(decision))),
    }
}

/// Decides on `invocation` as [`launch_governed`] does, without launching:
/// the allowing decision, or the refusal ([`Governed::Denied`],
/// [`Governed::ApprovalRequired`]) to return. For a caller that launches
/// through another path once allowed (`custodian run`, through its
/// one-request runtime).
///
/// # Errors
///
/// The refusal: nothing may be launched.
pub fn decide_governed(invocation: &Invocation, gate: &Gate<'_>) -> Result<Decision, Governed<()>> {
    gate_outcome(decide_invocation(invocation, gate))
}

/// Decides, and launches `invocation` only if policy allows it.
///
/// # Errors
///
/// A [`ProcessError`] when an allowed launch fails (as [`launch`]). A denial
/// or a required approval is not an error: it is a [`Governed`] outcome, and
/// nothing was started.
pub fn launch_governed(
    invocation: Invocation,
    options: &LaunchOptions,
    gate: &Gate<'_>,
) -> Result<Governed<Running>, ProcessError> {
    let decision = match gate_outcome(decide_invocation(&invocation, gate)) {
        Ok(d) => d,
        Err(refused) => return Ok(refused),
    };
    let running = launch(invocation, options)?;
    Ok(Governed::Launched {
        value: running,
        decision: Box::new(decision),
    })
}

/// [`launch_governed`], then waits for the evidence.
///
/// # Errors
///
/// As [`launch_governed`].
pub async fn run_governed(
    invocation: Invocation,
    options: &LaunchOptions,
    gate: &Gate<'_>,
) -> Result<Governed<Arc<Evidence>>, ProcessError> {
    Ok(match launch_governed(invocation, options, gate)? {
        Governed::Launched { value, decision } => Governed::Launched {
            value: value.settled().await,
            decision,
        },
        Governed::ApprovalRequired(a) => Governed::ApprovalRequired(a),
        Governed::Denied(d) => Governed::Denied(d),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Provenance, StateMode};
    use crate::process::InvocationSpec;
    use crate::process::invocation::SecretRef;

    fn invocation() -> Invocation {
        Invocation::validate(
            InvocationSpec::new("git")
                .with_args(["commit", "-m", "a b"])
                .with_cwd("a/../b/./c")
                .with_env("TOKEN", EnvValue::Secret(SecretRef::new("vault:gh")))
                .with_env("PATH", EnvValue::Literal("/usr/bin".into())),
        )
        .unwrap()
    }

    #[test]
    fn policy_sees_the_validated_identity_with_unresolved_secrets() {
        let target = policy_target(&invocation()).match_target().unwrap();
        assert_eq!(
            target.as_str(),
            r#"{"executable":"git","argv":["commit","-m","a b"],"cwd":"b/c","env":{"PATH":"/usr/bin","TOKEN":{"secret_ref":"vault:gh"}}}"#
        );
    }

    #[test]
    fn refusals_never_reach_the_launcher() {
        let config =
            PolicyConfig::from_toml_str("version = 1\n[tools]\nallow = [\"process.run\"]").unwrap();
        let registry = Registry::new();
        let gate = Gate {
            registry: &registry,
            config: &config,
            context: Context {
                provenance: Provenance::Untrusted,
                state_mode: StateMode::Local,
            },
            approvals: &[],
        };
        // No runtime here: a launch attempt would fail with NoRuntime, so an
        // Ok refusal proves nothing was launched.
        match launch_governed(invocation(), &LaunchOptions::new("."), &gate).unwrap() {
            Governed::ApprovalRequired(a) => {
                assert_eq!(a.suggested_override.as_str(), a.target.as_str());
                assert_eq!(a.decision.verdict, Verdict::RequireApproval);
            }
            other => panic!("{other:?}"),
        }
        let shared = Gate {
            context: Context {
                provenance: Provenance::Trusted,
                state_mode: StateMode::Shared,
            },
            ..gate
        };
        assert!(matches!(
            launch_governed(invocation(), &LaunchOptions::new("."), &shared).unwrap(),
            Governed::Denied(_)
        ));
        // Allowed: the launcher is reached (and fails for want of a runtime).
        let approval = [policy_target(&invocation())
            .match_target()
            .map(|t| Pattern::exact(&t))
            .unwrap()];
        let approved = Gate {
            approvals: &approval,
            ..gate
        };
        assert!(matches!(
            launch_governed(invocation(), &LaunchOptions::new("."), &approved),
            Err(ProcessError::NoRuntime)
        ));
    }
}

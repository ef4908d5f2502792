//! Unit tests of the decision rules, one behaviour each.

use super::decision::Reason;
use super::exposure::Hidden;
use super::tool::{BASH, TOOL_EXEC, ToolDescriptor};
use super::*;

fn config(text: &str) -> PolicyConfig {
    PolicyConfig::from_toml_str(&format!("version = 1\n{text}")).unwrap()
}

fn git(args: &[&str]) -> ProcessTarget {
    ProcessTarget {
        executable: "git".into(),
        argv: args.iter().map(|s| (*s).to_owned()).collect(),
        ..ProcessTarget::default()
    }
}

fn ctx(provenance: Provenance) -> Context {
    Context {
        provenance,
        state_mode: StateMode::Local,
    }
}

fn run(
    c: &PolicyConfig,
    p: &ProcessTarget,
    provenance: Provenance,
    approvals: &[Pattern],
) -> Decision {
    decide(
        &Registry::new(),
        c,
        &Query {
            tool: PROCESS_RUN,
            process: Some(p),
            context: ctx(provenance),
            approvals,
        },
    )
}

fn call(c: &PolicyConfig, tool: &str, provenance: Provenance) -> Decision {
    decide(
        &Registry::new(),
        c,
        &Query {
            tool,
            process: None,
            context: ctx(provenance),
            approvals: &[],
        },
    )
}

const ALLOW_ALL: &str = r#"
[tools]
allow = ["process.run", "bash", "fs.write"]
[policy]
default_decision = "allow"
"#;

#[test]
fn trusted_broad_allow_allows() {
    let d = run(
        &config(ALLOW_ALL),
        &git(&["status"]),
        Provenance::Trusted,
        &[],
    );
    assert_eq!(d.verdict, Verdict::Allow);
    assert_eq!(d.reason, Reason::DefaultDecision);
    assert!(d.target.is_some() && d.suggested_override.is_none());
}

#[test]
fn unroutable_tool_is_denied() {
    let d = call(&config(ALLOW_ALL), "acme.nope", Provenance::Trusted);
    assert_eq!(d.verdict, Verdict::Deny);
    assert!(matches!(d.reason, Reason::Routing { .. }));
}

#[test]
fn stale_reserved_registration_is_denied_at_decision_time() {
    let registry = Registry::restore_unchecked([(
        "evil".to_owned(),
        ToolDescriptor {
            id: "process.exec".into(),
            group: tool::Group::Plugin,
            tier: tool::ToolTier::Basic,
            state_changing: false,
        },
    )]);
    let c = config("[tools]\ndefault_mode = \"allow\"\n[policy]\ndefault_decision = \"allow\"");
    let d = decide(
        &registry,
        &c,
        &Query {
            tool: "process.exec",
            process: None,
            context: ctx(Provenance::Trusted),
            approvals: &[],
        },
    );
    assert_eq!(d.verdict, Verdict::Deny);
    assert!(matches!(
        d.reason,
        Reason::Routing {
            cause: RouteError::ReservedRegistration { .. }
        }
    ));
}

#[test]
fn hidden_process_run_is_denied_even_with_an_override() {
    let c = config("[tools]\nallow = [\"*\"]\n[policy]\ndefault_decision = \"allow\"");
    let p = git(&["status"]);
    let exact = Pattern::exact(&p.match_target().unwrap());
    let d = run(&c, &p, Provenance::Trusted, &[exact]);
    assert_eq!(d.verdict, Verdict::Deny);
    assert_eq!(
        d.reason,
        Reason::NotExposed {
            cause: Hidden::ProcessRunNotExactlyAllowed
        }
    );
}

#[test]
fn shared_state_mode_denies_process_run() {
    let c = config(ALLOW_ALL);
    let p = git(&[]);
    let d = decide(
        &Registry::new(),
        &c,
        &Query {
            tool: PROCESS_RUN,
            process: Some(&p),
            context: Context {
                provenance: Provenance::Trusted,
                state_mode: StateMode::Shared,
            },
            approvals: &[],
        },
    );
    assert_eq!(d.verdict, Verdict::Deny);
    assert_eq!(
        d.reason,
        Reason::NotExposed {
            cause: Hidden::SharedStateMode
        }
    );
}

#[test]
fn malformed_invocation_has_no_target_and_no_override() {
    let c = config("[tools]\nallow = [\"process.run\"]");
    let mut p = git(&["status"]);
    p.cwd = Some("../outside".into());
    let d = run(
        &c,
        &p,
        Provenance::Untrusted,
        &[Pattern::parse("*").unwrap()],
    );
    assert_eq!(d.verdict, Verdict::Deny);
    assert_eq!(
        d.reason,
        Reason::MalformedTarget {
            cause: TargetError::ParentInCwd
        }
    );
    assert!(d.target.is_none() && d.suggested_override.is_none() && d.audit.is_none());
    let missing = call(&c, PROCESS_RUN, Provenance::Trusted);
    assert_eq!(
        missing.reason,
        Reason::MalformedTarget {
            cause: TargetError::MissingInvocation
        }
    );
}

#[test]
fn untrusted_provenance_raises_broad_allow_for_every_shell_like_tool() {
    let c = config(ALLOW_ALL);
    let p = git(&["status"]);
    let d = run(&c, &p, Provenance::Untrusted, &[]);
    assert_eq!(d.verdict, Verdict::RequireApproval);
    assert_eq!(
        d.reason,
        Reason::UntrustedShellRequiresApproval { rule: None }
    );
    for tool in [BASH, TOOL_EXEC] {
        let d = call(&c, tool, Provenance::Untrusted);
        assert_eq!(d.verdict, Verdict::RequireApproval, "{tool}");
        assert!(d.target.is_none() && d.suggested_override.is_none());
    }
    // Not shell-like: untouched.
    assert_eq!(
        call(&c, "fs.write", Provenance::Untrusted).verdict,
        Verdict::Allow
    );
    // Trusted: untouched.
    assert_eq!(call(&c, BASH, Provenance::Trusted).verdict, Verdict::Allow);
}

#[test]
fn untrusted_shell_flag_off_keeps_allow() {
    let c = config(&format!(
        "{ALLOW_ALL}untrusted_shell_requires_approval = false\n"
    ));
    assert_eq!(
        run(&c, &git(&[]), Provenance::Untrusted, &[]).verdict,
        Verdict::Allow
    );
}

#[test]
fn untrusted_raise_names_the_allowing_rule() {
    let c = config(
        "[tools]\nallow = [\"process.run\"]\n[[policy.rules]]\ntool = \"group:environment\"\ndecision = \"allow\"",
    );
    let d = run(&c, &git(&[]), Provenance::Untrusted, &[]);
    assert_eq!(
        d.reason,
        Reason::UntrustedShellRequiresApproval { rule: Some(0) }
    );
}

#[test]
fn suggested_override_approves_exactly_that_invocation() {
    let c = config("[tools]\nallow = [\"process.run\"]");
    let mut p = git(&["commit", "-m", "a b"]);
    p.cwd = Some("repo".into());
    p.env_overlay = vec![("PATH".into(), TargetEnvValue::Literal("/usr/bin".into()))];
    let d = run(&c, &p, Provenance::Untrusted, &[]);
    assert_eq!(d.verdict, Verdict::RequireApproval);
    assert_eq!(d.reason, Reason::DefaultDecision);
    let o = d.suggested_override.unwrap();
    assert!(o.is_exact());
    assert_eq!(o.as_str(), d.target.unwrap().as_str());

    let approved = run(&c, &p, Provenance::Untrusted, std::slice::from_ref(&o));
    assert_eq!(approved.verdict, Verdict::Allow);
    assert_eq!(
        approved.reason,
        Reason::Override {
            source: OverrideSource::Approval,
            index: 0,
            exact: true
        }
    );

    // The same approval does not authorize a different process identity.
    let mut split = p.clone();
    split.argv = vec!["commit".into(), "-m".into(), "a".into(), "b".into()];
    let mut cwd = p.clone();
    cwd.cwd = Some("other".into());
    let mut path = p.clone();
    path.env_overlay[0].1 = TargetEnvValue::Literal("/tmp/evil:/usr/bin".into());
    let mut extra = p.clone();
    extra.env_overlay.push((
        "LD_PRELOAD".into(),
        TargetEnvValue::Literal("/tmp/x.so".into()),
    ));
    for other in [split, cwd, path, extra] {
        let d = run(&c, &other, Provenance::Trusted, std::slice::from_ref(&o));
        assert_eq!(d.verdict, Verdict::RequireApproval, "{other:?}");
    }
}

#[test]
fn config_overrides_are_standing_approvals() {
    let target = git(&["status"]).match_target().unwrap();
    let c = config(&format!(
        "[tools]\nallow = [\"process.run\"]\n[policy]\ndefault_decision = \"deny\"\noverrides = ['{}']",
        target.as_str()
    ));
    let d = run(&c, &git(&["status"]), Provenance::Untrusted, &[]);
    assert_eq!(
        d.reason,
        Reason::Override {
            source: OverrideSource::Config,
            index: 0,
            exact: true
        }
    );
    assert_eq!(
        run(&c, &git(&["push"]), Provenance::Untrusted, &[]).verdict,
        Verdict::Deny
    );
}

#[test]
fn wildcard_override_is_broad_and_says_so() {
    let c = config("[tools]\nallow = [\"process.run\"]");
    let pattern =
        Pattern::parse(r#"{"executable":"git","argv":["status*"],"cwd":".","env":{}}"#).unwrap();
    // Written for `git status…`, it also approves a second argument.
    let d = run(
        &c,
        &git(&["status", "; rm -rf ~"]),
        Provenance::Untrusted,
        &[pattern],
    );
    assert_eq!(d.verdict, Verdict::Allow);
    assert_eq!(
        d.reason,
        Reason::Override {
            source: OverrideSource::Approval,
            index: 0,
            exact: false
        }
    );
}

#[test]
fn deny_rule_beats_any_override() {
    let c = config(
        r#"[tools]
allow = ["process.run"]
[policy]
overrides = ["*"]
[[policy.rules]]
tool = "process.run"
decision = "deny"
target = '{"executable":"git","argv":["push"*'
"#,
    );
    let d = run(
        &c,
        &git(&["push", "--force"]),
        Provenance::Trusted,
        &[Pattern::parse("*").unwrap()],
    );
    assert_eq!(d.verdict, Verdict::Deny);
    assert_eq!(d.reason, Reason::DeniedByRule { rule: 0 });
    assert!(d.target.is_some() && d.suggested_override.is_none());
    assert_eq!(
        run(&c, &git(&["pull"]), Provenance::Trusted, &[]).verdict,
        Verdict::Allow
    );
}

#[test]
fn most_restrictive_matching_rule_wins() {
    let c = config(
        r#"[tools]
allow = ["process.run"]
[policy]
default_decision = "deny"
[[policy.rules]]
tool = "process.run"
decision = "allow"
[[policy.rules]]
tool = "process.run"
decision = "require_approval"
target = '{"executable":"git",*'
"#,
    );
    let d = run(&c, &git(&["status"]), Provenance::Trusted, &[]);
    assert_eq!(d.verdict, Verdict::RequireApproval);
    assert_eq!(d.reason, Reason::Rule { rule: 1 });
    let ls = ProcessTarget {
        executable: "ls".into(),
        ..ProcessTarget::default()
    };
    let d = run(&c, &ls, Provenance::Trusted, &[]);
    assert_eq!(
        (d.verdict, d.reason),
        (Verdict::Allow, Reason::Rule { rule: 0 })
    );
}

#[test]
fn default_decision_applies_when_no_rule_matches() {
    let c = config("[tools]\nallow = [\"process.run\"]\n[policy]\ndefault_decision = \"deny\"");
    let d = run(&c, &git(&[]), Provenance::Trusted, &[]);
    assert_eq!(
        (d.verdict, d.reason),
        (Verdict::Deny, Reason::DefaultDecision)
    );
}

#[test]
fn audit_context_carries_the_unresolved_overlay() {
    let c = config("[tools]\nallow = [\"process.run\"]");
    let mut p = git(&["push"]);
    p.env_overlay = vec![
        (
            "GH_TOKEN".into(),
            TargetEnvValue::SecretRef("vault:github".into()),
        ),
        ("A".into(), TargetEnvValue::Literal("1".into())),
    ];
    let d = run(&c, &p, Provenance::Untrusted, &[]);
    let audit = d.audit.unwrap();
    assert_eq!(audit.tool, PROCESS_RUN);
    assert_eq!(audit.target, d.target.unwrap());
    assert_eq!(
        audit.invocation.env_overlay,
        vec![
            ("A".into(), TargetEnvValue::Literal("1".into())),
            (
                "GH_TOKEN".into(),
                TargetEnvValue::SecretRef("vault:github".into())
            ),
        ]
    );
    let json = serde_json::to_string(&audit).unwrap();
    assert!(
        json.contains(r#"["GH_TOKEN",{"secret_ref":"vault:github"}]"#),
        "{json}"
    );
}

#[test]
fn aliased_call_is_decided_as_shell_like() {
    // tool.exec resolves to bash; a rule on bash covers the alias too.
    let c = config(
        "[tools]\nallow = [\"bash\"]\n[[policy.rules]]\ntool = \"bash\"\ndecision = \"allow\"",
    );
    let d = call(&c, TOOL_EXEC, Provenance::Untrusted);
    assert_eq!(
        d.reason,
        Reason::UntrustedShellRequiresApproval { rule: Some(0) }
    );
}

fn confined(fs: FsMode) -> ConfineTarget {
    ConfineTarget {
        fs,
        network_off: true,
        scoped: true,
        ..ConfineTarget::default()
    }
}

fn with_confine(p: &ProcessTarget, c: ConfineTarget) -> ProcessTarget {
    ProcessTarget {
        confine: Some(c),
        ..p.clone()
    }
}

#[test]
fn an_unconfined_target_is_what_it_always_was() {
    let plain = git(&["status"]);
    let none = with_confine(&plain, ConfineTarget::default());
    let expected = r#"{"executable":"git","argv":["status"],"cwd":".","env":{}}"#;
    assert_eq!(plain.match_target().unwrap().as_str(), expected);
    assert_eq!(none.match_target().unwrap().as_str(), expected);
}

#[test]
fn protect_and_hide_reach_the_target_only_when_given() {
    let mut c = confined(FsMode::WorkspaceWrite);
    c.protect = vec!["b".into(), "a".into()];
    c.hide = vec!["secrets".into()];
    let t = with_confine(&git(&["status"]), c).match_target().unwrap();
    assert!(
        t.as_str()
            .ends_with(r#""enforcement":"strict","protect":["a","b"],"hide":["secrets"]}}"#),
        "{}",
        t.as_str()
    );
    let plain = with_confine(&git(&["status"]), confined(FsMode::WorkspaceWrite))
        .match_target()
        .unwrap();
    assert!(!plain.as_str().contains("protect"), "{}", plain.as_str());
}

#[test]
fn the_confinement_is_part_of_the_target_in_canonical_form() {
    let mut c = confined(FsMode::WorkspaceWrite);
    c.deny_read = vec![
        "/home/u/.ssh".into(),
        "/etc/*".into(),
        "/home/u/.ssh".into(),
    ];
    let t = with_confine(&git(&["status"]), c.clone())
        .match_target()
        .unwrap();
    assert_eq!(
        t.as_str(),
        r#"{"executable":"git","argv":["status"],"cwd":".","env":{},"confine":{"fs":"workspace-write","network":"off","scoped":true,"allow_read":[],"allow_write":[],"deny_read":["/etc/\u002a","/home/u/.ssh"],"enforcement":"strict"}}"#
    );
    // Every field tells runs apart.
    let base = with_confine(&git(&["status"]), confined(FsMode::ReadOnly));
    let variants = [
        confined(FsMode::WorkspaceWrite),
        ConfineTarget {
            network_off: false,
            ..confined(FsMode::ReadOnly)
        },
        ConfineTarget {
            scoped: false,
            ..confined(FsMode::ReadOnly)
        },
        ConfineTarget {
            allow_read: vec!["/opt".into()],
            ..confined(FsMode::ReadOnly)
        },
        ConfineTarget {
            allow_write: vec!["/opt".into()],
            ..confined(FsMode::ReadOnly)
        },
        ConfineTarget {
            deny_read: vec!["/opt".into()],
            ..confined(FsMode::ReadOnly)
        },
        ConfineTarget {
            protect: vec!["build.rs".into()],
            ..confined(FsMode::ReadOnly)
        },
        ConfineTarget {
            hide: vec!["secrets".into()],
            ..confined(FsMode::ReadOnly)
        },
        ConfineTarget {
            best_effort: true,
            ..confined(FsMode::ReadOnly)
        },
        ConfineTarget {
            min_abi: Some(6),
            ..confined(FsMode::ReadOnly)
        },
    ];
    let base_target = base.match_target().unwrap();
    for v in variants {
        let other = with_confine(&git(&["status"]), v.clone())
            .match_target()
            .unwrap();
        assert_ne!(other, base_target, "{v:?}");
    }
}

#[test]
fn an_approval_of_a_confined_run_never_approves_it_unconfined() {
    let c = config(ALLOW_ALL);
    let plain = git(&["push"]);
    let ro = with_confine(&plain, confined(FsMode::ReadOnly));
    let approval = Pattern::exact(&ro.match_target().unwrap());
    let d = run(
        &c,
        &ro,
        Provenance::Untrusted,
        std::slice::from_ref(&approval),
    );
    assert_eq!(d.verdict, Verdict::Allow, "{d:?}");
    for other in [
        plain.clone(),
        with_confine(&plain, confined(FsMode::WorkspaceWrite)),
        with_confine(
            &plain,
            ConfineTarget {
                network_off: false,
                ..confined(FsMode::ReadOnly)
            },
        ),
    ] {
        let d = run(
            &c,
            &other,
            Provenance::Untrusted,
            std::slice::from_ref(&approval),
        );
        assert_eq!(d.verdict, Verdict::RequireApproval, "{other:?}: {d:?}");
    }
}

#[test]
fn require_confinement_denies_a_weaker_run_whatever_the_approvals() {
    let c = config(&format!(
        "{ALLOW_ALL}\nrequire_confinement = \"workspace-write\"\n"
    ));
    assert_eq!(
        c.policy.require_confinement,
        Some(ConfineLevel::WorkspaceWrite)
    );
    let plain = git(&["status"]);
    let everything = [Pattern::parse("*").unwrap()];
    let weaker = [
        plain.clone(),
        with_confine(&plain, ConfineTarget::default()),
        with_confine(
            &plain,
            ConfineTarget {
                network_off: false,
                ..confined(FsMode::ReadOnly)
            },
        ),
        with_confine(
            &plain,
            ConfineTarget {
                best_effort: true,
                ..confined(FsMode::ReadOnly)
            },
        ),
        with_confine(
            &plain,
            ConfineTarget {
                allow_write: vec!["/".into()],
                ..confined(FsMode::WorkspaceWrite)
            },
        ),
        with_confine(
            &plain,
            ConfineTarget {
                network_off: true,
                ..ConfineTarget::default()
            },
        ),
    ];
    for p in weaker {
        let d = run(&c, &p, Provenance::Trusted, &everything);
        assert_eq!(d.verdict, Verdict::Deny, "{p:?}");
        assert_eq!(
            d.reason,
            Reason::ConfinementRequired {
                required: ConfineLevel::WorkspaceWrite
            }
        );
    }
    for fs in [FsMode::WorkspaceWrite, FsMode::ReadOnly] {
        let p = with_confine(&plain, confined(fs));
        let d = run(&c, &p, Provenance::Trusted, &[]);
        assert_eq!(d.verdict, Verdict::Allow, "{fs:?}: {d:?}");
    }
    let strict = config(&format!(
        "{ALLOW_ALL}\nrequire_confinement = \"read-only\"\n"
    ));
    let ww = with_confine(&plain, confined(FsMode::WorkspaceWrite));
    assert_eq!(
        run(&strict, &ww, Provenance::Trusted, &[]).verdict,
        Verdict::Deny
    );
    // Other tools are not process runs: the requirement does not touch them.
    assert_eq!(
        call(&c, "fs.write", Provenance::Trusted).verdict,
        Verdict::Allow
    );
}

#[test]
fn a_rule_with_a_confinement_applies_only_to_runs_confined_that_much() {
    let c = config(
        r#"
[tools]
allow = ["process.run"]

[policy]
default_decision = "deny"
untrusted_shell_requires_approval = false

[[policy.rules]]
tool = "process.run"
decision = "allow"
confinement = "read-only"
"#,
    );
    let plain = git(&["status"]);
    assert_eq!(
        run(&c, &plain, Provenance::Trusted, &[]).verdict,
        Verdict::Deny
    );
    let ro = with_confine(&plain, confined(FsMode::ReadOnly));
    let d = run(&c, &ro, Provenance::Trusted, &[]);
    assert_eq!(
        (d.verdict, d.reason),
        (Verdict::Allow, Reason::Rule { rule: 0 })
    );
    let ww = with_confine(&plain, confined(FsMode::WorkspaceWrite));
    assert_eq!(
        run(&c, &ww, Provenance::Trusted, &[]).verdict,
        Verdict::Deny
    );
}

#[test]
fn a_confinement_is_refused_where_it_cannot_apply() {
    let on_other_tool = PolicyConfig::from_toml_str(
        "version = 1\n[[policy.rules]]\ntool = \"bash\"\ndecision = \"allow\"\nconfinement = \"read-only\"\n",
    );
    assert!(
        matches!(
            on_other_tool,
            Err(PolicyConfigError::ConfinementOnNonProcessRule { ref at }) if at == "policy.rules[0]"
        ),
        "{on_other_tool:?}"
    );
    let unknown =
        PolicyConfig::from_toml_str("version = 1\n[policy]\nrequire_confinement = \"none\"\n");
    assert!(
        matches!(unknown, Err(PolicyConfigError::Parse { .. })),
        "{unknown:?}"
    );
}

/// The three settings a policy needs to run anything (`process.run` in
/// `tools.allow`, an allow rule, no untrusted raise) used to be left for
/// the embedder to find: `allow_executables` sets them, for exactly the
/// executables named.
#[test]
fn allow_executables_allows_exactly_the_named_executables() {
    let c = PolicyConfig::allow_executables(["git", "a*b"]).unwrap();
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
    for provenance in [Provenance::Trusted, Provenance::Untrusted] {
        let d = run(&c, &git(&["push", "--force"]), provenance, &[]);
        assert_eq!(d.verdict, Verdict::Allow, "{provenance:?}: {:?}", d.reason);
        assert_eq!(d.reason, Reason::Rule { rule: 0 });
        let exact = |exe: &str| ProcessTarget {
            executable: exe.into(),
            ..ProcessTarget::default()
        };
        assert_eq!(
            run(&c, &exact("a*b"), provenance, &[]).verdict,
            Verdict::Allow
        );
        // The name as written: no other spelling, prefix or wildcard match.
        for other in ["/usr/bin/git", "gitk", "gi", "ab", "axb", "sh"] {
            let d = run(&c, &exact(other), provenance, &[]);
            assert_eq!(d.verdict, Verdict::Deny, "{other}");
            assert_eq!(d.reason, Reason::DefaultDecision, "{other}");
        }
    }
    // Only `process.run` is exposed.
    assert_eq!(call(&c, BASH, Provenance::Trusted).verdict, Verdict::Deny);
}

#[test]
fn allow_executables_refuses_what_could_never_run() {
    for (list, index) in [(vec!["git", ""], 1), (vec!["a\0b"], 0), (vec!["bin/"], 0)] {
        assert!(
            matches!(
                PolicyConfig::allow_executables(&list),
                Err(PolicyConfigError::InvalidExecutable { index: i, .. }) if i == index
            ),
            "{list:?}"
        );
    }
    // A target this long is truncated: a pattern over the name would never
    // match, so it is refused rather than silently allowing nothing.
    assert!(matches!(
        PolicyConfig::allow_executables(["ok", &"x".repeat(MAX_TARGET_BYTES)]),
        Err(PolicyConfigError::ExecutableTooLong { index: 1 })
    ));
    let longest = "x".repeat(MAX_TARGET_BYTES - 200);
    let c = PolicyConfig::allow_executables([&longest]).unwrap();
    let exe = ProcessTarget {
        executable: longest.clone(),
        argv: vec!["y".repeat(1000)],
        ..ProcessTarget::default()
    };
    assert!(exe.match_target().unwrap().is_truncated());
    assert_eq!(
        run(&c, &exe, Provenance::Trusted, &[]).verdict,
        Verdict::Allow
    );
}

/// `Reason::code` is the serialized tag, so a code shown in place of a
/// reason (a completion's denied launch) is the one the JSON carries.
#[test]
fn reason_codes_are_the_serialized_tags() {
    let reasons = [
        Reason::Routing {
            cause: RouteError::InvalidId,
        },
        Reason::NotExposed {
            cause: Hidden::NotAllowed,
        },
        Reason::MalformedTarget {
            cause: TargetError::EmptyExecutable,
        },
        Reason::DeniedByRule { rule: 2 },
        Reason::ConfinementRequired {
            required: ConfineLevel::ReadOnly,
        },
        Reason::Override {
            source: OverrideSource::Config,
            index: 0,
            exact: true,
        },
        Reason::Rule { rule: 1 },
        Reason::DefaultDecision,
        Reason::UntrustedShellRequiresApproval { rule: Some(3) },
    ];
    for r in &reasons {
        let json = serde_json::to_value(r).unwrap();
        assert_eq!(json["code"], r.code(), "{r:?}");
        assert_eq!(
            json.get("rule").and_then(|v| v.as_u64()),
            r.rule().map(|i| i as u64)
        );
    }
}

fn allowing(hosts: &[&str]) -> ConfineTarget {
    ConfineTarget {
        allow_hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
        ..confined(FsMode::WorkspaceWrite)
    }
}

#[test]
fn an_allow_list_is_part_of_the_target_and_an_approval_of_one_never_approves_another() {
    let plain = git(&["fetch"]);
    let a = with_confine(&plain, allowing(&["pypi.org", "*.crates.io"]));
    let t = a.match_target().unwrap();
    assert!(
        t.as_str().contains(
            r#""confine":{"fs":"workspace-write","network":"allow","allow_hosts":["\u002a.crates.io","pypi.org"],"scoped":true"#
        ),
        "{}",
        t.as_str()
    );
    // The same list in another order is the same target.
    let same = with_confine(&plain, allowing(&["*.crates.io", "pypi.org"]));
    assert_eq!(same.match_target().unwrap().as_str(), t.as_str());
    // An exact approval of this run approves it, and not a wider list, nor
    // the same run with the host's network, nor with the network off.
    let c = config("[tools]\nallow = [\"process.run\"]\n[policy]\ndefault_decision = \"deny\"\n");
    let approval = [Pattern::parse(t.as_str()).unwrap()];
    assert_eq!(
        run(&c, &a, Provenance::Trusted, &approval).verdict,
        Verdict::Allow
    );
    for other in [
        allowing(&["pypi.org", "*.crates.io", "evil.test"]),
        allowing(&["pypi.org"]),
        ConfineTarget {
            network_off: false,
            ..confined(FsMode::WorkspaceWrite)
        },
        confined(FsMode::WorkspaceWrite),
    ] {
        let p = with_confine(&plain, other);
        assert_eq!(
            run(&c, &p, Provenance::Trusted, &approval).verdict,
            Verdict::Deny,
            "{:?}",
            p.match_target().unwrap().as_str()
        );
    }
    // Without an allow-list, the target is what it was.
    let off = with_confine(&plain, confined(FsMode::WorkspaceWrite));
    assert!(
        off.match_target()
            .unwrap()
            .as_str()
            .contains(r#""network":"off","scoped""#)
    );
}

#[test]
fn require_confinement_accepts_an_allow_list_only_within_the_policys_grant() {
    let plain = git(&["fetch"]);
    let run_with = |policy: &str, hosts: &[&str]| {
        let c = config(&format!(
            "{ALLOW_ALL}\nrequire_confinement = \"workspace-write\"\n{policy}"
        ));
        run(
            &c,
            &with_confine(&plain, allowing(hosts)),
            Provenance::Trusted,
            &[],
        )
    };
    // No grant: no allow-list satisfies the requirement.
    let d = run_with("", &["pypi.org"]);
    assert_eq!(d.verdict, Verdict::Deny);
    assert!(
        matches!(d.reason, Reason::ConfinementRequired { .. }),
        "{d:?}"
    );
    let grant = "allow_hosts = [\"pypi.org\", \"*.crates.io\"]\n";
    for hosts in [&["pypi.org"][..], &["static.crates.io", "pypi.org:443"]] {
        assert_eq!(run_with(grant, hosts).verdict, Verdict::Allow, "{hosts:?}");
    }
    for hosts in [
        &["evil.test"][..],
        &["pypi.org", "evil.test"],
        &["pypi.org:8080"],
        &["crates.io"],
    ] {
        assert_eq!(run_with(grant, hosts).verdict, Verdict::Deny, "{hosts:?}");
    }
}

#[test]
fn a_rule_with_allow_hosts_applies_only_to_allow_lists_it_covers() {
    let c = config(
        r#"
[tools]
allow = ["process.run"]

[policy]
default_decision = "deny"
untrusted_shell_requires_approval = false

[[policy.rules]]
tool = "process.run"
decision = "allow"
confinement = "workspace-write"
allow_hosts = ["*.allowed.test:8080"]
"#,
    );
    let plain = git(&["fetch"]);
    let verdict =
        |t: ConfineTarget| run(&c, &with_confine(&plain, t), Provenance::Trusted, &[]).verdict;
    assert_eq!(verdict(allowing(&["a.allowed.test:8080"])), Verdict::Allow);
    assert_eq!(verdict(confined(FsMode::WorkspaceWrite)), Verdict::Allow);
    assert_eq!(verdict(allowing(&["allowed.test:8080"])), Verdict::Deny);
    assert_eq!(verdict(allowing(&["a.allowed.test"])), Verdict::Deny);
}

#[test]
fn bad_allow_hosts_in_the_policy_file_are_refused_where_they_are() {
    let bad = PolicyConfig::from_toml_str("version = 1\n[policy]\nallow_hosts = [\"a..b\"]\n");
    assert!(
        matches!(bad, Err(PolicyConfigError::InvalidHost { ref at, .. }) if at == "policy.allow_hosts"),
        "{bad:?}"
    );
    let unanchored = PolicyConfig::from_toml_str(
        "version = 1\n[[policy.rules]]\ntool = \"process.run\"\ndecision = \"allow\"\nallow_hosts = [\"a.test\"]\n",
    );
    assert!(
        matches!(unanchored, Err(PolicyConfigError::AllowHostsWithoutConfinement { ref at }) if at == "policy.rules[0]"),
        "{unanchored:?}"
    );
    let in_rule = PolicyConfig::from_toml_str(
        "version = 1\n[[policy.rules]]\ntool = \"process.run\"\ndecision = \"allow\"\nconfinement = \"read-only\"\nallow_hosts = [\"[::1]:80\"]\n",
    );
    assert!(
        matches!(in_rule, Err(PolicyConfigError::InvalidHost { ref at, .. }) if at == "policy.rules[0].allow_hosts"),
        "{in_rule:?}"
    );
}

#[test]
fn the_active_profiles_hosts_join_the_policys_grant_and_an_inactive_ones_do_not() {
    let plain = git(&["fetch"]);
    let decide_with = |profile: &str| {
        let c = config(&format!(
            "[tools]\nallow = [\"process.run\"]\nprofile = \"{profile}\"\n\
             [tools.profiles.build]\nallow = [\"process.run\"]\nallow_hosts = [\"pypi.org\"]\n\
             [tools.profiles.review]\nallow = [\"process.run\"]\n\
             [policy]\ndefault_decision = \"allow\"\nrequire_confinement = \"workspace-write\"\n"
        ));
        run(
            &c,
            &with_confine(&plain, allowing(&["pypi.org"])),
            Provenance::Trusted,
            &[],
        )
        .verdict
    };
    assert_eq!(decide_with("build"), Verdict::Allow);
    assert_eq!(decide_with("review"), Verdict::Deny);
    let bad =
        PolicyConfig::from_toml_str("version = 1\n[tools.profiles.p]\nallow_hosts = [\"*\"]\n");
    assert!(
        matches!(bad, Err(PolicyConfigError::InvalidHost { ref at, .. }) if at == "tools.profiles.p.allow_hosts"),
        "{bad:?}"
    );
}

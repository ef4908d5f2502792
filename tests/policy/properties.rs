//! Property tests of the match-target serializer and overrides.

use custodian::policy::target::{MAX_PREFIX_BYTES, TRUNCATION_MARKER};
use custodian::policy::{MAX_TARGET_BYTES, MatchTarget, Pattern, ProcessTarget, TargetEnvValue};
use proptest::prelude::*;
use serde_json::{Value, json};

/// Strings over a small alphabet full of structural characters, so that
/// near-collisions (`["a b"]` vs `["a","b"]`, `a","b`) are generated often.
fn tricky() -> impl Strategy<Value = String> {
    proptest::string::string_regex(r#"[ab ,"\\*\[\]{}:=\n\u{202e}é]{0,6}"#).unwrap()
}

fn env_value() -> impl Strategy<Value = TargetEnvValue> {
    prop_oneof![
        tricky().prop_map(TargetEnvValue::Literal),
        tricky()
            .prop_filter("non-empty", |s| !s.is_empty())
            .prop_map(TargetEnvValue::SecretRef),
    ]
}

fn env_key() -> impl Strategy<Value = String> {
    proptest::string::string_regex(r#"[aAbB_,"\\*é]{1,4}"#).unwrap()
}

prop_compose! {
    fn invocation()(
        executable in tricky().prop_filter("names a file", |s| {
            custodian::policy::target::check_executable(s).is_ok()
        }),
        argv in proptest::collection::vec(tricky(), 0..4),
        cwd in proptest::option::of(proptest::string::string_regex(r"[ab]{1,2}(/[ab]{1,2}){0,2}").unwrap()),
        env in proptest::collection::btree_map(env_key(), env_value(), 0..4),
    ) -> ProcessTarget {
        ProcessTarget { executable, argv, cwd, env_overlay: env.into_iter().collect(), confine: None }
    }
}

/// Decodes a non-truncated target back into an invocation.
fn decode(target: &MatchTarget) -> ProcessTarget {
    let v: Value = serde_json::from_str(target.as_str()).expect("a target is valid JSON");
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 4);
    let s = |v: &Value| v.as_str().unwrap().to_owned();
    let env_overlay = v["env"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            let value = match v {
                Value::String(l) => TargetEnvValue::Literal(l.clone()),
                Value::Object(o) => TargetEnvValue::SecretRef(s(&o["secret_ref"])),
                other => panic!("unexpected overlay value {other}"),
            };
            (k.clone(), value)
        })
        .collect();
    ProcessTarget {
        executable: s(&v["executable"]),
        argv: v["argv"].as_array().unwrap().iter().map(s).collect(),
        cwd: Some(s(&v["cwd"])),
        env_overlay,
        confine: None,
    }
}

fn canonical(p: &ProcessTarget) -> ProcessTarget {
    let c = p.canonicalize().unwrap();
    ProcessTarget {
        executable: c.executable,
        argv: c.argv,
        cwd: Some(c.cwd),
        env_overlay: c.env_overlay,
        confine: None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn serialization_is_deterministic_and_overlay_order_free(p in invocation(), seed in any::<u64>()) {
        let a = p.match_target().unwrap();
        let mut shuffled = p.clone();
        // A deterministic permutation driven by the seed.
        let n = shuffled.env_overlay.len();
        if n > 1 {
            shuffled.env_overlay.rotate_left((seed as usize) % n);
            if seed & 1 == 1 { shuffled.env_overlay.reverse(); }
        }
        prop_assert_eq!(&a, &p.match_target().unwrap());
        prop_assert_eq!(&a, &shuffled.match_target().unwrap());
    }

    #[test]
    fn target_decodes_to_the_canonical_invocation(p in invocation()) {
        // Decoding recovers every field, so no two distinct invocations can
        // share a target: the serialization is injective.
        let t = p.match_target().unwrap();
        prop_assert!(!t.is_truncated());
        prop_assert_eq!(decode(&t), canonical(&p));
    }

    #[test]
    fn targets_are_equal_exactly_when_invocations_are(a in invocation(), b in invocation()) {
        let same = canonical(&a) == canonical(&b);
        prop_assert_eq!(same, a.match_target().unwrap() == b.match_target().unwrap());
    }

    #[test]
    fn joining_two_arguments_changes_the_target(
        p in invocation().prop_filter("two args", |p| p.argv.len() >= 2),
        sep in prop_oneof![Just(""), Just(" "), Just("\",\""), Just(",")],
    ) {
        let mut joined = p.clone();
        let second = joined.argv.remove(1);
        joined.argv[0] = format!("{}{sep}{second}", joined.argv[0]);
        prop_assert_ne!(p.match_target().unwrap(), joined.match_target().unwrap());
    }

    #[test]
    fn changing_one_overlay_entry_changes_the_target(
        p in invocation().prop_filter("env", |p| !p.env_overlay.is_empty()),
        i in any::<prop::sample::Index>(),
        v in env_value(),
    ) {
        let i = i.index(p.env_overlay.len());
        let mut q = p.clone();
        prop_assume!(q.env_overlay[i].1 != v);
        q.env_overlay[i].1 = v;
        prop_assert_ne!(p.match_target().unwrap(), q.match_target().unwrap());
        let mut r = p.clone();
        r.env_overlay.remove(i);
        prop_assert_ne!(p.match_target().unwrap(), r.match_target().unwrap());
    }

    #[test]
    fn generated_override_matches_only_its_own_target(a in invocation(), b in invocation()) {
        let ta = a.match_target().unwrap();
        let o = Pattern::exact(&ta);
        prop_assert!(o.is_exact());
        prop_assert!(!ta.as_str().contains('*'));
        prop_assert!(o.matches(&ta));
        let tb = b.match_target().unwrap();
        prop_assert_eq!(o.matches(&tb), ta == tb);
    }
}

fn big_arg() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::string::string_regex(r#"[a"\\*é😀]{0,64}"#).unwrap(),
        (
            1usize..3000,
            proptest::string::string_regex(r#"[a"\\*é😀\n]"#).unwrap()
        )
            .prop_map(|(n, c)| c.repeat(n)),
    ]
}

prop_compose! {
    fn large_invocation()(
        argv in proptest::collection::vec(big_arg(), 0..6),
        value in big_arg(),
    ) -> ProcessTarget {
        ProcessTarget {
            executable: "x".into(),
            argv,
            cwd: None,
            env_overlay: vec![("V".into(), TargetEnvValue::Literal(value))], confine: None }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn length_is_bounded_and_prefix_kept(p in large_invocation()) {
        let full = p.canonicalize().unwrap().serialize_full();
        let t = p.match_target().unwrap();
        prop_assert!(t.as_str().len() <= MAX_TARGET_BYTES);
        prop_assert_eq!(t.is_truncated(), full.len() > MAX_TARGET_BYTES);
        if t.is_truncated() {
            let suffix = TRUNCATION_MARKER.len() + 64;
            let prefix = &t.as_str()[..t.as_str().len() - suffix];
            prop_assert!(prefix.len() + 3 >= MAX_PREFIX_BYTES);
            prop_assert!(full.starts_with(prefix));
            prop_assert!(t.as_str()[prefix.len()..].starts_with(TRUNCATION_MARKER));
        } else {
            prop_assert_eq!(t.as_str(), full.as_str());
        }
    }

    #[test]
    fn suffix_changes_when_anything_beyond_the_prefix_changes(
        p in large_invocation(),
        tail in proptest::collection::vec(big_arg(), 1..3),
        change in big_arg(),
    ) {
        // Push the serialization past the bound, then change only what lies
        // beyond the readable prefix: the last argument or the overlay value.
        let mut a = p.clone();
        a.argv.push("a".repeat(MAX_TARGET_BYTES));
        a.argv.extend(tail);
        let ta = a.match_target().unwrap();
        prop_assert!(ta.is_truncated());
        let mut changed_arg = a.clone();
        changed_arg.argv.last_mut().unwrap().push_str(&format!("{change}!"));
        let mut changed_env = a.clone();
        changed_env.env_overlay[0].1 = TargetEnvValue::SecretRef(format!("{change}!"));
        let suffix = TRUNCATION_MARKER.len() + 64;
        let prefix = |t: &MatchTarget| t.as_str()[..t.as_str().len() - suffix].to_owned();
        for other in [changed_arg, changed_env] {
            let to = other.match_target().unwrap();
            prop_assert!(to.is_truncated());
            prop_assert_eq!(prefix(&ta), prefix(&to));
            prop_assert_ne!(&ta, &to);
        }
    }
}

#[test]
fn decoded_target_matches_a_known_shape() {
    let p = ProcessTarget {
        executable: "a\"b".into(),
        argv: vec!["*".into()],
        cwd: None,
        env_overlay: vec![("K".into(), TargetEnvValue::SecretRef("r".into()))],
        confine: None,
    };
    let v: Value = serde_json::from_str(p.match_target().unwrap().as_str()).unwrap();
    assert_eq!(
        v,
        json!({"executable": "a\"b", "argv": ["*"], "cwd": ".", "env": {"K": {"secret_ref": "r"}}})
    );
}

mod explain_equals_run {
    //! `custodian policy explain` decides over the raw command-line parts
    //! (`decide` on a [`ProcessTarget`]); `custodian run`, the library's
    //! governed launch and the node validate an [`Invocation`] first and
    //! decide over it. Both must reach the same decision.

    use custodian::policy::{
        Context, Decision, PolicyConfig, ProcessTarget, Provenance, Query, Reason, Registry,
        StateMode, TargetEnvValue, Verdict, decide,
    };
    use custodian::process::governed::{Gate, decide_invocation};
    use custodian::process::invocation::{EnvValue as ProcEnv, SecretRef};
    use custodian::process::{Invocation, InvocationSpec};
    use proptest::prelude::*;

    const POLICY: &str = r#"
version = 1
[tools]
allow = ["process.run"]
[policy]
default_decision = "require_approval"
overrides = ['{"executable":"git","argv":["status"],"cwd":"a/b","env":{}}']
[[policy.rules]]
tool = "process.run"
decision = "deny"
target = '*"cwd":"b",*'
[[policy.rules]]
tool = "process.run"
decision = "allow"
target = '{"executable":"x",*'
"#;

    fn cwd() -> impl Strategy<Value = Option<String>> {
        proptest::option::of(prop_oneof![
            prop::sample::select(vec![
                "", ".", "a\\b", "a/b", "sub/..", "C:x", "c:", "/x", "\\x", "a/../..", "..",
                "a//b/", "./a", "a/./../b", "a\\..\\b", "a/b\\..", "b", "\0",
            ])
            .prop_map(str::to_owned),
            proptest::string::string_regex(r"[ab.\\/:C]{0,7}").unwrap(),
        ])
    }

    fn executable() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "x", "git", ".", "..", "bin/", "a\\", "a/..", "", "a\0"
            ])
            .prop_map(str::to_owned),
            proptest::string::string_regex(r"[ax./\\]{1,4}").unwrap(),
        ]
    }

    fn arg() -> impl Strategy<Value = String> {
        prop_oneof![
            8 => proptest::string::string_regex(r#"[a "*\\]{0,4}"#).unwrap(),
            1 => Just("a\0".to_owned()),
            1 => Just("status".to_owned()),
        ]
    }

    fn env() -> impl Strategy<Value = Vec<(String, TargetEnvValue)>> {
        let key = prop::sample::select(vec!["A", "B", "", "A=B", "K\0"]).prop_map(str::to_owned);
        let value = prop_oneof![
            proptest::string::string_regex("[v\0]{0,2}")
                .unwrap()
                .prop_map(TargetEnvValue::Literal),
            prop::sample::select(vec!["ref", "vault:x"])
                .prop_map(|r| TargetEnvValue::SecretRef(r.to_owned())),
        ];
        proptest::collection::vec((key, value), 0..3)
    }

    fn explain(p: &ProcessTarget, config: &PolicyConfig, provenance: Provenance) -> Decision {
        decide(
            &Registry::new(),
            config,
            &Query {
                tool: "process.run",
                process: Some(p),
                context: Context {
                    provenance,
                    state_mode: StateMode::Local,
                },
                approvals: &[],
            },
        )
    }

    /// `None` when validation refuses the invocation (nothing runs).
    fn run(p: &ProcessTarget, config: &PolicyConfig, provenance: Provenance) -> Option<Decision> {
        let mut spec = InvocationSpec::new(p.executable.clone()).with_args(p.argv.clone());
        if let Some(c) = &p.cwd {
            spec = spec.with_cwd(c.clone());
        }
        for (k, v) in &p.env_overlay {
            let v = match v {
                TargetEnvValue::Literal(l) => ProcEnv::Literal(l.clone()),
                TargetEnvValue::SecretRef(r) => ProcEnv::Secret(SecretRef::new(r.clone())),
                _ => unreachable!(),
            };
            spec = spec.with_env(k.clone(), v);
        }
        let invocation = Invocation::validate(spec).ok()?;
        let registry = Registry::new();
        let gate = Gate {
            registry: &registry,
            config,
            context: Context {
                provenance,
                state_mode: StateMode::Local,
            },
            approvals: &[],
        };
        Some(decide_invocation(&invocation, &gate))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

        #[test]
        fn explain_decides_as_run_does(
            executable in executable(),
            argv in proptest::collection::vec(arg(), 0..3),
            cwd in cwd(),
            env_overlay in env(),
            trusted in any::<bool>(),
        ) {
            let config = PolicyConfig::from_toml_str(POLICY).unwrap();
            let provenance = if trusted { Provenance::Trusted } else { Provenance::Untrusted };
            let p = ProcessTarget { executable, argv, cwd, env_overlay, confine: None };
            let explained = explain(&p, &config, provenance);
            match run(&p, &config, provenance) {
                Some(ran) => {
                    prop_assert_eq!(&explained.verdict, &ran.verdict);
                    prop_assert_eq!(&explained.reason, &ran.reason);
                    prop_assert_eq!(&explained.target, &ran.target);
                    prop_assert_eq!(
                        explained.target.as_ref().map(|t| t.full_text().to_owned()),
                        ran.target.as_ref().map(|t| t.full_text().to_owned())
                    );
                    prop_assert_eq!(&explained.suggested_override, &ran.suggested_override);
                }
                // The launcher refuses it: explain must not predict a run.
                None => {
                    prop_assert_eq!(explained.verdict, Verdict::Deny);
                    prop_assert!(
                        matches!(explained.reason, Reason::MalformedTarget { .. }),
                        "{:?}", explained.reason
                    );
                }
            }
        }
    }
}

mod toml_round_trip {
    //! A suggested override printed as a TOML literal string loads back as
    //! exactly the same exact override.

    use custodian::policy::{
        Context, Pattern, PolicyConfig, ProcessTarget, Provenance, Query, Reason, Registry,
        StateMode, TargetEnvValue, Verdict, decide,
    };
    use proptest::prelude::*;

    fn hostile() -> impl Strategy<Value = String> {
        proptest::string::string_regex(
            "[a'\"\\\\*\t\n ,\\[\\]{}=\u{202e}\u{e0061}\u{a0}é]{0,6}|\\\\u002a|''' |\\\\",
        )
        .unwrap()
    }

    prop_compose! {
        fn invocation()(
            executable in hostile().prop_filter("names a file", |s| {
                custodian::policy::target::check_executable(s).is_ok()
            }),
            argv in proptest::collection::vec(hostile(), 0..4),
            value in hostile(),
        ) -> ProcessTarget {
            ProcessTarget {
                executable,
                argv,
                cwd: None,
                env_overlay: vec![("K".into(), TargetEnvValue::Literal(value))], confine: None }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn suggested_override_round_trips_through_a_toml_literal(p in invocation()) {
            let target = p.match_target().unwrap();
            let exact = Pattern::exact(&target);
            let line = exact.toml_literal().expect("a generated override fits a literal string");
            let text = format!(
                "version = 1\n[tools]\nallow = [\"process.run\"]\n[policy]\noverrides = [{line}]\n"
            );
            let config = PolicyConfig::from_toml_str(&text).unwrap();
            prop_assert!(config.warnings().is_empty(), "{:?}", config.warnings());
            prop_assert_eq!(config.policy.overrides[0].as_str(), exact.as_str());
            prop_assert!(config.policy.overrides[0].is_exact());
            let d = decide(
                &Registry::new(),
                &config,
                &Query {
                    tool: "process.run",
                    process: Some(&p),
                    context: Context { provenance: Provenance::Untrusted, state_mode: StateMode::Local },
                    approvals: &[],
                },
            );
            prop_assert_eq!(d.verdict, Verdict::Allow);
            let exact_override = matches!(d.reason, Reason::Override { exact: true, .. });
            prop_assert!(exact_override);
        }
    }
}

//! A decision depends on the whole invocation, never on how its target is
//! abbreviated for display: padding the argument list can never turn a deny
//! into allow or require_approval.

use custodian::policy::{
    Context, MAX_TARGET_BYTES, Pattern, PolicyConfig, ProcessTarget, Provenance, Query, Registry,
    StateMode, TargetEnvValue, Verdict, decide,
};
use custodian::process::governed::{Gate, decide_invocation};
use custodian::process::invocation::{EnvValue as ProcEnv, MAX_ARGS, MAX_ARGV_BYTES};
use custodian::process::{Invocation, InvocationSpec};
use proptest::prelude::*;

/// Denies an overlay key, a cwd, an executable and an argv prefix; allows
/// everything else, and pre-approves everything with a catch-all override,
/// so only a deny rule can refuse.
const POLICY: &str = r#"
version = 1
[tools]
allow = ["process.run"]
[policy]
default_decision = "allow"
untrusted_shell_requires_approval = true
overrides = ['*']
[[policy.rules]]
tool = "process.run"
decision = "deny"
target = '*,"env":{*"LD_PRELOAD":*'
[[policy.rules]]
tool = "process.run"
decision = "deny"
target = '*,"cwd":"secret","env":{*'
[[policy.rules]]
tool = "process.run"
decision = "deny"
target = '{"executable":"rm",*'
[[policy.rules]]
tool = "process.run"
decision = "deny"
target = '{"executable":"git","argv":["push"*'
"#;

fn config() -> PolicyConfig {
    PolicyConfig::from_toml_str(POLICY).unwrap()
}

fn context(provenance: Provenance) -> Context {
    Context {
        provenance,
        state_mode: StateMode::Local,
    }
}

/// Decides the way `custodian run` and the node do: validate, then decide
/// over the validated invocation. `None` when validation refuses it (then
/// nothing can run either).
fn run_verdict(
    spec: InvocationSpec,
    config: &PolicyConfig,
    approvals: &[Pattern],
) -> Option<Verdict> {
    let invocation = Invocation::validate(spec).ok()?;
    let registry = Registry::new();
    let gate = Gate {
        registry: &registry,
        config,
        context: context(Provenance::Untrusted),
        approvals,
    };
    Some(decide_invocation(&invocation, &gate).verdict)
}

/// The two denied shapes, padded with one argument of `len` copies of `c`.
fn padded_specs(c: char, len: usize) -> [InvocationSpec; 2] {
    let pad: String = std::iter::repeat_n(c, len).collect();
    [
        InvocationSpec::new("x")
            .with_args([pad.clone()])
            .with_env("LD_PRELOAD", ProcEnv::Literal("/tmp/e.so".into())),
        InvocationSpec::new("x").with_args([pad]).with_cwd("secret"),
    ]
}

fn assert_denied_at(c: char, len: usize, config: &PolicyConfig, star: &[Pattern]) {
    for spec in padded_specs(c, len) {
        assert_eq!(
            run_verdict(spec, config, star),
            Some(Verdict::Deny),
            "padding {len} x {c:?}"
        );
    }
}

#[test]
fn deny_on_an_env_key_or_a_cwd_holds_at_every_argument_length() {
    let config = config();
    let star = [Pattern::parse("*").unwrap()];
    // Every length until the serialization is twice the display bound (the padding character's escaped width varies: `*` takes six
    // bytes, `é` two)...
    for (c, width) in [('a', 1), ('é', 2), ('*', 6)] {
        for len in 0..=2 * MAX_TARGET_BYTES / width {
            assert_denied_at(c, len, &config, &star);
        }
    }
    // ...then a stride, the powers of two around it, and the argv limit
    // itself (the executable `x` takes one byte of it).
    let limit = MAX_ARGV_BYTES - 1;
    let mut lengths: Vec<usize> = (2 * MAX_TARGET_BYTES..limit).step_by(65_521).collect();
    for shift in 12..=20 {
        let p = 1usize << shift;
        lengths.extend([p - 1, p, p + 1].into_iter().filter(|&n| n <= limit));
    }
    lengths.push(limit);
    for len in lengths {
        assert_denied_at('a', len, &config, &star);
    }
    // One byte more and nothing is launched at all.
    for spec in padded_specs('a', limit + 1) {
        assert_eq!(run_verdict(spec, &config, &star), None);
    }
}

#[test]
fn deny_holds_for_any_number_of_short_arguments() {
    let config = config();
    let star = [Pattern::parse("*").unwrap()];
    let spec = |n: usize, secret_cwd: bool| {
        let s = InvocationSpec::new("x").with_args(std::iter::repeat_n("ab".to_owned(), n));
        if secret_cwd {
            s.with_cwd("secret")
        } else {
            s.with_env("LD_PRELOAD", ProcEnv::Literal("/tmp/e.so".into()))
        }
    };
    let mut counts: Vec<usize> = (0..=2048).collect();
    counts.extend((2048..MAX_ARGS).step_by(1021));
    counts.push(MAX_ARGS);
    for n in counts {
        for cwd in [false, true] {
            assert_eq!(
                run_verdict(spec(n, cwd), &config, &star),
                Some(Verdict::Deny),
                "{n} arguments, secret cwd: {cwd}"
            );
        }
    }
}

fn short() -> impl Strategy<Value = String> {
    proptest::string::string_regex(r#"[a-z"\\*é ,\]\[]{0,8}"#).unwrap()
}

fn padding_arg() -> impl Strategy<Value = String> {
    prop_oneof![
        short(),
        (
            1usize..6000,
            proptest::string::string_regex(r#"[a"\\*é\n]"#).unwrap()
        )
            .prop_map(|(n, c)| c.repeat(n)),
    ]
}

prop_compose! {
    fn invocation()(
        executable in prop::sample::select(vec!["git", "rm", "x", "cargo"]),
        argv in proptest::collection::vec(
            prop_oneof![Just("push".to_owned()), Just("status".to_owned()), short()],
            0..4,
        ),
        cwd in proptest::option::of(prop::sample::select(vec!["secret", "a", "a/b", "src"])),
        env in proptest::collection::btree_map(
            prop::sample::select(vec!["LD_PRELOAD", "PATH", "K"]),
            short().prop_map(TargetEnvValue::Literal),
            0..3,
        ),
    ) -> ProcessTarget {
        ProcessTarget {
            executable: executable.to_owned(),
            argv,
            cwd: cwd.map(str::to_owned),
            env_overlay: env.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(), confine: None }
    }
}

fn verdict(
    config: &PolicyConfig,
    p: &ProcessTarget,
    provenance: Provenance,
    approvals: &[Pattern],
) -> Verdict {
    decide(
        &Registry::new(),
        config,
        &Query {
            tool: "process.run",
            process: Some(p),
            context: context(provenance),
            approvals,
        },
    )
    .verdict
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn padding_never_turns_a_deny_into_anything_else(
        p in invocation(),
        padding in proptest::collection::vec(padding_arg(), 1..40),
        trusted in any::<bool>(),
        approval_kind in 0u8..4,
    ) {
        let config = config();
        let provenance = if trusted { Provenance::Trusted } else { Provenance::Untrusted };
        prop_assume!(verdict(&config, &p, provenance, &[]) == Verdict::Deny);
        let mut padded = p.clone();
        padded.argv.extend(padding);
        let target = padded.match_target().unwrap();
        // Whatever the caller holds: nothing, a catch-all, or the exact
        // override of the padded invocation in either form.
        let approvals = match approval_kind {
            0 => vec![],
            1 => vec![Pattern::parse("*").unwrap()],
            2 => vec![Pattern::exact(&target)],
            _ => vec![Pattern::parse(target.full_text()).unwrap_or_else(|_| Pattern::exact(&target))],
        };
        prop_assert_eq!(verdict(&config, &padded, provenance, &approvals), Verdict::Deny);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Between the exhaustive sweep's points: uniformly random lengths up to
    /// the argv limit, with a padding character of any escaped width.
    #[test]
    fn deny_holds_at_random_lengths_up_to_the_argv_limit(
        len in 0..MAX_ARGV_BYTES,
        c in prop::sample::select(vec!['a', 'é', '*', '"', '😀']),
    ) {
        let config = config();
        let star = [Pattern::parse("*").unwrap()];
        // The executable `x` takes one byte of the limit.
        let fits = len * c.len_utf8() < MAX_ARGV_BYTES;
        for spec in padded_specs(c, len) {
            let verdict = run_verdict(spec, &config, &star);
            prop_assert_eq!(verdict, fits.then_some(Verdict::Deny));
        }
    }
}

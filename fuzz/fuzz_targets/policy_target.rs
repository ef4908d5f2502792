//! Fuzzes the `process.run` match-target serializer and override matching.
//!
//! Oracle after every input: no panic; a malformed invocation has no target;
//! a target is at most `MAX_TARGET_BYTES`, never contains a raw `*`, is the
//! same for any overlay order, is matched by its own exact override, and, when
//! not truncated, is the full serialization of the canonical invocation.
#![no_main]

use arbitrary::Arbitrary;
use custodian::policy::{MAX_TARGET_BYTES, Pattern, ProcessTarget, TargetEnvValue};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Value {
    Literal(String),
    Secret(String),
}

#[derive(Arbitrary, Debug)]
struct Input {
    executable: String,
    argv: Vec<String>,
    cwd: Option<String>,
    env: Vec<(String, Value)>,
    pattern: String,
}

fuzz_target!(|input: Input| {
    let target = ProcessTarget {
        executable: input.executable,
        argv: input.argv,
        cwd: input.cwd,
        env_overlay: input
            .env
            .into_iter()
            .map(|(k, v)| match v {
                Value::Literal(l) => (k, TargetEnvValue::Literal(l)),
                Value::Secret(r) => (k, TargetEnvValue::SecretRef(r)),
            })
            .collect(),
        confine: None,
    };
    let result = target.match_target();
    let canonical = target.canonicalize();
    assert_eq!(result.is_ok(), canonical.is_ok());
    let Ok(t) = result else { return };
    let canonical = canonical.unwrap();
    assert!(t.as_str().len() <= MAX_TARGET_BYTES);
    assert!(!t.as_str().contains('*'));
    let mut reversed = target.clone();
    reversed.env_overlay.reverse();
    assert_eq!(reversed.match_target().unwrap(), t);
    let exact = Pattern::exact(&t);
    assert!(exact.is_exact() && exact.matches(&t));
    // Rules match the full serialization; the override always fits a TOML
    // literal string.
    assert_eq!(t.full_text(), canonical.serialize_full());
    assert!(exact.toml_literal().is_some());
    if t.is_truncated() {
        assert!(canonical.serialize_full().len() > MAX_TARGET_BYTES);
    } else {
        // JSON decoding is checked by the proptest suite (tests/policy); here
        // the shape and the full serialization must agree.
        assert_eq!(t.as_str(), canonical.serialize_full());
        assert!(t.as_str().starts_with("{\"executable\":\"") && t.as_str().ends_with("}}"));
    }
    if let Ok(p) = Pattern::parse(&input.pattern) {
        // Any pattern terminates and agrees with itself.
        assert_eq!(p.matches(&t), p.matches(&t));
    }
});
